"""Pin a pre-tokenizer pattern to an oracle's Unicode data: ``pin_pattern`` / ``compile_pinned``.

The oracle engines read a pattern with their own Unicode tables and a few rules of their own;
Python's ``regex`` reads it with the tables of whatever release is installed. ``pin_pattern``
rewrites every table-dependent or engine-dependent atom into explicit code point classes and plain
anchors, so the result means the same under *any* ``regex`` release:

* ``\\p{X}`` ``\\P{X}`` ``\\p{^X}`` ``\\pX`` ``\\s \\S \\d \\D \\w \\W \\h \\H`` -> ``[ranges]``
  from the family's data; bracket classes (nested, ``[^..]``, ``&&``, and for the Rust crate ``--``
  and ``~~``) are evaluated here into one flat class.
* ``(?i...)``: letters and classes become their case-folded classes and the flag is dropped.
  The families fold differently, as measured: the Rust crate folds every item of a class and
  ``\\p{..}`` everywhere (``(?i:\\p{Lu})`` matches "a"); Oniguruma folds a bracket class once, at
  the end, and never a ``\\p{..}`` outside brackets. Oniguruma also lets one character match a
  string (``(?i:ss)`` matches "ß"); such spots raise ``ValueError`` rather than guess.
* anchors: tiktoken ``$`` is the end of the text (``\\Z`` here; Python's ``$`` also matches before
  a final newline), ``(?m)`` makes ``^``/``$`` line anchors; fancy-regex's ``\\Z`` is "only
  newlines follow". Oniguruma (Ruby syntax) always has line anchors: ``^`` after any "\\n" (but
  not at the very end), ``$`` before any "\\n"; its ``\\Z`` allows one final newline, its
  ``(?m)`` is dot-all, and ``a(?i)b|c`` scopes the flag over ``b|c`` (Perl's reading is
  ``(?:ab)|c``).
* ``\\b``/``\\B`` become look-arounds on the pinned ``\\w``.

Quantifiers (``{1,3}+``, possessive, lazy), groups, look-arounds and atomic groups are copied as
they are: only atoms are rewritten (Oniguruma reads ``\\p{N}{1,3}+`` differently from Rust; that is
the caller's business). Anything whose oracle meaning is not pinned here raises ``ValueError``
naming the construct and the pattern: unknown properties, POSIX brackets, ``(?x)``, ``\\K``...
"""

from __future__ import annotations

import re
from typing import NamedTuple

from . import installed, sets, store
from .emit import char as _emit_char, ranges as _emit_set
from .catalog import ESCAPES, loose
from .pattern_class import ClassReader

__all__ = ["pin_pattern", "fast_text", "ascii_text", "single_set"]

_ASCII = store.normal([[0, 0x7F]])
_NAMED_GROUP = re.compile(r"\(\?(?:P?<([A-Za-z_]\w*)>|'([A-Za-z_]\w*)')")
_NAMED_REF = re.compile(r"\(\?P=[A-Za-z_]\w*\)")
_FLAG_GROUP = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?([:)])")
_QUANT = re.compile(r"\{\d*(?:,\d*)?\}")
_ESCAPED = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}


class _Flags(NamedTuple):
    i: bool = False  # case-insensitive
    m: bool = False  # tiktoken multi-line anchors
    s: bool = False  # "." matches "\n" (tiktoken s, Oniguruma m)


