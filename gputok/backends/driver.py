"""The device-neutral driver: one encode pipeline for every device (CuPy, the emulator, ...).

Documents are packed into one UTF-8 buffer and cut into chunks of whole documents (a few hundred
MB at most, sized from the device's free memory). Per chunk:

    host     split: the active tokens' byte spans (``stages.split.token_spans``; disallowed ones
             raise first); where the device cannot, normalise and cut pieces (``hostplan.py``)
    device   [nfc check] -> pretok -> entries -> merge -> emit (``device_stages.py``)

A model whose normaliser is one normal form (Qwen2's NFC) has it checked on the device: a chunk
with no flagged character never leaves it; otherwise only the spans around the flagged
characters are normalised on the host (``hostplan.splice_normalized``) and the rebuilt chunk is
uploaded again. That is not a fallback: ``host_normalized`` counts those spans and bytes.

Two chunks are in flight, each on its own stream slot with its own staging buffers: while chunk
k's kernels run, chunk k+1 is prepared on the host and uploaded, and chunk k-1's ids come down.
A host-memory device with chunk workers (the native CPU: ``chunk_workers``, ``solo``) runs a
batch of several chunks differently: each chunk goes start to end on one worker thread, as many
side by side as there are workers, one more prepared ahead (``_run_workers``).
A document longer than a chunk is first cut at points where the pattern is known to start a
piece and to look no further back (``hostplan.cut_long_documents``), so one giant line runs as
ordinary chunks. Out of device memory, a chunk is retried with half the budget (the batch is
split); a single document that still does not fit, or a budget below ``MIN_CHUNK``, goes to the
numpy backend.
Documents over 2 GiB (positions are uint32) always do. Every stage the host runs instead of the
device, and every part of a batch the numpy backend encodes, is a counted fallback with a
warning once (``Backend.fallback``).

The device adapter (``devices.py``) is small on purpose: memory, copies, streams and
``launch(name, grid, block, args)``; this module knows nothing of CUDA.

Performance notes (nothing here was measured on a GPU yet; ``bench/bench_cuda.py`` reports
end-to-end and per-stage times). To measure first: (1) dedup off vs on; (2) the stage split of
kernel time and whether merge_short wants a register path; (3) end-to-end vs kernel-only (host
packing, specials, pinned copies) and whether 256 MiB chunks with two streams hide the copies;
(4) o200k end to end (one matcher thread per span: encode_o200k.cu). Decisions so far:
* No piece dedup by default: whole-token hits skip merging for most pieces of natural text, so
  the simplest exact design merges every remaining piece where it stands. ``dedup=True`` adds a
  device hash set (one CAS per remaining piece; duplicates copy their owner's ids).
* Device memory is planned at ``BYTES_PER_BYTE`` per input byte (flags, classes, scans, entry
  arrays, scratch ids, long-piece workspace); temporaries are released between stages so the
  pool reuses them within the chunk's stream.
* The token search (``re`` over bytes, ~600 MB/s on one core) runs only when tokens are active
  or disallowed; ``disallowed_special=()`` on a model without added tokens skips it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import os
import threading
import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from . import Backend, get_backend
from .device_stages import DeviceStages, Tables
from .device_tables import upload_tables
from .protocol import DEVICE_FAMILIES
from .hostplan import (GAP, NORMAL, SEG_END, SEG_START, HostChunk, cut_long_documents, prepare,
                       splice_normalized)
from ..stages import counters
from ..stages.emit import Placement, assemble, offsets_of
from ..stages.lists import id_list, id_list_of_parts
from ..stages.merge import LONG_PIECE
from ..stages.pack import Documents, fix_surrogates, str_layout, utf8_of
from ..unicode import FORMS
from ..stages.split import check_buffer, token_spans

BYTES_PER_BYTE = 64  # device memory planned per input byte of a chunk (see the notes above)
MAX_CHUNK = 256 << 20  # bytes of text per chunk at most
MIN_CHUNK = 1 << 20  # below this an out-of-memory chunk goes to the host
CHUNK_LIMIT = (1 << 31) - 64  # uint32 positions (and headroom for n + 2 slots)
PLACE_MAX = 1 << 30  # bytes of output a streamed batch places its chunks' ids in (_placement)
# Chunk workers' chunks are guided (_guided_target): each takes the bytes left over
# GUIDED_SHARE times the workers, at most the budget and at least GUIDED_MIN bytes
GUIDED_SHARE = 1
GUIDED_MIN = 128 << 10
TRIM_CHARS = 1 << 17  # a text this long gives idle host workspace back (encode_list)
PRETOK_MODES = ("auto", "device", "scanner", "split")
_SEGMENT_BITS = np.array([SEG_START, SEG_END], np.uint8)  # encode_short's one segment
_NONE_U32 = np.zeros(0, np.uint32)
_NO_SPANS = (np.zeros(0, np.int64), np.zeros(0, np.int64), _NONE_U32)  # (starts, ends, ids)


def _guided_target(left: int, budget: int, workers: int) -> int:
    """A chunk worker's next chunk size in bytes: the bytes ``left`` over ``GUIDED_SHARE`` x
    ``workers``, at most ``budget``, at least ``GUIDED_MIN`` (or the budget, if smaller)."""
    return int(max(min(budget, left // (GUIDED_SHARE * workers)), min(GUIDED_MIN, budget)))


@dataclass
class ModelPlan:
    """Where a model's stages run on one device, and its uploaded tables."""

    mode: str  # where pieces are cut: "device" | "scanner" (host) | "split" (host)
    why: str
    pretok: object  # the model's Pretokenizer
    tables: Tables
    normalizer: tuple
    norm_form: "str | None" = None  # the normal form checked on the device (encode_nfc.cu)
    seg: object = None  # the segmenter's device form (``components.SegmenterDevice``)


@dataclass
class _InFlight:
    hc: HostChunk
    slot: int
    out: object
    doc: object  # a pending download of the document offsets
    ids: object = None
    marks: list = field(default_factory=list)


