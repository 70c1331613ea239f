"""The Metal trainer's indexed loop (``gputok.backends.metal.train_index``, the code a Mac runs:
``shaders/train_index_steps.metal``, a block of steps in one threadgroup over a pair -> positions
index) on the emulator over ``mlx[cpu]`` arrays, in three thread orders. Its merges equal the CPU
trainer's with every stop forced (table grown, candidates chosen again, pool repacked, gain
buffers grown, HF's rule 7 answered by the host, blocks ended full); a step's work is counted and
does not grow with an unrelated part of the corpus; with the index update broken the merges
differ.
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import testdata
from conftest import fuzz_examples
from cpu_ref.patterns import resolve_pattern
from gputok.train import cpu, words
from gputok.train.vocab import Vocab

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]' on "
                                            "Linux runs these tests")
from emulator.mlx_bridge import metal_kernel_maker  # noqa: E402
from gputok.backends.metal import train_index as ix  # noqa: E402
from gputok.backends.metal.kernels import KernelFactory  # noqa: E402
from gputok.backends.metal.train_reference import check_probe_chains, pair_hash  # noqa: E402
from test_metal_train_loop import REPEATS  # noqa: E402

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle+yield", 2)]
EOT = "<|endoftext|>"


def _factory(order: str, seed: int, edit: "tuple[str, str] | None" = None) -> KernelFactory:
    """The emulator's kernels; ``edit`` (old, new) rewrites the step shader's source once (a
    broken index update, for the tests that must see it)."""
    base = metal_kernel_maker(order=order.split("+")[0], seed=seed,
                              yield_on_atomic=order.endswith("+yield"))

    def make(**kw):
        if edit is not None and kw["name"].startswith("train_index_steps"):
            assert kw["source"].count(edit[0]) == 1, edit[0]
            kw = dict(kw, source=kw["source"].replace(*edit))
        return base(**kw)

    return KernelFactory(make=make, max_groups=2)


@functools.lru_cache(maxsize=None)
def _words(kind: str, pattern: str = "cl100k"):
    docs = testdata.corpus(kind, max_mb=0.03)
    return words.count_words(((t, 1) for t in docs), resolve_pattern(pattern))


def _run(wc, specials, vocab_size, min_frequency, factory, **kw):
    """(merges, vocab strings, stats) of the indexed loop, and the CPU trainer's."""
    v_cpu = Vocab(list(specials))
    want = cpu.train_words(wc, v_cpu, vocab_size=vocab_size, min_frequency=min_frequency)
    v = Vocab(list(specials))
    ids, off, counts = cpu.word_arrays(wc, v)
    stats: dict = {}
    got = ix.train_on_metal(ids, off, counts, v, vocab_size=vocab_size,
                            min_frequency=min_frequency, kernels=factory, stats=stats, **kw)
    return (got, v.strings, stats), (want, v_cpu.strings)


# small enough that every stop happens on the test corpora
TIGHT = dict(block_steps=16, candidates=64, initial_capacity=1024, gain_room=16, pool_room=64)


@pytest.mark.parametrize("order,seed", ORDERS)
@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
def test_index_loop_equals_cpu_with_every_stop(kind, vocab_size, order, seed, monkeypatch):
    """Blocks end full, on a grown table, on candidates that ran out, on a full pool or gain
    buffer and (specials spelled like frequent merges) on HF's rule 7; the merges and ids equal
    the CPU trainer's, and the host read the state once per launch plus once per move."""
    reads = []
    real = ix.read_back
    monkeypatch.setattr(ix, "read_back", lambda xs: reads.append(len(xs)) or real(xs))
    specials = [EOT, "th", "the", "in"]  # (rule 7: learned "th", "the", "in" take these ids)
    (got, strings, stats), (want, want_strings) = _run(
        _words(kind), specials, vocab_size, 2, _factory(order, seed), **TIGHT)
    print(f"\n[metal index] {kind} ({order}): {len(got)} merges, "
          f"{ {k: v for k, v in stats.items() if k not in ('work', 'copied')} }")
    assert got == want and strings == want_strings
    assert stats["blocks"] < len(got) / 4
    moves = sum(stats.get(k, 0) for k in ("REHASH", "REBUILD", "POOL", "RELIST"))
    assert len(reads) <= stats["blocks"] + 2 * moves
    for stop in ("BLOCK", "REHASH", "REBUILD", "POOL", "GAINS"):
        assert stats.get(stop, 0) >= 1, (stop, stats)
    if kind != "multilingual":
        assert stats.get("RESERVED", 0) >= 1, stats
    assert len(stats["work"]) == len(got)