class _Pin(ClassReader):
    def __init__(self, pattern: str, family: str, fast: bool = False, ascii_only: bool = False):
        sets.unicode_version(family)  # validates the family
        self.src, self.p, self.fam, self.fast = pattern, pattern, family, fast
        self.ascii_only = ascii_only  # emit every class cut to its ASCII members
        self.v1 = False  # the fast form used a V1 set operation
        self.tk = family == "tiktoken"
        self.i = 0
        self.out: list = []
        self.ngroups = 0
        self.run = ""  # literal characters just emitted under (?i) (Oniguruma multi-char folds)

    def fail(self, what: str, at: "int | None" = None) -> ValueError:
        at = self.i if at is None else at
        return ValueError(f"pin_pattern: {what} at offset {at} of pattern {self.src!r} "
                          f"(family {self.fam!r})")

    def emit(self, r, py: "str | None") -> str:
        """A set as pattern text: explicit ranges, or (``fast``) the installed ``regex``'s own
        spelling ``py`` of the same source atom corrected to the pinned set."""
        if self.ascii_only:
            return _emit_set(store.intersect(r, _ASCII))
        if not self.fast:
            return _emit_set(r)
        text, v1 = installed.corrected(r, py)
        self.v1 |= v1
        return text

    # -- sequences and groups ------------------------------------------------------------------

    def seq(self, flags: _Flags) -> None:
        """Up to the ``)`` closing the current group (not consumed) or the end."""
        p, opened = self.p, 0
        while self.i < len(p):
            c = p[self.i]
            if c == ")":
                break
            if c == "(":
                new = self.group(flags)
                if new is not None:  # a bare (?flags): the rest of this group
                    flags = new
                    if not self.tk:  # Oniguruma: the flag's scope swallows the alternatives
                        self.out.append("(?:")
                        opened += 1
                continue
            if c == "[":
                self.out.append(self.emit(*self.klass(flags, top=True)))
                self.run = ""
                continue
            if c == "\\":
                self.escape(flags)
                continue
            self.i += 1
            if c == ".":
                self.out.append("(?s:.)" if flags.s else ".")
            elif c == "^":
                if self.tk:
                    self.out.append("(?:\\A|(?<=\\n))" if flags.m else "\\A")
                else:
                    self.out.append("(?:\\A|(?<=\\n)(?!\\Z))")
            elif c == "$":
                self.out.append("(?=\\n|\\Z)" if flags.m or not self.tk else "\\Z")
            elif c == "{" and _QUANT.match(p, self.i - 1):
                m = _QUANT.match(p, self.i - 1)
                self.out.append(m.group())
                self.i = m.end()
            elif c in "|*+?":
                self.out.append(c)
            else:
                self.literal(ord(c), flags)
                continue
            self.run = ""
        self.out.append(")" * opened)

    def body(self, flags: _Flags, at: int) -> None:
        self.run = ""
        self.seq(flags)
        if self.i >= len(self.p):
            raise self.fail("missing ')' for the group opened", at)
        self.out.append(")")
        self.i += 1
        self.run = ""

    def group(self, flags: _Flags):
        p, at = self.p, self.i
        if p.startswith("(?#", at):
            end = p.find(")", at)
            if end < 0:
                raise self.fail("unterminated comment")
            self.i = end + 1
            return None
        for prefix in ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>"):
            if p.startswith(prefix, at):
                self.out.append(prefix)
                self.i = at + len(prefix)
                self.body(flags, at)
                return None
        m = _NAMED_REF.match(p, at)
        if m:
            if flags.i:
                raise self.fail("a backreference under (?i) is not pinned")
            self.out.append(m.group())
            self.i = m.end()
            self.run = ""
            return None
        m = _NAMED_GROUP.match(p, at)
        if m:
            self.ngroups += 1
            self.out.append("(?P<%s>" % (m.group(1) or m.group(2)))
            self.i = m.end()
            self.body(flags, at)
            return None
        if p.startswith("(?", at):
            m = _FLAG_GROUP.match(p, at)
            if not m:
                raise self.fail("unsupported group syntax %r" % p[at:at + 4])
            new = self._flags(flags, m.group(1), m.group(2) or "", at)
            self.i = m.end()
            if m.group(3) == ")":
                self.run = ""
                return new
            self.out.append("(?:")
            self.body(new, at)
            return None
        self.ngroups += 1
        self.out.append("(")
        self.i = at + 1
        self.body(flags, at)
        return None

    def _flags(self, flags: _Flags, on: str, off: str, at: int) -> _Flags:
        # tiktoken (Rust): i, m (line anchors), s (dot-all), u (Unicode: always on);
        # Oniguruma (Ruby syntax): i, m (dot-all). x changes the syntax: not pinned.
        table = {"i": "i", "m": "m", "s": "s", "u": None} if self.tk else {"i": "i", "m": "s"}
        out = flags._asdict()
        for letters, value in ((on, True), (off, False)):
            for ch in letters:
                if ch not in table:
                    raise self.fail(f"flag {ch!r} is not supported for this family")
                if table[ch]:
                    out[table[ch]] = value
        return _Flags(**out)

    # -- literals ------------------------------------------------------------------------------

    def literal(self, cp: int, flags: _Flags) -> None:
        if not flags.i:
            self.out.append(_emit_char(cp))
            return
        self.check_multi(cp)
        members = sets.orbit(self.fam, cp)
        self.out.append(_emit_set(store.from_code_points(members)) if len(members) > 1
                        else _emit_char(cp))

    def check_multi(self, cp: int) -> None:
        """Oniguruma only: refuse (?i) literals that may match or form a multi-char fold."""
        if self.tk:
            return
        if store.intersect(sets.multi_fold(self.fam), store.normal([[cp, cp]])).size:
            raise self.fail("(?i) on U+%04X: Oniguruma also lets it match a several-character "
                            "string (full case folding), which is not pinned; spell the "
                            "alternatives out" % cp)
        self.run += chr(cp)
        for t in sets.multi_targets(self.fam):
            tail = self.run[-len(t):]
            if len(tail) == len(t) and all(ord(a) in sets.orbit(self.fam, ord(b))
                                           for a, b in zip(tail, t)):
                raise self.fail(f"(?i) on {tail!r}: Oniguruma also matches it against one "
                                "character (full case folding), which is not pinned; spell the "
                                "alternatives out")

    # -- escapes -------------------------------------------------------------------------------

    def escape(self, flags: _Flags) -> None:
        p, at = self.p, self.i
        if at + 1 >= len(p):
            raise self.fail("trailing backslash")
        e = p[at + 1]
        assertion = {"A": "\\A", "z": "\\Z",
                     "Z": "(?=\\n*\\Z)" if self.tk else "(?=\\n?\\Z)"}.get(e)
        if assertion:
            self.i = at + 2
            self.out.append(assertion)
            self.run = ""
            return
        if e in "bB":
            w = self.emit(sets.atom_set(self.fam, "\\w"), "\\w")
            self.out.append(("(?:(?<=%s)(?!%s)|(?<!%s)(?=%s))" if e == "b"
                             else "(?:(?<=%s)(?=%s)|(?<!%s)(?!%s))") % (w, w, w, w))
            self.i = at + 2
            self.run = ""
            return
        if e.isdigit() and (self.tk or not self._onig_octal(at)):
            if e == "0":
                raise self.fail("\\0 is not valid for the Rust regex crate")
            if flags.i:
                raise self.fail("a backreference under (?i) is not pinned")
            m = re.compile(r"\d+").match(p, at + 1)
            self.out.append("(?:\\%s)" % m.group())  # grouped: a digit may follow
            self.i = m.end()
            self.run = ""
            return
        kind, value, py = self.escape_item(flags)
        if kind == "char":
            self.literal(value, flags)
        else:
            self.out.append(self.emit(value, py))
            self.run = ""

    def _onig_octal(self, at: int) -> bool:
        m = re.compile(r"\d+").match(self.p, at + 1)
        digits = m.group()
        if digits[0] == "0":
            return True
        n = int(digits)
        return not (n <= 9 or n <= self.ngroups) and all(d in "01234567" for d in digits)

    def escape_item(self, flags: _Flags, fold: "bool | None" = None, in_class: bool = False):
        """One escape that stands for characters: ``("char", cp, None)`` or ``("set", ranges,
        py)`` where ``py`` spells the same atom for the installed ``regex`` (None: no spelling).

        ``fold``: whether a class atom is read case-folded (default: under (?i), as outside
        brackets)."""
        p, at = self.p, self.i
        if at + 1 >= len(p):
            raise self.fail("trailing backslash")
        e = p[at + 1]
        folded = flags.i if fold is None else fold
        if e in "pP":
            if not self.tk and not p.startswith("{", at + 2):
                self.i = at + 2  # Oniguruma reads "\pL" as the letters "pL"
                return "char", ord(e), None
            if p.startswith("{", at + 2):
                end = p.find("}", at + 3)
                if end < 0:
                    raise self.fail("unterminated \\%s{" % e)
                name, self.i = p[at + 3:end], end + 1
            elif at + 2 < len(p):
                name, self.i = p[at + 2], at + 3
            else:
                raise self.fail("\\%s without a property name" % e)
            return ("set",) + self.property(name, e == "P", folded, at, in_class)
        if e in "sSdDwWhH":
            self.i = at + 2
            return ("set", sets.atom_set(self.fam, "\\" + e.lower(), negated=e.isupper(),
                                         folded=folded, in_class=in_class),
                    None if e in "hH" else "\\" + e)
        if e == "N":
            self.i = at + 2
            return "set", store.complement(store.normal([[0x0A, 0x0A]])), None
        if e == "O":
            self.i = at + 2
            return "set", store.FULL, None
        if e in _ESCAPED:
            self.i = at + 2
            return "char", _ESCAPED[e], None
        if e == "x" or (e == "u") or (e == "U" and self.tk):
            return "char", self._hex(e, at), None
        if e.isdigit() and not self.tk and self._onig_octal(at):
            m = re.compile(r"[0-7]{1,3}").match(p, at + 1)
            self.i = m.end()
            return "char", int(m.group(), 8), None
        if e.isascii() and e.isalnum():
            raise self.fail("escape \\%s is not supported" % e)
        self.i = at + 2
        return "char", ord(e), None

    def _hex(self, e: str, at: int) -> int:
        p = self.p
        if p.startswith("{", at + 2) and (e == "x" or self.tk):
            end = p.find("}", at + 3)
            digits, self.i = p[at + 3:end if end >= 0 else at + 3], end + 1
        else:
            n = {"x": 2, "u": 4, "U": 8}[e]
            digits, self.i = p[at + 2:at + 2 + n], at + 2 + n
            if len(digits) != n:
                digits = ""
        if not digits or not all(c in "0123456789abcdefABCDEF" for c in digits) \
                or int(digits, 16) > store.MAX_CP:
            raise self.fail("bad \\%s escape" % e, at)
        return int(digits, 16)

    def property(self, name: str, negated: bool, folded: bool, at: int, in_class: bool):
        key = name.strip()
        neg = negated
        if key.startswith("^"):
            neg, key = not neg, key[1:]
        const = {"any": store.FULL, "ascii": _ASCII}.get(loose(key))
        if const is not None:
            r = sets.fold(self.fam, const) if folded and self.tk else const
            return (sets.negate(self.fam, r) if neg else r), None
        hit = sets.resolve_property(self.fam, key)
        if hit is None:
            raise self.fail(f"unknown property \\{'P' if negated else 'p'}{{{name}}} (not one "
                            "the engine accepts with a pinned meaning)", at)
        atom, extra_neg = hit
        neg ^= extra_neg
        py = ("\\P{%s}" if neg else "\\p{%s}") % atom if atom not in ESCAPES else None
        return sets.atom_set(self.fam, atom, negated=neg, folded=folded, in_class=in_class), py


