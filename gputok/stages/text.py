"""One text through the host stages: the single-text path of every backend (``Backend.encode_text``)
where the text is short, the stages of the numpy backend without the batch bookkeeping (a short
text costs a regex call and a few dict probes). A device backend may hand in its merge stage
for the long pieces and many misses, and its pre-tokenization of a text of a few pieces.
"""

from __future__ import annotations

import numpy as np

from . import counters, dedup
from .pack import fix_surrogates, utf8_data
from ..specials import split_text


def encode_text(model, text: str, allowed: frozenset, device_merge=None,
                segment=None) -> list[int]:
    """One text (already checked for disallowed tokens) to ids. ``device_merge``: a device's
    merge stage for the long pieces and many misses; ``segment``: the segmenter's rule run
    elsewhere for every miss (``dedup.ids_of_pieces``)."""
    text = fix_surrogates(text)
    active = model.active_tokens(allowed)
    seg = model.segmenter
    if not active:
        ids = dedup.flat_ids(dedup.ids_of_pieces(model, model.pieces(text), device_merge,
                                                 segment))
        return seg.finish_list(ids)
    items: list = []
    for k, (part, is_tok) in enumerate(split_text(text, active, model.lstrip, model.rstrip)):
        if is_tok:
            items.append((model.token_id(part),))
        else:  # (``first``: the segment starts the document)
            items.extend(model.pieces(part, k == 0))
    return seg.finish_list(dedup.flat_ids(dedup.ids_of_pieces(model, items, device_merge,
                                                              segment)))


def encode_few(model, text: str, allowed: frozenset, device_merge, limit: int,
               device_few=None, device_spans=None, layout=None) -> "list[int] | None":
    """``encode_text`` for a text the pre-tokenizer cuts into at most ``limit`` pieces (a run
    of one character class: ``"a" * n``, emoji, whitespace, with a few pieces around it), its
    long pieces merged on the device; None for any other text, found after ``limit + 1``
    pieces, or when the model is not byte-level BPE, has a normaliser or active special tokens.
    ``device_few(data, limit)``: a device's cut and merge of the whole text (its UTF-8), taken
    for a text that is not all ASCII once its head passes the probe (the host scanner's cut of
    a 10 MB emoji run made ~46 MB of numpy temporaries; the regex cuts an ASCII run in place).
    ``device_spans(data, starts)``: the device's merge of the pieces the host cut, given as
    their starts in the text's UTF-8 (no piece is copied out of it; a long ASCII text's UTF-8
    is its own characters, ``pack.utf8_data`` with the native str packer ``layout``);
    ``device_merge(pieces)`` where it declines."""
    if not model.segmenter.byte_level or model.normalizer or model.active_tokens(allowed):
        return None
    try:  # (the text's UTF-8, once: the pieces are spans of it)
        data = utf8_data(text, layout)
    except UnicodeEncodeError:
        text = fix_surrogates(text)
        data = text.encode("utf-8")
    pt = model.pretokenizer
    if device_few is not None and len(data) != len(text) and pt.few_head(text, limit):
        got = device_few(data, limit)
        if got is not None:
            return got
    pieces = pt.split_few(text, limit)
    if pieces is None:
        return None
    if device_spans is not None:  # every piece in one call, the ids as one list
        starts = _utf8_starts(pieces, text, data)
        got = None if starts is None else device_spans(data, starts)
        if got is not None:
            counters["merge.device_pieces"] += len(pieces)
            return got
    return dedup.flat_ids(dedup.ids_of_pieces(model, pieces, device_merge))


def _utf8_starts(pieces: list, text: str, data) -> "np.ndarray | None":
    """Where each piece of ``text`` starts in its UTF-8 ``data``, and the end (int64, one more
    than the pieces); None where the pieces do not cover the text. A piece's byte length is its
    character count in an ASCII text, else its own UTF-8 length, the longest piece's from the
    others' (a 10 MB run is not encoded again)."""
    k = len(pieces)
    lens = np.fromiter(map(len, pieces), np.int64, k)
    if int(lens.sum()) != len(text):
        return None
    if len(data) != len(text):
        longest = int(lens.argmax())
        lens[:] = [len(p.encode("utf-8")) if i != longest else 0 for i, p in enumerate(pieces)]
        lens[longest] = len(data) - int(lens.sum())
    starts = np.zeros(k + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    return starts
