"""The cuda backend: the batch pipeline as CUDA kernels (``kernels/encode_*.cu``) run by CuPy.

Documents are packed into one UTF-8 buffer and cut into chunks of whole documents (a few
hundred MB, sized from free GPU memory). Per chunk:

    host     special tokens: one bytes regex over the buffer finds them; documents are split
             into segments around them (``segment_marks``); disallowed ones raise first
    pretok   encode_pretok.cu: UTF-8 decode + the class table of ``stages/scan.py``, its window
             rule and sparse corrections, in byte coordinates -> one flag per piece start
    entries  encode_scan.cu (exclusive scan of the flags) + compaction -> piece starts, special
             tokens and a sentinel as one entry list, plus each document's first entry
    merge    encode_merge.cu: whole-token lookup (hash of token bytes, hits confirmed by
             comparing bytes), pieces < 256 bytes one thread each (the sequential rule),
             longer pieces one thread each in O(L log L) (linked list + indexed heap)
    emit     encode_scan.cu + encode_emit.cu: counts -> exclusive scan -> ids scattered into one
             output (uint16 when the vocabulary fits) + per-document offsets

Pre-tokenization runs on the GPU for the GPT-2 (r50k, p50k), cl100k, Llama 3 and Qwen2
patterns. o200k's pattern has rare spans that ``stages/scan.py`` resolves by re-running the
reference regex; the device does not, so for o200k (and any pattern ``scan.py`` knows but the
kernels do not) the pieces are cut on the CPU by the vectorized scanner and only merge and emit
run on the GPU; other patterns, and HF pre-tokenizers with normalizers or several steps, are
cut by their regex on the CPU (Qwen2's tokenizer.json adds an NFC normalizer, so Qwen2 is cut
on the CPU although its pattern runs on the device; checking that a batch is already NFC and
then cutting on the device is the obvious next step). ``CudaBackend.describe(enc)`` says which, and the first batch of
such an encoding warns once (``CudaFallbackWarning``). Ids are the same either way.

Streams: two chunks are in flight, each on its own CUDA stream with its own pinned staging
buffers. While chunk k's kernels run, chunk k+1 is prepared on the CPU and copied up, and chunk
k-1's ids are copied down (``_run``). Out of GPU memory: the chunk is retried with half the
budget (split the batch); a single document that still does not fit, or a budget below 1 MiB,
goes to the numpy backend with a warning. Documents over 2 GiB (positions are uint32) always do.

The kernel-launch layer is small on purpose (``CupyDevice``; ``ArrayDevice`` runs the same
driver on numpy arrays with any launch function, which is how the tests run every kernel through
the CPU emulator, ``tests/test_cuda_kernels.py``).

Performance notes (nothing here was measured on a GPU yet; ``bench/bench_cuda.py`` reports
end-to-end and per-stage times). To measure first: (1) dedup off vs on; (2) the stage split of
kernel time (pretok / entries / merge / emit) and whether merge_short wants a register path;
(3) end-to-end vs kernel-only, i.e. how much the host side (packing, specials, pinned copies)
and the transfers cost, and whether 256 MiB chunks with two streams hide the copies; (4) o200k
end to end, whose pieces are cut on the CPU. Decisions so far:
* No piece dedup by default: whole-token hits skip merging for most pieces of natural text, so
  the simplest exact design merges every remaining piece where it stands. ``dedup=True`` adds a
  device hash set (one CAS per remaining piece; duplicates copy their owner's ids); the
  benchmark measures both.
* Device memory is planned at ``_BYTES_PER_BYTE`` per input byte (flags, classes, scans, entry
  arrays, scratch ids, long-piece workspace); temporaries are released between stages so the
  pool reuses them within the chunk's stream.
* The special-token search (Python ``re`` over bytes, ~600 MB/s on one core) runs only when
  specials are allowed or disallowed; ``disallowed_special=()`` skips it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .numpy import check_document

INSTALL_HINT = ('pip install "gputok[cuda12]" (CUDA 12 driver) or "gputok[cuda13]" (CUDA 13), '
                "on a machine with an NVIDIA GPU")
KERNEL_FILES = ("encode_pretok.cu", "encode_scan.cu", "encode_merge.cu", "encode_emit.cu")

# constants shared with kernels/encode_common.cuh
SEG_START, SEG_END, OUTSIDE, SPECIAL_START = 1, 2, 4, 8
NORMAL = 0xFFFFFFFF  # spec[e]: a piece of text
GAP = 0xFFFFFFFE  # spec[e]: no ids (the sentinel entry)
EMPTY64 = np.uint64(0xFFFFFFFFFFFFFFFF)
EMPTY32 = np.uint32(0xFFFFFFFF)
DEVICE_FAMILIES = ("cl3", "cl1", "gpt2")  # scan.py families the pretok kernels implement

_BYTES_PER_BYTE = 64  # device memory planned per input byte of a chunk (see the notes above)
_MAX_CHUNK = 256 << 20  # bytes of text per chunk at most
_MIN_CHUNK = 1 << 20  # below this an out-of-memory chunk goes to the CPU
_CHUNK_LIMIT = (1 << 31) - 64  # uint32 positions (and headroom for n + 2 slots)

i32, i64, u32, u64 = np.int32, np.int64, np.uint32, np.uint64


class CudaFallbackWarning(RuntimeWarning):
    """Part of a batch ran on the CPU (out of GPU memory, or pre-tokenization the device lacks)."""


class DeviceOutOfMemory(MemoryError):
    """Raised by ``ArrayDevice`` when a simulated memory limit is exceeded (tests)."""


def available() -> tuple[bool, str]:
    try:
        import cupy
    except ImportError:
        return False, f"CuPy is not installed ({INSTALL_HINT})"
    except Exception as e:  # a broken CUDA install must not break `import gputok`
        return False, f"CuPy failed to import ({type(e).__name__}: {e}); {INSTALL_HINT}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"CuPy sees no usable CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return False, "CuPy sees no CUDA device"
    return True, f"CuPy {cupy.__version__}, {n} CUDA device(s)"


def create() -> "CudaBackend":
    return CudaBackend()


# ==== the kernel-launch layer =====================================================================

def kernel_sources() -> dict[str, str]:
    """{file name: source} of the encode kernels, from the installed package (or a checkout)."""
    from .._resources import source_dir

    d = source_dir("kernels")
    return {f: (d / f).read_text("utf-8") for f in KERNEL_FILES}


def _kernel_names(source: str) -> list[str]:
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)', source)


@functools.lru_cache(maxsize=None)
def _raw_module(device_id: int, file: str, digest: str, defines: tuple):
    """One compiled module per (device, file, source hash, defines): compiled once per process
    (CuPy also keeps the binary in its on-disk cache, keyed by the source)."""
    import cupy

    from .._resources import source_dir

    inc = str(source_dir("kernels"))
    source = kernel_sources()[file]
    assert hashlib.sha256(source.encode()).hexdigest() == digest  # the cache key is the source
    header = "".join(f"#define {k} {v}\n" for k, v in defines)
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=header + source, options=("-std=c++17", f"-I{inc}"))


class _Pending:
    """A device-to-host copy in flight; ``result()`` waits and returns a fresh numpy array."""

    def __init__(self, event, host: np.ndarray, dtype, count: int):
        self.event, self.host, self.dtype, self.count = event, host, np.dtype(dtype), count

    def result(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        nbytes = self.count * self.dtype.itemsize
        return self.host[:nbytes].view(self.dtype).copy()


class CupyDevice:
    """CuPy on one GPU: kernels compiled with NVRTC, two non-blocking streams, pinned staging."""

    block = 256
    scan_block = 256
    scan_items = 8
    kind = "cupy"

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
        self._sources = kernel_sources()
        self._file_of = {k: f for f, s in self._sources.items() for k in _kernel_names(s)}
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
            file = self._file_of[name]
            digest = hashlib.sha256(self._sources[file].encode()).hexdigest()
            mod = _raw_module(self.device_id, file, digest, self.defines())
            fn = self._functions[name] = mod.get_function(name)
        fn(tuple(grid), tuple(block), tuple(args))  # on the current stream

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

    def begin_chunk(self) -> None:
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

    def download(self, key: str, arr, count: int) -> _Pending:
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
        return _Pending(ev, host, arr.dtype, int(count))

    # -- timing
    def mark(self):
        ev = self.cp.cuda.Event()
        ev.record(self._streams[self._slot])
        return ev

    def elapsed_ms(self, a, b) -> float:
        b.synchronize()
        return float(self.cp.cuda.get_elapsed_time(a, b))


class ArrayDevice:
    """The same launch layer on numpy arrays: every kernel runs through ``launch(name, grid,
    block, args)`` -- in the tests, the CPU emulator (``tests/test_cuda_kernels.py``).

    Scalars must be numpy scalars of the kernel's parameter type (CuPy needs the exact width;
    checking here keeps the CuPy path honest). ``memory_limit`` simulates a device of that many
    bytes: a chunk allocating more raises ``DeviceOutOfMemory``. Fresh arrays are filled with
    0xCD bytes, so a kernel reading memory nobody wrote shows up as a wrong result.
    """

    xp = np
    kind = "array"

    def __init__(self, launch: Callable, *, block: int = 64, max_blocks: int = 4,
                 scan_block: int = 256, scan_items: int = 8, memory_limit: "int | None" = None,
                 name: str = "array device"):
        self._launch = launch
        self.block, self.max_blocks = block, max_blocks
        self.scan_block, self.scan_items = scan_block, scan_items
        self.memory_limit = memory_limit
        self.name = name
        self.oom_errors = (DeviceOutOfMemory,)
        self._used = 0
        self.launches: collections.Counter = collections.Counter()

    def defines(self) -> tuple:
        return (("ENC_SCAN_BLOCK", self.scan_block), ("ENC_SCAN_ITEMS", self.scan_items))

    def launch(self, name, grid, block, args) -> None:
        for k, a in enumerate(args):
            if not isinstance(a, (np.ndarray, np.generic)):
                raise TypeError(f"{name}: argument {k} is a {type(a).__name__}; pass numpy "
                                "arrays and numpy scalars of the parameter's exact type")
        self.launches[name] += 1
        self._launch(name, tuple(grid), tuple(block), list(args))

    def _take(self, nbytes: int) -> None:
        self._used += int(nbytes)
        if self.memory_limit is not None and self._used > self.memory_limit:
            raise DeviceOutOfMemory(f"simulated device memory exhausted ({self._used} bytes > "
                                    f"{self.memory_limit})")

    def empty(self, n, dtype):
        a = np.empty(int(n), dtype)
        self._take(a.nbytes)
        a.view(np.uint8).fill(0xCD)
        return a

    def zeros(self, n, dtype):
        a = np.zeros(int(n), dtype)
        self._take(a.nbytes)
        return a

    def full(self, n, value, dtype):
        a = np.full(int(n), value, dtype)
        self._take(a.nbytes)
        return a

    def dummy(self, dtype):
        return np.zeros(1, dtype)

    def put(self, host):
        return np.array(host, copy=True)

    def memory_budget(self) -> int:
        return self.memory_limit if self.memory_limit is not None else 1 << 34

    def begin_chunk(self) -> None:
        self._used = 0

    def release(self) -> None:
        self._used = 0

    def synchronize(self) -> None:
        pass

    @contextlib.contextmanager
    def stream(self, slot: int):
        yield

    def upload(self, arrays: list) -> list:
        out = []
        for a in arrays:
            self._take(a.nbytes)
            out.append(np.array(a, copy=True))
        return out

    def download(self, key, arr, count) -> _Pending:
        host = np.ascontiguousarray(arr[:int(count)]).view(np.uint8).reshape(-1)
        return _Pending(None, host, arr.dtype, int(count))

    def mark(self):
        return time.perf_counter()

    def elapsed_ms(self, a, b) -> float:
        return (b - a) * 1e3


# ==== tables uploaded once per (device, encoding) ==================================================

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_M64 = (1 << 64) - 1


def bytes_hash(data: bytes) -> int:
    """``enc_bytes_hash`` of kernels/encode_common.cuh (FNV-1a + a 64-bit finalizer)."""
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    return h ^ (h >> 33)


def bytes_hash_many(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``bytes_hash`` of every ``data[offsets[i]:offsets[i + 1]]``, vectorized (uint64)."""
    lens = np.diff(offsets).astype(np.int64)
    order = np.argsort(-lens, kind="stable")  # longest first: the active set is a prefix
    starts = offsets[:-1].astype(np.int64)[order]
    ls = lens[order]
    h = np.full(len(lens), _FNV_OFFSET, np.uint64)
    prime = np.uint64(_FNV_PRIME)
    for pos in range(int(ls[0]) if len(ls) else 0):
        k = int(np.searchsorted(-ls, -pos, "left"))  # tokens longer than pos
        h[:k] ^= data[starts[:k] + pos].astype(np.uint64)
        h[:k] *= prime
    for mul in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        h ^= h >> np.uint64(33)
        h *= np.uint64(mul)
    h ^= h >> np.uint64(33)
    out = np.empty_like(h)
    out[order] = h
    return out


