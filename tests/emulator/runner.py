"""Build CUDA / Metal kernel sources with g++ against the emulator shims and launch them on the CPU.

CUDA::

    mod = compile_cuda("kernels/merge.cu")              # or the source text itself
    mod.launch("merge_pairs", grid=(64,), block=(256,), args=[ids, np.uint32(n), ("u64", seed)])

Metal kernels (``mx.fast.metal_kernel``'s wrapping) are in ``metal.py`` and build with
``_build`` here.

Every launch runs all blocks (threadgroups) on the calling thread, one fiber per GPU thread; see
fiber_runtime.h for the model and README.md for what it does and does not prove.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import subprocess
import threading
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
CUDA_SHIM = HERE / "cuda_shim.h"
METAL_SHIM = HERE / "metal_shim.h"
STUB_INCLUDE = HERE / "include"

ORDERS = ("forward", "reverse", "shuffle")
DEFAULT_STACK = 64 * 1024
DEFAULT_SPIN_LIMIT = 50_000_000
POISON = 0xCD

# option slots, as in fiber_runtime.h
_OPT_ORDER, _OPT_SEED, _OPT_SHARED, _OPT_YIELD, _OPT_EXITED, _OPT_STACK, _OPT_FILL, _OPT_SPIN, \
    _OPT_MAXT, _OPT_COUNT = range(10)

_HEADER_EXTS = (".h", ".hh", ".hpp", ".cuh", ".inc", ".inl", ".metal")
_BASE_FLAGS = ["-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
               "-fno-strict-aliasing", "-fstack-clash-protection", "-w"]


class EmulatorError(RuntimeError):
    """Base class of the emulator's errors."""


class CompileError(EmulatorError):
    """g++ rejected the kernel source (the message holds the command and the compiler output)."""


class KernelError(EmulatorError):
    """A launch failed: divergent barrier, deadlock, bad memory access, assert, trap, ..."""


# ------------------------------------------------------------------------------------ building

def cache_dir() -> Path:
    """``$GPUTOK_EMU_CACHE``, else ``~/.cache/gputok/emulator`` (else a temp dir)."""
    env = os.environ.get("GPUTOK_EMU_CACHE")
    candidates = [Path(env)] if env else []
    candidates += [Path.home() / ".cache" / "gputok" / "emulator",
                   Path(tempfile.gettempdir()) / f"gputok-emulator-{os.getuid()}"]
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise EmulatorError("no writable cache directory for the kernel emulator")


def _compiler() -> str:
    return os.environ.get("GPUTOK_EMU_CXX") or os.environ.get("CXX") or "g++"


@functools.lru_cache(maxsize=None)
def _compiler_id(cxx: str) -> str:
    try:
        r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"C++ compiler {cxx!r} cannot be run: {e}") from None
    return r.stdout.splitlines()[0] if r.stdout else cxx


