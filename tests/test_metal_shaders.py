"""Every training shader (shaders/train_*.metal) on the CPU emulator against its numpy reference.

Each shader is built from the interface it declares (``gputok.backends.metal.iface``, as the backend
builds it), wrapped as MLX wraps it (``tests/emulator/metal.py``), and run in forward, reverse
and shuffled thread orders (the last also switching threads at every atomic, so claims of table
slots interleave between a thread's two compare-and-swaps) on states built from real text; the
result must equal ``gputok.backends.metal.train_reference``. Tables are compared as ``{pair: count}`` (where
a pair lands depends on the order) and must keep the probe-chain rule.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import testdata
from cpu_ref.patterns import resolve_pattern
from emulator import kernel_for
from gputok.backends.metal import iface as metal_iface
from gputok.backends import train_arrays as arrays
from gputok.backends.metal import train as metal
from gputok.train import cpu, words
from gputok.backends.metal import train_reference as ma
from gputok.train.vocab import Vocab

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1), ("shuffle+yield", 2)]
BLOCK = metal.TRAIN_BLOCK
GROUPS = 3  # small grids: every thread walks many elements, and the emulator stays quick
_MASK = (1 << 32) - 1
STATES = [("prose", 0), ("prose", 30), ("code", 0), ("code", 60), ("multilingual", 20)]


@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    return kernel_for(metal_iface.load(name))


def run(name, *inputs, shapes, order, seed, groups=GROUPS, init_value=None):
    """One shader launch, inputs in declared order (0-d numpy arrays for scalars)."""
    iface = metal_iface.load(name).interface
    for x, (n, dt, nd) in zip(inputs, iface.inputs):
        assert x.dtype == dt and x.ndim == nd, (name, n, x.dtype, x.ndim)
    return _kernel(name)(inputs=list(inputs), output_shapes=shapes,
                         output_dtypes=iface.output_dtypes, grid=(groups * BLOCK, 1, 1),
                         threadgroup=(BLOCK, 1, 1), template=iface.template,
                         init_value=init_value, order=order.split("+")[0], seed=seed,
                         yield_on_atomic=order.endswith("+yield"))


def i64(v):
    return np.array(v, dtype=np.int64)


def i32(v):
    return np.array(v, dtype=np.int32)


def u32(v):
    return np.array(v, dtype=np.uint32)


@functools.lru_cache(maxsize=None)
def _words(kind: str):
    docs = testdata.corpus(kind, max_mb=0.03)
    return words.count_words(((t, 1) for t in docs), resolve_pattern("cl100k"))


def _state(kind: str, n_merges: int, scale: int = 1):
    """The state after ``n_merges`` reference merges on real text (word counts x ``scale``)."""
    v = Vocab()
    ids, off, wcount = cpu.word_arrays(_words(kind), v)
    wcount = np.asarray(wcount, dtype=np.int64) * scale
    tok, prv, nxt, word_of = arrays.initial_state(ids, off)
    counts = arrays.pair_counts(tok, nxt, word_of, wcount)
    for _ in range(n_merges):
        _, key = arrays.best_pair(counts)
        a, b = key >> 32, key & _MASK
        c = v.merge(a, b)
        counts[key] = 0
        start = arrays.find_matches(tok, prv, nxt, a, b)
        for k, d in arrays.merge_deltas(tok, prv, nxt, word_of, wcount, start, a, b, c).items():
            counts[k] = counts.get(k, 0) + d
        arrays.apply_merge(tok, prv, nxt, start, c)
    counts = {k: c for k, c in counts.items() if c != 0}
    return dict(tok=tok, prv=prv, nxt=nxt, word_of=word_of, wcount=wcount, counts=counts,
                vocab=v)


def _cap(entries: int) -> int:
    """A table as full as the driver allows (3/4), so probe chains are long."""
    return 1 << max(3, int(entries / 0.75).bit_length())


def empty(cap):
    z = np.zeros(cap, np.uint32)
    return z, z, np.zeros(cap, np.int64)


def count_into(s, main, cap, order, seed):
    """train_count_pairs over ``main``: the delta table."""
    return run("train_count_pairs", s["tok"], s["nxt"], s["word_of"], s["wcount"], main[0],
               main[1], i64(len(s["tok"])), u32(cap - 1), shapes=[(cap,)] * 4, order=order,
               seed=seed, init_value=0)


def fold(main, delta, cap, merged, order, seed, groups=GROUPS):
    out = run("train_fold_best", *main, *delta, i64(cap), u32(merged[0]), u32(merged[1]),
              shapes=[(cap,)] * 3 + [(max(groups, 8),)] * 3, order=order, seed=seed,
              groups=groups)
    return tuple(out[:3]), out[3:]


def table(s, order, seed, cap=None):
    """The main table of the state's pair counts (count_pairs, then fold_best)."""
    cap = cap or _cap(len(s["counts"]))
    main = empty(cap)
    delta = count_into(s, main, cap, order, seed)
    return fold(main, delta, cap, (0, 0), order, seed)[0], cap


