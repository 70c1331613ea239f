"""Character-level BPE on the merge table: the engine of SentencePiece-style models.

SentencePiece BPE (``.model`` files) and SPM-style ``tokenizer.json`` files (Llama 2, Mistral)
merge *characters*, not bytes, and their models have no regex pre-tokenizer: a whole sentence
(or a whole Metaspace word) is one merge unit, which would make every document one huge piece.
This module turns them into the shape the byte-level stages already have:

* **symbols**: every character gets a symbol id (``sym_of``, a table over all code points): the
  id of its vocabulary token, an extra id for a character that occurs inside tokens without
  being one, or ``UNKNOWN | code point`` for a character no merge can involve;
* **exact cuts** (``segment``): between two adjacent characters ``(a, b)`` that never sit side
  by side inside a mergeable token, no merge can ever cross, so the text is cut there and every
  span merges on its own. Spans repeat like regex pieces do (in Mistral's vocabulary every
  "▁" after another character is a cut: a span is about a word), so the piece cache and the
  vectorised merge of the byte-level path apply unchanged;
* **the merge**: the model's rule as a ``MergeTable`` over symbol ids
  (``(left, right) -> (priority, merged)``; SentencePiece's priority is the dense rank of the
  piece score, HF's the merge index), run by ``stages.merge`` (``merge_rounds`` for a batch of
  short spans, ``merge_long_ids`` in O(n log n) for long ones, ``merge_small_ids`` for few).

What happens to symbols no token covers (byte fallback, unk) is the family's business
(``spm_bpe.py``, ``hf_charbpe.py``): ``CharBpe.merge`` returns final symbols, the family maps
them to ids.

Both families' device form is ``CHUNK_DEVICE``: a whole chunk on the device, its cuts, merge and
normaliser (``kernels/encode_spm.cu``; the tables ``stages/spm_tables.py``, the runner
``backends/runners/spm.py``), one text of any length in one call where the device has that
form.

Performance notes: cut detection is two gathers and a ``searchsorted`` over the packed code
points of a whole batch (~30 ns per character); cutting the string into spans is one Python
slice per span, like ``regex.findall``. Tried and dropped: a regex alternation of "characters that
start a cut" (it cannot express pairs), and a dict per character pair (5x slower than the sorted
array of pair keys).
"""

from __future__ import annotations

import functools

import numpy as np

from .. import SegmenterDevice
from ..._arrays import code_points  # noqa: F401  (re-exported)
from ...stages import counters
from ...stages.merge import LONG_PIECE, VECTOR_MIN, merge_long_ids, merge_rounds, merge_small_ids
from ...stages.spm_tables import CP_MASK, UNKNOWN  # (the kernels' symbol codes)
from ...stages.table import MergeTable

#: the device form of character-level BPE: the device runs a whole chunk (its own cuts and
#: normaliser; backends/runners/spm.py), a text of any length in one call where it can
CHUNK_DEVICE = SegmenterDevice(stage="chunk", kernel="encode_spm_merge", one_call=True)
N_CP = 0x110000


