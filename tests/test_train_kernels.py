"""The training kernels (kernels/train_bpe.cu) without a GPU.

1. Compile checks: ``nvcc -ptx`` for sm_90 (H100) and sm_80 (A100).
2. Emulation (tests/emulator, one fiber per GPU thread) in forward, reverse and shuffled thread
   orders, on states built from real text: the pair counts, occurrence lists and table rebuild
   equal their numpy stages in ``gputok.backends.train_arrays``; the list-driven loop in numpy
   (``train_lists``) equals the CPU trainer.
3. The whole device merge loop (``gputok.backends.cuda.train``, the code the CUDA backend runs:
   blocks of merge steps on the device, merges read back per block) on the emulator equals the
   CPU trainer's merges, with every reason a block stops forced (candidates chosen again, the
   table grown, the occurrence pool repacked, the gain buffers grown); on self-overlapping runs,
   repeated pairs and ties at several min_frequency values; with an update step left out it
   differs. ``train_bpe(backend="cuda")`` itself, on CuPy's stand-in, equals the CPU trainer.
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
KERNELS = ["train_count_pairs", "train_count_occurrences", "train_place_occurrences",
           "train_rehash", "train_step_select", "train_step_mark", "train_step_deltas",
           "train_step_apply", "train_step_lists", "train_step_place"]
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
    state = np.zeros(device.ST["SIZE"], dtype=np.int64)
    n = len(s["tok"])
    _launch(mod, "train_count_pairs", GRID, (BLOCK,),
            [s["tok"], s["nxt"], s["word_of"], s["wcount"], np.int64(n), keys, counts,
             np.uint64(cap - 1), state], order, seed)
    return keys, counts, state


STATES = [("prose", 0), ("prose", 30), ("code", 0), ("code", 60), ("multilingual", 20)]


@pytest.mark.parametrize("kind,n_merges", STATES)
@pytest.mark.parametrize("order,seed", ORDERS)
def test_count_pairs(mod, kind, n_merges, order, seed):
    s = _state(kind, n_merges)
    keys, counts, state = _table(mod, s, order, seed)
    assert _table_dict(keys, counts) == s["counts"]
    assert int(state[device.ST["USED"]]) == len(s["counts"])  # one slot per distinct pair


@pytest.mark.parametrize("kind,n_merges", STATES[:3])
@pytest.mark.parametrize("order,seed", ORDERS)
def test_occurrence_lists(mod, kind, n_merges, order, seed):
    """Every pair's list holds exactly the positions where it occurs (``arrays.occurrences``)."""
    s = _state(kind, n_merges)
    keys, counts, _ = _table(mod, s, order, seed)
    cap, n = len(keys), len(s["tok"])
    sizes = np.zeros(cap, dtype=np.uint32)
    _launch(mod, "train_count_occurrences", GRID, (BLOCK,),
            [s["tok"], s["nxt"], np.int64(n), keys, np.uint64(cap - 1), sizes], order, seed)
    off = (np.cumsum(sizes.astype(np.int64)) - sizes).astype(np.int64)
    lens = np.zeros(cap, dtype=np.uint32)
    pool = np.zeros(max(int(sizes.sum()), 1), dtype=np.uint32)
    _launch(mod, "train_place_occurrences", GRID, (BLOCK,),
            [s["tok"], s["nxt"], np.int64(n), keys, np.uint64(cap - 1), off, lens, pool],
            order, seed)
    np.testing.assert_array_equal(lens, sizes)
    got = {int(keys[t]): set(pool[off[t]:off[t] + lens[t]].tolist())
           for t in np.flatnonzero(lens)}
    assert got == arrays.occurrences(s["tok"], s["nxt"])


@pytest.mark.parametrize("order,seed", ORDERS)
def test_rehash(mod, order, seed):
    s = _state("prose", 0)
    keys, counts, _ = _table(mod, s, order, seed)
    live = _table_dict(keys, counts)
    dropped = sorted(live)[::3]
    for k in dropped:
        counts[np.flatnonzero(keys == np.uint64(k))] = 0
    cap = len(keys)
    off = np.arange(cap, dtype=np.int64) * 7  # (each slot's list moves with its pair)
    lens = (np.arange(cap) % 5).astype(np.uint32)
    new_cap = 1 << 13
    new_keys = np.full(new_cap, arrays.EMPTY_KEY, dtype=np.uint64)
    new_counts = np.zeros(new_cap, dtype=np.uint64)
    new_off = np.zeros(new_cap, dtype=np.int64)
    new_lens = np.zeros(new_cap, dtype=np.uint32)
    state = np.zeros(device.ST["SIZE"], dtype=np.int64)
    _launch(mod, "train_rehash", GRID, (BLOCK,),
            [keys, counts, off, lens, np.int64(cap), new_keys, new_counts, new_off, new_lens,
             np.uint64(new_cap - 1), state], order, seed)
    want = {k: c for k, c in live.items() if k not in set(dropped)}
    assert _table_dict(new_keys, new_counts) == want
    assert int(state[device.ST["USED"]]) == len(want)
    old_slot = {int(keys[t]): t for t in np.flatnonzero(keys != arrays.EMPTY_KEY)}
    for t in np.flatnonzero((new_keys != arrays.EMPTY_KEY) & (new_counts != 0)):
        o = old_slot[int(new_keys[t])]
        assert (new_off[t], new_lens[t]) == (off[o], lens[o])


