"""The native CPU device: the driver's device protocol (``protocol.py``) on this machine's cores,
the kernels of ``kernels/encode_*.cu`` compiled for the host (``build.py``, ``library.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import weakref

import numpy as np

from ..host_pool import SLACK, HostPool
from ..protocol import Capabilities, Device, HostTools, Ready
from . import build as native_build
from .calls import OneCalls
from .spm import SpmCalls
from .unigram import UnigramCalls
from .library import _address, _shared_stream, library
from .settings import (HOST_BLOCK, INLINE_ANY, INLINE_MAX_BYTES, MAX_BLOCKS, SLAB_PER_THREAD,
                       SPLIT_MIN, STREAM_MIN, TEXT_SHORT_MAX, threads_default)


class _OnStream:
    """A "download" of an array a stream is still writing: ``result()`` waits for the stream."""

    def __init__(self, dev: "NativeDevice", slot: int, arr: np.ndarray, count: int):
        self.dev, self.slot, self.arr, self.count = dev, slot, arr, count

    def result(self) -> np.ndarray:
        self.dev._sync(self.slot)
        return self.arr[:self.count]


class _ThreadState(threading.local):
    """A ``NativeDevice``'s per-thread state (chunk workers share the device)."""

    def __init__(self):
        self.slot: "int | None" = None  # the stream context (driver's ``stream(slot)``)
        self.inline = False  # the current stream context runs its work at once
        self.small_chunk = False  # the next stream context is a small chunk's (begin_chunk)
        self.solo = False  # launches run on this thread alone (``solo``)
        self.kernels: dict = {}  # kernel name -> (call, params, masks, value slots, argv)


