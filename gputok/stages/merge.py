"""Table-driven BPE merging: the stage every backend implements.

Both BPE rules (see ``cpu_ref.bpe``) reduce to one *merge table*

    (left_id, right_id) -> (priority, merged_id)

and one flag, ``whole_lookup``: whether a piece whose bytes are already a token is emitted whole
before merging (tiktoken: always; HF: only with ``ignore_merges``).

Three implementations of the same rule, all exact:

* ``merge_small``: the sequential loop on one short piece (Python ints; cheapest for a handful
  of cache misses).
* ``merge_rounds``: all pieces of a batch at once, vectorised with numpy. Each *round* merges the
  best pair (lowest priority, leftmost on ties) of every piece that still has one. One merge per
  piece per round is what makes it exact: merging every locally-best pair at once is wrong,
  because a merge can create a better pair next to it (``"aaa"``, ``"\\t" * 32``). The number of
  rounds is the longest piece's merge count, so only short pieces go here. This is the algorithm
  the GPU kernels run (one thread per piece).
* ``merge_long``: one long piece in O(n log n): a doubly linked list of parts plus a heap of
  candidate pairs keyed by (priority, position) with lazy invalidation. tiktoken's loop is
  quadratic here (``"a" * 100_000``); this is not.

Performance notes: a Python loop over a dict keyed by ``left << 32 | right`` beat tuple keys by
~15%. The vectorised lookup first used ``np.searchsorted`` over sorted keys: it was 70% of a
cold-cache batch (18 dependent probes per lookup); the open-addressing table (load <= 1/2,
Fibonacci hash, linear probing, ~1.3 probes on average) is ~5x faster and is what the GPU
probes too. ``merge_rounds`` first lexsorted all pairs every round; a segmented minimum
(``np.minimum.reduceat``) over the already piece-ordered pairs plus dropping finished pieces
from the active set made it O(active tokens) per round.
"""

from __future__ import annotations

import functools
import heapq
import os

import numpy as np

NO_MERGE = np.uint32(0xFFFFFFFF)
LONG_PIECE = 256  # bytes; longer pieces take merge_long


EMPTY_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)
HASH_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: multiply, keep the top bits


