"""The CUDA trainer: every merge step runs as the kernels of ``kernels/train_bpe.cu``.

One merge loop (``train_on_device``) for any launcher of those kernels: CuPy on an NVIDIA GPU
(``train_words``, kernels compiled by NVRTC through the encode kernels' loader), or the CPU
kernel emulator in the tests (so CI runs this exact loop, kernels included, without a GPU).
``xp`` is the array module the launcher works on (cupy, or numpy for the emulator).

Per merge step the host launches ``best_partial`` + ``best_final`` and reads back one 32-byte
record (count, pair, table slots used, matches so far); it needs the pair on the host anyway to
give the merged token its id (HF's rule 7 looks the merged *string* up). Then ``find_matches``,
``merge_deltas`` and ``apply_merge`` run without further synchronisation.

Host-side housekeeping between steps:

* the hash table starts at twice the possible byte pairs and is rebuilt (``train_rehash``, zero
  counts dropped) before a step could push it past 3/4 full: a step adds only pairs (x, c) and
  (c, y) of the new token c, so at most ``2 * len(vocab) + 1`` and at most two per match; it is
  also rebuilt smaller once it is 8x larger than needed, since the best-pair scan reads every
  slot;
* the state is compacted (dead positions and one-symbol words dropped, ``arrays.compact``) once
  half of it is dead, so the per-step kernels scan live symbols only.

Limits: positions are int32 (2**31 symbols of unique words, i.e. ~2 GB of distinct words).

CuPy is imported only when this trainer is asked for; without CuPy or a GPU, ``available()``
says why and ``train_bpe(backend="cuda")`` raises ``RuntimeError`` with that reason. Word counting
stays on the CPU (the pre-tokenizer stage); the words' symbols, their counts and the pair table
then move to the GPU once. If the GPU runs out of memory, training restarts on the CPU backend
with a warning.
"""


from __future__ import annotations

from typing import Callable

import numpy as np

from .. import train_arrays as arrays
from ..kernels import TRAIN_BLOCK

_MASK = (1 << 32) - 1
_MAX_LOAD = 0.75
_MIN_SHRINK = 1 << 16  # slots; smaller tables are not worth rebuilding


def _pow2_at_least(n: int) -> int:
    return 1 << max(10, int(n - 1).bit_length())