@pytest.mark.parametrize("kind,n_merges", STATES)
@pytest.mark.parametrize("order,seed", ORDERS)
def test_count_pairs(kind, n_merges, order, seed):
    s = _state(kind, n_merges)
    cap = _cap(len(s["counts"]))
    main = empty(cap)
    d_hi, d_lo, c_lo, c_hi = count_into(s, main, cap, order, seed)
    want = ma.train_count_pairs(s["tok"], s["nxt"], s["word_of"], s["wcount"])
    assert want == s["counts"]
    assert ma.delta_dict(main[0], main[1], d_hi, d_lo, c_lo, c_hi) == want
    ma.check_probe_chains(d_hi, d_lo)
    assert int((d_hi != 0).sum()) == len(want)  # one slot per distinct pair


@pytest.mark.parametrize("kind,n_merges", [("prose", 0), ("code", 60)])
@pytest.mark.parametrize("order,seed", ORDERS)
def test_fold_best_and_best_final(kind, n_merges, order, seed):
    """A main table plus a delta table holding both its own keys and new ones."""
    s0, s1 = _state(kind, 0), _state(kind, n_merges + 30)
    main, cap = table(s0, order, seed, cap=_cap(len(s0["counts"]) + len(s1["counts"])))
    assert ma.table_dict(*main) == s0["counts"]
    delta = count_into(s1, main, cap, order, seed)
    main_hi = main[0]
    assert not (delta[0][main_hi != 0]).any()  # new keys only in slots free in the main table
    merged_key = max(s0["counts"], key=s0["counts"].get)
    merged = ((merged_key >> 32) + 1, (merged_key & _MASK) + 1)
    new, parts = fold(main, delta, cap, merged, order, seed)
    want, want_best = ma.train_fold_best(s0["counts"], s1["counts"], merged_key)
    assert ma.table_dict(*new) == want
    ma.check_probe_chains(new[0], new[1])
    used = int((new[0] != 0).sum())
    assert used == len(set(s0["counts"]) | set(s1["counts"]))
    (best,) = run("train_best_final", *(p for p in parts), i64(GROUPS), i64(12345),
                  shapes=[(8,)], order=order, seed=seed, groups=1)
    assert best.tolist() == ma.train_best_final(*(p[:GROUPS] for p in parts), 12345)
    assert (int(best[0]), int(best[1]) & (1 << 64) - 1) == want_best
    assert best[2:4].tolist() == [used, 12345]


