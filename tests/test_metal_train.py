"""The Metal training backend, whole, on Linux: ``gputok.train_bpe(..., backend="metal")`` with
``mx.fast.metal_kernel`` replaced by the emulator (``tests/emulator/mlx_bridge.py``) over
``mlx[cpu]`` arrays. Everything else is the code a Mac runs: the kernel factory, the interface
checks, the MLX ops and read-backs of ``gputok.backends.metal.train``. The oracle is HF's BpeTrainer.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref.hf import BYTE_TO_UNICODE
from cpu_ref.patterns import resolve_pattern
from gputok.backends.metal import iface as metal_iface
from gputok.train import cpu, words
from gputok.train.vocab import Vocab
from test_train import EOT, RULE_CASES, WS, hf_train

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]' on "
                                            "Linux runs these tests")
from emulator.mlx_bridge import metal_kernel_maker  # noqa: E402
from gputok.backends.metal import train as metal  # noqa: E402


@pytest.fixture
def emulated(request):
    """train_bpe(backend="metal") on the emulator, in the order given by the test's param."""
    order, seed = getattr(request, "param", ("shuffle", 1))
    calls: list[str] = []
    previous = metal.set_kernel_factory(metal.KernelFactory(
        make=metal_kernel_maker(order=order.split("+")[0], seed=seed,
                                yield_on_atomic=order.endswith("+yield"), calls=calls),
        max_groups=4))
    try:
        yield calls
    finally:
        metal.set_kernel_factory(previous)


def _merge_strings(enc):
    to_u = lambda i: "".join(BYTE_TO_UNICODE[b] for b in enc.decode_single_token_bytes(i))  # noqa
    return [(to_u(a), to_u(b)) for a, b, _ in enc.trained_merges]


@functools.lru_cache(maxsize=None)
def _docs(kind: str) -> tuple[str, ...]:
    return tuple(testdata.corpus(kind, max_mb=0.03))


@functools.lru_cache(maxsize=None)
def _hf(kind: str, vocab_size: int):
    return hf_train(_docs(kind), vocab_size, "cl100k", [EOT], 2)


@pytest.mark.parametrize("emulated", [("forward", 0), ("reverse", 0), ("shuffle+yield", 2)],
                         indirect=True, ids=["forward", "reverse", "shuffle+yield"])
@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
def test_metal_training_equals_hf(emulated, kind, vocab_size):
    enc = gputok.train_bpe(list(_docs(kind)), vocab_size=vocab_size, special_tokens=[EOT],
                           backend="metal")
    hf_merges, hf_vocab, _ = _hf(kind, vocab_size)
    assert gputok.train.last_stats.backend == "metal"
    assert _merge_strings(enc) == hf_merges
    assert enc.n_vocab == len(hf_vocab) == vocab_size
    # (the indexed loop: one shader, a block of steps a launch)
    assert set(emulated) == {metal_iface.load("train_index_steps").kernel_name}


@pytest.mark.parametrize("case", list(RULE_CASES))
def test_rule_cases(emulated, case):
    texts, vocab_size, pattern, specials, min_frequency, expected = RULE_CASES[case]
    enc = gputok.train_bpe(texts, vocab_size=vocab_size, pattern=pattern,
                           special_tokens=specials, min_frequency=min_frequency, backend="metal")
    assert _merge_strings(enc) == expected
    hf_merges, hf_vocab, _ = hf_train(texts, vocab_size, pattern, specials, min_frequency)
    assert hf_merges == expected and enc.n_vocab == len(hf_vocab)


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(alphabet=st.sampled_from(["ab", "a b", "aab  ", "xyz{\n", "  \t", "é a"]),
       data=st.data(), vocab_extra=st.integers(1, 40), min_frequency=st.integers(0, 3),
       seed=st.integers(0, 1000))
def test_random_corpora_equal_hf(alphabet, data, vocab_extra, min_frequency, seed):
    """Runs of one symbol, ties, tiny and empty words, shuffled threads with atomics
    interleaved: the Metal trainer = HF."""
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=50), min_size=1, max_size=6))
    previous = metal.set_kernel_factory(metal.KernelFactory(
        make=metal_kernel_maker(order="shuffle", seed=seed, yield_on_atomic=True),
        max_groups=2))
    try:
        enc = gputok.train_bpe(texts, vocab_size=256 + vocab_extra, pattern=WS,
                               min_frequency=min_frequency, backend="metal")
    finally:
        metal.set_kernel_factory(previous)
    expected, _, _ = hf_train(texts, 256 + vocab_extra, WS, (), min_frequency)
    assert _merge_strings(enc) == expected