def pretok_mode(model, families=DEVICE_FAMILIES) -> tuple[str, str]:
    """(mode, reason): where a model's pieces are cut on a device backend whose pretok kernels
    implement the scanner ``families`` (a device adapter may name fewer: ``pretok_families``)."""
    seg = model.segmenter
    if seg.device is None:
        return "host", f"{seg.name}: every stage runs on the host (no device kernels yet)"
    norm, pre = model.front
    if norm is not None and norm.steps is None:
        return "host", "its normaliser has no device-path form: every stage runs on the host"
    if pre.pattern is None:
        return "split", (f"its pre-tokenizer ({pre.name}) is not one regex: pieces are cut on "
                         "the host")
    sc = pre.scanner
    if sc is None:
        return "split", "its pattern has no vectorised form: pieces are cut on the host (regex)"
    if sc.family.name in families:
        return "device", f"pre-tokenization on the device ({sc.name} rules)"
    if sc.family.name in DEVICE_FAMILIES:
        return "scanner", (f"this device has no pretok kernels for the {sc.name} rules yet: "
                           "pieces are cut on the host (vectorised scanner)")
    return "scanner", (f"the {sc.name} pattern has spans only the reference regex resolves: "
                       "pieces are cut on the host (vectorised scanner)")


def device_norm_form(model, mode: str, forms=FORMS) -> "str | None":
    """The normal form whose quick check runs on the device (encode_nfc.cu), or None: a
    normaliser of exactly one normal form, with pieces cut on the device, on a device whose
    kernels check ``forms`` (a device adapter may name fewer: ``normal_forms``)."""
    form = model.normalizer.device_form
    return form if mode == "device" and form in forms else None


