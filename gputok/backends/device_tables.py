"""The tables a device needs for one model, built on the host and uploaded once per device.

* the merge table's hash arrays (``stages/table.py``: the kernels probe the same layout);
* the whole-token table: a piece whose bytes are a token is emitted whole. Linear probing at load
  <= 1/2 on the top bits of ``bytes_hash`` of the token; a slot holds the low 32 bits of the hash
  (a cheap first check) and the token's index; hits are confirmed by comparing bytes;
* for device pre-tokenization: the class table, the pair table and the contraction letters of
  the pattern's scanner family (``stages/scan_rules.py``).
"""

from __future__ import annotations

import numpy as np

EMPTY_SLOT = 0xFFFFFFFF
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MIX1, MIX2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53  # a 64-bit finalizer (murmur3's)
_M64 = (1 << 64) - 1

i32, u32 = np.int32, np.uint32


def bytes_hash(data: bytes) -> int:
    """``enc_bytes_hash`` of kernels/encode_common.cuh: FNV-1a over the bytes, then a 64-bit
    finalizer so that the top bits (the slot) depend on every byte."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _M64
    for mul in (MIX1, MIX2):
        h ^= h >> 33
        h = (h * mul) & _M64
    return h ^ (h >> 33)


def bytes_hash_many(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``bytes_hash`` of every ``data[offsets[i]:offsets[i + 1]]``, vectorised (uint64)."""
    lens = np.diff(offsets).astype(np.int64)
    order = np.argsort(-lens, kind="stable")  # longest first: the active set is a prefix
    starts = offsets[:-1].astype(np.int64)[order]
    ls = lens[order]
    h = np.full(len(lens), FNV_OFFSET, np.uint64)
    prime = np.uint64(FNV_PRIME)
    for pos in range(int(ls[0]) if len(ls) else 0):
        k = int(np.searchsorted(-ls, -pos, "left"))  # tokens longer than pos
        h[:k] ^= data[starts[:k] + pos].astype(np.uint64)
        h[:k] *= prime
    for mul in (MIX1, MIX2):
        h ^= h >> np.uint64(33)
        h *= np.uint64(mul)
    h ^= h >> np.uint64(33)
    out = np.empty_like(h)
    out[order] = h
    return out


def whole_table(whole: "dict[bytes, int]") -> dict:
    """Host build of the device whole-token table (see the module docstring)."""
    toks = list(whole)
    ids = np.fromiter(whole.values(), np.uint32, len(toks))
    lens = np.fromiter(map(len, toks), np.int64, len(toks))
    off = np.zeros(len(toks) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    data = np.frombuffer(b"".join(toks), np.uint8)
    h = bytes_hash_many(data, off)
    bits = max(4, int(len(toks) * 2 - 1).bit_length())
    cap = 1 << bits
    slot_entry = np.full(cap, EMPTY_SLOT, np.uint32)
    slot_tag = np.zeros(cap, np.uint32)
    slot = (h >> np.uint64(64 - bits)).astype(np.int64)
    pending = np.arange(len(toks))
    while len(pending):
        s = slot[pending]
        free = slot_entry[s] == EMPTY_SLOT
        cand = pending[free]
        _, first = np.unique(s[free], return_index=True)
        win = cand[first]
        slot_entry[slot[win]] = win
        slot_tag[slot[win]] = (h[win] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        placed = np.zeros(len(toks), bool)
        placed[win] = True
        pending = pending[~placed[pending]]
        slot[pending] = (slot[pending] + 1) & (cap - 1)
    return {"slot_tag": slot_tag, "slot_entry": slot_entry, "tok_off": off.astype(np.uint32),
            "tok_bytes": data if len(data) else np.zeros(1, np.uint8), "tok_id": ids,
            "bits": bits}


_WHOLE_DTYPES = (("slot_tag", np.uint32), ("slot_entry", np.uint32), ("tok_off", np.uint32),
                 ("tok_bytes", np.uint8), ("tok_id", np.uint32))


def upload_tables(dev, model, scanner, class_cache: dict) -> tuple[dict, dict]:
    """(device arrays, kernel scalars) of ``model`` on ``dev``; ``scanner`` is the pattern's
    scanner when pre-tokenization runs on the device (else None). ``class_cache`` keeps one
    class table per (family, Unicode family) on the device."""
    if model.kind == "wordpiece":  # the vocabulary's byte trie, in the merge table's layout
        fam = model.family
        t = fam.trie
        return ({"t_keys": dev.put(t.h_keys), "t_prio": dev.put(t.h_prio),
                 "t_merged": dev.put(t.h_merged)},
                {"t_bits": u32(t.hash_bits), "cont": u32(fam.cont), "unk": u32(fam.unk_id),
                 "max_chars": u32(min(fam.max_chars, 0xFFFFFFFF))})
    table = model.merge_table
    a: dict = {"t_keys": dev.put(table.h_keys), "t_prio": dev.put(table.h_prio),
               "t_merged": dev.put(table.h_merged),
               "byte_ids": dev.put(table.byte_ids.astype(np.uint32))}
    s: dict = {"t_bits": u32(table.hash_bits)}
    if table.whole:
        w = whole_table(table.whole)
        for k, _ in _WHOLE_DTYPES:
            a["w_" + k] = dev.put(w[k])
        s["w_bits"] = u32(w["bits"])
    else:
        for k, t in _WHOLE_DTYPES:
            a["w_" + k] = dev.dummy(t)
        s["w_bits"] = u32(0)
    if scanner is not None:
        sc = scanner
        sc._setup()
        fam = sc.family
        key = (fam.name, sc.unicode_family)
        if key not in class_cache:
            class_cache[key] = dev.put(fam.tables(sc.unicode_family))
        a["cls_table"] = class_cache[key]
        a["pair"] = dev.put(np.frombuffer(fam.pair, np.uint8))
        letters = np.asarray(sc._letters, np.uint8)
        a["letters"] = dev.put(letters)
        nlo, nn = fam.next_range
        plo, pn = fam.prev2_range if fam.prev2_range is not None else (0, 0)
        s.update(pair_bits=i32(fam.bits), next_lo=i32(nlo), next_n=i32(nn), prev2_lo=i32(plo),
                 prev2_n=i32(pn), n_letters=u32(len(letters)), gpt2=i32(sc._kind == "gpt2"),
                 digit_group=i32(sc.digit_group), end_whole=i32(bool(sc.end_whole)),
                 runs=sc._kind == "cl")
    return a, s
