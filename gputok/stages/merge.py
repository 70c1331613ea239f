"""Table-driven BPE merging: the stage every backend implements, and its algorithms.

Both BPE rules reduce to the merge table of ``table.py`` plus one flag, the whole-piece lookup
(``table.whole``): a piece whose bytes are a token is emitted whole before merging (tiktoken:
always; HF: only with ``ignore_merges``). Five exact implementations of the one rule "merge the
adjacent pair of lowest priority, leftmost on ties, until none is left":

* ``merge_ranks``: one short piece straight from tiktoken ranks, no table (a one-off
  ``encode()`` of a 200K vocabulary never pays the table build);
* ``merge_small``: one short piece on the table's dict;
* ``merge_rounds``: all pieces of a batch at once, vectorised. Each round merges the best pair of
  every piece that still has one. One merge per piece per round is what makes it exact: merging
  every locally best pair at once is wrong, because a merge can create a better pair next to it
  (``"aaa"``, ``"\t" * 32``). Rounds = the longest piece's merge count, so only pieces shorter
  than ``LONG_PIECE`` go here. The GPU kernels run this rule one thread per piece;
* ``merge_long``: one long piece in O(n log n): a linked list of parts plus a heap of candidate
  pairs keyed by (priority, position) with lazy invalidation;
* ``merge_pieces``: the stage: picks among them for a batch of distinct pieces.

Performance notes: a Python loop over a dict keyed by ``left << 32 | right`` beat tuple keys by
~15%. The vectorised lookup first used ``np.searchsorted`` over sorted keys: it was 70% of a
cold-cache batch (18 dependent probes per lookup); the open-addressing table (~1.3 probes on
average) is ~5x faster and is what the GPU probes too. ``merge_rounds`` first lexsorted all
pairs every round; a segmented minimum (``np.minimum.reduceat``) over the already
piece-ordered pairs plus dropping finished pieces from the active set made it O(active tokens)
per round. Vectorised merging only pays for many pieces: below ``VECTOR_MIN`` the scalar loop
is cheaper.
"""

from __future__ import annotations

import heapq

import numpy as np

from . import counters
from .table import NO_MERGE, MergeTable, join_bitmap, merged_tokens

LONG_PIECE = 256  # bytes; longer pieces take merge_long (the kernels get it as a define)
# parts per block heap of the kernels' long-piece merge (encode_merge.cu); at least 2 * LONG_PIECE
HEAP_BLOCK = 2048
# a long run merges in rounds (one priority everywhere per sweep, ``merge_long_rounds``) while a
# round merges at least one part in this many; then the heap goes on
ROUND_MIN_SHARE = 8
# bytes; a GPU merges a piece this long with a whole block of threads (``merge_huge``,
# encode_merge_huge.cu) instead of one thread (the GPU devices get it as a define)
HUGE_PIECE = 16384
HUGE_SEG = 512  # bytes per segment of such a piece (a round visits the segments of its priority)
# the kernel's rounds hand over to a heap on one thread where, after this many rounds, they
# merge fewer than HUGE_ROUND_MERGES pairs each on average (a round costs the block its barriers)
HUGE_ROUNDS_MIN = 512
HUGE_ROUND_MERGES = 2
VECTOR_MIN = 256  # distinct pieces; fewer are merged one by one


def merge_ranks(piece: bytes, ranks) -> list[int]:
    """tiktoken rule on one short piece, from the ranks alone.

    ``pr[k]`` is the rank of the token that merging parts k and k+1 would make; after a merge
    only the two neighbouring entries change, so each step is one ``min`` over the pairs.
    """
    tok = ranks.get(piece)
    if tok is not None:
        return [tok]
    get = ranks.get
    never = 1 << 62
    bounds = list(range(len(piece) + 1))  # part k is piece[bounds[k]:bounds[k + 1]]
    pr = [get(piece[i:i + 2], never) for i in range(len(piece) - 1)]
    while pr:
        best = min(pr)
        if best == never:
            break
        k = pr.index(best)  # the leftmost pair of the lowest rank
        del bounds[k + 1]
        del pr[k]
        if k < len(pr):
            pr[k] = get(piece[bounds[k]:bounds[k + 2]], never)
        if k:
            pr[k - 1] = get(piece[bounds[k - 1]:bounds[k + 1]], never)
    return [ranks[piece[a:b]] for a, b in zip(bounds, bounds[1:])]


def merge_small(piece: bytes, table: MergeTable) -> list[int]:
    """Sequential merge of one piece (the rule, on ids)."""
    if table.whole is not None:
        tok = table.whole.get(piece)
        if tok is not None:
            return [tok]
    bid = table.byte_id_list
    return merge_small_ids([bid[b] for b in piece], table)


def merge_small_ids(parts: list[int], table: MergeTable) -> list[int]:
    """``merge_small`` from initial ids (SentencePiece-style BPE starts from characters)."""
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
    bid = table.byte_id_list
    return merge_long_ids([bid[b] for b in piece], table)


