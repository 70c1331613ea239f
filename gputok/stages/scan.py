"""Vectorized pre-tokenizer: the pieces of the named patterns without running a regex.

``scanner_for_pattern(pat)`` returns a :class:`Scanner` for the exact pattern strings listed in
``SUPPORTED_PATTERNS`` (anything else: ``None``, and callers keep ``compile_pattern(pat).findall``).
``Scanner.split(text)`` returns exactly ``compile_pattern(pat).findall(text)``; ``split_batch``
handles a whole batch in one vectorized pass; ``boundaries(cps, doc_offsets)`` is the array form
that a GPU kernel reproduces.

Method (the specification a kernel ports)
-----------------------------------------
1. Classify every code point with one table lookup, ``k = CLASS[cp]``: a handful of classes per
   pattern family (letter, digit, apostrophe, space, CR/LF, ...), derived from the flag table of
   ``unicode_tables()``, which is built from the ``regex`` module's own property tables, so it
   agrees with the reference engine by construction. Documents are laid end to end with
   separators of class X between them (two at each end), so "previous / next character" never
   crosses a document and a document's end behaves as the end of the text.
2. Local rule: a piece starts at i (i not a document start) iff
   ``PAIR[k[i-1], k[i]] & (B_PAIR | NEXT(k[i+1]) | PREV2(k[i-2])) != 0``: a 256-entry pair table
   built from the rule functions below (``_cl_rules``, ``_gpt2_rules``, ``_o200k_rules``, whose
   docstrings derive them from the alternatives) and two class-range tests.
3. Sparse corrections where the window cannot decide; the pair table flags them (B_SPECIAL)
   and one ``flatnonzero`` finds them: contractions, digit runs longer than 3 (cut every 3 from
   the run start), whitespace right after CR/LF (decided by the class before the CR/LF run and by
   what ends the whitespace run), and for o200k the letter-case rules whose evidence lies beyond
   the window. These need the end of a run: a bounded vectorized walk (``_scan``) with a
   binary-search fallback, i.e. a segmented scan.
4. o200k only: two rare configurations have unbounded sequential dependencies: a combining mark
   right after a non-letter (the pattern counts marks as letters *and* as punctuation, so which
   alternative takes it depends on where the previous piece started), and chained contractions
   (``x's's``: whether the second apostrophe is a suffix depends on the first). Their spans,
   between two positions that start a piece in every parse (the first char of a whitespace run,
   CR/LF after a letter or digit, document ends), are re-scanned with the reference regex from
   the first of them (``_rescan``), so the result stays exact; a kernel gives each such span one
   sequential thread. Everything else in o200k (case splits, contraction suffixes,
   ``[\\r\\n/]*``) is vectorized.
5. Pieces: insert a separator character absent from the text before every piece start, decode
   once and ``str.split`` (C speed; creating the piece strings is the floor of any method).

Performance notes
-----------------
Measured on a 2-core x86 VM shared with other jobs (CPython 3.11, numpy 2.4, regex 2026.5; CPU
time, best of 5; single runs vary by +-25%), on the test corpora of tests/testdata.py (~2 MB per
kind, documents of 4-14 kB) and 2 MB of CPython's stdlib sources; MB = UTF-8 megabytes:

    cl100k          regex findall    split (per doc)    split_batch
    English prose   4.2-4.6 MB/s     16-18 MB/s (3.6-4x)   22-23 MB/s (4.9-5.3x)
    Python source   2.9-3.5 MB/s     16-17 MB/s (4.9-5.4x) 21-22 MB/s (6.2-7.1x)
    multilingual    4.7 MB/s         12 MB/s   (2.6x)      28 MB/s   (5.9x)
    o200k: prose 6-6.5x, Python source 7.3-7.5x, emoji 4.5x (batch); the others are like cl100k.

Per-document ``split`` pays ~70 us of numpy call overhead per call (hence ``min_chars``); the
batch amortizes it. In ms per million characters, a pass is roughly: class lookup 1.5, rules
5-8, separator insertion 5-7, ``str.split`` 13-16 (creating the piece strings; the floor).

* A first version computed ~45 boolean array passes per position (~12 ms/Mchar); the pair table
  (``bytes.translate`` on 6-bit pair codes) plus ~10 elementwise uint8 ops is ~4-5 ms. Folding
  NEXT/PREV2 into an 8-bit code for a single translate was slower (more shifts).
* Class lookup: ``bytes.translate`` for latin-1 documents (~1 ms); ``np.take(table, cps)`` on
  UTF-16/UTF-32 code units otherwise (~2 ms; fancy indexing ``table[cps]`` is ~1.7x slower).
* ``flatnonzero`` on a uint8 array is several times slower than on a bool array: compare first.
* Output dominates: slicing the text in a Python loop is 60-100 ms/Mchar (str object creation
  plus a maxchar scan each); separator insertion + ``str.split`` is ~6 + ~15 ms. Insertion via
  ``mask.nonzero()`` + integer assignment beats boolean-mask assignment (2x), ``np.insert``,
  ``np.repeat`` (of chars or of ranks), cumsum-scatter and an interleave + ``bytes.translate``
  delete.
* Decoding a UCS-4 string and splitting it is ~1.5x slower than UCS-1/UCS-2, so ``split_batch``
  groups documents by the code-unit width they need (latin-1 / BMP / other) and runs one
  vectorized pass per group (at most three).
* Run ends: probing small 2-D windows (4, then 32 positions) beats one-step-at-a-time walks
  (Python overhead per step) and whole-array run-end tables (a dense ``flatnonzero``). Walking
  every indentation run after a newline (source code) cost ~10 ms/Mchar; deciding "does this
  whitespace run end at CR/LF" from the (rare) whitespace-before-CR/LF positions instead is ~1 ms.
* Run-level processing (one entry per class run, with gathers) was slower than the per-position
  window: gathers cost ~1-2 ns per element, elementwise uint8 ops ~0.1-0.2 ns.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import regex

__all__ = [
    "F_L", "F_N", "F_S", "F_NL", "F_UP", "F_LO", "F_M", "PROPERTIES", "FOLD_LETTERS",
    "unicode_tables", "class_table", "build_unicode_tables", "Scanner", "scanner_for_pattern",
    "SUPPORTED_PATTERNS", "LLAMA3_PATTERN", "QWEN2_PATTERN", "GPT2_HF_PATTERN",
]

# ----------------------------------------------------------------------------------------------
# Unicode class table
# ----------------------------------------------------------------------------------------------

F_L = 0x01  # \p{L}
F_N = 0x02  # \p{N}
F_S = 0x04  # \s
F_NL = 0x08  # [\r\n]
F_UP = 0x10  # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]   (o200k's first letter class)
F_LO = 0x20  # [\p{Ll}\p{Lm}\p{Lo}\p{M}]          (o200k's second letter class)
F_M = 0x40  # \p{M}

#: flag bit -> the class, spelled as in the patterns, whose members carry it
PROPERTIES = {
    F_L: r"\p{L}",
    F_N: r"\p{N}",
    F_S: r"\s",
    F_NL: r"[\r\n]",
    F_UP: r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
    F_LO: r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
    F_M: r"\p{M}",
}

#: letters of the contraction suffixes; ``unicode_tables()["fold_" + c]`` lists the code points
#: that ``(?i:c)`` matches (e.g. "s" also matches U+017F LATIN SMALL LETTER LONG S)
FOLD_LETTERS = "sdmtlver"

_TABLE_FORMAT = 1
_lock = threading.RLock()
_tables: dict = {}


def _all_code_points() -> np.ndarray:
    cps = np.arange(0x110000, dtype=np.uint32)
    return cps[(cps < 0xD800) | (cps > 0xDFFF)]  # surrogates cannot occur in valid text


def build_unicode_tables() -> dict:
    """Derive the tables from the ``regex`` module (~0.3 s): one ``finditer`` per property over
    a string holding every code point once."""
    cps = _all_code_points()
    text = cps.tobytes().decode("utf-32-le")
    table = np.zeros(0x110000, np.uint8)
    for bit, prop in PROPERTIES.items():
        spans = np.array([m.span() for m in regex.finditer(prop + "+", text)], np.int64)
        mark = np.zeros(len(cps) + 1, np.int32)
        if len(spans):
            np.add.at(mark, spans[:, 0], 1)
            np.add.at(mark, spans[:, 1], -1)
        table[cps[np.cumsum(mark[:-1]) > 0]] |= bit
    out = {"table": table}
    for ch in FOLD_LETTERS:
        found = regex.findall("(?i:%s)" % ch, text)
        out["fold_" + ch] = np.array(sorted(map(ord, found)), np.uint32)
    return out


def _cache_path() -> str:
    root = os.environ.get("GPUTOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "gputok")
    return os.path.join(root, f"unicode_classes-regex{regex.__version__}-f{_TABLE_FORMAT}.npz")


def unicode_tables() -> dict:
    """``{"table": uint8[0x110000] of F_* bits, "fold_<c>": uint32 code points}``.

    Built once per process, lazily, and cached in ``~/.cache/gputok`` (or ``$GPUTOK_CACHE``)
    under a name that includes the ``regex`` version.
    """
    if "table" in _tables:
        return _tables
    with _lock:
        if "table" in _tables:
            return _tables
        path = _cache_path()
        data = None
        try:
            with np.load(path) as z:
                data = {k: z[k] for k in z.files}
            if (data["table"].shape != (0x110000,) or data["table"].dtype != np.uint8
                    or any("fold_" + ch not in data for ch in FOLD_LETTERS)):
                data = None
        except Exception:  # missing, truncated or foreign file: rebuild
            data = None
        if data is None:
            data = build_unicode_tables()
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp.npz"
                np.savez(tmp, **data)
                os.replace(tmp, path)
            except OSError:
                pass
        _tables.update(data)
    return _tables


def class_table() -> np.ndarray:
    """uint8[0x110000]: the ``F_*`` flag bits of every code point (surrogates: 0)."""
    return unicode_tables()["table"]


# ----------------------------------------------------------------------------------------------
# Pattern families: classes, pair tables
# ----------------------------------------------------------------------------------------------

# pair table bits
B_PAIR = 1  # a piece starts here, whatever the neighbours
B_NEXT = 2  # ... if k[i+1] is in the family's NEXT class range
B_PREV2 = 4  # ... if k[i-2] is in the family's PREV2 class range
B_SYNC = 8  # (o200k) a piece starts here in every parse
B_SPECIAL = 16  # decided by a sparse correction

X = 0  # separator (outside every document); same code in all families

# cl100k / Llama 3 / Qwen2 / GPT-2 classes (GPT-2 puts CR/LF into S)
L, N, P, A, SP, S, E = range(1, 8)  # letter, digit, other, "'", " ", other \s, CR/LF
WS = (SP, S)
PU = (P, A)

# o200k classes
OU, OD, OB, OM, ON, OP, OA, OSL, OSP, OS, OE = range(1, 12)
# upper-only (Lu Lt), lower-only (Ll), both (Lm Lo), mark (M), digit, other, "'", "/", " ",
# other \s, CR/LF
O_LT = (OU, OD, OB)
O_LM = (OU, OD, OB, OM)
O_PQ = (OP, OA, OSL)
O_WS = (OSP, OS)


def _classify_cl(flags: int, gpt2: bool) -> int:
    if flags & F_NL:
        return S if gpt2 else E
    if flags & F_S:
        return S
    if flags & F_L:
        return L
    if flags & F_N:
        return N
    return P


def _classify_o200k(flags: int) -> int:
    if flags & F_NL:
        return OE
    if flags & F_S:
        return OS
    if flags & F_N:
        return ON
    if flags & F_M:
        return OM
    if flags & F_L:
        up, lo = bool(flags & F_UP), bool(flags & F_LO)
        return OB if up and lo else OU if up else OD
    return OP


def _cl_rules(p: int, c: int, each_digit: bool = False) -> int:
    """cl100k / Llama 3 / Qwen2: does a piece start at i, given k[i-1] = p and k[i] = c?

    At a piece start the first alternative that matches wins. Over maximal runs of L, N, P|A,
    whitespace (SP|S) and E this gives:
    * a letter run is one piece (possessive), taking one preceding char that is not CR/LF,
      letter or digit: the last char of a whitespace run, or a punctuation run of length 1 unless
      a preceding " " took that char (`` ?[^\\s\\p{L}\\p{N}]++``); hence PREV2 = {P, A, SP};
    * a punctuation run is one piece with one preceding " " and all CR/LF right after it;
    * a whitespace run (minus CR/LF taken by punctuation) splits into: up to its last CR/LF;
      all but its last char; its last char (alone, or prefix of the next piece); at the end of
      the text cl100k keeps the rest whole (``\\s++$``), Llama 3 / Qwen2 cut after the last CR/LF
      (``\\s*[\\r\\n]+`` comes first) -- decided sparsely after CR/LF, else NEXT = {L, N, P, A};
    * digit runs split every 3 from the run start (Qwen2: every digit);
    * an apostrophe that starts a piece, followed by s|d|m|t|ll|ve|re (any case), is a piece.
    """
    if c == A and p not in (P, A, SP):
        return B_SPECIAL | (B_PAIR if p != X else 0)  # apostrophe starting a piece
    if p == X or c == X:
        return 0
    if c == L:
        if p == L or p in WS:
            return 0
        if p in PU:
            return B_PREV2
        return B_PAIR
    if c == N:
        if p == N:
            return B_PAIR if each_digit else B_SPECIAL
        return B_PAIR
    if c in PU:
        return 0 if p in PU or p == SP else B_PAIR
    if c in WS:
        if p in WS:
            return B_NEXT
        return B_SPECIAL if p == E else B_PAIR
    if p in WS:
        return B_SPECIAL  # whitespace run ending at CR/LF: evidence for the rule after CR/LF
    return B_PAIR if p in (L, N) else 0  # c == E: else inside whitespace or absorbed


def _gpt2_rules(p: int, c: int) -> int:
    """GPT-2 (tiktoken's spelling; the original HF spelling is equivalent: possessive vs greedy
    changes nothing here, and ``\\s++$|...|\\s`` equals ``\\s+(?!\\S)|\\s+``).

    Runs of L, N and P|A are pieces with one optional preceding " "; a whitespace run splits
    into all-but-last and last char (kept whole at the end of the text); an apostrophe that
    starts a piece followed by s|d|m|t|ll|ve|re (lower case only) is a piece (sparse).
    """
    if c == A and p not in (P, A, SP):
        return B_SPECIAL | (B_PAIR if p != X else 0)
    if p == X or c == X:
        return 0
    if c in (L, N, P, A):
        return 0 if p == c or (p in PU and c in PU) or p == SP else B_PAIR
    return B_NEXT if p in WS else B_PAIR


def _o200k_rules(p: int, c: int) -> int:
    """o200k.

    Alternatives: a word ``pre? U* W+ C?`` / ``pre? U+ W* C?`` (pre = one char not CR/LF, letter
    or digit; U = Lu|Lt|Lm|Lo|M, W = Ll|Lm|Lo|M; C = a contraction suffix), digits by 3,
    `` ?Q+[\\r\\n/]*`` (Q = not whitespace, letter or digit: includes marks), whitespace as in
    Llama 3. Over a run of letters/marks starting at word start q, with OU = Lu|Lt,
    OD = Ll, OB = Lm|Lo and marks counting as OB, the word pieces are (R1) cut before OU after OD;
    (R2) cut before OU after OB/OM when the nearest earlier char that is not OB/OM is an OD at
    or after q; (R3) cut before OU after OB/OM when only OU follow up to the end of the run.
    R1 is local, R2/R3 sparse (walks over the OB/OM run backwards, the OU run forwards). A
    contraction suffix attaches to the word before it and moves the next word start past its
    letters. Prefixes and punctuation runs behave as in cl100k (PREV2 = {P, A, /, SP}); CR/LF
    taken by punctuation continue over "/" and CR/LF (``[\\r\\n/]*``, sparse). A mark right
    after a non-letter and a contraction right after a contraction are irregular (re-scanned,
    see ``_rescan``). Whitespace splits as in Llama 3.
    """
    if c == OM and p not in O_LM:
        return B_SPECIAL  # mark after a non-letter: irregular
    if p == X or c == X:
        return 0
    sync = 0
    if (c in O_WS and p not in O_WS and p != OE) or (c == OE and p in O_LT + (ON,)):
        sync = B_SYNC  # the previous piece cannot extend over this char
    if c in O_LT:
        if p in O_LM:
            if c == OU and p == OD:
                return B_PAIR  # R1
            if c == OU and p in (OB, OM):
                return B_SPECIAL  # R2 / R3
            return 0
        if p in O_WS:
            return 0
        if p in O_PQ:
            return B_PREV2
        return B_PAIR
    if c == OM:
        return 0
    if c == ON:
        return B_SPECIAL if p == ON else B_PAIR
    if c in O_PQ:
        if p in O_PQ or p == OSP:
            return 0
        if (c == OA and p in O_LM) or (c == OSL and p == OE):
            return B_PAIR | B_SPECIAL  # contraction suffix / "/" maybe taken after CR/LF
        return B_PAIR
    if c in O_WS:
        if p in O_WS:
            return B_NEXT
        return B_SPECIAL if p == OE else B_PAIR | sync
    if p in O_WS:
        return B_SPECIAL  # whitespace run ending at CR/LF
    return B_PAIR | sync if p in O_LM or p == ON else 0  # c == OE


class _Family:
    """Class table (code point -> class) and pair table (class pair -> rule bits)."""

    def __init__(self, name, bits, classify, rules, specials, next_range, prev2_range):
        self.name = name
        self.bits = bits  # bits per class in the pair code
        self.classify = classify
        self.rules = rules
        self.specials = specials  # {code point: class} overriding the flag classification
        self.next_range = next_range  # (lo, n): NEXT holds for classes lo..lo+n-1
        self.prev2_range = prev2_range
        self.cls = None

    def tables(self) -> np.ndarray:
        if self.cls is None:
            with _lock:
                if self.cls is None:
                    flags = class_table()
                    lut = np.array([self.classify(f) for f in range(256)], np.uint8)
                    cls = lut[flags]
                    for cp, v in self.specials.items():
                        cls[cp] = v
                    ncls = 1 << self.bits
                    pair = np.zeros(256, np.uint8)
                    for a in range(ncls):
                        for b in range(ncls):
                            pair[(a << self.bits) | b] = self.rules(a, b)
                    self.pair = pair.tobytes()
                    self.cls256 = cls[:256].tobytes()
                    self.cls = cls
        return self.cls


_FAMILIES = {
    "cl3": _Family("cl3", 3, lambda f: _classify_cl(f, False), _cl_rules,
                   {0x20: SP, 0x27: A}, (L, 4), (P, 3)),
    "cl1": _Family("cl1", 3, lambda f: _classify_cl(f, False), lambda p, c: _cl_rules(p, c, True),
                   {0x20: SP, 0x27: A}, (L, 4), (P, 3)),
    "gpt2": _Family("gpt2", 3, lambda f: _classify_cl(f, True), _gpt2_rules,
                    {0x20: SP, 0x27: A}, (L, 4), None),
    "o200k": _Family("o200k", 4, _classify_o200k,
                     lambda p, c: _o200k_rules(p, c) if p < 12 and c < 12 else 0,
                     {0x20: OSP, 0x27: OA, 0x2F: OSL}, (OU, 8), (OP, 4)),
}

_WIDTHS = {1: (np.uint8, "latin-1"), 2: (np.uint16, "utf-16-le"), 4: (np.uint32, "utf-32-le")}
_SEP_CANDIDATES = ([chr(c) for c in range(0, 9)] + [chr(c) for c in range(0x0E, 0x20)]
                   + ["\x7f", "\ufdd0", "\ufdd1", "\ufffe", "\uffff", "\U0010fffe", "\U0010ffff"])


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


# ----------------------------------------------------------------------------------------------
# Scanner
# ----------------------------------------------------------------------------------------------

PAD = 2  # separators before the first and after the last document


class Scanner:
    """Vectorized ``compile_pattern(pattern).findall`` for one supported pattern.

    ``min_chars``: ``split`` (and ``split_batch`` for a group of documents) hands inputs shorter
    than this to the reference regex instead, whose result is the same by definition: below a
    couple of thousand characters the ~100 numpy calls of a pass cost more than the regex.
    Set it to 0 to vectorize everything (the tests do).
    """

    min_chars = 2500

    def __init__(self, name: str, pattern: str, family: str, digit_group: int = 0,
                 end_whole: bool = False, fold: bool = True):
        self.name = name
        self.pattern = pattern
        self.family = _FAMILIES[family]
        self.digit_group = digit_group  # 3: \p{N}{1,3}; 1: \p{N}; 0: \p{N}+ (GPT-2)
        self.end_whole = end_whole  # trailing whitespace kept whole (\s++$)
        self.fold = fold  # contractions case-insensitive
        self._ready = False
        self._regex = None

    def __repr__(self) -> str:
        return f"Scanner({self.name!r})"

    def _setup(self) -> None:
        if self._ready:
            return
        with _lock:
            tabs = unicode_tables()
            self._cls = self.family.tables()
            if self.fold:
                f = {ch: tabs["fold_" + ch] for ch in FOLD_LETTERS}
            else:
                f = {ch: np.array([ord(ch)], np.uint32) for ch in FOLD_LETTERS}
            # contraction letters by code point: 1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e; the last
            # entry (0) stands for every larger code point
            lt = np.zeros(max(int(v.max()) for v in f.values()) + 2, np.uint8)
            for ch, bit in (("s", 1), ("d", 1), ("m", 1), ("t", 1), ("l", 2), ("v", 4),
                            ("r", 4), ("e", 8)):
                lt[f[ch]] |= bit
            self._letters = lt
            self._kind = "o200k" if self.family.name == "o200k" else (
                "gpt2" if self.family.name == "gpt2" else "cl")
            self._ready = True

    def _compiled(self):
        """The reference engine for this pattern (``cpu_ref.patterns.compile_pattern``)."""
        if self._regex is None:
            from cpu_ref.patterns import compile_pattern

            self._regex = compile_pattern(self.pattern)
        return self._regex

    # ---- core: classes -> cuts ---------------------------------------------------------------
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
            self._rescan(cut, pair, np.unique(irr), starts, lens, doc_text)

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

    # ---- input / output ----------------------------------------------------------------------
    def _run(self, encs: list, width: int, sep: "str | None", texts: list):
        """One vectorized pass over documents needing one code-unit width.

        ``encs``: the documents encoded (latin-1, UTF-16-LE without surrogates, or UTF-32-LE);
        ``sep``: a character no document contains (``None``: slice the texts instead).
        Returns (flat list of pieces, number of pieces per document).
        """
        dtype, codec = _WIDTHS[width]
        sepcode = ord(sep) if sep is not None else 0
        sepb = sepcode.to_bytes(width, "little")
        data = b"".join([sepb * PAD, sepb.join(encs), sepb * PAD])
        c = np.frombuffer(data, dtype)
        lens = np.fromiter((len(e) // width for e in encs), np.int64, len(encs))
        starts = PAD + np.cumsum(lens + 1) - (lens + 1)
        if width == 1:
            k = np.frombuffer(data.translate(self.family.cls256), np.uint8).copy()
        else:
            k = np.take(self._cls, c)
        k[:PAD] = X
        k[-PAD:] = X
        k[starts[1:] - 1] = X
        cut = self._cuts(k, c, starts, lens, texts.__getitem__)
        cutpos = cut.nonzero()[0]  # body coordinates (ext - PAD)
        if len(encs) == 1:
            counts = [len(cutpos) + 1]
        else:
            bounds = np.append(starts - PAD, len(cut))
            counts = (np.diff(np.searchsorted(cutpos, bounds)) + 1).tolist()
        if sep is None:
            flat: list = []
            pos = 0
            bl = cutpos.tolist()
            for t, s0 in zip(texts, (starts - PAD).tolist()):
                bs = [0]
                while pos < len(bl) and bl[pos] < s0 + len(t):
                    bs.append(bl[pos] - s0)
                    pos += 1
                bs.append(len(t))
                flat.extend(t[a:b] for a, b in zip(bs[:-1], bs[1:]))
            return flat, counts
        body = c[PAD:len(c) - PAD]
        npc = len(cutpos)
        ins = cutpos + np.arange(npc)
        mask = np.ones(len(body) + npc, bool)
        mask[ins] = False
        out = np.empty(len(body) + npc, dtype)
        out[mask.nonzero()[0]] = body
        out[ins] = sepcode
        return out.tobytes().decode(codec).split(sep), counts

    @staticmethod
    def _encode_one(t: str):
        if t.isascii():
            return 1, t.encode("ascii")
        try:
            return 1, t.encode("latin-1")
        except UnicodeEncodeError:
            pass
        b = t.encode("utf-16-le")
        if len(b) == 2 * len(t):
            return 2, b
        return 4, t.encode("utf-32-le")

    @staticmethod
    def _pick_sep(texts: list, width: int) -> "str | None":
        if not any("\x00" in t for t in texts):
            return "\x00"
        for ch in _SEP_CANDIDATES:
            if ord(ch) < (1 << (8 * width)) and not any(ch in t for t in texts):
                return ch
        return None

    def split(self, text: str) -> list:
        """Exactly ``compile_pattern(self.pattern).findall(text)``."""
        if not text:
            return []
        if len(text) < self.min_chars:
            return self._compiled().findall(text)
        self._setup()
        width, enc = self._encode_one(text)
        return self._run([enc], width, self._pick_sep([text], width), [text])[0]

    def split_batch(self, texts: list) -> list:
        """``[self.split(t) for t in texts]``, vectorized over the batch.

        Documents are grouped by the code-unit width their characters need (latin-1 / BMP /
        other), one pass per group present, so that mostly-ASCII documents are not decoded
        and split as 4-byte-per-char strings.
        """
        self._setup()
        texts = list(texts)
        groups: dict = {}
        for i, t in enumerate(texts):
            if t:
                width, enc = self._encode_one(t)
                g = groups.setdefault(width, ([], [], []))
                g[0].append(i)
                g[1].append(enc)
                g[2].append(t)
        res: list = [[] for _ in texts]
        for width, (idx, encs, docs) in groups.items():
            if sum(map(len, docs)) < self.min_chars:
                findall = self._compiled().findall
                for i, t in zip(idx, docs):
                    res[i] = findall(t)
                continue
            flat, counts = self._run(encs, width, self._pick_sep(docs, width), docs)
            pos = 0
            for i, cnt in zip(idx, counts):
                res[i] = flat[pos:pos + cnt]
                pos += cnt
        return res

    def boundaries(self, cps: np.ndarray, doc_offsets: np.ndarray) -> np.ndarray:
        """Piece starts of all documents in code-point coordinates, plus ``len(cps)``.

        ``cps``: uint32 code points of the documents end to end (valid text: no surrogates);
        ``doc_offsets``: int64, ``n_docs + 1`` entries. Returns a sorted int64 array that
        includes every non-empty document's start.
        """
        self._setup()
        cps = np.ascontiguousarray(cps, np.uint32)
        doc_offsets = np.asarray(doc_offsets, np.int64)
        n = len(cps)
        lens = np.diff(doc_offsets)
        nd = len(lens)
        starts = PAD + doc_offsets[:-1] + np.arange(nd)  # document d at starts[d] (ext)
        m = n + max(nd - 1, 0) + 2 * PAD
        c = np.zeros(m, np.uint32)
        k = np.zeros(m, np.uint8)  # X everywhere but on the documents
        if n:
            pos = np.arange(n) + np.repeat(starts - doc_offsets[:-1], lens)
            c[pos] = cps
            k[pos] = np.take(self._cls, cps)

        def doc_text(d):
            return cps[doc_offsets[d]:doc_offsets[d + 1]].tobytes().decode("utf-32-le")

        cut = self._cuts(k, c, starts, lens, doc_text)
        cutpos = cut.nonzero()[0] + PAD
        b = np.zeros(n + 1, bool)
        if len(cutpos):
            d = np.searchsorted(starts, cutpos, "right") - 1
            b[cutpos - starts[d] + doc_offsets[:-1][d]] = True
        b[doc_offsets[:-1][lens > 0]] = True
        b[n] = True
        return b.nonzero()[0].astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Supported patterns
# ----------------------------------------------------------------------------------------------

#: Llama 3 tokenizer.json pre-tokenizer regex
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: Qwen2 tokenizer.json pre-tokenizer regex (single digits)
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: the original GPT-2 spelling, used by HF ByteLevel(use_regex=true)
GPT2_HF_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _supported() -> dict:
    from cpu_ref.patterns import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN

    return {  # pattern: (name, family, digit group, trailing whitespace whole, case-folded)
        CL100K_PATTERN: ("cl100k", "cl3", 3, True, True),
        LLAMA3_PATTERN: ("llama3", "cl3", 3, False, True),
        QWEN2_PATTERN: ("qwen2", "cl1", 1, False, True),
        GPT2_PATTERN: ("gpt2", "gpt2", 0, True, False),
        GPT2_HF_PATTERN: ("gpt2_hf", "gpt2", 0, True, False),
        O200K_PATTERN: ("o200k", "o200k", 3, False, True),
    }


SUPPORTED_PATTERNS = _supported()
_scanners: dict = {}


def scanner_for_pattern(pat: str) -> "Scanner | None":
    """The scanner for one of ``SUPPORTED_PATTERNS`` (exact string match), else ``None``."""
    sc = _scanners.get(pat)
    if sc is None and pat in SUPPORTED_PATTERNS:
        with _lock:
            sc = _scanners.get(pat)
            if sc is None:
                name, fam, g, endw, fold = SUPPORTED_PATTERNS[pat]
                sc = _scanners[pat] = Scanner(name, pat, fam, g, endw, fold)
    return sc
