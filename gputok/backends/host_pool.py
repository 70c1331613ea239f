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

A request takes the smallest idle block that fits and is at most ``slack`` times too big: 2x
for workspace (``WORK_SLACK``: a batch's chunks shrink toward its end, guided sizes, and the
smaller last ones run in blocks the first ones gave back instead of faulting in fresh ones; the
pages are resident either way. A fresh process's first 4 MB o200k batch made 34-44 MB of new
blocks at 1.25x, 30-32 at 2x, 27-40 at 4x, where one chunk's small arrays took blocks its next
chunk's big ones then missed), 1.25x for an array the caller keeps (``SLACK``: a batch's ids,
whose block a bigger idle one would hold resident beyond what they use).

Idle blocks are kept up to ``cap`` bytes (about one chunk's workspace), or up to the bytes still
in use when that is more: the stages of one big chunk (a 10 MB blob with no safe cut point needs
~300 MB) then reuse each other's freed arrays resident instead of faulting in fresh ones (emoji
10 MB: 42 -> 29 ns per byte, system time 0.16 -> 0.05 s), and when the work in flight shrinks
the idle blocks beyond ``cap`` are freed, biggest first. So peak memory stays that of fresh
arrays plus about one chunk; ``trim()`` drops them all. Thread safe: holders may die on any
thread.

