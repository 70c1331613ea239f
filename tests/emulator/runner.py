"""Build CUDA / Metal kernel sources with g++ against the emulator shims and launch them on the CPU.

CUDA::

    mod = compile_cuda("kernels/merge.cu")              # or the source text itself
    mod.launch("merge_pairs", grid=(64,), block=(256,), args=[ids, np.uint32(n), ("u64", seed)])

Metal (mirrors ``mx.fast.metal_kernel``)::

    k = compile_metal("myexp", ["inp"], ["out"], source)
    (out,) = k(inputs=[a], output_shapes=[a.shape], output_dtypes=[np.float32],
               grid=(a.size, 1, 1), threadgroup=(256, 1, 1), template=[("T", np.float32)])

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
        # unique names while building, so concurrent test processes never see half a file
        src = d / f"{key}.{os.getpid()}.tmp.cpp"
        src.write_text(tu)
        tmp = d / f"{key}.{os.getpid()}.tmp.so"
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


def _strip_metal_includes(text: str) -> str:
    return re.sub(r"^[ \t]*#[ \t]*include[ \t]*<metal_\w+>[^\n]*", "", text, flags=re.M)


def rewrite_threadgroup(text: str) -> str:
    """Metal ``threadgroup`` qualifiers: declarations become per-threadgroup static storage
    (``GPUEMU_SHARED``), pointer/reference qualifiers are dropped."""
    out, pos = [], 0
    for m in re.finditer(r"\bthreadgroup\b", text):
        j, depth, kind = m.end(), 0, "decl"
        while j < len(text):
            c = text[j]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif depth <= 0 and c in "*&":
                kind = "ptr"
                break
            elif depth <= 0 and c in ";=[,(){}":
                break
            j += 1
        out.append(text[pos:m.start()])
        out.append("" if kind == "ptr" else "GPUEMU_SHARED")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


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


# ------------------------------------------------------------------------------------ Metal

# MLX's attribute table (name, type); an attribute becomes a parameter when the body mentions it.
MLX_ATTRIBUTES = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)

_MLX_TYPES = {"bool": "bool", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
              "uint64": "uint64_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
              "int64": "int64_t", "float16": "float16_t", "float32": "float",
              "float64": "double"}


def mlx_type(dtype: Any) -> str:
    """MLX's type string for a numpy dtype (``float32`` -> ``float``)."""
    dt = np.dtype(dtype)
    try:
        return _MLX_TYPES[dt.name]
    except KeyError:
        raise TypeError(f"dtype {dt} has no Metal equivalent in the emulator") from None


def _template_items(template: Any) -> list[tuple[str, Any]]:
    if not template:
        return []
    items = list(template.items()) if isinstance(template, Mapping) else list(template)
    return [(str(k), v) for k, v in items]


def _template_param(v: Any) -> tuple[str, str]:
    """(kind in the template header, value in the instantiation)."""
    if isinstance(v, (bool, np.bool_)):
        return "bool", "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return "int", str(int(v))
    return "typename", mlx_type(v)


