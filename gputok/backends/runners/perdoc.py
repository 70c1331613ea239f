"""Batches and single texts through a device's per-document pass (``caps.per_doc``: the native
CPU's, ``native/perdoc.py``): each document from its first byte to its ids on one thread, every
thread busy, the piece cache kept from batch to batch. The batch and one-text runners it stands
in front of remain for what it does not take:

* a model whose segmenter is not byte-level BPE over the merge tables (WordPiece, SentencePiece,
  ...), whose pieces are not cut on the device, or with a normaliser that is not one normal
  form the device checks;
* active tokens that swallow whitespace (HF's ``lstrip`` / ``rstrip``);
* a profiled backend (``be.profile``: the stage-by-stage pipeline is what it times).

Documents the normaliser's quick check flags are encoded by the batch pipeline (it normalises
the spans around them) and take their places in the pass's output (``_with_flagged``).
"""

from __future__ import annotations

import weakref

import numpy as np

from ...stages import counters
from ...stages.pack import Documents, fix_surrogates

#: a single text this long (characters) runs as a batch of one on every thread (its slices cut
#: where a piece starts in every parse); shorter ones on the calling thread
TEXT_THREADS_MIN = 1 << 18


class PerDocRunner:
    """The per-document pass of one backend (``be``), where its device states ``per_doc``."""

    def __init__(self, be):
        self.be, self.dev = be, be.dev
        self.pass_ = be.dev.per_doc_pass()
        # id(model) -> (weak reference, plan or None, the one-call str encoder or None): a text
        # with no allowed token asks ``takes`` once per model (the plan's lock, the checks:
        # ~1.5 us of a 100-character text's ~5)
        self._plain: dict = {}

    def takes(self, model, allowed: frozenset) -> "object | None":
        """The model's plan where the pass takes it with these allowed tokens, else None."""
        be = self.be
        seg = model.segmenter
        if be.profile is not None or seg.device is None or not seg.device.one_call \
                or seg.device.tables is not None or be.planner.host_family(model) is not None:
            return None
        active = model.active_tokens(allowed)
        if active & (model.lstrip | model.rstrip):
            return None
        try:
            if be.planner.mode(model)[0] != "device":
                return None
            plan = be.model_plan(model)
        except ValueError:  # (a mode the model cannot run: the batch path says so)
            return None
        if plan.normalizer and plan.norm_form is None:
            return None
        return plan

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset
               ) -> "tuple | None":
        """(ids, int64 offsets) of a batch, or None where the pass does not take it."""
        plan = self.takes(model, allowed)
        if plan is None:
            return None
        if not isinstance(docs, Documents):
            docs = Documents(docs)
        nfc = plan.tables.arrays.get("nfc_bits") if plan.norm_form else None
        ids, off, flagged = self.pass_.encode_batch(
            plan.tables, model, docs, model.active_tokens(allowed), disallowed,
            model.id_dtype, nfc)
        with self.be.count_lock:
            counters["device.per_doc_batches"] += 1
        if flagged is not None:
            ids, off = self._with_flagged(model, docs, allowed, ids, off, flagged, plan)
        return ids, off

    def _normalized_pass(self, model, plan, sub: Documents, active: frozenset
                         ) -> "tuple | None":
        """(ids, offsets) of documents the quick check flagged: each segment (the text between
        active tokens) normalised on its own, as HF does after cutting the tokens out (the form
        of the model's normaliser, on the pinned tables: ``unicode.normalize_spans``, only
        around the unsafe characters), and the documents encoded by the pass again with no
        check. The pass finds the active tokens in the normalised text: where that would not
        give the same tokens at the same places (a normalised segment that makes a token's
        text, such as "K" from U+212A), or a document is not text the normaliser takes (a lone
        surrogate), None: the caller's pipeline then handles them. Refused tokens were looked
        for in the text as it came."""
        from ...stages.split import find_tokens
        from ...unicode.normalization import normalize_spans

        form = plan.norm_form
        try:
            buf, doc_off = sub.packed()
            starts, ends = find_tokens(buf, doc_off, active)
            st, en = starts.tolist(), ends.tolist()
            out, want_s, want_e, new_off, at, k = [], [], [], [0], 0, 0
            for d in range(len(doc_off) - 1):
                pos, end = int(doc_off[d]), int(doc_off[d + 1])
                while k < len(st) and st[k] < end:
                    seg = normalize_spans(buf[pos:st[k]].decode("utf-8"), form=form)
                    seg = seg.encode("utf-8")
                    out.append(seg)
                    at += len(seg)
                    out.append(buf[st[k]:en[k]])
                    want_s.append(at)
                    at += en[k] - st[k]
                    want_e.append(at)
                    pos = en[k]
                    k += 1
                seg = normalize_spans(buf[pos:end].decode("utf-8"), form=form).encode("utf-8")
                out.append(seg)
                at += len(seg)
                new_off.append(at)
        except UnicodeError:
            return None
        nbuf, noff = b"".join(out), np.array(new_off, np.int64)
        if active:
            got_s, got_e = find_tokens(nbuf, noff, active)
            if got_s.tolist() != want_s or got_e.tolist() != want_e:
                return None
        normed = Documents([nbuf[a:b] for a, b in zip(new_off, new_off[1:])])
        ids, off, flagged = self.pass_.encode_batch(plan.tables, model, normed, active,
                                                    frozenset(), model.id_dtype, None)
        if flagged is not None:  # (no check was asked for)
            return None
        with self.be.count_lock:
            self.be.host_normalized["bytes"] += len(buf)
        return ids, off

    def encode_text(self, model, text: str, allowed: frozenset) -> "list | None":
        """One text's ids as a list (checked for disallowed tokens already), or None."""
        if not allowed and self.be.profile is None:
            got = self._plain.get(id(model))
            if got is None or got[0]() is not model:
                got = self._plain[id(model)] = self._plain_entry(model)
            if got[2] is not None and len(text) <= self.pass_.STR_LOCKED_MAX:
                ids = got[2][0](text)  # (short: one call, the lock held)
                if ids is not None:
                    return ids
            plan = got[1]
        else:
            plan = self.takes(model, allowed)
        if plan is None:
            return None
        if not model.active_tokens(allowed) and not plan.norm_form \
                and len(text) < TEXT_THREADS_MIN:
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:  # surrogates: tiktoken's repair first
                data = fix_surrogates(text).encode("utf-8")
            return self.be.id_list(self.pass_.encode_text(plan.tables, data))
        got = self.encode(model, Documents([text]), allowed, frozenset())
        return None if got is None else self.be.id_list(got[0])

    def text_call(self, model):
        """``encode_text(model, text, frozenset())`` as a function of the text (``Backend.
        text_call``) where the pass has the model's str encoder: that one call for a text of
        up to ``STR_LOCKED_MAX`` characters (no lookups on the way: ~1 us of a 10-character
        text's 2.5), the backend's ``encode_text`` for the rest; else None."""
        one = self._plain_entry(model)[2] if self.be.profile is None else None
        if one is None:
            return None
        fn = one[0]
        be, limit, none = self.be, self.pass_.STR_LOCKED_MAX, frozenset()

        def call(text: str) -> list:
            if len(text) <= limit and be.profile is None:
                ids = fn(text)
                if ids is not None:
                    return ids
            return be.encode_text(model, text, none)

        call.keep = one  # (what ctx points at, alive with the call)
        return call

    def _plain_entry(self, model) -> tuple:
        """``_plain``'s entry of a model: its plan where the pass takes it with no allowed
        token, and the str encoder where such a text has no active token and no normaliser."""
        plan = self.takes(model, frozenset())
        one = None
        if plan is not None and not model.active_tokens(frozenset()) and not plan.norm_form:
            one = self.pass_.str_encoder(plan.tables)
        return weakref.ref(model), plan, one

    def _with_flagged(self, model, docs, allowed, ids, off, flagged, plan) -> tuple:
        """The pass's output with the flagged documents' ids in place: with no active token a
        flagged document is one segment, normalised here (``unicode.normalize_spans``, the
        pinned tables, only around the unsafe characters) and encoded by the pass again with
        no check (``_normalized_pass``); else by the batch pipeline, which normalises the spans
        around them segment by segment."""
        which = np.flatnonzero(flagged)
        strs = docs.strs()
        if strs is not None:
            sub = Documents([strs[i] for i in which.tolist()])
        else:
            buf, doc_off = docs.packed()
            sub = Documents([buf[int(doc_off[i]):int(doc_off[i + 1])] for i in which.tolist()])
        got = self._normalized_pass(model, plan, sub, model.active_tokens(allowed))
        if got is not None:
            sub_ids, sub_off = got
        else:
            got = self.be.batch_parts(model, sub, allowed, frozenset())
            if got is None:
                sub_ids, sub_off = self.be.host.encode(model, sub, allowed, frozenset())
            else:
                from ...stages.emit import assemble

                parts, n, keep = got
                sub_ids, sub_off = assemble(parts, n, model.id_dtype, self.dev.host_block)
                if keep is not None:
                    sub_off = sub_off[keep]
        with self.be.count_lock:
            counters["device.per_doc_flagged"] += len(which)
        lens = np.diff(off)
        lens[which] = np.diff(sub_off)
        new_off = np.zeros(len(off), np.int64)
        np.cumsum(lens, out=new_off[1:])
        out = np.empty(int(new_off[-1]), model.id_dtype)
        prev = 0  # documents [prev, d) come from the pass, then d from the pipeline
        for k, d in enumerate(which.tolist()):
            out[new_off[prev]:new_off[d]] = ids[off[prev]:off[d]]
            out[new_off[d]:new_off[d + 1]] = sub_ids[sub_off[k]:sub_off[k + 1]]
            prev = d + 1
        out[new_off[prev]:] = ids[off[prev]:]
        return out, new_off
