"""The runner of a segmenter whose device form is a whole chunk (``SegmenterDevice.stage``
"chunk": SentencePiece BPE, ``.model`` files and SPM-style tokenizer.json): batches and single
texts, on the device (``spm_device.SpmStages``; the native one-call forms ``native/spm.py``).

Per batch: the documents are packed, disallowed tokens refused and the allowed ones found
(``split.token_spans``), as for byte-level models; the batch is cut into chunks of whole
documents; each chunk is planned on the host (``stages/spm_plan.py``) and run on the device: a
device with ``caps.spm_inline`` (the native CPU) runs a chunk in one call, chunks side by side
on its chunk workers; any other device launches the kernels in order (``SpmStages.run``).
Every stage but the token search runs on the device, the normaliser too (read by the kernels
as they go, or rewriting the chunk first: a charsmap, collapsed whitespace; with user-defined
pieces, the native CPU's one-call normaliser, ``spm_rewrite``), except one the device does not
take (HF normaliser steps: ``SpmTables.normalizer == "host"``; user-defined pieces with a
rewriting normaliser on a device without ``spm_inline``: the CUDA and Metal normaliser kernels
take no trie), which runs on the host per segment and is counted as a fallback, as a host
normaliser is for byte-level models.

A document is never cut (its dummy prefix and unk runs are the document's), so one long
document is one chunk: on the native device, one core.
"""

from __future__ import annotations

import weakref

import numpy as np

from ...stages import counters
from ...stages.emit import assemble
from ...stages.lists import id_list
from ...stages.pack import Documents, utf8_of
from ...stages.split import check_buffer, token_spans
from ...stages.spm_plan import plan_chunk
from ..spm_device import SpmStages
from .workers import document_ranges

#: a chunk's bytes at most: its arrays are indexed by uint32 (n + entries slots)
SPM_CHUNK_LIMIT = (1 << 31) - 64