# Performance notes (tried and dropped; the measurements are in bench/results and git history):
# * one pool over all cores per launch: on a shared box a launch split over both cores waited at
#   every launch for a worker the OS had paused (1.75x slower than one thread); two streams fed
#   by one Python thread: 1.6x one thread on 2 cores (the driver waits at a chunk's fences).
#   Chunk workers, each running its chunk's launches itself, replaced both;
# * two chunks per worker on 16 cores halved the rate (each chunk's Python glue takes the GIL);
# * tables copied into 2 MB pages; a hot table of the first merges and a filter of absent pairs
#   in front of the merge table; one merge lane instead of eight; a fixed-width scan for the
#   lowest pair: no gain, or slower (the short merges are bound by the merge step's own work);
# * dedup off: a hash insert per piece that is not a token costs less than the merges it saves;
# * 4 MB chunks: the same warm speed, 1.5x tiktoken's peak memory; 128 KB: no faster than 256 KB.
class NativeDevice(OneCalls, SpmCalls, UnigramCalls, Device):
    """The kernels on this machine's cores (see the module docstring).

    Inside ``stream(slot)`` (the driver's chunks) launches, scans and marks are queued on that
    slot's stream and run in order on its own thread (``threads // 2`` threads per launch, at
    least one) while Python goes on; ``fence()`` and ``download(...).result()`` wait for it.
    Outside a stream (and with ``threads=1``) every launch runs at once on ``threads`` threads.

    ``threads``: default ``threads_default()``; ``poison``: fill fresh arrays with 0xCD bytes, so
    a kernel reading memory nobody wrote shows up (the tests use it); ``cache_slots``: the
    per-document pass's piece cache, slots of 64 bytes per model (default
    ``perdoc.cache_slots_default()``; 0: none); ``per_doc=False``: no per-document pass (every
    batch and text takes the chunk pipeline: its tests, and a comparison).
    """

    kind = "native"
    xp = np
    block = HOST_BLOCK
    max_blocks = MAX_BLOCKS
    scan_block, scan_items = 1, 1  # unused: scans run on the host (``scan``)

    def __init__(self, threads: "int | None" = None, *, poison: bool = False,
                 cache_slots: "int | None" = None, per_doc: bool = True):
        self.threads = threads_default() if threads is None else int(threads)
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.poison = poison
        self.lib = library()
        self.name = f"native CPU ({self.threads} threads)"
        # the host reads results directly (after ``fence``); two chunks queued at once when
        # streaming (3 measured no faster on 2 cores); every one-call form of host_chunk.h
        self.caps = Capabilities(
            host_memory=True, own_scan=True, in_flight=2,
            chunk_workers=self.threads if self.threads > 1 else 0, chunk_inline=True,
            inline_max_bytes=INLINE_ANY if self.threads == 1 else INLINE_MAX_BYTES,
            text_short_max=TEXT_SHORT_MAX, pretok_inline=True, merge_inline=True,
            spm_inline=True, unigram_inline=True, pretok_program=True,
            kernels=frozenset(self.lib.kernels),
            per_doc=bool(per_doc))
        self.oom_errors = (MemoryError,)
        self._launches: dict = {}
        self._count_lock = threading.Lock()
        self._per_call: list = []  # (kernel names, [calls]) of bound one-text calls
        # per calling thread: the stream context, solo mode, each kernel's argument slots
        self._tls = _ThreadState()
        # id(array) -> (weak reference, address): checks and the address lookup (~5 us) once
        # per array, not once per launch
        self._addr: dict = {}
        self._streams: dict = {}  # slot -> stream handle (made on first use, remade after fork)
        self._live: dict = {}  # slot -> arrays its queued work uses (kept alive until a sync)
        self._pid = os.getpid()
        # workspace pages stay resident from chunk to chunk; small blocks from slabs of 2 MB
        # pages, up to 8 MB of them a thread (each chunk worker's small arrays: ~3 MB at 1 MB
        # chunks on 2 threads, 256 KB ones on 16)
        self.pool = HostPool(slab_budget=SLAB_PER_THREAD * self.threads)
        self._tables_addr: dict = {}  # id(tables) -> _tables_entry
        self._no_dedup = np.zeros(1, np.uint64)  # chunk_inline's dedup set when it has none
        self._per_doc = None  # the per-document pass (per_doc_pass), made on first use
        self.cache_slots = cache_slots

    def defines(self) -> tuple:
        return ()

    def __del__(self):
        # queued work may still use arrays only this device keeps alive
        try:
            self.synchronize()
        except Exception:
            pass

    # -- streams
    def _stream(self, slot: int):
        if self._pid != os.getpid():  # a fork()ed child: the parent's stream threads are gone
            self._streams.clear()
            self._live.clear()
            self._pid = os.getpid()
        h = self._streams.get(slot)
        if h is None:
            h = self._streams[slot] = _shared_stream(self.lib, max(1, self.threads // 2), slot)
            self._live[slot] = []
        return h

    def _sync(self, slot: int) -> None:
        h = self._streams.get(slot)
        if h is not None and self._pid == os.getpid():
            self.lib.lib.gputok_native_stream_sync(h)
            self._live[slot].clear()

    @contextlib.contextmanager
    def stream(self, slot: int):
        # one thread, a small chunk (begin_chunk) or a solo worker: its work runs at once on
        # this thread
        t = self._tls
        inline = self.threads == 1 or t.small_chunk or t.solo
        t.small_chunk = False
        prev = t.slot, t.inline
        t.slot, t.inline = int(slot), inline
        try:
            yield
        finally:
            t.slot, t.inline = prev

    @contextlib.contextmanager
    def solo(self):
        """In this thread, every launch and scan runs at once on this thread alone (no stream,
        no helpers): a chunk worker's whole chunk stays on one core, next to the others'."""
        t = self._tls
        prev = t.solo
        t.solo = True
        try:
            yield
        finally:
            t.solo = prev

    def fence(self) -> None:
        """Wait for the current stream (no-op outside one): results are then readable."""
        t = self._tls
        if t.slot is not None and not t.inline:
            self._sync(t.slot)

    def synchronize(self) -> None:
        for slot in list(self._streams):
            self._sync(slot)

    # -- kernels
    def _kernel(self, name: str) -> tuple:
        """(call, parameter specs, value slots, argv) of a kernel: the slots and the pointer
        array to them are made once per kernel and device, so a launch only fills values."""
        kernels = self._tls.kernels
        got = kernels.get(name)
        if got is None:
            try:
                call, params = self.lib.kernels[name]
            except KeyError:
                raise KeyError(f"{name}: no such kernel in the native module (kernels of "
                               f"{', '.join(native_build.HOST_FILES)})") from None
            vals = (ctypes.c_uint64 * max(1, len(params)))()
            base = ctypes.addressof(vals)
            argv = (ctypes.c_void_p * max(1, len(params)))(*[base + 8 * k
                                                               for k in range(len(params))])
            masks = [(1 << (8 * dt.itemsize)) - 1 for _, _, dt in params]
            got = kernels[name] = (call, params, masks, vals, argv)
        return got

    def launch_shape(self, name: str, count: int) -> tuple:
        """(grid, block) of a grid-stride kernel over ``count`` elements (``DeviceStages.go``):
        HOST_BLOCK-element blocks, or smaller ones for a heavy kernel (``SPLIT_MIN``) over
        all threads at once, so that each thread gets a few."""
        count = max(1, int(count))
        block = HOST_BLOCK
        least = SPLIT_MIN.get(name)
        t = self._tls
        if least is not None and count >= 4 * least and self.threads > 1 and not t.solo \
                and (t.slot is None or t.inline):
            block = min(HOST_BLOCK, max(least, -(-count // (4 * self.threads))))
        return (min(MAX_BLOCKS, -(-count // block)),), (block,)

    def launch(self, name: str, grid, block, args) -> None:
        call, params, masks, vals, argv = self._kernel(name)
        if len(args) != len(params):
            raise TypeError(f"{name}: {len(args)} arguments for {len(params)} parameters")
        addr = self._addr
        for k, a in enumerate(args):
            ptr, writable, dt = params[k]
            if ptr:
                got = addr.get(id(a))
                # (a dead array's id may be reused; a known array may meet another parameter)
                if got is None or got[0]() is not a or (got[2] is not dt and got[2] != dt) or (
                        writable and not a.flags.writeable):
                    _check_array(name, k, a, writable, dt)
                    got = self._remember(a)
                vals[k] = got[1]
            else:
                if type(a) is not dt.type:
                    raise TypeError(f"{name}: argument {k} must be a numpy {dt} scalar (the "
                                    f"parameter's exact type), got {_describe(a)}")
                vals[k] = int(a) & masks[k]  # two's complement bits
        g = int(grid[0]) if len(grid) == 1 else int(np.prod(grid))
        b = int(block[0]) if len(block) == 1 else int(np.prod(block))
        lib = self.lib.lib
        t = self._tls
        if t.solo:
            lib.gputok_native_launch(call, g, b, argv, 1)
        elif t.slot is None or t.inline:
            lib.gputok_native_launch(call, g, b, argv, min(self.threads, g))
        else:  # the stream copies the values: the slots are free again on return
            lib.gputok_native_stream_launch(self._stream(t.slot), call, g, b, vals, len(args))
            self._live[t.slot].append(args)
        self._count(name)

    def _count(self, *names: str) -> None:
        with self._count_lock:  # chunk workers launch side by side
            for name in names:
                self._launches[name] = self._launches.get(name, 0) + 1

    @property
    def launches(self) -> dict:
        """Launches per kernel name, the bound one-text calls' (``call_counter``) added in."""
        with self._count_lock:
            for names, cell in self._per_call:
                k = cell[0]
                if k:
                    cell[0] -= k
                    for name in names:
                        self._launches[name] = self._launches.get(name, 0) + k
        return self._launches

    def call_counter(self, names) -> list:
        """A cell a bound one-text call adds 1 to per call, each call counted as one launch of
        every kernel in ``names`` when ``launches`` is read: a lock and a dict update per
        kernel on every call were 0.5 us of a 3 us short text. (No lock on the add: two
        threads in one model's text call at once may lose a count, never an id.)"""
        cell = [0]
        with self._count_lock:
            self._per_call.append((tuple(names), cell))
        return cell

    def scan(self, arr: np.ndarray, n: int, exclusive: bool) -> None:
        """In-place prefix sum of ``arr[:n]`` (uint32, modulo 2^32)."""
        if not isinstance(arr, np.ndarray) or arr.dtype != np.uint32 \
                or not arr.flags.c_contiguous or not arr.flags.writeable or len(arr) < n:
            raise TypeError(f"scan: a writable contiguous uint32 array of at least {n} elements, "
                            f"got {_describe(arr)}")
        excl = int(bool(exclusive))
        lib = self.lib.lib
        t = self._tls
        if t.slot is None or t.inline or t.solo:
            lib.gputok_native_scan_u32(_address(arr), int(n), excl,
                                       1 if t.solo else self.threads)
        else:
            h = self._stream(t.slot)
            lib.gputok_native_stream_scan_u32(h, _address(arr), int(n), excl)
            self._live[t.slot].append(arr)
        self._count("scan_add")

    def _remember(self, a: np.ndarray) -> tuple:
        """(weak reference, address, dtype) of a contiguous array, kept so a launch checks and
        looks up each array once (~5 us), not once per use."""
        if len(self._addr) > 4096:
            self._addr.clear()
        got = self._addr[id(a)] = (weakref.ref(a), _address(a), a.dtype)
        return got

    def host_block(self, nbytes: int) -> np.ndarray:
        """Host memory for a batch's output (``driver.assemble``): a block of the workspace pool,
        whose pages the batch's chunks have just used (a 4 MB batch's 4 MB of ids: ~5 ms in
        fresh pages on the 2-core box, ~0.5 ms in these). It goes back to the pool when the
        caller drops the last array that uses it."""
        return self.pool.empty(nbytes, np.uint8, SLACK)

    def work_block(self, nbytes: int) -> np.ndarray:
        """Host memory for a chunk's input (the str packer's bytes, ``_native_pieces``): a
        workspace block (``WORK_SLACK``), back to the pool when the chunk is done."""
        return self.pool.empty(nbytes, np.uint8)

    def _bare(self, n, dtype):
        """``empty`` for arrays the device's own calls use (no launch: not remembered)."""
        a = self.pool.empty(n, dtype)
        if self.poison:
            a.view(np.uint8).fill(0xCD)
        return a

    def empty(self, n, dtype):
        a = self.pool.empty(n, dtype)
        if self.poison:
            a.view(np.uint8).fill(0xCD)
        self._remember(a)
        return a

    def zeros(self, n, dtype):
        a = self.pool.empty(n, dtype)
        a.fill(0)
        self._remember(a)
        return a

    def full(self, n, value, dtype):
        a = self.pool.empty(n, dtype)
        a.fill(value)
        self._remember(a)
        return a

    def dummy(self, dtype):
        return np.zeros(1, dtype)

    def put(self, host):
        return np.ascontiguousarray(host)

    def upload(self, arrays: list) -> list:
        return [np.ascontiguousarray(a) for a in arrays]

    def download(self, key, arr, count):
        t = self._tls
        if t.slot is None or t.inline:
            return Ready(arr[:int(count)])
        return _OnStream(self, t.slot, arr, int(count))

    def memory_budget(self) -> int:
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return 1 << 32

    def begin_chunk(self, nbytes: int = 0) -> None:
        """A chunk of ``nbytes`` of text is about to be queued (in the next ``stream``). With
        chunk workers the driver streams only a batch of one chunk, which nothing overlaps: it
        runs at once with every thread on each launch (a 1-4 MB blob without safe cut points:
        1.6x faster than on one stream's thread)."""
        self._tls.small_chunk = nbytes < STREAM_MIN or self.caps.chunk_workers > 1

    def release(self) -> None:
        self.synchronize()
        self.trim_idle()

    def per_doc_pass(self):
        """The per-document pass on this device's threads (``perdoc.PerDocPass``)."""
        got = self._per_doc
        if got is None:
            from .perdoc import PerDocPass

            with self._count_lock:
                if self._per_doc is None:
                    self._per_doc = PerDocPass(self.lib, self.threads, self.cache_slots)
                got = self._per_doc
        return got

    def host_tools(self) -> HostTools:
        """The library's UTF-8 check, str packer, id lists and decode join
        (``protocol.HostTools``)."""
        lib = self.lib
        return HostTools(lib.lister, lib.packer, lib.utf8_check, lib.joiner, lib.first_token)

    def trim_idle(self) -> None:
        """Free the workspace no chunk is using (``driver.encode_list``, after a long text)."""
        self.pool.trim()

    # -- timing (marks are timestamps the stream writes when it gets there, like GPU events)
    def mark(self):
        t = self._tls
        if t.slot is None or t.inline:
            return np.array([time.perf_counter()])
        when = np.zeros(1, np.float64)
        self.lib.lib.gputok_native_stream_time(self._stream(t.slot), _address(when))
        self._live[t.slot].append(when)
        return when

    def elapsed_ms(self, a, b) -> float:
        self.synchronize()
        return float(b[0] - a[0]) * 1e3




def _check_array(name: str, k: int, a, writable: bool, dt: np.dtype) -> None:
    if type(a) is not np.ndarray or a.dtype != dt or not a.flags.c_contiguous:
        raise TypeError(f"{name}: argument {k} must be a contiguous numpy array of {dt}, got "
                        f"{_describe(a)}")
    if writable and not a.flags.writeable:
        raise TypeError(f"{name}: argument {k} is written by the kernel but the array is "
                        "read-only")


def _describe(a) -> str:
    if isinstance(a, (np.ndarray, np.generic)):
        return f"{type(a).__name__} of {a.dtype}"
    return type(a).__name__

