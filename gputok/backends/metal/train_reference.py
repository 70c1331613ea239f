"""The Metal trainer's stages in plain numpy: what each shader of ``shaders/train_*.metal`` must
compute, one function per shader, named after it. Tests run every shader (through the CPU
emulator, in several thread orders) and compare with these.

The state is ``arrays.py``'s (tok / prv / nxt / word_of / wcount); the rules are the same
(``kernels/common/train_rules.h``), so most functions here are ``arrays.py``'s. What differs is the
pair-count table (``shaders/train_common.metal``): a *main* table of ``key_hi``/``key_lo`` (left
+ 1, right + 1; 0 = free) and int64 ``count``, and the *delta* table an insertion shader writes
(``d_hi``/``d_lo`` keys, ``c_lo``/``c_hi`` halves of the 64-bit sums). Where an entry lands
depends on which thread claims a slot first, so the references speak of tables as
``{pair key: count}`` dicts; ``table_dict`` / ``delta_dict`` read a table that way, and
``check_probe_chains`` checks the layout rule every order must keep.
"""

from __future__ import annotations

import numpy as np

from ..._arrays import unique_sorted
from .. import train_arrays as arrays

_MASK64 = (1 << 64) - 1


def pair_hash(keys: np.ndarray) -> np.ndarray:
    """THE PAIR HASH (``train_hash`` in kernels/common/train_rules.h), on uint64 pair keys."""
    k = np.asarray(keys, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xFF51AFD7ED558CCD)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xC4CEB9FE1A85EC53)
        k ^= k >> np.uint64(33)
    return k


def slot_keys(key_hi: np.ndarray, key_lo: np.ndarray) -> np.ndarray:
    """Pair keys of used slots (left << 32 | right from the stored id + 1 halves)."""
    hi = np.asarray(key_hi, dtype=np.uint64) - np.uint64(1)
    lo = np.asarray(key_lo, dtype=np.uint64) - np.uint64(1)
    return (hi << np.uint64(32)) | lo


def table_dict(key_hi, key_lo, count) -> dict[int, int]:
    """A main table as ``{key: count}``, zero counts left out."""
    used = (np.asarray(key_hi) != 0) & (np.asarray(count) != 0)
    keys = slot_keys(np.asarray(key_hi)[used], np.asarray(key_lo)[used])
    return dict(zip(keys.tolist(), np.asarray(count)[used].astype(np.int64).tolist()))


def delta_halves(c_lo, c_hi) -> np.ndarray:
    """The int64 deltas of a delta table from their two 32-bit halves."""
    return ((np.asarray(c_hi, dtype=np.uint64) << np.uint64(32))
            | np.asarray(c_lo, dtype=np.uint64)).view(np.int64)


def delta_dict(key_hi, key_lo, d_hi, d_lo, c_lo, c_hi) -> dict[int, int]:
    """A delta table over a main table as ``{key: delta}``, zero deltas left out."""
    main = np.asarray(key_hi) != 0
    hi = np.where(main, key_hi, d_hi)
    lo = np.where(main, key_lo, d_lo)
    delta = delta_halves(c_lo, c_hi)
    used = (hi != 0) & (delta != 0)
    keys = slot_keys(hi[used], lo[used])
    return dict(zip(keys.tolist(), delta[used].tolist()))


def check_probe_chains(key_hi, key_lo) -> None:
    """The rule every table must keep: each key is in one slot, and every slot from its home
    (THE PAIR HASH & mask) up to it holds a key. Raises ValueError naming the first breach."""
    key_hi, key_lo = np.asarray(key_hi), np.asarray(key_lo)
    cap = len(key_hi)
    used = np.flatnonzero(key_hi != 0)
    if (key_lo[used] == 0).any():
        raise ValueError("a slot with a left id but no right id (a half-claimed slot)")
    keys = slot_keys(key_hi[used], key_lo[used])
    if len(unique_sorted(keys)) != len(keys):
        raise ValueError("a key holds two slots")
    home = (pair_hash(keys) & np.uint64(cap - 1)).astype(np.int64)
    dist = (used - home) % cap
    occupied = np.concatenate([key_hi != 0, key_hi != 0])  # unrolled: chains wrap around
    csum = np.concatenate([[0], np.cumsum(occupied)])
    filled = csum[home + dist + 1] - csum[home]
    bad = np.flatnonzero(filled != dist + 1)
    if len(bad):
        s = int(used[bad[0]])
        raise ValueError(f"slot {s}: a free slot lies between the key's home and its slot")


