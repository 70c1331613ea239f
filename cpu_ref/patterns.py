"""Pre-tokenizer patterns of the named encodings, and the one way cpu_ref runs them.

The oracle libraries run these patterns with their own engines: tiktoken uses ``fancy-regex``
(Rust), Hugging Face ``tokenizers`` uses Oniguruma. We use Python's ``regex`` module, which
supports the same syntax we need (``\\p{L}``, possessive quantifiers, ``(?i:...)``, lookahead).

Known engine differences, and what we do about them:

* ``$``: in Rust's engine ``$`` (no multiline flag) matches only at the very end of the text; in
  Python it also matches just before a final ``"\\n"``. We rewrite a bare ``$`` to ``\\Z`` so the
  meaning is the oracle's. (In the patterns below ``$`` only follows a possessive ``\\s++``, which
  has already eaten any final newline, so the rewrite changes nothing today; it protects user
  patterns.)
* Unicode tables: each engine ships the Unicode Character Database of its build (tiktoken's Rust
  ``regex`` crate and HF's Oniguruma are Unicode 16.0; a recent Python ``regex`` is 17.0, where
  17,560 more code points are letters, digits or marks). The rule is the oracle's table, so every
  pattern is rewritten before compiling: each property escape, class and case fold becomes the
  explicit code point set the oracle's engine matches (``gputok.unicode.pin_pattern``; the sets
  were measured through the oracles themselves at every code point and ship as data). ``family``
  names the engine: ``"tiktoken"`` or ``"hf"``.
"""

from __future__ import annotations

import functools

import regex

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
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

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


def _oracle_dollar(pat: str) -> str:
    """Rewrite unescaped, out-of-class ``$`` to ``\\Z`` (Rust's end-of-text meaning)."""
    out = []
    i, in_class = 0, False
    while i < len(pat):
        c = pat[i]
        if c == "\\":
            out.append(pat[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=64)
def compile_pattern(pat: str, family: str = "tiktoken") -> "regex.Pattern[str]":
    """Compile a pre-tokenizer pattern with the oracle's semantics (see module docstring)."""
    from gputok.unicode import pin_pattern  # the oracles' Unicode tables, as data

    return regex.compile(pin_pattern(_oracle_dollar(pat), family))


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
    pieces: list[str] = []
    pos = 0
    for m in compile_pattern(pat, family).finditer(text):
        if m.start() > pos:
            pieces.append(text[pos : m.start()])
        if m.end() > m.start():
            pieces.append(m.group())
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces
