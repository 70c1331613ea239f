"""Counted words, the hand-over between the two phases of training: every unique word's UTF-8
bytes back to back, its offsets and its count (numpy arrays), plus what the counting pruned.

Both word counters make one (the native counter directly, the Python one from its ``Counter``),
and every merge loop takes one: ``symbol_arrays(vocab)`` gives the words as symbol ids.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass
class WordCounts:
    data: np.ndarray  # uint8: the words' bytes, back to back
    offsets: np.ndarray  # int64, len n + 1
    counts: np.ndarray  # int64, len n
    pieces: int = 0  # words counted, repeats included
    prune_floor: int = 0  # THE PRUNE RULE's floor (0: nothing was pruned)
    pruned_words: int = 0
    pruned_count: int = 0

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def exact(self) -> bool:
        """Whether every word's count is exact (nothing was pruned)."""
        return self.prune_floor == 0

    @classmethod
    def from_counter(cls, words: Counter) -> "WordCounts":
        encoded = [w.encode("utf-8") for w in words]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        counts = np.fromiter(words.values(), dtype=np.int64, count=len(encoded))
        data = np.frombuffer(b"".join(encoded), np.uint8)
        return cls(data, offsets, counts, pieces=int(counts.sum()))

    def items(self):
        """``(word bytes, count)`` pairs (tests and small corpora)."""
        raw = self.data.tobytes()
        off = self.offsets.tolist()
        return [(raw[off[i]:off[i + 1]], c) for i, c in enumerate(self.counts.tolist())]

    def symbol_arrays(self, vocab, min_len: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Words of at least ``min_len`` bytes as symbol ids ``(ids uint32, offsets int64,
        counts int64)``: each byte its id in ``vocab`` (single bytes hold no pair)."""
        lengths = np.diff(self.offsets)
        keep = lengths >= min_len
        if keep.all():
            data, lengths, counts = self.data, lengths, self.counts
        else:
            starts = self.offsets[:-1][keep]
            lengths, counts = lengths[keep], self.counts[keep]
            data = self.data[np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
                             + np.arange(int(lengths.sum()))]
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = vocab.byte_ids.astype(np.uint32)[data]
        return ids, offsets, np.ascontiguousarray(counts, np.int64)