def train_on_device(ids: np.ndarray, offsets: np.ndarray, wcounts: np.ndarray, vocab, *,
                    vocab_size: int, min_frequency: int, xp, launch: Callable,
                    max_blocks: int = 4096, to_host: "Callable | None" = None,
                    on_merge: "Callable[[int], None] | None" = None,
                    compact_at: float = 0.5, initial_capacity: "int | None" = None
                    ) -> list[tuple[int, int, int]]:
    """Run the merge loop with ``launch(kernel_name, grid, block, args)``.

    ``ids``/``offsets``/``wcounts``: the words (see ``train.cpu.word_arrays``); ``vocab`` (a
    ``train.vocab.Vocab``) grows with the merged tokens. ``max_blocks`` caps every grid (the
    kernels are grid-stride loops).
    """
    if to_host is None:
        to_host = (lambda a: a.get()) if xp is not np else np.asarray
    n = int(offsets[-1])
    if n >= 2**31 - 1:
        raise ValueError(f"{n} symbols of unique words: the device trainer's int32 positions "
                         "hold at most 2**31 - 2; use backend='numpy'")
    tok, prv, nxt, word_of = arrays.initial_state(ids, offsets, xp=xp)
    wcount = xp.asarray(np.asarray(wcounts, dtype=np.int64))
    min_count = max(int(min_frequency), 1)

    def grid(count: int) -> tuple[int]:
        return (max(1, min(max_blocks, -(-count // TRAIN_BLOCK))),)

    i64, u64, i32 = np.int64, np.uint64, np.int32
    stats = xp.zeros(2, dtype=xp.uint64)  # [table slots claimed, matches found]

    def new_table(cap: int):
        return xp.full(cap, arrays.EMPTY_KEY, dtype=xp.uint64), xp.zeros(cap, dtype=xp.uint64)

    # the first pairs are pairs of single bytes: fewer than n and than len(vocab) ** 2
    cap = _pow2_at_least(initial_capacity or 2 * min(max(n, 1), len(vocab) ** 2))
    keys, counts = new_table(cap)
    launch("train_count_pairs", grid(n), (TRAIN_BLOCK,),
           [tok, nxt, word_of, wcount, i64(n), keys, counts, u64(cap - 1), stats])

    part_count = xp.zeros(max_blocks, dtype=xp.int64)  # one per block of best_partial
    part_key = xp.zeros(max_blocks, dtype=xp.uint64)
    best = xp.zeros(4, dtype=xp.int64)
    merges: list[tuple[int, int, int]] = []
    dead_at_compact = 0  # matches counted at the last compaction
    while len(vocab) < vocab_size:
        n_parts = grid(cap)[0]
        launch("train_best_partial", (n_parts,), (TRAIN_BLOCK,),
               [keys, counts, i64(cap), part_count, part_key])
        launch("train_best_final", (1,), (TRAIN_BLOCK,),
               [part_count, part_key, i64(n_parts), keys, counts, u64(cap - 1), stats, best])
        count, key, used, matched = (int(x) for x in to_host(best))
        if count < min_count:
            break
        key &= (1 << 64) - 1
        a, b = key >> 32, key & _MASK
        c = vocab.merge(a, b)
        merges.append((a, b, c))

        # new pairs are (x, c) and (c, y): at most two per match (and matches <= count, <= n),
        # and at most 2 * len(vocab) + 1 distinct ones
        need = used + min(2 * min(count, n), 2 * len(vocab) + 1)
        if need > _MAX_LOAD * cap:  # grow
            keys, counts, cap = _rehash(xp, launch, grid, keys, counts, cap,
                                        _pow2_at_least(int(need / _MAX_LOAD) + 1), stats)
        elif cap >= 8 * _pow2_at_least(2 * need) and cap > _MIN_SHRINK:  # shrink: scans are
            keys, counts, cap = _rehash(xp, launch, grid, keys, counts, cap,  # per-slot work
                                        _pow2_at_least(2 * need), stats)
        if matched - dead_at_compact > compact_at * n and n > 0:
            tok, prv, nxt, word_of = arrays.compact(tok, prv, nxt, word_of, xp=xp)
            n = int(tok.shape[0])
            dead_at_compact = matched
        is_start = xp.empty(n, dtype=xp.uint8)
        launch("train_find_matches", grid(n), (TRAIN_BLOCK,),
               [tok, prv, nxt, i64(n), i32(a), i32(b), is_start, stats])
        launch("train_merge_deltas", grid(n), (TRAIN_BLOCK,),
               [tok, prv, nxt, word_of, wcount, is_start, i64(n), i32(a), i32(b), i32(c), keys,
                counts, u64(cap - 1), stats])
        launch("train_apply_merge", grid(n), (TRAIN_BLOCK,),
               [tok, prv, nxt, is_start, i64(n), i32(c)])
        if on_merge is not None:
            on_merge(len(merges))
    return merges


def _rehash(xp, launch, grid, keys, counts, cap, new_cap, stats):
    """A fresh table of ``new_cap`` slots holding the live (non-zero) entries."""
    new_keys = xp.full(new_cap, arrays.EMPTY_KEY, dtype=xp.uint64)
    new_counts = xp.zeros(new_cap, dtype=xp.uint64)
    stats[0] = 0
    launch("train_rehash", grid(cap), (TRAIN_BLOCK,),
           [keys, counts, np.int64(cap), new_keys, new_counts, np.uint64(new_cap - 1), stats])
    return new_keys, new_counts, new_cap

def available() -> tuple[bool, str]:
    """Same requirement as the encode backend: CuPy and a visible CUDA device."""
    from . import available as cuda_available

    return cuda_available()


def kernel_source() -> tuple[str, str]:
    """(source text, headers expanded; include directory) of the training kernels."""
    from .. import kernels

    return kernels.source(kernels.TRAIN_FILE), str(kernels.kernel_dir())


def _launcher():
    """A launch function over the training module on the current GPU (one module per device,
    source digest and defines: the loader the encode kernels use)."""
    import cupy

    from .. import kernels
    from .build import cupy_module

    mod = cupy_module(cupy.cuda.Device().id, kernels.TRAIN_FILE, (("TRAIN_BLOCK", TRAIN_BLOCK),))
    functions: dict = {}

    def launch(name, grid, block, args):
        fn = functions.get(name)
        if fn is None:
            fn = functions[name] = mod.get_function(name)
        fn(tuple(grid), tuple(block), tuple(args))

    return launch


def train_arrays(ids, offsets, counts, vocab, *, vocab_size: int, min_frequency: int,
                 on_merge=None) -> list[tuple[int, int, int]]:
    """The merge loop on the GPU, for the words as ``train.cpu.word_arrays`` gives them (the
    trainer's device contract, ``gputok.train``); ``MemoryError`` when the GPU runs out (the
    trainer then trains on the CPU)."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"the cuda training backend is not available: {why}")
    import cupy

    try:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        max_blocks = 8 * int(props["multiProcessorCount"])
        merges = train_on_device(ids, offsets, counts, vocab, vocab_size=vocab_size,
                                 min_frequency=min_frequency, xp=cupy, launch=_launcher(),
                                 max_blocks=max_blocks, on_merge=on_merge)
        cupy.cuda.Device().synchronize()
        return merges
    except cupy.cuda.memory.OutOfMemoryError as e:
        raise MemoryError(f"the GPU ran out of memory ({e})") from e