def pair_key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sort key of a character pair (21 bits per code point)."""
    return (a.astype(np.uint64) << np.uint64(21)) | b.astype(np.uint64)


class CharBpe:
    """Symbols, cuts and the merge table of one character-level BPE model.

    ``char_syms``: character -> symbol id for every character that is a token or occurs inside
    one; ``pairs``: the merge table as ``{left << 32 | right: (priority, merged)}``;
    ``inner``: the character pairs that occur side by side inside a mergeable token (no cut
    there); ``cut_unknown``: also cut on both sides of a character without a symbol.

    >>> bpe = CharBpe({"a": 0, "b": 1, "c": 2}, {0 << 32 | 1: (0, 3)}, {("a", "b")})
    >>> bpe.segment(["abcab"])
    [['ab', 'c', 'ab']]
    >>> bpe.merge(["ab", "c"])
    [[3], [2]]
    """

    def __init__(self, char_syms: "dict[str, int]", pairs: "dict[int, tuple[int, int]]",
                 inner, *, cut_unknown: bool = True):
        self.sym_of = np.arange(N_CP, dtype=np.uint32) | np.uint32(UNKNOWN)
        if char_syms:
            cps = np.fromiter((ord(c) for c in char_syms), np.int64, len(char_syms))
            self.sym_of[cps] = np.fromiter(char_syms.values(), np.uint32, len(char_syms))
        keys = np.array(sorted({(ord(a) << 21) | ord(b) for a, b in inner}), np.uint64)
        self.inner_keys = keys if len(keys) else np.zeros(1, np.uint64) + np.uint64(1 << 63)
        self.cut_unknown = cut_unknown
        self.table = MergeTable(pairs, np.zeros(256, np.uint32), None)

    @classmethod
    def from_arrays(cls, sym_of: np.ndarray, table: MergeTable, inner_keys: np.ndarray, *,
                    cut_unknown: bool = True) -> "CharBpe":
        """From its arrays (``spm_build``: built without dicts, or mapped from the cache)."""
        self = cls.__new__(cls)
        self.sym_of = sym_of
        self.inner_keys = inner_keys if len(inner_keys) else \
            np.zeros(1, np.uint64) + np.uint64(1 << 63)
        self.cut_unknown = cut_unknown
        self.table = table
        return self

    @functools.cached_property
    def cut_table(self) -> MergeTable:
        """The inner pairs as a hash set (THE PAIR PROBE's layout: ``a << 32 | b`` -> (0, 0)),
        for the device's cuts."""
        k = self.inner_keys[self.inner_keys < np.uint64(1 << 63)]
        keys = ((k >> np.uint64(21)) << np.uint64(32)) | (k & np.uint64(CP_MASK))
        zero = np.zeros(len(keys), np.uint32)
        return MergeTable(None, np.zeros(256, np.uint32), None,
                          arrays={"pair_keys": keys, "pair_prio": zero, "pair_merged": zero})

    # ---- cuts ----------------------------------------------------------------------------------

    def cut_mask(self, cps: np.ndarray) -> np.ndarray:
        """``cut[i]`` (len n + 1): a span starts at character i (0 and n always)."""
        n = len(cps)
        cut = np.ones(n + 1, bool)
        if n > 1:
            q = pair_key(cps[:-1], cps[1:])
            at = np.searchsorted(self.inner_keys, q)
            at[at == len(self.inner_keys)] = 0
            inner = self.inner_keys[at] == q
            if not self.cut_unknown:
                unknown = self.sym_of[cps] >= UNKNOWN
                inner |= unknown[:-1] | unknown[1:]
            cut[1:-1] = ~inner
        return cut

    def segment(self, texts: list, extra_cuts=None, *, cut_before: "str | None" = None,
                pairs: bool = True) -> list:
        """Spans of each text (see the module docstring). ``extra_cuts``: per text, more cut
        positions (character indices), e.g. around user-defined pieces; ``cut_before``: also
        cut before every occurrence of this character (HF's Metaspace split); ``pairs=False``:
        no cuts between characters (spans are then the words ``cut_before`` makes)."""
        joined = "".join(texts)
        if not joined:
            return [[] for _ in texts]
        cps = code_points(joined)
        lens = np.fromiter(map(len, texts), np.int64, len(texts))
        starts = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(lens, out=starts[1:])
        if pairs:
            cut = self.cut_mask(cps)
        else:
            cut = np.zeros(len(cps) + 1, bool)
            cut[-1] = True
        if cut_before is not None:
            cut[np.flatnonzero(cps == ord(cut_before))] = True
        cut[starts] = True  # texts never merge with each other
        if extra_cuts is not None:
            for t, extra in enumerate(extra_cuts):
                if extra:
                    cut[np.asarray(extra, np.int64) + starts[t]] = True
        bounds = np.flatnonzero(cut)
        bl = bounds.tolist()
        spans = [joined[a:b] for a, b in zip(bl, bl[1:])]
        first = np.searchsorted(bounds, starts).tolist()
        counters["charbpe.spans"] += len(spans)
        return [spans[first[t]:first[t + 1]] for t in range(len(texts))]

    # ---- merging -------------------------------------------------------------------------------

    def symbols(self, text: str) -> np.ndarray:
        return self.sym_of[code_points(text)]

    def merge(self, spans: list) -> list:
        """Final symbols of each span (lists of ints), merged from one symbol per character."""
        ids, off = self.merge_arrays(spans)
        ids_l, off_l = ids.tolist(), off.tolist()
        return [ids_l[a:b] for a, b in zip(off_l, off_l[1:])]

    def merge_arrays(self, spans: list) -> tuple[np.ndarray, np.ndarray]:
        """``merge`` as one ragged array: (final symbols uint32, offsets int64)."""
        lens = np.fromiter(map(len, spans), np.int64, len(spans))
        offsets = np.zeros(len(spans) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return self.merge_flat(self.sym_of[code_points("".join(spans))], offsets)

    def merge_flat(self, syms: np.ndarray, offsets: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Final symbols of every run ``syms[offsets[i]:offsets[i + 1]]``, as a ragged array."""
        n = len(offsets) - 1
        lens = np.diff(offsets)
        if n == 0:
            return np.zeros(0, np.uint32), offsets
        long_ = lens >= LONG_PIECE
        vector = n - int(long_.sum()) >= VECTOR_MIN
        if vector and not long_.any():
            counters["merge.rounds"] += n
            return merge_rounds(syms, offsets, self.table)
        # per run: long ones in O(L log L), the rest vectorised or one by one
        out: list = [None] * n
        sl = syms.tolist()
        off_l = offsets.tolist()
        for i in np.flatnonzero(long_).tolist():
            out[i] = merge_long_ids(sl[off_l[i]:off_l[i + 1]], self.table)
        counters["merge.long"] += int(long_.sum())
        if vector:
            keep = ~long_
            ids, off = merge_rounds(syms[np.repeat(keep, lens)],
                                    np.concatenate([[0], np.cumsum(lens[keep])]), self.table)
            ids_l, o = ids.tolist(), off.tolist()
            for k, i in enumerate(np.flatnonzero(keep).tolist()):
                out[i] = ids_l[o[k]:o[k + 1]]
            counters["merge.rounds"] += len(o) - 1
        else:
            for i in range(n):
                if out[i] is None:
                    out[i] = merge_small_ids(sl[off_l[i]:off_l[i + 1]], self.table)
            counters["merge.small"] += n - int(long_.sum())
        new_off = np.zeros(n + 1, np.int64)
        np.cumsum([len(x) for x in out], out=new_off[1:])
        flat = np.fromiter((x for r in out for x in r), np.uint32, int(new_off[-1]))
        return flat, new_off
