"""cl100k / Llama 3 / Qwen2 / GPT-2 pre-tokenization as a sequential matcher over spans: what
``kernels/encode_pretok.cu`` (``encode_pretok_spans``) runs on every device.

The vectorised scanner (``scan.py``) cuts these patterns with a window rule over class pairs and
sparse corrections (contractions, digit groups, whitespace after CR/LF) that need run starts and
character indices: numpy does that in a few array passes, but a device needs a run scan, a
character-index scan, the window and the corrections (five kernels, two scans). The kernels take
the route ``scan_o200k.py`` takes for o200k instead:

1. **Span starts.** ``cl_span_start(p, c, gpt2)`` says, from the classes of two neighbouring
   characters, that a piece starts at the second one in *every* parse: the piece that holds the
   first cannot extend over the second, whatever its start, and no piece can start in between.
   Every segment start is one too. The spans between are independent (the patterns have no
   look-behind), so the regex run from a span start reproduces the global matches.
2. **One thread per span** runs ``cl_match`` (the pattern's alternatives, leftmost-first) match
   after match until it reaches the next span start.

Classes (``scan_rules``): L letter, N digit, P other, A "'", SP " ", S other ``\\s``, E CR/LF
(GPT-2 puts CR/LF into S). The span-start rule, p = class before, c = class at the position:

* c is SP or S and p is not whitespace (SP, S, E): no alternative takes a blank after a letter,
  a digit or punctuation (``[\\r\\n]*`` takes only CR/LF);
* c is E (cl only) and p is L or N: a word or a digit group never takes CR/LF;
* c is L and p is N or E (cl: any other non-letter may be the word's one-char prefix); in
  GPT-2 p is N, P or S (only " " is a prefix, and after "'" the letter may belong to a
  contraction);
* c is N and p is not N (cl: no alternative takes a digit after anything else); GPT-2 also
  excludes SP (`` ?\\p{N}``);
* c is P or A and p is L, N or S, or E (cl): a word, a digit group or a whitespace piece ends
  there, and only " " is a prefix of punctuation.
Anything else (a letter after punctuation or a blank, which may be its prefix; punctuation after
punctuation or " "; whitespace after whitespace) is left to the matcher.

The matcher at a piece start i tries, in the pattern's order:

1. a contraction: ``'`` then s|d|m|t or ll|ve|re (cl: any case; GPT-2: lower case), by the
   scanner's contraction letters (1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e);
2. a word: the L-run at i, or one prefix char then the L-run (cl: the prefix is SP, S, P or A,
   ``[^\\r\\n\\p{L}\\p{N}]``; GPT-2: SP);
3. digits: ``\\p{N}{1,3}`` (cl100k, Llama 3), ``\\p{N}`` (Qwen2), `` ?\\p{N}+`` (GPT-2);
4. punctuation: one optional " ", the run of P|A, then (cl) every CR/LF after it;
5. whitespace (SP, S, E): the whole run when it reaches the segment's end and the pattern has
   ``\\s++$`` (cl100k, GPT-2); else (cl) up to the run's last CR/LF when it has one
   (``\\s*[\\r\\n]+``); else the run when it reaches the segment's end (``\\s+(?!\\S)``), all but
   its last char when that leaves one or more, its single char otherwise (``\\s``).

Performance notes: one pass over the bytes that are span starts (two class loads per byte, the
rest skipped on a CPU) plus a walk over each span, against the window form's four passes and two
scans (~16 ns per byte of cl100k prose on one CPU core for runs, window, fix and the scans).
Spans are words in prose and code; on a GPU a warp's threads do unequal work on long CJK
clauses (letters after letters are one span), as for o200k.
"""

from __future__ import annotations

import numpy as np

from .scan_rules import A, E, L, N, P, S, SP, X

WS_SET = (SP, S, E)
Q_SET = (P, A)