class MergeTable:
    """The merge table, as a dict (scalar paths) and as an open-addressing hash table in flat
    arrays (vectorised and GPU paths: the CUDA kernels probe exactly this layout)."""

    def __init__(self, pairs: dict[int, tuple[int, int]], byte_ids: np.ndarray,
                 whole: "dict[bytes, int] | None", *, arrays: "dict | None" = None):
        # pairs: key (left << 32 | right) -> (priority, merged_id); or ``arrays`` holding
        # pair_keys/pair_prio/pair_merged (and optionally the hash arrays) instead
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
        """Linear probing at load factor <= 1/2, built vectorised: each pass places, for every
        free slot, the first key that probes it; the rest move one slot on."""
        bits = max(4, int(len(keys) * 2 - 1).bit_length())
        self.hash_bits = bits
        cap = 1 << bits
        self.h_keys = np.full(cap, EMPTY_KEY, dtype=np.uint64)
        self.h_prio = np.full(cap, NO_MERGE, dtype=np.uint32)
        self.h_merged = np.zeros(cap, dtype=np.uint32)
        pending = np.arange(len(keys))
        slot = self._home(keys)
        while len(pending):
            s = slot[pending]
            free = self.h_keys[s] == EMPTY_KEY
            cand = pending[free]
            _, first = np.unique(s[free], return_index=True)
            win = cand[first]
            self.h_keys[slot[win]] = keys[win]
            self.h_prio[slot[win]] = prio[win]
            self.h_merged[slot[win]] = merged[win]
            placed = np.zeros(len(keys), dtype=bool)
            placed[win] = True
            pending = pending[~placed[pending]]
            slot[pending] = (slot[pending] + 1) & (cap - 1)

    def _home(self, q: np.ndarray) -> np.ndarray:
        return ((q * HASH_MUL) >> np.uint64(64 - self.hash_bits)).astype(np.int64)

    @classmethod
    def from_ranks(cls, ranks: dict[bytes, int], *, cache_key: "str | None" = None
                   ) -> "MergeTable":
        """tiktoken rule: pair (a, b) merges when bytes(a)+bytes(b) is a token; priority = its rank.

        Building it walks every split of every token (~1 s per 100K tokens in Python), so with a
        ``cache_key`` (a digest of the ranks) the arrays are kept in the user cache directory.
        """
        byte_ids = np.array([ranks[bytes([b])] for b in range(256)], dtype=np.uint32)
        cached = _load_cached(cache_key)
        if cached is not None:
            return cls({}, byte_ids, ranks, arrays=cached)
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
        _store_cached(cache_key, table.arrays())
        return table

    @classmethod
    def from_merges(cls, merges: list[tuple[int, int, int]], byte_ids, whole) -> "MergeTable":
        """HF rule: ``merges[i] = (left_id, right_id, merged_id)``; priority = i (first wins)."""
        pairs: dict[int, tuple[int, int]] = {}
        for i, (a, b, m) in enumerate(merges):
            pairs.setdefault(a << 32 | b, (i, m))
        return cls(pairs, byte_ids, whole)

    def lookup(self, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised table lookup: (priority, merged) with priority NO_MERGE where absent."""
        q = (left.astype(np.uint64) << np.uint64(32)) | right.astype(np.uint64)
        prio = np.full(len(q), NO_MERGE, dtype=np.uint32)
        merged = np.zeros(len(q), dtype=np.uint32)
        mask = np.uint64(len(self.h_keys) - 1)
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
            slot[todo] = (slot[todo] + 1) & np.int64(mask)
        return prio, merged


def merge_small(piece: bytes, table: MergeTable) -> list[int]:
    """Sequential merge of one piece (the rule, on ids)."""
    if table.whole is not None:
        tok = table.whole.get(piece)
        if tok is not None:
            return [tok]
    bid = table.byte_id_list
    parts = [bid[b] for b in piece]
    get = table.pairs.get
    while len(parts) > 1:
        best = None
        best_i = -1
        for i in range(len(parts) - 1):
            v = get(parts[i] << 32 | parts[i + 1])
            if v is not None and (best is None or v[0] < best[0]):
                best, best_i = v, i
        if best is None:
            break
        parts[best_i : best_i + 2] = [best[1]]
    return parts


def merge_long(piece: bytes, table: MergeTable) -> list[int]:
    """O(n log n) merge of one piece: linked list + heap with lazy deletion."""
    if table.whole is not None:
        tok = table.whole.get(piece)
        if tok is not None:
            return [tok]
    n = len(piece)
    bid = table.byte_id_list
    ids = [bid[b] for b in piece]
    nxt = list(range(1, n + 1))  # n means "no next"
    prv = list(range(-1, n - 1))
    alive = [True] * n
    get = table.pairs.get
    heap: list[tuple[int, int, int, int]] = []  # (priority, position, left_id, right_id)

    def push(i: int) -> None:
        j = nxt[i]
        if j < n:
            v = get(ids[i] << 32 | ids[j])
            if v is not None:
                heapq.heappush(heap, (v[0], i, ids[i], ids[j]))

    for i in range(n - 1):
        push(i)
    while heap:
        prio, i, a, b = heapq.heappop(heap)
        # stale entries: the left part died, or either side changed since the push
        if not alive[i] or ids[i] != a:
            continue
        j = nxt[i]
        if j >= n or ids[j] != b:
            continue
        # positions are the parts' first byte offsets, so (priority, position) ordering is
        # exactly "lowest priority, leftmost on ties" of the sequential rule
        ids[i] = get(a << 32 | b)[1]
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] < n:
            prv[nxt[j]] = i
        if prv[i] >= 0:
            push(prv[i])
        push(i)
    out = []
    i = 0
    while i < n:
        out.append(ids[i])
        i = nxt[i]
    return out


def merge_rounds(tokens: np.ndarray, piece_offsets: np.ndarray, table: MergeTable
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Merge every piece of a batch in parallel rounds (the GPU algorithm, on numpy).

    ``tokens``: uint32 initial ids (one per byte) of all pieces, concatenated; ``piece_offsets``:
    int64, len n_pieces + 1. Returns (ids, offsets) in the same ragged layout. Whole-piece lookup
    is the caller's job (it happens at dedup time, before merging).

    Each round costs O(active tokens): candidate pairs are looked up in the hash table, the best
    pair of each piece is a segmented minimum of ``priority << 32 | position`` (lowest priority,
    then leftmost), and pieces with no mergeable pair leave the active set.
    """
    tokens = np.asarray(tokens, dtype=np.uint32)
    piece_offsets = np.asarray(piece_offsets, dtype=np.int64)
    n_pieces = len(piece_offsets) - 1
    lengths = np.diff(piece_offsets)
    toks = tokens.copy()
    piece_of = np.repeat(np.arange(n_pieces, dtype=np.int64), lengths)
    done_toks: list[np.ndarray] = []
    done_piece: list[np.ndarray] = []
    while len(toks):
        same = piece_of[:-1] == piece_of[1:]
        pos = np.flatnonzero(same)
        prio, _ = table.lookup(toks[pos], toks[pos + 1])
        key = (prio.astype(np.uint64) << np.uint64(32)) | pos.astype(np.uint64)
        pc = piece_of[pos]
        # pieces with at least one pair, and the segmented minimum over their pairs
        seg = np.flatnonzero(np.r_[True, pc[1:] != pc[:-1]]) if len(pc) else pc
        best = np.minimum.reduceat(key, seg) if len(pc) else key
        has_merge = (best >> np.uint64(32)) != np.uint64(NO_MERGE)
        wpos = (best[has_merge] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        # every token whose piece has no merge this round is final: move it out
        alive_piece = np.zeros(n_pieces, dtype=bool)
        alive_piece[pc[seg][has_merge]] = True
        final = ~alive_piece[piece_of]
        if final.any():
            done_toks.append(toks[final])
            done_piece.append(piece_of[final])
        if not len(wpos):
            break
        _, merged = table.lookup(toks[wpos], toks[wpos + 1])
        toks[wpos] = merged
        keep = ~final
        keep[wpos + 1] = False
        toks = toks[keep]
        piece_of = piece_of[keep]
    all_toks = np.concatenate(done_toks) if done_toks else np.zeros(0, np.uint32)
    all_piece = np.concatenate(done_piece) if done_piece else np.zeros(0, np.int64)
    order = np.argsort(all_piece, kind="stable")  # pieces back in order, tokens keep theirs
    offsets = np.zeros(n_pieces + 1, dtype=np.int64)
    np.cumsum(np.bincount(all_piece, minlength=n_pieces), out=offsets[1:])
    return all_toks[order], offsets


_TABLE_FORMAT = 1


def _cache_file(key: str) -> str:
    root = os.environ.get("GPUTOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "gputok")
    return os.path.join(root, f"merge-table-{key}-f{_TABLE_FORMAT}.npz")


def _load_cached(key: "str | None") -> "dict | None":
    if key is None:
        return None
    try:
        with np.load(_cache_file(key)) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError):  # absent or damaged: rebuild
        return None


def _store_cached(key: "str | None", arrays: dict) -> None:
    if key is None:
        return
    path = _cache_file(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)  # atomic: concurrent processes never see half a file
    except OSError:
        pass  # a read-only home only costs the rebuild next time