@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
@pytest.mark.parametrize("candidates", [8, 64])
def test_list_loop_in_numpy_equals_cpu(kind, vocab_size, candidates):
    """The device loop's rule on numpy (``arrays.train_lists``: each step reads only the merged
    pair's list, candidates chosen again when they cannot vouch for the best pair)."""
    wc = _words(kind, 0.03)
    want = cpu.train_words(wc, Vocab(["<|endoftext|>"]), vocab_size=vocab_size, min_frequency=2)
    v = Vocab(["<|endoftext|>"])
    ids, off, counts = cpu.word_arrays(wc, v)
    assert arrays.train_lists(ids, off, counts, v, vocab_size=vocab_size, min_frequency=2,
                              candidates=candidates) == want


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


def _spied(monkeypatch) -> dict:
    """Counts of the host's moves between blocks (why blocks stopped)."""
    seen = {"choose_candidates": 0, "rehash": 0, "repack_pool": 0, "blocks": 0}
    for name in ("choose_candidates", "rehash", "repack_pool"):
        real = getattr(device._Loop, name)

        def spy(self, *a, _real=real, _name=name, **k):
            seen[_name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(device._Loop, name, spy)
    real_get = device._Loop.get

    def get(self):
        seen["blocks"] += 1
        return real_get(self)

    monkeypatch.setattr(device._Loop, "get", get)
    return seen


@pytest.mark.parametrize("kind,vocab_size", [("prose", 420), ("code", 420),
                                             ("multilingual", 380)])
@pytest.mark.parametrize("order,seed", ORDERS[:3])
def test_device_loop_on_emulator_equals_cpu(mod, kind, vocab_size, order, seed, monkeypatch):
    wc = _words(kind, 0.03)
    v_cpu = Vocab(["<|endoftext|>"])
    want = cpu.train_words(wc, v_cpu, vocab_size=vocab_size, min_frequency=2)
    assert want == _cpu_ref_merges(kind, vocab_size)
    v = Vocab(["<|endoftext|>"])
    ids, off, counts = cpu.word_arrays(wc, v)
    first = arrays.pair_counts(*[arrays.initial_state(ids, off)[k] for k in (0, 2, 3)],
                               counts)
    seen = _spied(monkeypatch)
    got = device.train_on_device(
        ids, off, counts, v, vocab_size=vocab_size, min_frequency=2, xp=np,
        launch=_emulated_launcher(mod, order, seed), max_blocks=4, block_steps=16,
        candidates=16, initial_capacity=int(len(first) / 0.75) + 1)
    print(f"\n[train emulator] {kind} ({order}): {len(got)} merges, {len(ids)} symbols, {seen}")
    assert got == want
    assert v.strings == v_cpu.strings
    # merges came in blocks (not one read-back per merge); every kind of stop happened
    assert seen["blocks"] < len(got) / 2
    assert seen["choose_candidates"] > 1 and seen["rehash"] >= 1, seen


@pytest.mark.parametrize("order,seed", [("shuffle+yield", 3)])
def test_device_loop_default_sizes(mod, order, seed, monkeypatch):
    """The default block and candidate sizes: few blocks, the same merges."""
    wc = _words("prose", 0.03)
    want = cpu.train_words(wc, Vocab(), vocab_size=400, min_frequency=2)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    seen = _spied(monkeypatch)
    got = device.train_on_device(ids, off, counts, v, vocab_size=400, min_frequency=2, xp=np,
                                 launch=_emulated_launcher(mod, order, seed), max_blocks=4)
    assert got == want
    assert seen["blocks"] <= 3, seen


@settings(max_examples=fuzz_examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(alphabet=st.sampled_from(["ab", "a b", "aab  ", "xyz{\n", "  \t"]), data=st.data(),
       vocab_extra=st.integers(1, 40), seed=st.integers(0, 1000),
       sizes=st.sampled_from([(2, 2), (4, 8), (64, 4)]))
def test_device_loop_on_random_corpora(mod, alphabet, data, vocab_extra, seed, sizes):
    """Runs of one symbol, ties, tiny and empty words: emulated loop = CPU trainer."""
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=50), min_size=1, max_size=6))
    wc = words.count_words(((t, 1) for t in texts), r"\S+|\s+")
    want = cpu.train_words(wc, Vocab(), vocab_size=256 + vocab_extra, min_frequency=1)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    got = device.train_on_device(ids, off, counts, v, vocab_size=256 + vocab_extra,
                                 min_frequency=1, xp=np, max_blocks=2, block_steps=sizes[0],
                                 candidates=sizes[1],
                                 launch=_emulated_launcher(mod, "shuffle+yield", seed))
    assert got == want


