"""Extended grapheme clusters (UAX #29) on pinned data: ``cluster_starts``.

HF's ``Precompiled`` normaliser (``components/normalizers/precompiled.py``) walks text a grapheme
cluster at a time, as the Rust ``unicode-segmentation`` crate cuts it. The rules are UAX #29's
(GB3-GB13 with GB9c, Unicode 15.1 and later); the properties they read (Grapheme_Cluster_Break,
Extended_Pictographic, Indic_Conjunct_Break) are in ``data/graphemes.ucd``, written by
``python -m gputok.unicode.graphemes`` from the ``regex`` release named in its header, and
checked against HF itself by ``tests/test_precompiled.py`` (every code point after a letter, the
Prepend characters before one: the joins that decide a short cluster, the only kind the
normaliser treats as a whole).

``cluster_starts(cps)``: the index of every cluster's first code point (and ``len(cps)``): the
pairwise rules vectorised over the whole array, the stateful ones (GB9c, GB11, GB12/13) in a
loop over the few positions where they can apply.
"""

from __future__ import annotations

import functools

import numpy as np

from . import store

#: Grapheme_Cluster_Break values (class codes; 0 = Other)
GCB = ("Other", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend",
       "SpacingMark", "L", "V", "T", "LV", "LVT")
(OTHER, CR, LF, CONTROL, EXTEND, ZWJ, RI, PREPEND, SPACINGMARK, L, V, T, LV,
 LVT) = range(len(GCB))
EXTPICT, INCB_LINKER, INCB_CONSONANT, INCB_EXTEND = 16, 32, 64, 128  # flag bits
_FLAGS = {"extpict": EXTPICT, "incb_linker": INCB_LINKER, "incb_consonant": INCB_CONSONANT,
          "incb_extend": INCB_EXTEND}
_REGEX = {**{f"gcb_{v}": rf"\p{{Grapheme_Cluster_Break={v}}}" for v in GCB[1:]},
          "extpict": r"\p{Extended_Pictographic}", "incb_linker": r"\p{InCB=Linker}",
          "incb_consonant": r"\p{InCB=Consonant}", "incb_extend": r"\p{InCB=Extend}"}


@functools.lru_cache(maxsize=1)
def table() -> np.ndarray:
    """uint8 per code point: the GCB class (low 4 bits) and the flags."""
    f = store.load("graphemes")
    out = np.zeros(0x110000, np.uint8)
    for code, name in enumerate(GCB[1:], 1):
        for a, b in f.get(f"gcb_{name}").tolist():
            out[a:b + 1] = code
    for name, bit in _FLAGS.items():
        for a, b in f.get(name).tolist():
            out[a:b + 1] |= bit
    out.setflags(write=False)
    return out


def cluster_starts(cps: np.ndarray) -> np.ndarray:
    """The first index of every extended grapheme cluster of ``cps`` (code points), then
    ``len(cps)`` (int64)."""
    n = len(cps)
    if n == 0:
        return np.zeros(1, np.int64)
    t = table()[np.asarray(cps, np.int64)]
    g = t & 15
    a, b = g[:-1], g[1:]  # the pair around each inner position
    ctrl_a = (a == CR) | (a == LF) | (a == CONTROL)
    ctrl_b = (b == CR) | (b == LF) | (b == CONTROL)
    join = ((a == CR) & (b == LF))  # GB3
    hangul = (((a == L) & ((b == L) | (b == V) | (b == LV) | (b == LVT)))  # GB6
              | (((a == LV) | (a == V)) & ((b == V) | (b == T)))  # GB7
              | (((a == LVT) | (a == T)) & (b == T)))  # GB8
    join |= ~ctrl_a & ~ctrl_b & (hangul | (b == EXTEND) | (b == ZWJ)  # GB9
                                 | (b == SPACINGMARK) | (a == PREPEND))  # GB9a, GB9b
    brk = ~join
    # the stateful rules only ever join: GB9c (a conjunct), GB11 (an emoji ZWJ sequence),
    # GB12/13 (regional indicators in pairs); each one's right side is rare in text
    for i in np.flatnonzero(brk & ((b == RI) | ((t[1:] & INCB_CONSONANT) != 0)
                                   | (((t[1:] & EXTPICT) != 0) & (a == ZWJ)))).tolist():
        if ctrl_a[i] or ctrl_b[i]:
            continue
        if _stateful_join(t, g, i + 1):
            brk[i] = False
    starts = np.flatnonzero(np.concatenate([[True], brk])).astype(np.int64)
    return np.append(starts, n)


def _stateful_join(t: np.ndarray, g: np.ndarray, j: int) -> bool:
    """Whether GB9c, GB11 or GB12/13 keeps position ``j`` inside a cluster (looking back)."""
    if g[j] == RI:  # GB12/13: an odd number of RI before
        k = j - 1
        while k >= 0 and g[k] == RI:
            k -= 1
        return (j - 1 - k) % 2 == 1
    if t[j] & EXTPICT and g[j - 1] == ZWJ:  # GB11: ExtPict Extend* ZWJ x ExtPict
        k = j - 2
        while k >= 0 and g[k] == EXTEND:
            k -= 1
        if k >= 0 and t[k] & EXTPICT:
            return True
    if t[j] & INCB_CONSONANT:  # GB9c: Consonant [Extend Linker]* Linker [Extend Linker]* x
        k, linker = j - 1, False
        while k >= 0 and t[k] & (INCB_EXTEND | INCB_LINKER):
            linker |= bool(t[k] & INCB_LINKER)
            k -= 1
        return linker and k >= 0 and bool(t[k] & INCB_CONSONANT)
    return False


def generate(path=None) -> dict:
    """Write ``data/graphemes.ucd`` from the installed ``regex``'s properties; returns meta."""
    import unicodedata
    from pathlib import Path

    import regex

    probe = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    cps = np.array([ord(c) for c in probe], np.int64)
    tables = {}
    for name, pat in _REGEX.items():
        hit = np.zeros(len(cps), bool)
        for m in regex.finditer(pat + "+", probe):
            hit[m.start():m.end()] = True
        tables[name] = store.from_code_points(cps[hit])
    assigned = int(sum(1 for _ in regex.finditer(r"\p{Assigned}", probe)))
    meta = {"source": f"regex {regex.__version__} properties",
            "assigned_code_points_of_source": assigned,
            "python_unicodedata": unicodedata.unidata_version,
            "rule": "UAX #29 extended grapheme clusters (gputok/unicode/graphemes.py)"}
    store.write(path or Path(__file__).parent / "data" / "graphemes.ucd", meta, tables, {})
    return meta


if __name__ == "__main__":
    print(generate())
