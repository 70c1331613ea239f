"""Dedup: each distinct piece is merged once, and its ids are remembered in the model's cache.

Natural text repeats its pieces (a 1 MB English batch has ~30K distinct pieces among ~250K), so
the CPU pipeline probes a dict once per piece and sends only the misses of a whole batch to the
merge stage together (where many misses merge in vectorised rounds). Pieces of ``LONG_PIECE``
bytes or more are not cached: they rarely repeat and would pin memory.

Items of a document are piece strings, or ``(id,)`` tuples for special/added tokens, which pass
through unchanged; that lets the split stage interleave tokens without a second layout.

Performance notes: ``list(map(cache.get, items))`` is the cheapest probe in CPython (a
comprehension is ~25% slower); a second probe after the batch's misses are filled beats
tracking miss positions. The cache is dropped wholesale past ``limit`` entries: an LRU costs
more per probe than the rare rebuild.
"""

from __future__ import annotations

from itertools import chain

from . import counters
from .merge import LONG_PIECE

DEVICE_MISSES = 12  # misses of one text from which all go to a device's merge stage


class PieceCache(dict):
    """piece (str) -> ids (tuple), bounded by ``limit`` entries (cleared when full)."""

    def __init__(self, limit: int = 1 << 20):
        super().__init__()
        self.limit = limit

    def store(self, pieces: list, values: list) -> None:
        if len(self) + len(pieces) > self.limit:
            self.clear()
        self.update(zip(pieces, values))
        # a str of fewer than LONG_PIECE / 4 characters is shorter than LONG_PIECE bytes
        for p in [p for p in pieces if len(p) * 4 >= LONG_PIECE
                  and len(p.encode("utf-8")) >= LONG_PIECE]:
            del self[p]


def ids_of_pieces(model, pieces: list, device_merge=None, segment=None) -> list:
    """Ids of one document's items (the single-text path): a list of tuples.
    ``segment(units)``: the segmenter's rule run elsewhere (a device's Unigram lattice) for
    the misses; default ``model.segmenter.segment``.

    ``device_merge(pieces)``: the merge stage of a device (UTF-8 bytes in, a tuple of ids per
    piece out, or None when it cannot take them). The missing pieces of ``LONG_PIECE`` bytes or
    more always go there (Python's heap costs ~2 us per byte), and every miss when there are
    ``DEVICE_MISSES`` or more (a cold cache: Python merges cost 12-140 us a piece, the device
    ~0.2 ms a call plus 2-6 us a piece)."""
    cache = model.piece_cache
    vals = list(map(cache.get, pieces))
    if None in vals:
        missing = list({p for p, v in zip(pieces, vals) if v is None and p.__class__ is str})
        got = {}
        if device_merge is not None:
            if len(missing) >= DEVICE_MISSES:
                send = [(p, p.encode("utf-8")) for p in missing]
            else:  # a str of fewer than LONG_PIECE / 4 characters is shorter than LONG_PIECE bytes
                send = [(p, b) for p in missing if len(p) * 4 >= LONG_PIECE
                        for b in (p.encode("utf-8"),) if len(b) >= LONG_PIECE]
            merged = device_merge([b for _, b in send]) if send else None
            if merged is not None:  # (None: the device could not take them)
                got.update(zip([p for p, _ in send], merged))
                counters["merge.device_pieces"] += len(send)
                missing = [p for p in missing if p not in got] if len(got) < len(missing) else []
        got.update(zip(missing, (segment or model.segmenter.segment)(missing)))
        fresh = list(got)
        cache.store(fresh, [got[p] for p in fresh])
        vals = [v if v is not None else _resolve(model, got, p, segment)
                for p, v in zip(pieces, vals)]
    counters["dedup.pieces"] += len(pieces)
    return vals


def ids_of_documents(model, items_per_doc: list, segment=None) -> list:
    """Ids of every document's items: per document, a list of tuples. All misses of the batch
    are merged in one call to the merge stage (``segment``: as ``ids_of_pieces``)."""
    cache = model.piece_cache
    get = cache.get
    vals_per_doc = [list(map(get, items)) for items in items_per_doc]
    missing_docs = [d for d, vals in enumerate(vals_per_doc) if None in vals]
    if missing_docs:
        misses = set(chain.from_iterable(items_per_doc[d] for d in missing_docs))
        misses = [p for p in misses.difference(cache) if p.__class__ is str]
        got = dict(zip(misses, (segment or model.segmenter.segment)(misses)))
        cache.store(misses, [got[p] for p in misses])
        for d in missing_docs:
            items = items_per_doc[d]
            vals = list(map(get, items))  # a second probe, now that the cache is filled
            if None in vals:  # tokens, long pieces, or a cache reset mid-batch
                vals = [v if v is not None else _resolve(model, got, p, segment)
                        for p, v in zip(items, vals)]
            vals_per_doc[d] = vals
    counters["dedup.documents"] += len(items_per_doc)
    return vals_per_doc


def _resolve(model, got: dict, item, segment=None):
    """The value of an item whose first probe missed: a token's ``(id,)`` as is, a piece from
    this batch's merges, or (if another thread cached it meanwhile, or a cache reset dropped
    it) from the cache or a fresh merge."""
    if item.__class__ is not str:
        return item
    v = got.get(item) or model.piece_cache.get(item)
    return v if v is not None else (segment or model.segmenter.segment)([item])[0]


def flat_ids(vals: list) -> list:
    """One document's ids as a flat list."""
    return list(chain.from_iterable(vals))
