"""The native backend: the device-neutral driver (``driver.py``) on every CPU core.

The encode kernels (``kernels/encode_*.cu``) are compiled for the host by the machine's C++
compiler (``native_build.py``: the same sources every device gets, plus the host dialect header
``kernels/dialect_host.h``; built on first use and cached by source digest, compiler and flags).
``NativeDevice`` is the adapter the driver sees, the CPU counterpart of ``cuda.CupyDevice``:

* a batch of several chunks runs on *chunk workers* (``chunk_workers``, one per thread): the
  driver hands each chunk to a worker thread that runs it start to end, every launch at once on
  that thread alone (``solo``; ctypes releases the GIL), so the chunks run side by side and no
  chunk waits for another's fences;
* otherwise ``launch`` runs a kernel's grid through ctypes, blocks handed out dynamically to
  helper threads; inside the driver's ``stream(slot)`` it is queued on that slot's stream
  instead, a C++ thread that runs its queue in order (``host_runtime.h``), as on a GPU (with
  one thread per launch; used only without chunk workers, for chunks of ``STREAM_MIN`` or more);
* ``scan`` overrides the block scans of ``encode_scan.cu`` (shared memory and barriers have no
  plain-loop form) with the runtime's two-pass parallel scan;
* memory is numpy arrays, host<->device copies are views; ``fence()`` waits for the current
  stream, so the driver may size per-entry arrays by the real entry count (``host_memory``).

Without a compiler the backend is unavailable (``gputok info`` says why) and ``"auto"`` takes
numpy; a compiler that fails on the sources is a counted fallback to numpy with a warning.

Performance notes (2-core shared VM whose second core is mostly taken by other work; the runs:
bench/results/encode.md, and git history has the rest): ~60 MB/s per core on prose and
code, ~35 on multilingual text (tiktoken 0.14: ~10-16; one thread, CPU time, warm). Time on one
core, o200k prose: whole-token lookup 23%, span walk 22%, short merges 19%, classes 4%, emit
3%; multilingual text spends 41% in the short merges. Every hash probe is a cache miss on 8 MB
tables. Decisions:
* dedup on (``create``): each distinct piece that is not a whole token merges once per chunk;
  a hash insert per such piece costs less than the merges it saves (multilingual -20%, code -8%,
  prose even);
* whole chunks per thread, not one pool over all cores per launch: on the shared box a launch
  split over both cores waited at every launch for a worker the OS had paused (1.75x slower
  than one thread). Two streams fed by one Python thread came next: 1.6x one thread on 2
  cores, because the driver waits at a chunk's fences (entry counts) while the other stream
  runs dry. Chunk workers, each running its chunk's launches itself, replaced them: +10-58%
  over the streams (same process, alternating, best of 6; cl100k and o200k, prose, code and
  multilingual), 2.6-3.6x tiktoken's batch API warm on the 2-core box;
* chunks of at most 128 KB per chunk worker, from 256 KB to 1 MB (``chunk_bytes_for``): each
  worker's chunk touches ~12 bytes of new workspace per byte of text in a fresh process, and
  where first touches are dear (a VM whose host takes idle memory back: page zeroing was
  0-46% of a cold pass's CPU samples on the 2-core box) fewer bytes in flight win. There,
  bench_encode, o200k, 5 rounds, two runs each, 1 MB / 256 KB chunks alternated: cold over
  tiktoken's batch prose 2.53 / 3.43x and 3.52 / 3.31x, code 3.77 / 3.54x and 3.04 / 3.72x,
  multilingual 2.17 / 3.76x and 2.46 / 3.25x (its cold MB/s 35 -> 45-49; warm the same;
  native-chunks-2026-11-28.md, bench/results at a1c9f0b). With many workers the cap stays 1 MB:
  a chunk's
  glue holds the interpreter's lock (~0.2 ms), and on 16 cores two chunks per worker halved
  the rate (below). 1-8 MB measured the same warm speed; 4 MB chunks put ``gputok encode`` at
  1.5x tiktoken's peak memory. Arrays come from ``np.empty`` / ``np.zeros``: workspace a
  chunk never touches (the long-piece arrays when it has no long piece, ids past the last)
  never becomes resident;
* a launch costs ~5 us of Python (argument checks; value slots and pointers are made once per
  kernel) plus a hand-off to the stream's thread; chunks under ``STREAM_MIN`` run on the calling
  thread, and so does a batch of one chunk when there are chunk workers (``begin_chunk``: each
  launch on every thread);
* workspace from a pool (``host_pool.py``): fresh ``np.empty`` arrays of a few MB are new
  mappings, and the first touch of every page is a fault; arrays whose last view died go back to
  the pool and the next chunk reuses them resident (+9-10% on cl100k prose and o200k code, best
  of 6 in one process). ``release()`` drops the idle blocks;
* ``encode_piece_kind`` hashes each piece 16 entries ahead and prefetches its table slots
  (``ENC_HOST_PREFETCH_AHEAD``, dialect_host.h): +4-7% on multilingual text, even elsewhere.
  Tried and dropped: tables copied into 2 MB (transparent huge) pages, no gain measured.
* a chunk worker's chunk is one sequence of calls (``chunk_inline``, kernels/host_chunk.h),
  whose span walk goes through the chunk in order on one thread and lists the entries' starts
  as it finds them, where the launches write a flag per byte for a scan and a compaction (-12%
  on o200k prose, one thread); a chunk's small arrays share two blocks and a big chunk's output
  is sized by its id count: a fresh process's first 4 MB batch touches ~10 MB less new memory,
  whose first touch (zeroing, in a VM backing it) is most of what the first batch costs over
  the next;
* the byte blocks after the tables' slots (device_tables.byte_pair_block, whole_byte_block):
  a piece's first pair priorities come from a 256 KB block instead of ~45% of the merge's
  hash probes on multilingual text, and a one-byte piece (15-23% of the pieces) takes its id
  with one load. Fresh processes alternated, 2-core box: o200k multilingual cold 99 -> 87 ms
  for 4 MB (warm CPU -7%), prose 59 -> 50, code 57 -> 48, cl100k multilingual 103 -> 80
  (native-byteblocks-2026-11-27.md, bench/results at dd774ff); the cold pass gains more than the
  warm
  one: fewer first touches of the 8 MB tables;
* THE BYTES HASH reads a piece a word at a time, and the native device loads that word whole
  (``enc_word_at``, dialect_host.h; a piece under 8 bytes where the 8 bytes stay in its 4 KB
  page): a short piece's whole-token lookup has no byte loop to mispredict (-24% in it);
* the short merges are bound by the merge step's own work, not by the table: a hot table of
  the first 16K merges and a filter of absent pairs (1 MB, cached) in front of the 8 MB one
  made them slower, and one merge lane instead of eight ran as fast once the step's slots are
  prefetched. The step's mispredicted branches were the cost (a simulator: ~5.5 per step, ~300
  instructions): the pair probe two slots at a time with the answer selected, and a short
  run's gap closed by one fixed-size move (dialect_host.h, ENC_PROBE_TWO_SLOTS,
  ENC_HOST_SHIFT_BLOCK) took o200k multilingual's short merges 73.6 -> 64.0 ms for 4 MB (one
  thread, best of 50), a fresh process's 4 MB batch 120 -> 103 ms (median of 16, alternated
  with the code before). Tried and dropped: a fixed-width scan for the lowest pair (64- and
  32-bit keys, padded runs): more instructions than the mispredictions it saved, at -O2;
* a streamed batch's chunks put their ids into the batch's output as they finish
  (``emit.Placement``): a big chunk emits straight into its place when every earlier chunk
  has one; the others are copied in by the thread that places the chunk before them. The
  chunks' own outputs go back to the pool for the next chunks, and no join of the whole batch
  is left for the end (~10 ms on one thread in a fresh process, 4 MB of new pages);
* a streamed batch builds its plan on its own thread after packing its first chunk: built by a
  worker meanwhile it took the interpreter's lock from the packing (the first chunk started
  6-28 ms into a fresh process's batch; now 7-12 ms). The scanner's module loads with this
  module, not inside the first batch;
* first touches of new memory are the cold pass's tax on a VM (0.6 ms per MB here, and 5-10
  ms spikes when the host backs a region): a fresh process's first 4 MB batch makes ~15 MB of
  new pages (workspace ~8-10 MB, its 4 MB of ids), tiktoken's ~200 MB; 128 KB chunks
  instead of 256 KB and workspace without huge pages measured the same;
* on 16 cores (Xeon, cuda-h200-2026-11-27.md, bench/results at 8bb2bd5) one thread runs 32 MB/s
  and 16
  threads 190-205 MB/s on prose, 100-110 on multilingual text (4.4x and 3.5-4x tiktoken's batch
  API on as many threads, warm): the workers are busy ~70% of the chunk loop and each runs at
  12-17 MB/s. Cutting the batch into two chunks per worker halved the rate (every chunk's
  Python glue, about ten launches and its workspace, takes the GIL, and 16 workers queue on
  it): what would scale further is a chunk's launches in one call into the library;
* a batch of one chunk runs each launch over every thread; the heavy kernels (``SPLIT_MIN``)
  then take blocks of a few hundred to a few thousand elements, four per thread, so a 10 KB
  text's ~2,500 entries are not one block on one core (10 KB of base64: ~12% faster).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import threading
import time
import weakref

import numpy as np

from ..stages import lists, pack
# the pattern scanner's module (its class tables and cut rules: every plan of this device
# uses them) loads with the device, not inside a model's first batch (~1.5-5 ms there)
from ..stages import scan as _scan  # noqa: F401
from . import native_build
from .driver import CHUNK_LIMIT, DeviceBackend
from .host_pool import SLACK, HostPool
from .protocol import Capabilities, Device

CHUNK_BYTES = 1 << 20  # text per chunk at most (see the performance notes)
CHUNK_PER_WORKER = 1 << 17  # the chunk cap grows by this per chunk worker (chunk_bytes_for)
CHUNK_MIN = 1 << 18  # and starts here
EXACT_OUT_BYTES = 1 << 16  # chunks above this get an output of their id count (chunk_inline)
TEXT_SHORT_MAX = EXACT_OUT_BYTES  # bytes: a longer text's chunk takes chunk_inline
SLAB_PER_THREAD = 8 << 20  # the workspace pool's slab budget per thread (host_pool.py)
STREAM_MIN = 256 << 10  # smaller chunks run on the calling thread: a stream hand-off per launch
#                       (~50 us on the shared box) is not worth it for a few ms of work
BLOCK = 1 << 14  # elements per work item of a launch
# A launch spread over the threads (a batch of one chunk) cuts the heavy kernels into blocks of
# at least this many elements (about 25 us of work each), four per thread, from four blocks'
# worth on: with 16K-element blocks a 10 KB text's ~2,500 entries were one block on one core
# (the short merges of base64 cost ~100 ns an entry). The cheap kernels (~1 ns a byte) keep
# BLOCK: waking a helper (~10-30 us) costs more than they would save.
SPLIT_MIN = {"encode_merge_short": 256, "encode_merge_long": 1, "encode_piece_kind": 512,
             "encode_pretok_spans": 2048, "encode_o200k_spans": 2048,
             "encode_wordpiece": 256}
MAX_BLOCKS = 1 << 20  # a grid always covers its range in one stride
# a batch of one chunk this short runs as one call where the device has that form
# (``chunk_inline``, ~0.1 ms of launches saved); longer ones launch stage by stage, their heavy
# kernels cut over every core (``launch_shape``): on the 2-core box 4 KB of prose took 0.26 ->
# 0.18 ms, 10 KB 0.44 -> 0.30, and from ~30 KB (base64) or ~100 KB (prose) the two cores won
INLINE_MAX_BYTES = 16 << 10


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


def chunk_bytes_for(workers: int) -> int:
    """The most text in one chunk for ``workers`` chunk workers: ``CHUNK_PER_WORKER`` each,
    from ``CHUNK_MIN`` up to ``CHUNK_BYTES`` (2 workers: 256 KB; 8 and more: 1 MB). Each
    worker's chunk touches ~12 bytes of workspace per byte of text, new memory in a fresh
    process; a chunk's Python glue holds the interpreter's lock for ~0.2 ms, which many workers
    queue on (see the performance notes)."""
    return int(min(CHUNK_BYTES, max(CHUNK_MIN, int(workers) * CHUNK_PER_WORKER)))


def create(threads: "int | None" = None, **options) -> DeviceBackend:
    """The native backend: the driver over a ``NativeDevice`` (builds the module on first use,
    raising ``native_build.NativeBuildError`` when the compiler fails).

    >>> create().dev.name  # doctest: +SKIP
    'native CPU (2 threads)'
    """
    dev = NativeDevice(threads)
    options.setdefault("chunk_bytes", chunk_bytes_for(dev.caps.chunk_workers))
    options.setdefault("dedup", True)  # each distinct piece merged once per chunk (see notes)
    be = DeviceBackend(dev, name="native", **options)
    be.start_workers()
    return be


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
        vp, u, ll, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_longlong, ctypes.c_int
        lib.gputok_native_launch.argtypes = [vp, u, u, vp, i]
        lib.gputok_native_scan_u32.argtypes = [vp, ll, i, i]
        lib.gputok_native_stream_new.argtypes = [i]
        lib.gputok_native_stream_new.restype = vp
        lib.gputok_native_stream_launch.argtypes = [vp, vp, u, u, vp, i]
        lib.gputok_native_stream_scan_u32.argtypes = [vp, vp, ll, i]
        lib.gputok_native_stream_time.argtypes = [vp, vp]
        lib.gputok_native_stream_sync.argtypes = [vp]
        lib.gputok_jsonl_parse.argtypes = [vp, ll, vp, ll, vp, vp, vp, vp, ll, vp]
        lib.gputok_jsonl_parse.restype = None
        lib.gputok_utf8_valid.argtypes = [ctypes.c_char_p, ll, i]
        lib.gputok_utf8_valid.restype = i
        lib.gputok_native_merge_inline.argtypes = [vp, vp, vp, u, vp, vp, u, vp, u,
                                                   vp, vp, u, i, vp, vp, vp, vp]
        lib.gputok_native_merge_inline.restype = i
        lib.gputok_native_chunk_pretok.argtypes = [vp, ll, vp, vp, ll, vp, vp, u, i, i, i, i,
                                                   vp, vp, vp]
        lib.gputok_native_chunk_pretok.restype = ll
        lib.gputok_native_chunk_finish.argtypes = [vp, ll, vp, ll, vp, vp, ll, vp, vp, u, vp, u,
                                                   vp, vp, vp, u, u, vp, vp, vp, vp, vp, vp, vp,
                                                   i, vp, vp]
        lib.gputok_native_chunk_finish.restype = i
        lib.gputok_native_chunk_emit.argtypes = [u, vp, vp, vp, vp, vp, ll, i, vp, vp]
        lib.gputok_native_chunk_emit.restype = None
        lib.gputok_native_text_short.argtypes = [ctypes.c_char_p, ll, vp, vp, ctypes.c_double,
                                                 i, vp, vp]
        lib.gputok_native_text_short.restype = ll
        try:
            threads = threads_default()
        except ValueError:  # a bad $GPUTOK_NUM_THREADS is reported where the device is made
            threads = 1
        pack.use_utf8_check(lambda buf, n: lib.gputok_utf8_valid(buf, n, threads))  # bytes input
        lib.gputok_str_layout.argtypes = [vp, ll, i, i, i, i, vp, vp, vp, vp]
        lib.gputok_str_layout.restype = None
        lib.gputok_pack_utf8.argtypes = [vp, vp, vp, ll, vp]
        lib.gputok_pack_utf8.restype = ll
        pack.use_str_layout(lib.gputok_str_layout, lib.gputok_pack_utf8)  # str batches
        py_lib = ctypes.PyDLL(self.path)  # (its list builders make Python objects: GIL held)
        id_list, id_list_parts = py_lib.gputok_id_list, py_lib.gputok_id_list_parts
        id_list.argtypes = [vp, i, ll, vp, ll]
        id_list.restype = ctypes.py_object
        id_list_parts.argtypes = [vp, vp, i, i, vp, ll]
        id_list_parts.restype = ctypes.py_object
        lists.use_id_list(id_list, id_list_parts)  # encode's id lists
        self.max_args = lib.gputok_native_max_args()
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
    """``"cu1 u8 mu4"`` -> ((is pointer, writable, numpy dtype), ...)."""
    out = []
    for tok in sig.split():
        ptr = tok[0] in "cm"
        code = tok[1:] if ptr else tok
        out.append((ptr, tok[0] == "m", np.dtype(f"{code[0]}{code[1:]}")))
    return tuple(out)


_libraries: dict = {}
_build_lock = threading.Lock()


def library(compile: bool = True) -> "_Library | None":
    """The module for the current sources (built or loaded once per process); with
    ``compile=False`` None when the cache does not have it yet."""
    with _build_lock:
        path = native_build.build(compile)
        if path is None:
            return None
        got = _libraries.get(str(path))
        if got is None:
            got = _libraries[str(path)] = _Library(path)
        return got


_stream_handles: dict = {}


def _shared_stream(lib: _Library, threads: int, slot: int):
    """Stream threads are per process, not per device (devices come and go; a stream's thread
    lives as long as the process): one per (library, threads per launch, slot)."""
    key = (os.getpid(), lib.path, threads, slot)
    with _build_lock:
        h = _stream_handles.get(key)
        if h is None:
            h = _stream_handles[key] = lib.lib.gputok_native_stream_new(threads)
        return h


def _address(a: np.ndarray) -> int:
    if a.flags.writeable:
        try:  # a writable contiguous buffer: ~0.5 us (``__array_interface__`` builds a dict: 1.5)
            return ctypes.addressof(ctypes.c_char.from_buffer(a))
        except (TypeError, ValueError, BufferError):  # empty or strided
            pass
    return a.__array_interface__["data"][0]  # (read-only: no exception to raise and catch, 3.5)


class _Ready:
    """A finished "download" (host memory already): the interface of ``devices.Pending``."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value


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