# runs of one symbol (a pair overlapping itself: "aaaa" merges (a,a) twice, not three times),
# pairs repeated in a word, and counts that tie (HF's rule picks among them)
REPEATS = ["aaaa aaaa aaaaa aaa aaaaaa abab ababab baba aab aba bab a",
           "aaaa bbbb cccc abcabc cabcab aaaa bbbb cccc dd dd dd xyxy yxyx",
           "\u00e9\u00e9\u00e9\u00e9 \u4e2d\u4e2d\u4e2d \U0001f600\U0001f600 aaaa aaaa"]


@pytest.mark.parametrize("pattern", ["gpt2", r"\S+|\s+"])
@pytest.mark.parametrize("min_frequency", [1, 3, 6])
def test_device_loop_repeats_ties_min_frequency(mod, pattern, min_frequency):
    """Self-overlapping runs, repeated pairs and tied counts under two patterns and three
    min_frequency values (the loop stops early when the best count falls below it)."""
    pat = resolve_pattern(pattern) if pattern == "gpt2" else pattern
    wc = words.count_words(((t, 1 + k % 3) for k, t in enumerate(REPEATS * 3)), pat)
    want = cpu.train_words(wc, Vocab(), vocab_size=300, min_frequency=min_frequency)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    got = device.train_on_device(ids, off, counts, v, vocab_size=300,
                                 min_frequency=min_frequency, xp=np, max_blocks=2,
                                 block_steps=4, candidates=4,
                                 launch=_emulated_launcher(mod, "shuffle+yield", min_frequency))
    assert got == want and len(got) > 3


@pytest.mark.parametrize("broken", ["train_step_deltas", "train_step_lists"])
def test_device_loop_fails_with_a_broken_update(mod, broken):
    """The comparisons above see a broken on-device update: without the count updates
    (deltas) or the pair -> positions index update (lists) the merges differ from the CPU's."""
    wc = _words("prose", 0.03)
    want = cpu.train_words(wc, Vocab(), vocab_size=340, min_frequency=2)
    v = Vocab()
    ids, off, counts = cpu.word_arrays(wc, v)
    real = _emulated_launcher(mod, "forward", 0)

    def launch(name, grid, block, args):
        if name != broken:
            real(name, grid, block, args)

    try:
        got = device.train_on_device(ids, off, counts, v, vocab_size=340, min_frequency=2,
                                     xp=np, launch=launch, max_blocks=4, block_steps=16,
                                     candidates=16)
    except (ValueError, RuntimeError, IndexError):
        return  # (a loop that notices its state is inconsistent is also a failure seen)
    assert got != want


@pytest.mark.parametrize("kind", ["code", "multilingual"])
def test_train_bpe_cuda_path_on_a_stand_in(kind, monkeypatch):
    """``train_bpe(backend="cuda")`` as a GPU host runs it (``train_arrays``: CuPy arrays, the
    kernels through the module loader, merges read back with ``.get()``), on CuPy's stand-in
    (tests/fakecupy.py, kernels on the emulator) with numpy's array functions giving device
    arrays: the merges equal the CPU trainer's and nothing fell back to the CPU."""
    import sys
    import warnings

    from fakecupy import DevArray, fake_cupy
    from gputok.backends import cuda
    from gputok.backends.cuda import build as cuda_build

    def on_device(f):
        @functools.wraps(f)
        def call(*a, **k):
            r = f(*a, **k)
            return r.view(DevArray) if isinstance(r, np.ndarray) else r
        return call

    stand_in = fake_cupy([], devices=1)
    cp = type(sys)("cupy")
    for name in dir(np):
        v = getattr(np, name)
        if not name.startswith("_"):
            setattr(cp, name, on_device(v) if callable(v) and not isinstance(v, type) else v)
    for name, v in vars(stand_in).items():
        if not name.startswith("__"):
            setattr(cp, name, v)
    cp.__version__ = "stand-in"
    monkeypatch.setattr(DevArray, "get", lambda a: np.array(a), raising=False)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(cuda, "_no_driver", lambda: False)
    cuda_build._cupy_module.cache_clear()
    try:
        docs = testdata.corpus(kind, max_mb=0.03)
        want = gputok.train_bpe(docs, vocab_size=360, backend="native").trained_merges
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = gputok.train_bpe(docs, vocab_size=360, backend="cuda").trained_merges
        assert gputok.train.last_stats.backend == "cuda"
    finally:
        cuda_build._cupy_module.cache_clear()
    assert got == want and len(got) > 50


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
