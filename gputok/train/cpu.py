"""The CPU trainer (backend "numpy"): HF's incremental merge loop, with numpy for the bulk steps.

State, as in HF's ``BpeTrainer``:

* ``words``: every unique word of two or more bytes as a list of symbol ids, with its count
  (single-byte words can never hold a pair, so they are dropped up front);
* ``counts``: pair key ``left << 32 | right`` -> count, over overlapping windows, weighted by word
  count (Python ints: 64 bits and more, never overflow);
* a max-heap of ``(count, pair, words)`` entries with *lazy* updates: counts of existing pairs
  only go down, so an entry whose count is stale is re-queued with the current count when it
  surfaces, and the first entry that surfaces with its current count is the true best pair.
  Each entry carries the set of words the pair was seen in when it was queued, exactly like HF;
  a merge touches only those words.

A merge rewrites each touched word left to right without overlap and records, for every match,
the pair changes HF records: ``(prev, a) -1, (prev, new) +1, (b, next) -1, (new, next) +1``
(``prev``/``next`` as they stand at that moment, so a just-merged neighbour counts as ``new``).
Pairs that gained are queued with the words they gained in.

The first counting pass (every pair of every word) is vectorised with numpy: a sort of all
pair keys, then ``reduceat`` sums, and a second sort for the (pair, word) sets.

Performance notes (20 MB of prose, 163K unique words, 32K vocab, one core of this 2-core
Xeon): counting words ~2 s (words.py), arrays and first pairs ~0.5 s, the merge loop ~6.5 s;
HF's BpeTrainer takes ~14 s for the same merges on both cores. The loop touches ~1.6M (word,
merge) pairs in all, ~3 us each; the first 1,000 merges take ~40% of it, because their pairs
are in most words. Disabling the cyclic GC during the loop saves ~25% (millions of live lists
and tuples, nothing to collect). Tried and dropped: jumping to candidates with ``list.index``
(25% slower than scanning these short words: the ``ValueError`` at the end of each word costs
more than the scan); local aliases of ``dict.get`` (no change). Considered and not pursued: a
numpy rewrite of the big early merges: gathering the touched words' lists into a flat array
and scattering them back costs about what the Python rewrite costs per word.
"""

from __future__ import annotations

import gc
import heapq
from typing import Callable

import numpy as np

from .vocab import Vocab
from .wordset import WordCounts

_MASK = (1 << 32) - 1


