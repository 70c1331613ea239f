"""SentencePiece BPE's encode tables, built from the pieces with array passes and kept on disk by
content (``SpmFamily.tables``; ``spm_bpe``'s module docstring says what each rule is for):

    sym_of      uint32[0x110000]: each character's symbol: its single-character piece, or an
                extra symbol (numbered from n) for a character seen only inside pieces; else
                UNKNOWN | code point
    pairs       the merge table: every split of every merge result (a NORMAL or UNUSED piece of
                2+ characters) into two symbols -> (the result's score rank, the result); a
                symbol's text is a character (not a user-defined one) or a merge result
    inner_keys  every character pair side by side inside a mergeable piece (no cut there)
    emittable   per symbol: emitted as it is (NORMAL and USER_DEFINED pieces)
    sentence_wide  some pair makes an UNUSED piece

The splits are looked up by text through ``pieces.PieceIndex`` (hashes of runs of code points,
every hit checked character by character); a right half is looked up only where the left half
is a symbol. The inner pairs of a piece whose prefix (all but its last character) is a merge
result are that prefix's and one more (the prefix is mergeable too), so only pieces without
one contribute all their pairs.

The arrays go to ``$GPUTOK_CACHE/tables/spm-<key>.bin`` (``_cache.write_arrays``: one file,
mapped by the next process), ``key`` = sha256 of the pieces, their scores and effective types,
``FORMAT`` and gputok's code.

Performance notes (262K pieces, 1.2M splits, a busy 2-core box): the dict walk over every
split of every piece took 3 s; these passes ~0.3 s; mapping the cached file ~2 ms.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from ..._arrays import unique_sorted
from ..._cache import cache_dir, code_digest, map_arrays, write_arrays
from ...stages.table import MergeTable
from .charbpe import N_CP, UNKNOWN, CharBpe
from .pieces import HashClash, PieceIndex, PieceTable, distinct

FORMAT = 1
NORMAL, USER_DEFINED, UNUSED = 1, 4, 5
_SEEDS = 8


def cache_path(table: PieceTable, types: np.ndarray) -> str:
    h = hashlib.sha256(b"gputok spm tables %d\0" % FORMAT + code_digest())
    h.update(table.digest(types))
    return os.path.join(cache_dir("tables"), f"spm-{h.hexdigest()[:40]}.bin")


def tables(table: PieceTable, types: np.ndarray, in_pid: np.ndarray, rank_of) -> dict:
    """The encode tables (module docstring) as arrays: from the cache, else built and stored.
    ``types``: the effective types; ``in_pid``: the pieces that are pieces (not a skipped NUL);
    ``rank_of()``: each piece's merge priority (built only when the tables are)."""
    path = cache_path(table, types)
    got = map_arrays(path)
    if got is not None and _fits(got[0], len(table)) and got[1].get("sum") == _checksum(got[0]):
        return dict(got[0], sentence_wide=bool(got[1]["sentence_wide"]))
    built = build(table, types, in_pid, rank_of())
    arrays = {k: v for k, v in built.items() if k != "sentence_wide"}
    write_arrays(path, arrays, {"sentence_wide": built["sentence_wide"],
                                "sum": _checksum(arrays)})
    return built


def _checksum(arrays: dict) -> str:
    """A sum of every array's bytes as 64-bit words (any flipped bit changes it; ~1 ms for 20
    MB, a CRC-32 ~12 ms): a damaged file is rebuilt, never read as tables."""
    total = 0
    for name in sorted(arrays):
        raw = np.ascontiguousarray(arrays[name]).view(np.uint8).reshape(-1)
        cut = len(raw) - len(raw) % 8
        total += int(raw[:cut].view(np.uint64).sum(dtype=np.uint64))
        total += int.from_bytes(raw[cut:].tobytes(), "little") + len(raw)
    return str(total % (1 << 64))


_NAMES = ("sym_of", "pair_keys", "pair_prio", "pair_merged", "h_keys", "h_prio", "h_merged",
          "inner_keys", "emittable", "extra_cps")


def _fits(arrays: dict, n: int) -> bool:
    return all(k in arrays for k in _NAMES) and len(arrays["sym_of"]) == N_CP \
        and len(arrays["emittable"]) == n + len(arrays["extra_cps"])


def char_bpe(t: dict) -> CharBpe:
    """The ``CharBpe`` of the tables ``t``."""
    merge = MergeTable(None, np.zeros(256, np.uint32), None,
                       arrays={k: t[k] for k in _NAMES[1:7]})
    return CharBpe.from_arrays(t["sym_of"], merge, t["inner_keys"])


