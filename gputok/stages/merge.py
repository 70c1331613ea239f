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
~15%. For the vectorised lookup, ``np.searchsorted`` over sorted uint64 keys is simple and fast
enough on CPU (the GPU uses a hash table instead).
"""

from __future__ import annotations

import heapq

import numpy as np

NO_MERGE = np.uint32(0xFFFFFFFF)
LONG_PIECE = 256  # bytes; longer pieces take merge_long


class MergeTable:
    """The merge table, as a dict (scalar paths) and as sorted arrays (vectorised paths)."""

    def __init__(self, pairs: dict[int, tuple[int, int]], byte_ids: np.ndarray,
                 whole: "dict[bytes, int] | None"):
        # pairs: key (left << 32 | right) -> (priority, merged_id)
        self.pairs = pairs
        self.byte_ids = np.asarray(byte_ids, dtype=np.uint32)  # id of each single byte
        self.byte_id_list = [int(x) for x in self.byte_ids]
        self.whole = whole  # bytes -> id when whole-piece lookup applies, else None
        keys = np.fromiter(pairs.keys(), dtype=np.uint64, count=len(pairs))
        vals = np.array(list(pairs.values()), dtype=np.uint32).reshape(-1, 2)
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.prio = vals[order, 0].copy()
        self.merged = vals[order, 1].copy()

    @classmethod
    def from_ranks(cls, ranks: dict[bytes, int]) -> "MergeTable":
        """tiktoken rule: pair (a, b) merges when bytes(a)+bytes(b) is a token; priority = its rank."""
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
        byte_ids = np.array([ranks[bytes([b])] for b in range(256)], dtype=np.uint32)
        return cls(pairs, byte_ids, ranks)

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
        if len(self.keys) == 0:
            return np.full(len(q), NO_MERGE, np.uint32), np.zeros(len(q), np.uint32)
        idx = np.searchsorted(self.keys, q)
        idx_c = np.minimum(idx, len(self.keys) - 1)
        hit = self.keys[idx_c] == q
        prio = np.where(hit, self.prio[idx_c], NO_MERGE)
        return prio, np.where(hit, self.merged[idx_c], 0).astype(np.uint32)


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
    """
    tokens = np.asarray(tokens, dtype=np.uint32)
    piece_offsets = np.asarray(piece_offsets, dtype=np.int64)
    n_pieces = len(piece_offsets) - 1
    lengths = np.diff(piece_offsets)
    piece_of = np.repeat(np.arange(n_pieces, dtype=np.int64), lengths)
    toks = tokens.copy()
    while True:
        n = len(toks)
        if n < 2:
            break
        # candidate pairs: adjacent positions within the same piece
        same = piece_of[:-1] == piece_of[1:]
        pos = np.nonzero(same)[0]
        if len(pos) == 0:
            break
        prio, merged = table.lookup(toks[pos], toks[pos + 1])
        ok = prio != NO_MERGE
        if not ok.any():
            break
        pos, prio, merged = pos[ok], prio[ok], merged[ok]
        # best pair per piece: lowest (priority, position); one lexsort-free trick: sort by a
        # combined uint64 key and keep the first occurrence of each piece
        key = (prio.astype(np.uint64) << np.uint64(32)) | pos.astype(np.uint64)
        pc = piece_of[pos]
        order = np.lexsort((key, pc))
        first = np.ones(len(order), dtype=bool)
        first[1:] = pc[order[1:]] != pc[order[:-1]]
        win = order[first]
        wpos = pos[win]
        toks[wpos] = merged[win]
        keep = np.ones(n, dtype=bool)
        keep[wpos + 1] = False
        toks = toks[keep]
        piece_of = piece_of[keep]
    new_len = np.bincount(piece_of, minlength=n_pieces) if n_pieces else np.zeros(0, np.int64)
    offsets = np.zeros(n_pieces + 1, dtype=np.int64)
    np.cumsum(new_len, out=offsets[1:])
    return toks, offsets
