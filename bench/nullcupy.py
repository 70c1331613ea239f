"""A null CUDA device for measuring the host's share of a CUDA batch (``bench_host.py``).

``install()`` puts a stand-in for the part of CuPy the CUDA adapter uses into ``sys.modules``:
device arrays are host arrays (never touched until written), copies between host and "device"
are ``memmove`` and the kernels are replaced by a copy: every document's ids are its bytes at
positions 0, 4, 8, ... (about the id count a BPE vocabulary gives text: cl100k makes one id of
about four bytes of prose), so the host handles as many ids as it would. So the real adapter
(``gputok/backends/cuda/device.py``: staging, downloads), the driver and its runners, the
packing of the input, the result arrays, and a corpus job's readers and shard writers all run
as on a GPU, and what a GPU would do instead (DMA, kernels) is timed apart (``device_seconds``,
the calling threads' CPU time in those stand-ins) so the host's own work per byte is
``process CPU time - device_seconds``.

The null kernels: ``encode_doc_entries`` gives each document ceil(bytes / 4) ids and keeps the
chunk's document offsets (per thread), ``encode_merge_short`` gathers every fourth byte of each
document into scratch, ``encode_emit_*`` copies scratch to the output, ``encode_doc_offsets``
writes the id offsets; every other kernel does nothing (what they would write, no later null
kernel reads).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import types

import numpy as np

_spent = threading.local()
_total = {"seconds": 0.0}
_lock = threading.Lock()


def device_seconds() -> float:
    """CPU seconds the stand-ins of the GPU's own work took, on every thread, so far."""
    return _total["seconds"]


def _timed(fn):
    def run(*a, **k):
        t0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            dt = time.thread_time() - t0
            with _lock:
                _total["seconds"] += dt
    return run


class _DevArray(np.ndarray):
    @property
    def data(self):
        return type("MemoryPointer", (), {"ptr": self.ctypes.data})()


def _dev(a: np.ndarray) -> _DevArray:
    return a.view(_DevArray)


_chunk = threading.local()  # the chunk a thread's launches are for: (byte offsets, id offsets)


def _kernel(name: str):
    """The null form of one kernel (see the module docstring)."""
    if name == "encode_doc_entries":  # (ent, d_off, n_docs + 1, doc_entry)
        def run(grid, block, args):
            n1 = int(args[2])
            off = np.asarray(args[1][:n1], np.int64)
            ids = np.zeros(n1, np.int64)
            np.cumsum((np.diff(off) + 3) // 4, out=ids[1:])
            _chunk.now = (off, ids)
    elif name == "encode_merge_short":  # (buf, pstart, n_ent, owner, t_slots, t_bits, ...)
        def run(grid, block, args):
            buf, scratch = args[0], args[7]
            off, ids = _chunk.now
            total = int(ids[-1])
            at = np.repeat(off[:-1] - 4 * ids[:-1], np.diff(ids)) + 4 * np.arange(total)
            scratch[:total] = buf[at]
    elif name.startswith("encode_emit_"):  # (n_entries, pstart, owner, count, scratch, out, cap)
        def run(grid, block, args):
            total = int(_chunk.now[1][-1])
            args[5][:total] = args[4][:total]
    elif name == "encode_doc_offsets":  # (doc_entry, count, n_docs + 1, out_doc)
        def run(grid, block, args):
            ids, n1, out = _chunk.now[1], int(args[2]), args[3]
            out[:n1] = ids[:n1]
    else:
        def run(grid, block, args):
            pass
    return _timed(run)


def install(devices: int = 1, free: int = 64 << 30) -> types.ModuleType:
    """Put the null CuPy into ``sys.modules["cupy"]`` (this process only) and return it."""
    cp = types.ModuleType("cupy")
    cp.__version__ = "null"
    cp.empty = lambda n, dtype: _dev(np.empty(n, dtype))
    cp.zeros = lambda n, dtype: _dev(np.zeros(n, dtype))
    cp.full = lambda n, v, dtype: _dev(np.full(n, v, dtype))
    cp.asarray = lambda a: _dev(np.array(a, copy=True))
    state = {"device": 0}

    class Device:
        def __init__(self, i=None):
            self.id = state["device"] if i is None else int(i)

        def __enter__(self):
            self._prev, state["device"] = state["device"], self.id
            return self

        def __exit__(self, *exc):
            state["device"] = self._prev
            return False

        def synchronize(self):
            pass

    class Ctx:
        ptr = 0

        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

    class MemoryPool:
        def malloc(self, size):
            raise AssertionError("arrays are made by empty/zeros/full")

        def free_bytes(self):
            return 0

        def used_bytes(self):
            return 0

        def free_all_blocks(self):
            pass

        def set_limit(self, size=0, fraction=0.0):
            pass

    class PinnedMemoryPool:
        def malloc(self, size):
            return np.empty(size, np.uint8)  # (page-locked on a GPU host: plain pages here)

        def free_all_blocks(self):
            pass

    class using_allocator(Ctx):  # noqa: N801 (CuPy's name)
        pass

    class RawModule:
        def __init__(self, code, options=()):
            pass

        def get_function(self, name):
            return _kernel(name)

    err = type("CUDAError", (RuntimeError,), {})
    rt = types.SimpleNamespace(
        getDeviceProperties=lambda i: {"name": b"null GPU", "multiProcessorCount": 132},
        getDeviceCount=lambda: devices, memGetInfo=lambda: (free, 2 * free),
        memcpyHostToDevice=1, memcpyDeviceToHost=2, CUDARuntimeError=err,
        memcpyAsync=_timed(lambda dst, src, size, kind, stream: ctypes.memmove(dst, src, size)))
    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(
        Device=Device, Stream=Ctx, Event=Ctx, runtime=rt, MemoryPool=MemoryPool,
        PinnedMemoryPool=PinnedMemoryPool, using_allocator=using_allocator,
        driver=types.SimpleNamespace(CUDADriverError=err),
        memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError", (MemoryError,),
                                                           {})),
        get_elapsed_time=lambda a, b: 0.0)
    cp.get_default_memory_pool = MemoryPool
    sys.modules["cupy"] = cp
    return cp


def backend(device_id: int = 0):
    """The cuda backend on the null device (``install()`` first)."""
    from gputok.backends import cuda

    return cuda.create(device_id)