def cl_span_start(p: int, c: int, gpt2: bool) -> bool:
    """A piece starts at a character of class ``c`` after one of class ``p`` in every parse
    (``encode_pretok_spans``' span rule; see the module docstring).

    >>> cl_span_start(L, SP, False), cl_span_start(P, L, False), cl_span_start(P, L, True)
    (True, False, True)
    """
    if p == X:
        return c != X
    if c in (SP, S):
        return p not in WS_SET
    if c == E:
        return p in (L, N)
    if c == L:
        return p in ((N, P, S) if gpt2 else (N, E))
    if c == N:
        return p not in ((N, SP) if gpt2 else (N,))
    if c in Q_SET:
        return p in (L, N, S, E)
    return False


def contraction_end(letters: np.ndarray, cps, k, i: int) -> int:
    """End of the contraction at ``i`` (``'`` then s|d|m|t, ll, ve or re), or ``i`` when none,
    by the scanner's contraction letters (1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e)."""
    if k[i] != A or k[i + 1] == X:
        return i
    top = len(letters) - 1
    t1 = int(letters[min(cps[i + 1], top)])
    t2 = int(letters[min(cps[i + 2], top)]) if k[i + 2] != X else 0
    if t1 & 1:
        return i + 2
    return i + 3 if (t1 & t2 & 2) or ((t1 & 4) and (t2 & 8)) else i


def _run(k, j: int, members) -> int:
    while k[j] in members:
        j += 1
    return j


def cl_match(k, cps, letters: np.ndarray, i: int, gpt2: bool, digit_group: int,
             end_whole: bool) -> int:
    """End of the match that starts at ``i`` (a true piece start): ``k`` classes with X from
    the segment's end on (three X at least), ``cps`` code points (``encode_pretok_spans``'
    per-thread matcher; see the module docstring). ``digit_group``: 3, 1, or 0 for unbounded."""
    c = k[i]
    e = contraction_end(letters, cps, k, i)
    if e != i:
        return e
    if c == L:
        return _run(k, i + 1, (L,))
    if k[i + 1] == L and (c == SP if gpt2 else c in (SP, S, P, A)):
        return _run(k, i + 2, (L,))
    s = i + 1 if gpt2 and c == SP and k[i + 1] == N else i
    if k[s] == N:
        j = s + 1
        while k[j] == N and (digit_group == 0 or j - s < digit_group):
            j += 1
        return j
    s = i + 1 if c == SP and k[i + 1] in Q_SET else i
    if k[s] in Q_SET:
        j = _run(k, s, Q_SET)
        return j if gpt2 else _run(k, j, (E,))
    j = _run(k, i, WS_SET)  # whitespace
    if end_whole and k[j] == X:
        return j
    for q in range(j - 1, i - 1, -1):
        if k[q] == E:
            return q + 1
    if k[j] == X or j - i < 2:
        return j
    return j - 1


def encode_cl_spans(k, cps, letters: np.ndarray, gpt2: bool, digit_group: int,
                    end_whole: bool) -> list:
    """Piece starts of one segment (``k``: its classes followed by at least three X), span by
    span, as the kernel computes them (the reference the tests hold the kernel to).

    >>> from gputok.stages.scan import scanner_for_pattern
    >>> from gputok.patterns import CL100K
    >>> sc = scanner_for_pattern(CL100K); sc._setup()
    >>> t = "x's 1234"; cps = [ord(ch) for ch in t] + [0] * 3
    >>> encode_cl_spans(list(sc._cls[cps[:8]]) + [X] * 3, cps, sc._letters, False, 3, True)
    [0, 1, 3, 4, 7]
    """
    n = 0
    while k[n] != X:
        n += 1
    out: list = []
    for a in range(n):
        if not cl_span_start(k[a - 1] if a else X, k[a], gpt2):
            continue
        pos = a
        while True:
            out.append(pos)
            pos = cl_match(k, cps, letters, pos, gpt2, digit_group, end_whole)
            if pos >= n or cl_span_start(k[pos - 1], k[pos], gpt2):
                break
    return out
