"""Split: cut documents at the special and added tokens that are active, before pre-tokenization.

Active tokens are the allowed specials plus every non-special HF added token (vocabulary: always
cut out). The regex never looks across a token. Two forms of the same stage:

* ``split_documents`` (str documents, the CPU path): the segments of every document as one list
  of str, plus a layout per document mixing segment indices and ``(id,)`` token items;
* ``token_spans`` (packed UTF-8, the device path): byte spans of the tokens and their ids; the
  segments are the rest of each document. A span with id ``NO_IDS`` is whitespace swallowed by
  an HF ``lstrip``/``rstrip`` token: it emits nothing.

The disallowed check runs first, on the text as given, and names the document.
"""

from __future__ import annotations

import re

import numpy as np

from . import counters
from ..specials import WHITE_SPACE, check_disallowed, disallowed_error, split_text, trie_pattern

#: the id of a span that emits no ids (the kernels' ENC_GAP)
NO_IDS = 0xFFFFFFFE


def split_documents(model, texts, allowed: frozenset, disallowed: frozenset):
    """``(segments, layout)``: layout is ``None`` when no token is active (segments are the
    documents), else per document a list of segment indices (int) and ``(id,)`` items."""
    active = model.active_tokens(allowed)
    if not active:
        if not disallowed:
            return texts if isinstance(texts, list) else list(texts), None
        segments = []
        for d, text in enumerate(texts):
            check_disallowed(text, disallowed, d)
            segments.append(text)
        return segments, None
    token_id = model.token_id
    lstrip, rstrip = model.lstrip, model.rstrip
    segments: list = []
    layout: list = []
    for d, text in enumerate(texts):
        if disallowed:
            check_disallowed(text, disallowed, d)
        parts: list = []
        for seg, is_tok in split_text(text, active, lstrip, rstrip):
            if is_tok:
                parts.append((token_id(seg),))
            else:
                parts.append(len(segments))
                segments.append(seg)
        layout.append(parts)
    counters["split.documents"] += len(layout)
    return segments, layout


def join_layout(layout, seg_pieces: list) -> list:
    """Per document: its items (piece strings and ``(id,)`` tokens) in order."""
    if layout is None:
        return seg_pieces
    return [[x for part in parts for x in
             (seg_pieces[part] if part.__class__ is int else (part,))] for parts in layout]


def first_flags(layout, n_segments: int) -> list:
    """Per segment: does it start its document (HF's Metaspace ``prepend_scheme="first"``
    prepends to that segment only)."""
    if layout is None:
        return [True] * n_segments
    first = [False] * n_segments
    for parts in layout:
        if parts and parts[0].__class__ is int:
            first[parts[0]] = True
    return first


# ---- buffer form ---------------------------------------------------------------------------------

_bytes_regexes: dict = {}


def _bytes_regex(tokens: frozenset) -> "re.Pattern[bytes]":
    pat = _bytes_regexes.get(tokens)
    if pat is None:
        # the leftmost-longest match, as specials.token_regex (a trie of the UTF-8 tokens)
        pat = re.compile(trie_pattern([t.encode("utf-8") for t in tokens]))
        if len(_bytes_regexes) > 64:
            _bytes_regexes.clear()
        _bytes_regexes[tokens] = pat
    return pat


