"""``compile_pinned``'s fast form: the installed ``regex``'s classes, corrected to the pinned sets.

The ``regex`` module tests membership in an explicit class by walking its ranges one by one, so
a pinned ``\\p{L}`` (677 ranges) costs ~3 us per character where the module's own ``\\p{L}`` (a
table lookup) costs ~0.1 us: with plain ranges cl100k ran at 0.9-1.1 MB/s and o200k at 0.3-0.5
MB/s instead of 8-12 MB/s. So ``compile_pinned``
writes each class as the installed module would spell the same source atom (``\\p{L}``,
``[^\\s\\p{L}\\p{N}]``), measures what that spelling matches in *this* release over all
0x110000 code points (~20-120 ms per distinct class, once per process), and adds the difference
to the pinned set explicitly: ``[\\p{L}+added]`` or, in the module's V1 mode,
``[[\\p{L}--[removed]]||[added]]``. The difference is a few dozen ranges (code points assigned
after the oracle's Unicode version, a few category changes), so matching runs at ~0.6x the
unpinned pattern (bench/bench_unicode.py), and the result is still exactly the pinned set,
whichever release is installed (the regex-release test runs it under regex 2023.6.3 / Unicode
15.0, 2024.11.6 / 16.0 and 2026.5.9 / 17.0). ``pin_pattern`` keeps plain ranges: its text must
not depend on the installed release.

Performance notes (0.5 MB of prose, MB/s): unpinned cl100k 10.9, plain ranges 1.1; a V0
lookahead ``(?:(?![removed])\\p{L}|[added])`` 2.5-3x slower than the bare property; guarding each
correction with a one-range lookahead spanning it: no gain (the alternation itself costs);
splitting a big class into per-plane alternatives: ~10%; V1 set operations: 6.7 (kept). V1 is
safe for the whole pattern: pinned text has no inline flags or case-insensitivity, escapes every
set-operator character, and V1's zero-width-match rules equal V0's in current releases.
"""

from __future__ import annotations

import functools

import numpy as np
import regex

from . import store
from .emit import ranges as _emit_set

__all__ = ["installed_set", "corrected"]

#: below this many ranges an explicit class is as fast as a property lookup
SMALL = 12
#: above this many correction ranges, plain ranges are simpler and not slower
MAX_CORRECTION = 48


@functools.lru_cache(maxsize=1)
def _every_code_point() -> str:
    # index == code point, surrogates included (a Python str may hold them)
    return np.arange(store.MAX_CP + 1, dtype=np.uint32).tobytes().decode("utf-32-le",
                                                                          "surrogatepass")


@functools.lru_cache(maxsize=512)
def installed_set(expr: str):
    """Normal-form ranges the installed ``regex`` matches with the one-character ``expr``, or
    None if this release rejects it."""
    try:
        rx = regex.compile("(?:%s)+" % expr)
    except (regex.error, ValueError):
        return None
    spans = np.array([m.span() for m in rx.finditer(_every_code_point())], np.int64)
    if spans.size == 0:
        return store.EMPTY
    spans[:, 1] -= 1
    return store.normal(spans)


def corrected(r, py: "str | None") -> tuple:
    """(pattern text matching exactly the set ``r``, whether it needs the module's V1 mode).

    Written with ``py`` (the installed release's spelling of the same source atom) when that is
    faster: ``py`` alone if it already matches ``r``; ``[py + added ranges]`` in V0 when the
    release only misses code points; otherwise a V1 set expression ``[[py--[removed]]||[added]]``
    (the V1 set operations cost ~1.5x a bare property; a V0 lookahead ``(?![removed])`` ~3x)."""
    if py is None or len(r) <= SMALL:
        return _emit_set(r), False
    have = installed_set(py)
    if have is None:
        return _emit_set(r), False
    add, remove = store.difference(r, have), store.difference(have, r)
    if len(add) + len(remove) > MAX_CORRECTION:
        return _emit_set(r), False
    if not len(add) and not len(remove):
        return py, False
    if not len(remove) and not py.startswith("[^"):
        body = py[1:-1] if py.startswith("[") else py
        return "[%s%s]" % (body, _emit_set(add)[1:-1]), False
    out = py if py.startswith("[") else "[%s]" % py
    if len(remove):
        out = "[%s--%s]" % (out, _emit_set(remove))
    if len(add):
        out = "[%s||%s]" % (out, _emit_set(add))
    return out, True