class NativeDevice(Device):
    """The kernels on this machine's cores (see the module docstring).

    Inside ``stream(slot)`` (the driver's chunks) launches, scans and marks are queued on that
    slot's stream and run in order on its own thread (``threads // 2`` threads per launch, at
    least one) while Python goes on; ``fence()`` and ``download(...).result()`` wait for it.
    Outside a stream (and with ``threads=1``) every launch runs at once on ``threads`` threads.

    ``threads``: default ``threads_default()``; ``poison``: fill fresh arrays with 0xCD bytes, so
    a kernel reading memory nobody wrote shows up (the tests use it).
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
        # the host reads results directly (after ``fence``); two chunks queued at once when
        # streaming (3 measured no faster on 2 cores); every one-call form of host_chunk.h
        self.caps = Capabilities(
            host_memory=True, own_scan=True, in_flight=2,
            chunk_workers=self.threads if self.threads > 1 else 0, chunk_inline=True,
            inline_max_bytes=CHUNK_LIMIT if self.threads == 1 else INLINE_MAX_BYTES,
            text_short_max=TEXT_SHORT_MAX, pretok_inline=True, merge_inline=True)
        self.oom_errors = (MemoryError,)
        self.launches: dict = {}
        self._count_lock = threading.Lock()
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
        BLOCK-element blocks, or smaller ones for a heavy kernel (``SPLIT_MIN``) launched over
        all threads at once, so that each thread gets a few."""
        count = max(1, int(count))
        block = BLOCK
        least = SPLIT_MIN.get(name)
        t = self._tls
        if least is not None and count >= 4 * least and self.threads > 1 and not t.solo \
                and (t.slot is None or t.inline):
            block = min(BLOCK, max(least, -(-count // (4 * self.threads))))
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
                self.launches[name] = self.launches.get(name, 0) + 1

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

    def merge_inline(self, tables, data: bytes, starts: np.ndarray, spec: np.ndarray,
                     has_long: bool, whole: bool) -> tuple:
        """The merge stage of a few host-cut pieces in one call (kernels/host_merge.h: the
        kernels of ``DeviceStages.merge`` in order on this thread, no dedup): (count per
        entry, scratch). ``data``: the pieces' bytes; ``starts``: uint32 entry starts (the
        sentinel's too); ``spec``: uint32 per entry. A 10 KB run: ~0.1 ms of Python (argument
        checks, workspace, three launches) saved, about what its merge costs. ``data`` may be
        a uint8 array instead (a long ASCII text's own characters, ``pack.utf8_data``)."""
        from ..stages.merge import LONG_PIECE

        sc = tables.scalars
        cap, n = len(spec), len(data)
        units = n // LONG_PIECE + 2
        # one uint32 block: count (cap + 1), scratch (n), then the kernels' workspace (host_merge.h)
        ws32 = self._bare(2 * cap + 1 + 2 * n + (2 * n + units if has_long else 0), np.uint32)
        ws64 = self._bare(n + 2 * units if has_long else 1, np.uint64)
        count, scratch = ws32[:cap + 1], ws32[cap + 1:cap + 1 + n]
        base32 = _address(ws32)
        addr = self._table_addresses(tables)
        self.lib.lib.gputok_native_merge_inline(
            data if isinstance(data, bytes) else _address(data), _address(starts),
            _address(spec), cap, addr[0], addr[1], sc["w_bits"] if whole else 0, addr[2],
            sc["t_bits"], addr[3], addr[4], n, has_long, base32, base32 + 4 * (cap + 1),
            base32 + 4 * (cap + 1 + n), _address(ws64))
        self._count("encode_piece_kind", "encode_merge_short",
                    *(("encode_merge_long",) if has_long else ()))
        return count[:cap], scratch

    def chunk_inline(self, tables, hc, out_dtype, dedup_slots_per_entry: float = 0.0,
                     out_for=None) -> tuple:
        """One chunk's whole kernel sequence in two calls on this thread (kernels/host_chunk.h:
        pre-tokenization, entries, merge and emit as ``DeviceBackend._kernels`` launches them,
        for a chunk cut on the device, its arrays from the same pool; a chunk over
        ``EXACT_OUT_BYTES`` emits in a third call, into an output sized by its id count):
        (ids, document offsets (int64, n_docs + 1)). A chunk worker then holds the
        interpreter's lock for two or three calls instead of ~20 launches and allocations, and
        a short text skips them too.
        ``dedup_slots_per_entry``: the dedup set's size per entry as ``DeviceStages.merge``
        sizes it (0: no dedup). ``out_for(count)``: where a big chunk emits its ``count`` ids
        (an array of that many: the batch's output, ``emit.Placement``), or None (its own)."""
        sc = tables.scalars
        data, off, mpos, mbits, ss, sid = hc.inputs
        n, n_docs = hc.n, hc.n_docs
        lib = self.lib.lib
        o200k = bool(sc.get("o200k"))
        empty = self._bare  # (the arrays meet no launch: no address cache entries)
        # the small arrays of a chunk share blocks: one block of 2 MB pages where a chunk has
        # several 1 MB arrays, whose 4 KB pages were most of a fresh process's first page faults
        # (addresses by offset from each block's start: ~0.5 us an array, ~20 arrays a call,
        # were ~10% of a 1,000-character text's encode_short)
        ent = empty(n + 2, np.uint32)
        at_ent, at_data = _address(ent), _address(data)
        addr = self._table_addresses(tables)
        cap = self._pretok(tables, at_data, n, mpos, mbits, hc.n_marks, at_ent)
        # one block: the dedup set (emptied by the call), then pstart, spec, owner (cap),
        # count (cap + 1), doc_entry (n_docs + 1)
        dbits = max(4, int(max(cap * dedup_slots_per_entry, 2) - 1).bit_length()) \
            if dedup_slots_per_entry else 0
        n_slots = 1 << dbits if dbits else 0
        sizes = (cap, cap, cap, cap + 1, n_docs + 1)
        block = empty(n_slots + (sum(sizes) + 1) // 2, np.uint64)
        at_block = _address(block)
        at_words = at_block + 8 * n_slots
        ends = list(itertools.accumulate(sizes, initial=0))
        at_ws = [at_words + 4 * lo for lo in ends[:-1]]  # pstart, spec, owner, count, doc_entry
        ran_long = ctypes.c_int(0)
        u16 = np.dtype(out_dtype).itemsize == 2
        out_doc = empty(n_docs + 1, np.int64)
        # a small chunk emits in the same call into an output of one id per byte; a big one
        # gets an output of its id count, from the pages it will write (a third call)
        out = empty(max(n, 1), out_dtype) if n <= EXACT_OUT_BYTES else None
        at_out_doc = _address(out_doc)
        status = lib.gputok_native_chunk_finish(
            at_data, n, _address(off), n_docs, _address(ss), _address(sid), hc.n_spans,
            addr[0], addr[1], int(sc["w_bits"]), addr[2], int(sc["t_bits"]), addr[3], addr[4],
            at_block if dbits else _address(self._no_dedup), dbits, cap, at_ent, *at_ws,
            ctypes.byref(ran_long), int(u16), None if out is None else _address(out),
            at_out_doc)
        if status != 0:
            raise MemoryError(f"native device: no memory for the long pieces of a {n}-byte "
                              "chunk")
        if out is None:
            total = int(block[n_slots:].view(np.uint32)[ends[3] + cap])  # count[cap]
            out = out_for(total) if out_for is not None else None
            if out is None:
                out = empty(max(total, 1), out_dtype)
            lib.gputok_native_chunk_emit(cap, at_ws[0], at_ws[2], at_ws[3], at_ent, at_ws[4],
                                         n_docs, int(u16), _address(out), at_out_doc)
        del block, ent
        self._count(*self._chunk_names(o200k, u16, bool(hc.n_marks), bool(ran_long.value),
                                       bool(dbits)))
        return out[:int(out_doc[n_docs])], out_doc

    def text_short(self, tables, data: bytes, seg_bits: np.ndarray, out_dtype,
                   dedup_slots_per_entry: float = 0.0) -> np.ndarray:
        """One short text's ids (one document, one segment whose mark bits are ``seg_bits``,
        no special tokens) in one call with the calling thread's own workspace
        (kernels/host_chunk.h, ``gputok_native_text_short``): what ``chunk_inline`` does for
        such a chunk, without its ~15 arrays and addresses (~20 us of a 1,000-character
        text's ~60). ``data`` at most ``TEXT_SHORT_MAX`` bytes."""
        n = len(data)
        out = self._bare(max(n, 1), out_dtype)
        u16 = out.itemsize == 2
        ran_long = ctypes.c_int(0)
        got = self.lib.lib.gputok_native_text_short(
            data, n, self._text_tab(tables), seg_bits.ctypes.data,
            float(dedup_slots_per_entry), int(u16), _address(out), ctypes.byref(ran_long))
        if got < 0:
            raise MemoryError(f"native device: no memory for the workspace of a {n}-byte text")
        self._count(*self._chunk_names(bool(tables.scalars.get("o200k")), u16, True,
                                       bool(ran_long.value), dedup_slots_per_entry > 0))
        return out[:got]

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _chunk_names(o200k: bool, u16: bool, marks: bool, ran_long: bool, dedup: bool) -> tuple:
        """The kernels one ``chunk_inline`` or ``text_short`` call ran, for the launch counts."""
        names = ["encode_o200k_classify", "encode_o200k_spans"] if o200k else [
            "encode_pretok_classify", "encode_pretok_spans"]
        names += ["encode_piece_kind", "encode_merge_short",
                  "encode_emit_u16" if u16 else "encode_emit_u32", "encode_doc_offsets",
                  "scan_add"]
        if marks:
            names.append("encode_pretok_marks")
        if ran_long:
            names.append("encode_merge_long")
        if dedup:
            names.append("encode_dup_counts")
        return tuple(names)

    def _pretok(self, tables, at_data: int, n: int, mpos, mbits, n_marks: int,
                at_ent: int) -> int:
        """Pre-tokenization of ``n`` bytes at ``at_data`` (kernels/host_chunk.h,
        ``gputok_native_chunk_pretok``): the entries' starts into ``at_ent`` (n + 2 uint32),
        the sentinel's (n) last; returns the entry count."""
        sc = tables.scalars
        o200k = bool(sc.get("o200k"))
        addr = self._table_addresses(tables)
        marks = self._bare(2 * (n + 2), np.uint8)  # mark, then cls (n + 2 each)
        at_marks = _address(marks)
        return int(self.lib.lib.gputok_native_chunk_pretok(
            at_data, n, _address(mpos), _address(mbits), n_marks, addr[5], addr[6],
            int(sc["n_letters"]), int(o200k),
            0 if o200k else int(sc["gpt2"]), 0 if o200k else int(sc["digit_group"]),
            0 if o200k else int(sc["end_whole"]), at_marks, at_marks + n + 2, at_ent))

    def pretok_inline(self, tables, data: bytes, mpos: np.ndarray, mbits: np.ndarray,
                      limit: int) -> "np.ndarray | None":
        """The piece starts of one text cut on this thread (``DeviceBackend.encode_few``):
        uint32, the sentinel's (``len(data)``) last, or None where it has more than ``limit``
        pieces. ``mpos``/``mbits``: its marks (the segment's ends). Its workspace is 2 bytes a
        byte (mark, class) and the starts: the host scanner's numpy passes over a 10 MB emoji
        run made ~46 MB of temporaries, whose first touch in a fresh process cost ~60 ms."""
        n = len(data)
        ent = self._bare(n + 2, np.uint32)
        cap = self._pretok(tables, _address(np.frombuffer(data, np.uint8)), n, mpos, mbits,
                           len(mpos), _address(ent))
        self._count(*(("encode_o200k_classify", "encode_o200k_spans")
                      if tables.scalars.get("o200k") else
                      ("encode_pretok_classify", "encode_pretok_spans")), "encode_pretok_marks")
        return ent[:cap].copy() if cap - 1 <= limit else None

    def _table_addresses(self, tables) -> tuple:
        """Addresses of a model's tables (w_slots, w_tok_bytes, t_slots, byte_ids, join, and
        the pre-tokenizer's cls_table and letters where it has them: else 0), kept per tables
        object."""
        return self._tables_entry(tables)[1]

    def _text_tab(self, tables) -> int:
        """The address of ``tables``' words for ``gputok_native_text_short`` (ENC_TAB_*: the
        tables' addresses, then the scalars), kept with the addresses."""
        return self._tables_entry(tables)[3]

    def _tables_entry(self, tables) -> tuple:
        """(weak reference, addresses, ENC_TAB_* words, their address) of a tables object."""
        got = self._tables_addr.get(id(tables))
        if got is None or got[0]() is not tables:
            a, sc = tables.arrays, tables.scalars
            addr = tuple(_address(a[k]) if k in a else 0
                         for k in ("w_slots", "w_tok_bytes", "t_slots", "byte_ids", "join",
                                   "cls_table", "letters"))
            o200k = bool(sc.get("o200k"))
            words = (ctypes.c_uint64 * 14)(
                *addr, int(sc["w_bits"]), int(sc["t_bits"]), int(sc.get("n_letters", 0)),
                int(o200k), 0 if o200k else int(sc.get("gpt2", 0)),
                0 if o200k else int(sc.get("digit_group", 0)),
                0 if o200k else int(sc.get("end_whole", 0)))
            got = self._tables_addr[id(tables)] = (weakref.ref(tables), addr, words,
                                                   ctypes.addressof(words))
        return got

    # -- memory (host memory: copies are views)
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
            return _Ready(arr[:int(count)])
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
