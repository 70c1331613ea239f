"""Pre-tokenizer patterns of the named encodings, and the one way cpu_ref runs them.

The oracle libraries run these patterns with their own engines: tiktoken uses ``fancy-regex``
(Rust), Hugging Face ``tokenizers`` uses Oniguruma. We use Python's ``regex`` module, which
supports the same syntax we need (``\\p{L}``, possessive quantifiers, ``(?i:...)``, lookahead).

Known engine differences, and what we do about them:

* anchors: in Rust's engine ``$`` (no multiline flag) matches only at the very end of the text;
  in Python it also matches just before a final ``"\\n"``, and in Oniguruma (Ruby syntax) before
  every ``"\\n"``; ``^`` is the start of the text in Rust, also after every ``"\\n"`` but the last
  in Oniguruma. Each is rewritten to the oracle's meaning. (In the named patterns ``$`` only
  follows a possessive ``\\s++``, which has already eaten any final newline; DeepSeek's
  ``\\s+$`` in ``gguf_pre`` is where the line anchor matters: ``"a  \\n b"`` gives ``"  "``.)
* Unicode tables: each engine ships the Unicode Character Database of its build (tiktoken's Rust
  ``regex`` crate and HF's Oniguruma are Unicode 16.0; a recent Python ``regex`` is 17.0, where
  17,560 more code points are letters, digits or marks). The rule is the oracle's table, so every
  pattern is rewritten before compiling (``pin_pattern``): each property escape, ``\\s``, class
  and case fold becomes the explicit code point set the oracle's engine matches, read from the
  sets measured through the oracles themselves at every code point (``cpu_ref.unicode``).
  ``family`` names the engine: ``"tiktoken"`` or ``"hf"``.
"""

from __future__ import annotations

import functools

import regex

from . import unicode

# GPT-2 / r50k_base / p50k_base. This is tiktoken's faster but equivalent spelling of the
# original GPT-2 pattern  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

# cl100k_base: contractions case-insensitive, letters may take one leading non-letter, digits in
# groups of at most three, punctuation runs absorb trailing newlines.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

# o200k_base: words split on case (an upper-case run followed by lower-case letters), marks
# (\p{M}) travel with letters, contractions attach to the word, "/" joins trailing newlines.
_O200K_LEAD = r"[^\r\n\p{L}\p{N}]"  # one leading character: not a letter, digit or line break
_O200K_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"  # letters that may open a word's upper run
_O200K_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"  # letters of its lower-case part
_O200K_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
O200K_PATTERN = "|".join([
    f"{_O200K_LEAD}?{_O200K_UPPER}*{_O200K_LOWER}+{_O200K_CONTRACTION}?",  # "Hello", " iPhone"
    f"{_O200K_LEAD}?{_O200K_UPPER}+{_O200K_LOWER}*{_O200K_CONTRACTION}?",  # "NASA", "HTTP"
    r"\p{N}{1,3}",  # digits, three at most
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",  # punctuation with the line breaks and "/" after it
    r"\s*[\r\n]+",  # line breaks, with the spaces before them
    r"\s+(?!\S)",  # spaces that no word follows (the last space before a word goes with it)
    r"\s+",
])

# Short names accepted wherever a pattern is asked for (the trainer, the CLI).
NAMED_PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "r50k": GPT2_PATTERN,
    "p50k": GPT2_PATTERN,
    "cl100k": CL100K_PATTERN,
    "o200k": O200K_PATTERN,
}


def resolve_pattern(name_or_regex: str) -> str:
    """A short name from NAMED_PATTERNS, or a regex returned unchanged."""
    return NAMED_PATTERNS.get(name_or_regex, name_or_regex)


# ------------------------------------------------------------------- pinning a pattern
# The rewrite below states what each piece of a pattern means in the oracle's engine. It covers
# the syntax the spec's patterns use (every named pattern, the GGUF pre-tokenizers, the Split
# regexes of the HF files we test); anything else raises ValueError naming it, rather than
# guessing what an engine would do.

_CONTROL_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_QUANTIFIER = regex.compile(r"\{\d+(?:,\d*)?\}")
_GROUP_OPENERS = ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")


def _char(cp: int) -> str:
    """One code point as pattern text that means that code point alone, inside or outside a
    class: ASCII letters and digits as they are, everything else as a \\U escape."""
    c = chr(cp)
    return c if c.isascii() and c.isalnum() else "\\U%08x" % cp


def _class(ranges) -> str:
    """A set of code points as one bracket class (a class of nothing matches nothing)."""
    if not ranges:
        return "(?!)"
    return "[" + "".join(_char(a) if a == b else _char(a) + "-" + _char(b)
                         for a, b in ranges) + "]"


