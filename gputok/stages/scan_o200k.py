"""o200k pre-tokenization as a sequential matcher over spans: what ``kernels/encode_o200k.cu`` runs.

The vectorised scanner (``scan.py``) cuts o200k with a window rule and sparse corrections, and
re-scans two irregular configurations with the reference regex (``Cuts._rescan``): a mark after
a non-letter (marks are letters *and* punctuation in the pattern) and chained contractions
(``x's's``). A device has no regex engine, so the kernels take another route that needs no
special cases at all:

1. **Span starts.** ``o200k_span_start(p, c)`` says, from the classes of two neighbouring
   characters, that a piece starts at the second one in *every* parse (the previous piece cannot
   extend over it, whatever its start; the next piece must start there). Every segment start is
   one too. The span starts cut the text into spans that are independent: the regex run from a
   true piece start reproduces the global matches (o200k has no look-behind).
2. **One thread per span** runs ``o200k_match`` (the pattern's alternatives, leftmost-first,
   with the regex's backtracking written out) from the span start until it reaches the next span
   start. The matches are exactly the regex's, so there is no irregular case left.

The span-start rule (p = class before, c = class at the position; ``scan_rules`` codes):

* c is whitespace (" " or other ``\\s`` but CR/LF) and p is not whitespace: a letter run, a
  digit group or a punctuation run (``[\\r\\n/]*`` takes no blank) ends before c;
* c is CR/LF and p is a letter or digit (a word or a digit group never takes CR/LF);
* c is a digit and p is not: no alternative takes a digit after a non-digit;
* c is a letter and p is a digit or CR/LF (neither can be a word's prefix);
* c is punctuation other than "'" (``OP``, "/") and p is a letter: a word ends at c;
* c is "'" or other punctuation (``OP``) and p is CR/LF or a digit ("/" after CR/LF may
  continue ``[\\r\\n/]*``).
A mark never starts a span (it may belong to a word or to a punctuation run): that is the whole
reason the irregular cases vanish.

The matcher, at a piece start i, tries the alternatives in the pattern's order (pre = one char
not CR/LF, letter or digit; U = Lu|Lt|Lm|Lo|M = {OU, OB, OM}; W = Ll|Lm|Lo|M = {OD, OB, OM};
Q = not whitespace, letter or digit = {OM, OP, OA, OSL}):

1. ``pre? U* W+ C?``: with the prefix first, then without. ``U*`` takes the whole U-run, and
   backtracks until ``W+`` can start: at the run's end when an ``OD`` follows (``W+`` then takes
   the W-run from there), else at the run's last ``OB``/``OM`` (``W+`` takes just it: only
   ``OU`` follow it in the run, and the char after the run is not in W). No such position: fail.
2. ``pre? U+ W* C?``: the U-run (at least one char), then the ``OD`` run after it.
3. ``\\p{N}{1,3}``.
4. `` ?Q+[\\r\\n/]*``: the Q-run (after one optional " "), then CR/LF and "/".
5. ``\\s*[\\r\\n]+``: the whitespace run up to its last CR/LF, when it has one.
6. ``\\s+(?!\\S)``: the whitespace run when it reaches the end of the segment, else all but its
   last char when that leaves one or more.
7. ``\\s+``: the (single-char) whitespace run.
``C`` is a contraction suffix (``'s|'t|'re|'ve|'m|'ll|'d``, case-insensitive: the scanner's
contraction letters by code point).

Performance notes: the matcher is linear in the span (each alternative walks one class run;
backtracking is a second look at the same run). Spans are words in prose and code (~5-8 chars),
clauses in CJK text (a span starts at punctuation after a letter). Tried first on paper: porting
the scanner's sparse corrections (R2/R3 walks, ``[\\r\\n/]*`` after CR/LF, contraction chains)
kernel by kernel, with the matcher for the irregular spans only: six kernels and two walks
where one matcher kernel does it all; the window form stays the one to try if a GPU shows the
per-span thread imbalance on long CJK clauses.
"""

from __future__ import annotations

import numpy as np

from .scan_rules import OA, OB, OD, OE, OM, ON, OP, OS, OSL, OSP, OU, X

