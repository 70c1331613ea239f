"""The pre-tokenizer's per-code-point class flags, from a family's pinned data: ``class_flags``.

``gputok/stages/scan.py`` classifies every code point with one table lookup; the table's bits
are defined here (same values scan.py has always used) and filled from the oracle's own sets,
so the vectorised scanner gives the oracle's pieces whatever ``regex`` release is installed.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import numpy as np

from .._cache import cache_dir, map_arrays, write_arrays
from . import store
from .atoms import ranges

__all__ = ["F_L", "F_N", "F_S", "F_NL", "F_UP", "F_LO", "F_M", "PROPERTIES", "FOLD_LETTERS",
           "class_flags"]

F_L = 0x01  # \p{L}
F_N = 0x02  # \p{N}
F_S = 0x04  # \s
F_NL = 0x08  # [\r\n]
F_UP = 0x10  # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]   (o200k's first letter class)
F_LO = 0x20  # [\p{Ll}\p{Lm}\p{Lo}\p{M}]          (o200k's second letter class)
F_M = 0x40  # \p{M}

#: flag bit -> the class, spelled as in the patterns, whose members carry it
PROPERTIES = {
    F_L: r"\p{L}",
    F_N: r"\p{N}",
    F_S: r"\s",
    F_NL: r"[\r\n]",
    F_UP: r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
    F_LO: r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
    F_M: r"\p{M}",
}

#: letters of the contraction suffixes; ``class_flags(f)["fold_" + c]`` lists the code points
#: that ``(?i:c)`` matches (e.g. "s" also matches U+017F LATIN SMALL LETTER LONG S)
FOLD_LETTERS = "sdmtlver"

_lock = threading.Lock()


_FORMAT = 1
# the modules the flags are derived with (a change to any of them writes the cache again)
_SOURCES = ("flags.py", "atoms.py", "pattern.py", "sets.py", "store.py", "catalog.py")


def cache_path(family: str) -> str:
    """Where ``class_flags(family)`` is kept on this machine, keyed by everything it is derived
    from: the family's data file and the source of the modules that read it."""
    h = store.derived_digest(
        family, f"{_FORMAT}|{family}|{sorted(PROPERTIES.items())}|{FOLD_LETTERS}", _SOURCES)
    return str(Path(cache_dir("pinned")) / f"flags-{family}-{h.hexdigest()[:32]}.bin")


def _derive(family: str) -> dict:
    table = np.zeros(store.MAX_CP + 1, np.uint8)
    # a slice per range (~2,000 in all, ~2 ms) beats a 1.1M-element mask pass per flag (~14 ms)
    for bit, atom in PROPERTIES.items():
        for a, b in ranges(family, atom).tolist():
            table[a:b + 1] |= bit
    out = {"table": table}
    for ch in FOLD_LETTERS:
        out["fold_" + ch] = store.to_code_points(ranges(family, "(?i:%s)" % ch))
    return out


def _read(path: str) -> "dict | None":
    got = map_arrays(path)  # mapped read-only, shared with every process: no copy
    if got is None:  # absent, foreign or damaged
        return None
    out = got[0]
    want = {"table"} | {"fold_" + ch for ch in FOLD_LETTERS}
    t = out.get("table")
    if set(out) != want or t is None or t.dtype != np.uint8 or t.shape != (store.MAX_CP + 1,) \
            or any(out["fold_" + ch].dtype != np.uint32 for ch in FOLD_LETTERS):
        return None
    return out


@functools.lru_cache(maxsize=None)
def _build(family: str) -> dict:
    """Read from the cache, else derived (~40 ms: the set algebra over the pinned data) and
    written there for the next process."""
    path = cache_path(family)
    out = _read(path)
    if out is None:  # missing, damaged or foreign: derive and write it again
        out = _derive(family)
        write_arrays(path, out)
    for v in out.values():
        v.setflags(write=False)
    return out


def class_flags(family: str) -> dict:
    """``{"table": uint8[0x110000] of F_* bits, "fold_<c>": uint32 code points}`` for ``family``.

    The structure ``gputok.stages.scan.build_unicode_tables()`` returns, but from the pinned
    data of the oracle family (``"tiktoken"`` or ``"hf"``) instead of the installed ``regex``.
    Derived once per machine (cached on disk), read once per process; the arrays are
    read-only and shared.

    >>> flags = class_flags("tiktoken")
    >>> bool(flags["table"][ord("a")] & F_L), flags["fold_s"].tolist()
    (True, [83, 115, 383])
    """
    with _lock:
        return dict(_build(family))
