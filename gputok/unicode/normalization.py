"""HF's normalisers on pinned data: ``normalize`` (NFC/NFD/NFKC/NFKD), ``lowercase``, quick checks.

HF ``tokenizers`` normalises with the Rust crate ``unicode-normalization-alignments``, whose
tables are Unicode 9.0 (Python 3.11's ``unicodedata`` is 14.0: 98 marks added since have class 0
for HF, so ``"\\u1dd5\\U00011070"`` keeps its order there). ``Lowercase`` is Rust's
``char::to_lowercase`` applied to each character (full mappings, e.g. U+0130 -> "i\\u0307"; no
final-sigma rule). The tables in ``data/hf_norm.ucd`` were probed from HF itself, one code point
at a time; the algorithms are the standard ones (UAX #15): full decomposition, canonical ordering
(a stable sort of each run of non-starters by combining class), canonical composition (a
character composes with the last starter unless a character in between has class 0 or a class
>= its own), Hangul by arithmetic.

Quick check. Most text never changes: ``nfc_unsafe(cps)`` marks the code points that may change
or make a neighbour change (class != 0, changed by the form on its own, or the second half of a
composition pair, Hangul V/T jamo included). Only the spans around them are normalised: a span
runs from the last safe character before a run of unsafe ones (a starter that nothing before it
can reach) to the next safe one after it. ``normalize`` always works that way; ASCII text returns
at once.

Performance notes (bench/bench_unicode.py, 2-core shared VM, MB/s, HF's Python binding in
brackets): ``str.isascii`` first, then one ``np.take`` over the UTF-32 code units finds the
unsafe code points; NFC of English prose 630 (20), of the multilingual corpus 170 (19), of the
same text decomposed (a span at almost every accent) 56 (24). Per-span work is plain Python,
~5-10 us a span, so spans are memoised (they repeat: "e\u0301"): 17 -> 56 MB/s on the
decomposed text. Tried and dropped: one Python pass over every character (~0.9 MB/s).
"""

from __future__ import annotations

import functools

import numpy as np

from . import store

__all__ = ["FORMS", "normalize", "normalize_spans", "unsafe_table", "nfc_unsafe", "lowercase"]

FORMS = ("NFC", "NFD", "NFKC", "NFKD")

# Hangul syllables (UAX #15, 3.12)
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT = V_COUNT * T_COUNT
S_COUNT = L_COUNT * N_COUNT


class _Data:
    """The decoded tables, built once per process (~10 ms)."""

    def __init__(self):
        f = store.load("hf_norm")
        self.meta = f.meta
        self.nfd = self._mapping(f, "nfd")
        self.nfkd = self._mapping(f, "nfkd")
        self.lower = {k: v for k, v in self._mapping(f, "lower").items()}
        t = f.get("ccc").reshape(-1, 3)
        self.ccc_table = np.zeros(0x110000, np.uint8)
        for a, b, c in t.tolist():
            self.ccc_table[a:b + 1] = c
        self.ccc = {cp: int(self.ccc_table[cp]) for cp in np.flatnonzero(self.ccc_table).tolist()}
        pairs = f.get("compose").reshape(-1, 3)
        self.compose = {(chr(a), chr(b)): chr(c) for a, b, c in pairs.tolist()}
        self.seconds = set(pairs[:, 1].tolist())

    @staticmethod
    def _mapping(f, prefix: str) -> dict:
        keys, offs, vals = (f.get(prefix + s) for s in ("_keys", "_offsets", "_values"))
        chars = "".join(map(chr, vals.tolist()))
        o = offs.tolist()
        return {chr(k): chars[o[i]:o[i + 1]] for i, k in enumerate(keys.tolist())}


@functools.lru_cache(maxsize=1)
def _data() -> _Data:
    return _Data()


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"unknown normalisation form {form!r}; known: {', '.join(FORMS)}")


# ----------------------------------------------------------------------------------------------
# the algorithms (on short spans)
# ----------------------------------------------------------------------------------------------

