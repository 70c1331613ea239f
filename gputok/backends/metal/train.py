"""The Metal training backend: the device merge loop on Apple GPUs, with the shaders of
``shaders/train_*.metal`` run through MLX (``mx.fast.metal_kernel``). MLX is imported only when
this backend is asked for; without it, or without a Metal device, ``available()`` says why and
``train_bpe(backend="metal")`` raises ``RuntimeError`` with that reason. ``backend="auto"`` does
not pick Metal yet: the shaders are proven by emulation and by MLX's own generated source, not
yet on Apple hardware (``tests/test_metal_mac.py`` is what a Mac must pass first).

The algorithm is ``device.py``'s (the same rules, ``kernels/common/train_rules.h``); two facts of
MLX's kernels change its shape:

* **Outputs are fresh buffers on every call**; no input is updated in place. So each step's state
  (tok / prv / nxt) comes back as new arrays (``train_apply_merge`` gathers each position's new
  state, where CUDA rewrites in place), and the pair-count table is a read-only *main* table plus
  the *delta* table an insertion shader writes, folded into a new main table at the start of the
  next step (``train_fold_best``, which also finds the best pair on the way).
* **32-bit atomics only.** A table slot is claimed with two 32-bit compare-and-swaps and a 64-bit
  count is added as two 32-bit halves with an exact carry (``shaders/train_common.metal``).

Per step the host reads back one 8-element record (``train_best_final``: best count and pair,
used slots, merges applied so far), needed anyway to name the merged token (HF's rule 7 looks
the merged *string* up). With unified memory that read is ``np.array(x, copy=False)``.

Host-side housekeeping is ``device.py``'s: the table is rebuilt larger before a step could fill it
past 3/4 (a step adds only pairs (x, c) and (c, y)), smaller when 8x too large, and the state is
compacted on the host once half of it is dead.

Small inputs are padded to 8 elements: MLX passes an array of fewer elements in Metal's constant
address space, which the shared rules' ``device`` pointers do not accept.

Performance notes (design choices; nothing here is timed yet, for want of Apple hardware):

* Counting pairs by sorting (``mx.argsort`` of 64-bit keys, then segmented sums) would need no
  atomics at all, but costs a sort of every live position per step, where the table costs the
  matches' few updates plus one pass over the slots (the fold, which the best-pair scan needs
  anyway). Kept as the fallback idea if 32-bit compare-and-swap contention proves slow.
* The fold is fused with the per-threadgroup best pair: the table is read once per step.
* Compaction runs on the host (``arrays.compact``): MLX has no boolean-mask indexing (its shapes
  must be known before running), and with unified memory the round trip is a copy, not a
  transfer; it happens O(log n) times.
* Grid-stride loops with at most ``MAX_GROUPS`` threadgroups, as in CUDA: one launch size fits
  any state, and the emulator (one fiber per thread) runs the same shaders with small grids.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import train_arrays as arrays
from ..kernels import TRAIN_BLOCK
from .kernels import MAX_GROUPS, PAD as _PAD, Kernel, KernelFactory, mx_dtype  # noqa: F401

_MASK = (1 << 32) - 1
_MAX_LOAD = 0.75
_MIN_SHRINK = 1 << 16
SHADERS = ("train_count_pairs", "train_rehash", "train_fold_best", "train_best_final",
           "train_find_matches", "train_merge_deltas", "train_apply_merge")


_factory = KernelFactory()


def set_kernel_factory(factory: KernelFactory) -> KernelFactory:
    """Make ``factory`` build the kernels of ``train_bpe(backend="metal")``; returns the previous
    one (the tests swap in the emulator, and put MLX's back)."""
    global _factory
    previous, _factory = _factory, factory
    return previous


def kernel_factory() -> KernelFactory:
    """The factory ``train_bpe(backend="metal")`` uses."""
    return _factory


def train_arrays(ids, offsets, counts, vocab, *, vocab_size: int, min_frequency: int,
                 on_merge=None) -> list[tuple[int, int, int]]:
    """The merge loop on the Metal device, for the words as ``train.cpu.word_arrays`` gives
    them (the trainer's device contract, ``gputok.train``)."""
    factory = kernel_factory()
    ok, why = factory.available()
    if not ok:
        raise RuntimeError(f"the metal training backend is not available: {why}")
    return train_on_metal(ids, offsets, counts, vocab, vocab_size=vocab_size,
                          min_frequency=min_frequency, kernels=factory,
                          max_groups=factory.max_groups, on_merge=on_merge)


def available() -> tuple[bool, str]:
    """Whether ``train_bpe(backend="metal")`` can run here (the kernel factory's device)."""
    return kernel_factory().available()


# ---------------------------------------------------------------- the loop

def _pow2_at_least(n: int) -> int:
    return 1 << max(10, int(n - 1).bit_length())


def _pad(x: np.ndarray, fill: int) -> np.ndarray:
    if len(x) >= _PAD:
        return x
    return np.concatenate([x, np.full(_PAD - len(x), fill, dtype=x.dtype)])


def train_on_metal(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
                   kernels: KernelFactory, max_groups: int = MAX_GROUPS,
                   on_merge: "Callable[[int], None] | None" = None, compact_at: float = 0.5,
                   initial_capacity: "int | None" = None) -> list[tuple[int, int, int]]:
    """Run the merge loop with ``kernels``' shaders over MLX arrays; returns the merges.

    ``ids``/``offsets``/``wcounts``: the words (see ``train.cpu.word_arrays``); ``vocab`` grows with
    the merged tokens. ``max_groups`` caps every grid (the shaders are grid-stride loops).
    """
    import mlx.core as mx

    n_sym = int(offsets[-1])
    if n_sym >= 2**31 - 1:
        raise ValueError(f"{n_sym} symbols of unique words: the device trainer's int32 "
                         "positions hold at most 2**31 - 2; use backend='numpy'")
    i32, i64, u32 = (lambda v: mx.array(int(v), dtype=mx.int32),
                     lambda v: mx.array(int(v), dtype=mx.int64),
                     lambda v: mx.array(int(v), dtype=mx.uint32))

    def grid(count: int) -> int:
        return max(1, min(max_groups, -(-count // TRAIN_BLOCK))) * TRAIN_BLOCK

    def upload(tok, prv, nxt, word_of):
        pads = (arrays.DEAD, -1, -1, 0)
        return tuple(mx.array(_pad(np.asarray(x, dtype=np.int32), f))
                     for x, f in zip((tok, prv, nxt, word_of), pads))

    tok, prv, nxt, word_of = upload(*arrays.initial_state(ids, offsets))
    wcount = mx.array(_pad(np.asarray(wcounts, dtype=np.int64), 0))
    n = tok.shape[0]
    min_count = max(int(min_frequency), 1)

    def empty(cap: int):
        z = mx.zeros((cap,), dtype=mx.uint32)
        return z, z, mx.zeros((cap,), dtype=mx.int64)

    def fold(main, delta, cap: int, merged: tuple[int, int]):
        groups = grid(cap) // TRAIN_BLOCK
        out = kernels("train_fold_best")(
            *main, *delta, i64(cap), u32(merged[0]), u32(merged[1]),
            output_shapes=[(cap,)] * 3 + [(max(groups, _PAD),)] * 3, grid=groups * TRAIN_BLOCK)
        return tuple(out[:3]), out[3:], groups

    def rehash(main, cap: int, new_cap: int):
        new = empty(new_cap)
        delta = kernels("train_rehash")(*main, i64(cap), new[0], new[1], u32(new_cap - 1),
                                        output_shapes=[(new_cap,)] * 4, grid=grid(cap),
                                        init_value=0)
        return fold(new, delta, new_cap, (0, 0))[0], new_cap

    # the first pairs are pairs of single bytes: fewer than n and than len(vocab) ** 2
    cap = _pow2_at_least(initial_capacity or 2 * min(max(n_sym, 1), len(vocab) ** 2))
    main = empty(cap)
    delta = kernels("train_count_pairs")(tok, nxt, word_of, wcount, main[0], main[1], i64(n),
                                         u32(cap - 1), output_shapes=[(cap,)] * 4, grid=grid(n),
                                         init_value=0)
    merged = (0, 0)  # (a + 1, b + 1) of the last merge: its count is zeroed by the next fold
    matches = mx.array(0, dtype=mx.int64)
    merges: list[tuple[int, int, int]] = []
    dead_at_compact = 0
    while len(vocab) < vocab_size:
        main, parts, groups = fold(main, delta, cap, merged)
        (best,) = kernels("train_best_final")(*parts, i64(groups), matches,
                                              output_shapes=[(_PAD,)], grid=TRAIN_BLOCK)
        count, key, used, matched = (int(x) for x in np.array(best, copy=False)[:4])
        if count < min_count:
            break
        key &= (1 << 64) - 1
        a, b = key >> 32, key & _MASK
        c = vocab.merge(a, b)
        merges.append((a, b, c))
        merged = (a + 1, b + 1)

        need = used + min(2 * min(count, n), 2 * len(vocab) + 1)
        if need > _MAX_LOAD * cap:  # grow
            main, cap = rehash(main, cap, _pow2_at_least(int(need / _MAX_LOAD) + 1))
        elif cap >= 8 * _pow2_at_least(2 * need) and cap > _MIN_SHRINK:  # shrink: the fold
            main, cap = rehash(main, cap, _pow2_at_least(2 * need))  # reads every slot
        if matched - dead_at_compact > compact_at * n and n > _PAD:
            host = [np.array(x, copy=False) for x in (tok, prv, nxt, word_of)]
            tok, prv, nxt, word_of = upload(*arrays.compact(*host))
            n = tok.shape[0]
            dead_at_compact = matched
        (is_start,) = kernels("train_find_matches")(tok, prv, nxt, i64(n), i32(a), i32(b),
                                                    output_shapes=[(n,)], grid=grid(n))
        matches = matches + mx.sum(is_start.astype(mx.int64))
        delta = kernels("train_merge_deltas")(tok, prv, nxt, word_of, wcount, is_start, main[0],
                                              main[1], i64(n), i32(a), i32(b), i32(c),
                                              u32(cap - 1), output_shapes=[(cap,)] * 4,
                                              grid=grid(n), init_value=0)
        tok, prv, nxt = kernels("train_apply_merge")(tok, prv, nxt, is_start, i64(n), i32(c),
                                                     output_shapes=[(n,)] * 3, grid=grid(n))
        if on_merge is not None:
            on_merge(len(merges))
    return merges

