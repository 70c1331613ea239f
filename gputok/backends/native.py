"""The native backend: the device-neutral driver (``driver.py``) on every CPU core.

The encode kernels (``kernels/encode_*.cu``) are compiled for the host by the machine's C++
compiler (``native_build.py``: the same sources every device gets, plus the host dialect header
``kernels/dialect_host.h``; built on first use and cached by source digest, compiler and flags).
``NativeDevice`` is the adapter the driver sees, the CPU counterpart of ``cuda.CupyDevice``:

* ``launch`` runs a kernel's grid on a pool of worker threads, blocks taken dynamically, through
  ctypes (which releases the GIL: the workers and the caller all run C++);
* ``scan`` overrides the block scans of ``encode_scan.cu`` (shared memory and barriers have no
  plain-loop form) with the runtime's two-pass parallel scan;
* memory is numpy arrays, host<->device copies are views, streams are a no-op: the driver's two
  slots simply run one after the other.

Without a compiler the backend is unavailable (``gputok info`` says why) and ``"auto"`` takes
numpy; a compiler that fails on the sources is a counted fallback to numpy with a warning.

Performance notes: a chunk is a few MB of text (``CHUNK_BYTES``): the kernels touch ~40 bytes of
workspace per byte of text, so larger chunks only cost memory (the per-chunk Python work is well
under a millisecond per launch); arrays come from ``np.empty`` / ``np.zeros``, so workspace that a
chunk never touches (the long-piece arrays when it has no long piece, entry arrays past the last
entry) never becomes resident. Launch overhead (argument packing in Python + waking the pool) is
~30 us, ~15 launches per chunk.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import numpy as np

from . import native_build
from .driver import DeviceBackend

CHUNK_BYTES = 4 << 20  # text per chunk (see the performance notes)
BLOCK = 1 << 14  # elements per work item of a launch
MAX_BLOCKS = 1 << 20  # a grid always covers its range in one stride


def threads_default() -> int:
    """``$GPUTOK_NUM_THREADS``, else the cores this process may run on."""
    env = os.environ.get("GPUTOK_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"$GPUTOK_NUM_THREADS must be a positive integer, got {env!r}")
        if n < 1:
            raise ValueError(f"$GPUTOK_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available() -> tuple[bool, str]:
    cxx, why = native_build.find_compiler()
    if cxx is None:
        return False, why
    return True, f"{why}, {threads_default()} threads (kernels compiled for this CPU)"


def create(threads: "int | None" = None, **options) -> DeviceBackend:
    """The native backend: the driver over a ``NativeDevice`` (builds the module on first use,
    raising ``native_build.NativeBuildError`` when the compiler fails).

    >>> create().dev.name  # doctest: +SKIP
    'native CPU (2 threads)'
    """
    options.setdefault("chunk_bytes", CHUNK_BYTES)
    return DeviceBackend(NativeDevice(threads), name="native", **options)


class _KernelEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("call", ctypes.c_void_p),
                ("signature", ctypes.CFUNCTYPE(ctypes.c_char_p))]


class _Library:
    """The loaded module: {kernel name: (call address, parameter specs)} and the runtime."""

    def __init__(self, path):
        self.path = str(path)
        lib = ctypes.CDLL(self.path)  # CDLL calls release the GIL
        if lib.gputok_native_abi() != native_build.ABI:
            raise native_build.NativeBuildError(f"{path}: runtime ABI mismatch")
        lib.gputok_native_launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint,
                                             ctypes.c_void_p, ctypes.c_int]
        lib.gputok_native_scan_u32.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                                               ctypes.c_int, ctypes.c_int]
        self.lib = lib
        self.kernels: dict = {}
        for f in native_build.HOST_FILES:
            fn = getattr(lib, "gputok_native_table_" + f.rsplit(".", 1)[0])
            fn.restype = ctypes.POINTER(_KernelEntry)
            count = ctypes.c_int(0)
            table = fn(ctypes.byref(count))
            for k in range(count.value):
                e = table[k]
                self.kernels[e.name.decode()] = (e.call, _parse_signature(e.signature().decode()))


def _parse_signature(sig: str) -> tuple:
    """``"cu1 u8 mu4"`` -> ((is pointer, writable, dtype kind, itemsize), ...)."""
    out = []
    for tok in sig.split():
        if tok[0] in "cm":
            out.append((True, tok[0] == "m", tok[1], int(tok[2:])))
        else:
            out.append((False, False, tok[0], int(tok[1:])))
    return tuple(out)


_libraries: dict = {}
_build_lock = threading.Lock()


def library() -> _Library:
    """The module for the current sources (built or loaded once per process)."""
    with _build_lock:
        path = native_build.build()
        got = _libraries.get(str(path))
        if got is None:
            got = _libraries[str(path)] = _Library(path)
        return got


class _Ready:
    """A finished "download" (host memory already): the interface of ``devices.Pending``."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value