# ---------------------------------------------------------------- one function per shader

def train_count_pairs(tok, nxt, word_of, wcount) -> dict[int, int]:
    """Every adjacent live pair, weighted by word count (the delta table; zeros dropped)."""
    return arrays.pair_counts(tok, nxt, word_of, wcount)


def train_rehash(key_hi, key_lo, count) -> dict[int, int]:
    """The live entries (count != 0) of an old main table (the new delta table)."""
    return table_dict(key_hi, key_lo, count)


def train_fold_best(main: dict[int, int], delta: dict[int, int], merged: "int | None",
                    ) -> tuple[dict[int, int], tuple[int, int]]:
    """The folded table (the merged pair's count zeroed; zeros dropped) and its best
    ``(count, key)`` (THE COMPARATOR, ``arrays.best_pair``)."""
    out = dict(main)
    for k, d in delta.items():
        out[k] = out.get(k, 0) + d
    if merged is not None:
        out.pop(merged, None)
    out = {k: c for k, c in out.items() if c != 0}
    return out, arrays.best_pair(out)


def train_step_select(part_count, part_key, part_used, state, tok_len, tok_hash, res_len,
                      res_hash) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next state record and the ids' byte lengths and hashes (C's entry written): the best
    of the partials (THE COMPARATOR), then the first stop that applies (TARGET, MIN, REHASH,
    RESERVED: the joined token's (length, hash) equals an id's or a special's spelling) or the
    merge (A, B) -> C; a stopped state stays stopped."""
    from .kernels import shader_layout

    ST, STOP = shader_layout("train_common.metal")

    st = np.array(state, dtype=np.int64).copy()
    tok_len = np.array(tok_len, dtype=np.uint64).copy()
    tok_hash = np.array(tok_hash, dtype=np.uint64).copy()
    best_c, best_k = 0, _MASK64
    for c, k in zip(np.asarray(part_count).tolist(), np.asarray(part_key).tolist()):
        if c > best_c or (c == best_c and k < best_k):  # THE COMPARATOR
            best_c, best_k = c, k
    used = int(np.sum(part_used))
    st[ST["MERGED"]] = 0
    st[ST["USED"]] = used
    vocab_len = int(st[ST["VOCAB_LEN"]])
    bound = min(2 * min(best_c, int(st[ST["N_SYM"]])), 2 * vocab_len + 1)
    if st[ST["STOP"]]:
        return st, tok_len, tok_hash
    if vocab_len >= st[ST["VOCAB_TARGET"]]:
        st[ST["STOP"]] = STOP["TARGET"]
    elif best_c <= 0 or best_c < st[ST["MIN_COUNT"]]:
        st[ST["STOP"]] = STOP["MIN"]
    elif used + bound > st[ST["USED_LIMIT"]]:
        st[ST["STOP"]], st[ST["NEED"]] = STOP["REHASH"], used + bound
    else:
        a, b = best_k >> 32, best_k & 0xFFFFFFFF
        n_bytes = int(tok_len[a]) + int(tok_len[b])
        h = (int(tok_hash[a]) * pow(0x100000001B3, int(tok_len[b]), 1 << 64)
             + int(tok_hash[b])) & _MASK64  # THE TOKEN HASH of the joined token
        st[ST["A"]], st[ST["B"]], st[ST["C"]], st[ST["COUNT"]] = a, b, -1, best_c
        c = -1
        n_res = int(st[ST["N_RES"]])
        spellings = set(zip(np.asarray(tok_len).tolist(), np.asarray(tok_hash).tolist()))
        spellings |= set(zip(np.asarray(res_len)[:n_res].tolist(),
                             np.asarray(res_hash)[:n_res].tolist()))
        if int(st[ST["FORCED_KEY"]]) & _MASK64 == best_k:
            c = int(st[ST["FORCED_ID"]])
            st[ST["C"]], st[ST["FORCED_KEY"]] = c, -1
        elif (n_bytes, h) in spellings:  # (an id or a special spelled alike: the host decides)
            st[ST["STOP"]] = STOP["RESERVED"]
            return st, tok_len, tok_hash
        if c < 0:
            c = int(st[ST["NEXT_ID"]])
            st[ST["NEXT_ID"]] += 1
            st[ST["VOCAB_LEN"]] = vocab_len + 1
        st[ST["MERGED"]], st[ST["C"]] = 1, c
        st[ST["STEPS"]] += 1
        tok_len[c], tok_hash[c] = n_bytes, h
    return st, tok_len, tok_hash


def train_find_matches(tok, prv, nxt, a: int, b: int) -> np.ndarray:
    """uint8 flags of the positions where a merge of (a, b) starts (THE MATCH RULE)."""
    return arrays.find_matches(tok, prv, nxt, a, b)


def train_merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a: int, b: int, c: int
                       ) -> dict[int, int]:
    """The net change of every pair count, (a, b) left out (THE DELTA RULE)."""
    return arrays.merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a, b, c)


def train_apply_merge(tok, prv, nxt, is_start, c: int):
    """THE MERGE REWRITE as new arrays ``(tok, prv, nxt)``; equal to ``arrays.apply_merge`` at
    every live position (dead ones keep stale links)."""
    tok, prv, nxt = (np.array(x, dtype=np.int32) for x in (tok, prv, nxt))
    arrays.apply_merge(tok, prv, nxt, np.asarray(is_start), c)
    return tok, prv, nxt


def train_index_steps(tok, prv, nxt, word_of, wcount, next_id: int, steps: int):
    """What one launch of ``train_index_steps`` computes when nothing stops it (room for every
    id, pair, list and gain; no spelling of rule 7): ``steps`` steps of CUDA's list-driven loop
    (``arrays.train_lists``): THE COMPARATOR, THE MATCH RULE over the pair's list, THE DELTA
    RULE, THE MERGE REWRITE, the pairs gained listed where they formed. Returns the records
    ``[(a, b, c, count)]``, the new ``tok, prv, nxt``, the counts ``{key: count > 0}`` and those
    pairs' lists ``{key: positions}`` (stale positions included, as the device keeps them)."""
    tok, prv, nxt = (np.array(x, dtype=np.int32) for x in (tok, prv, nxt))
    wcount = np.asarray(wcount, dtype=np.int64)
    counts = arrays.pair_counts(tok, nxt, word_of, wcount)
    lists = arrays.occurrences(tok, nxt)
    recs = []
    for _ in range(steps):
        count, key = arrays.best_pair(counts)
        if count <= 0:
            break
        a, b, c = key >> 32, key & 0xFFFFFFFF, next_id + len(recs)
        recs.append((a, b, c, count))
        counts[key] = 0
        is_start = np.zeros(len(tok), dtype=np.uint8)
        listed = np.array(sorted(lists.pop(key, ())), dtype=np.int64)
        is_start[listed] = arrays.find_matches(tok, prv, nxt, a, b)[listed]
        for k, d in arrays.merge_deltas(tok, prv, nxt, word_of, wcount, is_start, a, b,
                                        c).items():
            counts[k] = counts.get(k, 0) + d
        new = arrays.gained(tok, prv, nxt, is_start, a, b, c)
        arrays.apply_merge(tok, prv, nxt, is_start, c)
        lists.update(new)
    counts = {k: v for k, v in counts.items() if v > 0}
    return recs, tok, prv, nxt, counts, {k: lists.get(k, set()) for k in counts}
