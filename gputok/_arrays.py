"""Small array helpers every floor of the package may use."""

from __future__ import annotations

import numpy as np


def unique_sorted(a) -> np.ndarray:
    """The distinct values of ``a``, ascending: ``np.unique(a)`` without its first call's import
    of ``numpy.ma`` (numpy 2 asks ``np.ma.is_masked`` there: 6-15 ms once per process, which a
    fresh process's first short encode paid when it built its ASCII pattern)."""
    a = np.sort(np.asarray(a).ravel())
    if len(a) < 2:
        return a
    keep = np.empty(len(a), bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def code_points(text: str) -> np.ndarray:
    """The code points of ``text`` as uint32 (one UTF-32 encode).

    >>> code_points("a€").tolist()
    [97, 8364]
    """
    return np.frombuffer(text.encode("utf-32-le"), np.uint32)


def probe_place(home: np.ndarray, cap: int) -> np.ndarray:
    """Linear probing at ``cap`` slots (a power of two), built vectorised: the index of the key
    in each slot, -1 where empty. Each pass writes every pending key into its slot if free; one
    writer per slot wins (whichever the scatter kept), the others move one slot on. Any winner
    gives a valid table: a key sits past its home only where every slot between was taken
    first, and a slot once taken stays taken."""
    owner = np.full(cap, -1, np.int64)
    mask = cap - 1
    pending = np.arange(len(home))
    slot = np.asarray(home, np.int64).copy()
    while len(pending):
        s = slot[pending]
        free = owner[s] < 0
        cand, cs = pending[free], s[free]
        owner[cs] = cand
        placed = np.zeros(len(home), bool)
        placed[cand[owner[cs] == cand]] = True
        pending = pending[~placed[pending]]
        slot[pending] = (slot[pending] + 1) & mask
    return owner
