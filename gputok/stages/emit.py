"""Emit: per-document ids -> one ragged output, ``(ids, offsets)``.

``ids`` is uint16 when every id of the vocabulary fits, else uint32; ``offsets`` is int64 with
one entry per document plus one, so document ``d`` is ``ids[offsets[d]:offsets[d + 1]]``.

Performance notes: building one flat Python list and packing it once with ``array.array`` is
~2.5x faster than ``np.fromiter`` and ~2x faster than per-document arrays + concatenate.
"""

from __future__ import annotations

import array
from itertools import chain

import numpy as np


def emit(vals_per_doc: list, dtype) -> tuple[np.ndarray, np.ndarray]:
    """``vals_per_doc[d]``: document d's ids as a list of tuples (one per piece or token).

    >>> ids, off = emit([[(1, 2), (3,)], [], [(4,)]], np.uint16)
    >>> ids.tolist(), off.tolist()
    ([1, 2, 3, 4], [0, 3, 3, 4])
    """
    counts = np.zeros(len(vals_per_doc) + 1, dtype=np.int64)
    flat: list = []
    for d, vals in enumerate(vals_per_doc):
        before = len(flat)
        flat.extend(chain.from_iterable(vals))
        counts[d + 1] = len(flat) - before
    code = "H" if np.dtype(dtype) == np.uint16 else "I"
    ids = np.frombuffer(array.array(code, flat), dtype=dtype)
    return ids, np.cumsum(counts)


def assemble(parts: list, n_docs: int, dtype, block=None) -> tuple[np.ndarray, np.ndarray]:
    """Join chunk results ``(d0, ids, lengths)`` (any order, covering documents 0..n_docs-1).
    ``block(nbytes)``: where the ids go (a uint8 array of that size), else a new array."""
    parts = sorted(parts, key=lambda p: p[0])
    dtype = np.dtype(dtype)
    total = sum(len(p[1]) for p in parts)
    ids = (np.empty(total, dtype) if block is None or not total
           else block(total * dtype.itemsize).view(dtype))
    if parts:
        np.concatenate([p[1] for p in parts], out=ids, casting="unsafe")
    offsets = np.zeros(n_docs + 1, np.int64)
    if parts:
        np.cumsum(np.concatenate([p[2] for p in parts]), out=offsets[1:])
    return ids, offsets
