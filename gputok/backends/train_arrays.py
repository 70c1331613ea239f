"""The device trainer's stages in plain numpy: what each kernel of ``kernels/train_bpe.cu`` must
compute, written as whole-array operations. Tests run every kernel (through the CPU emulator) on
states built from real text and compare with these; ``train_arrays`` strings them into a full
reference loop, and ``train_lists`` into the loop the CUDA kernels run (occurrence lists and
candidates). (Metal runs the same list-driven loop in one launch a block of steps,
``backends/metal/train_index.py``; its older loop of ``find_matches`` / ``merge_deltas`` /
``apply_merge`` over every position, with ``compact``, is ``backends/metal/train.py``.)

Kernel by kernel (CUDA):
  train_count_pairs                     pair_counts
  train_count/place_occurrences         occurrences
  train_step_select                     select (over choose_candidates' candidates)
  train_step_mark                       find_matches, restricted to the pair's list
  train_step_deltas                     merge_deltas, and gained (the lists' new entries)
  train_step_apply                      apply_merge
  train_step_lists / _place             the lists of gained, and the candidates it adds

State layout (shared with the kernels): all positions of all unique words concatenated;
``tok`` (int32, ``DEAD`` once merged away), ``prv``/``nxt`` (int32 links to the previous / next
live position of the same word, -1 at the ends), ``word_of`` (int32) and ``wcount`` (int64).
Pair keys are ``left << 32 | right`` as uint64, so key order is (left_id, right_id) order.
"""

from __future__ import annotations

import numpy as np

DEAD = -1
EMPTY_KEY = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_MASK = (1 << 32) - 1


def initial_state(ids: np.ndarray, offsets: np.ndarray, xp=np):
    """``(tok, prv, nxt, word_of)`` for words ``ids[offsets[k]:offsets[k + 1]]``."""
    n = int(offsets[-1])
    n_words = len(offsets) - 1
    lengths = np.diff(offsets)
    pos = np.arange(n, dtype=np.int64)
    starts = np.zeros(n, dtype=bool)
    ends = np.zeros(n, dtype=bool)
    nonempty = lengths > 0
    starts[offsets[:-1][nonempty]] = True
    ends[offsets[1:][nonempty] - 1] = True
    prv = np.where(starts, -1, pos - 1).astype(np.int32)
    nxt = np.where(ends, -1, pos + 1).astype(np.int32)
    word_of = np.repeat(np.arange(n_words, dtype=np.int32), lengths)
    tok = np.array(ids, dtype=np.int32)  # a copy: the state is rewritten in place
    return tuple(xp.asarray(x) for x in (tok, prv, nxt, word_of))


def token_hash(data: bytes) -> int:
    """THE TOKEN HASH (kernels/common/train_rules.h) of a byte string."""
    h = 0
    for x in data:
        h = (h * 0x100000001B3 + x) & ((1 << 64) - 1)
    return h


def pair_keys(left, right) -> np.ndarray:
    return (np.asarray(left).astype(np.uint64) << np.uint64(32)) | \
        np.asarray(right).astype(np.uint32).astype(np.uint64)


def _sum_by_key(keys: np.ndarray, values: np.ndarray) -> dict[int, int]:
    if len(keys) == 0:
        return {}
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sums = np.add.reduceat(values.astype(np.int64), starts)
    return dict(zip(keys[starts].tolist(), sums.tolist()))


def pair_counts(tok, nxt, word_of, wcount) -> dict[int, int]:
    """``train_count_pairs``: every adjacent live pair, weighted by word count (zeros dropped)."""
    i = np.flatnonzero((tok != DEAD) & (nxt >= 0))
    counts = _sum_by_key(pair_keys(tok[i], tok[nxt[i]]), wcount[word_of[i]])
    return {k: c for k, c in counts.items() if c != 0}


def best_pair(counts: dict[int, int]) -> tuple[int, int]:
    """``train_best_*``: (count, key) of the best pair; (0, EMPTY) when no count is > 0.

    THE COMPARATOR: highest count; ties to the smallest key = smallest (left_id, right_id).
    """
    best_c, best_k = 0, int(EMPTY_KEY)
    for k, c in counts.items():
        if c > best_c or (c == best_c and c > 0 and k < best_k):
            best_c, best_k = c, k
    return best_c, best_k


def find_matches(tok, prv, nxt, a: int, b: int) -> np.ndarray:
    """``train_find_matches``: uint8 flags of the positions where a merge of (a, b) starts."""
    n = len(tok)
    nxt_ok = nxt >= 0
    right = np.full(n, DEAD, dtype=np.int64)
    right[nxt_ok] = tok[nxt[nxt_ok]]
    start = (tok == a) & nxt_ok & (right == b)
    if a == b:
        # left to right without overlap: in a run of a's, only even run positions start a merge
        idx = np.flatnonzero(start)
        k = np.zeros(len(idx), dtype=np.int64)
        p = prv[idx].astype(np.int64)
        active = p >= 0
        active[active] = tok[p[active]] == a
        while active.any():
            k[active] += 1
            p[active] = prv[p[active]]
            still = p >= 0
            still[still] = tok[p[still]] == a
            active &= still
        start[idx[k % 2 == 1]] = False
    return start.astype(np.uint8)


def merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a: int, b: int, c: int
                 ) -> dict[int, int]:
    """``train_merge_deltas``: the net change of every pair count, (a, b) itself left out."""
    i = np.flatnonzero(is_start)
    j = nxt[i]
    p = prv[i]
    q = nxt[j]
    w = wcount[word_of[i]]
    keys, deltas = [], []
    has_p = p >= 0
    pp = np.full(len(i), -1, dtype=np.int64)
    pp[has_p] = prv[p[has_p]]
    p_second = np.zeros(len(i), dtype=bool)
    p_second[pp >= 0] = is_start[pp[pp >= 0]] != 0
    # left side
    m = has_p & p_second
    keys.append(pair_keys(np.full(m.sum(), c), np.full(m.sum(), c)))
    deltas.append(w[m])
    m = has_p & ~p_second
    keys += [pair_keys(tok[p[m]], np.full(m.sum(), a)), pair_keys(tok[p[m]], np.full(m.sum(), c))]
    deltas += [-w[m], w[m]]
    # right side
    has_q = q >= 0
    keys.append(pair_keys(np.full(has_q.sum(), b), tok[q[has_q]]))
    deltas.append(-w[has_q])
    m = has_q.copy()
    m[has_q] = is_start[q[has_q]] == 0
    keys.append(pair_keys(np.full(m.sum(), c), tok[q[m]]))
    deltas.append(w[m])
    keys_a, deltas_a = np.concatenate(keys), np.concatenate(deltas)
    keep = keys_a != pair_keys(a, b)
    out = _sum_by_key(keys_a[keep], deltas_a[keep])
    return {k: d for k, d in out.items() if d != 0}


def apply_merge(tok, prv, nxt, is_start, c: int) -> None:
    """``train_apply_merge``, in place."""
    i = np.flatnonzero(is_start)
    j = nxt[i]
    q = nxt[j]
    tok[i] = c
    tok[j] = DEAD
    nxt[i] = q
    has_q = q >= 0
    prv[q[has_q]] = i[has_q]


def compact(tok, prv, nxt, word_of, xp=np):
    """Drop dead positions and words reduced to one symbol (no pair left); relink.

    Array-generic (numpy or CuPy): the device driver calls it between merge steps."""
    live = (tok != DEAD) & ((prv >= 0) | (nxt >= 0))
    new_index = xp.cumsum(live.astype(xp.int64)) - 1
    tok2, prv2, nxt2, wof2 = tok[live], prv[live], nxt[live], word_of[live]
    prv2 = xp.where(prv2 >= 0, new_index[xp.maximum(prv2, 0)], -1).astype(xp.int32)
    nxt2 = xp.where(nxt2 >= 0, new_index[xp.maximum(nxt2, 0)], -1).astype(xp.int32)
    return tok2, prv2, nxt2, wof2


def train_arrays(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int
                 ) -> list[tuple[int, int, int]]:
    """The device algorithm end to end on numpy (a reference for tests; slow on big inputs)."""
    tok, prv, nxt, word_of = initial_state(ids, offsets)
    wcount = np.asarray(wcounts, dtype=np.int64)
    counts = pair_counts(tok, nxt, word_of, wcount)
    merges = []
    while len(vocab) < vocab_size:
        count, key = best_pair(counts)
        if count < max(min_frequency, 1):
            break
        a, b = key >> 32, key & _MASK
        c = vocab.merge(a, b)
        merges.append((a, b, c))
        counts[key] = 0
        is_start = find_matches(tok, prv, nxt, a, b)
        for k, d in merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a, b, c).items():
            counts[k] = counts.get(k, 0) + d
        apply_merge(tok, prv, nxt, is_start, c)
    return merges


# ---------------------------------------------------------------- the list-driven loop (CUDA)


def occurrences(tok, nxt) -> dict[int, set]:
    """``train_count_occurrences`` + ``train_place_occurrences``: every pair's positions (of
    its left symbol)."""
    i = np.flatnonzero((tok != DEAD) & (nxt >= 0))
    keys = pair_keys(tok[i], tok[nxt[i]]).tolist()
    out: dict[int, set] = {}
    for k, p in zip(keys, i.tolist()):
        out.setdefault(k, set()).add(p)
    return out


def gained(tok, prv, nxt, is_start, a: int, b: int, c: int) -> dict[int, set]:
    """``train_step_deltas``' filing: the pairs a step forms, each with the positions of its
    left symbol after the step (``(x, c)`` at x, ``(c, c)`` at the left c, ``(c, y)`` at the
    match)."""
    out: dict[int, set] = {}
    for i in np.flatnonzero(is_start).tolist():
        p, q = int(prv[i]), int(nxt[nxt[i]])
        if p >= 0:
            pp = int(prv[p])
            if pp >= 0 and is_start[pp]:
                out.setdefault(int(pair_keys(c, c)), set()).add(pp)
            else:
                out.setdefault(int(pair_keys(tok[p], c)), set()).add(p)
        if q >= 0 and not is_start[q]:
            out.setdefault(int(pair_keys(c, tok[q])), set()).add(i)
    return out


