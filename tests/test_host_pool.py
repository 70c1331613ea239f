"""The native device's recycled workspace (gputok/backends/host_pool.py): a block goes back to the
pool only when no array or view refers to it any more, never while one does."""

import gc
import threading

import numpy as np

from gputok.backends.host_pool import MIN_POOLED, HostPool


def _addr(a):
    return a.__array_interface__["data"][0]


def test_a_dead_array_is_reused_and_a_live_one_never():
    pool = HostPool()
    a = pool.empty(1 << 20, np.uint32)
    a[:] = 7
    first = _addr(a)
    view = a[10:20]
    del a
    gc.collect()
    b = pool.empty(1 << 20, np.uint32)  # the view keeps the first block alive
    assert _addr(b) != first
    assert (view == 7).all()
    del view
    gc.collect()
    c = pool.empty((1 << 20) - 5, np.uint32)  # same size class: the freed block comes back
    assert _addr(c) == first
    assert pool.hits == 1 and pool.misses == 2
    assert c.dtype == np.uint32 and c.shape == ((1 << 20) - 5,) and c.flags.writeable
    assert c.flags.c_contiguous


def test_dtypes_and_small_arrays():
    pool = HostPool()
    for dt in (np.uint8, np.uint16, np.uint32, np.int64, np.uint64, np.float64):
        a = pool.empty(100_000, dt)
        a[:] = 3
        assert a.dtype == dt and int(a.sum()) == 300_000
    small = pool.empty(MIN_POOLED // 8 - 1, np.uint64)  # malloc's own business
    assert small.base is None
    assert len(pool.empty(0, np.uint32)) == 0


def test_workspace_takes_a_bigger_block_than_a_kept_array():
    """Workspace (the default, ``WORK_SLACK``) takes an idle block up to twice its size: a
    batch's smaller last chunks run in the blocks its first ones gave back; an array the caller
    keeps (``slack=SLACK``, a batch's ids) takes one at most 1.25x its size, else a new one."""
    from gputok.backends.host_pool import SLACK, WORK_SLACK

    assert SLACK == 1.25 and WORK_SLACK == 2.0
    pool = HostPool()
    big = pool.empty(4 << 20, np.uint8)
    first = _addr(big)
    del big
    gc.collect()
    kept = pool.empty(3 << 20, np.uint8, SLACK)  # 4 MB is 1.33x too big: a new block
    assert _addr(kept) != first and pool.misses == 2
    work = pool.empty((2 << 20) + 1, np.uint8)  # within 2x: the idle 4 MB block
    assert _addr(work) == first and pool.hits == 1
    del work
    gc.collect()
    small = pool.empty((2 << 20) - (1 << 16), np.uint8)  # past 2x: a new block
    assert _addr(small) != first and pool.hits == 1


def test_cap_and_trim():
    from gputok.backends.host_pool import SLACK

    pool = HostPool(cap=3 << 20)
    # five 1 MB blocks made alone (kept arrays: a workspace block this small is cut from a
    # slab, and those stay, see test_slabs_stop_at_their_budget...)
    arrays = [pool.empty(1 << 20, np.uint8, SLACK) for _ in range(5)]
    del arrays
    gc.collect()
    assert pool.idle_bytes == 3 << 20  # the other two were freed, not kept
    pool.trim()
    assert pool.idle_bytes == 0
    pool.empty(1 << 20, np.uint8)
    assert pool.hits == 0


def test_blocks_die_on_other_threads():
    pool = HostPool()
    got = []

    def make():
        for _ in range(50):
            a = pool.empty(200_000, np.uint32)
            a[:] = 1
            got.append(int(a.sum()))

    ts = [threading.Thread(target=make) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [200_000] * 200
    assert pool.hits + pool.misses == 200 and pool.hits > 0


def test_a_much_bigger_block_is_not_handed_out():
    # it would keep resident the pages an earlier, bigger use touched
    pool = HostPool()
    big = pool.empty(4 << 20, np.uint8)
    first = _addr(big)
    del big
    gc.collect()
    small = pool.empty(1 << 20, np.uint8)
    assert _addr(small) != first and pool.hits == 0
    near = pool.empty((4 << 20) - 100_000, np.uint8)
    assert _addr(near) == first and pool.hits == 1


def test_blocks_freed_while_more_is_in_use_are_kept_then_trimmed():
    """A big chunk's stages free arrays the next stage needs again: while at least as much is
    in use, freed blocks stay idle past ``cap`` (reused resident, not faulted in afresh); once
    the work in flight shrinks, the idle blocks beyond ``cap`` are dropped, biggest first."""
    pool = HostPool(cap=1 << 20)
    live = [pool.empty(4 << 20, np.uint8) for _ in range(3)]  # 12 MB in use
    first = _addr(live[0])
    del live[0]
    gc.collect()
    assert pool.idle_bytes == 4 << 20  # over cap, kept: 8 MB are still in use
    again = pool.empty(4 << 20, np.uint8)
    assert _addr(again) == first and pool.hits == 1
    del live, again
    gc.collect()
    assert pool.idle_bytes <= 1 << 20  # nothing in use: back under cap


def _anon_huge_kb() -> "int | None":
    try:
        with open("/proc/self/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages"))
    except (OSError, StopIteration):
        return None


def test_huge_blocks_are_aligned_private_and_freed():
    import mmap
    import weakref

    from gputok.backends.host_pool import HUGE_MIN, HUGE_PAGE, huge_block

    small = huge_block(HUGE_MIN - 1)
    assert small.base is None  # below the threshold: np.empty
    n = 5 * HUGE_PAGE + 123
    a = huge_block(n)
    assert a.dtype == np.uint8 and a.shape == (n,) and a.flags.writeable and a.flags.c_contiguous
    a[:] = 5
    assert int(a[-1]) == 5 and int(a.sum()) == 5 * n
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return
    assert _addr(a) % HUGE_PAGE == 0  # the start of a 2 MB unit, or no unit is whole
    # private: a fork()ed worker writing its copy never changes ours (a shared mapping would,
    # and would not be eligible for huge pages either)
    m = a.base
    while not isinstance(m, mmap.mmap):
        m = m.base if isinstance(m, np.ndarray) else m.obj
    ref = weakref.ref(m)
    del m
    views = [a[10:20], a[:n - 3].view(np.uint32)]
    del a
    gc.collect()
    assert ref() is not None  # views keep the mapping
    del views
    gc.collect()
    assert ref() is None  # and the last one frees it


def test_huge_blocks_get_huge_pages_where_the_kernel_offers_them():
    import mmap

    from gputok.backends.host_pool import HUGE_PAGE, huge_block

    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        mode = ""
    before = _anon_huge_kb()
    if before is None or "[never]" in mode or not hasattr(mmap, "MADV_HUGEPAGE") or not mode:
        import pytest
        pytest.skip("no transparent huge pages on this system")
    a = huge_block(4 * HUGE_PAGE)
    a[::4096] = 1
    got = _anon_huge_kb() - before
    assert 0 <= got <= 4 * HUGE_PAGE // 1024
    # the kernel falls back to 4 KB pages when it has no free 2 MB page at hand
    assert got > 0 or _fragmented()


def test_a_short_last_unit_gets_a_huge_page_a_long_one_does_not():
    """A block's last partial 2 MB unit is backed by a huge page when that adds at most 1/8 of
    the block (a chunk's entry arrays), else it stays in 4 KB pages (memory, not page faults)."""
    import mmap

    from gputok.backends.host_pool import HUGE_PAGE, TAIL_WASTE, huge_block

    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        mode = ""
    if _anon_huge_kb() is None or "[never]" in mode or not hasattr(mmap, "MADV_HUGEPAGE") \
            or not mode:
        import pytest
        pytest.skip("no transparent huge pages on this system")
    short = 2 * HUGE_PAGE - 2 * HUGE_PAGE // (2 * TAIL_WASTE)  # 1/16 short of two units
    long_tail = HUGE_PAGE + HUGE_PAGE // 4  # 3/4 of a unit short: 60% more
    for n, units in ((short, 2), (long_tail, 1)):
        before = _anon_huge_kb()
        a = huge_block(n)
        assert a.shape == (n,)
        a[::4096] = 1
        a[-1] = 2
        got = _anon_huge_kb() - before
        assert got <= units * HUGE_PAGE // 1024
        assert got == units * HUGE_PAGE // 1024 or _fragmented()
        del a
        gc.collect()


def _fragmented() -> bool:
    """Whether no free 2 MB block is left (the kernel then falls back to 4 KB pages)."""
    try:
        for line in open("/proc/buddyinfo"):
            counts = [int(x) for x in line.split()[4:]]
            if len(counts) > 9 and any(counts[9:]):
                return False
    except OSError:
        return True
    return True


def test_the_pool_takes_new_blocks_from_huge_block(monkeypatch):
    from gputok.backends import host_pool

    asked = []
    real = host_pool.huge_block
    monkeypatch.setattr(host_pool, "huge_block", lambda n: asked.append(n) or real(n))
    pool = HostPool()
    a = pool.empty(3 << 20, np.uint32)
    assert asked and asked[0] >= a.nbytes
    a[:] = 2
    assert int(a[-1]) == 2


def test_small_workspace_blocks_are_cut_from_one_slab_and_kept_arrays_are_not():
    """Workspace blocks under ``HUGE_MIN`` are consecutive, page-aligned cuts of one ``SLAB``
    (2 MB pages, one fault per 2 MB) that never overlap; a new slab starts when the rest is too
    small; an array the caller keeps is never cut (it would hold the whole slab)."""
    from gputok.backends.host_pool import SLAB, SLACK

    pool = HostPool()
    a = pool.empty(300_000, np.uint8)
    b = pool.empty(700_000, np.uint8)
    assert a.base is not None and b.base is not None
    sa, sb = _addr(a), _addr(b)
    assert sa % 4096 == 0 and sb % 4096 == 0
    assert sb >= sa + a.nbytes  # consecutive, no overlap
    assert sb - sa < SLAB
    a[:] = 1
    b[:] = 2
    assert int(a.sum()) == 300_000 and int(b.sum()) == 1_400_000  # nothing shared
    c = pool.empty(1_900_000, np.uint8)  # does not fit the rest: a new slab
    assert not (sa <= _addr(c) < sa + SLAB)
    kept = pool.empty(300_000, np.uint8, SLACK)
    assert not (sa <= _addr(kept) < sa + SLAB) and not (
        _addr(c) <= _addr(kept) < _addr(c) + SLAB)
    del a
    gc.collect()
    again = pool.empty(290_000, np.uint8)  # a cut block comes back through the pool as any
    assert _addr(again) == sa and pool.hits == 1
    pool.trim()
    assert pool._slab is None


def test_big_workspace_blocks_take_whole_2mb_pages(monkeypatch):
    """A workspace block of 2-16 MB is made in whole 2 MB units (its tail in 4 KB pages cost a
    fresh process ~700 faults a batch); one the caller keeps only as big as it asks."""
    from gputok.backends import host_pool
    from gputok.backends.host_pool import HUGE_PAGE, SLACK

    asked = []
    real = host_pool.huge_block
    monkeypatch.setattr(host_pool, "huge_block", lambda n: asked.append(n) or real(n))
    pool = HostPool()
    work = pool.empty(3_600_000, np.uint8)
    kept = pool.empty(3_600_000, np.uint8, SLACK)
    assert work.nbytes == kept.nbytes == 3_600_000
    assert asked[0] == 2 * HUGE_PAGE and asked[0] % HUGE_PAGE == 0
    assert asked[1] < 2 * HUGE_PAGE
    big = (HUGE_PAGE * 8) + 12345  # over HUGE_MAX: as asked (rounded to the size classes)
    pool.empty(big, np.uint8)
    assert big <= asked[2] <= big * 1.25


def test_slabs_stop_at_their_budget_and_cut_blocks_are_never_dropped():
    """Past ``SLAB_BUDGET`` small workspace blocks are made alone (4 KB pages); a cut block back
    in the pool stays there over ``cap`` (dropping it would free nothing while its slab lives)
    while a block made alone is dropped; ``trim`` drops both and restores the budget."""
    from gputok.backends.host_pool import SLAB

    pool = HostPool(cap=1 << 20, slab_budget=SLAB)
    cut = [pool.empty(1_500_000, np.uint8) for _ in range(2)]  # one slab holds both
    assert pool._slab_bytes == SLAB and len(pool._cut_ids) == 2
    assert abs(_addr(cut[1]) - _addr(cut[0])) < SLAB
    alone = pool.empty(1_500_000, np.uint8)  # the budget is spent: made alone
    assert pool._slab_bytes == SLAB and len(pool._cut_ids) == 2
    assert not any(_addr(c) <= _addr(alone) < _addr(c) + SLAB for c in cut)
    addrs = {_addr(c) for c in cut}
    del cut, alone
    gc.collect()
    assert {_addr(b[2]) for b in pool._idle} == addrs  # the cut ones stay, over cap
    again = pool.empty(1_400_000, np.uint8)
    assert _addr(again) in addrs
    del again
    gc.collect()
    pool.trim()
    assert pool.idle_bytes == 0 and pool._slab_bytes == 0 and not pool._cut_ids
    assert len(pool.empty(1_500_000, np.uint8)) == 1_500_000 and pool._slab_bytes == SLAB


def test_the_native_device_scales_the_slab_budget_with_its_threads():
    from gputok.backends import native

    ok, why = native.available()
    if not ok:
        import pytest

        pytest.skip(f"native backend unavailable: {why}")
    for threads in (1, 3):
        assert native.NativeDevice(threads).pool.slab_budget == native.SLAB_PER_THREAD * threads
