"""The public set queries: what one atom (a property name or a one-character pattern) matches.

They sit above both ``sets`` (the probed property data) and ``pattern`` (the pattern parser
that turns ``[\\p{L}&&\\p{Han}]`` or ``(?i:k)`` into a set), so neither needs the other's
public face.
"""

from __future__ import annotations

import functools

import numpy as np

from . import sets, store
from .pattern import single_set

__all__ = ["ranges", "member_table"]

SURROGATES = sets._SURROGATES  # in no probed set: the engines never see them


def ranges(family: str, atom: str) -> np.ndarray:
    """Sorted inclusive code point ranges, shape ``(k, 2)``, that ``atom`` matches in ``family``.

    ``atom`` is a property name (``"L"``, ``"Lu"``, ``"Han"``, ``"White_Space"``, any alias the
    engine accepts) or a one-character pattern: ``\\p{..}``, ``\\P{..}``, ``\\s``, ``\\W``, a
    bracket class such as ``[\\p{L}&&\\p{Han}]``, ``(?i:s)``. Surrogates are in no probed set (the
    engines never see them), so no result holds them.

    >>> ranges("tiktoken", "(?i:k)").tolist()
    [[75, 75], [107, 107], [8490, 8490]]
    """
    if not any(ch in atom for ch in "\\[("):
        hit = sets.resolve_property(family, atom)
        if hit is None:
            raise ValueError(f"unknown property {atom!r} for family {family!r}")
        name, negated = hit
        return store.difference(sets.atom_set(family, name, negated=negated), SURROGATES)
    return store.difference(single_set(atom, family), SURROGATES)


@functools.lru_cache(maxsize=64)
def _member_table(family: str, atom: str) -> np.ndarray:
    t = store.member_mask(ranges(family, atom))
    t.setflags(write=False)
    return t


def member_table(family: str, atom: str) -> np.ndarray:
    """``bool[0x110000]``: True where ``atom`` matches (read-only, cached per family and atom).

    >>> bool(member_table("hf", r"\\p{L}")[ord("a")])
    True
    """
    return _member_table(family, atom)
