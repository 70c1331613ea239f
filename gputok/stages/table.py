"""The merge table: both BPE rules as one lookup, ``(left_id, right_id) -> (priority, merged_id)``.

* tiktoken rule (``from_ranks``): a pair merges when the concatenation of its bytes is a token;
  priority = that token's rank = its id. A piece that is a token is emitted whole first.
* HF rule (``from_merges``): ``merges[i] = (left, right, merged)``, priority ``i`` (the first
  occurrence of a pair wins); the whole-piece lookup applies only with ``ignore_merges``.

The table lives in two forms: a dict keyed by ``left << 32 | right`` for scalar paths, and an
open-addressing hash table in flat arrays (load <= 1/2, Fibonacci hashing on the top bits,
linear probing, an empty slot ends a probe) that the vectorised numpy merge and every device
kernel probe. ``HASH_MUL`` is the one source of that constant: the kernels get it as a define.

Building the tiktoken-rule table walks every split of every token (~1 s per 100K tokens), so
its arrays are cached on disk (``$GPUTOK_CACHE``, default ``~/.cache/gputok``) under a key made
of the vocabulary's digest, the hash constant and ``BUILDER_VERSION``; a loaded table is
spot-checked against the vocabulary and rebuilt if anything disagrees.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import random

import numpy as np

from .._arrays import probe_place, unique_sorted
from .._cache import cache_dir, write_atomic

NO_MERGE = np.uint32(0xFFFFFFFF)
EMPTY_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)
HASH_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: multiply, keep the top bits
#: bump when the table's layout or the way it is built changes: old cache files are ignored
BUILDER_VERSION = 2


class MergeTable:
    """The merge table of one vocabulary (see the module docstring)."""

    def __init__(self, pairs: "dict[int, tuple[int, int]] | None", byte_ids: np.ndarray,
                 whole: "dict[bytes, int] | None", *, arrays: "dict | None" = None):
        self.byte_ids = np.asarray(byte_ids, dtype=np.uint32)  # id of each single byte
        self.byte_id_list = [int(x) for x in self.byte_ids]
        self.whole = whole  # bytes -> id when whole-piece lookup applies, else None
        if arrays is None:
            keys = np.fromiter(pairs.keys(), dtype=np.uint64, count=len(pairs))
            vals = np.array(list(pairs.values()), dtype=np.uint32).reshape(-1, 2)
            arrays = {"pair_keys": keys, "pair_prio": vals[:, 0].copy(),
                      "pair_merged": vals[:, 1].copy()}
            self.__dict__["pairs"] = pairs
        self.pair_keys = arrays["pair_keys"]
        self.pair_prio = arrays["pair_prio"]
        self.pair_merged = arrays["pair_merged"]
        if "h_keys" in arrays:
            self.h_keys, self.h_prio, self.h_merged = (arrays["h_keys"], arrays["h_prio"],
                                                       arrays["h_merged"])
            self.hash_bits = int(len(self.h_keys)).bit_length() - 1
        else:
            self._build_hash(self.pair_keys, self.pair_prio, self.pair_merged)

    def __len__(self) -> int:
        return len(self.pair_keys)

    @functools.cached_property
    def pairs(self) -> dict[int, tuple[int, int]]:
        """The table as a dict (scalar paths); rebuilt from the arrays on first use."""
        return dict(zip(self.pair_keys.tolist(),
                        zip(self.pair_prio.tolist(), self.pair_merged.tolist())))

    def arrays(self) -> dict:
        return {"pair_keys": self.pair_keys, "pair_prio": self.pair_prio,
                "pair_merged": self.pair_merged, "h_keys": self.h_keys, "h_prio": self.h_prio,
                "h_merged": self.h_merged}

    def _build_hash(self, keys, prio, merged) -> None:
        """Linear probing at load factor <= 1/2, built vectorised (``_arrays.probe_place``)."""
        bits = max(4, int(len(keys) * 2 - 1).bit_length())
        self.hash_bits = bits
        cap = 1 << bits
        owner = probe_place(self._home(keys), cap)
        used = owner >= 0
        at = owner[used]
        self.h_keys = np.full(cap, EMPTY_KEY, dtype=np.uint64)
        self.h_keys[used] = keys[at]
        self.h_prio = np.full(cap, NO_MERGE, dtype=np.uint32)
        self.h_prio[used] = prio[at]
        self.h_merged = np.zeros(cap, dtype=np.uint32)
        self.h_merged[used] = merged[at]

    def _home(self, q: np.ndarray) -> np.ndarray:
        return ((q * HASH_MUL) >> np.uint64(64 - self.hash_bits)).astype(np.int64)

    def lookup(self, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised probe: (priority, merged), priority ``NO_MERGE`` where the pair is absent."""
        q = (left.astype(np.uint64) << np.uint64(32)) | right.astype(np.uint64)
        prio = np.full(len(q), NO_MERGE, dtype=np.uint32)
        merged = np.zeros(len(q), dtype=np.uint32)
        mask = np.int64(len(self.h_keys) - 1)
        slot = self._home(q)
        todo = np.arange(len(q))
        while len(todo):
            s = slot[todo]
            k = self.h_keys[s]
            hit = k == q[todo]
            prio[todo[hit]] = self.h_prio[s[hit]]
            merged[todo[hit]] = self.h_merged[s[hit]]
            go_on = ~hit & (k != EMPTY_KEY)  # an empty slot ends the probe: absent
            todo = todo[go_on]
            slot[todo] = (slot[todo] + 1) & mask
        return prio, merged

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_ranks(cls, ranks: dict[bytes, int], *, digest: "str | None" = None,
                   decoder: "dict[int, bytes] | None" = None) -> "MergeTable":
        """tiktoken rule. With a ``digest`` of the vocabulary, the arrays are cached on disk."""
        byte_ids = np.array([ranks[bytes([b])] for b in range(256)], dtype=np.uint32)
        key = cache_key(digest)
        cached = _load_cached(key)
        if cached is not None:
            table = cls(None, byte_ids, ranks, arrays=cached)
            if table._spot_check(ranks, decoder):
                return table
        pairs: dict[int, tuple[int, int]] = {}
        get = ranks.get
        for tok, rank in ranks.items():
            for k in range(1, len(tok)):
                left = get(tok[:k])
                if left is None:
                    continue
                right = get(tok[k:])
                if right is not None:
                    pairs[left << 32 | right] = (rank, rank)
        table = cls(pairs, byte_ids, ranks)
        _store_cached(key, table.arrays())
        return table

    @classmethod
    def from_merges(cls, merges: list[tuple[int, int, int]], byte_ids, whole) -> "MergeTable":
        """HF rule: ``merges[i] = (left_id, right_id, merged_id)``; priority = i (first wins)."""
        pairs: dict[int, tuple[int, int]] = {}
        for i, (a, b, m) in enumerate(merges):
            pairs.setdefault(a << 32 | b, (i, m))
        return cls(pairs, byte_ids, whole)

    def _spot_check(self, ranks: dict[bytes, int], decoder, samples: int = 64) -> bool:
        """Does a cached tiktoken-rule table agree with ``ranks``? Checks sampled entries (the
        merged token spells the pair, priority = merged = its rank, the hash probe finds it) and
        sampled tokens (each token with a splitting into two tokens has a pair entry)."""
        n = len(self.pair_keys)
        if n == 0 or len(self.h_keys) < 2 * n or len(self.h_keys) & (len(self.h_keys) - 1):
            return n == 0 and all(len(t) == 1 for t in ranks)
        if decoder is None:
            decoder = {r: t for t, r in ranks.items()}
        rng = random.Random(n)
        idx = np.array(sorted(rng.sample(range(n), min(samples, n))), np.int64)
        keys = self.pair_keys[idx]
        left, right = (keys >> np.uint64(32)).astype(np.uint32), keys.astype(np.uint32)
        prio, merged = self.lookup(left, right)
        for a, b, p, m in zip(left.tolist(), right.tolist(), prio.tolist(), merged.tolist()):
            if a not in decoder or b not in decoder or ranks.get(decoder[a] + decoder[b]) != m \
                    or p != m:
                return False
        sample = getattr(ranks, "sample", None)  # a RankTable samples without a dict
        toks = sample(rng, samples) if sample is not None else \
            rng.sample(list(ranks), min(samples, len(ranks)))
        toks = [t for t in toks if len(t) > 1]
        pairs = [(ranks[t[:1]], ranks[t[1:]]) for t in toks if t[1:] in ranks]
        if pairs:
            a = np.array([p[0] for p in pairs], np.uint32)
            b = np.array([p[1] for p in pairs], np.uint32)
            if (self.lookup(a, b)[0] == NO_MERGE).any():
                return False
        return True


