"""The CUDA device adapter: the driver's device protocol (``protocol.py``) over CuPy on one GPU:
kernels compiled by NVRTC (``build.py``), two non-blocking streams, pinned staging buffers
reused per stream slot, device events for timing.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import kernels
from ..protocol import Capabilities, Device
from .build import cupy_module


class Pending:
    """A device-to-host copy in flight; ``result()`` waits and returns a fresh numpy array."""

    def __init__(self, event, host: np.ndarray, dtype, count: int):
        self.event, self.host, self.dtype, self.count = event, host, np.dtype(dtype), count

    def result(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        nbytes = self.count * self.dtype.itemsize
        return self.host[:nbytes].view(self.dtype).copy()


class CupyDevice(Device):
    """CuPy on one GPU: kernels compiled with NVRTC, two non-blocking streams, pinned staging."""

    block = 256
    scan_block = 256
    scan_items = 8
    kind = "cupy"
    caps = Capabilities()  # two streams, every kernel, the block scans, the dedup

    def __init__(self, device_id: "int | None" = None):
        import cupy

        self.cp = cupy
        self.xp = cupy
        self.device_id = cupy.cuda.Device().id if device_id is None else int(device_id)
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = props.get("name", b"GPU")
        self.name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        self.max_blocks = 16 * int(props["multiProcessorCount"])
        self.oom_errors = (cupy.cuda.memory.OutOfMemoryError,)
        with cupy.cuda.Device(self.device_id):
            self._streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
            self._dummies = {np.dtype(t): cupy.zeros(1, t) for t in (np.uint8, np.uint32,
                                                                        np.uint64)}
        self._file_of = {k: f for f in kernels.ENCODE_FILES
                         for k in kernels.kernel_names(kernels.source(f))}
        self._functions: dict = {}
        self._pinned: dict = {}  # key -> (PinnedMemoryPointer, uint8 view)
        self._h2d_done: list = [None, None]  # per slot: the event after its last upload
        self._slot = 0

    # -- kernels
    def defines(self) -> tuple:
        return (("ENC_SCAN_BLOCK", self.scan_block), ("ENC_SCAN_ITEMS", self.scan_items))

    def launch(self, name: str, grid, block, args) -> None:
        fn = self._functions.get(name)
        if fn is None:
            mod = cupy_module(self.device_id, self._file_of[name], self.defines())
            fn = self._functions[name] = mod.get_function(name)
        fn(tuple(grid), tuple(block), tuple(args))  # on the current stream

    def launch_shape(self, name: str, count: int) -> tuple:
        if name == "encode_merge_huge":  # a block per huge piece: every thread it may have
            grid = max(1, min(self.max_blocks, -(-int(count) // kernels.HUGE_BLOCK)))
            return (grid,), (kernels.HUGE_BLOCK,)
        return super().launch_shape(name, count)

    # -- memory
    def empty(self, n: int, dtype):
        return self.cp.empty(int(n), dtype)

    def zeros(self, n: int, dtype):
        return self.cp.zeros(int(n), dtype)

    def full(self, n: int, value, dtype):
        return self.cp.full(int(n), value, dtype)

    def dummy(self, dtype):
        return self._dummies[np.dtype(dtype)]

    def put(self, host: np.ndarray):
        """A one-off upload (tables); call ``synchronize`` before the streams use it."""
        with self.cp.cuda.Device(self.device_id):
            return self.cp.asarray(np.ascontiguousarray(host))

    def memory_budget(self) -> int:
        free, _total = self.cp.cuda.runtime.memGetInfo()
        return int(free) + int(self.cp.get_default_memory_pool().free_bytes())

    def begin_chunk(self, nbytes: int = 0) -> None:
        pass

    def release(self) -> None:
        """After an out-of-memory error: wait for the device, give cached blocks back."""
        self.synchronize()
        self.cp.get_default_memory_pool().free_all_blocks()

    def synchronize(self) -> None:
        self.cp.cuda.Device(self.device_id).synchronize()

    # -- streams and copies
    @contextlib.contextmanager
    def stream(self, slot: int):
        with self.cp.cuda.Device(self.device_id), self._streams[slot]:
            self._slot = slot
            yield

    def _host_buffer(self, key, nbytes: int) -> np.ndarray:
        got = self._pinned.get(key)
        if got is None or got[1].nbytes < nbytes:
            size = max(nbytes, 1 << 16, int(got[1].nbytes * 1.5) if got else 0)
            mem = self.cp.cuda.alloc_pinned_memory(size)
            got = (mem, np.frombuffer(mem, np.uint8, size))
            self._pinned[key] = got
        return got[1]

    def upload(self, arrays: list) -> list:
        """Copy host arrays to the device through this slot's pinned buffer, asynchronously on
        the slot's stream (one copy for all of them); returns device arrays."""
        slot = self._slot
        offs, total = [], 0
        for a in arrays:
            offs.append(total)
            total += -(-a.nbytes // 256) * 256
        total = max(total, 256)
        done = self._h2d_done[slot]
        if done is not None:
            done.synchronize()  # the previous upload from this pinned buffer has finished
        host = self._host_buffer(("in", slot), total)
        for a, o in zip(arrays, offs):
            host[o:o + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        dev = self.cp.empty(total, np.uint8)
        stream = self._streams[slot]
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(dev.data.ptr, host.ctypes.data, total, rt.memcpyHostToDevice, stream.ptr)
        ev = self.cp.cuda.Event()
        ev.record(stream)
        self._h2d_done[slot] = ev
        return [dev[o:o + a.nbytes].view(a.dtype) for a, o in zip(arrays, offs)]

    def download(self, key: str, arr, count: int) -> Pending:
        """Start copying ``arr[:count]`` to this slot's pinned buffer ``key``."""
        slot = self._slot
        nbytes = int(count) * arr.dtype.itemsize
        host = self._host_buffer(("out", slot, key), max(nbytes, 1))
        stream = self._streams[slot]
        rt = self.cp.cuda.runtime
        if nbytes:
            rt.memcpyAsync(host.ctypes.data, arr.data.ptr, nbytes, rt.memcpyDeviceToHost,
                           stream.ptr)
        ev = self.cp.cuda.Event()
        ev.record(stream)
        return Pending(ev, host, arr.dtype, int(count))

    # -- timing
    def mark(self):
        ev = self.cp.cuda.Event()
        ev.record(self._streams[self._slot])
        return ev

    def elapsed_ms(self, a, b) -> float:
        b.synchronize()
        return float(self.cp.cuda.get_elapsed_time(a, b))