def pin_pattern(pattern: str, family: str) -> str:
    """``pattern`` rewritten so that any ``regex`` release matches what ``family``'s engine does.

    >>> pin_pattern(r"(?i:k)+$", "tiktoken")
    '(?:[Kk\\\\u212a])+\\\\Z'

    """
    pin = _Pin(pattern, family)
    pin.seq(_Flags())
    if pin.i < len(pattern):
        raise pin.fail("unbalanced ')'")
    return "".join(pin.out)


def fast_text(pattern: str, family: str) -> "tuple[str, bool]":
    """``compile_pinned``'s text for the installed ``regex`` and whether it needs V1 mode (big
    classes spelled as the release's own properties plus explicit corrections, see
    ``installed.py``; the first call measures each distinct class, ~20-120 ms each)."""
    pin = _Pin(pattern, family, fast=True)
    pin.seq(_Flags())
    if pin.i < len(pattern):
        raise pin.fail("unbalanced ')'")
    # V1 only changes what the emitted text relies on: set operations inside brackets (pinned
    # text has no inline flags, no case-insensitivity and escapes every operator character)
    return "".join(pin.out), pin.v1


def ascii_text(pattern: str, family: str) -> str:
    """``pin_pattern`` for text that is all ASCII: the same rewrite with every class cut to its
    ASCII members (the pinned membership of an ASCII character, so on ASCII text the two match
    alike), small enough for Python's ``re``: 4x faster than the pinned big classes on short
    English or code (a 200-character text: ~8 us, against ~35).

    >>> ascii_text(r"\\p{L}+|\\s", "tiktoken")
    '[A-Za-z]+|[\\\\x09-\\\\x0d\\\\x20]'
    """
    pin = _Pin(pattern, family, ascii_only=True)
    pin.seq(_Flags())
    if pin.i < len(pattern):
        raise pin.fail("unbalanced ')'")
    return "".join(pin.out)


def single_set(atom: str, family: str):
    """The set one atom matches: ``[\\p{L}--\\p{Lu}]``, ``\\W``, ``(?i:k)``, ``x``..."""
    flags = _Flags()
    m = re.fullmatch(r"\(\?i:(.*)\)", atom, re.S)
    pin = _Pin(atom, family)
    if m:
        flags, pin.p = _Flags(i=True), m.group(1)
    if not pin.p:
        raise pin.fail("empty atom")
    kind = "set"
    if pin.p[0] == "[":
        r = pin.klass(flags, top=True)[0]
    elif pin.p[0] == "\\":
        kind, r, _ = pin.escape_item(flags)
    else:
        kind, r, pin.i = "char", ord(pin.p[0]), 1
    if kind == "char":  # a literal: under (?i) its case-fold orbit
        if flags.i:
            pin.check_multi(r)
        r = store.from_code_points(sets.orbit(family, r) if flags.i else [r])
    if pin.i != len(pin.p):
        raise pin.fail("not a single-character atom")
    return r
