"""The tables a device needs for one model, built on the host and uploaded once per device.

* the merge table's hash arrays (``stages/table.py``: the kernels probe the same slots),
  interleaved so that a probe reads one 16-byte slot (``merge_slots``);
* the whole-token table: a piece whose bytes are a token is emitted whole. Linear probing at load
  <= 1/2 on the top bits of ``bytes_hash`` of the token; a 16-byte slot holds the low 32 bits of
  the hash (a cheap first check), the token's id, offset and length; hits are confirmed by
  comparing bytes. A merges (HF rule) model gets one too (``proven_whole``): the tokens the
  merge rule makes from their own bytes, so the lookup gives the merges' own answer;
* the two blocks after those tables' slots (flags in their bits): the priority of every pair of
  single-byte tokens (``byte_pair_block``: a piece's first probes, one per byte pair, become
  loads from 256 KB) and the id of every one-byte token (``whole_byte_block``: a one-byte piece
  needs no hash or probe);
* for device pre-tokenization: the class table, the pair table and the contraction letters of
  the pattern's scanner family (``stages/scan_rules.py``).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from .._cache import map_arrays, write_arrays
from ..stages.table import MergeTable, join_bitmap, merge_slots, merged_tokens  # noqa: F401

EMPTY_SLOT = 0xFFFFFFFF
PAIR_COMPACT = 0x100  # in t_bits: the merge table has 8-byte slots (pair_slots)
PAIR_ID_BITS = 21
PAIR_BYTES = 0x200  # in t_bits: the byte-pair block follows the merge table's slots
WHOLE_BYTES = 0x100  # in the whole-token table's bits: the one-byte block follows its slots
SIZE_BITS = 0xFF  # the table's size bits, below the flags
PRIO_LIMIT = 0x7FFFFFFF  # pair priorities stay below (ENC_HUGE_PRIO: the top bit is a flag)
PAIR_BLOCK_WORDS = 1 << 15  # uint64 words of the byte-pair block (65,536 uint32 priorities)
WHOLE_BLOCK_WORDS = 256  # uint32 words of the one-byte block
BYTES_SEED = 0xCBF29CE484222325
WORD_MUL = 0x9E3779B97F4A7C15
MIX1, MIX2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53  # a 64-bit finalizer (murmur3's)
_M64 = (1 << 64) - 1

i32, u32 = np.int32, np.uint32


def bytes_hash(data: bytes) -> int:
    """``enc_bytes_hash`` of kernels/common/encode_rules.h: from ``BYTES_SEED ^ len``, each
    8-byte little-endian word (the last one zero-padded) xor-ed in and the state multiplied by
    ``WORD_MUL``, then a 64-bit finalizer so that the top bits (the slot) depend on every
    byte."""
    h = BYTES_SEED ^ len(data)
    for k in range(0, len(data), 8):
        h = ((h ^ int.from_bytes(data[k:k + 8], "little")) * WORD_MUL) & _M64
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
    h = np.uint64(BYTES_SEED) ^ ls.astype(np.uint64)
    mul = np.uint64(WORD_MUL)
    last = max(len(data) - 1, 0)
    for pos in range(0, int(ls[0]) if len(ls) else 0, 8):
        k = int(np.searchsorted(-ls, -pos, "left"))  # tokens longer than pos
        word = np.zeros(k, np.uint64)
        for j in range(8):
            at = starts[:k] + pos + j
            byte = data[np.minimum(at, last)].astype(np.uint64)
            byte[ls[:k] <= pos + j] = 0  # past the token's end: zero padding
            word |= byte << np.uint64(8 * j)
        h[:k] = (h[:k] ^ word) * mul
    for m in (MIX1, MIX2):
        h ^= h >> np.uint64(33)
        h *= np.uint64(m)
    h ^= h >> np.uint64(33)
    out = np.empty_like(h)
    out[order] = h
    return out


def whole_table(whole: "dict[bytes, int]") -> dict:
    """Host build of the device whole-token table (see the module docstring): ``slots`` (uint32,
    4 per slot: hash tag, token id or ``EMPTY_SLOT``, first byte in ``tok_bytes``, length),
    ``tok_bytes`` and ``bits``."""
    toks = list(whole)
    ids = np.fromiter(whole.values(), np.uint32, len(toks))
    lens = np.fromiter(map(len, toks), np.int64, len(toks))
    off = np.zeros(len(toks) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    data = np.frombuffer(b"".join(toks), np.uint8)
    h = bytes_hash_many(data, off)
    bits = max(4, int(len(toks) * 2 - 1).bit_length())
    cap = 1 << bits
    slots = np.zeros((cap, 4), np.uint32)
    slots[:, 1] = EMPTY_SLOT
    slot = (h >> np.uint64(64 - bits)).astype(np.int64)
    pending = np.arange(len(toks))
    while len(pending):
        s = slot[pending]
        free = slots[s, 1] == EMPTY_SLOT
        cand = pending[free]
        _, first = np.unique(s[free], return_index=True)
        win = cand[first]
        slots[slot[win]] = np.stack([(h[win] & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                                     ids[win], off[win].astype(np.uint32),
                                     lens[win].astype(np.uint32)], axis=1)
        placed = np.zeros(len(toks), bool)
        placed[win] = True
        pending = pending[~placed[pending]]
        slot[pending] = (slot[pending] + 1) & (cap - 1)
    return {"slots": slots.reshape(-1), "tok_bytes": data if len(data) else np.zeros(1, np.uint8),
            "bits": bits}


def pair_slots(table) -> tuple[np.ndarray, int]:
    """(slots, t_bits): the merge table as the kernels probe it (THE PAIR PROBE). Where every
    pair's priority is its merged id (the tiktoken rule) and every id fits ``PAIR_ID_BITS``,
    one uint64 per slot, ``left << 42 | right << 21 | merged``, with ``PAIR_COMPACT`` set in
    ``t_bits``: half of ``merge_slots``' memory, the same slots and probes (o200k: 16 -> 8 MB
    of tables to map, cache and upload; a native plan 10.5 -> 5.7 ms), and a merge step takes
    the merged id from the priority instead of probing again. (On the 2-core box's CPU
    encode_merge_short ran the same: it is bound by the step's own work, not by the table's
    misses.)
    Else ``merge_slots``' two words per slot. Priorities stay below ``PRIO_LIMIT``: the merge
    of a huge piece (kernels/common/encode_merge_huge.h) flags merging pairs in the top bit."""
    from ..stages.table import EMPTY_KEY

    keys = table.h_keys
    occ = keys != np.uint64(EMPTY_KEY)
    if occ.any() and int(table.h_prio[occ].max()) >= PRIO_LIMIT:
        raise ValueError(f"a merge table's priorities must stay below {PRIO_LIMIT:#x} for the "
                         f"device kernels; this one reaches {int(table.h_prio[occ].max()):#x}")
    left, right = keys[occ] >> np.uint64(32), keys[occ] & np.uint64(0xFFFFFFFF)
    merged = table.h_merged[occ].astype(np.uint64)
    top = max((int(a.max()) for a in (left, right, merged) if len(a)), default=0)
    if top >= (1 << PAIR_ID_BITS) - 1 or not np.array_equal(table.h_prio[occ], table.h_merged[occ]):
        return merge_slots(table), table.hash_bits
    out = np.full(len(keys), EMPTY_KEY, np.uint64)
    b = np.uint64(PAIR_ID_BITS)
    out[occ] = (left << (b + b)) | (right << b) | merged
    return out, table.hash_bits | PAIR_COMPACT


def byte_pair_block(table) -> np.ndarray:
    """THE BYTE-PAIR BLOCK (kernels/common/encode_merge_rules.h): the priority of the pair
    (``byte_ids[x]``, ``byte_ids[y]``) at ``x << 8 | y`` for every two bytes, ``NO_MERGE`` where
    the table has no such pair, two to a uint64 word (the low half first): 32,768 words that
    ``pair_slots``' slots are followed by, with ``PAIR_BYTES`` in ``t_bits``. The priorities are
    the merge table's own probe of each pair (``MergeTable.lookup``), so a kernel reading the
    block gets what probing would."""
    ids = np.asarray(table.byte_ids, np.uint32)
    prio, _ = table.lookup(np.repeat(ids, 256), np.tile(ids, 256))
    words = prio.astype(np.uint64)
    return words[0::2] | (words[1::2] << np.uint64(32))  # PAIR_BLOCK_WORDS words


def whole_byte_block(whole: "dict[bytes, int]") -> np.ndarray:
    """The one-byte block (kernels/common/encode_merge_rules.h, EncWholeTable): 256 uint32, the
    id of the token whose bytes are that one byte, ``NO_MERGE`` where none is; what the
    whole-token table's probe returns for a one-byte piece. ``whole_table``'s slots are
    followed by it, with ``WHOLE_BYTES`` in its bits."""
    from ..stages.table import NO_MERGE

    return np.array([whole.get(bytes([b]), NO_MERGE) for b in range(WHOLE_BLOCK_WORDS)],
                    np.uint32)


def proven_whole(model, table) -> "dict[bytes, int] | None":
    """The whole-token lookup of a byte-level merges (HF rule) model, which has none of its own
    (``table.whole`` is None: no ``ignore_merges``): {bytes: id} of the tokens the merge rule
    makes from their own bytes (``merge_rounds``, the kernels' algorithm, on every token the
    table makes), with the one-byte tokens. Exact by construction: a piece's ids are a function
    of its bytes, and for these bytes they are that one token, so the lookup answers what the
    merges would, in one probe instead of a merge step a byte (a cold piece of Llama 3 prose:
    ~6 steps, each waiting on a probe of an 8 MB table). A token the rule never makes from its
    own bytes (merged another way, or an id a byte gap gives) is left out: its pieces merge.
    None where the model has no merges or is not byte-level.

    Performance notes: the per-document pass on cold text (bench/cold_time.py, 2 MB in fresh
    256 KB slices, one thread, thread CPU time, five interleaved runs on a loaded 2-core box):
    Llama 3 prose 70 -> 83 MB/s, code 79 -> 91, Qwen2 prose 71 -> 85, code 83 -> 91;
    multilingual about the same (42-43 -> 41-42: its misses are rarely one token). The cost: a
    table of 16 bytes a slot (2x the tokens, rounded up to a power of two: Llama 3 4 MB, Qwen2
    8 MB) plus the tokens' bytes, and ~1.5 s of merge_rounds once, where the tables are cached
    (``_cache_path``)."""
    from ..stages.merge import merge_rounds
    from .._arrays import unique_sorted

    seg = getattr(model, "segmenter", None)
    if model.ranks is not None or table.whole is not None or not getattr(seg, "byte_level", False):
        return None
    decoder, drop = model.decoder, model.drop_id
    ids = [i for i in unique_sorted(table.pair_merged).tolist()
           if i != drop and decoder.get(i) is not None]
    toks = [decoder[i] for i in ids]
    whole = {bytes([b]): i for b, i in enumerate(table.byte_id_list)
             if i != drop and decoder.get(i) == bytes([b])}
    if not toks:
        return whole or None
    lens = np.fromiter(map(len, toks), np.int64, len(toks))
    off = np.zeros(len(toks) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    data = np.frombuffer(b"".join(toks), np.uint8)
    got, got_off = merge_rounds(table.byte_ids[data], off, table)
    one = np.flatnonzero((np.diff(got_off) == 1)
                         & (got[np.minimum(got_off[:-1], max(len(got) - 1, 0))]
                            == np.asarray(ids, np.uint32)))
    for k in one.tolist():
        whole.setdefault(toks[k], ids[k])
    return whole


def with_byte_blocks(out: dict, table, whole: "dict | None" = None) -> dict:
    """``host_tables``' arrays with both blocks after their tables' slots, flags set (``whole``:
    the whole-token lookup's tokens, ``table.whole`` unless given)."""
    if "slots" in out:
        whole = table.whole if whole is None else whole
        out["slots"] = np.concatenate([out["slots"], whole_byte_block(whole)])
        out["bits"] = int(out["bits"]) | WHOLE_BYTES
    out["t_slots"] = np.concatenate([out["t_slots"], byte_pair_block(table)])
    out["t_bits"] = int(out["t_bits"]) | PAIR_BYTES
    return out


#: bump when whole_table, join_bitmap or the blocks change: old cache files are ignored
TABLES_VERSION = 7
_CACHED = {"t_slots", "byte_ids", "slots", "tok_bytes", "join"}


def _cache_path(model) -> "str | None":
    """Where a byte-level model's host-built tables are cached (None: not cached). The key
    covers the vocabulary (a tiktoken-rule model's ranks digest; a merges model's source digest
    with gputok's code, which reads the merges from it), every hash constant and both builders'
    versions."""
    from ..stages.table import _cache_file, cache_key

    if model.ranks is not None:
        if model.ranks_digest is None:
            return None
        base = cache_key(model.ranks_digest)
    else:
        base = _merges_key(model)
        if base is None:
            return None
    key = hashlib.sha256(f"{base}|{BYTES_SEED:x}|{WORD_MUL:x}|"
                         f"{MIX1:x}|{MIX2:x}|{TABLES_VERSION}".encode()).hexdigest()[:32]
    return _cache_file(key).replace("merge-table-", "device-tables-").replace(".npz", ".bin")


def _merges_key(model) -> "str | None":
    """The key of a merges (HF rule) model's tables: the digest of the file it was loaded from
    (a tokenizer.json's bytes, a GGUF file's metadata) and of gputok's code, with the merges'
    count, ends, byte ids and whole-token lookup as a check; None for a model without a
    source digest (built in this process: its tables are built, not cached)."""
    from .._cache import code_digest

    seg = model.segmenter
    merges = getattr(seg, "merges", None)
    if not model.digest or not merges or not getattr(seg, "byte_level", False):
        return None
    h = hashlib.sha256(f"merges|{model.digest}|{len(merges)}|{tuple(merges[0])}|"
                       f"{tuple(merges[-1])}|{len(seg.whole or ())}|".encode())
    h.update(code_digest())
    h.update(np.ascontiguousarray(seg.byte_ids, np.int64).tobytes())
    return h.hexdigest()[:32]


def prefetch(model) -> None:
    """Ask the OS to read ``model``'s cached tables into the page cache now, in the background
    (``posix_fadvise(WILLNEED)``, ~10 us here), so the reading overlaps what the caller does
    before its first batch (reading the corpus). Where the cache was cold (first run after boot,
    or a machine that reclaims page cache, as the 2-core box does) that batch read its 8-17 MB
    of tables itself: o200k prose 4 MB took 73 ms with the file cached, 110-340 ms (once 516)
    without; with the hint, the corpus read in between, 78-116 ms (4 runs each, page cache
    dropped before each). Only for a model whose vocabulary digest is known (no 0.1 s of
    hashing here); a no-op without the file or the call."""
    if model.digest is None or not hasattr(os, "posix_fadvise"):
        return
    path = _cache_path(model)
    if path is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mapped(path: str) -> "dict | None":
    """The cached tables, mapped (``_cache.map_arrays``), or None when absent or inconsistent."""
    got = map_arrays(path)
    if got is None:
        return None
    arrays, scalars = got
    whole = "slots" in arrays  # (a model without whole-token lookup has no such table)
    try:
        t_bits = int(scalars["t_bits"])
        bits = int(scalars["bits"]) if whole else None
    except (KeyError, TypeError, ValueError):
        return None
    size_bits = t_bits & SIZE_BITS
    if set(arrays) != (_CACHED if whole else _CACHED - {"slots", "tok_bytes"}) or \
            not 0 < size_bits < 32 or t_bits & ~(SIZE_BITS | PAIR_COMPACT | PAIR_BYTES):
        return None
    words = 1 if t_bits & PAIR_COMPACT else 2
    t_len = (words << size_bits) + (PAIR_BLOCK_WORDS if t_bits & PAIR_BYTES else 0)
    if len(arrays["t_slots"]) != t_len or len(arrays["join"]) != 2048 or \
            len(arrays["byte_ids"]) != 256:
        return None
    if not whole:
        return dict(arrays, t_bits=t_bits)
    w_size = bits & SIZE_BITS
    w_len = (4 << w_size) + (WHOLE_BLOCK_WORDS if bits & WHOLE_BYTES else 0)
    if not 0 < w_size < 32 or bits & ~(SIZE_BITS | WHOLE_BYTES) or len(arrays["slots"]) != w_len:
        return None
    return dict(arrays, bits=bits, t_bits=t_bits)


def host_tables(model) -> dict:
    """Every table a device needs, as host arrays: the merge table's slots (``t_slots``,
    ``t_bits``, ``byte_ids``), the whole-token table (``slots``, ``tok_bytes``, ``bits``; absent
    without whole-piece lookup) and the join bits. Built here (~0.5 s for a 200K vocabulary) or
    mapped from a cache next to the merge table's, for a byte-level model whose source is known
    (``_cache_path``): a process that finds it does not build the merge table at all, and
    copies no table byte (an ``.npz`` read cost 30-80 ms for cl100k / o200k, a plain read 15-30
    ms; the mapping, page table filled, 0.5-4 ms; the pages are the page cache's, shared by
    every process). Llama 3's tokenizer.json: 0.49 s built, a few ms mapped."""
    path = _cache_path(model)
    if path is not None:
        got = _mapped(path)
        if got is not None:
            return got
    table = model.merge_table
    whole = table.whole if table.whole is not None else proven_whole(model, table)
    out = whole_table(whole) if whole else {}
    t_slots, t_bits = pair_slots(table)
    out.update(t_slots=t_slots, t_bits=t_bits,
               byte_ids=table.byte_ids.astype(np.uint32),
               join=join_bitmap(merged_tokens(model, table)))
    with_byte_blocks(out, table, whole)
    if path is not None:
        scalars = {k: int(out[k]) for k in ("bits", "t_bits") if k in out}
        write_arrays(path, {k: v for k, v in out.items() if k not in scalars}, scalars)
    return out


def unsafe_bits(form: str) -> np.ndarray:
    """The normaliser's quick-check table (``gputok.unicode.unsafe_table``) as the bitmap
    ``nfc_unsafe_cp`` of kernels/common/nfc_check.h reads: bit cp of word cp >> 5 (uint32)."""
    from ..unicode import unsafe_table

    return np.packbits(unsafe_table(form), bitorder="little").view(np.uint32)


def upload_tables(dev, model, scanner, class_cache: dict, norm_form: "str | None" = None
                  ) -> tuple[dict, dict]:
    """(device arrays, kernel scalars) of ``model`` on ``dev``; ``scanner`` is the pattern's
    scanner when pre-tokenization runs on the device (else None); ``norm_form`` the normal form
    whose quick check runs on the device (else None). ``class_cache`` keeps one class table per
    (family, Unicode family), and one quick-check bitmap per form, on the device."""
    form = model.segmenter.device
    if form.tables is not None:  # the segmenter's own tables (WordPiece: its byte trie)
        arrays, scalars = form.tables()
        return ({k: dev.put(merge_slots(v) if isinstance(v, MergeTable) else v)
                 for k, v in arrays.items()}, dict(scalars))
    host = host_tables(model)
    a: dict = {"t_slots": dev.put(host["t_slots"]), "byte_ids": dev.put(host["byte_ids"]),
               "join": dev.put(host["join"])}
    s: dict = {"t_bits": u32(host["t_bits"])}
    if "slots" in host:
        a["w_slots"], a["w_tok_bytes"] = dev.put(host["slots"]), dev.put(host["tok_bytes"])
        s["w_bits"] = u32(host["bits"])
        # (host only: no longer piece is a token)
        s["w_max_len"] = int(host["slots"][:4 << (int(host["bits"]) & SIZE_BITS)][3::4].max())
    else:
        a["w_slots"], a["w_tok_bytes"] = dev.dummy(np.uint32), dev.dummy(np.uint8)
        s["w_bits"] = u32(0)
    if norm_form is not None:
        key = ("unsafe", norm_form)
        if key not in class_cache:
            class_cache[key] = dev.put(unsafe_bits(norm_form))
        a["nfc_bits"] = class_cache[key]
    if scanner is not None:
        sc = scanner
        sc._setup()
        fam = sc.family
        key = (fam.name, sc.unicode_family)
        if key not in class_cache:
            class_cache[key] = dev.put(fam.tables(sc.unicode_family))
        a["cls_table"] = class_cache[key]
        letters = np.asarray(sc._letters, np.uint8)
        a["letters"] = dev.put(letters)
        if sc._kind == "o200k":  # encode_o200k.cu: classes and contraction letters only
            s.update(o200k=True, n_letters=u32(len(letters)))
            return a, s
        s.update(n_letters=u32(len(letters)), gpt2=i32(sc._kind == "gpt2"),
                 digit_group=i32(sc.digit_group), end_whole=i32(bool(sc.end_whole)))
    return a, s
