"""The Metal training backend: the device merge loop on Apple GPUs, with the shaders of
``shaders/train_*.metal`` run through MLX (``mx.fast.metal_kernel``). MLX is imported only when
this backend is asked for; without it, or without a Metal device, ``available()`` says why and
``train_bpe(backend="metal")`` raises ``RuntimeError`` with that reason. ``backend="auto"`` does
not pick Metal yet: the shaders are proven by emulation and by MLX's own generated source, not
yet on Apple hardware (``tests/test_metal_mac.py`` is what a Mac must pass first).

``train_bpe(backend="metal")`` runs the *indexed* loop (``train_index.py``: a block of steps in
one launch of one threadgroup, each step touching only the merged pair's occurrences). The
*scan* loop below (``train_on_metal``), whose steps each pass over every position and slot, is
kept beside it until a Mac has run both (``tests/test_metal_mac.py`` compares them); it is the
fallback should one threadgroup's barriers not order device memory on real hardware as the
emulator does.

The scan loop stays on the device from one merge to the next, as CUDA's does
(``kernels/train_bpe.cu``; the same rules, ``kernels/common/train_rules.h``): the host queues a
block of ``BLOCK_STEPS`` steps as MLX's lazy graph and waits once per block, reading back the
state record of every step (the merges made) and why the block stopped. A step is five launches:

  train_fold_best     the delta table of the last step into the main table (its pair zeroed),
                      per threadgroup the best pair and the used slots
  train_step_select   one threadgroup: the best pair (THE COMPARATOR), the stops (vocabulary
                      full, min_count, no room in the table, HF's rule 7 by THE TOKEN HASH) and
                      the new id, all into the next state record
  train_find_matches  THE MATCH RULE at every position
  train_merge_deltas  THE DELTA RULE of every match into a new delta table
  train_apply_merge   THE MERGE REWRITE, every position gathering its new state

Between blocks the host handles a stop (a larger table, or the bytes of a rule-7 suspect
compared and the answer written into the state) and compacts the positions once half of them
are dead.

Two facts of MLX's kernels shape this, where CUDA differs:

* **Outputs are fresh buffers on every call**; no input is updated in place (MLX has no way to
  hand a kernel an input to write). So each step rewrites its arrays whole: tok / prv / nxt come
  back as new arrays, and the pair-count table is a read-only *main* table plus the *delta* table
  an insertion shader writes, folded at the start of the next step. CUDA's occurrence lists
  (pair -> positions) need in-place updates of a pool; here a step costs a pass over the
  positions and the table's slots instead (no host round trip either way).
* **32-bit atomics only.** A table slot is claimed with two 32-bit compare-and-swaps and a 64-bit
  count is added as two 32-bit halves with an exact carry (``shaders/train_common.metal``).
  Those atomic sums need outputs that start at 0 (``init_value=0``); every other output is
  written whole by its kernel.

Small inputs are padded to 8 elements: MLX passes an array of fewer elements in Metal's constant
address space, which the shared rules' ``device`` pointers do not accept.

Performance notes (design choices; nothing here is timed yet, for want of Apple hardware):

* Counting pairs by sorting (``mx.argsort`` of 64-bit keys, then segmented sums) would need no
  atomics at all, but costs a sort of every live position per step, where the table costs the
  matches' few updates plus one pass over the slots (the fold, which the best-pair scan needs
  anyway). Kept as the fallback idea if 32-bit compare-and-swap contention proves slow.
* The fold is fused with the per-threadgroup best pair: the table is read once per step.
* The select copies the ids' byte lengths and hashes (16 B per id) each step, in one
  threadgroup: small beside the passes over positions and slots.
* Compaction runs on the host (``arrays.compact``): MLX has no boolean-mask indexing (its shapes
  must be known before running), and with unified memory the round trip is a copy, not a
  transfer; it happens O(log n) times, between blocks.
* Grid-stride loops with at most ``MAX_GROUPS`` threadgroups, as in CUDA: one launch size fits
  any state, and the emulator (one fiber per thread) runs the same shaders with small grids.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import train_arrays as arrays
from ..kernels import TRAIN_BLOCK
from .kernels import MAX_GROUPS, PAD as _PAD, Kernel, KernelFactory, mx_dtype  # noqa: F401
from .kernels import shader_layout

_MASK = (1 << 32) - 1
_MAX_LOAD = 0.75
_MIN_SHRINK = 1 << 16
BLOCK_STEPS = 256  # merge steps queued between two reads of the state
# the scan loop's seven shaders, and the indexed loop's one (train_index.py)
SHADERS = ("train_count_pairs", "train_rehash", "train_fold_best", "train_step_select",
           "train_find_matches", "train_merge_deltas", "train_apply_merge", "train_index_steps")


ST, STOP = shader_layout("train_common.metal")  # (the state record's fields, the stop codes)


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
    """The merge loop on the Metal device (the indexed loop), for the words as
    ``train.cpu.word_arrays`` gives them (the trainer's device contract, ``gputok.train``)."""
    from . import train_index

    factory = kernel_factory()
    ok, why = factory.available()
    if not ok:
        raise RuntimeError(f"the metal training backend is not available: {why}")
    return train_index.train_on_metal(ids, offsets, counts, vocab, vocab_size=vocab_size,
                                      min_frequency=min_frequency, kernels=factory,
                                      on_merge=on_merge)


def available() -> tuple[bool, str]:
    """Whether ``train_bpe(backend="metal")`` can run here (the kernel factory's device)."""
    return kernel_factory().available()


# ---------------------------------------------------------------- the loop

_pow2_at_least = arrays.pow2_at_least


def _pad(x: np.ndarray, fill: int) -> np.ndarray:
    if len(x) >= _PAD:
        return x
    return np.concatenate([x, np.full(_PAD - len(x), fill, dtype=x.dtype)])


def read_back(arrays_: list) -> list[np.ndarray]:
    """Wait for ``arrays_`` and view them on the host: the loop's one wait per block (unified
    memory: a view, not a transfer). A function of its own so the tests can count the calls."""
    import mlx.core as mx

    mx.eval(*arrays_)
    return [np.array(x, copy=False) for x in arrays_]


class _Loop:
    """The device state of one training run (MLX arrays) and the host's moves between blocks."""

    def __init__(self, kernels: KernelFactory, max_groups: int):
        import mlx.core as mx

        self.mx, self.kernels, self.max_groups = mx, kernels, max_groups

    def grid(self, count: int) -> int:
        return max(1, min(self.max_groups, -(-int(count) // TRAIN_BLOCK))) * TRAIN_BLOCK

    def scalar(self, v: int, dtype):
        return self.mx.array(int(v), dtype=dtype)

    def upload(self, tok, prv, nxt, word_of) -> None:
        pads = (arrays.DEAD, -1, -1, 0)
        self.tok, self.prv, self.nxt, self.word_of = (
            self.mx.array(_pad(np.asarray(x, dtype=np.int32), f))
            for x, f in zip((tok, prv, nxt, word_of), pads))
        self.n = self.tok.shape[0]

    def empty(self, cap: int) -> tuple:
        mx = self.mx
        z = mx.zeros((cap,), dtype=mx.uint32)
        return z, z, mx.zeros((cap,), dtype=mx.int64)

    def fold(self, main, delta, cap: int, state):
        """train_fold_best: the folded main table and the per-threadgroup partials."""
        groups = self.grid(cap) // TRAIN_BLOCK
        out = self.kernels("train_fold_best")(
            *main, *delta, self.scalar(cap, self.mx.int64), state,
            output_shapes=[(cap,)] * 3 + [(max(groups, _PAD),)] * 3, grid=groups * TRAIN_BLOCK)
        return tuple(out[:3]), out[3:], groups

    def rehash(self, new_cap: int) -> None:
        """A table of ``new_cap`` slots holding the live entries: an empty main table and the
        entries as its delta table (the next step's fold puts them in)."""
        mx = self.mx
        new = self.empty(new_cap)
        self.delta = tuple(self.kernels("train_rehash")(
            *self.main, self.scalar(self.cap, mx.int64), new[0], new[1],
            self.scalar(new_cap - 1, mx.uint32), output_shapes=[(new_cap,)] * 4,
            grid=self.grid(self.cap), init_value=0))
        self.main, self.cap = new, new_cap

    def settle(self, st: np.ndarray) -> None:
        """Fold the last step's delta table in now (before a rehash reads the main table)."""
        self.main = self.fold(self.main, self.delta, self.cap, self.state)[0]
        self.delta = (self.mx.zeros((self.cap,), dtype=self.mx.uint32),) * 4
        st[ST["MERGED"]] = 0

    def step(self) -> None:
        """One merge step's five launches, queued (MLX runs them when the block is read)."""
        mx, k = self.mx, self.kernels
        self.main, parts, groups = self.fold(self.main, self.delta, self.cap, self.state)
        self.state, self.tok_len, self.tok_hash = k("train_step_select")(
            *parts, self.scalar(groups, mx.int64), self.state, self.tok_len, self.tok_hash,
            self.res_len, self.res_hash, self.scalar(self.n_ids, mx.int64),
            output_shapes=[(ST["SIZE"],), (self.n_ids,), (self.n_ids,)], grid=TRAIN_BLOCK)
        n, g = self.scalar(self.n, mx.int64), self.grid(self.n)
        (is_start,) = k("train_find_matches")(self.tok, self.prv, self.nxt, n, self.state,
                                              output_shapes=[(self.n,)], grid=g)
        self.matched = self.matched + mx.sum(is_start.astype(mx.int64))
        self.delta = tuple(k("train_merge_deltas")(
            self.tok, self.prv, self.nxt, self.word_of, self.wcount, is_start, *self.main[:2], n,
            self.state, self.scalar(self.cap - 1, mx.uint32), output_shapes=[(self.cap,)] * 4,
            grid=g, init_value=0))
        self.tok, self.prv, self.nxt = k("train_apply_merge")(
            self.tok, self.prv, self.nxt, is_start, n, self.state,
            output_shapes=[(self.n,)] * 3, grid=g)


def _setup(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
           kernels: KernelFactory, max_groups: int, initial_capacity: "int | None") -> _Loop:
    """The device state of a training run, ready for its first step: the positions, the first
    pair counts (as a delta table over an empty main one), the ids' byte hashes, the state."""
    n_sym = int(offsets[-1])
    if n_sym >= 2**31 - 1:
        raise ValueError(f"{n_sym} symbols of unique words: the device trainer's int32 "
                         "positions hold at most 2**31 - 2; use backend='numpy'")
    L = _Loop(kernels, max_groups)
    mx = L.mx
    L.upload(*arrays.initial_state(ids, offsets))
    L.wcount = mx.array(_pad(np.asarray(wcounts, dtype=np.int64), 0))
    # the first pairs are pairs of single bytes: fewer than n and than len(vocab) ** 2
    L.cap = _pow2_at_least(initial_capacity or 2 * min(max(n_sym, 1), len(vocab) ** 2))
    L.main = L.empty(L.cap)
    L.delta = tuple(kernels("train_count_pairs")(
        L.tok, L.nxt, L.word_of, L.wcount, *L.main[:2], L.scalar(L.n, mx.int64),
        L.scalar(L.cap - 1, mx.uint32), output_shapes=[(L.cap,)] * 4, grid=L.grid(L.n),
        init_value=0))
    # THE TOKEN HASH of every id so far, and of the spellings that take a special's id
    L.n_ids = max(int(vocab_size), len(vocab) + 1, _PAD)
    tok_len = np.zeros(L.n_ids, np.uint64)
    tok_hash = np.zeros(L.n_ids, np.uint64)
    for i in vocab.learned:
        raw = vocab.token_bytes(i)
        tok_len[i], tok_hash[i] = len(raw), arrays.token_hash(raw)
    L.reserved = vocab.reserved_spellings()
    res = list(L.reserved)
    L.tok_len, L.tok_hash = mx.array(tok_len), mx.array(tok_hash)
    L.res_len = mx.array(_pad(np.array([len(r) for r in res], np.uint64), 0))
    L.res_hash = mx.array(_pad(np.array([arrays.token_hash(r) for r in res], np.uint64), 0))
    st = np.zeros(ST["SIZE"], np.int64)
    for name, v in dict(NEXT_ID=len(vocab), VOCAB_LEN=len(vocab), VOCAB_TARGET=int(vocab_size),
                        MIN_COUNT=max(int(min_frequency), 1), N_RES=len(res), FORCED_KEY=-1,
                        USED_LIMIT=int(_MAX_LOAD * L.cap), N_SYM=n_sym).items():
        st[ST[name]] = v
    L.state = mx.array(st)
    L.matched = mx.array(0, dtype=mx.int64)
    return L


def train_on_metal(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
                   kernels: KernelFactory, max_groups: int = MAX_GROUPS,
                   on_merge: "Callable[[int], None] | None" = None, compact_at: float = 0.5,
                   initial_capacity: "int | None" = None, block_steps: int = BLOCK_STEPS,
                   stats: "dict | None" = None) -> list[tuple[int, int, int]]:
    """Run the merge loop with ``kernels``' shaders over MLX arrays; returns the merges.

    ``ids``/``offsets``/``wcounts``: the words (see ``train.cpu.word_arrays``); ``vocab`` grows with
    the merged tokens. ``max_groups`` caps every grid (the shaders are grid-stride loops);
    ``block_steps`` and ``initial_capacity`` (table slots) size the loop (the tests make them
    small, so every stop happens; the first table must hold the first pairs below 3/4, as the
    default does: a full table would never end a probe). ``stats``, when given, counts the blocks (``"blocks"``), the
    reasons blocks stopped (``STOP``'s names) and the host's moves (``"shrink"``, ``"compact"``).
    """
    stats = {} if stats is None else stats

    def seen(what: str) -> None:
        stats[what] = stats.get(what, 0) + 1

    L = _setup(ids, offsets, wcounts, vocab, vocab_size=vocab_size,
               min_frequency=min_frequency, kernels=kernels, max_groups=max_groups,
               initial_capacity=initial_capacity)
    mx = L.mx
    merges: list[tuple[int, int, int]] = []
    dead_at_compact = 0
    queue = block_steps
    while True:
        records = []
        for _ in range(queue):
            L.step()
            records.append(L.state)
        got = read_back([*records, L.matched, L.tok, L.prv, L.nxt, *L.main, *L.delta,
                         L.tok_len, L.tok_hash])
        queued = queue
        recs, matched = np.stack(got[:queued]), int(got[queued])
        made = 0
        for a, b, c in recs[recs[:, ST["MERGED"]] == 1][:, [ST["A"], ST["B"], ST["C"]]].tolist():
            want = vocab.merge(a, b)
            if want != c:  # the device and the Vocab apply the same rule 7
                raise RuntimeError(f"merge {len(merges)}: id {c} on the device, {want} in the "
                                   "vocabulary")
            merges.append((a, b, c))
            made += 1
        if made and on_merge is not None:
            on_merge(len(merges))
        st = recs[-1].copy()
        why = int(st[ST["STOP"]])
        seen("blocks")
        if why:
            seen(next(k for k, v in STOP.items() if v == why))
        if why in (STOP["TARGET"], STOP["MIN"]):
            return merges
        # a block cut short queued steps that did nothing: queue about twice as many as were
        # made (what stops a block early tends to come back soon), up to block_steps
        queue = block_steps if why == 0 else max(4, min(block_steps, 2 * made))
        used = int(st[ST["USED"]])
        if why == STOP["REHASH"]:
            L.rehash(_pow2_at_least(int(st[ST["NEED"]] / _MAX_LOAD) + 1))
            st[ST["USED_LIMIT"]] = int(_MAX_LOAD * L.cap)
        elif why == STOP["RESERVED"]:  # rule 7: compare the bytes the hash matched
            a, b = int(st[ST["A"]]), int(st[ST["B"]])
            st[ST["FORCED_KEY"]] = (a << 32) | b
            st[ST["FORCED_ID"]] = arrays.existing_id(vocab, L.reserved, a, b)
        elif L.cap >= 8 * _pow2_at_least(2 * used) and L.cap > _MIN_SHRINK:
            seen("shrink")
            L.settle(st)  # (the fold reads every slot: a table 8x too large is rebuilt)
            L.rehash(_pow2_at_least(2 * used))
            st[ST["USED_LIMIT"]] = int(_MAX_LOAD * L.cap)
        st[ST["STOP"]] = 0
        if matched - dead_at_compact > compact_at * L.n and L.n > _PAD:
            seen("compact")
            host = [*got[queued + 1:queued + 4], np.array(L.word_of, copy=False)]
            L.upload(*arrays.compact(*host))
            dead_at_compact = matched
        L.state = mx.array(st)
