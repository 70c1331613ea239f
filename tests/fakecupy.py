"""A stand-in for the part of CuPy the CUDA adapter uses (``gputok/backends/cuda/device.py``),
on the CPU: copies are memmoves, streams and events are immediate, ``RawModule`` compiles the
source (with its #define header) for the kernel emulator. It checks the adapter's calls, not
CuPy: which GPU is current when memory is sized, allocated or freed (``log``), the pools the
adapter makes, the events' flags, and CUDA's out-of-memory errors (``fail``)."""

from __future__ import annotations

import ctypes
import types

import numpy as np

from emulator import compile_cuda


class DevArray(np.ndarray):
    """A numpy array with CuPy's ``.data.ptr``."""

    @property
    def data(self):
        return type("MemoryPointer", (), {"ptr": self.ctypes.data})()


def fake_cupy(kernel_log: list, *, devices: int = 1, free: int = 1 << 30, log=None,
              fail=None):
    """The stand-in module. ``kernel_log`` gets each kernel launched; ``log`` (a list) gets
    ``(call, current device)`` for memory calls and ``("event", block, disable_timing)``;
    ``fail``: a dict whose key ``"pinned"`` (a count) makes that many pinned allocations fail
    as CUDA's runtime does (``CUDARuntimeError`` with cudaErrorMemoryAllocation)."""
    from gputok._resources import source_dir

    log = [] if log is None else log
    fail = {} if fail is None else fail
    state = {"device": 0, "allocator": None}
    cp = types.ModuleType("cupy")
    cp.__version__ = "stand-in"
    as_dev = lambda a: a.view(DevArray)  # noqa: E731

    def alloc(make):
        def f(*a, **k):
            log.append(("alloc", state["device"], state["allocator"]))
            return as_dev(make(*a, **k))
        return f

    cp.empty = alloc(lambda n, dtype: np.full(n, 0xCD, np.uint8).view(dtype)
                     if np.dtype(dtype).itemsize == 1 else np.empty(n, dtype))
    cp.zeros = alloc(lambda n, dtype: np.zeros(n, dtype))
    cp.full = alloc(lambda n, v, dtype: np.full(n, v, dtype))
    cp.asarray = alloc(lambda a: np.array(a, copy=True))
    default_pool = types.SimpleNamespace(free_bytes=lambda: 0, free_all_blocks=lambda: None)
    cp.get_default_memory_pool = lambda: default_pool

    class RuntimeErr(RuntimeError):
        def __init__(self, status):
            super().__init__(f"cudaError {status}")
            self.status = status

    class DriverErr(RuntimeError):
        def __init__(self, status):
            super().__init__(f"CUDA_ERROR {status}")
            self.status = status

    class Device:
        def __init__(self, i=None):
            self.id = state["device"] if i is None else int(i)
            self.ptr = id(self)

        def __enter__(self):
            self._prev = state["device"]
            state["device"] = self.id
            return self

        def __exit__(self, *exc):
            state["device"] = self._prev
            return False

        def synchronize(self):
            log.append(("synchronize", self.id))

    class Ctx:
        def __init__(self, *a, **k):
            self.ptr = id(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Event(Ctx):
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            super().__init__()
            log.append(("event", block, disable_timing))

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class MemoryPool:
        def __init__(self):
            self.limit = {}

        def malloc(self, size):
            raise AssertionError("the stand-in allocates through cp.empty")

        def free_bytes(self):
            log.append(("pool.free_bytes", state["device"]))
            return 1 << 20

        def used_bytes(self):
            log.append(("pool.used_bytes", state["device"]))
            return 1 << 10

        def free_all_blocks(self):
            log.append(("pool.free_all_blocks", state["device"]))

        def set_limit(self, size=0, fraction=0.0):
            log.append(("pool.set_limit", state["device"], size))

    class PinnedMemoryPool:
        def malloc(self, size):
            if fail.get("pinned", 0) > 0:
                fail["pinned"] -= 1
                raise RuntimeErr(2)  # cudaErrorMemoryAllocation
            log.append(("pinned.malloc", size))
            return bytearray(size)

        def free_all_blocks(self):
            log.append(("pinned.free_all_blocks",))

    class using_allocator:  # noqa: N801 (CuPy's name)
        def __init__(self, allocator=None):
            self.allocator = allocator

        def __enter__(self):
            self._prev = state["allocator"]
            state["allocator"] = self.allocator
            return self

        def __exit__(self, *exc):
            state["allocator"] = self._prev
            return False

    def mem_get_info():
        log.append(("memGetInfo", state["device"]))
        return free, 2 * free

    rt = types.SimpleNamespace(
        getDeviceProperties=lambda i: {"name": b"stand-in GPU", "multiProcessorCount": 1},
        getDeviceCount=lambda: devices, memGetInfo=mem_get_info,
        memcpyHostToDevice=1, memcpyDeviceToHost=2, CUDARuntimeError=RuntimeErr,
        memcpyAsync=lambda dst, src, size, kind, stream: ctypes.memmove(dst, src, size))

    class RawModule:
        def __init__(self, code, options=()):
            assert "-std=c++17" in options
            inc = [o[2:] for o in options if o.startswith("-I")]
            self.mod = compile_cuda(code, include_dirs=inc)

        def get_function(self, name):
            def call(grid, block, args):
                assert isinstance(grid, tuple) and isinstance(block, tuple)
                kernel_log.append(name)
                self.mod.launch(name, grid, block, list(args), order="shuffle", seed=1)
            return call

    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(
        Device=Device, Stream=Ctx, Event=Event, runtime=rt, MemoryPool=MemoryPool,
        PinnedMemoryPool=PinnedMemoryPool, using_allocator=using_allocator,
        driver=types.SimpleNamespace(CUDADriverError=DriverErr),
        memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError", (MemoryError,),
                                                           {})),
        alloc_pinned_memory=lambda size: bytearray(size), get_elapsed_time=lambda a, b: 0.0)
    assert source_dir("kernels").is_dir()
    return cp