def _better(c1: int, k1: int, c2: int, k2: int) -> bool:
    """THE COMPARATOR."""
    return c1 > c2 or (c1 == c2 and k1 < k2)


def choose_candidates(counts: dict[int, int], k: int) -> tuple[set, tuple[int, int]]:
    """THE CANDIDATE RULE (the host, between blocks): the ``k`` best pairs by THE COMPARATOR and
    the worst of them as the boundary; every pair, with boundary ``(0, EMPTY)``, when they
    fit."""
    live = sorted((k_ for k_, c in counts.items() if c > 0), key=lambda k_: (-counts[k_], k_))
    if len(live) <= k:
        return set(live), (0, int(EMPTY_KEY))
    chosen = live[:k]
    return set(chosen), (counts[chosen[-1]], chosen[-1])


def select(counts: dict[int, int], cand: set, bound: tuple[int, int], min_count: int
           ) -> "tuple[str, int | None]":
    """``train_step_select``: ``("merge", key)``, or why the loop stops: ``"rebuild"`` (the best
    candidate is worse than the boundary: a pair outside may be better) or ``"min"``."""
    best_c, best_k = 0, int(EMPTY_KEY)
    for k in cand:
        c = counts.get(k, 0)
        if c > 0 and _better(c, k, best_c, best_k):
            best_c, best_k = c, k
    if best_c <= 0 or not (_better(best_c, best_k, *bound) or (best_c, best_k) == bound):
        return ("rebuild" if bound[0] > 0 else "min"), None
    return ("merge", best_k) if best_c >= min_count else ("min", None)


def train_lists(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
                candidates: int = 64) -> list[tuple[int, int, int]]:
    """The CUDA loop on numpy: each step reads only the merged pair's occurrence list; the
    best pair comes from the candidates, chosen again when they cannot vouch for it."""
    tok, prv, nxt, word_of = initial_state(ids, offsets)
    wcount = np.asarray(wcounts, dtype=np.int64)
    counts = pair_counts(tok, nxt, word_of, wcount)
    lists = occurrences(tok, nxt)
    cand, bound = choose_candidates(counts, candidates)
    merges = []
    while len(vocab) < vocab_size:
        why, key = select(counts, cand, bound, max(min_frequency, 1))
        if why == "rebuild":
            cand, bound = choose_candidates(counts, candidates)
            continue
        if why == "min":
            break
        a, b = key >> 32, key & _MASK
        c = vocab.merge(a, b)
        merges.append((a, b, c))
        counts[key] = 0
        is_start = np.zeros(len(tok), dtype=np.uint8)
        listed = np.array(sorted(lists.pop(key, ())), dtype=np.int64)
        is_start[listed] = find_matches(tok, prv, nxt, a, b)[listed]  # THE MATCH RULE
        for k, d in merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a, b, c).items():
            counts[k] = counts.get(k, 0) + d
        new = gained(tok, prv, nxt, is_start, a, b, c)
        apply_merge(tok, prv, nxt, is_start, c)
        for k, where in new.items():
            lists[k] = where
            if counts[k] > 0 and (_better(counts[k], k, *bound) or (counts[k], k) == bound):
                cand.add(k)
    return merges


def state_layout(source: str) -> tuple[dict, dict]:
    """The state record's fields (``#define ST_<NAME> <index>``) and the stop codes
    (``#define TRAIN_STOP_<NAME> <code>``) as a kernel or shader file defines them."""
    import re

    def defines(prefix: str) -> dict:
        return {m.group(1): int(m.group(2))
                for m in re.finditer(rf"#define {prefix}(\w+) (\d+)", source)}
    return defines("ST_"), defines("TRAIN_STOP_")


def pow2_at_least(n: int) -> int:
    """A table's capacity for ``n`` slots: the least power of two >= n, at least 1024."""
    return 1 << max(10, int(n - 1).bit_length())


def existing_id(vocab, reserved: dict, a: int, b: int) -> int:
    """The id the merge of (a, b) takes without a new one (HF's rule 7: a special token spelled
    alike, or a token of the same string learned before), or -1: what ``vocab.merge`` will
    give, without growing the vocabulary."""
    spelled = vocab.token_bytes(a) + vocab.token_bytes(b)
    if spelled in reserved:
        return reserved[spelled]
    if vocab.id_order != "hf":
        return -1  # (the byte layout gives every merge a new id)
    return vocab.ids.get(vocab.strings[a] + vocab.strings[b], -1)


def take_merges(vocab, triples: list, merges: list, on_merge=None) -> None:
    """A block's merges ``(a, b, c)`` from the device appended to ``merges``, each checked
    against the vocabulary's own id (the device and ``Vocab`` apply the same rule 7);
    ``on_merge(len(merges))`` after a block that made any."""
    for a, b, c in triples:
        want = vocab.merge(a, b)
        if want != c:
            raise RuntimeError(f"merge {len(merges)}: id {c} on the device, {want} in the "
                               "vocabulary")
        merges.append((a, b, c))
    if triples and on_merge is not None:
        on_merge(len(merges))