def _shim_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(HERE.glob("*.h")) + sorted(STUB_INCLUDE.glob("*.h")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _headers_digest(dirs: Iterable[Path], max_depth: int = 2, max_files: int = 2000) -> str:
    """Contents of the headers under the include directories, up to ``max_depth`` levels deep,
    by relative name (so the same sources in another checkout or temp dir share cache entries).
    """
    h = hashlib.sha256()
    for d in dirs:
        if not d.is_dir():
            continue
        found: list[Path] = []
        for root, subdirs, files in os.walk(d, onerror=lambda e: None):
            rel = Path(root).relative_to(d)
            subdirs[:] = sorted(x for x in subdirs if not x.startswith(".")) \
                if len(rel.parts) < max_depth else []
            found += [Path(root) / f for f in files if Path(f).suffix in _HEADER_EXTS]
            if len(found) > max_files:
                break
        for p in sorted(found)[:max_files]:
            try:
                data = p.read_bytes()
            except OSError:
                continue
            h.update(str(p.relative_to(d)).encode())
            h.update(data)
    return h.hexdigest()


def _define_flags(defines: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    if not defines:
        return []
    if isinstance(defines, Mapping):
        out = []
        for k, v in defines.items():
            out.append(f"-D{k}" if v is None or v is True else f"-D{k}={v}")
        return out
    return [d if d.startswith("-D") else f"-D{d}" for d in defines]


_loaded: dict[str, ctypes.CDLL] = {}


def _build(tu: str, shim: Path, include_dirs: Sequence[Path], flags: Sequence[str],
           label: str) -> ctypes.CDLL:
    """Compile ``tu`` (force-including ``shim``) into a cached shared library and load it."""
    cxx = _compiler()
    inc = [str(STUB_INCLUDE)] + [str(d) for d in include_dirs]
    cmd_flags = list(_BASE_FLAGS) + list(flags) + ["-include", str(shim)] + \
        [f"-I{d}" for d in inc]
    # the key leaves out the -I paths themselves: the headers' contents stand for them
    h = hashlib.sha256()
    for part in (tu, _shim_digest(), _compiler_id(cxx), cxx, "\0".join(_BASE_FLAGS + list(flags)),
                 _headers_digest(Path(d) for d in include_dirs)):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()[:32]
    lib = _loaded.get(key)
    if lib is not None:
        return lib
    d = cache_dir()
    so = d / f"{key}.so"
    if not so.exists():
        # unique names while building, so concurrent test processes (and threads: emulated
        # GPUs of one job each build their kernels) never see half a file
        tag = f"{os.getpid()}.{threading.get_ident()}"
        src = d / f"{key}.{tag}.tmp.cpp"
        src.write_text(tu)
        tmp = d / f"{key}.{tag}.tmp.so"
        cmd = [cxx] + cmd_flags + ["-o", str(tmp), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        os.replace(src, d / f"{key}.cpp")  # kept next to the library for debugging
        if r.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise CompileError(f"compiling {label} for the kernel emulator failed "
                               f"(generated source: {d / f'{key}.cpp'}):\n"
                               f"{r.stderr.strip()}\n$ {' '.join(cmd)}")
        os.replace(tmp, so)
    lib = ctypes.CDLL(str(so))
    lib.gpuemu_last_error.restype = ctypes.c_char_p
    lib.gpuemu_barriers_released.restype = ctypes.c_ulonglong
    _loaded[key] = lib
    return lib


# ------------------------------------------------------------------------------------ parsing

_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_comments(text: str) -> str:
    """Blank out comments (keeping newlines, so offsets and line numbers stay valid)."""
    def blank(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r"[^\n]", " ", s)
        return s
    return _TOKEN.sub(blank, text)


_GLOBAL = re.compile(
    r"\b__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")


def find_kernels(text: str) -> list[str]:
    """Names of the non-template ``__global__`` functions defined or declared in ``text``."""
    code = strip_comments(text)
    names: list[str] = []
    for m in _GLOBAL.finditer(code):
        before = code[:m.start()]
        cut = max(before.rfind(";"), before.rfind("}"), before.rfind("{"), before.rfind("#"))
        head = before[cut + 1:]
        if cut >= 0 and code[cut] == "#":  # a preprocessor line right before: look past it
            nl = code.find("\n", cut)
            head = code[nl + 1:m.start()] if nl >= 0 else ""
        if re.search(r"\btemplate\b", head):
            continue
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


_ALIGN = r"(?:__align__|alignas)\s*\((?:[^()]|\([^()]*\))*\)"
_EXTERN_SHARED = re.compile(
    r"\bextern\s+((?:" + _ALIGN + r"\s*)*)__shared__\s+((?:" + _ALIGN + r"\s*)*)"
    r"([^;\[\]{}()]+?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")


def rewrite_extern_shared(text: str) -> str:
    """``extern __shared__ T name[];`` -> a pointer to the emulator's dynamic shared buffer."""
    def repl(m: re.Match) -> str:
        ty = re.sub(_ALIGN, " ", m.group(3)).strip()
        name = m.group(4)
        new = (f"static {ty}* const {name} = "
               f"reinterpret_cast<{ty}*>(::gpuemu::g_dyn_shared);")
        return new + "\n" * m.group(0).count("\n")
    return _EXTERN_SHARED.sub(repl, text)


# ------------------------------------------------------------------------------------ arguments

_CTYPES = {("i", 1): ctypes.c_int8, ("i", 2): ctypes.c_int16, ("i", 4): ctypes.c_int32,
           ("i", 8): ctypes.c_int64, ("u", 1): ctypes.c_uint8, ("u", 2): ctypes.c_uint16,
           ("u", 4): ctypes.c_uint32, ("u", 8): ctypes.c_uint64, ("f", 4): ctypes.c_float,
           ("f", 8): ctypes.c_double, ("b", 1): ctypes.c_bool}

_TYPE_CODES = {"i8": ("i", 1), "i16": ("i", 2), "i32": ("i", 4), "i64": ("i", 8),
               "u8": ("u", 1), "u16": ("u", 2), "u32": ("u", 4), "u64": ("u", 8),
               "f32": ("f", 4), "f64": ("f", 8), "bool": ("b", 1), "b": ("b", 1),
               "int": ("i", 4), "uint": ("u", 4), "float": ("f", 4), "double": ("f", 8),
               "char": ("i", 1), "uchar": ("u", 1), "short": ("i", 2), "ushort": ("u", 2),
               "long": ("i", 8), "ulong": ("u", 8), "size_t": ("u", 8)}


class Param:
    """One kernel parameter as the compiled module describes it."""

    def __init__(self, desc: str):
        self.desc = desc
        self.pointer = desc.startswith("p")
        body = desc[1:] if self.pointer else desc
        self.const = self.pointer and body.endswith("c")
        if self.const:
            body = body[:-1]
        self.kind = body[0]          # i u f b s v
        self.size = int(body[1:])

    def __repr__(self) -> str:
        base = {"i": f"int{self.size * 8}", "u": f"uint{self.size * 8}",
                "f": f"float{self.size * 8}", "b": "bool", "v": "void",
                "s": f"struct[{self.size}]"}[self.kind]
        return (("const " if self.const else "") + base + "*") if self.pointer else base


def _np_kind(dt: np.dtype) -> str:
    return {"i": "i", "u": "u", "f": "f", "b": "b"}.get(dt.kind, "s")


def _pointer_arg(p: Param, value: Any, idx: int, name: str, check: bool):
    if value is None:
        return ctypes.c_void_p(0), None
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name}: argument {idx} is a pointer ({p!r}); pass a numpy array or None, "
                        f"not {type(value).__name__}")
    if not value.flags.c_contiguous:
        raise ValueError(f"{name}: argument {idx} must be a C-contiguous array "
                         "(use np.ascontiguousarray)")
    if not p.const and not value.flags.writeable:
        raise ValueError(f"{name}: argument {idx} ({p!r}) is written by the kernel but the array "
                         "is read-only")
    if check and p.kind not in "vs" and p.size > 1:
        ak, asz = _np_kind(value.dtype), value.dtype.itemsize
        ints = {"i", "u", "b"}
        same_family = (ak == p.kind) or (ak in ints and p.kind in ints)
        if asz != p.size or not same_family:
            raise TypeError(f"{name}: argument {idx} is {p!r} but the array has dtype "
                            f"{value.dtype} (pass check_types=False to reinterpret)")
    if check and p.kind == "s" and value.nbytes % p.size and value.size:
        raise TypeError(f"{name}: argument {idx} points to {p.size}-byte elements but the array "
                        f"has {value.nbytes} bytes")
    return ctypes.c_void_p(value.ctypes.data), value


def _int_range(kind: str, size: int) -> tuple[int, int]:
    bits = 8 * size
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "i" else (0, (1 << bits) - 1)


def _scalar_arg(p: Param, value: Any, idx: int, name: str):
    where = f"{name}: argument {idx} ({p!r})"
    if p.kind == "s":
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            value = value.tobytes()
        if not isinstance(value, (bytes, bytearray)) or len(value) != p.size:
            raise TypeError(f"{where} takes {p.size} bytes (bytes or a numpy record)")
        return ctypes.create_string_buffer(bytes(value), p.size)
    spec = None
    if isinstance(value, tuple):
        if len(value) != 2:
            raise TypeError(f"{where}: a typed scalar is (type, value), e.g. ('u64', 5)")
        code, value = value
        spec = _TYPE_CODES.get(str(code)) or (_np_kind(np.dtype(code)), np.dtype(code).itemsize)
    elif isinstance(value, np.generic):
        spec = (_np_kind(value.dtype), value.dtype.itemsize)
        value = value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        spec = (_np_kind(value.dtype), value.dtype.itemsize)
        value = value.item()
    if spec is not None:
        ints = {"i", "u"}
        same = spec == (p.kind, p.size) or (spec[0] in ints and p.kind in ints and
                                            spec[1] == p.size)
        if not same:
            raise TypeError(f"{where} got a value typed {spec[0]}{spec[1] * 8}")
    ctype = _CTYPES[(p.kind, p.size)]
    if p.kind in "iu":
        if isinstance(value, float) or not isinstance(value, (int, bool, np.integer)):
            raise TypeError(f"{where} needs an integer, got {value!r}")
        lo, hi = _int_range(p.kind, p.size)
        if not lo <= int(value) <= hi:
            raise OverflowError(f"{where}: {value} is out of range")
        return ctype(int(value))
    if p.kind == "f":
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} needs a number, got {value!r}")
        return ctype(float(value))
    if p.kind == "b":
        return ctype(bool(value))
    raise TypeError(f"{where}: unsupported parameter type")