def test_index_loop_default_sizes():
    """The default block, candidates and first table: one launch, the same merges."""
    (got, strings, stats), (want, want_strings) = _run(
        _words("prose"), (), 400, 2, _factory("reverse", 0))
    assert got == want and strings == want_strings
    assert stats["blocks"] == 1 and stats["TARGET"] == 1, stats


@pytest.mark.parametrize("pattern", ["gpt2", r"\S+|\s+"])
@pytest.mark.parametrize("min_frequency", [1, 3, 6])
def test_index_loop_repeats_ties_min_frequency(pattern, min_frequency):
    """Self-overlapping runs, repeated pairs and tied counts (the scan loop's REPEATS) under two
    patterns and three min_frequency values (the loop stops on the device when the best count
    falls below it)."""
    pat = resolve_pattern(pattern) if pattern == "gpt2" else pattern
    wc = words.count_words(((t, 1 + k % 3) for k, t in enumerate(REPEATS * 3)), pat)
    (got, strings, stats), (want, want_strings) = _run(
        wc, (), 300, min_frequency, _factory("shuffle+yield", min_frequency), block_steps=4,
        candidates=8, gain_room=2, pool_room=0)
    assert got == want and strings == want_strings and len(got) > 3
    assert stats.get("MIN", 0) == 1 or len(strings) == 300


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(alphabet=st.sampled_from(["ab", "a b", "aab  ", "xyz{\n", "  \t"]), data=st.data(),
       vocab_extra=st.integers(1, 40), seed=st.integers(0, 1000), block=st.sampled_from([1, 3]),
       min_frequency=st.integers(0, 3), candidates=st.sampled_from([8, 16, 1 << 10]))
def test_index_loop_on_random_corpora(alphabet, data, vocab_extra, seed, block, min_frequency,
                                      candidates):
    """Runs of one symbol, ties, tiny and empty words, blocks of one and three steps, few
    candidates, threads shuffled with atomics interleaved: the indexed loop = CPU trainer."""
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=50), min_size=1, max_size=6))
    wc = words.count_words(((t, 1) for t in texts), r"\S+|\s+")
    (got, strings, _), (want, want_strings) = _run(
        wc, (), 256 + vocab_extra, min_frequency, _factory("shuffle+yield", seed),
        block_steps=block, candidates=candidates, gain_room=4, pool_room=8)
    assert got == want and strings == want_strings


# the index update broken once: a pair gained filed at the match instead of its left symbol / a
# pair formed by a step never offered as a candidate / counts that never fall
# (a list that names a position twice would let two threads rewrite one match: memory outside
# the arrays, which the emulator cannot always catch before the process dies)
BROKEN = {
    "filing": ("      gain_pos[g] = (uint)d.at[k];", "      gain_pos[g] = (uint)i;"),
    "candidates": ("        out_cand[at] = s;", "        (void)s;"),
    "decrements": ("mask, d.key[k], d.delta[k],", "mask, d.key[k], max(d.delta[k], 0l),"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_index_loop_fails_with_the_index_update_broken(broken):
    """The comparisons above see a broken index: the merges differ from the CPU trainer's (or the
    loop notices its state is inconsistent)."""
    try:
        (got, _, _), (want, _) = _run(_words("prose"), (), 340, 2,
                                      _factory("forward", 0, edit=BROKEN[broken]),
                                      block_steps=16)
    except (ValueError, RuntimeError, IndexError):
        return
    assert got != want


# ---------------------------------------------------------------- a step's work

# ASCII bytes (one byte a character): the pair's words take X, the unrelated words Y
X = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("0"), ord("9"))]
Y = [chr(c) for c in range(33, 48) if chr(c) not in X] + list("cdefghijklmnopqrstuvwxyz")


def _scaling_words(k: int, unrelated: int) -> Counter:
    """``k`` words "ab" + X[i] counted 5 times (the pair (a, b): 5k, merged first, at k
    positions), and ``unrelated`` distinct two-character words over Y counted once (pairs of
    count 1: with min_frequency 2 never merged, and no occurrence of any merged pair)."""
    wc = Counter({"ab" + X[i]: 5 for i in range(k)})
    pairs = [y + z for y in Y for z in Y]
    assert unrelated <= len(pairs)
    wc.update({p: 1 for p in pairs[:unrelated]})
    return wc


