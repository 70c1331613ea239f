"""The training kernels (kernels/train_bpe.cu) without a GPU.

1. Compile checks: ``nvcc -ptx`` for sm_90 (H100) and sm_80 (A100).
2. Emulation (tests/emulator, one fiber per GPU thread) in forward, reverse and shuffled thread
   orders, on states built from real text: every kernel's output equals its numpy stage in
   ``gputok.backends.train_arrays``.
3. The whole device merge loop (``gputok.backends.cuda.train``, the code the CUDA backend runs) on the
   emulator equals the CPU trainer's merges, with table rebuilds and compactions forced.
A real GPU run (CuPy) is at the end, skipped without one.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref.patterns import resolve_pattern
from emulator import compile_cuda
from gputok.backends import train_arrays as arrays
from gputok.backends.cuda import train as device
from gputok.train import cpu, words
from gputok.train.vocab import Vocab

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "kernels" / "train_bpe.cu"
KERNELS = ["train_count_pairs", "train_rehash", "train_best_partial", "train_best_final",
           "train_find_matches", "train_merge_deltas", "train_apply_merge"]
# (order, seed); the last one also switches threads at every atomic, so claims of hash table
# slots interleave between the read of a free slot and the atomicCAS
ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1), ("shuffle+yield", 2)]
BLOCK = device.TRAIN_BLOCK
GRID = (3,)  # small grids: every thread walks many elements, and the emulator stays quick
_MASK = (1 << 32) - 1


# ---------------------------------------------------------------- 1. compile checks

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvcc_compiles(arch, tmp_path):
    out = tmp_path / "train.ptx"
    r = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-std=c++17", "-DTRAIN_BLOCK=256",
                        str(KERNEL), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    for k in KERNELS:
        assert f".entry {k}(" in ptx, k


@pytest.mark.parametrize("arch", ["compute_90", "compute_80"])
def test_nvrtc_compiles_what_the_driver_loads(arch):
    """CuPy compiles with NVRTC, not nvcc: the driver's exact source and options (runs where
    CuPy is installed; NVRTC needs no GPU)."""
    if os.environ.get("GPUTOK_REQUIRE_NVRTC"):
        from cupy_backends.cuda.libs import nvrtc  # CI: must be there
    else:
        nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from gputok.backends import kernels

    text = kernels.build_source(kernels.TRAIN_FILE, (("TRAIN_BLOCK", BLOCK),))[0]
    prog = nvrtc.createProgram(text, "train_bpe.cu", [], [])  # what the cuda trainer loads
    nvrtc.compileProgram(prog, ["-std=c++17", f"-arch={arch}"])
    ptx = nvrtc.getPTX(prog).decode()
    assert all(f".entry {k}(" in ptx for k in KERNELS)


def test_driver_and_kernel_agree_on_names():
    from emulator import find_kernels

    from gputok.backends.cuda import train as cuda

    source, include_dir = cuda.kernel_source()
    assert sorted(find_kernels(source)) == sorted(KERNELS)
    assert (Path(include_dir) / "train_hash.cuh").is_file()
    driver = (ROOT / "gputok" / "backends" / "cuda" / "train.py").read_text()
    assert all(f'"{k}"' in driver for k in KERNELS)


# ---------------------------------------------------------------- 2. kernel by kernel

@pytest.fixture(scope="module")
def mod():
    return compile_cuda(KERNEL)


@functools.lru_cache(maxsize=None)
def _words(kind: str, max_mb: float):
    docs = testdata.corpus(kind, max_mb=max_mb)
    return words.count_words(((t, 1) for t in docs), resolve_pattern("cl100k"))


def _state(kind: str, n_merges: int, max_mb: float = 0.03):
    """The device state after ``n_merges`` reference merges on real text (numpy arrays)."""
    v = Vocab()
    ids, off, wcount = cpu.word_arrays(_words(kind, max_mb), v)
    tok, prv, nxt, word_of = arrays.initial_state(ids, off)
    counts = arrays.pair_counts(tok, nxt, word_of, wcount)
    for _ in range(n_merges):
        count, key = arrays.best_pair(counts)
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


def _launch(mod, name, grid, block, args, order, seed):
    mod.launch(name, grid, block, args, order=order.split("+")[0], seed=seed,
               yield_on_atomic=order.endswith("+yield"))


def _table_dict(keys, counts) -> dict[int, int]:
    live = (keys != arrays.EMPTY_KEY) & (counts != 0)
    return dict(zip(keys[live].tolist(), counts.view(np.int64)[live].tolist()))


def _table(mod, s, order, seed, cap=1 << 16):
    keys = np.full(cap, arrays.EMPTY_KEY, dtype=np.uint64)
    counts = np.zeros(cap, dtype=np.uint64)
    stats = np.zeros(2, dtype=np.uint64)
    n = len(s["tok"])
    _launch(mod, "train_count_pairs", GRID, (BLOCK,),
               [s["tok"], s["nxt"], s["word_of"], s["wcount"], np.int64(n), keys, counts,
                np.uint64(cap - 1), stats], order, seed)
    return keys, counts, stats


STATES = [("prose", 0), ("prose", 30), ("code", 0), ("code", 60), ("multilingual", 20)]


@pytest.mark.parametrize("kind,n_merges", STATES)
@pytest.mark.parametrize("order,seed", ORDERS)
def test_count_and_best(mod, kind, n_merges, order, seed):
    s = _state(kind, n_merges)
    keys, counts, stats = _table(mod, s, order, seed)
    assert _table_dict(keys, counts) == s["counts"]
    assert int(stats[0]) == len(s["counts"])  # one slot claimed per distinct pair
    n_parts = 5
    part_count = np.zeros(n_parts, dtype=np.int64)
    part_key = np.zeros(n_parts, dtype=np.uint64)
    best = np.zeros(4, dtype=np.int64)
    cap = len(keys)
    _launch(mod, "train_best_partial", (n_parts,), (BLOCK,),
               [keys, counts, np.int64(cap), part_count, part_key], order, seed)
    _launch(mod, "train_best_final", (1,), (BLOCK,),
               [part_count, part_key, np.int64(n_parts), keys, counts, np.uint64(cap - 1), stats,
                best], order, seed)
    want_count, want_key = arrays.best_pair(s["counts"])
    assert (int(best[0]), int(best[1])) == (want_count, want_key)
    assert int(best[2]) == len(s["counts"])
    after = _table_dict(keys, counts)  # the winner's count is zeroed
    assert want_key not in after and len(after) == len(s["counts"]) - 1


def _run_merge(mod, s, a, b, c, order, seed):
    """find_matches + merge_deltas + apply_merge on the emulator, against the numpy stages."""
    keys, counts, stats = _table(mod, s, order, seed)
    cap = len(keys)
    n = len(s["tok"])
    # what train_best_final does for the chosen pair
    key = (a << 32) | b
    slot = np.flatnonzero(keys == np.uint64(key))
    counts[slot] = 0
    tok, prv, nxt = s["tok"].copy(), s["prv"].copy(), s["nxt"].copy()
    is_start = np.full(n, 7, dtype=np.uint8)
    _launch(mod, "train_find_matches", GRID, (BLOCK,),
               [tok, prv, nxt, np.int64(n), np.int32(a), np.int32(b), is_start, stats], order, seed)
    want_start = arrays.find_matches(s["tok"], s["prv"], s["nxt"], a, b)
    np.testing.assert_array_equal(is_start, want_start)
    assert int(stats[1]) == int(want_start.sum()) > 0

    _launch(mod, "train_merge_deltas", GRID, (BLOCK,),
               [tok, prv, nxt, s["word_of"], s["wcount"], is_start, np.int64(n), np.int32(a),
                np.int32(b), np.int32(c), keys, counts, np.uint64(cap - 1), stats], order, seed)
    want = dict(s["counts"])
    want.pop(key, None)
    deltas = arrays.merge_deltas(s["tok"], s["prv"], s["nxt"], s["word_of"], s["wcount"],
                                 want_start, a, b, c)
    for k, d in deltas.items():
        want[k] = want.get(k, 0) + d
    want = {k: v for k, v in want.items() if v != 0}
    assert _table_dict(keys, counts) == want

    _launch(mod, "train_apply_merge", GRID, (BLOCK,),
               [tok, prv, nxt, is_start, np.int64(n), np.int32(c)], order, seed)
    w_tok, w_prv, w_nxt = s["tok"].copy(), s["prv"].copy(), s["nxt"].copy()
    arrays.apply_merge(w_tok, w_prv, w_nxt, want_start, c)
    np.testing.assert_array_equal(tok, w_tok)
    np.testing.assert_array_equal(nxt[tok >= 0], w_nxt[w_tok >= 0])
    np.testing.assert_array_equal(prv[tok >= 0], w_prv[w_tok >= 0])
    # and the counts now are exactly the pairs of the new state
    assert want == arrays.pair_counts(w_tok, w_nxt, s["word_of"], s["wcount"])


@pytest.mark.parametrize("kind,n_merges", STATES)
@pytest.mark.parametrize("order,seed", ORDERS)
def test_merge_step_best_pair(mod, kind, n_merges, order, seed):
    s = _state(kind, n_merges)
    _, key = arrays.best_pair(s["counts"])
    a, b = key >> 32, key & _MASK
    _run_merge(mod, s, a, b, s["vocab"].merge(a, b), order, seed)


@pytest.mark.parametrize("kind,n_merges", [("code", 0), ("code", 60), ("prose", 0)])
@pytest.mark.parametrize("order,seed", ORDERS)
def test_merge_step_same_symbol_runs(mod, kind, n_merges, order, seed):
    """(x, x) pairs: runs of one symbol merge pairwise from the left ("    " -> "  " "  ")."""
    s = _state(kind, n_merges)
    same = {k: c for k, c in s["counts"].items() if (k >> 32) == (k & _MASK)}
    key = max(same, key=same.get)
    a = key >> 32
    # the state has runs of odd and even length longer than 2
    _run_merge(mod, s, a, a, s["vocab"].merge(a, a), order, seed)


@pytest.mark.parametrize("order,seed", ORDERS)
def test_rehash(mod, order, seed):
    s = _state("prose", 0)
    keys, counts, _ = _table(mod, s, order, seed)
    live = _table_dict(keys, counts)
    dropped = sorted(live)[::3]
    for k in dropped:
        counts[np.flatnonzero(keys == np.uint64(k))] = 0
    new_cap = 1 << 13
    new_keys = np.full(new_cap, arrays.EMPTY_KEY, dtype=np.uint64)
    new_counts = np.zeros(new_cap, dtype=np.uint64)
    stats = np.zeros(2, dtype=np.uint64)
    _launch(mod, "train_rehash", GRID, (BLOCK,),
               [keys, counts, np.int64(len(keys)), new_keys, new_counts, np.uint64(new_cap - 1),
                stats], order, seed)
    want = {k: c for k, c in live.items() if k not in set(dropped)}
    assert _table_dict(new_keys, new_counts) == want
    assert int(stats[0]) == len(want)


# ---------------------------------------------------------------- 3. the whole device loop

def _emulated_launcher(mod, order, seed):
    def launch(name, grid, block, args):
        _launch(mod, name, grid, block, args, order, seed)
    return launch


@functools.lru_cache(maxsize=None)
def _cpu_ref_merges(kind: str, vocab_size: int):
    """The spec's merges (cpu_ref.train, which recounts everything) on the same text."""
    from cpu_ref.train import train_bpe

    docs = testdata.corpus(kind, max_mb=0.03)
    return train_bpe(docs, vocab_size=vocab_size, pattern="cl100k",
                     special_tokens=["<|endoftext|>"], min_frequency=2).merges


