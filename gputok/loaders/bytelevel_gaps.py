"""Byte-level vocabularies that lack single-byte tokens, as merge-table entries.

HF's BPE model looks every character of a word's byte-level spelling up in ``model.vocab``
before merging (``cpu_ref.hf.RefHF.symbols`` states the rule): a byte the vocabulary lacks is
skipped when there is no ``unk_token`` (its neighbours meet and may merge), else it becomes the
unk symbol (consecutive ones fused into one with ``fuse_unk``). DeepSeek, Falcon, MPT, StarCoder
and Refact lack 13-28 bytes. gputok's merge stage starts every piece from ``byte_ids`` and runs
the merge table, on every backend and device; the rule becomes data there:

* bytes no text can hold (0xC0, 0xC1, 0xF5-0xFF: never in UTF-8; bytes input is decoded first):
  any id, never read;
* with an ``unk_token``: the byte's id is the unk's; with ``fuse_unk``, a first merge entry
  (unk, unk) -> unk fuses a run before any other merge, as HF fuses it before merging;
* without one: the byte's id is a *drop id* ``E`` that no token has, and first merge entries
  (E, x) -> x and (x, E) -> x (and (E, E) -> E) remove it before any other merge: the merges
  that follow see the piece without it, as HF's do. A piece made only of such bytes is left as
  ``[E]``: the Encoding removes ``E`` from what it returns (``Model.drop_id``).

The extra entries are the merge list's first (priority 0...), so every table-driven path (numpy,
kernels, the piece cache) applies them without knowing of them. Long pieces are never cut beside
a dropped byte (``table.merged_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: bytes that never occur in UTF-8
NEVER_IN_UTF8 = frozenset([0xC0, 0xC1, *range(0xF5, 0x100)])


@dataclass(frozen=True)
class Gaps:
    byte_ids: np.ndarray
    merges: list
    drop_id: "int | None"
    dropped: frozenset  # bytes text can hold that the merge removes


def missing_bytes(model: dict, by_bytes: dict, merges: list, decoder: dict, need) -> Gaps:
    """``byte_ids`` and the merge list of a byte-level model (``model`` is tokenizer.json's
    ``model`` object, ``by_bytes`` its bytes -> id, ``merges`` ``(left, right, merged)`` ids)."""
    missing = [b for b in range(256) if bytes([b]) not in by_bytes]
    held = [b for b in missing if b not in NEVER_IN_UTF8]
    ids = [by_bytes.get(bytes([b]), 0) for b in range(256)]
    if not held:
        return Gaps(np.array(ids, np.uint32), merges, None, frozenset())
    unk = model.get("unk_token")
    if unk is not None:
        vocab = model["vocab"]
        need(unk in vocab, f"model.unk_token {unk!r} is not in model.vocab, and the vocabulary "
                           f"lacks {len(held)} bytes text can hold (first: {held[0]:#04x}): HF "
                           "fails on the first such character; gputok refuses the file")
        unk_id = vocab[unk]
        for b in held:
            ids[b] = unk_id
        if not model.get("fuse_unk"):
            return Gaps(np.array(ids, np.uint32), merges, None, frozenset())
        need(all(m != unk_id for _, _, m in merges),
             f"a merge makes the unk token {unk!r}: fuse_unk would then fuse it too")
        return Gaps(np.array(ids, np.uint32), [(unk_id, unk_id, unk_id)] + merges, None,
                    frozenset())
    drop = _free_id(decoder)
    for b in held:
        ids[b] = drop
    symbols = sorted({ids[b] for b in range(256) if b not in missing}
                     | {m for _, _, m in merges})
    first = [(drop, drop, drop)]
    for x in symbols:
        first += [(drop, x, x), (x, drop, x)]
    return Gaps(np.array(ids, np.uint32), first + merges, drop, frozenset(held))


def _free_id(decoder: dict) -> int:
    """The smallest id no token has (a gap keeps the ids' dtype; else one past the last)."""
    ids = np.fromiter(decoder, np.int64, len(decoder))
    ids.sort()
    gap = np.flatnonzero(ids != np.arange(len(ids)))
    return int(gap[0]) if len(gap) else len(ids)


def without(ids, drop_id: int):
    """A list of ids without ``drop_id``."""
    return [i for i in ids if i != drop_id]


def without_arrays(ids: np.ndarray, offsets: np.ndarray, drop_id: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """A ragged batch ``(ids, offsets)`` without ``drop_id``."""
    keep = ids != drop_id
    if keep.all():
        return ids, offsets
    kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    return ids[keep], kept[np.asarray(offsets, np.int64)]
