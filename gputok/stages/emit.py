"""Emit: per-document ids -> one ragged output, ``(ids, offsets)``.

``ids`` is uint16 when every id of the vocabulary fits, else uint32; ``offsets`` is int64 with
one entry per document plus one, so document ``d`` is ``ids[offsets[d]:offsets[d + 1]]``.

Performance notes: building one flat Python list and packing it once with ``array.array`` is
~2.5x faster than ``np.fromiter`` and ~2x faster than per-document arrays + concatenate.
"""

from __future__ import annotations

import array
import threading
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
    return ids, offsets_of(parts, n_docs)


def offsets_of(parts: list, n_docs: int) -> np.ndarray:
    """The document offsets of chunk results ``(d0, ids, lengths)`` (any order, covering
    documents 0..n_docs-1; their ids are not read)."""
    offsets = np.zeros(n_docs + 1, np.int64)
    if parts:
        parts = sorted(parts, key=lambda p: p[0])
        np.cumsum(np.concatenate([p[2] for p in parts]), out=offsets[1:])
    return offsets


class Placement:
    """A batch's chunk results written into one output in chunk order as they finish, rather
    than kept until the last one and joined (``assemble``): chunk ``k`` takes the ids after
    chunks ``0..k-1``'s. A chunk whose id count is known before it emits asks for its place
    (``reserve``) and emits there, when every earlier chunk has its place already; any other
    chunk's ids are copied in (``place``) by whichever thread places the chunk before them. Each
    chunk's own ids then go back to the workspace they came from at once, for the next chunk,
    and no copy of the whole batch is left for the end: a fresh process's first 4 MB batch kept
    ~5 MB of chunk outputs alive and copied them into ~5 MB of new pages on one thread after
    the workers were done.

    ``out``: the output, at least as long as the batch's ids can be; only what is
    written is touched. Should the ids outgrow it, the chunks from there on are kept and joined
    at the end. Thread safe.

    >>> p = Placement(np.zeros(8, np.uint32))
    >>> p.place(1, np.array([3, 4], np.uint32))   # waits for chunk 0
    >>> got = p.reserve(0, 2); got[:] = [1, 2]      # chunk 0 emits in place; then chunk 1 goes in
    >>> p.ids().tolist()
    [1, 2, 3, 4]
    """

    def __init__(self, out: np.ndarray):
        self.out = out
        self._lock = threading.Lock()
        self._next = 0  # the next chunk to take its place
        self._cursor = 0  # ids placed or reserved so far
        self._waiting: dict = {}  # chunk -> its ids, not placed yet
        self._full = False  # the ids outgrew the output: the rest waits for ids()

    def reserve(self, k: int, count: int) -> "np.ndarray | None":
        """Chunk ``k``'s place for ``count`` ids, where every earlier chunk has one (the chunk
        emits there and is then placed), else None (it emits elsewhere and calls ``place``)."""
        with self._lock:
            if k != self._next or self._full or self._cursor + count > len(self.out):
                return None
            at = self._cursor
            self._cursor += count
            self._next += 1
            ready = self._take_ready()
        self._copy(ready)
        return self.out[at:at + count]

    def place(self, k: int, ids: np.ndarray, borrowed: bool = False) -> None:
        """Chunk ``k``'s ids (emitted elsewhere): copied in now, or once the chunks before it
        are placed. ``borrowed``: ``ids`` is valid only during this call (a download buffer
        the next chunk reuses): kept as a copy if it cannot go in now."""
        with self._lock:
            self._waiting[k] = ids
            ready = self._take_ready()
            if borrowed and k in self._waiting:
                self._waiting[k] = ids.copy()
        self._copy(ready)

    def _take_ready(self) -> list:
        ready = []
        while self._next in self._waiting and not self._full:
            ids = self._waiting[self._next]
            if self._cursor + len(ids) > len(self.out):
                self._full = True
                break
            del self._waiting[self._next]
            ready.append((self._cursor, ids))
            self._cursor += len(ids)
            self._next += 1
        return ready

    def _copy(self, ready: list) -> None:
        for at, ids in ready:  # (disjoint places: no lock needed)
            self.out[at:at + len(ids)] = ids

    def ids(self) -> np.ndarray:
        """Every chunk's ids in order, once every chunk is placed or given to ``place``."""
        with self._lock:
            rest = [self._waiting[k] for k in sorted(self._waiting)]
            if not rest:
                return self.out[:self._cursor]
            return np.concatenate([self.out[:self._cursor], *rest])