class SpmRunner:
    """The whole-chunk segmenters' path of the device backend ``be`` (``driver.DeviceBackend``)."""

    def __init__(self, be):
        self.be = be
        self.dev = be.dev
        self.stages = SpmStages(be.dev, be.stages)
        self.one_call = be.dev.caps.spm_inline  # a chunk, or one text, as one call
        self._texts: dict = {}  # id(model) -> _text_entry
        self._runs: dict = {}  # id(model) -> (ref, whether the device runs it)

    def for_model(self, model) -> "SpmRunner | None":
        """This runner when ``model``'s segmenter runs whole chunks and the device runs the
        model; None otherwise (its host stages, counted: ``Planner.host_family`` says why)."""
        form = model.segmenter.device
        if form is None or form.stage != "chunk":
            return None
        got = self._runs.get(id(model))
        if got is None or got[0]() is not model:
            got = self._runs[id(model)] = (weakref.ref(model), self.why_not(model) is None)
        return self if got[1] else None

    def why_not(self, model) -> "str | None":
        """Why the device cannot run ``model`` (its host stages do), or None."""
        got = self.stages.tables(model)
        return got if isinstance(got, str) else None

    def plan(self, model) -> dict:
        t, _ = self.stages.tables(model)
        where = f"device ({self.dev.name})"
        return {"split": "host", "normalize": "host" if self._host_norm(t) else where,
                "pretok": where, "merge": where, "emit": where}

    def _host_norm(self, t) -> bool:
        """Whether ``t``'s normaliser runs on the host here (see the module docstring)."""
        return t.normalizer == "host" or (t.normalizer == "rewrite" and len(t.ud_trie) > 0
                                          and not self.one_call)

    def _note_host_stages(self, model, t) -> None:
        if self._host_norm(t):
            self.be.fallback("normalize", "host", f"{model.name}: its normaliser (HF steps, or "
                             "one with user-defined pieces off the native CPU) runs on the "
                             "host, segment by segment", once_key=("normalize", id(model)))

    # ---- a batch -------------------------------------------------------------------------------

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset) -> tuple:
        """The batch's (ids, offsets)."""
        be = self.be
        t, up = self.stages.tables(model)
        buf, doc_off = docs.packed(be.tools.utf8_check)
        doc_off = np.asarray(doc_off, np.int64)
        if disallowed:
            check_buffer(buf, doc_off, disallowed)
        self._note_host_stages(model, t)
        spans = token_spans(model, buf, doc_off, allowed)
        n_docs = len(doc_off) - 1
        budget = min(be.chunk_budget(), SPM_CHUNK_LIMIT)
        workers = be.workers.workers if be.workers is not None and self.one_call else 0
        ranges = document_ranges(doc_off, budget, workers)

        def one(d0: int, d1: int) -> tuple:
            return self._chunk(model, t, up, buf, doc_off, spans, d0, d1, allowed)

        with be.lock:  # (a batch's use of the device; chunk workers run under it)
            if workers > 1 and len(ranges) > 1:
                pool = be.workers.pool()
                parts = [f.result() for f in [pool.submit(one, a, b) for a, b in ranges]]
            else:
                parts = [one(a, b) for a, b in ranges]
        counters["device.spm_chunks"] += len(parts)
        return assemble(parts, n_docs, model.id_dtype, self.dev.host_block)

    def _chunk(self, model, t, up, buf, doc_off, spans, d0: int, d1: int, allowed) -> tuple:
        """Documents d0..d1-1 as one chunk: (d0, ids, lengths)."""
        lo, hi = int(doc_off[d0]), int(doc_off[d1])
        if hi - lo > SPM_CHUNK_LIMIT:
            return self._host_part(model, buf, doc_off, d0, d1, allowed, "oversized")
        ss, se, sid = spans
        a, b = np.searchsorted(ss, [lo, hi])
        local = (ss[a:b] - lo, se[a:b] - lo, sid[a:b])
        data, off = bytes(memoryview(buf)[lo:hi]), doc_off[d0:d1 + 1] - lo
        try:
            if self.one_call:
                with self.dev.solo():  # (a chunk worker's launches on its own thread)
                    c = plan_chunk(model, t, data, off, local, self._rewrite(t, up),
                                   self._find_ud(t, up))
                    ids, doc = self.dev.spm_chunk(t, up, c, model.id_dtype)
            else:
                c = plan_chunk(model, t, data, off, local, self._rewrite(t, up))
                ids, doc = self.stages.run(t, up, c, model.id_dtype)
        except self.dev.oom_errors:
            self.dev.release()
            return self._host_part(model, buf, doc_off, d0, d1, allowed, "out of memory")
        return d0, ids, np.diff(doc)

    def _host_part(self, model, buf, doc_off, d0, d1, allowed, why: str) -> tuple:
        self.be.fallback("chunk", why, f"documents {d0}..{d1 - 1} ({why}) are encoded on the "
                         "host")
        docs = Documents([bytes(memoryview(buf)[int(doc_off[d]):int(doc_off[d + 1])])
                          for d in range(d0, d1)])
        ids, off = self.be.host.encode(model, docs, allowed, frozenset())
        return d0, ids.astype(model.id_dtype, copy=False), np.diff(off)

    def _rewrite(self, t, up):
        """The device's rewrite of a chunk by THE SPM NORMALISER (``plan_chunk``'s); None where
        the host normalises."""
        if self._host_norm(t):
            return None
        if len(t.ud_trie) and t.normalizer == "rewrite":  # (the one-call form: spm_inline)
            return lambda buf, doc_off, ss, se: self.dev.spm_rewrite(t, up, buf, doc_off, ss, se)
        return lambda buf, doc_off, ss, se: self.stages.rewrite(t, up, buf, doc_off, ss, se)

    def _find_ud(self, t, up):
        """The device's search for user-defined pieces (``plan_chunk``'s ``find_ud``; the
        one-call form), or None (the host's)."""
        if not self.one_call or not len(t.ud_trie):
            return None
        return lambda buf, lo, hi: self.dev.spm_ud_spans(t, up, buf, lo, hi)

    # ---- one text ------------------------------------------------------------------------------

    def encode_text(self, model, text: str, allowed: frozenset) -> "list | None":
        """One text's ids in one device call (``caps.spm_inline``), special tokens already
        checked; None on a device without that form (the batch path runs it). A text with no
        active token takes the model's text call (``spm_text_call``: ~2x less Python around
        the call than the general path; it finds the user-defined pieces itself)."""
        if not self.one_call:
            return None
        got = self._texts.get(id(model))
        if got is None or got[0]() is not model:
            got = self._text_entry(model)
        _, call, tokens = got
        if not tokens or not model.active_tokens(allowed):
            return call(text)
        return self.encode_text_general(model, text, allowed)

    def text_call(self, model):
        """``encode_text(model, text, frozenset())`` as a function of the text (``Backend.
        text_call``): the device's text call itself where no token can be active; None on a
        device without the one-call form."""
        if not self.one_call:
            return None
        _, call, tokens = self._text_entry(model)
        if tokens and model.active_tokens(frozenset()):
            return None
        return call

    def _text_entry(self, model) -> tuple:
        """(model ref, the text call, whether tokens may be active): made once per model (a
        host normaliser: the general path, which counts it)."""
        t, up = self.stages.tables(model)
        tokens = bool(model.specials) or bool(model.active_tokens(frozenset()))
        if self._host_norm(t):
            def call(text, model=model):
                return self.encode_text_general(model, text)

            got = (weakref.ref(model), call, tokens)
        else:
            got = (weakref.ref(model), self.dev.spm_text_call(t, up, model.id_dtype), tokens)
        self._texts[id(model)] = got
        return got

    def encode_text_general(self, model, text: str, allowed: frozenset = frozenset()) -> list:
        """One text planned as a chunk (its token spans, user-defined pieces, normaliser), in
        one native call."""
        t, up = self.stages.tables(model)
        self._note_host_stages(model, t)
        data = utf8_of(text)
        off = np.array([0, len(data)], np.int64)
        c = plan_chunk(model, t, data, off, token_spans(model, data, off, allowed),
                       self._rewrite(t, up), self._find_ud(t, up))
        counters["device.spm_texts"] += 1
        return id_list(self.dev.spm_chunk(t, up, c, model.id_dtype)[0], self.be.tools.lister)
