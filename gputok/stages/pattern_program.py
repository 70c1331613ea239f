"""A pre-tokenizer spec as a program for the native pattern matcher (``kernels/host_regex.h``).

``program_for(steps, family)`` (called by ``Pretokenizer.program``) reads each ``Split`` step's
pinned pattern (``unicode.pin_pattern``: every class explicit, every table- or engine-dependent
atom already rewritten, so the text means the same to any engine) and compiles it into instructions for a backtracking matcher with the
leftmost-first, greedy-first rule of Python's ``regex`` (which the host split runs, and which
the oracles' engines agree with on these patterns), empty matches included (Python's rule:
after an empty match the next match may not be empty at the same position). Nothing is
guessed: a construct outside the set below, a loop whose body can match empty text, or
capturing groups where the step keeps only matches (``findall`` would return the groups) make
``program_for`` return None, and the host split stays.

Instructions (int32 words; ``kernels/host_regex.h`` runs them): CHAR c; CLASS k; ANY (not
"\\n"); ANYNL; SPLIT a b (try a, then b); JMP a; MATCH; LOOK flags start width (a sub-program
from ``start``, ahead or behind a fixed ``width`` of code points, negated or not); ATOMIC start
(the sub-program's first match, never re-entered: atomic groups and possessive quantifiers);
ASSERT kind (\\A, \\Z, ``^`` and ``$`` outside multi-line mode). A counted repeat is unrolled.
Classes: sorted inclusive code point ranges, with a 128-bit ASCII map each.

The steps (``PretokSpec.steps``): SPLIT_STEP (entry pc, keep gaps) or PREFIX_STEP, applied in
order, each to every piece of the one before (``Pretokenizer._steps`` is the rule).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

CHAR, CLASS, ANY, ANYNL, SPLIT, JMP, MATCH, LOOK, ATOMIC, ASSERT = range(10)
A_BEGIN, A_END, A_BOL, A_EOL = range(4)  # \A, \Z, ^ and $ (Python's, not multi-line)
LOOK_BEHIND, LOOK_NEG = 1, 2
SPLIT_STEP, PREFIX_STEP = 0, 1
_MAX_CODE = 1 << 22  # instruction words (a counted repeat unrolls)


class Unsupported(ValueError):
    """A construct the native matcher does not run (the host split stays)."""


@dataclass
class PatternProgram:
    """A spec's compiled steps: ``code`` (int32), ``steps`` (int32 [n, 3]: kind, entry pc, keep
    gaps), ``class_off`` (int64, one more than classes), ``ranges`` (uint32 pairs, flat),
    ``ascii`` (uint32 [classes, 4])."""

    code: np.ndarray
    steps: np.ndarray
    class_off: np.ndarray
    ranges: np.ndarray
    ascii: np.ndarray


# ---- the pinned pattern's text -> a tree -------------------------------------------------------

_ESC = {"n": 10, "r": 13, "t": 9, "f": 12, "v": 11, "a": 7, "e": 27}


class _Parser:
    def __init__(self, text: str):
        self.p, self.i = text, 0
        self.groups = 0

    def fail(self, what: str):
        return Unsupported(f"{what} at {self.i} of the pinned pattern")

    def parse(self):
        node = self.alt(dotall=False)
        if self.i != len(self.p):
            raise self.fail("unbalanced ')'")
        return node

    def alt(self, dotall: bool):
        options = [self.seq(dotall)]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            options.append(self.seq(dotall))
        return options[0] if len(options) == 1 else ("alt", options)

    def seq(self, dotall: bool):
        items: list = []
        p = self.p
        while self.i < len(p) and p[self.i] not in "|)":
            atom = self.atom(dotall)
            items.append(self.quantified(atom))
        return ("seq", items)

    def quantified(self, atom):
        p = self.p
        while self.i < len(p) and p[self.i] in "*+?{":
            c = p[self.i]
            if c == "{":
                j = p.find("}", self.i)
                body = p[self.i + 1:j] if j > 0 else ""
                lo_s, comma, hi_s = body.partition(",")
                if j < 0 or not lo_s.isdigit() or (hi_s and not hi_s.isdigit()):
                    raise self.fail("a '{' that is not a counted repeat")
                lo = int(lo_s)
                hi = (int(hi_s) if hi_s else None) if comma else lo
                self.i = j + 1
            else:
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.i += 1
            mode = "greedy"
            if self.i < len(p) and p[self.i] in "?+":
                mode = "lazy" if p[self.i] == "?" else "possessive"
                self.i += 1
            if atom[0] in ("assert", "look"):
                raise self.fail("a quantified assertion")
            atom = ("rep", atom, lo, hi, mode)
        return atom

    def atom(self, dotall: bool):
        p = self.p
        c = p[self.i]
        if c == "(":
            return self.group(dotall)
        if c == "[":
            return ("class", self.klass())
        if c == "\\":
            return self.escape()
        self.i += 1
        if c == ".":
            return ("anynl",) if dotall else ("any",)
        if c == "^":
            return ("assert", A_BOL)
        if c == "$":
            return ("assert", A_EOL)
        if c in "*+?{":
            raise self.fail("a quantifier with nothing to repeat")
        return ("char", ord(c))

    def group(self, dotall: bool):
        p = self.p
        self.i += 1
        kind = "group"
        if p.startswith("?", self.i):
            for head, k in (("?:", "group"), ("?=", "ahead"), ("?!", "not_ahead"),
                            ("?<=", "behind"), ("?<!", "not_behind"), ("?>", "atomic"),
                            ("?s:", "dotall")):
                if p.startswith(head, self.i):
                    kind = k
                    self.i += len(head)
                    break
            else:
                raise self.fail("a group kind the matcher does not run")
        else:
            self.groups += 1
        body = self.alt(dotall or kind == "dotall")
        if self.i >= len(p) or p[self.i] != ")":
            raise self.fail("a group without ')'")
        self.i += 1
        if kind in ("group", "dotall"):
            return body
        if kind == "atomic":
            return ("atomic", body)
        return ("look", body, kind in ("behind", "not_behind"), kind.startswith("not"))

    def escape(self):
        p = self.p
        e = p[self.i + 1] if self.i + 1 < len(p) else ""
        if e == "A":
            self.i += 2
            return ("assert", A_BEGIN)
        if e == "Z":
            self.i += 2
            return ("assert", A_END)
        return ("char", self.escaped_char())

    def escaped_char(self) -> int:
        p = self.p
        e = p[self.i + 1] if self.i + 1 < len(p) else ""
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is not None:
            h = p[self.i + 2:self.i + 2 + width]
            if len(h) != width or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                raise self.fail("a malformed hex escape")
            self.i += 2 + width
            return int(h, 16)
        if e in _ESC:
            self.i += 2
            return _ESC[e]
        if e and not e.isalnum():
            self.i += 2
            return ord(e)
        raise self.fail(f"the escape \\{e}")

    def klass(self) -> list:
        p = self.p
        self.i += 1
        neg = p.startswith("^", self.i)
        if neg:
            self.i += 1
        ranges: list = []
        first = True
        while True:
            if self.i >= len(p):
                raise self.fail("a class without ']'")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if c == "[":
                raise self.fail("a nested class")
            lo = self.class_char()
            hi = lo
            if p.startswith("-", self.i) and not p.startswith("-]", self.i):
                self.i += 1
                hi = self.class_char()
                if hi < lo:
                    raise self.fail("a reversed range")
            ranges.append((lo, hi))
            first = False
        ranges = _normal(ranges)
        return _complement(ranges) if neg else ranges

    def class_char(self) -> int:
        p = self.p
        c = p[self.i]
        if c == "\\":
            e = p[self.i + 1] if self.i + 1 < len(p) else ""
            if e in "xuU" or e in _ESC or (e and not e.isalnum()):
                return self.escaped_char()
            raise self.fail(f"the class escape \\{e}")
        self.i += 1
        return ord(c)


def _normal(ranges: list) -> list:
    out: list = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: list) -> list:
    out, at = [], 0
    for lo, hi in ranges:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= 0x10FFFF:
        out.append((at, 0x10FFFF))
    return out


# ---- facts about a tree ------------------------------------------------------------------------

def _nullable(n) -> bool:
    k = n[0]
    if k in ("char", "class", "any", "anynl"):
        return False
    if k in ("assert", "look"):
        return True
    if k == "seq":
        return all(_nullable(x) for x in n[1])
    if k == "alt":
        return any(_nullable(x) for x in n[1])
    if k == "rep":
        return n[2] == 0 or _nullable(n[1])
    if k == "atomic":
        return _nullable(n[1])
    raise AssertionError(k)


def _width(n) -> "int | None":
    """The node's fixed width in code points, or None."""
    k = n[0]
    if k in ("char", "class", "any", "anynl"):
        return 1
    if k in ("assert", "look"):
        return 0
    if k == "seq":
        ws = [_width(x) for x in n[1]]
        return None if None in ws else sum(ws)
    if k == "alt":
        ws = {_width(x) for x in n[1]}
        return ws.pop() if len(ws) == 1 and None not in ws else None
    if k == "rep":
        w = _width(n[1])
        return w * n[2] if w is not None and n[2] == n[3] else None
    if k == "atomic":
        return _width(n[1])
    raise AssertionError(k)


