"""The scanner's core: from classes to piece starts (window rule + sparse corrections).

``Cuts`` is the part of ``Scanner`` that numpy runs: given the classes ``k`` of every position
(documents laid end to end with separators of class X), the code points ``c`` and the documents'
extents, it returns where pieces start. The device kernels take another route, one sequential
matcher per span between positions that start a piece in every parse (``scan_cl.py``,
``scan_o200k.py``): a window rule whose corrections need run starts and character indices costs
a device several kernels and scans where numpy pays a few array passes. See ``scan.py``'s
docstring for the method and its performance notes.
"""

from __future__ import annotations

import numpy as np

from .._arrays import unique_sorted
from .scan_rules import (A, B_PAIR, B_SPECIAL, B_SYNC, E, L, N, O_LM, O_LT, O_PQ, O_WS, OA, OB,
                         OD, OE, OM, ON, OP, OSL, OU, PU, WS, X)

PAD = 2  # separators before the first and after the last document


_CLASS_SETS: dict = {}


def _scan(k: np.ndarray, pos: np.ndarray, classes: tuple, step: int) -> np.ndarray:
    """From each of ``pos``, step (+1 / -1) while the class ``k`` is one of ``classes``.

    Returns the first position (in that direction, ``pos`` included) whose class is not. Runs
    are short in real text: probe windows of 4 and then 32 positions at once; runs still going
    are resolved by binary search among the run ends of the whole array (a segmented scan).
    The separators (class X, never in ``classes``) at both ends of ``k`` stop every walk.
    """
    inside = _CLASS_SETS.get(classes)
    if inside is None:
        inside = np.zeros(256, bool)
        inside[list(classes)] = True
        _CLASS_SETS[classes] = inside
    pos = pos.copy()
    todo = np.arange(len(pos))
    last = len(k) - 1
    for width in (4, 32):
        idx = pos[todo, None] + np.arange(0, step * width, step)
        if step > 0:
            np.minimum(idx, last, out=idx)
        else:
            np.maximum(idx, 0, out=idx)
        out = ~inside[k[idx]]
        found = out.any(axis=1)
        pos[todo[found]] = idx[found, out[found].argmax(axis=1)]
        todo = todo[~found]
        if not len(todo):
            return pos
    inr = inside[k]
    q = pos[todo]
    if step > 0:
        stops = (inr[:-1] > inr[1:]).nonzero()[0] + 1  # first position after each run
        pos[todo] = stops[np.searchsorted(stops, q, "left")]
    else:
        stops = (inr[1:] > inr[:-1]).nonzero()[0]  # last position before each run
        pos[todo] = stops[np.searchsorted(stops, q, "right") - 1]
    return pos


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(lo[i], hi[i])`` (empty where hi <= lo)."""
    n = np.maximum(hi - lo, 0)
    tot = int(n.sum())
    if not tot:
        return np.zeros(0, np.int64)
    return np.repeat(lo - np.cumsum(n) + n, n) + np.arange(tot)


def _in(a: np.ndarray, classes) -> np.ndarray:
    out = a == classes[0]
    for v in classes[1:]:
        out |= a == v
    return out



class Cuts:
    """Mixed into ``Scanner``: needs ``family``, ``digit_group``, ``end_whole``, ``_kind``,
    ``_letters`` and ``_compiled()`` (the reference engine, for o200k's irregular spans)."""

    def _cuts(self, k: np.ndarray, c: np.ndarray, starts: np.ndarray, lens: np.ndarray,
              doc_text) -> np.ndarray:
        """Boolean over ext positions PAD..len-PAD: a piece starts there (document starts
        excluded). ``k``: classes with X around every document; ``c``: code points (any
        unsigned dtype, aligned with ``k``); ``starts``/``lens``: documents in ext coordinates;
        ``doc_text(d)``: document d as str (only needed for o200k's irregular spans)."""
        fam = self.family
        m = len(k)
        kp = k[PAD - 1:m - PAD - 1]
        kc = k[PAD:m - PAD]
        pc = np.left_shift(kp, fam.bits)
        pc |= kc
        pair = np.frombuffer(pc.tobytes().translate(fam.pair), np.uint8)
        lo, n = fam.next_range
        x = np.subtract(k[PAD + 1:m - PAD + 1], lo, dtype=np.uint8) < n
        x = x.view(np.uint8) << 1
        if fam.prev2_range is not None:
            lo, n = fam.prev2_range
            y = np.subtract(k[PAD - 2:m - PAD - 2], lo, dtype=np.uint8) < n
            x |= y.view(np.uint8) << 2
        x |= B_PAIR
        x &= pair
        cut = x != 0
        sp = (pair >= B_SPECIAL).nonzero()[0]
        if len(sp):
            sp += PAD
            if self._kind == "o200k":
                self._fix_o200k(cut, k, c, sp, pair, starts, lens, doc_text)
            else:
                ks = k[sp]
                self._fix_contractions(cut, k, c, sp[ks == A])
                if self._kind == "cl":
                    if self.digit_group > 1:
                        self._fix_digits(cut, sp[ks == N])
                    self._after_newline(cut, k, sp[_in(ks, WS)], sp[ks == E], starts, lens, E,
                                        WS, PU, self.end_whole)
        return cut

    def _contraction_len(self, c: np.ndarray, ap: np.ndarray) -> np.ndarray:
        """2 / 3 where s|d|m|t / ll|ve|re (case per ``fold``) follows the apostrophe at ``ap``,
        else 0."""
        lt = self._letters
        top = len(lt) - 1
        t1 = lt[np.minimum(c[ap + 1].astype(np.int64), top)]
        t2 = lt[np.minimum(c[ap + 2].astype(np.int64), top)]
        three = ((t1 & t2 & 2) != 0) | (((t1 >> 2) & (t2 >> 3)) != 0)
        return np.where((t1 & 1) != 0, 2, np.where(three, 3, 0))

    def _fix_contractions(self, cut, k, c, ap):
        """cl100k family / GPT-2: an apostrophe that starts a piece (the pair table marked those:
        first of its punctuation run, not taken by a preceding " ") followed by a contraction."""
        if not len(ap):
            return
        ap = ap[k[ap + 1] == L]
        if not len(ap):
            return
        ln = self._contraction_len(c, ap)
        hit = ln > 0
        ap = ap[hit]
        end = ap + ln[hit]
        if self._kind == "gpt2":
            cut[ap + 1 - PAD] = False  # the letters after the contraction start a new piece
        cut[end[k[end] != X] - PAD] = True

    def _fix_digits(self, cut, d):
        """Digits right after a digit (ext positions ``d``, sorted): cut every
        ``digit_group`` from the digit run's start."""
        g = self.digit_group
        if len(d) < g:
            return
        brk = (d[1:] - d[:-1] != 1).nonzero()[0] + 1
        run_first = np.zeros(len(d), np.int64)
        run_first[brk] = brk
        np.maximum.accumulate(run_first, out=run_first)
        off = np.arange(1, len(d) + 1) - run_first  # offset from the digit run's first digit
        cut[d[off % g == 0] - PAD] = True

    @staticmethod
    def _after_newline(cut, k, j, z, starts, lens, e_cls, ws_cls, pu_cls, end_whole):
        """Whitespace at j right after a CR/LF run; ``z``: CR/LF right after whitespace.

        A piece starts at j iff the CR/LF run went to the preceding punctuation piece (j then
        starts what is left of the whitespace run), or the whitespace run from j has no further
        CR/LF (j starts the tail after the last CR/LF) -- except, for cl100k, when that run
        reaches the end of the text (``\\s++$`` keeps the rest whole). A whitespace run from
        j ends at CR/LF iff the first z after j has its whitespace run starting at j, which
        avoids walking the (many, long) indentation runs of source code.
        Returns the class before each CR/LF run.
        """
        before = k[j - 2]
        more = (before == e_cls).nonzero()[0]
        if len(more):
            before[more] = k[_scan(k, j[more] - 2, (e_cls,), -1)]
        res = _in(before, pu_cls)
        rest = (~res).nonzero()[0]
        if len(rest):
            jr = j[rest]
            final = np.ones(len(rest), bool)
            if len(z):
                zs = _scan(k, z - 1, ws_cls, -1) + 1  # start of the whitespace run before z
                final &= zs[np.minimum(np.searchsorted(z, jr), len(z) - 1)] != jr
            if end_whole:
                # nor may it be its document's trailing whitespace
                tail = _scan(k, starts + lens - 1, ws_cls, -1) + 1
                final &= tail[np.searchsorted(starts, jr, "right") - 1] != jr
            res[rest] = final
        cut[j[res] - PAD] = True
        return before

    def _fix_o200k(self, cut, k, c, sp, pair, starts, lens, doc_text):
        kc = k[sp]
        kp = k[sp - 1]
        irregular = [sp[kc == OM]]  # a mark after a non-letter
        # contraction suffix after a word: "'s" etc. joins the word; the next word starts after
        ap = sp[kc == OA]
        word_starts = np.zeros(0, np.int64)
        if len(ap):
            ln = self._contraction_len(c, ap)
            hit = ln > 0
            ap = ap[hit]
            end = ap + ln[hit]
            cut[ap - PAD] = False
            cut[ap[ln[hit] == 3] + 2 - PAD] = False  # "'lL", "'vE": no case split inside
            ke = k[end]
            inside = _in(ke, O_LM)
            cut[end[inside] - PAD] = True
            word_starts = end[inside]
            irregular.append(end[ke == OA])  # chained contractions: x's's
        # digits
        self._fix_digits(cut, sp[kc == ON])
        # whitespace after CR/LF (as Llama 3; "/" counts as punctuation)
        # (a mark before the CR/LF run: after a letter it ends a word, so the CR/LF is not taken;
        # after a non-letter the mark's irregular span covers this position anyway)
        j = sp[_in(kc, O_WS) & (kp == OE)]
        if len(j):
            self._after_newline(cut, k, j, sp[kc == OE], starts, lens, OE, O_WS, O_PQ, False)
        # "/" after CR/LF: when punctuation took the CR/LF, [\r\n/]* goes on over "/" and CR/LF
        sl = sp[kc == OSL]
        if len(sl):
            before = k[_scan(k, sl - 1, (OE,), -1)]
            sl = sl[_in(before, O_PQ)]
            if len(sl):
                r = _scan(k, sl, (OE, OSL), 1)
                cut[_ranges(sl, r) - PAD] = False
                kr = k[r]
                cut[r[kr != X] - PAD] = True  # a piece starts after the taken chars
                # a lone punctuation char there is the prefix of a following letter
                lone = _in(kr, (OP, OA)) & _in(k[r + 1], O_LT)
                cut[r[lone] + 1 - PAD] = False
        # R2 / R3: upper-case letter after Lm|Lo|mark
        u = sp[(kc == OU) & (kp != OU)]
        if len(u):
            after = k[_scan(k, u, (OU,), 1)]
            r3 = (after < OD) | (after > OM)  # only upper case up to the end of the letter run
            stop = _scan(k, u - 1, (OB, OM), -1)
            r2 = k[stop] == OD
            if len(word_starts) and r2.any():
                # a contraction moved the word start: its letters are not part of the word
                ws = np.sort(word_starts)
                q = stop + 1
                i = np.minimum(np.searchsorted(ws, q), len(ws) - 1)
                r2 &= ws[i] != q
            cut[u[r2 | r3] - PAD] = True
        irr = np.concatenate(irregular)
        if len(irr):
            self._rescan(cut, pair, unique_sorted(irr), starts, lens, doc_text)

    def _rescan(self, cut, pair, irr, starts, lens, doc_text):
        """Re-scan the spans around irregular positions with the reference regex.

        A span runs from the last position before ``irr`` where a piece starts in every parse
        (B_SYNC, or the document start) to the next one after it (or the document end);
        ``finditer`` from a true piece start reproduces the global matches.
        """
        sync = ((pair & B_SYNC) != 0).nonzero()[0] + PAD
        d = np.searchsorted(starts, irr, "right") - 1
        lo = starts[d]
        hi = starts[d] + lens[d]
        if len(sync):
            i = np.searchsorted(sync, irr, "left")  # sync[i - 1] < irr
            lo = np.where(i > 0, np.maximum(sync[np.maximum(i - 1, 0)], lo), lo)
            i = np.searchsorted(sync, irr, "right")  # sync[i] > irr
            hi = np.where(i < len(sync), np.minimum(sync[np.minimum(i, len(sync) - 1)], hi), hi)
        # merge overlapping spans (irr is sorted, so lo is too)
        top = np.maximum.accumulate(hi)
        first = np.ones(len(lo), bool)
        first[1:] = lo[1:] >= top[:-1]
        last = np.ones(len(lo), bool)
        last[:-1] = first[1:]
        lo, hi, d = lo[first], top[last], d[first]
        cut[_ranges(lo + 1, hi) - PAD] = False
        s0 = starts[d]
        finditer = self._compiled().finditer
        found: list = []
        add = found.append
        texts: dict = {}
        for a, b, dd, base in zip((lo - s0).tolist(), (hi - s0).tolist(), d.tolist(),
                                  s0.tolist()):
            t = texts.get(dd)
            if t is None:
                t = texts[dd] = doc_text(dd)
            pos = a
            for mt in finditer(t, a):
                pos = mt.start()
                if pos >= b:
                    break
                if pos > a:
                    add(pos + base)
                pos = mt.end()
            if pos != b:
                raise RuntimeError(f"{self.name}: re-scanned span does not end at a piece start")
        if found:
            cut[np.array(found, np.int64) - PAD] = True