class NativeDevice:
    """The kernels on this machine's cores (see the module docstring).

    ``threads``: workers per launch (default ``threads_default()``); ``poison``: fill fresh
    arrays with 0xCD bytes, so a kernel reading memory nobody wrote shows up (the tests use it).
    """

    kind = "native"
    xp = np
    block = BLOCK
    max_blocks = MAX_BLOCKS
    scan_block, scan_items = 1, 1  # unused: scans run on the host (``scan``)

    def __init__(self, threads: "int | None" = None, *, poison: bool = False):
        self.threads = threads_default() if threads is None else int(threads)
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.poison = poison
        self.lib = library()
        self.name = f"native CPU ({self.threads} threads)"
        self.oom_errors = (MemoryError,)
        self.launches: dict = {}

    def defines(self) -> tuple:
        return ()

    # -- kernels
    def launch(self, name: str, grid, block, args) -> None:
        try:
            call, params = self.lib.kernels[name]
        except KeyError:
            raise KeyError(f"{name}: no such kernel in the native module (kernels of "
                           f"{', '.join(native_build.HOST_FILES)})") from None
        if len(args) != len(params):
            raise TypeError(f"{name}: {len(args)} arguments for {len(params)} parameters")
        slots = np.empty(len(args), np.uint64)
        keep = []
        for k, (a, (ptr, writable, kind, size)) in enumerate(zip(args, params)):
            if ptr:
                if not isinstance(a, np.ndarray) or a.dtype.kind != kind \
                        or a.dtype.itemsize != size or not a.flags.c_contiguous:
                    raise TypeError(f"{name}: argument {k} must be a contiguous numpy array of "
                                    f"{kind}{size * 8}, got {_describe(a)}")
                if writable and not a.flags.writeable:
                    raise TypeError(f"{name}: argument {k} is written by the kernel but the "
                                    "array is read-only")
                slots[k] = a.__array_interface__["data"][0]
                keep.append(a)
            else:
                if not isinstance(a, np.generic) or a.dtype.kind != kind \
                        or a.dtype.itemsize != size:
                    raise TypeError(f"{name}: argument {k} must be a numpy {kind}{size * 8} "
                                    f"scalar (the parameter's exact type), got {_describe(a)}")
                slots[k] = int(np.asarray(a).view(f"u{size}"))  # little-endian low bytes
        argv = slots.__array_interface__["data"][0] + 8 * np.arange(len(args), dtype=np.uint64)
        g = int(np.prod(grid))
        b = int(np.prod(block))
        self.lib.lib.gputok_native_launch(call, g, b, argv.__array_interface__["data"][0],
                                          min(self.threads, g))
        self.launches[name] = self.launches.get(name, 0) + 1

    def scan(self, arr: np.ndarray, n: int, op: str, exclusive: bool) -> None:
        """In-place prefix scan of ``arr[:n]`` (uint32; "add" modulo 2^32, or "max")."""
        if arr.dtype != np.uint32 or not arr.flags.c_contiguous or len(arr) < n:
            raise TypeError(f"scan: a contiguous uint32 array of at least {n} elements, "
                            f"got {_describe(arr)}")
        if op not in ("add", "max"):
            raise ValueError(f"scan: op must be 'add' or 'max', not {op!r}")
        self.lib.lib.gputok_native_scan_u32(arr.__array_interface__["data"][0], int(n),
                                            0 if op == "add" else 1, int(bool(exclusive)),
                                            self.threads)
        self.launches["scan_" + op] = self.launches.get("scan_" + op, 0) + 1

    # -- memory (host memory: copies are views)
    def empty(self, n, dtype):
        a = np.empty(int(n), dtype)
        if self.poison:
            a.view(np.uint8).fill(0xCD)
        return a

    def zeros(self, n, dtype):
        return np.zeros(int(n), dtype)

    def full(self, n, value, dtype):
        return np.full(int(n), value, dtype)

    def dummy(self, dtype):
        return np.zeros(1, dtype)

    def put(self, host):
        return np.ascontiguousarray(host)

    def upload(self, arrays: list) -> list:
        return [np.ascontiguousarray(a) for a in arrays]

    def download(self, key, arr, count) -> _Ready:
        return _Ready(arr[:int(count)])

    def memory_budget(self) -> int:
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return 1 << 32

    def begin_chunk(self) -> None:
        pass

    def release(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    @contextlib.contextmanager
    def stream(self, slot: int):
        yield

    # -- timing
    def mark(self):
        return time.perf_counter()

    def elapsed_ms(self, a, b) -> float:
        return (b - a) * 1e3


def _describe(a) -> str:
    if isinstance(a, (np.ndarray, np.generic)):
        return f"{type(a).__name__} of {a.dtype}"
    return type(a).__name__