def join_mask(model, table: MergeTable) -> np.ndarray:
    """``bool[65536]``: may a part span the bytes ``x, y`` (index ``x << 8 | y``)? False where no
    token the merges make has them next to each other (``table.join_bitmap``), cached on the
    table. The kernels read the same bits."""
    got = table.__dict__.get("join_mask")
    if got is None:
        bits = join_bitmap(merged_tokens(model, table))
        got = np.unpackbits(bits.view(np.uint8), bitorder="little").astype(bool)
        table.__dict__["join_mask"] = got
    return got


def merge_long_cut(piece: bytes, table: MergeTable, join: np.ndarray, runs: dict) -> list[int]:
    """``merge_long`` without the whole-piece lookup, cut where no merge can cross.

    Where ``join`` is clear between two bytes no part ever spans them, so the runs on either side
    merge independently, each in its own "lowest priority, leftmost" order: an emoji run is
    thousands of 4-byte runs (merged once each through ``runs``, a cache shared by the batch),
    not one heap. The kernels cut the same way (``enc_merge_long_piece``).
    """
    b = np.frombuffer(piece, np.uint8)
    codes = (b[:-1].astype(np.int64) << 8) | b[1:]
    cuts = np.flatnonzero(~join[codes]) + 1
    bid = table.byte_id_list
    if not len(cuts):
        return merge_long_ids([bid[x] for x in piece], table)
    out: list[int] = []
    a = 0
    for z in cuts.tolist() + [len(piece)]:
        run = piece[a:z]
        ids = runs.get(run)
        if ids is None:
            parts = [bid[x] for x in run]
            ids = runs[run] = (merge_small_ids(parts, table) if z - a < LONG_PIECE
                               else merge_long_ids(parts, table))
        out += ids
        a = z
    return out


def merge_long_rounds(ids: list[int], table: MergeTable) -> tuple[list[int], bool]:
    """The sequential rule in rounds, as the kernels' ``enc_merge_rounds``: the lowest priority
    r of any pair is merged everywhere in one left-to-right sweep (leftmost first where two r pairs
    overlap), then the next lowest, ... Each merge is then the rule's own (lowest, leftmost:
    the pairs left of the sweep are above r) as long as no merge makes a pair of priority r or
    below (on its left, or on its right before the next part merges on); where one does, or a
    round merges fewer than one part in ``ROUND_MIN_SHARE``, the rounds stop. (A merge never
    makes a pair of its own token, but two tokens may share a priority: SentencePiece ranks
    equal scores alike, and the new pair is then the leftmost of the round's priority.) (ids,
    finished): finished when no pair merges, else the heap goes on from these ids (the rule's
    state after those merges). A run of one character ("a" * n) is a few rounds (aa, aaaa,
    ...)."""
    none = int(NO_MERGE)
    get = table.pairs.get
    m = len(ids)
    pr = []
    for k in range(m - 1):
        v = get(ids[k] << 32 | ids[k + 1])
        pr.append(none if v is None else v[0])
    pr.append(none)
    best = min(pr) if m else none
    while best != none:
        r, best = best, none
        out: list[int] = []
        opr: list[int] = []
        i = merges = 0
        prev_new, prev_pr = False, none
        while i < m:
            tok, pi = ids[i], pr[i]
            if prev_new:  # the pair the last merge made on its right, before tok merges on
                v = get(out[-1] << 32 | tok)
                q = none if v is None else v[0]
                if q <= r:  # not above the round: the heap goes on from here
                    out.extend(ids[i:m])
                    return out, False
            cur_new = pi == r
            if cur_new:
                tok = get(tok << 32 | ids[i + 1])[1]
                i += 2
                merges += 1
            else:
                i += 1
            if out:
                if cur_new:  # the pair this merge made on its left
                    v = get(out[-1] << 32 | tok)
                    p = none if v is None else v[0]
                else:
                    p = q if prev_new else prev_pr
                opr.append(p)
                best = min(best, p)
                if p <= r:
                    out.append(tok)
                    out.extend(ids[i:m])
                    return out, False
            out.append(tok)
            prev_new, prev_pr = cur_new, pi
        opr.append(none)
        before = m
        ids, pr, m = out, opr, len(out)
        if best != none and merges * ROUND_MIN_SHARE < before:
            return ids, False
    return ids, True


def merge_long_ids(ids: list[int], table: MergeTable) -> list[int]:
    """``merge_long`` from initial ids: rounds while they pay (``merge_long_rounds``), then a
    heap."""
    ids, finished = merge_long_rounds(ids, table)
    if finished:
        return ids
    return merge_heap_ids(ids, table)


