"""The special-token contract (tiktoken's) and the cutting of text at special and added tokens.

A special token is a control string such as ``<|endoftext|>``. User text must never become a
control token by accident, so ``encode`` refuses text containing one unless the caller said what
to do (``allowed_special`` / ``disallowed_special``, resolved once by ``special_args``).
Exactly as tiktoken: a name in ``allowed_special`` that is not a special token of the encoding
changes nothing (the text stays plain text); every string in an explicit ``disallowed_special``
is searched for, special token or not.

HF added tokens that are not ``special`` are vocabulary: they are always cut out of the text.
``lstrip`` / ``rstrip`` tokens swallow the whitespace before / after them (Unicode White_Space,
as Rust's ``char::is_whitespace``; not ``str.isspace``, which adds U+001C..U+001F).
"""

from __future__ import annotations

import functools
import operator
import re
from typing import AbstractSet, Callable, Collection

#: Unicode White_Space (stable since Unicode 6.3): what HF's lstrip/rstrip remove
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
                        "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WS_CHARS = "".join(sorted(WHITE_SPACE))


class DisallowedSpecialError(ValueError):
    """Text contains a disallowed special token; ``.token`` names it (``.doc``: the document
    index, in batch calls)."""

    def __init__(self, message: str, token: str, doc: "int | None" = None):
        super().__init__(message)
        self.token = token
        self.doc = doc


def special_args(specials: AbstractSet[str], allowed_special: "str | AbstractSet[str]",
                 disallowed_special: "str | Collection[str]") -> tuple[frozenset, frozenset]:
    """Resolve ``encode``'s two arguments to ``(allowed, disallowed)`` sets of strings.

    ``allowed`` keeps only real special tokens (tiktoken ignores other names); ``disallowed``
    is every special not allowed for ``"all"``, else the strings given.

    >>> special_args({"<|endoftext|>"}, "all", "all")
    (frozenset({'<|endoftext|>'}), frozenset())
    """
    specials = specials if isinstance(specials, frozenset) else frozenset(specials)
    if isinstance(allowed_special, str):
        if allowed_special != "all":
            raise TypeError(f"allowed_special must be 'all' or a set of strings, not "
                            f"{allowed_special!r}")
        allowed = specials
    else:
        allowed = frozenset(allowed_special) & specials if allowed_special else frozenset()
    if isinstance(disallowed_special, str):
        if disallowed_special != "all":
            raise TypeError(f"disallowed_special must be 'all' or a collection of strings, not "
                            f"{disallowed_special!r}")
        # no copy when nothing is allowed: the same frozenset keeps its cached hash
        disallowed = specials - allowed if allowed else specials
    else:
        disallowed = frozenset(disallowed_special)
    return allowed, disallowed


@functools.lru_cache(maxsize=256)
def token_regex(tokens: frozenset) -> "re.Pattern[str] | None":
    """The leftmost-longest search for ``tokens``, so that a token which is a prefix of another
    never shadows it (``trie_pattern``). Tokens are literal strings: ``re`` suffices (no
    Unicode classes)."""
    if not tokens:
        return None
    return re.compile(trie_pattern(tokens))


def trie_pattern(tokens):
    """A regex (str, or bytes for bytes tokens) matching exactly the literal ``tokens``, the
    longest one at a position: their trie, each node an alternation of its edges, optional
    where a token ends there (greedy: a longer token is tried first). It matches what the
    alternation of the tokens longest first matches, but ``re`` tries one edge per character at
    a node instead of every token at every position (748 Mistral control tokens in 4 KB of
    text: 460 -> 65 us).

    >>> trie_pattern(["ab", "abc", "b"])
    '(?:ab(?:c)?|b)'
    """
    empty = next(iter(tokens))[:0]
    group, alt, close, opt = ((x if isinstance(empty, str) else x.encode())
                              for x in ("(?:", "|", ")", "?"))
    trie: dict = {}
    for t in tokens:
        node = trie
        for k in range(len(t)):
            node = node.setdefault(t[k:k + 1], {})
        node[None] = True

    def emit(node) -> "str | bytes":
        edges = [re.escape(ch) + emit(node[ch]) for ch in sorted(k for k in node if k is not None)]
        if not edges:
            return empty
        if None in node:  # a token ends here: the longer ones are optional, tried first
            return group + alt.join(edges) + close + opt
        return edges[0] if len(edges) == 1 else group + alt.join(edges) + close

    return emit(trie)