def _dims(v: Any, what: str) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    t = tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or any(x < 0 or x >= 2**31 for x in t):
        raise ValueError(f"{what} must be 1 to 3 sizes in [0, 2**31), got {v!r}")
    return t + (1,) * (3 - len(t))  # type: ignore[return-value]


def _options(order: str, seed: int, shared_bytes: int, yield_on_atomic: bool,
             allow_exited_at_barrier: bool, stack_size: int, shared_fill: int | None,
             spin_limit: int, max_threads: int):
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if shared_fill is not None and not 0 <= shared_fill <= 255:
        raise ValueError("shared_fill is a byte value or None")
    o = (ctypes.c_longlong * _OPT_COUNT)()
    o[_OPT_ORDER] = ORDERS.index(order)
    o[_OPT_SEED] = int(seed) & 0x7FFFFFFFFFFFFFFF
    o[_OPT_SHARED] = int(shared_bytes)
    o[_OPT_YIELD] = int(bool(yield_on_atomic))
    o[_OPT_EXITED] = int(bool(allow_exited_at_barrier))
    o[_OPT_STACK] = int(stack_size)
    o[_OPT_FILL] = -1 if shared_fill is None else int(shared_fill)
    o[_OPT_SPIN] = int(spin_limit)
    o[_OPT_MAXT] = int(max_threads)
    return o


# ------------------------------------------------------------------------------------ CUDA

class Module:
    """A CUDA source built for the emulator; ``launch`` runs one of its ``__global__`` kernels."""

    def __init__(self, lib: ctypes.CDLL, kernels: Sequence[str], label: str):
        self._lib = lib
        self.kernels = tuple(kernels)
        self.label = label
        self._params: dict[str, list[Param]] = {}

    def params(self, kernel: str) -> list[Param]:
        """The parameter list of ``kernel`` (pointer-ness, kind, size, const)."""
        if kernel not in self._params:
            if kernel not in self.kernels:
                raise KeyError(f"{self.label} has no launchable kernel {kernel!r} "
                               f"(found: {', '.join(self.kernels) or 'none'})")
            fn = getattr(self._lib, f"gpuemu_sig__{kernel}")
            fn.restype = ctypes.c_char_p
            sig = fn().decode()
            self._params[kernel] = [Param(s) for s in sig.split(",")] if sig else []
        return self._params[kernel]

    def launch(self, kernel: str, grid: Any, block: Any, args: Sequence[Any] = (), *,
               order: str = "forward", seed: int = 0, shared_bytes: int = 0,
               yield_on_atomic: bool = False, allow_exited_at_barrier: bool = False,
               stack_size: int = DEFAULT_STACK, shared_fill: int | None = POISON,
               spin_limit: int = DEFAULT_SPIN_LIMIT, max_threads_per_block: int = 1024,
               check_types: bool = True) -> None:
        """Run ``kernel<<<grid, block, shared_bytes>>>(*args)``; arrays are updated in place.

        args: numpy arrays (C-contiguous) or None for pointer parameters; for scalars a Python
        number (converted to the parameter's type, range-checked), a numpy scalar, or a
        ``(type, value)`` pair such as ``("u64", 5)``; bytes for struct parameters.
        order: scheduling order of blocks and of the threads in a block (shuffle: seeded,
        reshuffled every round). yield_on_atomic: switch threads before every atomic/fence.
        Raises KernelError on divergent barriers, deadlocks, faults, assert/__trap.
        """
        params = self.params(kernel)
        if len(args) != len(params):
            raise TypeError(f"{kernel} takes {len(params)} arguments "
                            f"({', '.join(map(repr, params))}), got {len(args)}")
        holders, keep = [], []
        for i, (p, a) in enumerate(zip(params, args)):
            if p.pointer:
                h, arr = _pointer_arg(p, a, i, kernel, check_types)
                keep.append(arr)
            else:
                h = _scalar_arg(p, a, i, kernel)
            holders.append(h)
        argv = (ctypes.c_void_p * max(1, len(holders)))(
            *[ctypes.addressof(h) for h in holders])
        g = (ctypes.c_uint * 3)(*_dims(grid, "grid"))
        b = (ctypes.c_uint * 3)(*_dims(block, "block"))
        opts = _options(order, seed, shared_bytes, yield_on_atomic, allow_exited_at_barrier,
                        stack_size, shared_fill, spin_limit, max_threads_per_block)
        fn = getattr(self._lib, f"gpuemu_launch__{kernel}")
        fn.restype = ctypes.c_int
        rc = fn(argv, g, b, opts)
        del keep
        if rc != 0:
            raise KernelError(f"{kernel}: {self._lib.gpuemu_last_error().decode(errors='replace')}")

    def barriers_released(self) -> int:
        """Barriers released during the last launch of this module (a test aid)."""
        return int(self._lib.gpuemu_barriers_released())

    def get_function(self, kernel: str) -> "Kernel":
        """A CuPy-RawKernel-like callable: ``k(grid, block, args, shared_mem=0, **launch_opts)``."""
        self.params(kernel)
        return Kernel(self, kernel)


