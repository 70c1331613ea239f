"""The Metal trainer's device merge loop (``gputok.backends.metal.train.train_on_metal``, the code
a Mac runs) on the emulator over ``mlx[cpu]`` arrays: blocks of steps queued with no read-back,
the pair, the new id and every stop chosen on the device, merges read once per block. Its merges
equal the CPU trainer's with every stop forced (the table grown, rebuilt smaller, HF's rule 7
answered by the host, blocks cut short, positions compacted), on self-overlapping runs, repeated
pairs and ties under two patterns and several min_frequency values; with a step left out they
differ (the comparisons see a broken loop).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import testdata
from conftest import fuzz_examples
from cpu_ref.patterns import resolve_pattern
from gputok.backends import train_arrays as arrays
from gputok.train import cpu, words
from gputok.train.vocab import Vocab

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]' on "
                                            "Linux runs these tests")
from emulator.mlx_bridge import metal_kernel_maker  # noqa: E402
from gputok.backends.metal import train as metal  # noqa: E402

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle+yield", 2)]
EOT = "<|endoftext|>"


def _factory(order: str, seed: int, skip: str = "") -> metal.KernelFactory:
    """The emulator's kernels; ``skip`` names a shader whose launches are left out (its outputs
    are then its inputs, or zeros: the step does nothing there)."""
    base = metal_kernel_maker(order=order.split("+")[0], seed=seed,
                              yield_on_atomic=order.endswith("+yield"))

    def make(**kw):
        fn = base(**kw)
        if not kw["name"].startswith(skip) or not skip:
            return fn

        def call(**c):
            if skip in ("train_merge_deltas", "train_find_matches"):
                return [mx.zeros(s, dtype=d) for s, d in zip(c["output_shapes"],
                                                              c["output_dtypes"])]
            return list(c["inputs"][:len(c["output_shapes"])])
        return call

    return metal.KernelFactory(make=make, max_groups=2)


@functools.lru_cache(maxsize=None)
def _words(kind: str, pattern: str = "cl100k"):
    docs = testdata.corpus(kind, max_mb=0.03)
    return words.count_words(((t, 1) for t in docs), resolve_pattern(pattern))


def _run(wc, specials, vocab_size, min_frequency, factory, tight=False, **kw):
    """(merges, vocab strings, stats) of the device loop, and the CPU trainer's (merges,
    strings). ``tight``: a first table just large enough for the first pairs (so it grows)."""
    v_cpu = Vocab(list(specials))
    want = cpu.train_words(wc, v_cpu, vocab_size=vocab_size, min_frequency=min_frequency)
    v = Vocab(list(specials))
    ids, off, counts = cpu.word_arrays(wc, v)
    stats: dict = {}
    if tight:
        tok, _, nxt, word_of = arrays.initial_state(ids, off)
        first = arrays.pair_counts(tok, nxt, word_of, counts)
        kw["initial_capacity"] = int(len(first) / 0.75) + 1
    got = metal.train_on_metal(ids, off, counts, v, vocab_size=vocab_size,
                               min_frequency=min_frequency, kernels=factory, max_groups=2,
                               stats=stats, **kw)
    return (got, v.strings, stats), (want, v_cpu.strings)


@pytest.mark.parametrize("order,seed", ORDERS)
@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
def test_loop_equals_cpu_with_every_stop(kind, vocab_size, order, seed, monkeypatch):
    """Small blocks and a small first table: blocks end full, on a grown table and (with
    specials spelled like frequent merges) on HF's rule 7; the merges and ids equal the CPU
    trainer's, and the host waited once per block, not once per merge."""
    reads = []
    real = metal.read_back
    monkeypatch.setattr(metal, "read_back", lambda xs: reads.append(len(xs)) or real(xs))
    specials = [EOT, "th", "the", "in"]  # (rule 7: learned "th", "the", "in" take these ids)
    (got, strings, stats), (want, want_strings) = _run(
        _words(kind), specials, vocab_size, 2, _factory(order, seed), block_steps=16,
        tight=True, compact_at=0.05)
    print(f"\n[metal loop] {kind} ({order}): {len(got)} merges, {stats}")
    assert got == want and strings == want_strings
    assert len(reads) == stats["blocks"] < len(got) / 8
    assert stats.get("REHASH", 0) >= 1 and stats.get("compact", 0) >= 1, stats
    if kind != "multilingual":
        assert stats.get("RESERVED", 0) >= 1, stats