def build(table: PieceTable, types: np.ndarray, in_pid: np.ndarray, rank: np.ndarray) -> dict:
    """The tables, built (module docstring)."""
    n = len(table)
    cps, coff = table.chars
    clen = np.diff(coff)
    results = in_pid & (clen > 1) & ((types == NORMAL) | (types == UNUSED))
    frozen = in_pid & (types == USER_DEFINED)
    single = np.flatnonzero(in_pid & (clen == 1))
    sym_of = np.arange(N_CP, dtype=np.uint32) | np.uint32(UNKNOWN)
    sym_of[cps[coff[single]]] = single
    r_ids = np.flatnonzero(results)
    r_start, r_len = coff[r_ids], clen[r_ids]
    r_cps = cps[_runs(r_start, r_len)]
    unseen = r_cps[sym_of[r_cps] >= UNKNOWN]
    extra = np.zeros(0, np.uint32)
    if len(unseen):
        uniq, first = np.unique(unseen, return_index=True)
        extra = uniq[np.argsort(first)].astype(np.uint32)
        sym_of[extra] = np.arange(n, n + len(extra), dtype=np.uint32)
    text_ok = np.ones(n + len(extra), bool)  # a symbol with a text: not a user-defined piece
    text_ok[:n] = ~frozen

    index = _index(table, r_ids)
    pre, inv = index.hasher.prefix, index.hasher.ipw

    def char_symbol(at: np.ndarray) -> np.ndarray:
        """The symbol of the character at each position (-1: none with a text)."""
        s = sym_of[cps[at]].astype(np.int64)
        ok = s < UNKNOWN
        ok[ok] = text_ok[s[ok]]
        return np.where(ok, s, -1)

    # every split of every merge result, a split position at a time over the results longer
    # than it (longest first): the left half, then the right half where the left is a symbol;
    # a half's hash from the prefix sums each result's start and end read once
    order = np.argsort(-r_len.astype(np.int16), kind="stable")  # (a radix sort)
    starts, lens = r_start[order], r_len[order]
    ends = starts + lens
    pre_a, inv_a, pre_e = pre[starts], inv[starts], pre[ends]
    longer = np.searchsorted(-lens, -np.arange(int(lens[0]) if len(lens) else 0), "left")
    found_l, found_r, found_m, prefix = [], [], [], np.full(len(r_ids), -1, np.int64)
    for k in range(1, len(longer)):
        c = int(longer[k])  # results with more than k characters
        a = starts[:c]
        mid = a + k
        pre_m = pre[mid]
        if k == 1:
            left = char_symbol(a)
        else:
            left = index.find((pre_m - pre_a[:c]) * inv_a[:c], a, k)
        last = np.flatnonzero(lens[:c] == k + 1)  # (the split before a result's last character)
        prefix[order[last]] = left[last]
        has = np.flatnonzero(left >= 0)
        if not len(has):
            continue
        right = np.full(len(has), -1, np.int64)
        one = lens[has] == k + 1
        right[one] = char_symbol(mid[has[one]])
        many = has[~one]
        if len(many):
            right[~one] = index.find((pre_e[many] - pre_m[many]) * inv[mid[many]], mid[many],
                                     lens[many] - k)
        got = right >= 0
        found_l.append(left[has][got])
        found_r.append(right[got])
        found_m.append(r_ids[order[has[got]]])
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
    left, right, merged = cat(found_l), cat(found_r), cat(found_m)
    keys = (left.astype(np.uint64) << np.uint64(32)) | right.astype(np.uint64)
    merge = MergeTable(None, np.zeros(256, np.uint32), None, arrays={
        "pair_keys": keys, "pair_prio": np.asarray(rank, np.int64)[merged].astype(np.uint32),
        "pair_merged": merged.astype(np.uint32)})

    # inner pairs: all of a mergeable piece's, or only the last where its prefix is a result
    mergeable = in_pid & (clen >= 2) & ((types == NORMAL) | (types == UNUSED)
                                       | (types == USER_DEFINED))
    last_only = np.zeros(n, bool)
    last_only[r_ids] = (r_len >= 3) & (prefix >= 0)
    whole = np.flatnonzero(mergeable & ~last_only)
    at = np.concatenate([_runs(coff[whole], clen[whole] - 1),
                         coff[1:][last_only] - 2]).astype(np.int64)
    inner = unique_sorted(distinct((cps[at].astype(np.uint64) << np.uint64(21))
                                   | cps[at + 1].astype(np.uint64)))
    emittable = np.zeros(n + len(extra), bool)
    emittable[:n] = in_pid & ((types == NORMAL) | (types == USER_DEFINED))
    return {"sym_of": sym_of, **merge.arrays(), "inner_keys": inner, "emittable": emittable,
            "extra_cps": extra, "sentence_wide": bool((types[merged] == UNUSED).any())}


def _runs(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The positions ``starts[k] + j`` for ``j < lens[k]``, run after run."""
    lens = np.asarray(lens, np.int64)
    total = int(lens.sum())
    return np.repeat(np.asarray(starts, np.int64) - (np.cumsum(lens) - lens), lens) \
        + np.arange(total)


def _index(table: PieceTable, ids: np.ndarray) -> PieceIndex:
    for seed in range(_SEEDS):
        try:
            return PieceIndex(table, ids, seed)
        except HashClash:
            continue
    raise ValueError("pieces whose hashes clash under every seed")  # pragma: no cover