U_SET = (OU, OB, OM)
W_SET = (OD, OB, OM)
Q_SET = (OM, OP, OA, OSL)
PRE_SET = (OM, OP, OA, OSL, OSP, OS)
WS_SET = (OSP, OS, OE)
LETTERS = (OU, OD, OB)


def o200k_span_start(p: int, c: int) -> bool:
    """A piece starts at a character of class ``c`` after one of class ``p``, in every parse
    (``encode_o200k_spans``' span rule; see the module docstring).

    >>> o200k_span_start(OD, OSP), o200k_span_start(OP, OD)
    (True, False)
    """
    if p == X:
        return c != X
    if c in (OSP, OS):
        return p not in WS_SET
    if c == OE:
        return p in LETTERS or p == ON
    if c == ON:
        return p != ON
    if c in LETTERS:
        return p in (ON, OE)
    if c in (OP, OSL) and p in LETTERS:
        return True
    return c in (OP, OA) and p in (OE, ON)


def contraction_len(letters: np.ndarray, cps, k, e: int) -> int:
    """Length of the contraction suffix at ``e`` (0 when none): ``'`` then s|d|m|t (2) or
    ll|ve|re (3), by the scanner's contraction letters (1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e)."""
    if k[e] != OA or k[e + 1] == X:
        return 0
    top = len(letters) - 1
    t1 = int(letters[min(cps[e + 1], top)])
    t2 = int(letters[min(cps[e + 2], top)]) if k[e + 2] != X else 0
    if t1 & 1:
        return 2
    return 3 if (t1 & t2 & 2) or ((t1 & 4) and (t2 & 8)) else 0


def _word1(k, s: int) -> "int | None":
    j = s
    while k[j] in U_SET:
        j += 1
    if k[j] == OD:
        while k[j] in W_SET:
            j += 1
        return j
    for q in range(j - 1, s - 1, -1):  # backtrack U*: W+ starts at the run's last OB/OM
        if k[q] in (OB, OM):
            return q + 1
    return None


def _word2(k, s: int) -> "int | None":
    if k[s] not in U_SET:
        return None
    j = s
    while k[j] in U_SET:
        j += 1
    while k[j] == OD:
        j += 1
    return j


def o200k_match(k, cps, letters: np.ndarray, i: int) -> int:
    """End of the o200k match that starts at ``i`` (a true piece start): ``k`` classes with X
    from the segment's end on (two X at least), ``cps`` code points (``encode_o200k_spans``'
    per-thread matcher; see the module docstring)."""
    c = k[i]
    starts = (i + 1, i) if c in PRE_SET else (i,)
    for word in (_word1, _word2):
        for s in starts:
            e = word(k, s)
            if e is not None:
                return e + contraction_len(letters, cps, k, e)
    if c == ON:
        j = i + 1
        while j < i + 3 and k[j] == ON:
            j += 1
        return j
    s = i + 1 if c == OSP and k[i + 1] in Q_SET else i
    if k[s] in Q_SET:
        j = s
        while k[j] in Q_SET:
            j += 1
        while k[j] in (OE, OSL):
            j += 1
        return j
    j = i  # whitespace
    last_nl = -1
    while k[j] in WS_SET:
        if k[j] == OE:
            last_nl = j
        j += 1
    if last_nl >= 0:
        return last_nl + 1
    if k[j] == X or j - i < 2:
        return j
    return j - 1


def encode_o200k_spans(k, cps, letters: np.ndarray) -> list:
    """Piece starts of one segment (``k``: its classes followed by at least three X), span by
    span, as the kernel computes them (the reference the tests hold the kernel to).

    >>> from gputok.stages.scan import scanner_for_pattern
    >>> from gputok.patterns import O200K
    >>> sc = scanner_for_pattern(O200K); sc._setup()
    >>> t = "x's's"; cps = [ord(ch) for ch in t] + [0] * 3
    >>> encode_o200k_spans(list(sc._cls[cps[:5]]) + [X] * 3, cps, sc._letters)
    [0, 3]
    """
    n = 0
    while k[n] != X:
        n += 1
    out: list = []
    for a in range(n):
        if not o200k_span_start(k[a - 1] if a else X, k[a]):
            continue
        pos = a
        while True:
            out.append(pos)
            pos = o200k_match(k, cps, letters, pos)
            if pos >= n or o200k_span_start(k[pos - 1], k[pos]):
                break
    return out
