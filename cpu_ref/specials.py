"""The special-token contract (tiktoken's), in one place.

A special token is a control string like ``<|endoftext|>``. Text from users must never become a
control token by accident, so ``encode`` refuses text that *contains* a special token unless the
caller said what to do with it:

* ``allowed_special``: the specials that, when they occur in the text, become their control ids.
  ``"all"`` means every special of the encoding.
* ``disallowed_special``: the specials whose occurrence raises ``ValueError``. The default ``"all"``
  means "every special not allowed". ``()`` turns the check off: such text is then encoded as
  ordinary text (``encode_ordinary`` is exactly that).

Specials that are neither allowed nor disallowed are encoded as ordinary text.
"""

from __future__ import annotations

import functools
from typing import AbstractSet, Collection

import regex


def normalize_special_args(
    all_specials: AbstractSet[str],
    allowed_special: "str | AbstractSet[str]",
    disallowed_special: "str | Collection[str]",
) -> tuple[frozenset[str], frozenset[str]]:
    """Resolve the two arguments to concrete sets: (allowed, disallowed)."""
    if allowed_special == "all":
        allowed = frozenset(all_specials)
    else:
        allowed = frozenset(allowed_special)
    if disallowed_special == "all":
        disallowed = frozenset(all_specials) - allowed
    else:
        disallowed = frozenset(disallowed_special)
    return allowed, disallowed


@functools.lru_cache(maxsize=256)
def special_regex(tokens: frozenset[str]) -> "regex.Pattern[str] | None":
    """An alternation that finds any of ``tokens``; longer tokens first so that a token which is
    a prefix of another never shadows it (the oracles agree on every vocabulary we ship).
    Cached: ``tokens`` must be a frozenset."""
    if not tokens:
        return None
    alts = sorted(tokens, key=lambda t: (-len(t), t))
    return regex.compile("|".join(regex.escape(t) for t in alts))


class DisallowedSpecialError(ValueError):
    """Text contains a disallowed special token; ``.token`` names it."""

    def __init__(self, message: str, token: str):
        super().__init__(message)
        self.token = token


def disallowed_error(token: str) -> DisallowedSpecialError:
    """The error for text that contains a disallowed special token: names it and gives the fix."""
    return DisallowedSpecialError(
        f"the text contains the special token {token!r}, which is disallowed by default so that "
        f"user text cannot become a control token.\n"
        f"  - to encode it as the special token: encode(text, allowed_special={{{token!r}}})\n"
        f"  - to encode it as plain text: encode(text, disallowed_special=())  "
        f"(or use encode_ordinary)\n"
        f"  - to plain-text only this one: "
        f"encode(text, disallowed_special=enc.special_tokens_set - {{{token!r}}})", token
    )


def check_disallowed(text: str, disallowed: frozenset[str]) -> None:
    """Raise ``disallowed_error`` for the first disallowed special token found in ``text``."""
    pat = special_regex(frozenset(disallowed))
    if pat is not None:
        m = pat.search(text)
        if m is not None:
            raise disallowed_error(m.group())


def split_specials(text: str, allowed: frozenset[str]) -> list[tuple[str, bool]]:
    """Cut ``text`` at every occurrence of an allowed special token.

    Returns ``[(segment, is_special), ...]`` in order. Ordinary segments are pre-tokenized
    independently: the regex never looks across a special token (tiktoken does the same, so a
    lookahead like ``\\s+(?!\\S)`` sees the end of the segment, not the special's ``<``).
    """
    pat = special_regex(frozenset(allowed))
    if pat is None:
        return [(text, False)] if text else []
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in pat.finditer(text):
        if m.start() > pos:
            out.append((text[pos : m.start()], False))
        out.append((m.group(), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


_LEADING_WS = regex.compile(r"^\s+")
_TRAILING_WS = regex.compile(r"\s+$")


def strip_around(parts: list[tuple[str, bool]], lstrip: "AbstractSet[str]",
                 rstrip: "AbstractSet[str]") -> list[tuple[str, bool]]:
    """HF added-token options on ``split_specials`` output: a token in ``lstrip`` swallows the
    whitespace before it, one in ``rstrip`` the whitespace after it (Unicode White_Space, as
    Rust's ``char::is_whitespace``; not Python's ``str.isspace``, which adds U+001C..U+001F).
    Segments that become empty are dropped."""
    out: list[tuple[str, bool]] = []
    for i, (seg, is_tok) in enumerate(parts):
        if not is_tok:
            if i + 1 < len(parts) and parts[i + 1][1] and parts[i + 1][0] in lstrip:
                seg = _TRAILING_WS.sub("", seg)
            if i > 0 and parts[i - 1][1] and parts[i - 1][0] in rstrip:
                seg = _LEADING_WS.sub("", seg)
            if not seg:
                continue
        out.append((seg, is_tok))
    return out


def fix_surrogates(text: str) -> str:
    """tiktoken's handling of strings that are not valid Unicode scalar sequences.

    A Python str may hold surrogate code points, which have no UTF-8 encoding. tiktoken first
    round-trips through UTF-16 with ``surrogatepass`` -- so a *pair* of surrogates becomes the
    astral character it encodes -- and then replaces each remaining lone surrogate with U+FFFD.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