class _Pinner:
    """One left-to-right pass over a pattern, writing the pinned pattern to ``out``."""

    def __init__(self, pattern: str, family: str):
        if family not in unicode.FAMILIES:
            raise ValueError(f"unknown pattern family {family!r}; known: tiktoken, hf")
        self.pat, self.family, self.i, self.out = pattern, family, 0, []
        self.folded_run = ""  # the literals just written under (?i), for Oniguruma's check

    def fail(self, what: str) -> ValueError:
        return ValueError(f"pattern {self.pat!r} ({self.family}): {what} at offset {self.i} is "
                          "not stated by the spec")

    def run(self) -> str:
        self.sequence(fold=False)
        if self.i < len(self.pat):
            raise self.fail("an unbalanced ')'")
        return "".join(self.out)

    def sequence(self, fold: bool) -> None:
        """Pieces up to the ``)`` that closes the current group (not consumed), or the end."""
        p = self.pat
        while self.i < len(p) and p[self.i] != ")":
            c = p[self.i]
            if c == "(":
                self.group(fold)
            elif c == "[":
                self.out.append(_class(self.bracket(fold)))
                self.folded_run = ""
            elif c == "\\":
                self.escape(fold)
            elif c == "$":
                # tiktoken: the end of the text (Rust's $ without the m flag; Python's $ would
                # also match before a final newline). Oniguruma always reads Ruby's line anchor:
                # before any "\n", or at the end
                self.out.append("\\Z" if self.family == "tiktoken" else "(?=\\n|\\Z)")
                self.i += 1
            elif c == "^":
                # tiktoken: the start of the text; Oniguruma: the start, or after any "\n"
                # that is not the last character
                self.out.append("\\A" if self.family == "tiktoken"
                                else "(?:\\A|(?<=\\n)(?!\\Z))")
                self.i += 1
            elif c == "{" and _QUANTIFIER.match(p, self.i):
                m = _QUANTIFIER.match(p, self.i)
                self.out.append(m.group())
                self.i = m.end()
            elif c in "|*+?.":
                # alternation, quantifiers (possessive "++" and lazy "+?" are read the same way
                # by all three engines) and "." (any character but "\n" in all three)
                self.out.append(c)
                self.i += 1
                self.folded_run = ""
            else:
                self.literal(ord(c), fold)
                self.i += 1

    def group(self, fold: bool) -> None:
        p, at = self.pat, self.i
        opener = next((o for o in _GROUP_OPENERS if p.startswith(o, at)), None)
        if opener is not None:
            self.i = at + len(opener)
        elif p.startswith("(?i:", at):  # case-insensitive inside: written out as classes
            opener, fold, self.i = "(?:", True, at + 4
        elif p.startswith("(?", at):
            raise self.fail("this group syntax (only (?:, (?i:, look-arounds and (?> are)")
        else:
            opener, self.i = "(", at + 1
        self.out.append(opener)
        self.folded_run = ""
        self.sequence(fold)
        if self.i >= len(p):
            raise self.fail("a group without its ')'")
        self.out.append(")")
        self.i += 1
        self.folded_run = ""

    def literal(self, cp: int, fold: bool) -> None:
        if not fold:
            self.out.append(_char(cp))
            return
        # Under (?i) a character matches its case-fold orbit. Oniguruma also lets one character
        # match several ("ß" matches "ss"): the spec refuses those spots instead of modelling it
        if unicode.contains(unicode.multi_fold_chars(self.family), cp):
            raise self.fail(f"(?i) on {chr(cp)!r} (it matches several characters in Oniguruma)")
        self.folded_run += chr(cp).lower()
        for target in unicode.multi_folds(self.family):
            if self.folded_run.endswith(target.lower()):
                raise self.fail(f"(?i) on {target!r} (matched by one character in Oniguruma)")
        orbit = unicode.fold_orbit(self.family, cp)
        self.out.append(_char(cp) if len(orbit) == 1 else
                        _class(unicode.union(*[((c, c),) for c in orbit])))

    def escape(self, fold: bool) -> None:
        p, at = self.pat, self.i
        e = p[at + 1:at + 2]
        if e in ("A", "z"):  # start / very end of the text in every engine
            self.out.append("\\A" if e == "A" else "\\Z")
            self.i += 2
            return
        kind, value = self.escape_item(in_class=False, fold=fold)
        if kind == "char":
            self.literal(value, fold)
        else:
            self.out.append(_class(value))
            self.folded_run = ""

    def escape_item(self, in_class: bool, fold: bool):
        """The escape at ``self.i``: ``("char", code point)`` or ``("set", ranges)``."""
        p, at = self.pat, self.i
        if at + 1 >= len(p):
            raise self.fail("a trailing backslash")
        e = p[at + 1]
        if e in "pP" and p.startswith("{", at + 2):
            end = p.find("}", at + 3)
            if end < 0:
                raise self.fail("an unterminated \\p{")
            name, negated = p[at + 3:end], e == "P"
            if name.startswith("^"):
                name, negated = name[1:], not negated
            if fold:
                # the engines disagree here (the Rust crate folds \p{Lu} to every letter with a
                # case; Oniguruma does not fold a property outside brackets)
                raise self.fail("\\p{..} under (?i)")
            self.i = end + 1
            s = unicode.property_set(self.family, name)
            return "set", unicode.negate(self.family, s) if negated else s
        if e in "sSdDwW":
            if fold:
                raise self.fail(f"\\{e} under (?i)")
            self.i = at + 2
            s = unicode.escape_set(self.family, e.lower(), in_class)
            return "set", unicode.negate(self.family, s) if e.isupper() else s
        if e in _CONTROL_ESCAPES:
            self.i = at + 2
            return "char", _CONTROL_ESCAPES[e]
        if e in _HEX_DIGITS:
            digits = p[at + 2:at + 2 + _HEX_DIGITS[e]]
            if len(digits) != _HEX_DIGITS[e] or not all(c in "0123456789abcdefABCDEF"
                                                          for c in digits):
                raise self.fail(f"\\{e} without {_HEX_DIGITS[e]} hex digits")
            self.i = at + 2 + len(digits)
            return "char", int(digits, 16)
        if e.isascii() and e.isalnum():  # \b, \Z, back-references, \pL, \h...
            raise self.fail(f"the escape \\{e}")
        self.i = at + 2  # an escaped punctuation character, or an escaped space, is itself
        return "char", ord(e)

    def bracket(self, fold: bool):
        """The set of the bracket class at ``self.i`` (consumed)."""
        p, at = self.pat, self.i
        self.i += 1
        negated = p.startswith("^", self.i)
        self.i += negated
        items = []
        while True:
            if self.i >= len(p):
                raise self.fail("a bracket class without its ']'")
            c = p[self.i]
            if c == "]" and self.i > at + 1 + negated:
                self.i += 1
                break
            if c == "[" or p.startswith("&&", self.i):
                raise self.fail("a nested class or a set operation")
            kind, lo = (self.escape_item(in_class=True, fold=fold) if c == "\\"
                        else ("char", ord(c)))
            if c != "\\":
                self.i += 1
            if kind == "set":
                items.append(lo)
                continue
            hi = lo
            # "a-z" is a range; a "-" that ends the class ("-]") is itself
            if p.startswith("-", self.i) and not p.startswith("-]", self.i):
                self.i += 1
                if self.i >= len(p):
                    raise self.fail("a bracket class without its ']'")
                if p[self.i] == "\\":
                    kind, hi = self.escape_item(in_class=True, fold=fold)
                else:
                    kind, hi = "char", ord(p[self.i])
                    self.i += 1
                if kind != "char" or hi < lo:
                    raise self.fail("a bad range in a bracket class")
            items.append(((lo, hi),))
        s = unicode.union(*items)
        if fold:  # every member's case-fold orbit (only literal members get here)
            s = unicode.union(s, *[((o, o),) for a, b in s for cp in range(a, b + 1)
                                   for o in unicode.fold_orbit(self.family, cp)])
        return unicode.negate(self.family, s) if negated else s


def pin_pattern(pattern: str, family: str = "tiktoken") -> str:
    """``pattern`` rewritten into one that Python's ``regex`` runs as ``family``'s engine does:
    every property escape, ``\\s``, case fold and bracket class becomes the explicit code point
    class the oracle matches (from its measured tables, ``cpu_ref.unicode``), anchors are the
    engine's, and the rest (groups, quantifiers, alternation) is copied.

    >>> pin_pattern(r"(?i:k)$", "tiktoken")
    '(?:[Kk\\\\U0000212a])\\\\Z'
    """
    return _Pinner(pattern, family).run()


@functools.lru_cache(maxsize=64)
def compile_pattern(pat: str, family: str = "tiktoken") -> "regex.Pattern[str]":
    """Compile a pre-tokenizer pattern with the oracle's semantics (see module docstring)."""
    return regex.compile(pin_pattern(pat, family))


def split(pat: str, text: str) -> list[str]:
    """The pieces of ``text``: every leftmost-first match of ``pat``, in order.

    tiktoken keeps only the matches (its patterns match every character anyway); HF's ``Split``
    with ``behavior="isolated"`` also keeps the unmatched gaps as pieces, see ``split_isolated``.
    """
    return compile_pattern(pat).findall(text)


def split_isolated(pat: str, text: str, invert: bool = False, family: str = "hf") -> list[str]:
    """HF ``Split(pattern, behavior="isolated", invert)``: matches and gaps are all pieces.

    With ``invert=True`` the pattern describes the separators' complement: what it matches are
    the gaps. Empty pieces are dropped (HF drops them too).
    """
    # every match's start and end cut the text; a piece is what lies between two cuts in a row
    cuts = {0, len(text)}
    for m in compile_pattern(pat, family).finditer(text):
        cuts.update(m.span())
    cuts = sorted(cuts)
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if a < b]