def test_step_work_follows_the_merged_pairs_occurrences_not_the_corpus():
    """Each step records what it did: the list entries it checked + its matches + its gains,
    the candidates it scanned (at most the candidates' room) and rule 7's probes of the ids'
    spellings (a set: a few, whatever the vocabulary).
    Doubling an unrelated part of the corpus (distinct words, pairs never merged) leaves every
    step's occurrence work as it was, while the launch's copy of the state grows with it; the
    first step's work is 3 per occurrence of (a, b) (its list entry, its match, its one gain
    (AB, x)) and doubles with them."""
    runs = {}
    for k, unrelated in ((10, 0), (10, 300), (10, 600), (20, 600)):
        wc = _scaling_words(k, unrelated)
        (got, strings, stats), (want, want_strings) = _run(
            wc, (), 400, 2, _factory("reverse", 0), block_steps=8, candidates=32)
        assert got == want and strings == want_strings
        assert len(got) == k + 1  # (a, b), then (AB, x) for each x
        runs[k, unrelated] = stats
        steps = len(got)
        print(f"\n[step work] k={k} unrelated={unrelated}: occurrence work per step "
              f"{[w[0] for w in stats['work']]}, candidates scanned <= "
              f"{max(w[1] for w in stats['work'])}, rule 7 probes <= "
              f"{max(w[2] for w in stats['work'])}, copy per launch "
              f"{stats['copied'][0]} elements ({sum(stats['copied']) / steps:.0f} a step "
              f"over {stats['blocks']} launches)")
    occ = {key: [w[0] for w in s["work"]] for key, s in runs.items()}
    assert occ[10, 0] == occ[10, 300] == occ[10, 600]
    assert occ[10, 0][0] == 3 * 10 and occ[20, 600][0] == 3 * 20
    assert occ[10, 0][1:] == [2] * 10  # (AB, x): its one list entry and its match, no gain
    assert all(w[1] <= 32 and w[2] <= 8 for s in runs.values() for w in s["work"])
    copied = [runs[10, u]["copied"][0] for u in (0, 300, 600)]
    assert copied[0] < copied[1] < copied[2]


# ---------------------------------------------------------------- the host's table

@pytest.mark.parametrize("load", [0.1, 0.5, 0.75])
def test_place_keys_keeps_probe_chains(load):
    """The host's table layout (the first count, a rehash) is what linear probing would build:
    every key once, every slot from its home to it used, also where chains wrap past the end."""
    rng = np.random.default_rng(int(load * 100))
    cap = 1 << 12
    keys = np.unique(rng.integers(0, 1 << 40, size=int(load * cap), dtype=np.uint64))
    table = ix.table_from(keys, np.arange(1, len(keys) + 1), np.zeros(len(keys), np.uint32),
                          np.zeros(len(keys), np.uint32), cap).reshape(ix.TABLE_WORDS, cap)
    check_probe_chains(table[0], table[1])
    got_keys, counts, used = ix.table_view(table.reshape(-1), cap)
    assert sorted(got_keys[used].tolist()) == sorted(keys.tolist())
    assert sorted(counts[used].tolist()) == list(range(1, len(keys) + 1))


def test_place_keys_wraps_a_crowded_end():
    """Keys homed in the last slots run past the end and take the first ones."""
    cap = 1 << 10
    pool = np.arange(1 << 20, dtype=np.uint64)
    homes = pair_hash(pool) & np.uint64(cap - 1)
    keys = pool[homes >= cap - 4][:40]
    slots = ix.place_keys(keys, cap)
    assert (slots < 10).sum() > 0 and len(set(slots.tolist())) == len(keys)
    table = ix.table_from(keys, np.ones(len(keys)), np.zeros(len(keys)), np.zeros(len(keys)),
                          cap).reshape(ix.TABLE_WORDS, cap)
    check_probe_chains(table[0], table[1])


# ---------------------------------------------------------------- one launch, whole state

