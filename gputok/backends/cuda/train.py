"""The CUDA trainer: the merge loop of ``kernels/train_bpe.cu``, on the device from one merge to
the next.

One driver (``train_on_device``) for any launcher of those kernels: CuPy on an NVIDIA GPU
(``train_arrays``, kernels compiled by NVRTC through the encode kernels' loader), or the CPU
kernel emulator in the tests (so CI runs this exact loop, kernels included, without a GPU).
``xp`` is the array module the launcher works on (cupy, or numpy for the emulator).

The host queues merge steps in blocks (``BLOCK_STEPS``, six launches each, see the kernel
file) and reads back, once per block, the merges made and the state record; a step that finds
the loop stopped does nothing. Between blocks it handles why the loop stopped:

* the best candidate cannot vouch for the best pair, or the candidates are full: choose them
  again (``choose_candidates``: THE CANDIDATE RULE, one pass over the table);
* the table could pass 3/4 full this step: a table twice as large (``train_rehash``; lists
  move with their pairs), then new candidates;
* the pool of occurrence lists or the gain buffers could overflow: a larger one (the pool
  keeps only the lists of pairs still counted);
* the merged token may be spelled like a special token (HF's rule 7, THE TOKEN HASH): the host
  compares the bytes and tells the next step which id the pair takes.

Per step the device touches the merged pair's occurrences and what they change, plus one block
over the candidates; the host's work is per block. Limits: positions are int32 and uint32 in the
lists (2**31 symbols of unique words, ~2 GB of distinct words).

CuPy is imported only when this trainer is asked for; without CuPy or a GPU, ``available()``
says why and ``train_bpe(backend="cuda")`` raises ``RuntimeError`` with that reason. Word counting
stays on the CPU; the words' symbols, their counts and the pair table then move to the GPU
once. If the GPU runs out of memory, training restarts on the CPU with a warning.

Performance notes: nothing here has run on a GPU yet (the emulator proves the logic, not the
speed). Expected costs: six launches a step (~30 us of launch latency on an H200, 32K merges
~1 s), a block of steps queued with no synchronisation; CUDA graphs of a block are the next
step if launches dominate.
"""


from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from .. import train_arrays as arrays
from ..train_arrays import token_hash
from ..kernels import TRAIN_BLOCK, kernel_dir

_MASK = (1 << 32) - 1
_MAX_LOAD = 0.75
BLOCK_STEPS = 256  # merge steps queued between two reads of the state
CANDIDATES = 1 << 14  # room for candidates (the select kernel's one block scans them)
STEP_KERNELS = ("train_step_select", "train_step_mark", "train_step_deltas", "train_step_apply",
                "train_step_lists", "train_step_place")


def _state_layout() -> tuple[dict, dict]:
    """The state record's fields and the stop codes, as the kernel file defines them."""
    return arrays.state_layout((Path(kernel_dir()) / "train_bpe.cu").read_text())


ST, STOP = _state_layout()
_pow2_at_least = arrays.pow2_at_least