New blocks of 2-16 MB come from ``huge_block``: where Linux offers transparent huge pages
(``madvise`` or ``always`` mode) their first touch costs one fault per 2 MB instead of one per
4 KB. On the 2-core box a fresh 64 MB takes 6.5 ms that way and 51 ms in 4 KB pages; with it
(and the smaller tables and recycled output of the same change) a cold o200k batch of 4 MB
took 71.8 -> 60.1 ms (bench/results/native-jsonl-2026-11-24.md at 0a6b30f). numpy asks for huge
pages only from 4 MB on, and malloc's blocks are not 2 MB aligned, so a chunk's 2-4 MB arrays
never got them. Workspace takes them further (a fresh process's first 4 MB o200k batch: ~3,200
-> ~420 page faults, cold 50.6 -> 41.8 ms on the 2-core box, fresh processes alternated): its
blocks under 2 MB are cut from 4 MB slabs in 2 MB pages (``HostPool._cut``), and its blocks of
2-16 MB are made in whole 2 MB units (a tail in 4 KB pages cost ~700 faults a batch); an array
the caller keeps stays as close to its size as ``huge_block`` makes it.
"""

from __future__ import annotations

import bisect
import mmap
import threading

import numpy as np

MIN_POOLED = 1 << 16  # bytes; smaller arrays come from malloc's own free lists
CAP_DEFAULT = 48 << 20  # idle bytes kept: about one chunk's workspace (native.CHUNK_BYTES)
SLACK = 1.25  # a block serves requests down to 1/SLACK of its size (arrays the caller keeps)
WORK_SLACK = 2.0  # and workspace requests down to 1/WORK_SLACK of it
KEEP_IN_USE = 1  # while more is in use, idle blocks up to that much (times this) are kept
HUGE_PAGE = 2 << 20  # a transparent huge page (x86-64 and arm64 with 4 KB base pages)
HUGE_MIN = HUGE_PAGE  # smaller blocks stay in 4 KB pages (no whole 2 MB unit)
HUGE_MAX = 16 << 20  # and bigger ones too (one long piece's workspace, see huge_block)
SLAB = 4 << 20  # smaller workspace blocks are cut from slabs of this size (see HostPool._cut)
SLAB_BUDGET = 16 << 20  # slab bytes of a pool (until trim; the native device: 8 MB a thread)
TAIL_WASTE = 8  # a last partial 2 MB unit gets a huge page when that adds at most 1/8


def _rounded(nbytes: int) -> int:
    """Block sizes: eight steps per power of two (at most 12.5% over the request)."""
    step = max(1 << max((nbytes - 1).bit_length() - 3, 0), 4096)
    return -(-nbytes // step) * step


def huge_block(nbytes: int) -> np.ndarray:
    """A new uint8 array of ``nbytes`` (contents undefined) whose whole 2 MB units are backed by
    transparent huge pages where the OS has them (a last partial unit stays in 4 KB pages unless
    a 2 MB page for it adds at most 1/8 of the block: rounding every one up cost a 1 MB base64
    piece 31.8 -> 39.6 MB; a chunk's 3.7 MB block of entry arrays, 4 MB, pages in at once
    instead of ~430 faults). A private anonymous mapping,
    2 MB aligned, freed when the last array using it dies; ``np.empty`` below ``HUGE_MIN``,
    above ``HUGE_MAX`` or where ``madvise(MADV_HUGEPAGE)`` does not exist (macOS, Windows).
    Above HUGE_MAX: the workspace of one long piece (a 10 MB ``"a" * n``: arrays of 10-80 MB,
    some touched only in part) took 272 -> 314 MB in 2 MB pages, and its page faults are a
    small part of its ~100 ns per byte of merging."""
    nbytes = int(nbytes)
    if not HUGE_MIN <= nbytes <= HUGE_MAX or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(nbytes, np.uint8)
    huge = nbytes // HUGE_PAGE * HUGE_PAGE
    if huge < nbytes and (huge + HUGE_PAGE - nbytes) * TAIL_WASTE <= nbytes:
        huge += HUGE_PAGE  # the last unit in a 2 MB page too: at most 1/TAIL_WASTE more memory
    try:  # one spare unit of address space (never touched) to align the start
        m = mmap.mmap(-1, max(nbytes, huge) + HUGE_PAGE,
                      flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError):
        return np.empty(nbytes, np.uint8)
    whole = np.frombuffer(m, np.uint8)
    skip = -whole.__array_interface__["data"][0] % HUGE_PAGE
    try:
        m.madvise(mmap.MADV_HUGEPAGE, skip, huge)
    except OSError:  # a kernel without THP: 4 KB pages, as np.empty
        pass
    return whole[skip:skip + nbytes]


class _Holder:
    __slots__ = ("__array_interface__", "block", "pool")

    def __del__(self):
        pool = self.pool
        if pool is not None:
            pool._give_back(self.block)


class HostPool:
    """``empty(n, dtype)``: a contiguous array of ``n`` elements, from the smallest idle block
    that fits (and is at most ``slack`` times too big: ``WORK_SLACK`` unless told), else a new
    one (contents undefined, as ``np.empty``)."""

    def __init__(self, cap: int = CAP_DEFAULT, slab_budget: "int | None" = None):
        self.cap = int(cap)
        self.slab_budget = SLAB_BUDGET if slab_budget is None else int(slab_budget)
        self._lock = threading.Lock()
        self._idle: list = []  # (size, serial, block), sorted
        self._serial = 0
        self._idle_bytes = 0
        self._in_use = 0  # bytes of pooled blocks handed out and not back yet
        self.hits = 0
        self.misses = 0
        self._slab = None  # the slab small workspace blocks are cut from, and its first free byte
        self._slab_pos = 0
        self._slab_bytes = 0  # bytes of the slabs made since the last trim
        self._cut_ids: set = set()  # id() of the blocks cut from them (kept, never dropped)

    def empty(self, n: int, dtype, slack: float = WORK_SLACK) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = int(n) * dt.itemsize
        if nbytes < MIN_POOLED:
            return np.empty(int(n), dt)
        block = None
        with self._lock:
            k = bisect.bisect_left(self._idle, (nbytes,))
            if k < len(self._idle) and self._idle[k][0] <= nbytes * slack:
                size, _, block = self._idle.pop(k)
                self._idle_bytes -= size
                self.hits += 1
            else:
                self.misses += 1
        if block is None:
            size = _rounded(nbytes)
            if slack < WORK_SLACK:  # kept by the caller: as close to its size as can be
                block = huge_block(size)
            elif size < HUGE_MIN:
                block = self._cut(size)
                if block is None:  # the slabs' budget is spent
                    block = np.empty(size, np.uint8)
            else:  # workspace: whole 2 MB units (see the module's notes)
                block = huge_block(-(-size // HUGE_PAGE) * HUGE_PAGE if size <= HUGE_MAX else size)
        with self._lock:
            self._in_use += block.nbytes
        h = _Holder()
        h.block, h.pool = block, self
        h.__array_interface__ = {"shape": (int(n),), "typestr": dt.str, "version": 3,
                                 "data": (block.__array_interface__["data"][0], False)}
        return np.asarray(h)

    def _cut(self, size: int) -> "np.ndarray | None":
        """A new workspace block under ``HUGE_MIN``, cut from a slab of ``SLAB`` bytes in 2 MB
        pages (``huge_block``) rather than made alone in 4 KB pages: a fresh process's first 4
        MB o200k batch asked for ~10 MB of such blocks (the str packer's 1 MB slices, the
        smaller chunks' arrays) and took ~2,500 page faults for them. A slab lives while any block
        cut from it does (each block is a view of it); a request that does not fit in the
        current slab's rest starts a new slab (the rest, never touched, is never resident
        unless its 2 MB page already is). Only workspace is cut so: its blocks come back to the
        pool, where an array the caller keeps would hold its whole slab. Cut blocks stay in the
        pool once back (dropping one frees nothing while its slab's other blocks live: a long
        run of mixed batches crept from 130 to 147 MB that way) and the slabs stop at
        ``slab_budget`` until ``trim`` (then None: the caller makes the block alone)."""
        with self._lock:
            got = self._from_slab(size)
            if got is not None or self._slab_bytes + SLAB > self.slab_budget:
                return got
        fresh = huge_block(SLAB)  # (a mapping, nothing touched yet: made outside the lock)
        with self._lock:
            got = self._from_slab(size)  # another thread's new slab may have room now
            if got is None and self._slab_bytes + SLAB <= self.slab_budget:
                self._slab, self._slab_pos = fresh, 0
                self._slab_bytes += SLAB
                got = self._from_slab(size)
            return got  # (None past the budget; a fresh slab not used goes, untouched)

    def _from_slab(self, size: int) -> "np.ndarray | None":
        """The next ``size`` bytes of the current slab, or None when they are not there (under
        the lock)."""
        slab, pos = self._slab, self._slab_pos
        if slab is None or pos + size > slab.nbytes:
            return None
        self._slab_pos = pos + size
        block = slab[pos:pos + size]
        self._cut_ids.add(id(block))
        return block

    def _give_back(self, block) -> None:
        size = block.nbytes
        dropped = []
        with self._lock:
            self._in_use -= size
            limit = max(self.cap, KEEP_IN_USE * self._in_use)
            if self._idle_bytes + size <= limit or id(block) in self._cut_ids:
                self._serial += 1
                bisect.insort(self._idle, (size, self._serial, block))
                self._idle_bytes += size
            k = len(self._idle) - 1
            while self._idle_bytes > limit and k >= 0:  # the work in flight shrank: the biggest
                if id(self._idle[k][2]) not in self._cut_ids:  # go first; a block cut from a
                    got = self._idle.pop(k)  # slab stays (freeing it frees nothing while the
                    self._idle_bytes -= got[0]  # slab's other blocks live)
                    dropped.append(got)
                k -= 1
        del dropped  # (freed outside the lock)

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def trim(self) -> None:
        """Free every idle block (blocks in use come back later and are kept, up to ``cap``)."""
        with self._lock:
            self._idle.clear()
            self._idle_bytes = 0
            self._slab = None
            self._slab_bytes = 0
            self._cut_ids.clear()  # (blocks in use come back as any other block)