@pytest.mark.parametrize("order,seed", ORDERS)
def test_one_launch_equals_its_reference(order, seed):
    """One launch of train_index_steps with room for everything: its records, the live
    positions, every pair's count and every counted pair's occurrence list equal
    ``train_reference.train_index_steps`` (CUDA's list-driven loop on numpy), and the table keeps
    its probe chains."""
    from gputok.backends import train_arrays as arrays
    from gputok.backends.metal import train_reference as ref

    wc = words.count_words(((t, 1 + k % 3) for k, t in enumerate(REPEATS * 2)),
                           resolve_pattern("gpt2"))
    v = Vocab([])
    ids, off, counts = cpu.word_arrays(wc, v)
    steps = 24
    host, st = ix.setup(ids, off, counts, v, vocab_size=1000, min_frequency=1,
                        block_steps=steps)
    kernel = _factory(order, seed)("train_index_steps")
    out = ix.launch(kernel, {k: mx.array(x) for k, x in host.items()
                             if k not in ("reserved", "n_sym")}, st)
    n, cap = int(st[ix.ST["N"]]), int(st[ix.ST["CAP"]])
    links = np.array(out["links"])
    tok, prv, nxt = links[:n], links[n:2 * n], links[2 * n:]
    want = ref.train_index_steps(*(host["links"].reshape(3, n)), host["word_of"],
                                 host["wcount"], len(v), steps)
    w_recs, w_tok, w_prv, w_nxt, w_counts, w_lists = want
    got_st = np.array(out["out_state"])
    assert got_st[ix.ST["STOP"]] == ix.STOP["BLOCK"] and len(w_recs) == steps
    recs = np.array(out["rec"]).reshape(-1, ix.REC)[:, :4]
    assert [tuple(r) for r in recs.tolist()] == w_recs
    live = w_tok != arrays.DEAD
    assert (tok == w_tok).all()
    assert (prv[live] == w_prv[live]).all() and (nxt[live] == w_nxt[live]).all()
    table = np.array(out["table"])
    keys, got_counts, used = ix.table_view(table, cap)
    counted = used & (got_counts > 0)
    assert dict(zip(keys[counted].tolist(), got_counts[counted].tolist())) == w_counts
    t = table.reshape(ix.TABLE_WORDS, cap)
    pool = np.array(out["pool"])
    got_lists = {int(keys[s]): set(pool[t[5, s]:t[5, s] + t[4, s]].tolist())
                 for s in np.flatnonzero(counted)}
    assert got_lists == w_lists
    check_probe_chains(t[0], t[1])
    assert int(got_st[ix.ST["USED"]]) == int(used.sum())


def test_a_gained_pair_with_a_list_stops_for_a_relist():
    """A merge whose id already exists (rule 7's answer) can form pairs that have lists; the
    step then stops the block (RELIST, the merge recorded) and the host's lists from the
    positions match the counts the device kept."""
    from gputok.backends import train_arrays as arrays

    wc = Counter({"abab": 3, "bab": 2, "aab": 1})
    v = Vocab([])
    ids, off, counts = cpu.word_arrays(wc, v)
    host, st = ix.setup(ids, off, counts, v, vocab_size=1000, min_frequency=1, block_steps=8)
    a, b = v.ids["a"], v.ids["b"]
    # the first merge is (a, b) (count 3 * 2 + 1); say its id is b's: (b, b) and (a, b) form
    # again, and (b, a) already has a list
    st[ix.ST["FORCED_KEY"]], st[ix.ST["FORCED_ID"]] = (a << 32) | b, b
    kernel = _factory("forward", 0)("train_index_steps")
    out = ix.launch(kernel, {k: mx.array(x) for k, x in host.items()
                             if k not in ("reserved", "n_sym")}, st)
    got_st = np.array(out["out_state"])
    assert got_st[ix.ST["STOP"]] == ix.STOP["RELIST"] and got_st[ix.ST["STEPS"]] == 1
    assert np.array(out["rec"]).reshape(-1, ix.REC)[0, :3].tolist() == [a, b, b]
    n, cap = int(st[ix.ST["N"]]), int(st[ix.ST["CAP"]])
    links = np.array(out["links"])
    table, cap2, _, _, _ = ix.index_from_positions(links[:n], links[2 * n:], host["word_of"],
                                                  host["wcount"], cap)
    keys, cnt, used = ix.table_view(table, cap2)
    relisted = dict(zip(keys[used & (cnt > 0)].tolist(), cnt[used & (cnt > 0)].tolist()))
    dkeys, dcnt, dused = ix.table_view(np.array(out["table"]), cap)
    kept = dict(zip(dkeys[dused & (dcnt > 0)].tolist(), dcnt[dused & (dcnt > 0)].tolist()))
    assert relisted == kept == arrays.pair_counts(links[:n], links[2 * n:], host["word_of"],
                                                  host["wcount"])
