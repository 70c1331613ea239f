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


def state(**fields):
    """A state record (``shaders/train_common.metal``) with ``fields`` set, the rest 0."""
    st = np.zeros(metal.ST["SIZE"], np.int64)
    for k, v in fields.items():
        st[metal.ST[k]] = v
    return st


def merging(a, b, c=0):
    """The state record of a step that merges (a, b) -> c."""
    return state(MERGED=1, A=a, B=b, C=c)


def fold(main, delta, cap, merged, order, seed, groups=GROUPS):
    """train_fold_best; ``merged``: (a, b) of the step whose delta table this is, or None."""
    st = merging(*merged) if merged is not None else state()
    out = run("train_fold_best", *main, *delta, i64(cap), st,
              shapes=[(cap,)] * 3 + [(max(groups, 8),)] * 3, order=order, seed=seed,
              groups=groups)
    return tuple(out[:3]), out[3:]


def table(s, order, seed, cap=None):
    """The main table of the state's pair counts (count_pairs, then fold_best)."""
    cap = cap or _cap(len(s["counts"]))
    main = empty(cap)
    delta = count_into(s, main, cap, order, seed)
    return fold(main, delta, cap, None, order, seed)[0], cap


def token_tables(vocab, n_ids=1024):
    """THE TOKEN HASH's (lengths, hashes) of a vocabulary's learned ids, as the driver builds
    them."""
    lens, hashes = np.zeros(n_ids, np.uint64), np.zeros(n_ids, np.uint64)
    for i in vocab.learned:
        raw = vocab.token_bytes(i)
        lens[i], hashes[i] = len(raw), arrays.token_hash(raw)
    return lens, hashes


def select(parts, n_parts, st, vocab, order, seed, reserved=(), tables=None):
    """train_step_select on the emulator, checked against its reference; its outputs."""
    lens, hashes = tables if tables is not None else token_tables(vocab)
    res_len = np.zeros(8, np.uint64)
    res_hash = np.zeros(8, np.uint64)
    for k, r in enumerate(reserved):
        res_len[k], res_hash[k] = len(r), arrays.token_hash(r)
    st = st.copy()
    st[metal.ST["N_RES"]] = len(reserved)
    parts = [np.ascontiguousarray(p) for p in parts]
    out = run("train_step_select", *parts, i64(n_parts), st, lens, hashes, res_len, res_hash,
              i64(len(lens)), shapes=[(len(st),), (len(lens),), (len(lens),)], order=order,
              seed=seed, groups=1)
    want = ma.train_step_select(*(p[:n_parts] for p in parts), st, lens, hashes, res_len,
                                res_hash)
    for got, w in zip(out, want):
        np.testing.assert_array_equal(got, w)
    return out


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
    new, parts = fold(main, delta, cap, (merged_key >> 32, merged_key & _MASK), order, seed)
    want, want_best = ma.train_fold_best(s0["counts"], s1["counts"], merged_key)
    assert ma.table_dict(*new) == want
    ma.check_probe_chains(new[0], new[1])
    used = int((new[0] != 0).sum())
    assert used == len(set(s0["counts"]) | set(s1["counts"]))
    # (the host's answer for the best pair: the s0 pair's token may be one s1 has learned)
    st = state(VOCAB_LEN=len(s1["vocab"]), VOCAB_TARGET=10**6, MIN_COUNT=1, USED_LIMIT=cap,
               N_SYM=len(s1["tok"]), NEXT_ID=len(s1["vocab"]), STEPS=7,
               FORCED_KEY=np.uint64(want_best[1]).astype(np.int64), FORCED_ID=-1)
    out = select(parts, GROUPS, st, s1["vocab"], order, seed)
    assert out[0][metal.ST["MERGED"]] == 1
    key = (int(out[0][metal.ST["A"]]) << 32) | int(out[0][metal.ST["B"]])
    assert (int(out[0][metal.ST["COUNT"]]), key) == want_best
    assert out[0][metal.ST["USED"]] == used and out[0][metal.ST["STEPS"]] == 8


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
    new, parts = fold(main, delta, cap, None, order, seed, groups=4)
    st = state(VOCAB_LEN=1000, VOCAB_TARGET=2000, MIN_COUNT=1, USED_LIMIT=cap, N_SYM=16,
               NEXT_ID=1000, FORCED_KEY=-1)
    out = select(parts, 4, st, Vocab(), order, seed)
    assert [int(out[0][metal.ST[k]]) for k in ("MERGED", "A", "B", "C", "COUNT")] == [
        1, 5, 7, 1000, 7]
    assert ma.table_dict(*new) == {(a << 32) | b: 7 for a, b in pairs} | {(9 << 32) | 9: 6}