@pytest.mark.parametrize("order,seed", ORDERS)
def test_comparator_ties_go_to_the_smallest_pair(order, seed):
    """Equal counts in different threadgroups: the smallest (left_id, right_id) wins."""
    pairs = [(300, 2), (5, 900), (5, 7), (6, 1), (299, 3)]
    ids = np.array([x for p in pairs for x in p] + [9, 9, 9], dtype=np.int32)
    off = np.array([0, 2, 4, 6, 8, 10, 13])
    wcount = np.array([7, 7, 7, 7, 7, 3], dtype=np.int64)
    tok, prv, nxt, word_of = arrays.initial_state(ids, off)
    s = dict(tok=tok, nxt=nxt, word_of=word_of, wcount=np.r_[wcount, [0, 0]])
    cap = 2048  # 4 threadgroups of 256 threads, 2 slots each: the pairs spread over them
    main = empty(cap)
    delta = count_into(s, main, cap, order, seed)
    new, parts = fold(main, delta, cap, (0, 0), order, seed, groups=4)
    (best,) = run("train_best_final", *parts, i64(4), i64(0), shapes=[(8,)], order=order,
                  seed=seed, groups=1)
    assert (int(best[0]), int(best[1])) == (7, (5 << 32) | 7)
    assert ma.table_dict(*new) == {(a << 32) | b: 7 for a, b in pairs} | {(9 << 32) | 9: 6}


def _merge_step(s, a, b, c, order, seed):
    main, cap = table(s, order, seed, cap=_cap(len(s["counts"]) + 2 * len(s["vocab"]) + 1))
    n = len(s["tok"])
    (is_start,) = run("train_find_matches", s["tok"], s["prv"], s["nxt"], i64(n), i32(a),
                      i32(b), shapes=[(n,)], order=order, seed=seed)
    want_start = ma.train_find_matches(s["tok"], s["prv"], s["nxt"], a, b)
    np.testing.assert_array_equal(is_start, want_start)
    assert want_start.sum() > 0
    delta = run("train_merge_deltas", s["tok"], s["prv"], s["nxt"], s["word_of"], s["wcount"],
                is_start, main[0], main[1], i64(n), i32(a), i32(b), i32(c), u32(cap - 1),
                shapes=[(cap,)] * 4, order=order, seed=seed, init_value=0)
    want_deltas = ma.train_merge_deltas(s["tok"], s["prv"], s["nxt"], s["word_of"], s["wcount"],
                                        want_start, a, b, c)
    assert ma.delta_dict(main[0], main[1], *delta) == want_deltas
    assert not delta[0][main[0] != 0].any()
    tok, prv, nxt = run("train_apply_merge", s["tok"], s["prv"], s["nxt"], is_start, i64(n),
                        i32(c), shapes=[(n,)] * 3, order=order, seed=seed)
    w_tok, w_prv, w_nxt = ma.train_apply_merge(s["tok"], s["prv"], s["nxt"], want_start, c)
    live = w_tok != arrays.DEAD
    np.testing.assert_array_equal(tok, w_tok)
    np.testing.assert_array_equal(prv[live], w_prv[live])
    np.testing.assert_array_equal(nxt[live], w_nxt[live])
    # the next step's fold: the counts are exactly the pairs of the new state
    key = (a << 32) | b
    new, _ = fold(main, delta, cap, (a + 1, b + 1), order, seed)
    ma.check_probe_chains(new[0], new[1])
    want = ma.train_fold_best(s["counts"], want_deltas, key)[0]
    assert ma.table_dict(*new) == want == arrays.pair_counts(w_tok, w_nxt, s["word_of"],
                                                             s["wcount"])


@pytest.mark.parametrize("kind,n_merges", STATES)
@pytest.mark.parametrize("order,seed", ORDERS)
def test_merge_step_best_pair(kind, n_merges, order, seed):
    s = _state(kind, n_merges)
    _, key = arrays.best_pair(s["counts"])
    a, b = key >> 32, key & _MASK
    _merge_step(s, a, b, s["vocab"].merge(a, b), order, seed)