class DeviceBackend(Backend):
    """The encode pipeline on one device.

    ``chunk_bytes`` caps the text per chunk (default: from free device memory, at most
    ``MAX_CHUNK``); ``dedup`` merges each distinct piece once per chunk; ``pretok`` forces where
    pieces are cut ("auto", "device", "scanner" or "split"; "device" only for the pattern
    families the kernels know); ``min_chunk``: out of device memory, a chunk's budget is halved
    down to this many bytes, then its documents go to the host.
    """

    def __init__(self, device, *, name: str = "device", chunk_bytes: "int | None" = None,
                 dedup: bool = False, pretok: str = "auto", min_chunk: int = MIN_CHUNK):
        super().__init__()
        if pretok not in PRETOK_MODES:
            raise ValueError(f"pretok must be one of {', '.join(PRETOK_MODES)}")
        self.name = name
        self.dev = device
        self.stages = DeviceStages(device, dedup=dedup)
        self.chunk_bytes = chunk_bytes
        self.min_chunk = int(min_chunk)
        self.pretok = pretok
        self._plans: dict = {}
        self._class_tables: dict = {}
        self._lock = threading.RLock()  # a batch's use of the device
        self._plan_lock = threading.RLock()  # building a plan (also ahead, on a chunk worker)
        self._count_lock = threading.Lock()
        self._workers = None  # (pid, count, executor) of the chunk workers (``_chunk_pool``)
        self.profile: "list | None" = None  # set to a list to collect per-stage times
        #: spans the device's quick check sent to the host normaliser: {"spans", "bytes"}
        self.host_normalized: collections.Counter = collections.Counter()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.dev.name}>"

    # ---- public --------------------------------------------------------------------------------

    def plan(self, model) -> dict:
        host = self._host_family(model)
        mode, why = ("host", host) if host is not None else self._mode(model)
        where = f"device ({self.dev.name})"
        if mode == "host":
            return {"split": "host", "normalize": "host", "pretok": f"host: {why}",
                    "merge": f"host: {why}", "emit": "host"}
        norm = "none"
        if model.normalizer:
            norm = (f"device quick check ({where}), flagged spans on the host"
                    if self._norm_form(model, mode) else "host")
        return {"split": "host", "normalize": norm,
                "pretok": where if mode == "device" else f"host: {why}", "merge": where,
                "emit": where}

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset):
        got = self._encode_streamed(model, docs, allowed, disallowed)
        if got is not None:
            return got
        self._plan_ahead(model)
        got = self._batch_parts(model, docs, allowed, disallowed)
        if got is None:  # (a family without kernels here: the numpy backend)
            return get_backend("numpy").encode(model, docs, allowed, frozenset())
        parts, n_docs, keep = got
        # the output in host memory the device recycles (native), else in fresh 2 MB pages
        ids, off = assemble(parts, n_docs, model.id_dtype,
                            self.dev.host_block)
        return (ids, off) if keep is None else (ids, off[keep])

    def _batch_parts(self, model, docs, allowed: frozenset, disallowed: frozenset
                     ) -> "tuple | None":
        """The batch path's chunk results, not yet joined: (parts ``(d0, ids, lengths)`` as
        ``emit.assemble`` takes them, the number of documents they cover, and which of their
        offsets are the batch's documents' (None: all; a document cut at safe points is
        several)). None where a family has no kernels here (the caller takes the numpy
        backend; the fallback is counted and warned about here)."""
        buf, doc_off = docs.packed()
        doc_off = np.asarray(doc_off, np.int64)
        if disallowed:
            check_buffer(buf, doc_off, disallowed)
        why = self._host_family(model)
        if why is not None:  # a family without kernels (on this device): the numpy backend
            self.fallback("merge", model.segmenter.name, f"{model.name}: {why}",
                          once_key=("family", id(model)))
            return None
        spans = token_spans(model, buf, doc_off, allowed)
        with self._lock:
            keep = None
            if self._mode(model)[0] != "split":  # a pattern family whose safe cuts are known
                doc_off, keep = cut_long_documents(buf, doc_off, spans, self._chunk_budget())
            parts = self._encode(model, buf, doc_off, spans, allowed)
        return parts, len(doc_off) - 1, keep

    def _encode_streamed(self, model, docs, allowed: frozenset, disallowed: frozenset
                         ) -> "tuple | None":
        """A batch of str documents on a device with chunk workers, each chunk's UTF-8 made
        just before a worker takes it rather than the whole batch's first (``packed``, on this
        thread alone while the workers wait): the workers run the chunks before while this
        thread encodes the next, and the first chunk starts once its own documents are encoded
        (while a worker maps the model's tables on a model's first batch), where encoding every
        non-ASCII document up front to place the cuts kept both workers idle for the first
        5-11 ms of a fresh process's 4 MB batch. The native str packer (``pack.StrLayout``, where
        the native library is loaded on CPython) measures every document's UTF-8 first and
        writes each chunk's without holding the interpreter's lock; else Python encodes each
        chunk's documents (``_streamed_pieces``). Chunks are guided (``_guided_ends``). Only
        where nothing needs the whole batch's bytes: no special token to find (a disallowed one
        is refused a chunk at a time, the first in document order raising the batch path's
        error), every document within the chunk budget in characters, pieces cut on the device
        (one-call chunks), no normaliser. None: not such a batch (or out of memory: the batch
        path starts over)."""
        strs = docs.strs()
        workers = self.dev.caps.chunk_workers
        if strs is None or len(strs) < 2 or workers < 2 \
                or not self.dev.caps.chunk_inline or self.profile is not None \
                or model.active_tokens(allowed) or self._host_family(model) is not None \
                or model.normalizer or not model.segmenter.device.one_call:
            return None
        try:
            if self._mode(model)[0] != "device":
                return None
        except ValueError:  # a pre-tokenization mode the model cannot run: the batch path says so
            return None
        budget = self._chunk_budget()
        chars = [len(s) for s in strs]  # (UTF-8 has 1 to 4 bytes a character)
        total = sum(chars)
        if 4 * total <= budget or max(chars) > budget or 4 * max(chars) > CHUNK_LIMIT:
            return None  # surely one chunk, or a document over one: before any UTF-8 is made
        layout = str_layout()
        units = layout.units(strs) if layout is not None else None
        if units is not None:  # the native str packer: no interpreter lock held while packing
            pieces = self._native_pieces(layout, units, budget, workers)
        else:
            pieces = self._streamed_pieces(strs, chars, total, budget, workers)
        # the first chunk's bytes, then the plan on this thread (on a model's first batch: the
        # tables mapped, ~3-5 ms). Built by a worker meanwhile (_plan_ahead, as the batch path
        # does) it took the interpreter's lock from this thread's packing: a fresh process's
        # first chunk started 6-28 ms into a 4 MB batch that way, 7-12 ms this way
        first = next(pieces)
        try:
            plan = self.model_plan(model)
        except self.dev.oom_errors:
            return None

        def chunks():
            for d0, d1, data, off in itertools.chain((first,), pieces):
                if disallowed:  # (the batch path's check, a chunk at a time: the same error)
                    check_buffer(data, off, disallowed, d0)
                hc = prepare(plan.mode, plan.pretok, data, off, _NO_SPANS, 0, d1 - d0)
                yield d0, d1, replace(hc, d0=d0, d1=d1)

        parts: list = []
        place = None
        with self._lock:
            try:
                if first[1] == len(strs):  # one chunk after all: on this thread, no hand-off
                    _, _, hc = next(chunks())
                    parts.append(self._inline_chunk(plan, hc, model.id_dtype)
                                 or self._whole_chunk(plan, hc, model.id_dtype))
                else:
                    place = self._placement(model, units[3] if units is not None else None,
                                            total)
                    self._run_workers(model, plan, chunks(), parts, workers, None, place)
            except self.dev.oom_errors:
                self.dev.release()
                return None
        with self._count_lock:
            counters["device.streamed_batches"] += 1
        if place is None and len(parts) != 1:
            return assemble(parts, len(strs), model.id_dtype,
                            self.dev.host_block)
        # the ids placed as the chunks finished, or one chunk's ids as they are
        return (place.ids() if place is not None else parts[0][1]), offsets_of(parts, len(strs))

    def _placement(self, model, nbytes, chars: int) -> "Placement | None":
        """Where a streamed batch's chunks put their ids as they finish (``emit.Placement``):
        an output of one id per byte of UTF-8 (``nbytes``: each document's; else 4 per
        character), the most a BPE model's ids can be, of which only what the ids fill is
        touched. None (the chunks' ids joined at the end) past ``PLACE_MAX`` bytes of it."""
        upper = int(nbytes.sum()) if nbytes is not None else 4 * chars
        size = max(upper, 1) * np.dtype(model.id_dtype).itemsize
        if size > PLACE_MAX:
            return None
        block = self.dev.host_block(size)
        return Placement(block.view(model.id_dtype))

    def _native_pieces(self, layout, units: tuple, budget: int, workers: int):
        """``_streamed_pieces`` with the native str packer (``pack.StrLayout``): the UTF-8
        lengths of every document first (one call, no copy), so the cuts are ``_guided_ends``'
        on exact sizes; each chunk's bytes written into a workspace block by one call that does
        not hold the interpreter's lock (the chunk workers' calls return to it meanwhile)."""
        nbytes = units[3]
        doc_off = np.zeros(len(nbytes) + 1, np.int64)
        np.cumsum(nbytes, out=doc_off[1:])
        block = self.dev.work_block
        d0 = 0
        for d1 in self._guided_ends(doc_off, 0, budget, workers).tolist():
            size = int(doc_off[d1] - doc_off[d0])
            dst = block(max(size, 1))
            layout.pack(units, d0, d1, dst)
            yield d0, d1, dst[:size], doc_off[d0:d1 + 1] - doc_off[d0]
            d0 = d1

    @staticmethod
    def _streamed_pieces(strs, chars: list, total: int, budget: int, workers: int):
        """The str batch's chunks as they are encoded: (d0, d1, UTF-8 bytes, int64 offsets of
        the chunk's documents from 0). Guided sizes (``_guided_target``) from the characters
        left times the bytes per character encoded so far; a chunk stops before a document that
        would take it past ``budget`` (a document over the budget in bytes, at most 4 times it
        in characters, is a chunk alone)."""
        n = len(strs)
        done_chars = done_bytes = 0
        d = 0
        carry = None  # a document encoded for a chunk it did not fit
        while d < n:
            ratio = done_bytes / done_chars if done_chars else 1.0
            target = _guided_target(int((total - done_chars) * ratio), budget, workers)
            d0, parts, size = d, [], 0
            while d < n:
                b = carry if carry is not None else utf8_of(strs[d])
                carry = None
                if parts and size + len(b) > budget:
                    carry = b
                    break
                parts.append(b)
                size += len(b)
                done_chars += chars[d]
                d += 1
                if size >= target:
                    break
            done_bytes += size
            off = np.zeros(len(parts) + 1, np.int64)
            np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=off[1:])
            yield d0, d, b"".join(parts), off

    def encode_short(self, model, text: str) -> "list | None":
        """One text with no special tokens in it, its whole sequence as one device call where
        the device has that form (``chunk_inline``) and the model cuts its pieces on the
        device, with no normaliser: a list of ids; else None. Skips packing, chunk planning
        and assembly (~50 us): ``Encoding.encode`` takes it for texts of ``SHORT_MIN``
        characters and more that the host cut would spend longer on than the call."""
        if not self.dev.caps.chunk_inline or not self._one_call_model(model):
            return None  # (a family's own stages: SentencePiece, WordPiece, ...)
        plan = self._plan(model)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # surrogates: tiktoken's repair first
            data = fix_surrogates(text).encode("utf-8")
        n = len(data)
        if not n or n > CHUNK_LIMIT or not self._one_call(plan, plan.mode):
            return None  # (pieces cut on the host: the caller's host cut and device merge)
        if n <= self.dev.caps.text_short_max:
            st = self.stages  # (the whole sequence in one call, the workspace the device's)
            ids = self.dev.text_short(plan.tables, data, _SEGMENT_BITS, model.id_dtype,
                        st.dedup_slots_per_entry if st.dedup else 0.0)
            with self._count_lock:
                counters["device.chunks"] += 1
                counters["device.short_texts"] += 1
            return id_list(ids)
        ends = np.array([0, n], np.uint32)  # one document, one segment, no token spans
        hc = HostChunk(0, 1, n, "device", [np.frombuffer(data, np.uint8), ends, ends,
                                            _SEGMENT_BITS, _NONE_U32, _NONE_U32], 1, n_marks=2)
        # (no backend lock: the call touches only this thread's arrays and the read-only
        # tables, as each chunk worker's does, so threads' short texts run side by side)
        got = self._inline_chunk(plan, hc, model.id_dtype)
        if got is None:  # (pieces cut on the host, a normaliser check, a profile)
            return None
        with self._count_lock:
            counters["device.short_texts"] += 1
        return id_list(got[1])

    def _one_call_model(self, model) -> bool:
        """Whether one text of ``model`` may take a device's one-call paths (``encode_short``,
        ``encode_few``): a segmenter whose device form runs there (byte-level BPE), no
        normaliser."""
        return self._host_family(model) is None and model.segmenter.device.one_call \
            and not model.normalizer

    def encode_list(self, model, text: str, allowed: frozenset) -> list:
        """``Backend.encode_list``; besides, a device whose workspace is
        host memory (``dev.trim_idle``: the native CPU) gives its idle workspace back first when
        the text is long (``TRIM_CHARS`` characters or more), so the list is not made beside
        it: a 1 MB base64 blob's ~20 MB of workspace stayed resident under its list (peak 2.4x
        tiktoken's); a next text that long faults its workspace in again (a few % of its time).
        The list is made from the chunks' ids in turn (``lists.id_list_of_parts``), never
        joined into one array first (a 10 MB base64 blob: 28 MB less)."""
        docs = Documents([text])
        self._plan_ahead(model)
        got = self._batch_parts(model, docs, allowed, frozenset())
        if got is None:
            ids, _ = get_backend("numpy").encode(model, docs, allowed, frozenset())
            return id_list(ids)
        parts = sorted(got[0], key=lambda p: p[0])
        if len(text) >= TRIM_CHARS:
            self.dev.trim_idle()
        return id_list_of_parts([p[1] for p in parts])

    def merge_pieces(self, model, pieces: list, flat: bool = False) -> "list | None":
        """The merge stage alone, for pieces the host cut (UTF-8 ``bytes``): each
        piece's ids as a tuple, as the whole pipeline gives them (a whole token first, then the
        sequential rule; a long piece cut where no merge crosses, its long runs in O(L log L)).
        ``flat``: all the pieces' ids as one list instead (a text of a few pieces: 7.5 M ids of a
        10 MB emoji run made a list, a tuple and a list again, ~170 ms; one list ~95).

        ``Encoding.encode`` sends a text's long pieces here (``dedup.ids_of_pieces``): the host
        regex cuts a text of a few pieces in microseconds, and the merge kernels (2-3 launches,
        the ids read from the merge's own scratch) cost far less than the pre-tokenization
        kernels and a chunk's set-up (~0.3 ms a call). None where the pieces cannot run as one
        chunk (over 2 GiB, out of device memory) or the model has no merge kernels here: the
        caller merges them itself."""
        k = len(pieces)
        if not k:
            return []
        lens = np.fromiter(map(len, pieces), np.int64, k)
        starts = np.zeros(k + 1, np.int64)
        np.cumsum(lens, out=starts[1:])
        n = int(starts[k])
        if n > CHUNK_LIMIT or self._host_family(model) is not None \
                or not model.segmenter.device.one_call:
            return None
        return self._merge_joined(model, b"".join(pieces), starts, lens, flat)

    def merge_spans(self, model, data, starts: np.ndarray) -> "list | None":
        """``merge_pieces(model, pieces, flat=True)`` for pieces given as spans of one buffer:
        piece ``i`` is ``data[starts[i]:starts[i + 1]]`` (``data``: UTF-8 ``bytes`` or a uint8
        array, ``pack.utf8_data``; ``starts``: int64, the end last). ``Encoding.encode`` sends a
        text of a few pieces here, its UTF-8 uncopied (joining the pieces' ``bytes`` again made
        two more copies of a long run)."""
        k = len(starts) - 1
        if k <= 0:
            return [] if k == 0 else None
        n = int(starts[k])
        if n > CHUNK_LIMIT or self._host_family(model) is not None \
                or not model.segmenter.device.one_call:
            return None
        return self._merge_joined(model, data, starts, np.diff(starts), True)

    def encode_few(self, model, data: bytes, limit: int) -> "list | None":
        """The ids of one text (its UTF-8 ``data``; no special tokens) cut on the device where
        the device cuts one text on the calling thread (``pretok_inline``: the native CPU
        device) and the model's pieces are cut there, when it has at most ``limit`` pieces: its
        pieces then merge as ``merge_pieces`` merges them; else None. ``Encoding.encode`` takes
        it for a long non-ASCII text of a few pieces (an emoji run), whose cut by the host
        scanner made ~4.6 bytes of numpy temporaries per byte."""
        n = len(data)
        if not self.dev.caps.pretok_inline or not n or n > CHUNK_LIMIT or not self._one_call_model(model):
            return None
        plan = self._plan(model)
        if plan.mode != "device" or plan.norm_form is not None or not plan.seg.one_call:
            return None
        got = self.dev.pretok_inline(plan.tables, data, np.array([0, n], np.uint32), _SEGMENT_BITS, limit)
        if got is None:
            return None
        starts = got.astype(np.int64)
        with self._count_lock:
            counters["device.few_texts"] += 1
        return self._merge_joined(model, data, starts, np.diff(starts), True)

    def _merge_joined(self, model, joined, starts: np.ndarray, lens: np.ndarray,
                      flat: bool) -> "list | None":
        """``merge_pieces`` of the pieces ``joined[starts[i]:starts[i + 1]]`` (``lens``: their
        lengths; ``joined``: ``bytes`` or a uint8 array, the pieces' bytes and nothing after)."""
        k, n = len(lens), int(starts[len(lens)])
        spec = np.full(k + 1, NORMAL, np.uint32)
        spec[k] = GAP  # the sentinel entry
        dev = self.dev
        with self._lock:
            try:
                plan = self._plan(model)
                has_long = bool((lens >= LONG_PIECE).any())
                whole = bool((lens <= plan.tables.scalars.get("w_max_len", 0)).any())
                if dev.caps.merge_inline:  # the stage as one call (native)
                    counts, ids = dev.merge_inline(plan.tables, joined, starts.astype(np.uint32), spec,
                                         has_long, whole)
                    counts = counts[:k]  # (the sentinel's is the last)
                else:
                    dev.begin_chunk(n)
                    with dev.stream(0):
                        d_buf, d_start, d_spec, d_n = dev.upload(
                            [np.frombuffer(joined, np.uint8), starts.astype(np.uint32), spec,
                             np.array([k + 1], np.uint32)])
                        _, count, scratch = self.stages.merge(
                            plan.tables, n, d_buf, d_start, d_spec, d_n, k + 1, dedup=False,
                            has_long=has_long, whole=whole)
                        got_count = dev.download("count", count, k)
                        got_ids = dev.download("scratch", scratch, n)
                        counts, ids = got_count.result(), got_ids.result()
            except dev.oom_errors:
                dev.release()
                return None
        with self._count_lock:
            counters["device.merge_pieces"] += k
        # no dedup: each piece's ids are at its own start (a whole token: one id there)
        if flat:
            return id_list_of_parts([ids[a:a + c] for a, c in zip(starts.tolist(),
                                                                 counts.tolist())])
        return [tuple(ids[a:a + c].tolist()) for a, c in zip(starts.tolist(), counts.tolist())]

    def time_kernels(self, model, texts, repeat: int = 3) -> dict:
        """Kernel-only timing of one chunk (the first ``chunk_bytes`` of ``texts``, no tokens):
        the input is uploaded once, then every stage is timed with device events.
        Returns {"bytes", "docs", "mode", "ms": {stage: best ms}, "total_ms"}."""
        buf, doc_off = Documents(texts).packed()
        doc_off = np.asarray(doc_off, np.int64)
        with self._lock:
            plan = self._plan(model)
            d1 = self._chunk_end(doc_off, 0, self._chunk_budget())
            hc = prepare(plan.mode, plan.pretok, buf, doc_off, _NO_SPANS, 0, d1,
                         () if plan.norm_form else plan.normalizer)
            best: dict = {}
            with self.dev.stream(0):
                ins = self.dev.upload(hc.inputs)
                if plan.norm_form is not None and hc.mode == "device":
                    hc, ins = self._normalize(plan, hc, ins)  # (not timed: once per chunk)
                for _ in range(max(1, repeat)):
                    marks = [("start", self.dev.mark())]
                    self._kernels(plan, hc, ins, model.id_dtype, marks)
                    for (_, a), (name, b) in zip(marks, marks[1:]):
                        ms = self.dev.elapsed_ms(a, b)
                        best[name] = min(best.get(name, ms), ms)
        return {"bytes": hc.n, "docs": d1, "mode": hc.mode, "ms": best,
                "total_ms": sum(best.values())}

    # ---- planning ------------------------------------------------------------------------------

    def _host_family(self, model) -> "str | None":
        """Why every stage of ``model`` runs on the host here (None: the device runs some): a
        segmenter without a device form (SentencePiece, Unigram, WordLevel) everywhere; one
        whose kernel this device lacks (a device adapter may say which kernels it has:
        ``has_kernel``, e.g. Metal)."""
        mode, why = pretok_mode(model)
        if mode == "host":
            return why
        form = model.segmenter.device
        if not self.dev.has_kernel(form.kernel):
            return f"{model.segmenter.name}: the {self.name} device has no {form.kernel} kernel yet"
        return None

    def _mode(self, model) -> tuple[str, str]:
        mode, why = pretok_mode(model, self.dev.caps.pretok_families)
        want = self.pretok
        if want == "auto" or want == mode or model.segmenter.device is None:
            return mode, why
        if want == "device":
            raise ValueError(f"{model.name}: pre-tokenization cannot run on the device ({why})")
        if want == "scanner":
            if model.pretokenizer.pattern is None or model.pretokenizer.scanner is None:
                raise ValueError(f"{model.name}: no vectorised scanner for this pre-tokenizer")
            return "scanner", "pieces cut on the host (vectorised scanner, forced)"
        return "split", "pieces cut on the host (pre-tokenizer split, forced)"

    def _norm_form(self, model, mode: str) -> "str | None":
        return device_norm_form(model, mode, self.dev.caps.normal_forms)

    def prepare_ahead(self, model) -> None:
        """A chunk worker builds ``model``'s plan (maps its tables) now (``_plan_ahead``)."""
        self._plan_ahead(model)

    def _plan_ahead(self, model) -> None:
        """On a model's first batch, a chunk worker builds its plan (maps the tables, a few
        ms) while this thread packs the documents; ``_plan`` then waits for it (``_plan_lock``
        only: the batch holds ``_lock`` meanwhile, and a worker waiting for that would sit out
        the whole batch). An error there is dropped: ``_encode`` builds the plan again and
        handles it."""
        workers = self.dev.caps.chunk_workers
        got = self._plans.get(id(model))
        if workers > 1 and (got is None or got[0]() is not model):
            self._chunk_pool(workers).submit(self._plan, model)

    def model_plan(self, model) -> ModelPlan:
        """The model's plan on this device (tables uploaded on first use)."""
        with self._lock:
            return self._plan(model)

    def _plan(self, model) -> ModelPlan:
        with self._plan_lock:
            return self._build_plan(model)

    def _build_plan(self, model) -> ModelPlan:
        key = id(model)
        got = self._plans.get(key)
        if got is not None and got[0]() is model:
            return got[1]
        for k in [k for k, (ref, _) in self._plans.items() if ref() is None]:
            del self._plans[k]  # tables of models that are gone
        mode, why = self._mode(model)
        scanner = model.pretokenizer.scanner if mode == "device" else None
        form = self._norm_form(model, mode)
        arrays, scalars = upload_tables(self.dev, model, scanner, self._class_tables, form)
        self.dev.synchronize()  # the streams are non-blocking: tables must be there before use
        norm, pre = model.front  # (BERT's normaliser runs in its pre-tokenizer's pass)
        plan = ModelPlan(mode, why, pre, Tables(arrays, scalars),
                         norm.steps if norm is not None else (), form, model.segmenter.device)
        self._plans[key] = (weakref.ref(model), plan)
        return plan

    def _chunk_budget(self) -> int:
        cap = self.chunk_bytes or MAX_CHUNK
        fit = self.dev.memory_budget() // (2 * BYTES_PER_BYTE)  # two chunks in flight
        return int(max(min(cap, fit, CHUNK_LIMIT), 1))

    @staticmethod
    def _guided_ends(doc_off, start: int, budget: int, workers: int) -> np.ndarray:
        """Chunk ends (document indices) for chunk workers from document ``start`` on: each
        chunk takes about the bytes left over ``GUIDED_SHARE`` x ``workers`` (at most
        ``budget``, at least ``GUIDED_MIN``; ``_guided_target``), cut at the document boundary
        nearest that without passing the budget, so the last chunks are small and the workers
        finish together whatever each chunk costs. Chunks of one size (4.02 MB of prose in four
        1 MB chunks on two workers) left a worker idle for 4-13 ms of a 40-60 ms batch: a chunk's
        cost follows its text, not only its bytes. (A document is at most ``budget`` here:
        ``cut_long_documents`` cut the longer ones.)"""
        n_docs = len(doc_off) - 1
        last = int(doc_off[-1])
        ends = []
        d = start
        while d < n_docs:
            at = int(doc_off[d])
            want = at + _guided_target(last - at, budget, workers)
            d1 = int(np.searchsorted(doc_off, want, "left"))  # first boundary at or after
            if d1 > n_docs:
                d1 = n_docs  # the batch ends before the target
            elif d1 > d + 1 and (want - int(doc_off[d1 - 1]) <= int(doc_off[d1]) - want
                                 or int(doc_off[d1]) - at > budget):
                d1 -= 1  # the boundary before is nearer, or the one after passes the budget
            d = max(d1, d + 1)
            ends.append(d)
        return np.array(ends, np.int64)

    @staticmethod
    def _chunk_end(doc_off, d0: int, budget: int) -> int:
        end = int(np.searchsorted(doc_off, doc_off[d0] + budget, "right")) - 1
        return max(end, d0 + 1)

    # ---- the loop over chunks ------------------------------------------------------------------

    def _encode(self, model, buf, doc_off, spans, allowed) -> list:
        n_docs = len(doc_off) - 1
        parts: list = []
        dev = self.dev
        try:
            plan = self._plan(model)
        except dev.oom_errors as e:
            dev.release()
            self.fallback("tables", "out of memory",
                          f"out of device memory uploading {model.name}'s tables ({e}); "
                          "encoding this batch on the host")
            return [self._host_part(model, buf, doc_off, 0, n_docs, allowed)]
        if plan.mode != "device":
            self.fallback("pretok", plan.mode, f"{model.name}: {plan.why}",
                          once_key=("pretok", id(model)))
        if plan.normalizer and plan.norm_form is None:
            self.fallback("normalize", "host", f"{model.name}: its normaliser "
                          f"({', '.join(plan.normalizer)}) runs on the host",
                          once_key=("normalize", id(model)))
        budget = self._chunk_budget()
        start = 0
        while start < n_docs:
            try:
                self._run(model, plan, buf, doc_off, spans, start, budget, parts, allowed)
                break
            except dev.oom_errors as e:
                dev.release()
                start = max((p[0] + len(p[2]) for p in parts), default=start)  # kept
                if start >= n_docs:
                    break
                end = self._chunk_end(doc_off, start, budget)
                size = int(doc_off[min(end, n_docs)] - doc_off[start])
                one_doc = end == start + 1
                if one_doc or budget // 2 < self.min_chunk:
                    end = start + 1 if one_doc and budget // 2 >= self.min_chunk else n_docs
                    self.fallback("chunk", "out of memory",
                                  f"out of device memory ({e}) on {size} bytes of text; "
                                  f"documents {start}..{end - 1} are encoded on the host")
                    parts.append(self._host_part(model, buf, doc_off, start, end, allowed))
                    start = end
                else:
                    budget //= 2
        return parts

    def _run(self, model, plan, buf, doc_off, spans, start, budget, parts, allowed) -> None:
        """Chunks from document ``start`` on, two in flight; finished chunks go to ``parts``."""
        workers = self.dev.caps.chunk_workers
        n_docs = len(doc_off) - 1
        if workers > 1 and self._chunk_end(doc_off, start, budget) < n_docs:  # several chunks
            ends = self._guided_ends(doc_off, start, budget, workers)

            def oversized(d0, d1):
                return self._oversized(model, buf, doc_off, d0, d1, allowed)

            return self._run_workers(model, plan, self._chunks(plan, buf, doc_off, spans, start,
                                                               budget, ends),
                                     parts, workers, oversized)
        flight: collections.deque = collections.deque()
        k = 0
        for d0, d1, hc in self._chunks(plan, buf, doc_off, spans, start, budget):
            if hc is None or hc.n == 0:  # oversized, or nothing to encode
                while flight:
                    self._finish(flight.popleft(), parts)
                parts.append(self._oversized(model, buf, doc_off, d0, d1, allowed)
                             if hc is None else self._empty_part(model, d0, d1))
                continue
            # a short chunk alone (or a one-thread device): its whole sequence in one call
            if not flight and hc.n <= self.dev.caps.inline_max_bytes:
                got = self._inline_chunk(plan, hc, model.id_dtype)
                if got is not None:
                    parts.append(got)
                    continue
            depth = self.dev.caps.in_flight
            if len(flight) == depth:
                self._finish(flight.popleft(), parts)  # frees its slot
            slot = k % depth
            k += 1
            self.dev.begin_chunk(hc.n)
            with self.dev.stream(slot):
                flight.append(self._enqueue(plan, hc, slot, model.id_dtype))
            if len(flight) == depth:
                self._advance(flight[0])  # start the older chunk's ids download
        while flight:
            self._finish(flight.popleft(), parts)

    def _run_workers(self, model, plan, chunks, parts, workers: int, oversized,
                     place: "Placement | None" = None) -> None:
        """``_run`` for a host-memory device with chunk workers (``dev.chunk_workers``, the
        native CPU): each chunk of ``chunks`` ((d0, d1, host chunk) in order, ``_chunks``)
        runs start to end on one worker thread (``dev.solo()``: every launch at once, on that
        thread alone), ``workers`` chunks side by side, one more prepared ahead. No chunk waits
        for another's fences, as the chunks of one Python thread feeding two streams do.
        ``parts`` are kept in document order, so an error (out of memory) leaves a prefix of
        the batch done, as ``_run`` does. ``oversized(d0, d1)``: the part of a document too big
        for a chunk (a host chunk of None). ``place``: where the chunks' ids go as they finish
        (``emit.Placement``; their parts then carry None for ids)."""
        pool = self._chunk_pool(workers)
        pending: collections.deque = collections.deque()
        try:
            for k, (d0, d1, hc) in enumerate(chunks):
                if hc is None:  # oversized: after the chunks before it, on the host
                    while pending:
                        parts.append(pending.popleft().result())
                    parts.append(self._placed(place, k, oversized(d0, d1)))
                elif hc.n == 0:
                    pending.append(_Done(self._placed(place, k,
                                                      self._empty_part(model, d0, d1))))
                else:
                    if len(pending) > workers:
                        parts.append(pending.popleft().result())
                    if place is None:
                        pending.append(pool.submit(self._whole_chunk, plan, hc, model.id_dtype))
                    else:
                        pending.append(pool.submit(self._placed_chunk, plan, hc,
                                                   model.id_dtype, place, k))
            while pending:
                parts.append(pending.popleft().result())
        finally:  # on an error: chunks not started are dropped, running ones finish first
            running = [f for f in pending if not isinstance(f, _Done) and not f.cancel()]
            concurrent.futures.wait(running)

    def _chunks(self, plan, buf, doc_off, spans, start: int, budget: int, ends=None):
        """The batch's chunks from document ``start`` on, in order, each prepared when asked
        for: (d0, d1, host chunk), or (d0, d1, None) for one document too big for uint32
        positions (``_oversized``). ``ends``: the chunks' end documents (``_guided_ends``), else
        each chunk takes the documents that fit ``budget``."""
        for d0, d1 in self._chunk_ranges(doc_off, start, budget, ends):
            if int(doc_off[d1] - doc_off[d0]) > CHUNK_LIMIT:
                yield d0, d1, None
            else:
                yield d0, d1, prepare(plan.mode, plan.pretok, buf, doc_off, spans, d0, d1,
                                      () if plan.norm_form else plan.normalizer)

    def _chunk_ranges(self, doc_off, start: int, budget: int, ends=None):
        """(d0, d1) of each chunk from document ``start`` on: ``ends`` (``_guided_ends``), else
        each chunk takes the documents that fit ``budget``."""
        n_docs = len(doc_off) - 1
        d0 = start
        k = 0
        while d0 < n_docs:
            if ends is None:
                d1 = self._chunk_end(doc_off, d0, budget)
            else:
                d1 = int(ends[k])
                k += 1
            yield d0, d1
            d0 = d1

    def _oversized(self, model, buf, doc_off, d0: int, d1: int, allowed) -> tuple:
        n = int(doc_off[d1] - doc_off[d0])
        self.fallback("chunk", "oversized", f"document {d0} has {n} bytes (over 2 GiB); it is "
                      "encoded on the host", once_key=("oversized", d0))
        return self._host_part(model, buf, doc_off, d0, d1, allowed)

    @staticmethod
    def _empty_part(model, d0: int, d1: int) -> tuple:
        """Documents with nothing to encode (empty, or only token spans that emit nothing)."""
        return d0, np.zeros(0, model.id_dtype), np.zeros(d1 - d0, np.int64)

    def _chunk_pool(self, workers: int):
        """The chunk workers' threads (one pool per backend and process: a fork()ed child
        makes its own, its parent's threads do not exist there)."""
        got = self._workers
        if got is None or got[0] != os.getpid() or got[1] != workers:
            got = self._workers = (os.getpid(), workers, concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="gputok-chunk"))
        return got[2]

    def start_workers(self) -> None:
        """Start the chunk workers' threads now (a device with ``chunk_workers``), not at the
        first batch: a thread's start waits until the OS runs it, a few ms on a busy machine
        when the first chunk already keeps the other cores busy."""
        workers = self.dev.caps.chunk_workers
        if workers > 1:
            pool = self._chunk_pool(workers)
            meet = threading.Barrier(workers)  # every task waits for the others: one thread each
            for _ in range(workers):
                pool.submit(meet.wait)

    @staticmethod
    def _placed(place: "Placement | None", k: int, part: tuple) -> tuple:
        """Chunk ``k``'s part with its ids given to ``place`` (None: kept in the part)."""
        if place is None:
            return part
        place.place(k, part[1])
        return part[0], None, part[2]

    def _placed_chunk(self, plan: ModelPlan, hc: HostChunk, out_dtype, place: Placement,
                      k: int) -> tuple:
        """``_whole_chunk`` for chunk ``k`` of a batch whose ids go to ``place``: emitted in
        their place where the chunk's id count is known first and every earlier chunk has its
        place, else copied in. (first document, None, lengths)."""
        reserved = []

        def out_for(count: int) -> "np.ndarray | None":
            got = place.reserve(k, count)
            reserved.append(got is not None)
            return got

        d0, ids, lengths = self._whole_chunk(plan, hc, out_dtype, out_for)
        if not any(reserved):
            place.place(k, ids)
        return d0, None, lengths

    def _whole_chunk(self, plan: ModelPlan, hc: HostChunk, out_dtype, out_for=None) -> tuple:
        """One chunk start to end on the calling worker thread: (first document, ids, lengths).
        ``out_for(count)``: where a chunk that knows its id count before it emits may put its
        ids (an array of that many, or None: an array of its own)."""
        got = self._inline_chunk(plan, hc, out_dtype, out_for)
        if got is not None:
            return got
        with self.dev.solo():
            st = self._enqueue(plan, hc, 0, out_dtype)
            done: list = []
            self._finish(st, done)
        return done[0]

    def _inline_chunk(self, plan: ModelPlan, hc: HostChunk, out_dtype,
                      out_for=None) -> "tuple | None":
        """A chunk cut on the device, start to end in one call on this thread where the device
        has that form (``chunk_inline``: the native CPU device) and the model takes no
        normaliser check and no WordPiece stage (``_one_call``): (first document, ids,
        lengths); else None."""
        if not self.dev.caps.chunk_inline or not self._one_call(plan, hc.mode):
            return None
        st = self.stages
        ids, doc = self.dev.chunk_inline(plan.tables, hc, out_dtype,
                          st.dedup_slots_per_entry if st.dedup else 0.0, out_for)
        with self._count_lock:
            counters["device.chunks"] += 1
        return hc.d0, ids, doc[1:] - doc[:-1]  # (np.diff: ~1.5 us more a call)

    def _one_call(self, plan: ModelPlan, mode: str) -> bool:
        """Whether a chunk of ``mode`` may run its whole sequence as one call (``chunk_inline``,
        ``text_short``): pieces cut on the device, no normaliser check, no WordPiece stage, no
        ``profile`` collecting per-stage times (those need the stages' own launches)."""
        return (mode == "device" and plan.norm_form is None and plan.seg.one_call
                and self.profile is None)

    def _enqueue(self, plan: ModelPlan, hc: HostChunk, slot: int, out_dtype) -> _InFlight:
        """Upload one chunk, queue its kernels and the download of its document offsets on the
        current stream; nothing here waits for the device."""
        marks: list = []
        if self.profile is not None:
            marks.append(("start", self.dev.mark()))
        ins = self.dev.upload(hc.inputs)
        if plan.norm_form is not None and hc.mode == "device":
            hc, ins = self._normalize(plan, hc, ins)
        if self.profile is not None:
            marks.append(("h2d", self.dev.mark()))
        out, out_doc = self._kernels(plan, hc, ins, out_dtype,
                                     marks if self.profile is not None else None)
        doc = self.dev.download("doc", out_doc, hc.n_docs + 1)
        with self._count_lock:  # chunk workers run this side by side
            counters["device.chunks"] += 1
        return _InFlight(hc, slot, out, doc, marks=marks)

    def _normalize(self, plan: ModelPlan, hc: HostChunk, ins: list) -> tuple:
        """The quick check of an uploaded chunk (encode_nfc.cu); the rare flagged spans are
        normalised on the host and the rebuilt chunk uploaded. Waits for the check's count
        (4 bytes), the one place a chunk waits for the device before its ids."""
        pos = self.stages.nfc_check(plan.tables, hc.n, ins[0])
        if not len(pos):
            return hc, ins
        new, spans, nbytes = splice_normalized(hc, pos, plan.norm_form)
        with self._count_lock:
            self.host_normalized["spans"] += spans
            self.host_normalized["bytes"] += nbytes
            counters["normalize.host_bytes"] += nbytes
        if new is hc:
            return hc, ins
        return new, self.dev.upload(new.inputs)

    def _kernels(self, plan: ModelPlan, hc: HostChunk, ins: list, out_dtype, marks=None):
        """The device stages of one uploaded chunk; (ids, document offsets) on the device."""
        st = self.stages

        def mark(name):
            if marks is not None:
                marks.append((name, self.dev.mark()))

        d_buf = ins[0]
        if hc.mode == "device":
            ent = st.pretok(plan.tables, hc.n, d_buf, ins[2], ins[3], hc.n_marks)
            mark("pretok")
            pstart, spec, doc_entry, n_entries, cap = st.entries(
                hc.n, ent, ins[1], hc.n_docs, ins[4], ins[5], hc.n_spans)
            del ent
            mark("entries")
        else:
            _, pstart, spec, doc_entry, n_entries = ins
            cap = hc.n_entries
        # the segmenter's device stage (``SegmenterDevice.stage``: merge, wordpiece)
        owner, count, scratch = getattr(st, plan.seg.stage)(plan.tables, hc.n, d_buf, pstart,
                                                            spec, n_entries, cap)
        mark("merge")
        out, out_doc = st.emit(hc.n, pstart, n_entries, cap, owner, count, scratch, doc_entry,
                               hc.n_docs, out_dtype)
        mark("emit")
        return out, out_doc

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
        parts.append((st.hc.d0, ids, np.diff(doc)))

    def _host_part(self, model, buf, doc_off, d0, d1, allowed):
        docs = Documents([buf[int(doc_off[d]):int(doc_off[d + 1])] for d in range(d0, d1)])
        ids, off = get_backend("numpy").encode(model, docs, allowed, frozenset())
        return (d0, ids.astype(model.id_dtype, copy=False), np.diff(off))


class _Done:
    """A finished download (the interface of a pending one)."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value