def find_tokens(buf: bytes, doc_off: np.ndarray, tokens: frozenset
                ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of every leftmost-first occurrence of ``tokens`` inside the documents,
    as ``split_documents`` finds them document by document (a match never spans two)."""
    empty = np.zeros(0, np.int64)
    if not tokens or not len(buf):
        return empty, empty
    pat = _bytes_regex(frozenset(tokens))
    spans = [m.span() for m in pat.finditer(buf)]
    if not spans:
        return empty, empty
    sp = np.array(spans, np.int64).reshape(-1, 2)
    doc_off = np.asarray(doc_off, np.int64)
    d = np.searchsorted(doc_off, sp[:, 0], "right") - 1
    cross = sp[:, 1] > doc_off[d + 1]
    if cross.any():
        # a match over a document boundary may hide matches of either document: redo them
        bad = set()
        for k in np.flatnonzero(cross):
            last = int(np.searchsorted(doc_off, sp[k, 1], "left")) - 1
            bad.update(range(int(d[k]), last + 1))
        keep = ~np.isin(d, list(bad))
        extra = [m.span() for b in sorted(bad)
                 for m in pat.finditer(buf, int(doc_off[b]), int(doc_off[b + 1]))]
        sp = np.concatenate([sp[keep], np.array(extra, np.int64).reshape(-1, 2)])
        sp = sp[np.argsort(sp[:, 0], kind="stable")]
    return sp[:, 0].copy(), sp[:, 1].copy()


def check_buffer(buf, doc_off: np.ndarray, disallowed: frozenset, first_doc: int = 0,
                 first_token=None) -> None:
    """``split_documents``'s disallowed check on packed documents (same error, same document;
    ``first_doc``: the batch index of the first of them, for a chunk's part of a batch). ``buf``
    is bytes-like (bytes, or a chunk's uint8 array). ``first_token``: a backend's native
    prefilter (``HostTools.first_token``); where it finds none, the regex is not run (for
    ``gputok encode`` of JSONL on a GPU the regex was ~0.4 s of host CPU a GB)."""
    if first_token is not None and disallowed and first_token(buf, doc_off, disallowed) < 0:
        return
    starts, ends = find_tokens(buf, doc_off, disallowed)
    if len(starts):
        d = int(np.searchsorted(doc_off, starts[0], "right") - 1)
        token = bytes(memoryview(buf)[int(starts[0]):int(ends[0])]).decode("utf-8")
        raise disallowed_error(token, first_doc + d)


def token_spans(model, buf: bytes, doc_off: np.ndarray, allowed: frozenset
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, ids) of the active tokens in packed documents, sorted; with HF
    ``lstrip``/``rstrip`` tokens, the whitespace they swallow as ``NO_IDS`` spans."""
    active = model.active_tokens(allowed)
    starts, ends = find_tokens(buf, doc_off, active)
    ids = np.array([model.token_id(buf[a:b].decode("utf-8"))
                    for a, b in zip(starts.tolist(), ends.tolist())], np.uint32)
    if not len(starts) or not (model.lstrip or model.rstrip):
        return starts, ends, ids
    gaps = _stripped_whitespace(buf, np.asarray(doc_off, np.int64), starts, ends,
                                model.lstrip, model.rstrip)
    if not gaps:
        return starts, ends, ids
    g = np.array(gaps, np.int64).reshape(-1, 2)
    starts = np.concatenate([starts, g[:, 0]])
    order = np.argsort(starts, kind="stable")
    ends = np.concatenate([ends, g[:, 1]])[order]
    ids = np.concatenate([ids, np.full(len(g), NO_IDS, np.uint32)])[order]
    return starts[order], ends, ids


_WS_BYTES = {c.encode("utf-8") for c in WHITE_SPACE}


def _ws_before(buf: bytes, lo: int, hi: int) -> int:
    """Start of the whitespace run that ends at ``hi`` (not before ``lo``)."""
    i = hi
    while i > lo:
        for w in _WS_BYTES:
            if i - len(w) >= lo and buf[i - len(w):i] == w:
                i -= len(w)
                break
        else:
            return i
    return i


def _ws_after(buf: bytes, lo: int, hi: int) -> int:
    """End of the whitespace run that starts at ``lo`` (not after ``hi``)."""
    i = lo
    while i < hi:
        for w in _WS_BYTES:
            if buf.startswith(w, i, hi):
                i += len(w)
                break
        else:
            return i
    return i


def _stripped_whitespace(buf, doc_off, starts, ends, lstrip, rstrip) -> list:
    """Byte spans of whitespace next to lstrip/rstrip tokens, inside their document and
    between the neighbouring tokens (``specials.split_text``'s rule on bytes)."""
    lstrip_b = {t.encode("utf-8") for t in lstrip}
    rstrip_b = {t.encode("utf-8") for t in rstrip}
    d = np.searchsorted(doc_off, starts, "right") - 1
    out = []
    n = len(starts)
    for k in range(n):
        a, b = int(starts[k]), int(ends[k])
        tok = buf[a:b]
        dk = int(d[k])
        if tok in lstrip_b:
            lo = int(doc_off[dk])
            if k and int(d[k - 1]) == dk:
                lo = max(lo, int(ends[k - 1]))
            w = _ws_before(buf, lo, a)
            if w < a:
                out.append((w, a))
        if tok in rstrip_b:
            hi = int(doc_off[dk + 1])
            if k + 1 < n and int(d[k + 1]) == dk:
                hi = min(hi, int(starts[k + 1]))
            w = _ws_after(buf, b, hi)
            if w > b:
                out.append((b, w))
    # a run between an rstrip and an lstrip token is swallowed from both sides: merge overlaps
    # (not mere neighbours: those may lie in two documents)
    out.sort()
    merged: list = []
    for lo, hi in out:
        if merged and lo < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
