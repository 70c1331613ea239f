"""What only a Mac can show: the shaders (training and encode) compiled by Apple's Metal compiler
and run on the GPU, under the Metal validation layers, and the benchmarks. Marked ``mac`` and
skipped elsewhere with the reason ``gputok.backends.metal.train.available()`` gives (on Linux: MLX has no
Metal device). Everything that can be proven without a Mac is in test_metal_{shaders,train,
fidelity,shim,encode,coverage}.py; these are the checks a Mac's first run must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gputok
import testdata
from gputok.backends.metal import train as metal

ROOT = Path(__file__).resolve().parent.parent
_OK, _WHY = metal.available()
pytestmark = [pytest.mark.mac, pytest.mark.skipif(not _OK, reason=f"no Metal device: {_WHY}")]

EOT = "<|endoftext|>"


@pytest.mark.parametrize("kind", ["prose", "code", "multilingual"])
def test_metal_training_equals_numpy(kind):
    """Every shader compiled by the Metal compiler (through MLX) and run on the GPU."""
    docs = testdata.corpus(kind)
    want = gputok.train_bpe(docs, vocab_size=4000, special_tokens=[EOT], backend="numpy")
    got = gputok.train_bpe(docs, vocab_size=4000, special_tokens=[EOT], backend="metal")
    assert gputok.train.last_stats.backend == "metal"
    assert got.trained_merges == want.trained_merges


@pytest.mark.parametrize("kind", ["prose", "code"])
def test_device_loop_with_every_stop_on_the_gpu(kind):
    """The block loop on the GPU (MLX's own kernels, lazy graphs of a block of steps, one wait
    per block) with small blocks, a tight first table and specials spelled like frequent merges:
    every stop happens (table grown, rule 7, compaction) and the merges equal the CPU trainer's."""
    from cpu_ref.patterns import resolve_pattern
    from gputok.backends import train_arrays as arrays
    from gputok.train import cpu, words
    from gputok.train.vocab import Vocab

    docs = testdata.corpus(kind, max_mb=1)
    wc = words.count_words(((d, 1) for d in docs), resolve_pattern("cl100k"))
    specials = [EOT, "th", "the", "in"]
    want = cpu.train_words(wc, Vocab(specials), vocab_size=2000, min_frequency=2)
    v = Vocab(specials)
    ids, off, counts = cpu.word_arrays(wc, v)
    tok, _, nxt, word_of = arrays.initial_state(ids, off)
    first = arrays.pair_counts(tok, nxt, word_of, counts)
    stats: dict = {}
    got = metal.train_on_metal(ids, off, counts, v, vocab_size=2000, min_frequency=2,
                               kernels=metal.kernel_factory(), block_steps=64,
                               initial_capacity=int(len(first) / 0.75) + 1, compact_at=0.05,
                               stats=stats)
    print(stats)
    assert got == want
    assert stats["blocks"] < len(got) / 16
    assert stats.get("REHASH", 0) >= 1 and stats.get("compact", 0) >= 1, stats


@pytest.mark.parametrize("kind", ["prose", "code"])
def test_indexed_loop_on_the_gpu(kind):
    """The indexed loop (shaders/train_index_steps.metal: a block of steps in ONE threadgroup,
    phases ordered by threadgroup_barrier(mem_device), 32-bit device atomics through casts of
    plain outputs, threadgroup atomics) compiled by Apple's compiler and run on the GPU: the
    CPU trainer's merges with every stop forced (grown table, candidates chosen again, pool and
    gain buffers grown, rule 7), then with the default sizes; prints the time a merge of the
    indexed loop and of the scan loop on a larger corpus (the reason it exists: say so in the
    results if it is not faster)."""
    import time

    from cpu_ref.patterns import resolve_pattern
    from gputok.backends.metal import train_index
    from gputok.train import cpu, words
    from gputok.train.vocab import Vocab

    specials = [EOT, "th", "the", "in"]
    for mb, sizes in ((1, dict(block_steps=16, candidates=64, initial_capacity=1024,
                               gain_room=16, pool_room=64)), (4, {})):
        docs = testdata.corpus(kind, max_mb=mb)
        wc = words.count_words(((d, 1) for d in docs), resolve_pattern("cl100k"))
        want = cpu.train_words(wc, Vocab(specials), vocab_size=3000, min_frequency=2)
        v = Vocab(specials)
        ids, off, counts = cpu.word_arrays(wc, v)
        stats: dict = {}
        t = time.perf_counter()
        got = train_index.train_on_metal(ids, off, counts, v, vocab_size=3000, min_frequency=2,
                                         kernels=metal.kernel_factory(), stats=stats, **sizes)
        t_index = time.perf_counter() - t
        assert got == want
        if sizes:
            for stop in ("BLOCK", "REHASH", "REBUILD", "POOL", "GAINS", "RESERVED"):
                assert stats.get(stop, 0) >= 1, (stop, stats)
            continue
        v = Vocab(specials)
        t = time.perf_counter()
        scan = metal.train_on_metal(ids, off, counts, v, vocab_size=3000, min_frequency=2,
                                    kernels=metal.kernel_factory())
        t_scan = time.perf_counter() - t
        assert scan == want
        print(f"\n[{kind} {mb} MB] indexed loop {1e3 * t_index / len(got):.3f} ms a merge "
              f"({stats['blocks']} launches), scan loop {1e3 * t_scan / len(got):.3f} ms")


