"""The CUDA device adapter: the driver's device protocol (``protocol.py``) over CuPy on one GPU:
kernels compiled by NVRTC (``build.py``), two non-blocking streams, pinned staging buffers
reused per stream slot, device events for timing.

Memory is this GPU's and this adapter's own: every call that touches the device enters the
device's context first (a process that drives several GPUs from several threads must size and
free each from itself, not from whichever GPU the thread has current); device memory comes from
the adapter's own pool and staging from its own pinned pool (not CuPy's defaults, which the user's
code shares), capped at ``memory`` bytes (``GPUTOK_CUDA_MEMORY``) where given, and both pools
are given back after each batch unless a caller holds them (``hold``: a corpus job's run of
batches). Waits block the thread (events made with ``block=True``) instead of spinning a core.
Every out-of-memory form CUDA has (the pool's, a failed pinned allocation or a runtime or
driver call that ran out of memory) reaches the driver as one it splits the batch on.
"""

from __future__ import annotations

import contextlib
import os
import re

import numpy as np

from .. import kernels
from ..protocol import Capabilities, Device
from .build import cupy_module

MEMORY_ENV = "GPUTOK_CUDA_MEMORY"
OUT_OF_MEMORY = 2  # cudaErrorMemoryAllocation (runtime) and CUDA_ERROR_OUT_OF_MEMORY (driver)


class CudaOutOfMemory(MemoryError):
    """A CUDA call ran out of memory outside CuPy's device pool (a pinned host allocation, a
    runtime or driver call): the driver splits the batch on it as on the pool's own error."""


def parse_memory(value) -> "int | None":
    """A memory cap in bytes from an int, or a string of bytes with a K/M/G/T suffix (powers of
    1024, an optional trailing B); None for None or an empty string.

    >>> parse_memory("24G"), parse_memory("512MB"), parse_memory(1 << 20)
    (25769803776, 536870912, 1048576)
    """
    if value is None or value == "":
        return None
    if isinstance(value, (int, np.integer)):
        n = int(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)I?B?\s*", str(value), re.I)
        if m is None:
            raise ValueError(f"a CUDA memory cap is bytes or a size like 24G or 512MB, got "
                             f"{value!r} ({MEMORY_ENV})")
        n = int(float(m.group(1)) * 1024 ** "_KMGT".index(m.group(2).upper() or "_"))
    if n <= 0:
        raise ValueError(f"a CUDA memory cap must be positive, got {value!r}")
    return n


class Pending:
    """A device-to-host copy in flight; ``result()`` waits (blocking, not spinning) and returns
    a fresh numpy array."""

    def __init__(self, event, host: np.ndarray, dtype, count: int):
        self.event, self.host, self.dtype, self.count = event, host, np.dtype(dtype), count

    def view(self) -> np.ndarray:
        """The copy in the slot's pinned buffer, not copied again: valid until the slot's
        next download (the ids' final place takes them from here)."""
        if self.event is not None:
            self.event.synchronize()
        return self.host[:self.count * self.dtype.itemsize].view(self.dtype)

    def result(self) -> np.ndarray:
        return self.view().copy()


