"""The scanner's rules: character classes per pattern family, and the pair table.

Read ``scan.py``'s docstring first (the method). A *family* groups patterns that share classes
and rules: ``cl3`` (cl100k, Llama 3), ``cl1`` (Qwen2: single digits), ``gpt2`` (r50k/p50k and
HF's ByteLevel regex), ``o200k``. Each code point gets a class from the ``F_*`` flags of
``gputok.unicode.class_flags(unicode_family)`` (the oracle's pinned Unicode data); the pair table
``PAIR[k[i-1] << bits | k[i]]`` holds the rule bits derived from the alternatives by the rule
functions below, whose docstrings give the derivation. The CUDA kernels receive these tables and
the class codes as defines (``gputok.backends.kernels``), so the rules exist once.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import patterns
from ..unicode import F_L, F_LO, F_M, F_N, F_NL, F_S, F_UP, class_flags

_lock = threading.RLock()

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
    """Class table (code point -> class) and pair table (class pair -> rule bits), per Unicode
    family (the class table depends on the oracle's Unicode data, the pair table does not)."""

    def __init__(self, name, bits, classify, rules, specials, next_range, prev2_range):
        self.name = name
        self.bits = bits  # bits per class in the pair code
        self.classify = classify
        self.rules = rules
        self.specials = specials  # {code point: class} overriding the flag classification
        self.next_range = next_range  # (lo, n): NEXT holds for classes lo..lo+n-1
        self.prev2_range = prev2_range
        self._cls: dict = {}
        self.pair = None

    def tables(self, unicode_family: str = "tiktoken") -> np.ndarray:
        """uint8[0x110000] class of every code point; sets ``pair`` and ``cls256``."""
        got = self._cls.get(unicode_family)
        if got is None:
            with _lock:
                got = self._cls.get(unicode_family)
                if got is None:
                    self._cls[unicode_family] = got = self._class_table(unicode_family)
        if self.pair is None:
            ncls = 1 << self.bits
            pair = np.zeros(256, np.uint8)
            for a in range(ncls):
                for b in range(ncls):
                    pair[(a << self.bits) | b] = self.rules(a, b)
            self.pair = pair.tobytes()
        return got

    def _class_table(self, unicode_family: str) -> np.ndarray:
        """The classes of every code point, mapped from the cache (keyed by the flags' own key,
        this family and this module's source), else derived and written there: deriving it
        is a 1.1M-element gather, ~3 ms of every process's first device plan."""
        import hashlib
        from pathlib import Path

        from .._cache import map_arrays, write_arrays
        from ..unicode.flags import cache_path

        flags_path = cache_path(unicode_family)  # named by what the flags derive from
        key = hashlib.sha256(flags_path.encode() + self.name.encode() +
                             Path(__file__).read_bytes()).hexdigest()[:32]
        path = str(Path(flags_path).with_name(f"classes-{self.name}-{key}.bin"))
        got = map_arrays(path)
        cls = None if got is None else got[0].get("cls")
        if cls is not None and cls.dtype == np.uint8 and cls.shape == (0x110000,):
            return cls
        flags = class_flags(unicode_family)["table"]
        lut = np.array([self.classify(f) for f in range(256)], np.uint8)
        cls = lut[flags]
        for cp, v in self.specials.items():
            cls[cp] = v
        write_arrays(path, {"cls": cls})
        cls.setflags(write=False)
        return cls

    def __reduce__(self):  # one object per family: a pickled scanner (a job's spawned worker)
        return _family, (self.name,)  # refers to its family by name (its rules are lambdas)

    def cls256(self, unicode_family: str = "tiktoken") -> bytes:
        """The classes of U+0000..U+00FF as a ``bytes.translate`` table (latin-1 text)."""
        return self.tables(unicode_family)[:256].tobytes()


FAMILIES = {
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

def _family(name: str) -> _Family:
    return FAMILIES[name]


def _supported() -> dict:
    return {  # pattern: (name, family, digit group, trailing whitespace whole, case-folded)
        patterns.CL100K: ("cl100k", "cl3", 3, True, True),
        patterns.LLAMA3: ("llama3", "cl3", 3, False, True),
        patterns.QWEN2: ("qwen2", "cl1", 1, False, True),
        patterns.GPT2: ("gpt2", "gpt2", 0, True, False),
        patterns.BYTELEVEL: ("gpt2_hf", "gpt2", 0, True, False),
        patterns.O200K: ("o200k", "o200k", 3, False, True),
    }


#: the patterns with a vectorised scanner, by exact string
SUPPORTED_PATTERNS = _supported()