def word_arrays(words, vocab: Vocab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Words of >= 2 bytes as flat symbol ids: ``(ids uint32, offsets int64, counts int64)``.
    ``words``: a ``WordCounts`` or a ``Counter`` of str."""
    return as_word_counts(words).symbol_arrays(vocab)


def as_word_counts(words) -> WordCounts:
    return words if isinstance(words, WordCounts) else WordCounts.from_counter(words)


def initial_pairs(ids: np.ndarray, offsets: np.ndarray, counts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every pair's count and the words it occurs in.

    Returns ``(keys uint64 sorted, pair_counts int64, word_starts int64, word_idx int64)``: the
    words of pair ``keys[k]`` are ``word_idx[word_starts[k]:word_starts[k + 1]]`` (each once).
    """
    n_words = len(offsets) - 1
    word_of = np.repeat(np.arange(n_words, dtype=np.int64), np.diff(offsets))
    inner = np.ones(len(ids), dtype=bool)
    inner[offsets[1:] - 1] = False  # a word's last symbol starts no pair
    pos = np.nonzero(inner)[0]
    keys = (ids[pos].astype(np.uint64) << np.uint64(32)) | ids[pos + 1].astype(np.uint64)
    wof = word_of[pos]
    if len(keys) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return keys, empty, np.zeros(1, dtype=np.int64), empty
    order = np.lexsort((wof, keys))  # by key, then word
    keys, wof = keys[order], wof[order]
    weights = counts[wof]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    pair_counts = np.add.reduceat(weights, starts)
    # one entry per (pair, word)
    first = np.r_[True, (keys[1:] != keys[:-1]) | (wof[1:] != wof[:-1])]
    k2, w2 = keys[first], wof[first]
    wstarts = np.flatnonzero(np.r_[True, k2[1:] != k2[:-1]])
    word_starts = np.r_[wstarts, len(k2)].astype(np.int64)
    return keys[starts], pair_counts, word_starts, w2


def train_words(words, vocab: Vocab, *, vocab_size: int, min_frequency: int,
                on_merge: "Callable[[int], None] | None" = None,
                on_log: "Callable[[int, int, int, int], None] | None" = None
                ) -> list[tuple[int, int, int]]:
    """Run HF's merge loop on counted words (a ``WordCounts`` or a ``Counter``); returns
    ``(left, right, merged)`` ids in order and grows ``vocab`` with the merged tokens.
    ``on_log(left, right, merged, count)`` sees every merge (the verbose log)."""
    ids, offsets, wcounts = word_arrays(words, vocab)
    keys, pcounts, wstarts, widx = initial_pairs(ids, offsets, wcounts)
    ids_l = ids.tolist()
    off_l = offsets.tolist()
    word_syms = [ids_l[off_l[k]:off_l[k + 1]] for k in range(len(off_l) - 1)]
    del ids_l
    wcount = wcounts.tolist()

    counts: dict[int, int] = dict(zip(keys.tolist(), pcounts.tolist()))
    ws = wstarts.tolist()
    # THE COMPARATOR. heapq pops the smallest tuple, so entries are (-count, pair key, seq,
    # words): highest count first; on equal counts the smallest pair key, i.e. the smallest
    # (left_id, right_id) since key = left << 32 | right. ``seq`` only keeps the word sets out
    # of comparisons (one pair is never queued twice with the same count).
    heap = [(-c, k, i, widx[ws[i]:ws[i + 1]]) for i, (k, c) in
            enumerate(zip(counts, pcounts.tolist())) if c > 0]
    heapq.heapify(heap)
    seq = len(heap)
    # the loop allocates millions of small objects that all stay alive: the cyclic GC's full
    # passes over them cost ~20% and can find nothing to free
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _merge_loop(word_syms, wcount, counts, heap, seq, vocab, vocab_size,
                           max(min_frequency, 1), on_merge, on_log)
    finally:
        if gc_was_on:
            gc.enable()


def _merge_loop(word_syms, wcount, counts, heap, seq, vocab, vocab_size, min_count, on_merge,
                on_log):
    heappop, heappush = heapq.heappop, heapq.heappush
    merges: list[tuple[int, int, int]] = []
    while len(vocab) < vocab_size and heap:
        negc, key, _, where = heappop(heap)
        cur = counts[key]
        if -negc != cur:  # stale: re-queue with the current count (counts only went down)
            if cur > 0:
                seq += 1
                heappush(heap, (-cur, key, seq, where))
            continue
        if cur < min_count:
            break
        a, b = key >> 32, key & _MASK
        new = vocab.merge(a, b)
        merges.append((a, b, new))
        if on_log is not None:
            on_log(a, b, new, cur)
        # HF leaves the merged pair's own count as is (stale, but never queued again); so do we
        gained: dict[int, list[int]] = {}
        if isinstance(where, np.ndarray):
            where = where.tolist()
        new_hi, b_hi = new << 32, b << 32
        for wi in where:
            w = word_syms[wi]
            n = wcount[wi]
            i = 0
            last = len(w) - 1
            while i < last:
                if w[i] == a and w[i + 1] == b:
                    if i > 0:
                        p = w[i - 1] << 32
                        counts[p | a] -= n
                        k = p | new
                        counts[k] = counts.get(k, 0) + n
                        g = gained.get(k)
                        if g is None:
                            gained[k] = [wi]
                        elif g[-1] != wi:
                            g.append(wi)
                    if i + 1 < last:
                        q = w[i + 2]
                        counts[b_hi | q] -= n
                        k = new_hi | q
                        counts[k] = counts.get(k, 0) + n
                        g = gained.get(k)
                        if g is None:
                            gained[k] = [wi]
                        elif g[-1] != wi:
                            g.append(wi)
                    w[i:i + 2] = (new,)
                    last -= 1
                i += 1  # past the merged symbol: no overlap, and a fresh (new, x) is not (a, b)
        for k, wl in gained.items():
            c = counts[k]
            if c > 0:
                seq += 1
                heappush(heap, (-c, k, seq, wl))
        if on_merge is not None:
            on_merge(len(merges))
    return merges