def merge_huge(ids: list[int], table: MergeTable) -> list[int]:
    """The sequential rule as ``encode_merge_huge`` computes it for one piece of
    ``HUGE_PIECE`` bytes or more: every pair at once, in rounds, so that a block of GPU threads
    shares the piece (the kernel's ops reference; equal to ``merge_heap_ids`` on any table).

    A round takes r, the lowest priority of any pair, and merges the pairs of priority r as one
    left-to-right sweep would (``merge_long_rounds``), but decided everywhere at once: in a run
    of consecutive r pairs the first, third, ... merge (a pair merges when it is r and the one
    before it did not: "aaa", "\t" * 32), and every merge is the rule's own up to the first
    one whose new pair, on its left or on its right before the next part merges on, is r or
    below: the merges after it wait, and the next round starts from the lowest pair again (the
    rounds never hand over to a heap). Each round costs O(parts) here; the kernel visits only
    the parts of segments that hold a pair of priority r.
    """
    none = int(NO_MERGE)
    ids = np.asarray(ids, np.uint32)
    pr, _ = table.lookup(ids[:-1], ids[1:])
    while len(pr) and int(pr.min()) != none:
        r = pr.min()
        f = pr == r
        k = np.arange(len(f))
        first = f & ~np.r_[False, f[:-1]]  # the first pair of each run of r pairs
        run = np.maximum.accumulate(np.where(first, k, 0))
        p = np.flatnonzero(f & ((k - run) % 2 == 0))  # the merges, left parts, in order
        _, x = table.lookup(ids[p], ids[p + 1])
        at = np.full(len(ids), -1)
        at[p] = np.arange(len(p))
        # the part left of a merge: the last merge's token where that merge ended right there
        b = p - 1
        eaten = (b >= 1) & (at[np.maximum(b - 1, 0)] >= 0)
        left = np.where(eaten, x[at[np.maximum(b - 1, 0)]], ids[np.maximum(b, 0)])
        lp, _ = table.lookup(left, x)
        lp[b < 0] = none
        after = np.minimum(p + 2, len(ids) - 1)  # the part after it, before that part merges on
        rp, _ = table.lookup(x, ids[after])
        rp[p + 2 >= len(ids)] = none
        cut = np.flatnonzero((lp <= r) | (rp <= r))
        if len(cut):  # the merges up to that one, then the lowest pair again
            p, x = p[:cut[0] + 1], x[:cut[0] + 1]
        keep = np.ones(len(ids), bool)
        keep[p + 1] = False
        ids = ids.copy()
        ids[p] = x
        ids = ids[keep]
        pr, _ = table.lookup(ids[:-1], ids[1:])
    return ids.tolist()


def merge_heap_ids(ids: list[int], table: MergeTable) -> list[int]:
    """The sequential rule in O(n log n) from ids (modified in place): a linked list of parts
    and a heap with lazy deletion."""
    n = len(ids)
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


def merge_pieces(model, pieces: list) -> list:
    """The merge stage of byte-level BPE: ids (tuples) of distinct pieces (str), aligned with
    ``pieces``; ``model`` is the ``BpeSegmenter`` (its ranks or merges and merge table).

    A handful of pieces of a tiktoken-rule model merge from the ranks, without building the
    table; otherwise whole tokens are looked up first, long pieces take the heap and the rest
    merge in vectorised rounds (or one by one when there are few).
    """
    if not pieces:
        return []
    raw = [p.encode("utf-8") for p in pieces]
    if len(raw) < VECTOR_MIN and model.ranks is not None and not model.has_merge_table:
        ranks = model.ranks
        out = []
        runs: dict = {}
        for b in raw:
            if len(b) >= LONG_PIECE and b not in ranks:
                table = model.merge_table
                out.append(tuple(merge_long_cut(b, table, join_mask(model, table), runs)))
                counters["merge.long"] += 1
            else:
                out.append(tuple(merge_ranks(b, ranks)))
                counters["merge.ranks"] += 1
        return out
    table = model.merge_table
    out: list = [None] * len(raw)
    todo = range(len(raw))
    if table.whole is not None:  # a piece that is a token is emitted whole
        get = table.whole.get
        rest = []
        for i in todo:
            t = get(raw[i])
            if t is None:
                rest.append(i)
            else:
                out[i] = (t,)
        counters["merge.whole"] += len(raw) - len(rest)
        todo = rest
    short, runs = [], {}
    for i in todo:
        if len(raw[i]) >= LONG_PIECE:
            out[i] = tuple(merge_long_cut(raw[i], table, join_mask(model, table), runs))
            counters["merge.long"] += 1
        else:
            short.append(i)
    if len(short) >= VECTOR_MIN:
        sub = [raw[i] for i in short]
        tokens = table.byte_ids[np.frombuffer(b"".join(sub), dtype=np.uint8)]
        offsets = np.zeros(len(sub) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in sub], out=offsets[1:])
        ids, out_off = merge_rounds(tokens, offsets, table)
        ids_l, off_l = ids.tolist(), out_off.tolist()
        for i, a, b in zip(short, off_l, off_l[1:]):
            out[i] = tuple(ids_l[a:b])
        counters["merge.rounds"] += len(short)
    else:
        for i in short:
            out[i] = tuple(merge_small(raw[i], table))
        counters["merge.small"] += len(short)
    return out