def whole_table(whole: "dict[bytes, int]") -> dict:
    """Host build of the device whole-token table: linear probing at load <= 1/2 on the top
    bits of ``bytes_hash``, slots holding (low 32 bits of the hash, token index)."""
    toks = list(whole)
    ids = np.fromiter(whole.values(), np.uint32, len(toks))
    lens = np.fromiter(map(len, toks), np.int64, len(toks))
    off = np.zeros(len(toks) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    data = np.frombuffer(b"".join(toks), np.uint8)
    h = bytes_hash_many(data, off)
    bits = max(4, int(len(toks) * 2 - 1).bit_length())
    cap = 1 << bits
    slot_entry = np.full(cap, EMPTY32, np.uint32)
    slot_tag = np.zeros(cap, np.uint32)
    slot = (h >> np.uint64(64 - bits)).astype(np.int64)
    pending = np.arange(len(toks))
    while len(pending):
        s = slot[pending]
        free = slot_entry[s] == EMPTY32
        cand = pending[free]
        _, first = np.unique(s[free], return_index=True)
        win = cand[first]
        slot_entry[slot[win]] = win
        slot_tag[slot[win]] = (h[win] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        placed = np.zeros(len(toks), bool)
        placed[win] = True
        pending = pending[~placed[pending]]
        slot[pending] = (slot[pending] + 1) & (cap - 1)
    return {"slot_tag": slot_tag, "slot_entry": slot_entry, "tok_off": off.astype(np.uint32),
            "tok_bytes": data if len(data) else np.zeros(1, np.uint8), "tok_id": ids,
            "bits": bits}


@dataclass
class _Plan:
    """Everything one encoding needs on one device."""

    mode: str  # "device" | "scanner" | "regex": where pieces are cut
    why: str
    scanner: object = None
    split: "Callable | None" = None
    arrays: dict = field(default_factory=dict)  # device arrays
    scalars: dict = field(default_factory=dict)
    warned: bool = False


def pretok_mode(enc) -> tuple[str, str, object]:
    """(mode, reason, scanner) for an encoding: where its pieces are cut."""
    from ..stages.scan import scanner_for_pattern

    pre = enc._pretok
    pattern = getattr(pre, "pattern", None)
    if pattern is None or getattr(pre, "_nf", None) is not None:
        return "regex", ("its pre-tokenizer is not one plain regex (normalizer or several "
                         "steps): pieces are cut on the CPU"), None
    sc = scanner_for_pattern(pattern)
    if sc is None:
        return "regex", "its pattern has no vectorized form: pieces are cut on the CPU (regex)", None
    fam = sc.family
    if fam.name in DEVICE_FAMILIES and fam.bits == 3:
        return "device", f"pre-tokenization on the GPU ({sc.name} rules)", sc
    return "scanner", (f"the {sc.name} pattern has spans only the reference regex resolves: "
                       "pieces are cut on the CPU (vectorized scanner)"), sc


# ==== host-side planning ===========================================================================

@functools.lru_cache(maxsize=64)
def _bytes_regex(tokens: frozenset) -> "re.Pattern[bytes]":
    # the order of cpu_ref.specials.special_regex: longer tokens first
    alts = sorted(tokens, key=lambda t: (-len(t), t))
    return re.compile(b"|".join(re.escape(t.encode("utf-8")) for t in alts))


def find_specials(buf: bytes, doc_off: np.ndarray, tokens: frozenset
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every leftmost-first occurrence of ``tokens`` inside the documents,
    as ``split_specials`` finds them document by document (a match never spans two)."""
    if not tokens or not len(buf):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pat = _bytes_regex(frozenset(tokens))
    spans = [m.span() for m in pat.finditer(buf)]
    if not spans:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sp = np.array(spans, np.int64).reshape(-1, 2)
    doc_off = np.asarray(doc_off, np.int64)
    d = np.searchsorted(doc_off, sp[:, 0], "right") - 1
    cross = sp[:, 1] > doc_off[d + 1]
    if cross.any():
        # a match over a document boundary may hide matches of either document: redo them
        bad = set()
        for k in np.flatnonzero(cross):
            last = int(np.searchsorted(doc_off, sp[k, 1], "left")) - 1
            bad.update(range(int(d[k]), last + 1))
        keep = ~np.isin(d, list(bad))
        extra = [m.span() for b in sorted(bad)
                 for m in pat.finditer(buf, int(doc_off[b]), int(doc_off[b + 1]))]
        sp = np.concatenate([sp[keep], np.array(extra, np.int64).reshape(-1, 2)])
        sp = sp[np.argsort(sp[:, 0], kind="stable")]
    return sp[:, 0].copy(), sp[:, 1].copy()


def check_documents(buf: bytes, doc_off: np.ndarray, disallowed: frozenset) -> None:
    """Raise the numpy backend's error for the first document containing a disallowed special."""
    starts, _ = find_specials(buf, doc_off, disallowed)
    if not len(starts):
        return
    d = int(np.searchsorted(doc_off, starts[0], "right") - 1)
    check_document(buf[int(doc_off[d]):int(doc_off[d + 1])].decode("utf-8"), disallowed, d)


def segment_marks(doc_off: np.ndarray, sp_start: np.ndarray, sp_end: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The per-byte marks of a chunk as unique (positions uint32, bits uint8).

    Segments are the non-empty stretches of a document between special tokens: SEG_START at
    their first byte, SEG_END just past their last; the bytes of every special are OUTSIDE and
    its first is SPECIAL_START.
    """
    doc_off = np.asarray(doc_off, np.int64)
    if len(sp_start):
        b = np.unique(np.concatenate([doc_off, sp_start, sp_end]))
        lo, hi = b[:-1], b[1:]
        seg = ~np.isin(lo, sp_start)
        lo, hi = lo[seg], hi[seg]
        ln = sp_end - sp_start
        inside = np.repeat(sp_start - np.cumsum(ln) + ln, ln) + np.arange(int(ln.sum()))
        pos = np.concatenate([lo, hi, inside, sp_start])
        bits = np.concatenate([np.full(len(lo), SEG_START), np.full(len(hi), SEG_END),
                               np.full(len(inside), OUTSIDE), np.full(len(sp_start),
                                                                      SPECIAL_START)])
    else:
        nonempty = doc_off[1:] > doc_off[:-1]
        lo, hi = doc_off[:-1][nonempty], doc_off[1:][nonempty]
        pos = np.concatenate([lo, hi])
        bits = np.concatenate([np.full(len(lo), SEG_START), np.full(len(hi), SEG_END)])
    upos, inv = np.unique(pos, return_inverse=True)
    ubits = np.zeros(len(upos), np.uint8)
    np.bitwise_or.at(ubits, inv.reshape(-1), bits.astype(np.uint8))
    return upos.astype(np.uint32), ubits


def entries_from_scanner(scanner, data: np.ndarray, doc_off, sp_start, sp_end, sp_id):
    """Entries of a chunk with pieces cut on the CPU by ``scanner.boundaries`` (code points),
    in the chunk's own byte coordinates: (pstart, spec, doc_entry), uint32."""
    n = len(data)
    is_cs = (data & 0xC0) != 0x80
    char_pos = np.flatnonzero(is_cs)
    cps = np.frombuffer(data.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32)
    doc_off = np.asarray(doc_off, np.int64)
    b = np.unique(np.concatenate([doc_off, sp_start, sp_end]))
    is_sp = np.isin(b[:-1], sp_start)
    cp_b = np.searchsorted(char_pos, b)  # code points before each boundary
    cuts = scanner.boundaries(cps, cp_b.astype(np.int64))
    cuts = cuts[cuts < len(char_pos)]
    seg = np.searchsorted(cp_b, cuts, "right") - 1
    starts = char_pos[cuts[~is_sp[seg]]]
    pstart = np.concatenate([starts, sp_start, [n]]).astype(np.int64)
    pstart.sort()
    spec = np.full(len(pstart), NORMAL, np.uint32)
    spec[np.searchsorted(pstart, sp_start)] = sp_id
    spec[-1] = GAP
    doc_entry = np.searchsorted(pstart, doc_off, "left")
    return pstart.astype(np.uint32), spec, doc_entry.astype(np.uint32)


def entries_from_regex(split, data: bytes, doc_off, sp_start, sp_end, sp_id):
    """Entries with pieces from ``split(text)`` per segment (any pre-tokenizer, normalizers
    included: the chunk's buffer is rebuilt from the pieces). Returns (buffer, pstart, spec,
    doc_entry)."""
    parts: list = []
    starts: list = []
    spec: list = []
    doc_entry = [0]
    pos = 0
    k = 0
    n_sp = len(sp_start)
    for d in range(len(doc_off) - 1):
        lo, hi = int(doc_off[d]), int(doc_off[d + 1])
        cur = lo
        while True:
            nxt = int(sp_start[k]) if k < n_sp and sp_start[k] < hi else hi
            if nxt > cur:
                for p in split(data[cur:nxt].decode("utf-8")):
                    b = p.encode("utf-8")
                    if b:
                        parts.append(b)
                        starts.append(pos)
                        spec.append(NORMAL)
                        pos += len(b)
            if nxt >= hi:
                break
            end = int(sp_end[k])
            parts.append(data[nxt:end])
            starts.append(pos)
            spec.append(int(sp_id[k]))
            pos += end - nxt
            cur = end
            k += 1
        doc_entry.append(len(starts))
    starts.append(pos)
    spec.append(GAP)
    return (b"".join(parts), np.array(starts, np.uint32), np.array(spec, np.uint32),
            np.array(doc_entry, np.uint32))


@dataclass
class _HostChunk:
    d0: int
    d1: int
    n: int
    mode: str
    inputs: list  # host arrays to upload, in the order _enqueue unpacks them
    n_docs: int
    n_entries: int = 0  # host-cut modes
    n_specials: int = 0
    n_marks: int = 0


@dataclass
class _Part:
    d0: int
    d1: int
    ids: np.ndarray
    lengths: np.ndarray  # ids per document


@dataclass
class _InFlight:
    hc: _HostChunk
    slot: int
    out: object
    doc: "_Pending"
    ids: "_Pending | None" = None
    marks: list = field(default_factory=list)


# ==== the backend ==================================================================================

class CudaBackend:
    """The batch pipeline on a GPU. ``device``: a ``CupyDevice`` (default) or an ``ArrayDevice``.

    ``chunk_bytes`` caps the text per chunk (default: from free GPU memory, at most 256 MiB);
    ``dedup`` merges each distinct piece once per chunk; ``pretok`` forces where pieces are cut
    ("auto", "device", "scanner" or "regex"; "device" only for the families the kernels know).
    """

    name = "cuda"

    def __init__(self, device=None, *, chunk_bytes: "int | None" = None, dedup: bool = False,
                 pretok: str = "auto"):
        if pretok not in ("auto", "device", "scanner", "regex"):
            raise ValueError("pretok must be 'auto', 'device', 'scanner' or 'regex'")
        self.dev = device if device is not None else CupyDevice()
        self.chunk_bytes = chunk_bytes
        self.dedup = dedup
        self.pretok = pretok
        self._plans: dict = {}
        self._class_tables: dict = {}
        self._lock = threading.RLock()
        self.profile: "list | None" = None  # set to a list to collect per-stage times

    def __repr__(self) -> str:
        return f"<CudaBackend on {self.dev.name}>"

    # ---- public --------------------------------------------------------------------------------
    def describe(self, enc) -> str:
        """Where each stage of ``enc`` runs on this backend."""
        mode, why, _ = self._mode(enc)
        return f"{enc.name}: {why}; merge and emit on the GPU ({self.dev.name})"

    def encode_documents(self, enc, docs, allowed: frozenset, disallowed: frozenset):
        if (enc._lstrip or enc._rstrip) and (allowed or enc._plain_added):
            # HF lstrip/rstrip added tokens move segment boundaries: the host-side special
            # search here does not model that, so such batches take the exact numpy path
            from .numpy import NumpyBackend

            return NumpyBackend().encode_documents(enc, docs, allowed, disallowed)
        buf, doc_off = docs.packed()
        doc_off = np.asarray(doc_off, np.int64)
        if disallowed:
            check_documents(buf, doc_off, disallowed)
        active = allowed | frozenset(enc._plain_added)
        sp_start, sp_end = find_specials(buf, doc_off, active)
        sp_id = np.zeros(len(sp_start), np.uint32)
        if len(sp_start):
            ids = {s.encode("utf-8"): i for s, i in
                   {**enc._plain_added, **enc._special_tokens}.items()}
            sp_id[:] = [ids[buf[a:b]] for a, b in zip(sp_start.tolist(), sp_end.tolist())]
        with self._lock:
            parts = self._encode(enc, buf, doc_off, (sp_start, sp_end, sp_id), allowed)
        return _assemble(parts, len(doc_off) - 1, enc.id_dtype)

    def time_kernels(self, enc, texts, repeat: int = 3) -> dict:
        """Kernel-only timing of one chunk (the first ``chunk_bytes`` of ``texts``, no special
        tokens): the input is uploaded once, then every stage is timed with device events.
        Returns {"bytes", "docs", "ms": {stage: best ms}, "total_ms"} (for the benchmark)."""
        from ..stages.pack import Documents

        buf, doc_off = Documents(texts).packed()
        doc_off = np.asarray(doc_off, np.int64)
        with self._lock:
            plan = self._plan(enc)
            d1 = self._chunk_end(doc_off, 0, self._chunk_budget())
            hc = self._prepare(plan, buf, doc_off, (np.zeros(0, np.int64),) * 2 +
                               (np.zeros(0, np.uint32),), 0, d1)
            best: dict = {}
            with self.dev.stream(0):
                ins = self.dev.upload(hc.inputs)
                for _ in range(max(1, repeat)):
                    t = [("start", self.dev.mark())]
                    if hc.mode == "device":
                        ent = self._stage_pretok(plan, hc.n, ins[0], ins[2], ins[3], hc.n_marks)
                        t.append(("pretok", self.dev.mark()))
                        pstart, spec, doc_entry, n_ent, cap = self._stage_entries(
                            hc.n, ent, ins[1], hc.n_docs, ins[4], ins[5], hc.n_specials)
                        t.append(("entries", self.dev.mark()))
                    else:
                        _, pstart, spec, doc_entry, n_ent = ins
                        cap = hc.n_entries
                    owner, count, scratch = self._stage_merge(plan, hc.n, ins[0], pstart, spec,
                                                              n_ent, cap)
                    t.append(("merge", self.dev.mark()))
                    self._stage_emit(hc.n, pstart, n_ent, cap, owner, count, scratch, doc_entry,
                                     hc.n_docs, enc.id_dtype)
                    t.append(("emit", self.dev.mark()))
                    for (_, a), (name, b) in zip(t, t[1:]):
                        ms = self.dev.elapsed_ms(a, b)
                        best[name] = min(best.get(name, ms), ms)
        return {"bytes": hc.n, "docs": d1, "mode": hc.mode, "ms": best,
                "total_ms": sum(best.values())}

    # ---- planning ------------------------------------------------------------------------------
    def _mode(self, enc):
        mode, why, sc = pretok_mode(enc)
        want = self.pretok
        if want == "auto" or want == mode:
            return mode, why, sc
        if want == "device" and mode != "device":
            raise ValueError(f"{enc.name}: pre-tokenization cannot run on the device ({why})")
        if want == "scanner":
            if sc is None:
                raise ValueError(f"{enc.name}: no vectorized scanner for this pre-tokenizer")
            return "scanner", "pieces cut on the CPU (vectorized scanner, forced)", sc
        return "regex", "pieces cut on the CPU (regex, forced)", None

    def _plan(self, enc) -> _Plan:
        key = id(enc)
        got = self._plans.get(key)
        if got is not None and got[0]() is enc:
            return got[1]
        import weakref

        for k in [k for k, (ref, _) in self._plans.items() if ref() is None]:
            del self._plans[k]  # tables of encodings that are gone

        mode, why, sc = self._mode(enc)
        plan = _Plan(mode, why, sc, enc._pretok.split)
        dev = self.dev
        table = enc.merge_table
        a = plan.arrays
        a["t_keys"] = dev.put(table.h_keys)
        a["t_prio"] = dev.put(table.h_prio)
        a["t_merged"] = dev.put(table.h_merged)
        a["byte_ids"] = dev.put(table.byte_ids.astype(np.uint32))
        plan.scalars["t_bits"] = u32(table.hash_bits)
        if table.whole:
            w = whole_table(table.whole)
            for k in ("slot_tag", "slot_entry", "tok_off", "tok_bytes", "tok_id"):
                a["w_" + k] = dev.put(w[k])
            plan.scalars["w_bits"] = u32(w["bits"])
        else:
            for k, t in (("slot_tag", np.uint32), ("slot_entry", np.uint32),
                         ("tok_off", np.uint32), ("tok_bytes", np.uint8), ("tok_id", np.uint32)):
                a["w_" + k] = dev.dummy(t)
            plan.scalars["w_bits"] = u32(0)
        if mode == "device":
            sc._setup()
            fam = sc.family
            if fam.name not in self._class_tables:  # one upload per family and process
                self._class_tables[fam.name] = dev.put(fam.tables())
            a["cls_table"] = self._class_tables[fam.name]
            a["pair"] = dev.put(np.frombuffer(fam.pair, np.uint8))
            letters = np.asarray(sc._letters, np.uint8)
            a["letters"] = dev.put(letters)
            nlo, nn = fam.next_range
            plo, pn = fam.prev2_range if fam.prev2_range is not None else (0, 0)
            plan.scalars.update(
                pair_bits=i32(fam.bits), next_lo=i32(nlo), next_n=i32(nn), prev2_lo=i32(plo),
                prev2_n=i32(pn), n_letters=u32(len(letters)), gpt2=i32(sc._kind == "gpt2"),
                digit_group=i32(sc.digit_group), end_whole=i32(bool(sc.end_whole)),
                runs=sc._kind == "cl")
        dev.synchronize()  # the streams are non-blocking: tables must be there before use
        self._plans[key] = (weakref.ref(enc), plan)
        return plan

    def _chunk_budget(self) -> int:
        cap = self.chunk_bytes or _MAX_CHUNK
        fit = self.dev.memory_budget() // (2 * _BYTES_PER_BYTE)  # two chunks in flight
        return int(max(min(cap, fit, _CHUNK_LIMIT), 1))

    # ---- the loop over chunks ------------------------------------------------------------------
    def _encode(self, enc, buf, doc_off, specials, allowed) -> list:
        n_docs = len(doc_off) - 1
        parts: list = []
        dev = self.dev
        try:
            plan = self._plan(enc)
        except dev.oom_errors as e:
            dev.release()
            self._warn(f"gputok cuda: out of GPU memory uploading {enc.name}'s tables ({e}); "
                       "encoding this batch on the CPU")
            return [self._numpy_part(enc, buf, doc_off, 0, n_docs, allowed)]
        if plan.mode != "device" and not plan.warned:
            plan.warned = True
            self._warn(f"gputok cuda: {self.describe(enc)}")
        budget = self._chunk_budget()
        start = 0
        while start < n_docs:
            try:
                self._run(enc, plan, buf, doc_off, specials, start, budget, parts, allowed)
                break
            except dev.oom_errors as e:
                dev.release()
                start = parts[-1].d1 if parts else start  # completed chunks are kept
                if start >= n_docs:
                    break
                size = int(doc_off[min(self._chunk_end(doc_off, start, budget), n_docs)]
                           - doc_off[start])
                one_doc = self._chunk_end(doc_off, start, budget) == start + 1
                if one_doc or budget // 2 < _MIN_CHUNK:
                    end = start + 1 if one_doc and budget // 2 >= _MIN_CHUNK else n_docs
                    self._warn(f"gputok cuda: out of GPU memory ({e}) on {size} bytes of text; "
                               f"documents {start}..{end - 1} are encoded on the CPU")
                    parts.append(self._numpy_part(enc, buf, doc_off, start, end, allowed))
                    start = end
                else:
                    budget //= 2
        return parts

    @staticmethod
    def _chunk_end(doc_off, d0: int, budget: int) -> int:
        end = int(np.searchsorted(doc_off, doc_off[d0] + budget, "right")) - 1
        return max(end, d0 + 1)

    def _run(self, enc, plan, buf, doc_off, specials, start, budget, parts, allowed) -> None:
        """Chunks from document ``start`` on, two in flight; completed chunks go to ``parts``."""
        n_docs = len(doc_off) - 1
        flight: collections.deque = collections.deque()
        k = 0
        d0 = start
        while d0 < n_docs:
            d1 = self._chunk_end(doc_off, d0, budget)
            n = int(doc_off[d1] - doc_off[d0])
            if n > _CHUNK_LIMIT:  # one document too big for uint32 positions
                while flight:
                    self._finish(flight.popleft(), parts)
                self._warn(f"gputok cuda: document {d0} has {n} bytes (over 2 GiB); it is "
                           "encoded on the CPU")
                parts.append(self._numpy_part(enc, buf, doc_off, d0, d1, allowed))
                d0 = d1
                continue
            hc = self._prepare(plan, buf, doc_off, specials, d0, d1)
            if hc.n == 0:  # only empty documents
                while flight:
                    self._finish(flight.popleft(), parts)
                parts.append(_Part(d0, d1, np.zeros(0, enc.id_dtype),
                                   np.zeros(d1 - d0, np.int64)))
                d0 = d1
                continue
            if len(flight) == 2:
                self._finish(flight.popleft(), parts)  # frees its slot
            slot = k % 2
            k += 1
            self.dev.begin_chunk()
            with self.dev.stream(slot):
                flight.append(self._enqueue(plan, hc, slot, enc.id_dtype))
            if len(flight) == 2:
                self._advance(flight[0])  # start the older chunk's ids download
            d0 = d1
        while flight:
            self._finish(flight.popleft(), parts)

    def _advance(self, st: _InFlight) -> None:
        if st.ids is None:
            doc = st.doc.result()  # waits for the chunk's kernels
            st.doc = _Done(doc)
            with self.dev.stream(st.slot):
                st.ids = self.dev.download("ids", st.out, int(doc[-1]))

    def _finish(self, st: _InFlight, parts: list) -> None:
        self._advance(st)
        ids = st.ids.result()
        doc = st.doc.result()
        if self.profile is not None and st.marks:
            names = [m[0] for m in st.marks]
            times = {names[i + 1]: self.dev.elapsed_ms(st.marks[i][1], st.marks[i + 1][1])
                     for i in range(len(names) - 1)}
            self.profile.append({"bytes": st.hc.n, "docs": st.hc.n_docs, "ms": times})
        st.out = None
        parts.append(_Part(st.hc.d0, st.hc.d1, ids, np.diff(doc)))

    def _numpy_part(self, enc, buf, doc_off, d0, d1, allowed) -> _Part:
        from ..stages.pack import Documents
        from .numpy import NumpyBackend

        docs = Documents([buf[int(doc_off[d]):int(doc_off[d + 1])] for d in range(d0, d1)])
        ids, off = NumpyBackend().encode_documents(enc, docs, allowed, frozenset())
        return _Part(d0, d1, ids.astype(enc.id_dtype, copy=False), np.diff(off))

    def _warn(self, msg: str) -> None:
        warnings.warn(msg, CudaFallbackWarning, stacklevel=5)

    # ---- one chunk: host preparation -----------------------------------------------------------
    def _prepare(self, plan, buf, doc_off, specials, d0, d1) -> _HostChunk:
        b0, b1 = int(doc_off[d0]), int(doc_off[d1])
        n = b1 - b0
        off = doc_off[d0:d1 + 1] - b0
        sp_start, sp_end, sp_id = specials
        i0, i1 = np.searchsorted(sp_start, [b0, b1])
        ss, se, sid = sp_start[i0:i1] - b0, sp_end[i0:i1] - b0, sp_id[i0:i1]
        nd = d1 - d0
        if n == 0:
            return _HostChunk(d0, d1, 0, plan.mode, [], nd)
        data = np.frombuffer(buf, np.uint8, n, b0)
        if plan.mode == "device":
            mpos, mbits = segment_marks(off, ss, se)
            inputs = [data, off.astype(np.uint32), mpos, mbits, ss.astype(np.uint32), sid]
            return _HostChunk(d0, d1, n, "device", inputs, nd, n_specials=len(ss),
                              n_marks=len(mpos))
        if plan.mode == "scanner":
            pstart, spec, doc_entry = entries_from_scanner(plan.scanner, data, off, ss, se, sid)
        else:
            raw, pstart, spec, doc_entry = entries_from_regex(plan.split, buf[b0:b1], off, ss,
                                                              se, sid)
            data = np.frombuffer(raw, np.uint8)
            n = len(data)
            if n == 0:
                return _HostChunk(d0, d1, 0, plan.mode, [], nd)
        inputs = [data, pstart, spec, doc_entry, np.array([len(pstart)], np.uint32)]
        return _HostChunk(d0, d1, n, plan.mode, inputs, nd, n_entries=len(pstart))

    # ---- one chunk: device work ----------------------------------------------------------------
    def _grid(self, count: int) -> tuple:
        return (max(1, min(self.dev.max_blocks, -(-int(count) // self.dev.block))),)

    def _go(self, name: str, count: int, args: list) -> None:
        self.dev.launch(name, self._grid(count), (self.dev.block,), args)

    def _scan(self, arr, n: int, op: str, exclusive: bool) -> None:
        """In-place prefix scan of ``arr[:n]`` (op "add" or "max"), reduce-then-scan."""
        dev = self.dev
        tile = dev.scan_block * dev.scan_items
        blk = (dev.scan_block,)
        if n <= tile:
            dev.launch(f"encode_scan_apply_{op}", (1,), blk,
                       [arr, arr, i64(n), dev.dummy(np.uint32), i32(0), i32(exclusive)])
            return
        tiles = -(-n // tile)
        sums = dev.empty(tiles, np.uint32)
        dev.launch(f"encode_scan_reduce_{op}", (tiles,), blk, [arr, i64(n), sums])
        self._scan(sums, tiles, op, True)
        dev.launch(f"encode_scan_apply_{op}", (tiles,), blk,
                   [arr, arr, i64(n), sums, i32(1), i32(exclusive)])

    def _mark(self, st_marks: list, name: str) -> None:
        if self.profile is not None:
            st_marks.append((name, self.dev.mark()))

    def _enqueue(self, plan: _Plan, hc: _HostChunk, slot: int, out_dtype) -> _InFlight:
        """Upload one chunk and queue all of its kernels and the download of its document
        offsets on the current stream; nothing here waits for the device."""
        marks: list = []
        self._mark(marks, "start")
        ins = self.dev.upload(hc.inputs)
        self._mark(marks, "h2d")
        d_buf = ins[0]
        if hc.mode == "device":
            ent = self._stage_pretok(plan, hc.n, d_buf, ins[2], ins[3], hc.n_marks)
            self._mark(marks, "pretok")
            pstart, spec, doc_entry, n_entries, cap = self._stage_entries(
                hc.n, ent, ins[1], hc.n_docs, ins[4], ins[5], hc.n_specials)
            del ent
            self._mark(marks, "entries")
        else:
            _, pstart, spec, doc_entry, n_entries = ins
            cap = hc.n_entries
        owner, count, scratch = self._stage_merge(plan, hc.n, d_buf, pstart, spec, n_entries,
                                                  cap)
        self._mark(marks, "merge")
        out, out_doc = self._stage_emit(hc.n, pstart, n_entries, cap, owner, count, scratch,
                                        doc_entry, hc.n_docs, out_dtype)
        self._mark(marks, "emit")
        doc = self.dev.download("doc", out_doc, hc.n_docs + 1)
        return _InFlight(hc, slot, out, doc, marks=marks)

    # The stages below take and return device arrays; the tests drive them one by one.

    def _stage_pretok(self, plan: _Plan, n: int, d_buf, d_mpos, d_mbits, n_marks: int):
        """encode_pretok.cu: returns ``ent`` (uint32, n + 2): 1 where an entry starts."""
        dev = self.dev
        a, s = plan.arrays, plan.scalars
        m = n + 2
        mark = dev.zeros(m, np.uint8)
        if n_marks:
            self._go("encode_pretok_marks", n_marks, [d_mpos, d_mbits, i64(n_marks), mark])
        cls = dev.empty(m, np.uint8)
        self._go("encode_pretok_classify", n + 1, [d_buf, i64(n), mark, a["cls_table"], cls])
        if s["runs"]:
            runv = dev.empty(n, np.uint32)
            cidx = dev.empty(n, np.uint32)
            self._go("encode_pretok_runs", n, [i64(n), mark, cls, runv, cidx])
            self._scan(runv, n, "max", False)  # run start + 1
            if s["digit_group"] > 1:
                self._scan(cidx, n, "add", True)  # character index
            ws_next = dev.empty(m, np.uint8)
        else:
            runv = cidx = dev.dummy(np.uint32)
            ws_next = dev.dummy(np.uint8)
        ent = dev.empty(m, np.uint32)
        self._go("encode_pretok_window", n + 2,
                 [d_buf, i64(n), mark, cls, a["pair"], s["pair_bits"], s["next_lo"],
                  s["next_n"], s["prev2_lo"], s["prev2_n"], runv, i32(s["runs"]), ws_next, ent])
        self._go("encode_pretok_fix", n,
                 [d_buf, i64(n), mark, cls, a["pair"], s["pair_bits"], a["letters"],
                  s["n_letters"], runv, cidx, ws_next, s["gpt2"], s["digit_group"],
                  s["end_whole"], ent])
        return ent

    def _stage_entries(self, n: int, ent, d_off, n_docs: int, d_sp_pos, d_sp_id,
                       n_specials: int):
        """Flags -> entries: (pstart, spec, doc_entry, n_entries (a 1-element device view),
        capacity). ``ent`` is scanned in place."""
        dev = self.dev
        m = n + 2
        self._scan(ent, m, "add", True)  # entry index of every flagged byte
        pstart = dev.empty(m, np.uint32)
        spec = dev.empty(m, np.uint32)
        self._go("encode_entries_compact", n + 1, [ent, i64(n), pstart, spec])
        if n_specials:
            self._go("encode_entries_specials", n_specials,
                     [ent, d_sp_pos, d_sp_id, i64(n_specials), spec])
        doc_entry = dev.empty(n_docs + 1, np.uint32)
        self._go("encode_doc_entries", n_docs + 1, [ent, d_off, i64(n_docs + 1), doc_entry])
        return pstart, spec, doc_entry, ent[n + 1:n + 2], m

    def _stage_merge(self, plan: _Plan, n: int, d_buf, pstart, spec, n_entries, cap: int):
        """encode_merge.cu: (owner, count, scratch); entry e's ids are count[e] values in
        scratch at pstart[e] (pstart[owner[e]] for a duplicate)."""
        dev = self.dev
        a, s = plan.arrays, plan.scalars
        owner = dev.empty(cap, np.uint32)
        count = dev.zeros(cap + 1, np.uint32)  # one spare zero: the scan's total lands there
        scratch = dev.empty(n, np.uint32)
        if self.dedup:
            dbits = max(4, int(2 * cap - 1).bit_length())
            slots = dev.full(1 << dbits, EMPTY64, np.uint64)
        else:
            dbits, slots = 0, dev.dummy(np.uint64)
        self._go("encode_piece_kind", cap,
                 [d_buf, pstart, spec, n_entries, a["w_slot_tag"], a["w_slot_entry"],
                  a["w_tok_off"], a["w_tok_bytes"], a["w_tok_id"], s["w_bits"], slots,
                  u32(dbits), owner, count, scratch, i64(cap)])
        del slots
        table = [a["t_keys"], a["t_prio"], a["t_merged"], s["t_bits"], a["byte_ids"]]
        prio_ws = dev.empty(n, np.uint32)
        self._go("encode_merge_short", cap,
                 [d_buf, pstart, n_entries, owner, *table, scratch, prio_ws, count, i64(cap)])
        ws = [dev.empty(n, np.uint32) for _ in range(4)]  # next, prev, heap, where
        self._go("encode_merge_long", cap,
                 [d_buf, pstart, n_entries, owner, *table, scratch, prio_ws, *ws, count,
                  i64(cap)])
        del ws, prio_ws
        if self.dedup:
            self._go("encode_dup_counts", cap, [n_entries, owner, count, i64(cap)])
        return owner, count, scratch

    def _stage_emit(self, n: int, pstart, n_entries, cap: int, owner, count, scratch,
                    doc_entry, n_docs: int, out_dtype):
        """encode_scan.cu + encode_emit.cu: (ids (n slots, the first total used), document
        offsets (int64, n_docs + 1)). ``count`` is scanned in place into output offsets."""
        dev = self.dev
        self._scan(count, cap + 1, "add", True)
        out = dev.empty(n, out_dtype)
        kern = "encode_emit_u16" if np.dtype(out_dtype).itemsize == 2 else "encode_emit_u32"
        self._go(kern, cap, [n_entries, pstart, owner, count, scratch, out, i64(cap)])
        out_doc = dev.empty(n_docs + 1, np.int64)
        self._go("encode_doc_offsets", n_docs + 1, [doc_entry, count, i64(n_docs + 1), out_doc])
        return out, out_doc


class _Done:
    """A finished download (``_Pending``'s interface)."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value


def _assemble(parts: list, n_docs: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    parts = sorted(parts, key=lambda p: p.d0)
    ids = (np.concatenate([p.ids for p in parts]).astype(dtype, copy=False) if parts
           else np.zeros(0, dtype))
    offsets = np.zeros(n_docs + 1, np.int64)
    if parts:
        np.cumsum(np.concatenate([p.lengths for p in parts]), out=offsets[1:])
    return ids, offsets