def test_loop_shrinks_grows_and_compacts(monkeypatch):
    """Default sizing (2 slots per possible byte pair), then a smaller table, then growth as
    pairs appear, and host compactions: the merges do not change."""
    wc = words.count_words(((t, 1) for t in _docs("prose")), resolve_pattern("cl100k"))
    want = cpu.train_words(wc, Vocab(), vocab_size=420, min_frequency=2)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    base = metal_kernel_maker(order="reverse")
    rebuilds: list[tuple[int, int]] = []  # (old slots, new slots)

    def make(**kw):
        fn = base(**kw)

        def call(**c):
            if kw["name"].startswith("train_rehash"):
                rebuilds.append((int(np.array(c["inputs"][3])), c["output_shapes"][0][0]))
            return fn(**c)
        return call

    compactions = []
    from gputok.backends import train_arrays as arrays

    real_compact = arrays.compact
    monkeypatch.setattr(arrays, "compact",
                        lambda *a, **k: compactions.append(len(a[0])) or real_compact(*a, **k))
    monkeypatch.setattr(metal, "_MIN_SHRINK", 1024)
    got = metal.train_on_metal(ids, off, counts, v, vocab_size=420, min_frequency=2,
                               kernels=metal.KernelFactory(make=make), max_groups=4,
                               compact_at=0.1, block_steps=16)
    assert got == want
    assert any(new < old for old, new in rebuilds), rebuilds
    assert any(new > old for old, new in rebuilds), rebuilds
    assert len(compactions) >= 2 and compactions == sorted(compactions, reverse=True)


def test_inputs_are_checked_against_the_interface(emulated):
    k = metal.kernel_factory()("train_find_matches")
    good = [mx.zeros((8,), dtype=mx.int32)] * 3 + [mx.array(8, dtype=mx.int64),
                                                   mx.zeros((metal.ST["SIZE"],), mx.int64)]
    (is_start,) = k(*good, output_shapes=[(8,)], grid=256)
    assert isinstance(is_start, mx.array) and np.array(is_start).tolist() == [0] * 8
    with pytest.raises(TypeError, match=r"train_find_matches\.metal: input 'prv' is declared "
                                        r"mlx.core.int32"):
        k(good[0], mx.zeros((8,), dtype=mx.int64), *good[2:], output_shapes=[(8,)], grid=256)
    with pytest.raises(TypeError, match=r"arrays of >= 8 elements"):
        k(mx.zeros((7,), dtype=mx.int32), *good[1:], output_shapes=[(8,)], grid=256)
    with pytest.raises(TypeError, match="5 inputs declared"):
        k(*good[:4], output_shapes=[(8,)], grid=256)


def test_factory_builds_once_per_source(monkeypatch):
    made = []

    def make(**kw):
        made.append(kw["name"])
        return lambda **call: None

    f = metal.KernelFactory(make=make)
    a, b = f("train_apply_merge"), f("train_apply_merge")
    assert a is b and len(made) == 1
    shader = metal_iface.load("train_apply_merge")
    assert made[0] == shader.kernel_name == f"train_apply_merge_{shader.digest[:12]}"
    # a changed source is a new kernel, under a new name (MLX caches libraries by name)
    changed = metal_iface.Shader(shader.name, shader.path, shader.interface,
                                 shader.source + "\n// changed", shader.header, "0" * 64)
    f._shaders["train_apply_merge"] = changed
    c = f("train_apply_merge")
    assert c is not a and made == [shader.kernel_name, "train_apply_merge_000000000000"]


@pytest.mark.skipif(metal.available()[0], reason="a Metal device is present")
def test_without_metal_says_why():
    ok, why = metal.available()
    assert not ok and why.startswith("MLX has no Metal device here")
    with pytest.raises(RuntimeError, match="metal training backend is not available: MLX has "
                                           "no Metal device here"):
        gputok.train_bpe(["hello hello"], vocab_size=300, backend="metal")


def test_import_does_not_load_mlx():
    code = ("import sys, gputok, gputok.train, gputok.backends.metal.iface; "
            "print(any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