def cache_key(digest: "str | None") -> "str | None":
    """The cache file key: the vocabulary digest, the hash constant and the builder version."""
    if digest is None:
        return None
    h = hashlib.sha256(f"{digest}|{int(HASH_MUL):x}|{BUILDER_VERSION}".encode())
    return h.hexdigest()[:32]


def _cache_file(key: str) -> str:
    return os.path.join(cache_dir(), f"merge-table-{key}.npz")


def _load_cached(key: "str | None") -> "dict | None":
    if key is None:
        return None
    try:
        with np.load(_cache_file(key)) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError):  # absent or damaged: rebuild
        return None


def _store_cached(key: "str | None", arrays: dict) -> None:
    if key is None:
        return
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    # atomic: concurrent processes never see half a file; a read-only home costs a rebuild
    write_atomic(_cache_file(key), buf.getvalue())


def join_bitmap(tokens: "list[bytes]") -> np.ndarray:
    """65536 bits (uint32[2048]): bit ``x << 8 | y`` is set when the bytes x, y are next to each
    other inside one of ``tokens`` (every token the merge table can make, or a superset: more
    bits only cut long pieces less). Where it is clear, no merge crosses between x and y
    (``enc_may_join`` in kernels/common/encode_merge_rules.h, ``merge_long_cut`` on the host)."""
    data = np.frombuffer(b"".join(tokens), np.uint8).astype(np.uint32)
    lens = np.fromiter(map(len, tokens), np.int64, len(tokens))
    ends = np.cumsum(lens)
    inside = np.ones(max(len(data) - 1, 0), bool)  # pairs within one token, not across two
    inside[ends[:-1][ends[:-1] > 0] - 1] = False
    codes = unique_sorted(((data[:-1] << 8) | data[1:])[inside])
    bits = np.zeros(2048, np.uint32)
    np.bitwise_or.at(bits, codes >> 5, np.left_shift(np.uint32(1), (codes & 31).astype(np.uint32)))
    return bits


def merged_tokens(model, table) -> "list[bytes]":
    """The bytes of every token the merge table makes (tiktoken rule: the vocabulary itself,
    a superset, read without filling the decoder)."""
    if model.ranks is not None:
        return list(model.ranks)
    toks = [model.decoder[i] for i in unique_sorted(table.pair_merged).tolist()
            if i != model.drop_id]
    # a byte the vocabulary lacks (loaders/bytelevel_gaps.py) starts as the unk or the drop id,
    # whose merges join it to its neighbours whatever the tokens spell: never cut beside it
    for b, i in enumerate(table.byte_id_list):
        if model.decoder.get(i) != bytes([b]):
            toks += [bytes([x, b]) for x in range(256)] + [bytes([b, x]) for x in range(256)]
    return toks


def merge_slots(table) -> np.ndarray:
    """The merge table's hash arrays interleaved for the kernels (``enc_pair_lookup``): two
    uint64 per slot, [key, priority | merged << 32]."""
    out = np.empty(2 * len(table.h_keys), np.uint64)
    out[0::2] = table.h_keys
    out[1::2] = table.h_prio.astype(np.uint64) | (table.h_merged.astype(np.uint64)
                                                  << np.uint64(32))
    return out