@pytest.mark.parametrize("kind,n_merges", [("code", 0), ("code", 60), ("prose", 0)])
@pytest.mark.parametrize("order,seed", ORDERS)
def test_merge_step_same_symbol_runs(kind, n_merges, order, seed):
    """(x, x) pairs: runs of one symbol merge pairwise from the left ("    " -> "  " "  ")."""
    s = _state(kind, n_merges)
    same = {k: c for k, c in s["counts"].items() if (k >> 32) == (k & _MASK)}
    a = max(same, key=same.get) >> 32
    _merge_step(s, a, a, s["vocab"].merge(a, a), order, seed)


@pytest.mark.parametrize("order,seed", ORDERS)
def test_counts_beyond_32_bits(order, seed):
    """Word counts near 2**32 make every sum carry into the high half, and merge deltas
    subtract across it: the 64-bit counts stay exact."""
    s = _state("code", 20, scale=(1 << 32) - 3)
    assert max(s["counts"].values()) > 1 << 36
    cap = _cap(len(s["counts"]))
    main = empty(cap)
    delta = count_into(s, main, cap, order, seed)
    assert ma.delta_dict(*main[:2], *delta) == s["counts"]
    _, key = arrays.best_pair(s["counts"])
    a, b = key >> 32, key & _MASK
    _merge_step(s, a, b, s["vocab"].merge(a, b), order, seed)


@pytest.mark.parametrize("order,seed", ORDERS)
def test_rehash(order, seed):
    s = _state("prose", 0)
    main, cap = table(s, order, seed)
    live = ma.table_dict(*main)
    dropped = sorted(live)[::3]
    counts = main[2].copy()
    for k in dropped:  # zero counts are left behind
        counts[(ma.slot_keys(main[0], main[1]) == np.uint64(k)) & (main[0] != 0)] = 0
    new_cap = _cap(len(live) - len(dropped))
    assert new_cap < cap
    new = empty(new_cap)
    delta = run("train_rehash", main[0], main[1], counts, i64(cap), new[0], new[1],
                u32(new_cap - 1), shapes=[(new_cap,)] * 4, order=order, seed=seed,
                init_value=0)
    want = ma.train_rehash(main[0], main[1], counts)
    assert want == {k: c for k, c in live.items() if k not in set(dropped)}
    folded, _ = fold(new, delta, new_cap, (0, 0), order, seed)
    assert ma.table_dict(*folded) == want
    assert int((folded[0] != 0).sum()) == len(want)
    ma.check_probe_chains(folded[0], folded[1])


def test_references_agree_with_the_shared_rules():
    """metal_arrays' hash is THE PAIR HASH of kernels/common/train_rules.h (a table built by the
    shaders has every key reachable from its home), and its table readers invert the layout."""
    keys = np.array([0, 1, (5 << 32) | 7, (1 << 63) | 12345], dtype=np.uint64)
    got = ma.pair_hash(keys)
    want = []
    for k in keys.tolist():
        for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
            k ^= k >> 33
            k = (k * mult) & ((1 << 64) - 1)
        k ^= k >> 33
        want.append(k)
    assert got.tolist() == want
    hi, lo = np.array([6, 0, 1], np.uint32), np.array([8, 0, 1], np.uint32)
    assert ma.table_dict(hi, lo, np.array([3, 9, -2])) == {(5 << 32) | 7: 3, 0: -2}
    key = (5 << 32) | 7
    home = int(ma.pair_hash(np.array([key], np.uint64))[0] % 8)
    hi, lo = np.zeros(8, np.uint32), np.zeros(8, np.uint32)
    hi[home], lo[home] = 6, 8
    ma.check_probe_chains(hi, lo)
    hi[home], lo[home] = 0, 0
    hi[(home + 2) % 8], lo[(home + 2) % 8] = 6, 8  # two slots past its home, with a gap
    with pytest.raises(ValueError, match="free slot"):
        ma.check_probe_chains(hi, lo)