class Kernel:
    def __init__(self, module: Module, name: str):
        self.module, self.name = module, name

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
                 **kw: Any) -> None:
        self.module.launch(self.name, grid, block, args, shared_bytes=shared_mem, **kw)


def _read_source(source: str | os.PathLike) -> tuple[str, Path | None]:
    if isinstance(source, os.PathLike):
        p = Path(source)
        return p.read_text(), p.resolve()
    if "\n" not in source and len(source) < 4096:
        try:
            p = Path(source)
            if p.is_file():
                return p.read_text(), p.resolve()
        except OSError:
            pass
    return source, None


def compile_cuda(source: str | os.PathLike, *, defines: Mapping[str, Any] | Sequence[str] | None
                 = None, include_dirs: Sequence[str | os.PathLike] = (),
                 extra_flags: Sequence[str] = ()) -> Module:
    """Build a ``.cu`` file (a path) or CUDA source text for the emulator.

    Launchable kernels are the non-template ``__global__`` functions (the project's kernels are
    ``extern "C"`` so CuPy can find them by name; the emulator finds them the same way). The
    source's directory and ``include_dirs`` are on the include path. Builds are cached by a hash
    of the source, the headers in those directories, the defines and the shims.
    """
    text, path = _read_source(source)
    label = path.name if path else "<cuda source>"
    kernels = find_kernels(text)
    dirs = ([path.parent] if path else []) + [Path(d).resolve() for d in include_dirs]
    body = rewrite_extern_shared(text)
    lines = [f'#line 1 "{label}"', body, "", '#line 1 "<gpuemu launchers>"']
    for k in kernels:
        lines.append(f"GPUEMU_EXPORT int gpuemu_launch__{k}(void** a, const unsigned* g, "
                     f"const unsigned* b, const long long* o) "
                     f"{{ return ::gpuemu::cuda_launch(&{k}, a, g, b, o); }}")
        lines.append(f"GPUEMU_EXPORT const char* gpuemu_sig__{k}() "
                     f"{{ return ::gpuemu::signature_of(&{k}); }}")
    tu = "\n".join(lines) + "\n"
    lib = _build(tu, CUDA_SHIM, dirs, _define_flags(defines) + list(extra_flags),
                 str(path) if path else label)
    return Module(lib, kernels, label)