class MetalKernel:
    """An ``mx.fast.metal_kernel`` equivalent that runs on the emulator."""

    def __init__(self, name: str, input_names: Sequence[str], output_names: Sequence[str],
                 source: str, header: str = "", ensure_row_contiguous: bool = True,
                 atomic_outputs: bool = False, *, source_label: str | None = None):
        if not output_names:
            raise ValueError("[metal_kernel] Must specify at least one output.")
        self.name = name
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        self.source_label = source_label or f"{name}:source"
        self.shape_infos = [(f"{n}_shape" in source, f"{n}_strides" in source,
                             f"{n}_ndim" in source) for n in self.input_names]
        self.attributes = [(a, t) for a, t in MLX_ATTRIBUTES if a in source]
        self._last_lib: ctypes.CDLL | None = None

    # -- code generation
    def generate(self, inputs: Sequence[tuple[Any, int]], output_dtypes: Sequence[Any],
                 template: Any = None) -> str:
        """The C++ translation unit for inputs given as (dtype, ndim) pairs."""
        if len(inputs) != len(self.input_names):
            raise ValueError(f"[metal_kernel] Expected `inputs` to have size "
                             f"{len(self.input_names)} but got size {len(inputs)}.")
        if len(output_dtypes) != len(self.output_names):
            raise ValueError(f"[metal_kernel] Expected `output_dtypes` to have size "
                             f"{len(self.output_names)} but got size {len(output_dtypes)}.")
        targs = [(k, *_template_param(v)) for k, v in _template_items(template)]
        fname = f"custom_kernel_{self.name}"
        params, call = [], []
        slot = 0
        for (dtype, ndim), name, (sh, st, nd) in zip(inputs, self.input_names, self.shape_infos):
            ty = mlx_type(dtype)
            if ndim == 0:
                params.append(f"const {ty}& {name}")
                call.append(f"*static_cast<const {ty}*>(a[{slot}])")
                slot += 1
                continue
            params.append(f"const {ty}* {name}")
            call.append(f"static_cast<const {ty}*>(a[{slot}])")
            slot += 1
            if sh:
                params.append(f"const int* {name}_shape")
                call.append(f"static_cast<const int*>(a[{slot}])")
                slot += 1
            if st:
                params.append(f"const int64_t* {name}_strides")
                call.append(f"static_cast<const int64_t*>(a[{slot}])")
                slot += 1
            if nd:
                params.append(f"const int& {name}_ndim")
                call.append(f"*static_cast<const int*>(a[{slot}])")
                slot += 1
        for dtype, name in zip(output_dtypes, self.output_names):
            ty = mlx_type(dtype)
            if self.atomic_outputs:
                ty = f"atomic<{ty}>"
            params.append(f"{ty}* {name}")
            call.append(f"static_cast<{ty}*>(a[{slot}])")
            slot += 1
        for attr, ty in self.attributes:
            params.append(f"{ty} {attr}")
            call.append(f"A.{attr}")
        header = rewrite_threadgroup(_strip_metal_includes(self.header))
        body = rewrite_threadgroup(_strip_metal_includes(self.source))
        tparams = ", ".join(f"{kind} {k}" for k, kind, _ in targs)
        tvals = ", ".join(v for _, _, v in targs)
        out = []
        if header.strip():
            out += [f'#line 1 "{self.name}:header"', header]
        if targs:
            out.append(f"template <{tparams}>")
        out.append(f"void {fname}(\n    " + ",\n    ".join(params) + ") {")
        out += [f'#line 1 "{self.source_label}"', body, "}"]
        out += ['#line 1 "<gpuemu launcher>"', "namespace {",
                "void gpuemu_call(void* p) {",
                "  void** a = static_cast<void**>(p);",
                "  const ::gpuemu::MetalAttrs A = ::gpuemu::metal_attrs();",
                "  (void)a; (void)A;",
                f"  {fname}{'<' + tvals + '>' if targs else ''}(" + ", ".join(call) + ");",
                "}", "}  // namespace",
                "GPUEMU_EXPORT int gpuemu_metal_launch(void** a, const unsigned* g, "
                "const unsigned* t, const long long* o) "
                "{ return ::gpuemu::metal_launch(g, t, o, &gpuemu_call, a); }"]
        return "\n".join(out) + "\n"

    def build(self, inputs: Sequence[tuple[Any, int]], output_dtypes: Sequence[Any],
              template: Any = None) -> ctypes.CDLL:
        """Compile the variant for these input (dtype, ndim) pairs, output dtypes and template
        arguments (cached); this is also the syntax check of a body."""
        tu = self.generate(inputs, output_dtypes, template)
        return _build(tu, METAL_SHIM, [], [], f"metal kernel {self.name!r}")

    # -- running
    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
                 output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
                 template: Any = None, init_value: float | None = None, verbose: bool = False,
                 order: str = "forward", seed: int = 0, yield_on_atomic: bool = False,
                 allow_exited_at_barrier: bool = False, stack_size: int = DEFAULT_STACK,
                 shared_fill: int | None = POISON, output_fill: int | None = POISON,
                 spin_limit: int = DEFAULT_SPIN_LIMIT,
                 max_threads_per_threadgroup: int = 1024) -> list[np.ndarray]:
        """Run like ``mx.fast.metal_kernel(...)(...)``; returns the outputs as numpy arrays.

        grid is the number of threads (``dispatchThreads``); the threadgroup is clipped to it per
        dimension, and edge threadgroups may be partial. Outputs start as ``init_value`` when
        given, else every byte is ``output_fill`` (MLX leaves them uninitialised).
        """
        if len(output_shapes) != len(self.output_names):
            raise ValueError(f"[metal_kernel] Expected `output_shapes` to have size "
                             f"{len(self.output_names)} but got size {len(output_shapes)}.")
        arrays = []
        for x in inputs:
            x = np.asarray(x)
            if (self.ensure_row_contiguous or x.ndim == 0) and not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)  # (a 0-d array is always contiguous: stays 0-d)
            arrays.append(x)
        descs = [(x.dtype, x.ndim) for x in arrays]
        if verbose:
            print(f"Generated source code for `{self.name}`:\n```\n"
                  f"{self.generate(descs, output_dtypes, template)}```")
        lib = self.build(descs, output_dtypes, template)
        outputs = []
        for shape, dtype in zip(output_shapes, output_dtypes):
            dt = np.dtype(dtype)
            if init_value is not None:
                o = np.full(tuple(shape), init_value, dtype=dt)
            else:
                o = np.empty(tuple(shape), dtype=dt)
                if output_fill is not None and o.size:
                    o.reshape(-1).view(np.uint8).fill(output_fill)
            outputs.append(o)
        holders, keep = [], [arrays, outputs]
        for x, (sh, st, nd) in zip(arrays, self.shape_infos):
            holders.append(ctypes.c_void_p(x.ctypes.data))
            if x.ndim == 0:
                continue
            if sh:
                shape = np.asarray(x.shape, dtype=np.int32)
                keep.append(shape)
                holders.append(ctypes.c_void_p(shape.ctypes.data))
            if st:
                if any(s % x.itemsize for s in x.strides):
                    raise ValueError("input strides are not multiples of the element size")
                strides = np.asarray([s // x.itemsize for s in x.strides], dtype=np.int64)
                keep.append(strides)
                holders.append(ctypes.c_void_p(strides.ctypes.data))
            if nd:
                ndim = ctypes.c_int(x.ndim)
                keep.append(ndim)
                holders.append(ctypes.c_void_p(ctypes.addressof(ndim)))
        for o in outputs:
            holders.append(ctypes.c_void_p(o.ctypes.data))
        argv = (ctypes.c_void_p * max(1, len(holders)))(*[h.value for h in holders])
        g = (ctypes.c_uint * 3)(*_dims(grid, "grid"))
        t = (ctypes.c_uint * 3)(*_dims(threadgroup, "threadgroup"))
        opts = _options(order, seed, 0, yield_on_atomic, allow_exited_at_barrier, stack_size,
                        shared_fill, spin_limit, max_threads_per_threadgroup)
        lib.gpuemu_metal_launch.restype = ctypes.c_int
        rc = lib.gpuemu_metal_launch(argv, g, t, opts)
        self._last_lib = lib
        del keep
        if rc != 0:
            raise KernelError(f"{self.name}: {lib.gpuemu_last_error().decode(errors='replace')}")
        return outputs

    def launch(self, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
               output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
               **kw: Any) -> list[np.ndarray]:
        """Positional form of ``__call__``."""
        return self(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes,
                    grid=grid, threadgroup=threadgroup, **kw)

    def barriers_released(self) -> int:
        """Barriers released during the last launch (a test aid)."""
        return int(self._last_lib.gpuemu_barriers_released()) if self._last_lib else 0


def compile_metal(name: str, input_names: Sequence[str], output_names: Sequence[str],
                  source: str, header: str = "", ensure_row_contiguous: bool = True,
                  atomic_outputs: bool = False) -> MetalKernel:
    """Same arguments as ``mx.fast.metal_kernel``. Building happens per (input dtypes/ndims,
    output dtypes, template) variant at the first launch (or explicitly with ``.build``)."""
    return MetalKernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                       atomic_outputs)


# ------------------------------------------------------------------------------------ .metal files

_IFACE = re.compile(r"^[ \t]*//[ \t]*gpuemu:(.*)$", re.M)


def metal_interface(text: str) -> dict[str, Any] | None:
    """Parse the interface comment of a ``.metal`` body file, e.g.

        // gpuemu: name=merge inputs=ids:uint32,n:uint32:0 outputs=out:int32 template=T:uint32,N:4

    ``name:dtype`` per input/output (``:0`` marks a 0-d input), template values are dtype names,
    integers or true/false, ``header=file`` names a header next to the body. ``// gpuemu: header``
    marks a file that only holds helpers for other bodies. Returns None without such a line.
    """
    lines = _IFACE.findall(text)
    if not lines:
        return None
    spec: dict[str, Any] = {"inputs": [], "outputs": [], "template": [], "header": None,
                            "name": None, "is_header": False, "atomic_outputs": False,
                            "ensure_row_contiguous": True}
    for line in lines:
        for tok in line.split():
            if tok == "header":
                spec["is_header"] = True
                continue
            key, _, val = tok.partition("=")
            if key in ("inputs", "outputs"):
                for item in filter(None, val.split(",")):
                    parts = item.split(":")
                    ndim = int(parts[2]) if len(parts) > 2 else 1
                    spec[key].append((parts[0], np.dtype(parts[1]), ndim))
            elif key == "template":
                for item in filter(None, val.split(",")):
                    k, _, v = item.partition(":")
                    if v in ("true", "false"):
                        spec["template"].append((k, v == "true"))
                    elif re.fullmatch(r"-?\d+", v):
                        spec["template"].append((k, int(v)))
                    else:
                        spec["template"].append((k, np.dtype(v)))
            elif key in ("atomic_outputs", "ensure_row_contiguous"):
                spec[key] = val.lower() in ("1", "true", "yes")
            elif key in ("name", "header"):
                spec[key] = val
            else:
                raise ValueError(f"unknown key {key!r} in a gpuemu interface comment")
    return spec


def check_metal_file(path: str | os.PathLike) -> MetalKernel | None:
    """Compile a ``.metal`` body file through the emulator's MLX wrapper (a syntax check).

    Returns the kernel, or None for a file without an interface comment (see
    ``metal_interface``). A header file is compiled on its own.
    """
    path = Path(path)
    text = path.read_text()
    spec = metal_interface(text)
    if spec is None:
        return None
    if spec["is_header"]:
        k = MetalKernel(f"{path.stem}_header_check", [], ["unused"], "", text,
                        source_label=path.name)
        k.build([], [np.uint32])
        return k
    header = ""
    if spec["header"]:
        header = (path.parent / spec["header"]).read_text()
    k = MetalKernel(spec["name"] or path.stem, [n for n, _, _ in spec["inputs"]],
                    [n for n, _, _ in spec["outputs"]], text, header,
                    spec["ensure_row_contiguous"], spec["atomic_outputs"],
                    source_label=path.name)
    k.build([(dt, nd) for _, dt, nd in spec["inputs"]], [dt for _, dt, _ in spec["outputs"]],
            spec["template"])
    return k
