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
A host-memory device with chunk workers (the native CPU: ``caps.chunk_workers``) runs a batch
of several chunks differently: each chunk goes start to end on one worker thread, as many
side by side as there are workers, one more prepared ahead (``runners/workers.py``).
A document longer than a chunk is first cut at points where the pattern is known to start a
piece and to look no further back (``hostplan.cut_long_documents``), so one giant line runs as
ordinary chunks. Out of device memory, a chunk is retried with half the budget (the batch is
split); a single document that still does not fit, or a budget below ``MIN_CHUNK``, goes to the
numpy backend.
Documents over 2 GiB (positions are uint32) always do. Every stage the host runs instead of the
device, and every part of a batch the numpy backend encodes, is a counted fallback with a
warning once (``Backend.fallback``).

The device adapter (``protocol.py``) is small on purpose: memory, copies, streams and
``launch(name, grid, block, args)``, and the ``Capabilities`` it states; this module knows
nothing of CUDA. The runners (``runners/``) are its parts: planning (``plan.py``), one chunk
(``chunk.py``), the GPU's streams (``streams.py``), the CPU's chunk workers (``workers.py``),
streamed str batches (``streamed.py``), one text (``onetext.py``) and the per-document pass
(``perdoc.py``, in front of the others where the device has one); the native device's
one-call forms are runners picked by its capabilities, not branches here. A segmenter whose
device form is a whole chunk (``SegmenterDevice.stage`` "chunk": SentencePiece BPE, its own
cuts and normaliser) has its runner (``spm.py``), batches and single texts alike; so has one
whose form is a lattice ("lattice": Unigram, ``unigram.py``) on a device that has one.

Performance notes (``bench/bench_cuda.py`` reports end-to-end and per-stage times; the H200
runs: bench/results/cuda.md):
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
import threading

import numpy as np

from . import get_backend
from .base import Backend
from .device_stages import DeviceStages
from .hostplan import cut_long_documents, prepare
from .runners.chunk import CHUNK_LIMIT, ChunkRunner, chunk_end
from .runners.onetext import SHORT_MAX, OneText
from .runners.perdoc import PerDocRunner
from .runners.plan import ModelPlan, Planner
from .runners.spm import SpmRunner
from .runners.unigram import UnigramRunner
from .runners.staged import StagedBatch
from .runners.streamed import StreamedBatch
from .runners.streams import StreamLoop
from .runners.workers import WorkerPool, guided_ends
from ..stages.emit import assemble
from ..stages.pack import Documents
from ..stages.split import check_buffer, token_spans

BYTES_PER_BYTE = 64  # device memory planned per input byte of a chunk (see the notes above)
MAX_CHUNK = 256 << 20  # bytes of text per chunk at most
MIN_CHUNK = 1 << 20  # below this an out-of-memory chunk goes to the host