def _merge_step(s, a, b, c, order, seed):
    main, cap = table(s, order, seed, cap=_cap(len(s["counts"]) + 2 * len(s["vocab"]) + 1))
    n = len(s["tok"])
    (is_start,) = run("train_find_matches", s["tok"], s["prv"], s["nxt"], i64(n),
                      merging(a, b, c), shapes=[(n,)], order=order, seed=seed)
    want_start = ma.train_find_matches(s["tok"], s["prv"], s["nxt"], a, b)
    np.testing.assert_array_equal(is_start, want_start)
    assert want_start.sum() > 0
    delta = run("train_merge_deltas", s["tok"], s["prv"], s["nxt"], s["word_of"], s["wcount"],
                is_start, main[0], main[1], i64(n), merging(a, b, c), u32(cap - 1),
                shapes=[(cap,)] * 4, order=order, seed=seed, init_value=0)
    want_deltas = ma.train_merge_deltas(s["tok"], s["prv"], s["nxt"], s["word_of"], s["wcount"],
                                        want_start, a, b, c)
    assert ma.delta_dict(main[0], main[1], *delta) == want_deltas
    assert not delta[0][main[0] != 0].any()
    tok, prv, nxt = run("train_apply_merge", s["tok"], s["prv"], s["nxt"], is_start, i64(n),
                        merging(a, b, c), shapes=[(n,)] * 3, order=order, seed=seed)
    w_tok, w_prv, w_nxt = ma.train_apply_merge(s["tok"], s["prv"], s["nxt"], want_start, c)
    live = w_tok != arrays.DEAD
    np.testing.assert_array_equal(tok, w_tok)
    np.testing.assert_array_equal(prv[live], w_prv[live])
    np.testing.assert_array_equal(nxt[live], w_nxt[live])
    # the next step's fold: the counts are exactly the pairs of the new state
    key = (a << 32) | b
    new, _ = fold(main, delta, cap, (a, b), order, seed)
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
    folded, _ = fold(new, delta, new_cap, None, order, seed)
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


SELECT_CASES = {
    # name: (state fields, reserved spellings, (STOP, MERGED, C) expected)
    "merge": ({}, (), (0, 1, 300)),
    "target": ({"VOCAB_LEN": 400}, (), (metal.STOP["TARGET"], 0, None)),
    "min_count": ({"MIN_COUNT": 10}, (), (metal.STOP["MIN"], 0, None)),
    "no_room": ({"USED_LIMIT": 12}, (), (metal.STOP["REHASH"], 0, None)),
    "reserved": ({}, (b"xy", b"ab"), (metal.STOP["RESERVED"], 0, None)),
    "learned_before": ({}, (), (metal.STOP["RESERVED"], 0, None)),  # (id 290 is spelled "ab")
    "forced_special": ({"FORCED_KEY": "ab", "FORCED_ID": 5}, (b"ab",), (0, 1, 5)),
    "forced_new": ({"FORCED_KEY": "ab", "FORCED_ID": -1}, (b"ab",), (0, 1, 300)),
    "stays_stopped": ({"STOP": metal.STOP["RESERVED"]}, (), (metal.STOP["RESERVED"], 0, None)),
}


@pytest.mark.parametrize("case", list(SELECT_CASES))
@pytest.mark.parametrize("order,seed", ORDERS)
def test_step_select_stops_and_ids(case, order, seed):
    """Every way a step ends, on partials whose best pair is (a, b) = ("a", "b") with count 9
    (a tie with (99, 1) broken by the smaller key): the record and the token tables equal the
    reference, and the stop / merge / new id are the ones the rule gives."""
    v = Vocab()
    a, b = v.strings.index(chr(97)), v.strings.index(chr(98))
    fields, reserved, (stop, merged, c) = SELECT_CASES[case]
    st = state(VOCAB_LEN=300, VOCAB_TARGET=400, MIN_COUNT=2, USED_LIMIT=1000, N_SYM=50,
               NEXT_ID=300, FORCED_KEY=-1, USED=0)
    key = (a << 32) | b
    for k, x in fields.items():
        st[metal.ST[k]] = key if x == "ab" else x  # ("ab": the host's answer for this pair)
    parts = [np.array([3, 9, 0, 9, 1, 0, 0, 0], np.int64),
             np.array([(1 << 32) | 2, key, ~0 & ((1 << 64) - 1), (a + 2 << 32) | 1, 5,
                       0, 0, 0], np.uint64),
             np.array([1, 2, 0, 1, 1, 0, 0, 0], np.int64)]
    # the rule's spelling of (a, b): reserved entries are byte strings of the joined token
    spelled = v.token_bytes(a) + v.token_bytes(b)
    reserved = tuple(spelled if r == b"ab" else r for r in reserved)
    tables = token_tables(v)
    if case == "learned_before":
        tables[0][290], tables[1][290] = len(spelled), arrays.token_hash(spelled)
    out_st, lens, hashes = select(parts, 5, st, v, order, seed, reserved=reserved, tables=tables)
    assert out_st[metal.ST["STOP"]] == stop and out_st[metal.ST["MERGED"]] == merged
    assert out_st[metal.ST["USED"]] == 5
    if merged:
        assert (out_st[metal.ST["A"]], out_st[metal.ST["B"]]) == (a, b)
        assert out_st[metal.ST["C"]] == c and out_st[metal.ST["COUNT"]] == 9
        assert (int(lens[c]), int(hashes[c])) == (len(spelled), arrays.token_hash(spelled))
    if case == "no_room":
        assert out_st[metal.ST["NEED"]] == 5 + 2 * 9