@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
@pytest.mark.parametrize("order,seed", ORDERS[:3])
def test_device_loop_on_emulator_equals_cpu(mod, kind, vocab_size, order, seed):
    wc = _words(kind, 0.03)
    v_cpu = Vocab(["<|endoftext|>"])
    want = cpu.train_words(wc, v_cpu, vocab_size=vocab_size, min_frequency=2)
    assert want == _cpu_ref_merges(kind, vocab_size)
    v = Vocab(["<|endoftext|>"])
    ids, off, counts = cpu.word_arrays(wc, v)
    first = arrays.pair_counts(*[arrays.initial_state(ids, off)[k] for k in (0, 2, 3)],
                               counts)
    rehashes, compactions = [], []
    real_rehash, real_compact = device._rehash, arrays.compact

    def spy_rehash(*a, **k):
        rehashes.append(1)
        return real_rehash(*a, **k)

    def spy_compact(*a, **k):
        compactions.append(1)
        return real_compact(*a, **k)

    device._rehash, arrays.compact = spy_rehash, spy_compact
    try:
        got = device.train_on_device(
            ids, off, counts, v, vocab_size=vocab_size, min_frequency=2, xp=np,
            launch=_emulated_launcher(mod, order, seed), max_blocks=4, compact_at=0.1,
            initial_capacity=int(len(first) / 0.75) + 1)
    finally:
        device._rehash, arrays.compact = real_rehash, real_compact
    print(f"\n[train emulator] {kind} ({order}): {len(got)} merges, {len(ids)} symbols, "
          f"{len(rehashes)} table rebuilds, {len(compactions)} compactions")
    assert got == want
    assert v.strings == v_cpu.strings
    assert rehashes and compactions


