"""``compile_pinned``: a pinned pattern compiled for the installed ``regex``, fast, and cached.

Its text depends on the installed release (``installed.py`` measures what the release's own
``\\p{L}`` matches, ~20-120 ms per distinct class: ~0.2 s for o200k's pattern), so the text is
kept in the cache (``$GPUTOK_CACHE/pinned/``) under a key made of everything it is derived
from: the pattern, the family, the ``regex`` version, the family's data file and the source of
the modules that write it. A process after the first on a machine only compiles.
"""

from __future__ import annotations

import functools
import hashlib
import re as _re
import json
from pathlib import Path

import regex

from .._cache import cache_dir, write_atomic
from . import store
from .pattern import ascii_text, fast_text

__all__ = ["compile_pinned", "compile_ascii"]

_FORMAT = 1
_SOURCES = ("pattern.py", "installed.py", "emit.py", "catalog.py", "sets.py", "store.py",
            "compiled.py")


@functools.lru_cache(maxsize=None)
def _inputs_digest(family: str) -> str:
    return store.derived_digest(family, f"{_FORMAT}|{regex.__version__}|{family}",
                                _SOURCES).hexdigest()


def cache_path(pattern: str, family: str, form: str = "pinned") -> str:
    """Where the compiled text of ``pattern`` for ``family`` is kept on this machine (``form``:
    "pinned", or "ascii" for ``compile_ascii``'s text)."""
    key = hashlib.sha256(f"{_inputs_digest(family)}|{pattern}".encode()).hexdigest()[:40]
    return str(Path(cache_dir("pinned")) / (f"{key}.json" if form == "pinned"
                                            else f"{key}.{form}.json"))


def _read(path: str, pattern: str, family: str) -> "tuple[str, bool] | None":
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        text, v1 = d["text"], d["v1"]
        ok = (d["pattern"] == pattern and d["family"] == family and isinstance(v1, bool)
              and hashlib.sha256(text.encode()).hexdigest() == d["sha256"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return (text, v1) if ok else None


@functools.lru_cache(maxsize=64)
def compile_pinned(pattern: str, family: str) -> "regex.Pattern[str]":
    """The pinned pattern compiled for the installed ``regex``, cached (64 patterns per process,
    every pattern's text on disk).

    Matches exactly what ``regex.compile(pin_pattern(pattern, family))`` matches, but spells big
    classes with the installed release's own properties plus explicit corrections (see
    ``installed.py``): 6-15x faster than explicit ranges, ~0.6x the unpinned pattern.

    >>> compile_pinned(r"\\p{L}+|\\s+", "tiktoken").findall("héllo wörld")
    ['héllo', ' ', 'wörld']
    """
    text, v1 = _cached(pattern, family, "pinned", fast_text)
    return regex.compile(text, regex.V1 if v1 else regex.V0)


def _cached(pattern: str, family: str, form: str, make) -> "tuple[str, bool]":
    """The text of ``form`` for ``pattern`` from the cache, else ``make(pattern, family)``
    (text, v1) written there."""
    path = cache_path(pattern, family, form)
    got = _read(path, pattern, family)
    if got is None:  # missing, damaged or foreign: write it again
        got = make(pattern, family)
        write_atomic(path, json.dumps({
            "pattern": pattern, "family": family, "text": got[0], "v1": got[1],
            "sha256": hashlib.sha256(got[0].encode()).hexdigest()}).encode())
    return got


def _ascii_form(pattern: str, family: str) -> "tuple[str, bool]":
    return ascii_text(pattern, family), False


@functools.lru_cache(maxsize=64)
def compile_ascii(pattern: str, family: str):
    """The pinned pattern for text that is all ASCII (``pattern.ascii_text``: every class cut to
    its ASCII members), compiled with Python's ``re`` (2x faster than ``regex`` on it), or with
    ``regex`` where ``re`` lacks a construct (possessive quantifiers before Python 3.11).
    ``findall`` on an ASCII text gives exactly what ``compile_pinned(...).findall`` gives.

    >>> compile_ascii(r"\\p{L}+|\\p{N}", "tiktoken").findall("ab1")
    ['ab', '1']

    Its text is kept on disk beside the pinned one (``cache_path(..., "ascii")``): building it
    walks the family's class data (~5-8 ms), most of a fresh process's first short encode (o200k:
    10.8 -> 1.4 ms) and of its first long text's set-up.
    """
    text, _ = _cached(pattern, family, "ascii", _ascii_form)
    try:
        return _re.compile(text)
    except _re.error:
        return regex.compile(text)
