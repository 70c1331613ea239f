"""The Unicode data of HF's ``BertNormalizer`` and ``BertPreTokenizer``, pinned (``data/hf_bert.ucd``).

HF ``tokenizers`` 0.23 takes each BERT property from a different table (``cpu_ref/wordpiece.py``
lists them): ``is_control`` for clean_text and ``is_punctuation`` from an old Unicode,
``is_mark_nonspacing`` (strip_accents) from another, NFD from the normalisation crate behind
every HF normaliser, ``to_lowercase`` from Rust's std. Against Python 3.11's ``unicodedata`` that
is 13 (clean_text) / 386 (strip_accents) / 55 (lowercase) / 106 (punctuation) code points, so
gputok never asks ``unicodedata``: the per-code-point flags were measured through HF itself, one
code point at a time (``python -m gputok.unicode.generate --only hf_bert``; needs
``tokenizers``), and the mappings are HF's own NFD / lowercase / combining classes of
``data/hf_norm.ucd`` (the BERT normaliser calls the same NFD and ``to_lowercase``: the generator
checks, code point by code point, that strip_accents and lowercase built on them equal HF's).

Flags, per code point: ``DROP`` / ``SPACE`` (clean_text removes it / makes it " "), ``CJK``
(handle_chinese_chars pads it with spaces), ``PUNCT`` and ``WS`` (BertPreTokenizer makes it a
word of its own / splits there), ``MN`` (strip_accents removes it after NFD), ``DECOMP`` (NFD
changes it), ``LOWER`` (lowercase changes it).

>>> from gputok.unicode import bert
>>> t = bert.tables()
>>> bool(t.flags[ord("!")] & bert.PUNCT), [hex(ord(c)) for c in t.lower[0x130]]
(True, ['0x69', '0x307'])
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from . import store
from .normalization import canonical_order

__all__ = ["DROP", "SPACE", "CJK", "PUNCT", "WS", "MN", "DECOMP", "LOWER", "N_CP", "BertTables",
           "tables", "build"]

DROP, SPACE, CJK, PUNCT, WS, MN, DECOMP, LOWER = 1, 2, 4, 8, 16, 32, 64, 128
N_CP = 0x110000
FILE = "hf_bert"

# Hangul syllables decompose by arithmetic (hf_norm.ucd does not store them)
_S_BASE, _L_BASE, _V_BASE, _T_BASE, _N_COUNT, _T_COUNT, _S_COUNT = (0xAC00, 0x1100, 0x1161,
                                                                    0x11A7, 588, 28, 11172)


class BertTables:
    """The decoded tables (see the module docstring); built once per process (~30 ms).

    ``flags`` (uint8 per code point); ``nfd`` / ``lower`` ({code point: str}); ``ccc`` ({code
    point: class}) and ``ccc_table``; NFD as sorted arrays for gathers (``nfd_keys``,
    ``nfd_off``, ``nfd_vals``); single-character lowercase as a gather table ``lower1`` and the
    multi-character exceptions ``lower_multi_arr``."""

    def __init__(self, runs: np.ndarray, norm, meta: dict):
        self.meta = meta
        flags = np.zeros(N_CP, np.uint8)
        for a, b, f in runs.reshape(-1, 3).tolist():
            flags[a:b] = f
        self.flags = flags
        keys, off, vals = (norm.get("nfd" + s) for s in ("_keys", "_offsets", "_values"))
        # Hangul appended by arithmetic, then everything sorted by key for searchsorted
        h = np.arange(_S_COUNT, dtype=np.int64)
        lv = np.stack([_L_BASE + h // _N_COUNT, _V_BASE + (h % _N_COUNT) // _T_COUNT], 1)
        t = h % _T_COUNT
        h_vals = [lv[i].tolist() + ([_T_BASE + int(t[i])] if t[i] else []) for i in range(len(h))]
        all_keys = np.concatenate([keys, _S_BASE + h]).astype(np.uint32)
        parts = [vals[off[i]:off[i + 1]].tolist() for i in range(len(keys))] + h_vals
        order = np.argsort(all_keys, kind="stable")
        self.nfd_keys = all_keys[order]
        parts = [parts[i] for i in order.tolist()]
        self.nfd_off = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=self.nfd_off[1:])
        self.nfd_vals = np.array([c for p in parts for c in p], np.uint32)
        self.nfd = {k: "".join(map(chr, p)) for k, p in zip(self.nfd_keys.tolist(), parts)}
        lk, lo, lv_ = (norm.get("lower" + s) for s in ("_keys", "_offsets", "_values"))
        lo, lv_ = lo.tolist(), "".join(map(chr, lv_.tolist()))
        self.lower = {k: lv_[lo[i]:lo[i + 1]] for i, k in enumerate(lk.tolist())}
        self.ccc_table = np.zeros(N_CP, np.uint8)
        for a, b, c in norm.get("ccc").reshape(-1, 3).tolist():
            self.ccc_table[a:b + 1] = c
        self.ccc = {cp: int(self.ccc_table[cp]) for cp in np.flatnonzero(self.ccc_table).tolist()}
        self.lower1 = np.arange(N_CP, dtype=np.uint32)
        multi = []
        for k, v in self.lower.items():
            if len(v) == 1:
                self.lower1[k] = ord(v)
            else:
                multi.append(k)
        self.lower_multi_arr = np.array(sorted(multi), np.uint32)


@functools.lru_cache(maxsize=1)
def tables() -> BertTables:
    """The pinned tables (read once per process): the one interface the BERT stages use."""
    f = store.load(FILE)
    return BertTables(f.get("runs"), store.load("hf_norm"), f.meta)


def runs_of(flags: np.ndarray) -> np.ndarray:
    """``(start, end, flags)`` triples (end exclusive) of the non-zero runs of ``flags``."""
    edges = np.flatnonzero(np.diff(flags.astype(np.int16))) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [len(flags)]])
    vals = flags[starts]
    keep = vals != 0
    return np.stack([starts[keep], ends[keep], vals[keep]], 1).astype(np.int64).reshape(-1)


# ---- the generator (probes HF; never imported at run time) ---------------------------------

def build(log) -> tuple:
    """(meta, raw tables) of ``data/hf_bert.ucd``, measured through HF ``tokenizers`` (~20 s).
    Needs ``data/hf_norm.ucd`` (its NFD, lowercase and classes) and checks them against the
    BERT normaliser on every code point."""
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers

    cps = [c for c in range(N_CP) if not 0xD800 <= c <= 0xDFFF]

    def bert(**kw):
        base = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                    lowercase=False)
        base.update(kw)
        return normalizers.BertNormalizer(**base).normalize_str

    flags = np.zeros(N_CP, np.uint8)
    clean, cjk = bert(clean_text=True), bert(handle_chinese_chars=True)
    strip, lower = bert(strip_accents=True), bert(lowercase=True)
    nfd = normalizers.NFD().normalize_str
    pre = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    strip_map, lower_map = {}, {}
    for c in cps:
        ch = chr(c)
        r = clean(ch)
        if r == "":
            flags[c] |= DROP
        elif r == " " and ch != " ":
            flags[c] |= SPACE
        if cjk(ch) == f" {ch} ":
            flags[c] |= CJK
        words = pre("a" + ch + "a")
        if len(words) == 3:
            flags[c] |= PUNCT
        elif len(words) == 2:
            flags[c] |= WS
        if nfd(ch) != ch:
            flags[c] |= DECOMP
        s = strip(ch)
        if s != ch:
            strip_map[c] = s
            if s == "" and not flags[c] & DECOMP:
                flags[c] |= MN  # removed after NFD: a mark NFD leaves alone
        lo = lower(ch)
        if lo != ch:
            flags[c] |= LOWER
            lower_map[c] = lo
    # self-check: the shared hf_norm mappings are the BERT normaliser's, code point by code point
    t = BertTables(runs_of(flags), store.load("hf_norm"), {})

    bad = [c for c in cps if strip_accents_text(chr(c), t) != strip_map.get(c, chr(c))]
    bad += [c for c in cps if t.lower.get(c, chr(c)) != lower_map.get(c, chr(c))]
    bad += [c for c in cps if (c in t.nfd) != bool(flags[c] & DECOMP)]
    if bad:
        raise RuntimeError(f"hf_bert self-check failed on {len(bad)} code points "
                           f"(first U+{bad[0]:04X}): regenerate hf_norm.ucd first")
    counts = {name: int(np.count_nonzero(flags & bit)) for name, bit in
              (("drop", DROP), ("space", SPACE), ("cjk", CJK), ("punct", PUNCT), ("ws", WS),
               ("mn", MN), ("decomp", DECOMP), ("lower", LOWER))}
    meta = {"family": "hf", "engine": f"tokenizers {tokenizers.__version__} (BertNormalizer, "
            "BertPreTokenizer)", "python": sys.version.split()[0], "counts": counts}
    log(f"  hf bert: {counts}")
    return meta, {"runs": runs_of(flags)}


def strip_accents_text(text: str, t: "BertTables | None" = None) -> str:
    """NFD, canonical order, non-spacing marks removed: the scalar form of ``strip``.

    >>> strip_accents_text("Héllo")
    'Hello'
    """
    t = t or tables()
    chars = [x for c in text for x in t.nfd.get(ord(c), c)]
    canonical_order(chars, t.ccc)
    return "".join(c for c in chars if not t.flags[ord(c)] & MN)
