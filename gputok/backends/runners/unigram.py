"""The runner of a segmenter whose device form is a lattice (``SegmenterDevice.stage``
"lattice": Unigram, ``.model`` files, GGUF t5 and HF Unigram tokenizer.json) on a device with
``caps.unigram_inline`` (the native CPU: ``native/unigram.py``, ``kernels/host_unigram.h``):
batches and single texts. A device without it runs such a model on the host, counted
(``Planner.host_family``).

Two plans, by where the text is normalised and cut (``front``):

* device front: the normaliser is THE SPM NORMALISER (user-defined pieces matched first,
  copied whole: THE USER-DEFINED MATCH; or there is none) and the pre-tokenizer is
  ``Whole``: the batch is packed and its token spans found (``split.token_spans``, the one
  host stage); its items, the text segments between tokens and the tokens, go to the device
  in ranges of whole documents, side by side on the chunk workers, each range one call (every
  segment normalised, its lattice, its ids);
* host front: any other normaliser or pre-tokenizer (HF's steps and Metaspace) runs on the
  host as the numpy backend runs it, each a counted fallback of its stage; the units it cuts
  go through the piece cache and a batch's misses to the device's lattice in one call.

Sentences are never cut into spans: sentencepiece sums scores in float32 from the sentence
start (``cpu_ref/unigram.py``), so one long document is one call on one core.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..._arrays import unique_sorted
from ...stages import counters, dedup, emit, split
from ...stages.pack import Documents, fix_surrogates
from ...stages.split import check_buffer, token_spans
from ...stages.spm_tables import NORM_COLLAPSE, NORM_DUMMY, NORM_ESCAPE, NORM_SUFFIX, ud_trie
from ...stages.text import encode_text
from .workers import document_ranges

NO_ID = 0xFFFFFFFF


def front(model) -> "tuple[str, tuple | None]":
    """("device", THE SPM NORMALISER's tables or None: no normaliser) when the device runs the
    model's whole front, else ("host", why)."""
    from ...components.normalizers.spm import SpmNormalizer
    from ...components.pretokenizers import Whole

    norm, pre = model.normalizer, model.pretokenizer
    if not isinstance(pre, Whole):
        return "host", f"its pre-tokenizer ({pre.name}) runs on the host"
    if not norm:
        return "device", None
    if not isinstance(norm, SpmNormalizer):
        return "host", f"its normaliser ({type(norm).__name__}) runs on the host"
    cm = norm.charsmap
    units = cm.units if cm is not None else np.zeros(0, np.uint32)
    strings = np.frombuffer(cm.strings, np.uint8) if cm is not None else np.zeros(0, np.uint8)
    nflags = ((NORM_DUMMY if norm.dummy else 0) | (NORM_COLLAPSE if norm.collapse else 0)
              | (NORM_ESCAPE if norm.space == "\u2581" else 0)
              | (NORM_SUFFIX if norm.suffix else 0))
    ud = ud_trie(dict.fromkeys(norm.user_defined, 0)) if norm.user_defined else \
        np.zeros(0, np.uint32)  # (the normaliser needs no ids: a piece is copied whole)
    return "device", (units, strings, nflags, ud)


class _Entry:
    """One model's lattice on the device and its plan."""

    def __init__(self, model, lattice, host: "str | None", lister):
        self.ref = weakref.ref(model)
        self.lattice = lattice
        self.host = host  # why the front runs on the host (None: on the device)
        self.text = lattice.text_call(lister) if host is None else None


class UnigramRunner:
    """The lattice segmenters' path of the device backend ``be`` (``driver.DeviceBackend``)."""

    def __init__(self, be):
        self.be = be
        self.dev = be.dev
        self.on = be.dev.caps.unigram_inline
        self._entries: dict = {}  # id(model) -> _Entry
        self._lock = threading.Lock()

    def for_model(self, model) -> "UnigramRunner | None":
        """This runner when ``model``'s segmenter is a lattice and the device has one; None
        otherwise (the planner counts the host's run)."""
        form = model.segmenter.device
        if not self.on or form is None or form.stage != "lattice":
            return None
        return self

    def entry(self, model) -> _Entry:
        """The model's lattice (made on first use: its trie is built in the library)."""
        got = self._entries.get(id(model))
        if got is not None and got.ref() is model:
            return got
        with self._lock:
            got = self._entries.get(id(model))
            if got is not None and got.ref() is model:
                return got
            for k in [k for k, e in self._entries.items() if e.ref() is None]:
                del self._entries[k]
            where, norm = front(model)
            lattice = self.dev.unigram_lattice(model.segmenter.device.tables(),
                                               norm if where == "device" else None, model.name)
            got = _Entry(model, lattice, norm if where == "host" else None,
                         self.be.tools.lister)
            self._entries[id(model)] = got
        return got

    def plan(self, model) -> dict:
        e = self.entry(model)
        dev = f"device ({self.dev.name})"
        if e.host is None:
            return {"split": "host", "normalize": dev, "pretok": dev, "merge": dev, "emit": dev}
        norm = f"host: {e.host}" if model.normalizer else "none"
        return {"split": "host", "normalize": norm, "pretok": f"host ({model.pretokenizer.name})",
                "merge": dev, "emit": "host"}

    def _note_host(self, model, e: _Entry) -> None:
        """Count the host front's stages (a warning once per model and stage)."""
        from ...components.pretokenizers import Whole

        if model.normalizer:
            self.be.fallback("normalize", "host", f"{model.name}: {e.host} (Unigram: the "
                             "lattice runs on the device)", once_key=("normalize", id(model)))
        if not isinstance(model.pretokenizer, Whole):
            self.be.fallback("pretok", "host", f"{model.name}: its pre-tokenizer "
                             f"({model.pretokenizer.name}) runs on the host (Unigram: the "
                             "lattice runs on the device)", once_key=("pretok", id(model)))

    # ---- a batch -------------------------------------------------------------------------------

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset) -> tuple:
        """The batch's (ids, offsets)."""
        e = self.entry(model)
        if e.host is not None:
            return self._encode_host(model, e, docs, allowed, disallowed)
        be = self.be
        buf, doc_off = docs.packed(be.tools.utf8_check)
        doc_off = np.asarray(doc_off, np.int64)
        if disallowed:
            check_buffer(buf, doc_off, disallowed)
        ss, se, sid = token_spans(model, buf, doc_off, allowed)
        # the items: text segments between the token spans, and the spans, in order
        bounds = unique_sorted(np.concatenate([doc_off, ss, se, [0, len(buf)]]).astype(np.int64))
        start, end = bounds[:-1], bounds[1:]
        tok = np.full(len(start), NO_ID, np.uint32)
        if len(ss):
            k = np.searchsorted(ss, start)
            span = k < len(ss)
            span[span] = ss[k[span]] == start[span]
            tok[span] = sid[k[span]]
        first = np.searchsorted(start, doc_off)  # each document's first item (and the end)
        n_docs = len(doc_off) - 1
        ranges = self._ranges(doc_off)
        data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(1, np.uint8)
        lattice, dtype = e.lattice, model.id_dtype

        def one(d0: int, d1: int) -> tuple:
            a, b = int(first[d0]), int(first[d1])
            return lattice.items(data, start[a:b], end[a:b], tok[a:b], dtype)

        workers = self.be.workers
        if workers is not None and len(ranges) > 1:
            pool = workers.pool()
            parts = [f.result() for f in [pool.submit(one, a, b) for a, b in ranges]]
        else:
            parts = [one(a, b) for a, b in ranges]
        counters["device.unigram_calls"] += len(parts)
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype)
        at = np.zeros(len(start) + 1, np.int64)
        if parts:
            np.cumsum(np.concatenate([p[1] for p in parts]), out=at[1:])
        return ids, at[first[:n_docs + 1]]

    def _ranges(self, doc_off: np.ndarray) -> list:
        """Ranges of whole documents, one call each (``workers.document_ranges``)."""
        be = self.be
        return document_ranges(doc_off, be.chunk_budget(),
                               be.workers.workers if be.workers is not None else 0)

    def _encode_host(self, model, e: _Entry, docs, allowed, disallowed) -> tuple:
        """The host front (the numpy backend's stages), the misses' lattice on the device."""
        self._note_host(model, e)
        segments, layout = split.split_documents(model, docs.iter_str(), allowed, disallowed)
        first = (split.first_flags(layout, len(segments)) if model.pretokenizer.uses_first
                 else None)
        items = split.join_layout(layout, model.pieces_batch(segments, first))
        vals = dedup.ids_of_documents(model, items, segment=e.lattice.units)
        ids, offsets = emit.emit(vals, model.id_dtype)
        return model.segmenter.finish(ids, offsets)

    # ---- one text ------------------------------------------------------------------------------

    def encode_text(self, model, text: str, allowed: frozenset) -> list:
        """One text's ids, special tokens already checked: the device's one call where no
        token is active, else the batch path (device front) or the host stages."""
        e = self.entry(model)
        if e.host is not None:
            self._note_host(model, e)
            return encode_text(model, text, allowed, segment=e.lattice.units)
        if not model.active_tokens(allowed):
            return e.text(text)
        ids, _ = self.encode(model, Documents([fix_surrogates(text)]), allowed, frozenset())
        return self.be.id_list(ids)

    def text_call(self, model):
        """``encode_text(model, text, frozenset())`` as a function of the text where no token
        can be active and the device runs the front; None otherwise (``encode_text``)."""
        e = self.entry(model)
        if e.host is not None or model.active_tokens(frozenset()):
            return None
        return e.text