@pytest.mark.parametrize("order,seed", [("shuffle+yield", 3)])
def test_device_loop_resizes_its_table(mod, order, seed, monkeypatch):
    """Default sizing (2 slots per possible byte pair), shrinking, growing as pairs appear."""
    wc = _words("prose", 0.03)
    want = cpu.train_words(wc, Vocab(), vocab_size=400, min_frequency=2)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    caps = []
    real = device._rehash

    def spy(xp, launch, grid, keys, counts_, cap, new_cap, stats):
        caps.append((cap, new_cap))
        return real(xp, launch, grid, keys, counts_, cap, new_cap, stats)

    monkeypatch.setattr(device, "_rehash", spy)
    monkeypatch.setattr(device, "_MIN_SHRINK", 1024)
    got = device.train_on_device(ids, off, counts, v, vocab_size=400, min_frequency=2, xp=np,
                                 launch=_emulated_launcher(mod, order, seed), max_blocks=4)
    assert got == want
    assert any(new < old for old, new in caps) and any(new > old for old, new in caps), caps


@settings(max_examples=fuzz_examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(alphabet=st.sampled_from(["ab", "a b", "aab  ", "xyz{\n", "  \t"]), data=st.data(),
       vocab_extra=st.integers(1, 40), seed=st.integers(0, 1000))
def test_device_loop_on_random_corpora(mod, alphabet, data, vocab_extra, seed):
    """Runs of one symbol, ties, tiny and empty words: emulated loop = CPU trainer."""
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=50), min_size=1, max_size=6))
    wc = words.count_words(((t, 1) for t in texts), r"\S+|\s+")
    want = cpu.train_words(wc, Vocab(), vocab_size=256 + vocab_extra, min_frequency=1)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    got = device.train_on_device(ids, off, counts, v, vocab_size=256 + vocab_extra,
                                 min_frequency=1, xp=np, max_blocks=2, compact_at=0.2,
                                 launch=_emulated_launcher(mod, "shuffle+yield", seed))
    assert got == want


# ---------------------------------------------------------------- a real GPU, when present

def _gpu_ok() -> tuple[bool, str]:
    from gputok.backends.cuda import train as cuda

    return cuda.available()


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ok()[0], reason=f"no CUDA GPU: {_gpu_ok()[1]}")
@pytest.mark.parametrize("kind", ["prose", "code", "multilingual"])
def test_cuda_backend_equals_numpy(kind):
    docs = testdata.corpus(kind)
    a = gputok.train_bpe(docs, vocab_size=8000, backend="numpy", special_tokens=["<|endoftext|>"])
    b = gputok.train_bpe(docs, vocab_size=8000, backend="cuda", special_tokens=["<|endoftext|>"])
    assert a.trained_merges == b.trained_merges