def _decompose(s: str, compat: bool) -> str:
    d = _data()
    table = d.nfkd if compat else d.nfd
    ccc = d.ccc
    out = []
    for ch in s:
        cp = ord(ch)
        if S_BASE <= cp < S_BASE + S_COUNT:
            i = cp - S_BASE
            out.append(chr(L_BASE + i // N_COUNT))
            out.append(chr(V_BASE + (i % N_COUNT) // T_COUNT))
            if i % T_COUNT:
                out.append(chr(T_BASE + i % T_COUNT))
        else:
            out.extend(table.get(ch, ch))
    canonical_order(out, ccc)
    return "".join(out)


def canonical_order(chars: list, ccc: dict) -> None:
    """Canonical ordering in place: a stable sort by class of every run of non-starters.

    >>> s = ["a", "\u0301", "\u0323"]; canonical_order(s, {0x301: 230, 0x323: 220}); s
    ['a', '̣', '́']
    """
    i, n = 0, len(chars)
    while i < n:
        if ccc.get(ord(chars[i]), 0) == 0:
            i += 1
            continue
        j = i
        while j < n and ccc.get(ord(chars[j]), 0):
            j += 1
        if j - i > 1:
            chars[i:j] = sorted(chars[i:j], key=lambda c: ccc[ord(c)])
        i = j


def _compose(s: str) -> str:
    d = _data()
    ccc, pairs = d.ccc, d.compose
    result: list = []
    starter = None  # index in result of the last starter
    prev_cc = None  # class of the last character kept after that starter (None: none yet)
    for ch in s:
        cc = ccc.get(ord(ch), 0)
        if starter is not None and (prev_cc is None or prev_cc < cc):
            first = result[starter]
            comp = pairs.get((first, ch))
            if comp is None:  # Hangul LV and LVT, by arithmetic
                a, b = ord(first), ord(ch)
                if L_BASE <= a < L_BASE + L_COUNT and V_BASE <= b < V_BASE + V_COUNT:
                    comp = chr(S_BASE + ((a - L_BASE) * V_COUNT + b - V_BASE) * T_COUNT)
                elif (S_BASE <= a < S_BASE + S_COUNT and (a - S_BASE) % T_COUNT == 0
                      and T_BASE < b < T_BASE + T_COUNT):
                    comp = chr(a + b - T_BASE)
            if comp is not None:
                result[starter] = comp
                continue
        if cc == 0:
            starter, prev_cc = len(result), None
        else:
            prev_cc = cc
        result.append(ch)
    return "".join(result)


@functools.lru_cache(maxsize=1 << 16)  # spans repeat: "e\u0301", "\u0915\u094d"...
def _full(form: str, s: str) -> str:
    out = _decompose(s, compat=form in ("NFKC", "NFKD"))
    return _compose(out) if form in ("NFC", "NFKC") else out


# ----------------------------------------------------------------------------------------------
# quick check and spans
# ----------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def unsafe_table(form: str = "NFC") -> np.ndarray:
    """``bool[0x110000]``: code points that may change, or change a neighbour, under ``form``.

    >>> bool(unsafe_table("NFC")[0x0301]), bool(unsafe_table("NFC")[ord("é")])
    (True, False)
    """
    _check_form(form)
    d = _data()
    t = d.ccc_table != 0
    t[S_BASE:S_BASE + S_COUNT] |= form in ("NFD", "NFKD")
    table = d.nfkd if form in ("NFKC", "NFKD") else d.nfd
    changed = [ord(k) for k in table if _full(form, k) != k]
    t[np.array(changed, np.int64)] = True
    if form in ("NFC", "NFKC"):
        t[np.array(sorted(d.seconds), np.int64)] = True
        t[V_BASE:V_BASE + V_COUNT] = True
        t[T_BASE + 1:T_BASE + T_COUNT] = True
    t[0xD800:0xE000] = False  # never valid input for HF; left as they are
    t.setflags(write=False)
    return t


def nfc_unsafe(cps: np.ndarray) -> np.ndarray:
    """Boolean mask over ``cps`` (uint32 code points): True where NFC may change the text.

    >>> nfc_unsafe(np.array([0x61, 0x301, 0x62], np.uint32)).tolist()
    [False, True, False]
    """
    return np.take(unsafe_table("NFC"), np.asarray(cps, dtype=np.int64))


def normalize_spans(text: str, *, form: str = "NFC") -> str:
    """``text`` normalised like HF's normaliser ``form``, touching only the unsafe spans.

    >>> normalize_spans("cafe\\u0301 au lait")
    'café au lait'
    """
    _check_form(form)
    if text.isascii():
        return text
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    bad = np.take(unsafe_table(form), cps)
    idx = np.flatnonzero(bad)
    if len(idx) == 0:
        return text
    # maximal runs of unsafe code points; each span takes the safe starter before its run
    brk = np.flatnonzero(np.diff(idx) > 1)
    starts = np.maximum(np.append(idx[0], idx[brk + 1]) - 1, 0)
    ends = np.append(idx[brk], idx[-1]) + 1
    out, pos = [], 0
    for a, b in zip(starts.tolist(), ends.tolist()):
        out.append(text[pos:a])
        out.append(_full(form, text[a:b]))
        pos = b
    out.append(text[pos:])
    return "".join(out)


def normalize(form: str, text: str) -> str:
    """HF's ``normalizers.<form>().normalize_str(text)``, from gputok's pinned tables.

    ``form`` is ``"NFC"``, ``"NFD"``, ``"NFKC"`` or ``"NFKD"``. Correct on every input (Hangul,
    singletons, composition exclusions, blocked compositions, long runs of marks) and fast on
    text that is already normalised.

    >>> normalize("NFC", "\\u1100\\u1161\\u11a8"), normalize("NFKD", "\\ufb01")
    ('각', 'fi')
    """
    return normalize_spans(text, form=form)


def lowercase(text: str) -> str:
    """HF's ``normalizers.Lowercase()``: Rust's ``char::to_lowercase`` on each character.

    >>> lowercase("ÀÉ İ ΣΑΣ")
    'àé i̇ σασ'
    """
    if text.isascii():
        return text.lower()
    single, multi = _lower_tables()
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    out = np.take(single, cps).tobytes().decode("utf-32-le", "surrogatepass")
    at = np.flatnonzero(np.take(multi, cps))
    if len(at) == 0:
        return out
    # the few characters that map to several (U+0130 -> "i\u0307"): splice their images in
    pieces, pos, lower = [], 0, _data().lower
    for i in at.tolist():
        pieces += [out[pos:i], lower[text[i]]]
        pos = i + 1
    pieces.append(out[pos:])
    return "".join(pieces)


@functools.lru_cache(maxsize=1)
def _lower_tables() -> tuple:
    """(uint32[0x110000] one-to-one image, bool[0x110000] "maps to several characters").

    Performance notes: ``str.translate`` with a dict of the 1,488 mappings ran at ~17 MB/s
    (HF: ~20); a table lookup over the UTF-32 code units, one decode and a splice per
    multi-character image runs at ~100-300 MB/s. Built on first use (~15 ms, 5.5 MB)."""
    single = np.arange(0x110000, dtype=np.uint32)
    multi = np.zeros(0x110000, bool)
    for k, v in _data().lower.items():
        if len(v) == 1:
            single[ord(k)] = ord(v)
        else:
            multi[ord(k)] = True
    single.setflags(write=False)
    multi.setflags(write=False)
    return single, multi