def test_loop_default_sizes():
    """The default block and first table (2 slots per possible byte pair): one block, the
    same merges."""
    (got, strings, stats), (want, want_strings) = _run(
        _words("prose"), (), 400, 2, _factory("reverse", 0))
    assert got == want and strings == want_strings
    assert stats == {"blocks": 1, "TARGET": 1}, stats


def test_loop_shrinks_the_table(monkeypatch):
    """The default first table, a low shrink floor and small blocks: between two blocks the
    table is rebuilt smaller (after the last step's deltas are folded in), the same merges."""
    monkeypatch.setattr(metal, "_MIN_SHRINK", 1024)
    (got, strings, stats), (want, want_strings) = _run(
        _words("prose"), (), 400, 2, _factory("reverse", 0), block_steps=32)
    assert got == want and strings == want_strings
    assert stats.get("shrink", 0) >= 1, stats


# runs of one symbol (a pair overlapping itself: "aaaa" merges (a,a) twice, not three times),
# pairs repeated in a word, and counts that tie (HF's rule picks among them)
REPEATS = ["aaaa aaaa aaaaa aaa aaaaaa abab ababab baba aab aba bab a",
           "aaaa bbbb cccc abcabc cabcab aaaa bbbb cccc dd dd dd xyxy yxyx",
           "\u00e9\u00e9\u00e9\u00e9 \u4e2d\u4e2d\u4e2d \U0001f600\U0001f600 aaaa aaaa"]


@pytest.mark.parametrize("pattern", ["gpt2", r"\S+|\s+"])
@pytest.mark.parametrize("min_frequency", [1, 3, 6])
def test_loop_repeats_ties_min_frequency(pattern, min_frequency):
    """Self-overlapping runs, repeated pairs and tied counts under two patterns and three
    min_frequency values (the loop stops on the device when the best count falls below it)."""
    pat = resolve_pattern(pattern) if pattern == "gpt2" else pattern
    wc = words.count_words(((t, 1 + k % 3) for k, t in enumerate(REPEATS * 3)), pat)
    (got, strings, stats), (want, want_strings) = _run(
        wc, (), 300, min_frequency, _factory("shuffle+yield", min_frequency), block_steps=4,
        tight=True)
    assert got == want and strings == want_strings and len(got) > 3
    assert stats.get("MIN", 0) == 1 or len(strings) == 300


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(alphabet=st.sampled_from(["ab", "a b", "aab  ", "xyz{\n", "  \t"]), data=st.data(),
       vocab_extra=st.integers(1, 40), seed=st.integers(0, 1000), block=st.sampled_from([1, 3]),
       min_frequency=st.integers(0, 3))
def test_loop_on_random_corpora(alphabet, data, vocab_extra, seed, block, min_frequency):
    """Runs of one symbol, ties, tiny and empty words, blocks of one and three steps, a tight
    first table, threads shuffled with atomics interleaved: the device loop = CPU trainer."""
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=50), min_size=1, max_size=6))
    wc = words.count_words(((t, 1) for t in texts), r"\S+|\s+")
    (got, strings, _), (want, want_strings) = _run(
        wc, (), 256 + vocab_extra, min_frequency, _factory("shuffle+yield", seed),
        block_steps=block, tight=True)
    assert got == want and strings == want_strings


@pytest.mark.parametrize("broken", ["train_merge_deltas", "train_apply_merge",
                                    "train_find_matches"])
def test_loop_fails_with_a_step_left_out(broken):
    """The comparisons above see a broken loop: without the count updates (deltas), the
    rewrite of the positions or the matches, the merges differ from the CPU trainer's."""
    try:
        (got, _, _), (want, _) = _run(_words("prose"), (), 340, 2,
                                      _factory("forward", 0, skip=broken), block_steps=16)
    except (ValueError, RuntimeError, IndexError):
        return  # (a loop that notices its state is inconsistent is also a failure seen)
    assert got != want