class DeviceBackend(Backend):
    """The encode pipeline on one device.

    ``chunk_bytes`` caps the text per chunk (default: from free device memory, at most
    ``MAX_CHUNK``); ``dedup`` merges each distinct piece once per chunk; ``pretok`` forces where
    pieces are cut ("auto", "device", "scanner" or "split"; "device" only for the pattern
    families the kernels know); ``min_chunk``: out of device memory, a chunk's budget is halved
    down to this many bytes, then its documents go to the host; ``one_call_max``: the longest
    single text (characters) encoded as one device call where the device has that form.
    """

    def __init__(self, device, *, name: str = "device", chunk_bytes: "int | None" = None,
                 dedup: bool = False, pretok: str = "auto", min_chunk: int = MIN_CHUNK,
                 one_call_max: int = SHORT_MAX):
        super().__init__()
        if dedup and not device.caps.dedup:
            raise ValueError(f"dedup=True is not available on the {name} backend: the piece "
                             "dedup claims hash slots with a 64-bit compare-and-swap, which "
                             f"{device.name} lacks; use dedup=False")
        self.name = name
        self.dev = device
        self.stages = DeviceStages(device, dedup=dedup)
        self.chunk_bytes = chunk_bytes
        self.min_chunk = int(min_chunk)
        self.tools = device.host_tools()
        self.planner = Planner(device, name, pretok)
        self.lock = threading.RLock()  # a batch's use of the device
        self.count_lock = threading.Lock()
        self.profile: "list | None" = None  # set to a list to collect per-stage times
        #: spans the device's quick check sent to the host normaliser: {"spans", "bytes"}
        self.host_normalized: collections.Counter = collections.Counter()
        # the runners, as the device's capabilities pick them
        caps = device.caps
        self.chunk = ChunkRunner(self)
        self.streams = StreamLoop(self)
        self.workers = WorkerPool(self) if caps.chunk_workers > 1 else None
        self.streamed = StreamedBatch(self) if self.workers and caps.chunk_inline else None
        self.staged = StagedBatch(self) if caps.staging else None
        self.perdoc = PerDocRunner(self) if caps.per_doc else None
        self.text = OneText(self, one_call_max)
        self.spm = SpmRunner(self)  # segmenters whose device form is a whole chunk
        self.unigram = UnigramRunner(self)  # lattice segmenters (Unigram), where it has one

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.dev.name}>"

    @property
    def pretok(self) -> str:
        return self.planner.pretok

    @property
    def host(self) -> Backend:
        """The backend a part the device does not run goes to (numpy)."""
        return get_backend("numpy")

    # ---- public --------------------------------------------------------------------------------

    def plan(self, model) -> dict:
        own = self.spm.for_model(model) or self.unigram.for_model(model)
        return own.plan(model) if own is not None else self.planner.describe(model)

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset):
        try:
            return self._encode_batch(model, docs, allowed, disallowed)
        finally:
            self.dev.batch_done()  # (a GPU gives its pools back unless held: ``holding``)

    def holding(self):
        """Keep the device's memory between batches while inside (``Backend.holding``)."""
        return self.dev.hold()

    def _encode_batch(self, model, docs, allowed: frozenset, disallowed: frozenset):
        own = self.spm.for_model(model) or self.unigram.for_model(model)
        if own is not None:
            return own.encode(model, docs, allowed, disallowed)
        if self.perdoc is not None:
            got = self.perdoc.encode(model, docs, allowed, disallowed)
            if got is not None:
                return got
        for runner in (self.streamed, self.staged):
            if runner is not None:
                got = runner.encode(model, docs, allowed, disallowed)
                if got is not None:
                    return got
        self.ahead(model)
        got = self.batch_parts(model, docs, allowed, disallowed)
        if got is None:  # (a family without kernels here: the numpy backend)
            return self.host.encode(model, docs, allowed, frozenset())
        parts, n_docs, keep = got
        # the output in host memory the device recycles (native), else in fresh 2 MB pages
        ids, off = assemble(parts, n_docs, model.id_dtype, self.dev.host_block)
        return (ids, off) if keep is None else (ids, off[keep])

    def encode_text(self, model, text: str, allowed: frozenset) -> list:
        spm = self.spm.for_model(model)
        if spm is not None:  # (a text of any length, tokens and all: one call where it can)
            got = spm.encode_text(model, text, allowed)
            return got if got is not None else self.encode_list(model, text, allowed)
        uni = self.unigram.for_model(model)
        if uni is not None:
            return uni.encode_text(model, text, allowed)
        return self.text.encode_text(model, text, allowed)

    def text_call(self, model):
        own = self.spm.for_model(model) or self.unigram.for_model(model)
        if own is not None:
            return own.text_call(model)
        return self.perdoc.text_call(model) if self.perdoc is not None else None

    def encode_list(self, model, text: str, allowed: frozenset) -> list:
        own = self.spm.for_model(model) or self.unigram.for_model(model)
        if own is not None:
            ids, _ = own.encode(model, Documents([text]), allowed, frozenset())
            return self.id_list(ids)
        return self.text.encode_list(model, text, allowed)

    def merge_pieces(self, model, pieces: list, flat: bool = False) -> "list | None":
        """The merge stage alone for host-cut pieces (``OneText.merge_pieces``)."""
        return self.text.merge_pieces(model, pieces, flat)

    def time_kernels(self, model, texts, repeat: int = 3) -> dict:
        """Kernel-only timing of one chunk (``ChunkRunner.time_kernels``)."""
        return self.chunk.time_kernels(model, texts, repeat)

    def model_plan(self, model) -> ModelPlan:
        """The model's plan on this device (tables uploaded on first use)."""
        with self.lock:
            return self.planner.get(model)

    def prepare_ahead(self, model) -> None:
        """A chunk worker builds ``model``'s plan (maps its tables) now (``ahead``)."""
        self.ahead(model)

    def ahead(self, model) -> None:
        """On a device with chunk workers, one builds ``model``'s plan in the background."""
        if self.workers is not None:
            self.workers.ahead(model)

    def start_workers(self) -> None:
        """Start the chunk workers' threads now, not at the first batch (a thread's start
        waits until the OS runs it, a few ms on a busy machine)."""
        if self.workers is not None:
            self.workers.start()

    def chunk_budget(self) -> int:
        cap = self.chunk_bytes or MAX_CHUNK
        fit = self.dev.memory_budget() // (2 * BYTES_PER_BYTE)  # two chunks in flight
        return int(max(min(cap, fit, CHUNK_LIMIT), 1))

    # ---- the batch path ------------------------------------------------------------------------

    def batch_parts(self, model, docs, allowed: frozenset, disallowed: frozenset
                     ) -> "tuple | None":
        """The batch path's chunk results, not yet joined: (parts ``(d0, ids, lengths)`` as
        ``emit.assemble`` takes them, the number of documents they cover, and which of their
        offsets are the batch's documents' (None: all; a document cut at safe points is
        several)). None where a family has no kernels here (the caller takes the numpy
        backend; the fallback is counted and warned about here)."""
        buf, doc_off = docs.packed(self.tools.utf8_check)
        doc_off = np.asarray(doc_off, np.int64)
        if disallowed:
            check_buffer(buf, doc_off, disallowed, 0, self.tools.first_token)
        why = self.planner.host_family(model)
        if why is not None:  # a family without kernels (on this device): the numpy backend
            self.fallback("merge", model.segmenter.name, f"{model.name}: {why}",
                          once_key=("family", id(model)))
            return None
        spans = token_spans(model, buf, doc_off, allowed)
        with self.lock:
            keep = None
            if self.planner.mode(model)[0] not in ("split", "program"):  # safe cuts known
                doc_off, keep = cut_long_documents(buf, doc_off, spans, self.chunk_budget())
            parts = self._encode(model, buf, doc_off, spans, allowed)
        return parts, len(doc_off) - 1, keep

    def _encode(self, model, buf, doc_off, spans, allowed) -> list:
        n_docs = len(doc_off) - 1
        parts: list = []
        dev = self.dev
        try:
            plan = self.planner.get(model)
        except dev.oom_errors as e:
            dev.release()
            self.fallback("tables", "out of memory",
                          f"out of device memory uploading {model.name}'s tables ({e}); "
                          "encoding this batch on the host")
            return [self._host_part(model, buf, doc_off, 0, n_docs, allowed)]
        if plan.mode not in ("device", "program"):  # (a program runs on the device itself)
            self.fallback("pretok", plan.mode, f"{model.name}: {plan.why}",
                          once_key=("pretok", id(model)))
        if plan.normalizer and plan.norm_form is None:
            self.fallback("normalize", "host", f"{model.name}: its normaliser "
                          f"({', '.join(plan.normalizer)}) runs on the host",
                          once_key=("normalize", id(model)))
        budget = self.chunk_budget()
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
                end = chunk_end(doc_off, start, budget)
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
        """Chunks from document ``start`` on, finished ones to ``parts`` in order: on the chunk
        workers where the device has them and the batch is several chunks, else through the
        streams."""
        def oversized(d0, d1):
            return self._oversized(model, buf, doc_off, d0, d1, allowed)

        if self.workers is not None and chunk_end(doc_off, start, budget) < len(doc_off) - 1:
            ends = guided_ends(doc_off, start, budget, self.workers.workers)
            chunks = self._chunks(plan, buf, doc_off, spans, start, budget, ends)
            return self.workers.run(model, plan, chunks, parts, oversized)
        self.streams.run(model, plan, self._chunks(plan, buf, doc_off, spans, start, budget),
                         parts, oversized)

    def _chunks(self, plan, buf, doc_off, spans, start: int, budget: int, ends=None):
        """The batch's chunks from document ``start`` on, in order, each prepared when asked
        for: (d0, d1, host chunk), or (d0, d1, None) for one document too big for uint32
        positions (``_oversized``). ``ends``: the chunks' end documents (``workers.guided_ends``), else
        each chunk takes the documents that fit ``budget``."""
        for d0, d1 in self._chunk_ranges(doc_off, start, budget, ends):
            if int(doc_off[d1] - doc_off[d0]) > CHUNK_LIMIT:
                yield d0, d1, None
            else:
                yield d0, d1, prepare(plan.mode, plan.pretok, buf, doc_off, spans, d0, d1,
                                      () if plan.norm_form else plan.normalizer)

    def _chunk_ranges(self, doc_off, start: int, budget: int, ends=None):
        """(d0, d1) of each chunk from document ``start`` on: ``ends`` (``workers.guided_ends``), else
        each chunk takes the documents that fit ``budget``."""
        n_docs = len(doc_off) - 1
        d0 = start
        k = 0
        while d0 < n_docs:
            if ends is None:
                d1 = chunk_end(doc_off, d0, budget)
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

    def _host_part(self, model, buf, doc_off, d0, d1, allowed):
        docs = Documents([buf[int(doc_off[d]):int(doc_off[d + 1])] for d in range(d0, d1)])
        ids, off = self.host.encode(model, docs, allowed, frozenset())
        return (d0, ids.astype(model.id_dtype, copy=False), np.diff(off))