def shell_quote(token: str) -> str:
    """``token`` quoted for a POSIX shell (for hints printed by the CLI).

    >>> shell_quote("<|endoftext|>")
    "'<|endoftext|>'"
    """
    import shlex

    return shlex.quote(token)


def disallowed_error(token: str, doc: "int | None" = None) -> DisallowedSpecialError:
    """The error for text containing a disallowed special token: names it and gives the fixes
    as code to paste."""
    where = "" if doc is None else f"document {doc}: "
    return DisallowedSpecialError(
        f"{where}the text contains the special token {token!r}, which is disallowed by default "
        f"so that user text cannot become a control token.\n"
        f"  - to encode it as the special token: encode(text, allowed_special={{{token!r}}})\n"
        f"  - to encode it as plain text: encode(text, disallowed_special=())  "
        f"(or use encode_ordinary)\n"
        f"  - to plain-text only this one: "
        f"encode(text, disallowed_special=enc.special_tokens_set - {{{token!r}}})", token, doc)


@functools.lru_cache(maxsize=256)
def first_chars(tokens: frozenset) -> "re.Pattern[str] | None":
    """A search for any character a token starts with: a text without one holds no token, and
    the full search (``token_regex``: ~10 ms to compile for Mistral's 748 control tokens, once
    per process) is neither compiled nor run."""
    if not tokens or not all(isinstance(t, str) and t for t in tokens):
        return None
    return re.compile("[" + "".join(re.escape(c) for c in sorted({t[0] for t in tokens}))
                      + "]")


@functools.lru_cache(maxsize=64)
def may_hold(tokens: frozenset) -> "Callable[[str], bool]":
    """A test of whether a text may hold one of ``tokens``: whether it holds a character one
    starts with, by ``in`` (``count`` for one) for each of up to four such characters (memchr:
    ~15 us a MB, where ``first_chars``' class search took ~540, and a two-character ``in``
    ~870), else by ``first_chars``. False (0) means no token is there; true, that the full
    search must look."""
    firsts = sorted({t[0] for t in tokens}) \
        if tokens and all(isinstance(t, str) and t for t in tokens) else None
    if firsts is None:
        return lambda text: True
    if len(firsts) > 4:
        first = first_chars(tokens).search
        return lambda text: first(text) is not None
    if len(firsts) == 1:  # (tiktoken's '<': a C-level call, no Python frame for a short text)
        return operator.methodcaller("count", firsts[0])
    firsts = tuple(firsts)

    def test(text: str) -> bool:
        for c in firsts:
            if c in text:
                return True
        return False
    return test


def check_disallowed(text: str, disallowed: frozenset, doc: "int | None" = None) -> None:
    """Raise ``disallowed_error`` for the first disallowed token in ``text``."""
    if not disallowed:
        return
    if not may_hold(disallowed if isinstance(disallowed, frozenset)
                    else frozenset(disallowed))(text):
        return
    pat = token_regex(disallowed)
    if pat is not None:
        m = pat.search(text)
        if m is not None:
            raise disallowed_error(m.group(), doc)


def split_text(text: str, active: frozenset, lstrip: AbstractSet[str] = frozenset(),
               rstrip: AbstractSet[str] = frozenset()) -> list[tuple[str, bool]]:
    """Cut ``text`` at every occurrence of an ``active`` token: ``[(part, is_token), ...]``.

    Plain parts are pre-tokenized on their own: a regex never looks across a token (a
    lookahead like ``\\s+(?!\\S)`` sees the end of the part, as in tiktoken and HF). With HF's
    ``lstrip``/``rstrip``, the whitespace next to such a token is dropped, and parts left empty
    are dropped.

    >>> split_text("a<|x|>b", frozenset({"<|x|>"}))
    [('a', False), ('<|x|>', True), ('b', False)]
    """
    pat = token_regex(active)
    if pat is None:
        return [(text, False)] if text else []
    out: list = []
    pos = 0
    strip_next = False  # the previous token rstrips
    for m in pat.finditer(text):
        tok = m.group()
        seg = text[pos:m.start()]
        if strip_next:
            seg = seg.lstrip(_WS_CHARS)
        if tok in lstrip:
            seg = seg.rstrip(_WS_CHARS)
        if seg:
            out.append((seg, False))
        out.append((tok, True))
        strip_next = tok in rstrip
        pos = m.end()
    seg = text[pos:]
    if strip_next:
        seg = seg.lstrip(_WS_CHARS)
    if seg:
        out.append((seg, False))
    return out