# ---- a tree -> instructions ---------------------------------------------------------------------

class _Emitter:
    def __init__(self):
        self.code: list = []
        self.classes: dict = {}  # ranges tuple -> index

    def cls(self, ranges: list) -> int:
        key = tuple(ranges)
        if key not in self.classes:
            self.classes[key] = len(self.classes)
        return self.classes[key]

    def put(self, *words) -> int:
        at = len(self.code)
        self.code.extend(words)
        if len(self.code) > _MAX_CODE:
            raise Unsupported("the program is too long (a counted repeat too large)")
        return at

    def program(self, node) -> int:
        """A sub-program ending in MATCH; its entry."""
        at = len(self.code)
        self.node(node)
        self.put(MATCH)
        return at

    def node(self, n) -> None:
        k = n[0]
        if k == "char":
            self.put(CHAR, n[1])
        elif k == "class":
            self.put(CLASS, self.cls(n[1]))
        elif k == "any":
            self.put(ANY)
        elif k == "anynl":
            self.put(ANYNL)
        elif k == "assert":
            self.put(ASSERT, n[1])
        elif k == "seq":
            for x in n[1]:
                self.node(x)
        elif k == "alt":
            self.alt(n[1])
        elif k == "look":
            _, body, behind, neg = n
            width = 0
            if behind:
                width = _width(body)
                if width is None:
                    raise Unsupported("a look-behind of varying width")
            at = self.put(LOOK, (LOOK_BEHIND if behind else 0) | (LOOK_NEG if neg else 0), 0,
                          width, 0)
            self.code[at + 4] = self.skip(lambda: self.program(body), at)
        elif k == "atomic":
            self.atomic(n[1])
        elif k == "rep":
            self.rep(*n[1:])
        else:
            raise AssertionError(k)

    def skip(self, emit_sub, at: int) -> int:
        """Emit a sub-program after the instruction at ``at`` (whose word 2 gets its entry);
        returns the pc after it (where the instruction continues)."""
        self.code[at + 2] = emit_sub()
        return len(self.code)

    def atomic(self, body) -> None:
        at = self.put(ATOMIC, 0, 0)
        # ATOMIC entry next: words = ATOMIC, entry, continue-at
        self.code[at + 1] = self.program(body)
        self.code[at + 2] = len(self.code)

    def alt(self, options: list) -> None:
        jumps = []
        for opt in options[:-1]:
            s = self.put(SPLIT, 0, 0)
            self.code[s + 1] = len(self.code)
            self.node(opt)
            jumps.append(self.put(JMP, 0))
            self.code[s + 2] = len(self.code)
        self.node(options[-1])
        for j in jumps:
            self.code[j + 1] = len(self.code)

    def rep(self, body, lo: int, hi, mode: str) -> None:
        if mode == "possessive":
            return self.atomic(("rep", body, lo, hi, "greedy"))
        if hi is None and _nullable(body):
            raise Unsupported("a loop whose body can match empty text")
        for _ in range(lo):
            self.node(body)
        if hi is None:  # L: SPLIT body, out; body; JMP L
            s = self.put(SPLIT, 0, 0)
            self.node(body)
            self.put(JMP, s)
            self.order(s, s + 3, len(self.code), mode)
            return
        splits = []
        for _ in range(hi - lo):  # nested optionals: (x(x(x)?)?)?
            s = self.put(SPLIT, 0, 0)
            splits.append(s)
            self.node(body)
        for s in splits:
            self.order(s, s + 3, len(self.code), mode)

    def order(self, s: int, body: int, out: int, mode: str) -> None:
        self.code[s + 1], self.code[s + 2] = (out, body) if mode == "lazy" else (body, out)


def compile_pattern(pinned: str, keep_gaps: bool, em: "_Emitter | None" = None
                    ) -> tuple[_Emitter, int]:
    """(emitter, entry pc) of one pinned pattern (``Unsupported`` if it cannot run natively)."""
    parser = _Parser(pinned)
    tree = parser.parse()
    if parser.groups and not keep_gaps:
        raise Unsupported("capturing groups in a step that keeps only matches (findall)")
    em = em or _Emitter()
    return em, em.program(tree)


def _pinned(pattern: str, family: str) -> str:
    from ..unicode import compiled
    from ..unicode.pattern import pin_pattern

    return compiled._cached(pattern, family, "plain", lambda p, f: (pin_pattern(p, f), False))[0]


@functools.lru_cache(maxsize=64)
def program_for(steps: tuple, family: str) -> "PatternProgram | None":
    """The native program of a pre-tokenizer's steps (``Pretokenizer.program`` spells its
    ``PretokSpec`` so: ("split", pattern, keep_gaps) or ("prefix",) each; ``family``: the
    Unicode family its patterns are pinned to), or None where a step cannot run natively
    (module docstring)."""
    em = _Emitter()
    out = []
    try:
        for step in steps:
            if step[0] == "prefix":
                out.append((PREFIX_STEP, 0, 0))
            elif step[0] == "split":
                _, pattern, keep_gaps = step
                _, entry = compile_pattern(_pinned(pattern, family), keep_gaps, em)
                out.append((SPLIT_STEP, entry, int(keep_gaps)))
            else:
                return None
    except ValueError:  # (Unsupported; or a pattern the pinning itself refuses)
        return None
    steps = out
    classes = sorted(em.classes.items(), key=lambda kv: kv[1])
    off = np.zeros(len(classes) + 1, np.int64)
    np.cumsum([len(r) for r, _ in classes], out=off[1:])
    flat = np.array([x for r, _ in classes for pair in r for x in pair], np.uint32)
    ascii_map = np.zeros((max(len(classes), 1), 4), np.uint32)
    for r, k in classes:
        for lo, hi in r:
            for c in range(lo, min(hi, 127) + 1):
                ascii_map[k, c >> 5] |= np.uint32(1 << (c & 31))
    return PatternProgram(np.array(em.code, np.int32), np.array(steps, np.int32).reshape(-1, 3),
                          off, flat if len(flat) else np.zeros(2, np.uint32), ascii_map)