class _Loop:
    """The device state of one training run and the host's moves between blocks."""

    def __init__(self, xp, launch, max_blocks: int, to_host):
        self.xp, self.launch, self.max_blocks, self.to_host = xp, launch, max_blocks, to_host

    def grid(self, count: int) -> tuple:
        return (max(1, min(self.max_blocks, -(-int(count) // TRAIN_BLOCK))),)

    def new_table(self, cap: int) -> None:
        xp = self.xp
        self.cap = cap
        self.keys = xp.full(cap, arrays.EMPTY_KEY, dtype=xp.uint64)
        self.counts = xp.zeros(cap, dtype=xp.uint64)
        self.list_off = xp.zeros(cap, dtype=xp.int64)
        self.list_len = xp.zeros(cap, dtype=xp.uint32)
        self.gain_n = xp.zeros(cap, dtype=xp.uint32)

    def set(self, **fields) -> None:
        for k, v in fields.items():
            self.state[ST[k]] = v

    def get(self) -> np.ndarray:
        return np.asarray(self.to_host(self.state)).astype(np.int64)

    def table_args(self) -> list:
        return [self.keys, self.counts, np.uint64(self.cap - 1)]

    def lists(self, n: int) -> None:
        """Every pair's occurrence list from the positions (after the first count or a
        rebuild): counts, a scan on the host's array module, placement."""
        xp, i64 = self.xp, np.int64
        self.gain_n[:] = 0
        self.launch("train_count_occurrences", self.grid(n), (TRAIN_BLOCK,),
                    [self.tok, self.nxt, i64(n), self.keys, np.uint64(self.cap - 1),
                     self.gain_n])
        sizes = self.gain_n.astype(xp.int64)
        self.list_off[:] = xp.cumsum(sizes) - sizes
        self.list_len[:] = 0
        total = int(sizes.sum())
        self.pool = xp.zeros(max(2 * total + 2 * n, 16), dtype=xp.uint32)
        self.launch("train_place_occurrences", self.grid(n), (TRAIN_BLOCK,),
                    [self.tok, self.nxt, i64(n), self.keys, np.uint64(self.cap - 1),
                     self.list_off, self.list_len, self.pool])
        self.gain_n[:] = 0
        self.set(POOL_USED=total, POOL_CAP=len(self.pool))

    def rehash(self, new_cap: int) -> None:
        old = (self.keys, self.counts, self.list_off, self.list_len, self.cap)
        self.new_table(new_cap)
        self.set(USED=0)
        self.launch("train_rehash", self.grid(old[4]), (TRAIN_BLOCK,),
                    [*old[:4], np.int64(old[4]), self.keys, self.counts, self.list_off,
                     self.list_len, np.uint64(new_cap - 1), self.state])
        used = int(self.get()[ST["USED"]])
        self.set(USED_LIMIT=int(_MAX_LOAD * new_cap))
        return used

    def repack_pool(self, need: int) -> None:
        """A pool holding only the lists of pairs still counted, with room for ``need`` more."""
        xp = self.xp
        live = (self.counts.view(xp.int64) > 0) & (self.list_len > 0)
        slots = xp.flatnonzero(live)
        lens = self.list_len[slots].astype(xp.int64)
        total = int(lens.sum())
        starts = xp.cumsum(lens) - lens
        src = xp.repeat(self.list_off[slots] - starts, lens) + xp.arange(total, dtype=xp.int64)
        pool = xp.zeros(max(2 * (total + need), 16), dtype=xp.uint32)
        pool[:total] = self.pool[src]
        self.list_len[:] = xp.where(live, self.list_len, 0).astype(xp.uint32)
        self.list_off[slots] = starts
        self.pool = pool
        self.set(POOL_USED=total, POOL_CAP=len(pool))

    def choose_candidates(self) -> None:
        """THE CANDIDATE RULE: the best pairs (THE COMPARATOR) filling half the candidates' room
        (the other half takes the pairs steps form that beat the boundary), and the worst of
        them as the boundary; all pairs when they fit (boundary: count 0)."""
        xp = self.xp
        cnt = self.counts.view(xp.int64)
        slots = xp.flatnonzero((self.keys != arrays.EMPTY_KEY) & (cnt > 0))
        k = len(self.cand) // 2
        if len(slots) <= k:
            chosen, bound = slots, (0, int(arrays.EMPTY_KEY))
        else:
            c = cnt[slots]
            t = int(xp.partition(c, len(c) - k)[len(c) - k])  # the k-th largest count
            above = slots[c > t]
            ties = slots[c == t]
            ties = ties[xp.argsort(self.keys[ties])][:k - len(above)]
            chosen = xp.concatenate([above, ties])
            bound = (t, int(self.keys[ties[-1]]))
        self.cand[:len(chosen)] = chosen.astype(xp.uint32)
        self.set(CAND_N=len(chosen), CAND_FULL=0, BOUND_COUNT=bound[0],
                 BOUND_KEY=np.uint64(bound[1]).astype(np.int64))


def setup(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int, xp,
          launch: Callable, max_blocks: int = 4096, to_host: "Callable | None" = None,
          initial_capacity: "int | None" = None, block_steps: int = BLOCK_STEPS,
          candidates: int = CANDIDATES) -> _Loop:
    """The device state of a training run, ready for its first step: the words' positions,
    the first pair counts and occurrence lists, the candidates."""
    if to_host is None:
        to_host = (lambda a: a.get()) if xp is not np else np.asarray
    n = int(offsets[-1])
    if n >= 2**31 - 1:
        raise ValueError(f"{n} symbols of unique words: the device trainer's int32 positions "
                         "hold at most 2**31 - 2; use backend='native'")
    L = _Loop(xp, launch, max_blocks, to_host)
    L.tok, L.prv, L.nxt, L.word_of = arrays.initial_state(ids, offsets, xp=xp)
    L.wcount = xp.asarray(np.asarray(wcounts, dtype=np.int64))
    L.is_start = xp.zeros(max(n, 1), dtype=xp.uint8)
    L.state = xp.zeros(ST["SIZE"], dtype=xp.int64)
    # the first pairs are pairs of single bytes: fewer than n and than len(vocab) ** 2
    L.new_table(_pow2_at_least(initial_capacity or 2 * min(max(n, 1), len(vocab) ** 2)))
    L.launch("train_count_pairs", L.grid(n), (TRAIN_BLOCK,),
             [L.tok, L.nxt, L.word_of, L.wcount, np.int64(n), *L.table_args(), L.state])
    L.lists(n)
    longest = int(L.list_len.max()) if L.cap else 0
    gcap = max(2 * longest, 16)
    L.gain_slot = xp.zeros(gcap, dtype=xp.uint32)
    L.gain_pos = xp.zeros(gcap, dtype=xp.uint32)
    L.gslots = xp.zeros(gcap, dtype=xp.uint32)
    L.matches = xp.zeros(gcap, dtype=xp.uint32)
    L.cand = xp.zeros(candidates, dtype=xp.uint32)
    L.rec = xp.zeros(4 * block_steps, dtype=xp.int64)
    # THE TOKEN HASH of every id so far, and of the spellings that take a special's id
    room = max(int(vocab_size), len(vocab)) + 1
    tok_len = np.zeros(room, np.uint64)
    tok_hash = np.zeros(room, np.uint64)
    for i in vocab.learned:
        raw = vocab.token_bytes(i)
        tok_len[i], tok_hash[i] = len(raw), token_hash(raw)
    reserved = vocab.reserved_spellings()
    res = list(reserved) or [b""]
    L.tok_len, L.tok_hash = xp.asarray(tok_len), xp.asarray(tok_hash)
    L.res_len = xp.asarray(np.array([len(r) for r in res], np.uint64))
    L.res_hash = xp.asarray(np.array([token_hash(r) for r in res], np.uint64))
    L.set(NEXT_ID=len(vocab), VOCAB_LEN=len(vocab), VOCAB_TARGET=int(vocab_size),
          MIN_COUNT=max(int(min_frequency), 1), CAND_CAP=candidates,
          USED_LIMIT=int(_MAX_LOAD * L.cap), GAINS_CAP=gcap, N_RES=len(reserved),
          REC_CAP=block_steps, FORCED_KEY=np.uint64(arrays.EMPTY_KEY).astype(np.int64))
    L.choose_candidates()
    L.gcap, L.reserved = gcap, reserved
    return L


def train_on_device(ids: np.ndarray, offsets: np.ndarray, wcounts: np.ndarray, vocab, *,
                    vocab_size: int, min_frequency: int, xp, launch: Callable,
                    max_blocks: int = 4096, to_host: "Callable | None" = None,
                    on_merge: "Callable[[int], None] | None" = None,
                    initial_capacity: "int | None" = None, block_steps: int = BLOCK_STEPS,
                    candidates: int = CANDIDATES) -> list[tuple[int, int, int]]:
    """Run the merge loop with ``launch(kernel_name, grid, block, args)``.

    ``ids``/``offsets``/``wcounts``: the words (see ``train.cpu.word_arrays``); ``vocab`` (a
    ``train.vocab.Vocab``) grows with the merged tokens. ``max_blocks`` caps every grid (the
    kernels are grid-stride loops); ``block_steps``, ``candidates`` and ``initial_capacity``
    (table slots) size the loop (the tests make them small, so every stop happens).
    """
    L = setup(ids, offsets, wcounts, vocab, vocab_size=vocab_size, min_frequency=min_frequency,
              xp=xp, launch=launch, max_blocks=max_blocks, to_host=to_host,
              initial_capacity=initial_capacity, block_steps=block_steps,
              candidates=candidates)
    xp, to_host, gcap, reserved = L.xp, L.to_host, L.gcap, L.reserved
    merges: list[tuple[int, int, int]] = []
    queue = block_steps
    while True:
        L.set(STEPS=0, REC_CAP=queue)
        for _ in range(queue + 1):  # (the last one stops the block: rec is full)
            _step(L)
        st = L.get()
        k = int(st[ST["STEPS"]])
        # a block cut short queued steps that did nothing: queue about twice as many as were
        # made (what stops a block early tends to come back soon), up to block_steps
        queue = block_steps if k == queue else max(4, min(block_steps, 2 * k))
        recs = np.asarray(to_host(L.rec[:4 * k])).reshape(-1, 4)
        arrays.take_merges(vocab, recs[:, :3].tolist(), merges, on_merge)
        if st[ST["ANOMALY"]]:
            raise RuntimeError("the device loop formed a pair in two steps (never in HF's "
                               "rule): its occurrence lists are wrong")
        why = int(st[ST["STOP"]])
        if why in (STOP["TARGET"], STOP["MIN"]):
            return merges
        if why == STOP["REBUILD"]:
            L.choose_candidates()
        elif why == STOP["REHASH"]:
            used = int(st[ST["USED"]])
            L.rehash(_pow2_at_least(int((used + 2 * gcap) / _MAX_LOAD) + 1))
            L.choose_candidates()
        elif why == STOP["POOL"]:
            L.repack_pool(gcap)
        elif why == STOP["GAINS"]:
            gcap = L.gcap = 2 * gcap
            for name in ("gain_slot", "gain_pos", "gslots", "matches"):
                setattr(L, name, xp.zeros(gcap, dtype=xp.uint32))
            L.set(GAINS_CAP=gcap)
        elif why == STOP["RESERVED"]:  # rule 7: compare the bytes the hash matched
            a, b = int(st[ST["A"]]), int(st[ST["B"]])
            spelled = vocab.token_bytes(a) + vocab.token_bytes(b)
            L.set(FORCED_KEY=np.uint64((a << 32) | b).astype(np.int64),
                  FORCED_ID=reserved.get(spelled, -1))
        L.set(STOP=0)


def _step(L: _Loop) -> None:
    """One merge step's six launches (each does nothing once the loop has stopped)."""
    g = L.grid(len(L.matches))
    B = (TRAIN_BLOCK,)
    L.launch("train_step_select", (1,), B,
             [L.keys, L.counts, L.list_off, L.list_len, L.cand, L.rec, L.tok_len, L.tok_hash,
              L.res_len, L.res_hash, L.state])
    L.launch("train_step_mark", g, B,
             [L.tok, L.prv, L.nxt, L.pool, L.is_start, L.matches, L.state])
    L.launch("train_step_deltas", g, B,
             [L.tok, L.prv, L.nxt, L.word_of, L.wcount, L.is_start, L.matches, *L.table_args(),
              L.gain_n, L.gain_slot, L.gain_pos, L.gslots, L.state])
    L.launch("train_step_apply", g, B, [L.tok, L.prv, L.nxt, L.matches, L.state])
    L.launch("train_step_lists", g, B,
             [L.keys, L.counts, L.list_off, L.list_len, L.gain_n, L.gslots, L.matches,
              L.is_start, L.cand, L.state])
    L.launch("train_step_place", g, B,
             [L.list_off, L.list_len, L.gain_n, L.gain_slot, L.gain_pos, L.pool, L.state])


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
