"""Recycled host workspace for the native CPU device: arrays whose pages are already resident.

A chunk's kernels write ~30 bytes of workspace per byte of text into fresh arrays. Fresh large
arrays come from ``mmap`` and every first touch of a 4 KB page is a page fault (the kernel zeroes
the page): on the 2-core box that was a fifth of the native encode time. The pool hands out
blocks a finished chunk gave back instead.

How a block comes back: an array is made with ``np.asarray`` from a small holder object that
exposes the block through ``__array_interface__``; numpy keeps the holder as the array's base,
so the holder lives exactly as long as the array and every view of it. When the last one dies
the holder's ``__del__`` returns the block to the pool. Nothing is recycled while any array
(a queued kernel's argument, a chunk's ids not yet copied out) still refers to it.

Blocks are kept by power-of-two size class (a chunk's arrays change size a little from chunk to
chunk; pages a use does not reach are never made resident). At most ``cap`` bytes of idle blocks
are kept; ``trim()`` drops them all. Thread safe: holders may die on any thread.
"""

from __future__ import annotations

import threading

import numpy as np

MIN_POOLED = 1 << 16  # bytes; smaller arrays come from malloc's own free lists
CAP_DEFAULT = 256 << 20  # idle bytes kept (virtual size; resident is what earlier uses touched)


class _Holder:
    __slots__ = ("__array_interface__", "block", "pool", "size_class")

    def __del__(self):
        pool = self.pool
        if pool is not None:
            pool._give_back(self.size_class, self.block)


class HostPool:
    """``empty(n, dtype)``: a contiguous array of ``n`` elements, from a recycled block when one
    of its size class is idle (contents undefined, as ``np.empty``)."""

    def __init__(self, cap: int = CAP_DEFAULT):
        self.cap = int(cap)
        self._lock = threading.Lock()
        self._idle: dict = {}  # size class -> [blocks]
        self._idle_bytes = 0
        self.hits = 0
        self.misses = 0

    def empty(self, n: int, dtype) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = int(n) * dt.itemsize
        if nbytes < MIN_POOLED:
            return np.empty(int(n), dt)
        size_class = 1 << (nbytes - 1).bit_length()
        with self._lock:
            blocks = self._idle.get(size_class)
            if blocks:
                block = blocks.pop()
                self._idle_bytes -= size_class
                self.hits += 1
            else:
                block = None
                self.misses += 1
        if block is None:
            block = np.empty(size_class, np.uint8)
        h = _Holder()
        h.block, h.pool, h.size_class = block, self, size_class
        h.__array_interface__ = {"shape": (int(n),), "typestr": dt.str, "version": 3,
                                 "data": (block.__array_interface__["data"][0], False)}
        return np.asarray(h)

    def _give_back(self, size_class: int, block) -> None:
        with self._lock:
            if self._idle_bytes + size_class > self.cap:
                return  # dropped: the block is freed with the holder
            self._idle.setdefault(size_class, []).append(block)
            self._idle_bytes += size_class

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def trim(self) -> None:
        """Free every idle block (blocks in use come back later and are kept, up to ``cap``)."""
        with self._lock:
            self._idle.clear()
            self._idle_bytes = 0