class CupyDevice(Device):
    """CuPy on one GPU: kernels compiled with NVRTC, two non-blocking streams, pinned staging."""

    block = 256
    scan_block = 256
    scan_items = 8
    kind = "cupy"
    caps = Capabilities(staging=True)  # two streams, every kernel, block scans, dedup, staging

    def __init__(self, device_id: "int | None" = None, *, memory=None):
        import cupy

        self.cp = cupy
        self.xp = cupy
        self.device_id = cupy.cuda.Device().id if device_id is None else int(device_id)
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = props.get("name", b"GPU")
        self.name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        self.max_blocks = 16 * int(props["multiProcessorCount"])
        self.oom_errors = (cupy.cuda.memory.OutOfMemoryError, CudaOutOfMemory)
        #: the most device memory this adapter's pool may hold (None: what the GPU has free)
        self.memory = parse_memory(memory if memory is not None else os.environ.get(MEMORY_ENV))
        self._pool = cupy.cuda.MemoryPool()
        self._pinned_pool = cupy.cuda.PinnedMemoryPool()
        self._holds = 0  # callers keeping the pools between batches (``hold``)
        with self._on_device():
            if self.memory is not None:
                self._pool.set_limit(size=self.memory)
            self._streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
            self._dummies = {np.dtype(t): cupy.zeros(1, t) for t in (np.uint8, np.uint32,
                                                                        np.uint64)}
        self._file_of = {k: f for f in kernels.ENCODE_FILES
                         for k in kernels.kernel_names(kernels.source(f))}
        self._functions: dict = {}
        self._pinned: dict = {}  # key -> (PinnedMemoryPointer, uint8 view)
        self._h2d_done: list = [None, None]  # per slot: the event after its last upload
        self._slot = 0

    @contextlib.contextmanager
    def _on_device(self):
        """This GPU current, allocations from this adapter's pool, and CUDA's out-of-memory
        errors outside the pool as ``CudaOutOfMemory``."""
        cp = self.cp
        try:
            with cp.cuda.Device(self.device_id), cp.cuda.using_allocator(self._pool.malloc):
                yield
        except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
            if getattr(e, "status", None) == OUT_OF_MEMORY:
                raise CudaOutOfMemory(f"{self.name} (GPU {self.device_id}): {e}") from e
            raise

    # -- kernels
    def defines(self) -> tuple:
        return (("ENC_SCAN_BLOCK", self.scan_block), ("ENC_SCAN_ITEMS", self.scan_items))

    def launch(self, name: str, grid, block, args) -> None:
        with self._on_device():
            fn = self._functions.get(name)
            if fn is None:
                mod = cupy_module(self.device_id, self._file_of[name], self.defines())
                fn = self._functions[name] = mod.get_function(name)
            fn(tuple(grid), tuple(block), tuple(args))  # on the current stream

    def host_tools(self):
        """The native library's host helpers (the str packer that writes a chunk straight into
        staging, the UTF-8 check of bytes input), built on first use like the native device's;
        without a C++ compiler, none (Python packs the batch: ``protocol.HostTools``)."""
        from ..protocol import HostTools

        try:
            from ..native import library

            lib = library()
        except Exception:  # (no compiler, a failed build: the batch path still runs)
            return HostTools()
        return HostTools(None, lib.packer, lib.utf8_check, lib.joiner, lib.first_token)

    def launch_shape(self, name: str, count: int) -> tuple:
        if name == "encode_merge_huge":  # a block per huge piece: every thread it may have
            grid = max(1, min(self.max_blocks, -(-int(count) // kernels.HUGE_BLOCK)))
            return (grid,), (kernels.HUGE_BLOCK,)
        return super().launch_shape(name, count)

    # -- memory
    def empty(self, n: int, dtype):
        with self._on_device():
            return self.cp.empty(int(n), dtype)

    def zeros(self, n: int, dtype):
        with self._on_device():
            return self.cp.zeros(int(n), dtype)

    def full(self, n: int, value, dtype):
        with self._on_device():
            return self.cp.full(int(n), value, dtype)

    def dummy(self, dtype):
        return self._dummies[np.dtype(dtype)]

    def put(self, host: np.ndarray):
        """A one-off upload (tables); call ``synchronize`` before the streams use it."""
        with self._on_device():
            return self.cp.asarray(np.ascontiguousarray(host))

    def memory_budget(self) -> int:
        """What this GPU has free, plus what this adapter's pool holds free, within the cap
        (``memory``) less what the pool holds in use (the model's tables)."""
        with self._on_device():
            free, _total = self.cp.cuda.runtime.memGetInfo()
            budget = int(free) + int(self._pool.free_bytes())
            if self.memory is not None:
                budget = min(budget, self.memory - int(self._pool.used_bytes()))
        return max(budget, 0)

    def begin_chunk(self, nbytes: int = 0) -> None:
        pass

    def release(self) -> None:
        """After an out-of-memory error: wait for the device, give cached blocks back."""
        self.synchronize()
        with self._on_device():
            self._pool.free_all_blocks()

    @contextlib.contextmanager
    def hold(self):
        """Keep the device and pinned pools between batches while inside (``batch_done``)."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            if not self._holds:
                self.batch_done()

    def batch_done(self) -> None:
        """A batch is finished: unless a caller holds them (``hold``), give the pools' memory
        back (device blocks, and the pinned staging: about a GB at a large batch's chunk size),
        so a model in the same process, or another process, gets it."""
        if self._holds:
            return
        self.synchronize()
        self._pinned.clear()
        self._h2d_done = [None, None]
        with self._on_device():
            self._pool.free_all_blocks()
        self._pinned_pool.free_all_blocks()

    def synchronize(self) -> None:
        with self._on_device():
            self.cp.cuda.Device(self.device_id).synchronize()

    # -- streams and copies
    @contextlib.contextmanager
    def stream(self, slot: int):
        with self._on_device(), self._streams[slot]:
            self._slot = slot
            yield

    def _event(self, timing: bool = False):
        """An event whose wait blocks the thread (``block=True``: the OS wakes it when the GPU
        gets there) instead of spinning a core; timing only for the profile's marks."""
        return self.cp.cuda.Event(block=True, disable_timing=not timing)

    def _host_buffer(self, key, nbytes: int) -> np.ndarray:
        got = self._pinned.get(key)
        if got is None or got[1].nbytes < nbytes:
            size = max(nbytes, 1 << 16, int(got[1].nbytes * 1.5) if got else 0)
            with self._on_device():  # (a failed pinned allocation: CudaOutOfMemory)
                mem = self._pinned_pool.malloc(size)
            got = (mem, np.frombuffer(mem, np.uint8, size))
            self._pinned[key] = got
        return got[1]

    def stage(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's pinned input buffer, ``nbytes`` of it, once the slot's last upload from
        it has finished: a chunk written here (``runners/staged.py``) is uploaded from here."""
        done = self._h2d_done[slot]
        if done is not None:
            done.synchronize()
        return self._host_buffer(("in", slot), max(int(nbytes), 1))[:int(nbytes)]

    def upload(self, arrays: list) -> list:
        """Copy host arrays to the device through this slot's pinned buffer, asynchronously on
        the slot's stream (one copy for all of them); returns device arrays. A first array
        already in the slot's buffer (``stage``) is not copied again: it goes up from there,
        the others from a small buffer of their own."""
        slot = self._slot
        staged = self._pinned.get(("in", slot))
        first = np.ascontiguousarray(arrays[0]) if arrays else None
        if staged is not None and first is not None and first.nbytes and \
                first.ctypes.data == staged[1].ctypes.data:
            lead, rest = [first], arrays[1:]
        else:
            lead, rest = [], arrays
        offs, total = [], 0
        for a in lead + rest:
            offs.append(total)
            total += -(-a.nbytes // 256) * 256
        total = max(total, 256)
        done = self._h2d_done[slot]
        if done is not None:
            done.synchronize()  # the previous upload from these pinned buffers has finished
        skip = -(-first.nbytes // 256) * 256 if lead else 0
        host = self._host_buffer(("in_rest" if lead else "in", slot), max(total - skip, 1))
        for a, o in zip(rest, offs[len(lead):]):
            host[o - skip:o - skip + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        stream = self._streams[slot]
        rt = self.cp.cuda.runtime
        with self._on_device():
            dev = self.cp.empty(total, np.uint8)
            if lead:
                rt.memcpyAsync(dev.data.ptr, first.ctypes.data, first.nbytes,
                               rt.memcpyHostToDevice, stream.ptr)
            if total > skip:
                rt.memcpyAsync(dev.data.ptr + skip, host.ctypes.data, total - skip,
                               rt.memcpyHostToDevice, stream.ptr)
            ev = self._event()
            ev.record(stream)
        self._h2d_done[slot] = ev
        return [dev[o:o + a.nbytes].view(a.dtype) for a, o in zip(lead + rest, offs)]

    def download(self, key: str, arr, count: int) -> Pending:
        """Start copying ``arr[:count]`` to this slot's pinned buffer ``key``."""
        slot = self._slot
        nbytes = int(count) * arr.dtype.itemsize
        host = self._host_buffer(("out", slot, key), max(nbytes, 1))
        stream = self._streams[slot]
        rt = self.cp.cuda.runtime
        with self._on_device():
            if nbytes:
                rt.memcpyAsync(host.ctypes.data, arr.data.ptr, nbytes, rt.memcpyDeviceToHost,
                               stream.ptr)
            ev = self._event()
            ev.record(stream)
        return Pending(ev, host, arr.dtype, int(count))

    # -- timing
    def mark(self):
        with self._on_device():
            ev = self._event(timing=True)
            ev.record(self._streams[self._slot])
        return ev

    def elapsed_ms(self, a, b) -> float:
        b.synchronize()
        return float(self.cp.cuda.get_elapsed_time(a, b))