_VALIDATED_RUN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import gputok, testdata
docs = testdata.corpus("code", max_mb=0.5)
enc = gputok.train_bpe(docs, vocab_size=1500, backend=sys.argv[2])
print(json.dumps(enc.trained_merges))
"""


def test_under_the_metal_validation_layer():
    """API validation (MTL_DEBUG_LAYER) and shader validation (out-of-bounds and misaligned
    accesses, MTL_SHADER_VALIDATION) over a whole training run: no report, same merges."""
    env = dict(os.environ, MTL_DEBUG_LAYER="1", MTL_SHADER_VALIDATION="1",
               MTL_DEBUG_LAYER_ERROR_MODE="assert", PYTHONPATH=str(ROOT))
    runs = {}
    for backend in ("metal", "numpy"):
        r = subprocess.run([sys.executable, "-c", _VALIDATED_RUN, str(ROOT / "tests"), backend],
                           capture_output=True, text=True, env=env, timeout=1800)
        assert r.returncode == 0, r.stderr[-4000:]
        assert "validation" not in r.stderr.lower(), r.stderr[-4000:]
        runs[backend] = json.loads(r.stdout.strip().splitlines()[-1])
    assert runs["metal"] == runs["numpy"]


def test_training_benchmark_runs():
    """bench/bench_train.py with the Metal backend (it fails when gputok's merges differ from
    HF's); the numbers go to bench/results/ by hand, with the machine named."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_train.py"), "--backend",
                        "metal", "--mb", "2", "--vocab-size", "8000", "--repeat", "1",
                        "--trainers", "gputok", "hf"], capture_output=True, text=True,
                       timeout=3600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(r.stdout)


# ---------------------------------------------------------------- encode

@pytest.mark.parametrize("name", gputok.list_encoding_names())
def test_metal_encode_equals_tiktoken(name):
    """Every encode shader compiled by the Metal compiler (through MLX) and run on the GPU: ids
    equal tiktoken's on every corpus kind, several chunks in flight."""
    from conftest import tiktoken_oracle
    from gputok.backends import metal as metal_encode

    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = [d for kind in testdata.KINDS for d in testdata.corpus(kind, max_mb=0.5)]
    docs += ["", "a" * 100_000, " " * 5000, "\t" * 32, "😀👍🏽" * 3000]
    be = metal_encode.create(chunk_bytes=1 << 20)
    ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
    bad = [i for i, d in enumerate(docs)
           if ids[off[i]:off[i + 1]].tolist() != tk.encode_ordinary(d)]
    assert not bad, f"{len(bad)} documents differ; first: {docs[bad[0]][:80]!r}"


def test_metal_runs_every_stage_cuda_runs_with_no_fallback():
    """The o200k, quick-check and WordPiece shaders on the GPU: Qwen2 on NFD text and MiniLM
    (WordPiece) equal HF, with only the fallbacks CUDA has (WordPiece's host word split)."""
    import unicodedata
    import warnings

    from conftest import hf_encoding, hf_oracle
    from gputok.backends import FallbackWarning
    from gputok.backends import metal as metal_encode
    from test_wordpiece import trio

    docs = [d for kind in testdata.KINDS for d in testdata.corpus(kind, max_mb=0.2)]
    docs = [unicodedata.normalize("NFD", d) for d in docs] + docs
    for enc, hf, allowed in ((hf_encoding("qwen2"), hf_oracle("qwen2"), frozenset()),
                             trio("uncased")[::2] + ("all",)):
        be = metal_encode.create(chunk_bytes=1 << 20)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always", FallbackWarning)
            ids, off = enc.encode_batch_arrays(docs, allowed_special=allowed, backend=be)
        want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        bad = [i for i in range(len(docs)) if ids[off[i]:off[i + 1]].tolist() != want[i]]
        assert not bad, f"{len(bad)} documents differ; first: {docs[bad[0]][:80]!r}"
        assert set(be.fallbacks) <= {("pretok", "split")}, dict(be.fallbacks)


_VALIDATED_ENCODE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, gputok, testdata
docs = testdata.corpus("multilingual", max_mb=0.5) + ["a" * 20000, ""]
enc = gputok.get_encoding("cl100k_base")
ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=sys.argv[2])
print(int(ids.astype(np.int64).sum()), len(ids), int(off[-1]))
"""


def test_encode_under_the_metal_validation_layer():
    """The encode shaders under API and shader validation: no report, the numpy backend's ids."""
    env = dict(os.environ, MTL_DEBUG_LAYER="1", MTL_SHADER_VALIDATION="1",
               MTL_DEBUG_LAYER_ERROR_MODE="assert", PYTHONPATH=str(ROOT))
    runs = {}
    for backend in ("metal", "numpy"):
        r = subprocess.run([sys.executable, "-c", _VALIDATED_ENCODE, str(ROOT / "tests"), backend],
                           capture_output=True, text=True, env=env, timeout=1800)
        assert r.returncode == 0, r.stderr[-4000:]
        assert "validation" not in r.stderr.lower(), r.stderr[-4000:]
        runs[backend] = r.stdout.strip().splitlines()[-1]
    assert runs["metal"] == runs["numpy"]


def test_encode_benchmark_runs():
    """bench/bench_metal.py (it stops when gputok's ids differ from tiktoken's)."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_metal.py"), "--size-mb", "8",
                        "--repeat", "1"], capture_output=True, text=True, timeout=3600, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gputok metal / tiktoken all cores" in r.stdout
    print(r.stdout)
