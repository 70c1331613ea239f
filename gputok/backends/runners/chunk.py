"""One chunk on the device: its upload, the stages' launches on the current stream, and its
results' downloads (``enqueue`` ... ``finish``); or, where the device states ``chunk_inline``,
its whole sequence as one call on the calling thread (``inline``). Both chunk loops (the GPU's
streams, the CPU's workers) run their chunks through this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...stages import counters
from ...stages.pack import Documents
from ..hostplan import HostChunk, prepare, splice_normalized
from ..protocol import Ready
from .plan import ModelPlan

CHUNK_LIMIT = (1 << 31) - 64  # bytes of a chunk at most: uint32 positions (and n + 2 slots)
NO_SPANS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint32))  # no token


@dataclass
class InFlight:
    hc: HostChunk
    slot: int
    out: object
    doc: object  # a pending download of the document offsets
    ids: object = None
    marks: list = field(default_factory=list)
    index: int = 0  # the chunk's place in its batch (``emit.Placement``)



def chunk_end(doc_off, d0: int, budget: int) -> int:
    """The end document of a chunk from ``d0`` taking the documents that fit ``budget``
    bytes (at least one)."""
    end = int(np.searchsorted(doc_off, doc_off[d0] + budget, "right")) - 1
    return max(end, d0 + 1)


class ChunkRunner:
    """The chunks of one backend (``be``: its device, stages, counters and profile)."""

    def __init__(self, be):
        self.be, self.dev, self.stages = be, be.dev, be.stages

    def whole(self, plan: ModelPlan, hc: HostChunk, out_dtype, out_for=None) -> tuple:
        """One chunk start to end on the calling worker thread: (first document, ids, lengths).
        ``out_for(count)``: where a chunk that knows its id count before it emits may put its
        ids (an array of that many, or None: an array of its own)."""
        got = self.inline(plan, hc, out_dtype, out_for)
        if got is not None:
            return got
        with self.dev.solo():
            st = self.enqueue(plan, hc, 0, out_dtype)
            done: list = []
            self.finish(st, done)
        return done[0]

    def inline(self, plan: ModelPlan, hc: HostChunk, out_dtype, out_for=None) -> "tuple | None":
        """A chunk cut on the device, start to end in one call on this thread where the device
        has that form (``chunk_inline``: the native CPU device) and the model takes no
        normaliser check and no WordPiece stage (``one_call``): (first document, ids,
        lengths); else None."""
        if not self.dev.caps.chunk_inline or not self.one_call(plan, hc.mode):
            return None
        st = self.stages
        ids, doc = self.dev.chunk_inline(plan.tables, hc, out_dtype,
                                         st.dedup_slots_per_entry if st.dedup else 0.0, out_for)
        with self.be.count_lock:
            counters["device.chunks"] += 1
        return hc.d0, ids, doc[1:] - doc[:-1]  # (np.diff: ~1.5 us more a call)

    def one_call(self, plan: ModelPlan, mode: str) -> bool:
        """Whether a chunk of ``mode`` may run its whole sequence as one call (``chunk_inline``,
        ``text_short``): pieces cut on the device, no normaliser check, no WordPiece stage, no
        ``profile`` collecting per-stage times (those need the stages' own launches)."""
        return (mode == "device" and plan.norm_form is None and plan.seg.one_call
                and self.be.profile is None)

    def enqueue(self, plan: ModelPlan, hc: HostChunk, slot: int, out_dtype) -> InFlight:
        """Upload one chunk, queue its kernels and the download of its document offsets on the
        current stream; nothing here waits for the device."""
        marks: list = []
        if self.be.profile is not None:
            marks.append(("start", self.dev.mark()))
        ins = self.dev.upload(hc.inputs)
        if plan.norm_form is not None and hc.mode == "device":
            hc, ins = self.normalize(plan, hc, ins)
        if self.be.profile is not None:
            marks.append(("h2d", self.dev.mark()))
        out, out_doc = self.kernels(plan, hc, ins, out_dtype,
                                     marks if self.be.profile is not None else None)
        doc = self.dev.download("doc", out_doc, hc.n_docs + 1)
        with self.be.count_lock:  # chunk workers run this side by side
            counters["device.chunks"] += 1
        return InFlight(hc, slot, out, doc, marks=marks)

    def normalize(self, plan: ModelPlan, hc: HostChunk, ins: list) -> tuple:
        """The quick check of an uploaded chunk (encode_nfc.cu); the rare flagged spans are
        normalised on the host and the rebuilt chunk uploaded. Waits for the check's count
        (4 bytes), the one place a chunk waits for the device before its ids."""
        pos = self.stages.nfc_check(plan.tables, hc.n, ins[0])
        if not len(pos):
            return hc, ins
        new, spans, nbytes = splice_normalized(hc, pos, plan.norm_form)
        with self.be.count_lock:
            self.be.host_normalized["spans"] += spans
            self.be.host_normalized["bytes"] += nbytes
            counters["normalize.host_bytes"] += nbytes
        if new is hc:
            return hc, ins
        return new, self.dev.upload(new.inputs)

    def kernels(self, plan: ModelPlan, hc: HostChunk, ins: list, out_dtype, marks=None):
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
        owner, count, scratch = st.stage(plan.seg.stage)(plan.tables, hc.n, d_buf, pstart,
                                                          spec, n_entries, cap)
        mark("merge")
        out, out_doc = st.emit(hc.n, pstart, n_entries, cap, owner, count, scratch, doc_entry,
                               hc.n_docs, out_dtype)
        mark("emit")
        return out, out_doc

    def advance(self, st: InFlight) -> None:
        if st.ids is None:
            doc = st.doc.result()  # waits for the chunk's kernels
            st.doc = Ready(doc)
            with self.dev.stream(st.slot):
                st.ids = self.dev.download("ids", st.out, int(doc[-1]))

    def finish(self, st: InFlight, parts: list, place=None) -> None:
        """The chunk's results to ``parts`` ((d0, ids, lengths)); with ``place`` (a Placement)
        its ids are copied into their place in the batch's output straight from the download
        (the part then carries None): chunks finish in order, so the copy is made here."""
        self.advance(st)
        ids = st.ids.view() if place is not None else st.ids.result()
        doc = st.doc.result()
        if self.be.profile is not None and st.marks:
            names = [m[0] for m in st.marks]
            times = {names[i + 1]: self.dev.elapsed_ms(st.marks[i][1], st.marks[i + 1][1])
                     for i in range(len(names) - 1)}
            self.be.profile.append({"bytes": st.hc.n, "docs": st.hc.n_docs, "ms": times})
        st.out = None
        if place is not None:
            place.place(st.index, ids, borrowed=True)
            ids = None
        parts.append((st.hc.d0, ids, np.diff(doc)))

    def time_kernels(self, model, texts, repeat: int = 3) -> dict:
        """Kernel-only timing of one chunk (the first ``chunk_bytes`` of ``texts``, no tokens):
        the input is uploaded once, then every stage is timed with device events.
        Returns {"bytes", "docs", "mode", "ms": {stage: best ms}, "total_ms"}."""
        buf, doc_off = Documents(texts).packed()
        doc_off = np.asarray(doc_off, np.int64)
        with self.be.lock:
            plan = self.be.planner.get(model)
            d1 = chunk_end(doc_off, 0, self.be.chunk_budget())
            hc = prepare(plan.mode, plan.pretok, buf, doc_off, NO_SPANS, 0, d1,
                         () if plan.norm_form else plan.normalizer)
            best: dict = {}
            with self.dev.stream(0):
                ins = self.dev.upload(hc.inputs)
                if plan.norm_form is not None and hc.mode == "device":
                    hc, ins = self.normalize(plan, hc, ins)  # (not timed: once per chunk)
                for _ in range(max(1, repeat)):
                    marks = [("start", self.dev.mark())]
                    self.kernels(plan, hc, ins, model.id_dtype, marks)
                    for (_, a), (name, b) in zip(marks, marks[1:]):
                        ms = self.dev.elapsed_ms(a, b)
                        best[name] = min(best.get(name, ms), ms)
        return {"bytes": hc.n, "docs": d1, "mode": hc.mode, "ms": best,
                "total_ms": sum(best.values())}
