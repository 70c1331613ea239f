"""HF's ``BertNormalizer`` + ``BertPreTokenizer`` on pinned tables, vectorised over a batch.

``cpu_ref/wordpiece.py`` is the spec. ``BertSteps`` (here) runs both in one pass over code points;
the components are ``pretokenizers.bert.BertPreTokenizer`` and ``normalizers.BertNormalizer``,
which the pre-tokenizer fuses into its pass (``BertPreTokenizer.fuse``). The normaliser is a per-character map, in HF's order:

    clean_text             NUL, U+FFFD and control/format/private-use characters vanish,
                           whitespace becomes " "
    handle_chinese_chars   a CJK ideograph becomes " c "
    strip_accents          NFD, then non-spacing marks vanish (default: same as lowercase)
    lowercase              each character's full lowercase (no final-sigma rule)

and the pre-tokenizer cuts at whitespace (dropped) and makes every punctuation character a word.
The one step that is not per character is NFD's canonical ordering of combining marks; it
changes the text only where a mark with a higher class precedes one with a lower class, which
``strip`` finds vectorised and fixes in Python (rare in real text).

What the fast path computes, per batch: the code points of all segments in one array, a gather of
the pinned flags (``gputok.unicode.bert``), masks and ragged expansions (NFD, CJK padding) in
numpy, one UTF-32 decode, and one slice per word. Only decompositions, reorderings and
multi-character lowercases leave numpy, and only where they occur.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..unicode import bert as bu
from ..stages import counters
from .._arrays import code_points


def _expand(cps: np.ndarray, seg: np.ndarray, at: np.ndarray, starts: np.ndarray,
            lens: np.ndarray, vals: np.ndarray):
    """Replace ``cps[at[k]]`` by ``vals[starts[k]:starts[k] + lens[k]]`` (ragged, vectorised)."""
    new_len = np.ones(len(cps), np.int64)
    new_len[at] = lens
    out_start = np.zeros(len(cps) + 1, np.int64)
    np.cumsum(new_len, out=out_start[1:])
    out = np.empty(int(out_start[-1]), np.uint32)
    plain = np.ones(len(cps), bool)
    plain[at] = False
    out[out_start[:-1][plain]] = cps[plain]
    for j in range(int(lens.max()) if len(lens) else 0):
        k = lens > j
        out[out_start[at[k]] + j] = vals[starts[k] + j]
    return out, np.repeat(seg, new_len)


@dataclass(frozen=True)
class BertProgram:
    """What a device's own BERT pass takes (the native device: ``kernels/host_bert.h``): the
    options, as bits ``NORMALIZE CLEAN CJK STRIP LOWER``; the tables are the pinned ones."""

    opts: int

    NORMALIZE, CLEAN, CJK, STRIP, LOWER = 1, 2, 4, 8, 16


class BertSteps:
    """One model's normaliser and pre-tokenizer; ``words_batch`` is the pretok stage.

    >>> BertSteps().words_batch(["Héllo, Wörld 中文!"])
    [['hello', ',', 'world', '中', '文', '!']]
    """

    def __init__(self, *, clean_text: bool = True, handle_chinese_chars: bool = True,
                 strip_accents: "bool | None" = None, lowercase: bool = True,
                 normalize: bool = True):
        self.on = normalize
        self.clean = clean_text
        self.cjk = handle_chinese_chars
        self.strip_ = lowercase if strip_accents is None else bool(strip_accents)
        self.lower = lowercase

    def program(self) -> BertProgram:
        P = BertProgram
        return P(self.on * P.NORMALIZE | self.clean * P.CLEAN | self.cjk * P.CJK |
                 self.strip_ * P.STRIP | self.lower * P.LOWER)

    def normalize_array(self, cps: np.ndarray, seg: np.ndarray):
        """(code points, segment of each) after the normaliser."""
        if not self.on or not len(cps):
            return cps, seg
        t = bu.tables()
        f = t.flags[cps]
        if self.clean and (f & (bu.DROP | bu.SPACE)).any():
            keep = (f & bu.DROP) == 0
            cps, seg, f = cps[keep], seg[keep], f[keep]
            sp = (f & bu.SPACE) != 0
            cps = cps.copy()
            cps[sp] = 0x20
            f = t.flags[cps]
        if self.cjk and (f & bu.CJK).any():
            at = np.flatnonzero(f & bu.CJK)
            vals = np.empty(3 * len(at), np.uint32)
            vals[0::3], vals[1::3], vals[2::3] = 0x20, cps[at], 0x20
            cps, seg = _expand(cps, seg, at, np.arange(len(at)) * 3,
                               np.full(len(at), 3, np.int64), vals)
            f = t.flags[cps]
        if self.strip_ and ((f & (bu.DECOMP | bu.MN)).any() or t.ccc_table[cps].any()):
            cps, seg = self._strip(cps, seg, t)
            f = t.flags[cps]
        if self.lower and (f & bu.LOWER).any():
            # lower1 maps a character whose lowercase is several characters to itself
            multi = (np.flatnonzero(np.isin(cps, t.lower_multi_arr)) if len(t.lower_multi_arr)
                     else np.zeros(0, np.int64))
            cps = t.lower1[cps]
            if len(multi):  # U+0130 -> "i\u0307" and the like
                texts = [t.lower[c] for c in cps[multi].tolist()]
                lens = np.array([len(x) for x in texts], np.int64)
                starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
                flat = np.array([ord(x) for x in "".join(texts)], np.uint32)
                cps, seg = _expand(cps, seg, multi, starts, lens, flat)
        return cps, seg

    @staticmethod
    def _strip(cps: np.ndarray, seg: np.ndarray, t):
        f = t.flags[cps]
        dec = np.flatnonzero(f & bu.DECOMP)
        if len(dec):
            k = np.searchsorted(t.nfd_keys, cps[dec])
            starts = t.nfd_off[k]
            cps, seg = _expand(cps, seg, dec, starts, t.nfd_off[k + 1] - starts, t.nfd_vals)
        c = t.ccc_table[cps]
        same = seg[:-1] == seg[1:]  # a run of marks never spans two segments
        wrong = np.flatnonzero((c[:-1] > c[1:]) & (c[1:] > 0) & same)
        if len(wrong):  # marks out of canonical order: sort those runs (each once)
            cps = cps.copy()
            done = -1
            for i in wrong.tolist():
                if i < done:
                    continue  # in a run already sorted
                lo = i
                while lo > 0 and c[lo - 1] and same[lo - 1]:
                    lo -= 1
                hi = i + 1
                while hi < len(c) and c[hi] and same[hi - 1]:
                    hi += 1
                order = np.argsort(c[lo:hi], kind="stable")  # a stable sort by class
                cps[lo:hi] = cps[lo:hi][order]
                c[lo:hi] = c[lo:hi][order]
                done = hi
            counters["bert.reorder"] += len(wrong)
        keep = (t.flags[cps] & bu.MN) == 0
        return cps[keep], seg[keep]

    def _word_spans(self, segments: list):
        """(code points, word starts, word ends, first word of each segment + the total) of the
        normalised batch, or None when nothing is left."""
        n = len(segments)
        joined = "".join(segments)
        if not joined:
            return None
        lens = np.fromiter(map(len, segments), np.int64, n)
        seg = np.repeat(np.arange(n, dtype=np.int64), lens)
        cps, seg = self.normalize_array(code_points(joined), seg)
        counters["normalize.segments"] += n
        if not len(cps):
            return None
        f = bu.tables().flags[cps]
        ws = (f & bu.WS) != 0
        pu = (f & bu.PUNCT) != 0
        brk = np.zeros(len(cps) + 1, bool)  # a word boundary before character i
        brk[0] = brk[-1] = True
        brk[1:-1] = ws[:-1] | ws[1:] | pu[:-1] | pu[1:] | (seg[1:] != seg[:-1])
        bounds = np.flatnonzero(brk)
        a, b = bounds[:-1], bounds[1:]
        real = ~ws[a]  # spans between boundaries are words, or whitespace runs (dropped)
        a, b = a[real], b[real]
        first = np.searchsorted(a, np.searchsorted(seg, np.arange(n + 1), "left"), "left")
        counters["bert.words"] += len(a)
        return cps, a, b, first

    def words_batch(self, segments: list) -> list:
        """The words of every segment (normalised, cut at whitespace and punctuation)."""
        got = self._word_spans(segments)
        if got is None:
            return [[] for _ in segments]
        cps, a, b, first = got
        text = cps.tobytes().decode("utf-32-le")
        words = [text[i:j] for i, j in zip(a.tolist(), b.tolist())]
        fl = first.tolist()
        return [words[fl[s]:fl[s + 1]] for s in range(len(segments))]

    def words_bytes_batch(self, segments: list) -> tuple:
        """The words of every segment as one UTF-8 buffer, with no Python object per word:
        ``(buf, wstart, first)``, word i = ``buf[wstart[i]:wstart[i + 1]]`` (words follow each
        other, the whitespace between them dropped), segment s = words ``first[s]`` to
        ``first[s + 1]``. What the device backends upload (``hostplan.entries_from_words``)."""
        got = self._word_spans(segments)
        if got is None:
            return b"", np.zeros(1, np.int64), np.zeros(len(segments) + 1, np.int64)
        cps, a, b, first = got
        inside = np.zeros(len(cps) + 1, np.int64)  # +1 at a word's start, -1 past its end
        np.add.at(inside, a, 1)
        np.add.at(inside, b, -1)
        keep = np.cumsum(inside[:-1]) > 0
        kept = cps[keep]
        # UTF-8 length of each kept character; word starts are the running sums at their starts
        n8 = 1 + (kept >= 0x80) + (kept >= 0x800) + (kept >= 0x10000)
        pos = np.zeros(len(kept) + 1, np.int64)
        np.cumsum(n8, out=pos[1:])
        at = np.cumsum(keep) - 1  # index in ``kept`` of each kept character
        wstart = np.append(pos[at[a]], pos[-1])
        buf = kept.tobytes().decode("utf-32-le").encode("utf-8")
        return buf, wstart, first
