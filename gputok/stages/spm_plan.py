"""SentencePiece BPE on a device: what the host does to a chunk before the kernels.

Given a chunk's packed documents and its token spans (allowed specials and HF added tokens,
``split.token_spans``), the host:

1. has each segment normalised where the kernels do not read the normaliser as they go: the
   device rewrites the chunk (``SpmTables.normalizer == "rewrite"``: a charsmap, collapsed
   whitespace, whitespace as suffix: THE SPM NORMALISER, its pieces from ``pieces``, their new
   places from ``remap``; user-defined pieces, which it copies as they are, by the native
   CPU's one call), or the host does (``"host"``: HF normalisers other than Prepend/Replace
   of "▁", and user-defined pieces on a device whose kernels take no trie:
   ``normalize_segments``);
2. finds the user-defined pieces (SentencePiece: matched longest first, left to right, inside
   each normalised segment; never merged), which become one entry each like a token span but
   do not end their sentence (``user_defined_spans``, or the device's ``find_ud``);
3. writes the marks (``marks``): ``SEG_START`` where a segment starts, ``DUMMY`` where it takes
   the dummy "▁", ``OUTSIDE`` on every byte of a span and ``SPECIAL_START`` on its first.

The result is a ``SpmChunk``: the kernels' inputs (``kernels/encode_spm.cu``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import unique_sorted
from .marks import OUTSIDE, SEG_START, SPECIAL_START
from .split import _bytes_regex, find_tokens
from .spm_tables import DUMMY, SpmTables

_BLANK3 = np.frombuffer("\u2581".encode(), np.uint8)


@dataclass
class SpmChunk:
    """One chunk as the SentencePiece kernels take it (positions are the chunk's bytes)."""

    buf: np.ndarray  # uint8, n
    doc_off: np.ndarray  # int64, documents + 1
    mpos: np.ndarray  # uint32: marked bytes
    mbits: np.ndarray  # uint8: their bits
    sp_pos: np.ndarray  # uint32: first byte of each span that is one entry (tokens, pieces)
    sp_id: np.ndarray  # uint32: its id (GAP: none)

    @property
    def n(self) -> int:
        return len(self.buf)  # (a device array of a rewritten chunk: its length too)

    @property
    def n_docs(self) -> int:
        return len(self.doc_off) - 1


def _segments(doc_off: np.ndarray, ss: np.ndarray, se: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the non-empty segments: the stretches of each document between spans."""
    b = unique_sorted(np.concatenate([doc_off, ss, se]).astype(np.int64))
    lo, hi = b[:-1], b[1:]
    keep = ~np.isin(lo, ss) & (hi > lo)
    return lo[keep], hi[keep]


def pieces(buf_len: int, doc_off: np.ndarray, ss: np.ndarray, se: np.ndarray) -> tuple:
    """The chunk as pieces in order, for a normaliser that rewrites it: (bounds, p_src, p_len,
    p_kind): piece k is ``[bounds[k], bounds[k + 1])``, a segment (kind 0) or a token span
    (kind 1); ``bounds`` ends with the chunk's end."""
    bounds = unique_sorted(np.concatenate([doc_off, ss, se, [0, buf_len]]).astype(np.int64))
    p_src = bounds[:-1]
    kind = np.isin(p_src, ss).astype(np.uint8)
    return bounds, p_src.astype(np.uint32), np.diff(bounds).astype(np.uint32), kind


def remap(bounds: np.ndarray, out_len: np.ndarray, doc_off, ss, se) -> tuple:
    """(doc_off, ss, se, total) moved to the rewritten chunk whose pieces (``pieces``) are
    ``out_len`` bytes long each."""
    new_pos = np.zeros(len(bounds), np.int64)
    np.cumsum(out_len, out=new_pos[1:])
    moved = new_pos[np.searchsorted(bounds, np.concatenate([doc_off, ss, se]))]
    k, m = len(doc_off), len(ss)
    return moved[:k], moved[k:k + m], moved[k + m:], int(new_pos[-1])


def normalize_piece(model, raw: bytes, first: bool) -> bytes:
    """One segment normalised by the model's host normaliser, then what its pre-tokenizer writes
    into a segment (Metaspace's replacement and prefix: ``segment_text``; ``first``: the segment
    starts its document; its split is THE SPM CUT's)."""
    text = model.normalizer.normalize(raw.decode("utf-8"))
    write = getattr(model.pretokenizer, "segment_text", None)
    return (write(text, first) if write is not None else text).encode("utf-8")


def normalize_segments(model, buf: bytes, doc_off: np.ndarray, ss: np.ndarray,
                       se: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """Every segment normalised on the host (``normalize_piece``); returns the rebuilt (buf,
    doc_off, span starts, span ends)."""
    doc_off = np.asarray(doc_off, np.int64)
    bounds, p_src, p_len, kind = pieces(len(buf), doc_off, ss, se)
    starts = set(doc_off.tolist())
    parts = [bytes(buf[a:a + n]) if k else normalize_piece(model, buf[a:a + n], a in starts)
             for a, n, k in zip(p_src.tolist(), p_len.tolist(), kind.tolist())]
    d, s0, s1, _ = remap(bounds, np.fromiter(map(len, parts), np.int64, len(parts)), doc_off,
                         ss, se)
    return b"".join(parts), d, s0, s1


def user_defined_spans(t: SpmTables, buf: bytes, doc_off: np.ndarray, ss: np.ndarray,
                       se: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, ids) of the user-defined pieces inside the segments: the leftmost-longest
    matches of each segment, as ``SpmNormalizer.ud_regex`` finds them in a sentence."""
    empty = np.zeros(0, np.int64)
    if not t.ud_set:
        return empty, empty, np.zeros(0, np.uint32)
    if not isinstance(buf, (bytes, bytearray)):
        buf = bytes(memoryview(buf))  # (a chunk the native device rewrote)
    if len(doc_off) == 2 and not len(ss):  # one document, one segment (a single text)
        pat = _bytes_regex(t.ud_set)
        sp = np.array([m.span() for m in pat.finditer(buf)], np.int64).reshape(-1, 2)
        starts, ends = sp[:, 0], sp[:, 1]
    else:
        bounds = unique_sorted(np.concatenate([doc_off, ss, se]).astype(np.int64))
        starts, ends = find_tokens(buf, bounds, t.ud_set)  # (never across a bound)
        if len(ss) and len(starts):  # none inside a token span
            k = np.searchsorted(ss, starts, "right") - 1
            inside = (k >= 0) & (starts < np.asarray(se)[np.maximum(k, 0)])
            starts, ends = starts[~inside], ends[~inside]
    ud = t.user_defined
    ids = np.array([ud[buf[a:b].decode("utf-8")] for a, b in zip(starts.tolist(), ends.tolist())],
                   np.uint32)
    return starts, ends, ids


def _dummies(t: SpmTables, buf: np.ndarray, lo: np.ndarray, doc_off: np.ndarray) -> np.ndarray:
    """Which of the segments starting at ``lo`` take the dummy "▁" (the model's plan)."""
    dummy = np.zeros(len(lo), bool)
    if t.normalizer == "device" and t.dummy != "none":
        dummy[:] = True
        if t.dummy == "first":
            dummy &= np.isin(lo, doc_off)
        if t.dummy_unless_blank and len(lo):
            n = len(buf)
            blank = buf[lo] == 0x20
            three = lo + 3 <= n
            for k in range(3):
                three[three] &= buf[lo[three] + k] == _BLANK3[k]
            dummy &= ~(blank | three)
    return dummy


def marks(t: SpmTables, buf: np.ndarray, doc_off: np.ndarray, ss: np.ndarray, se: np.ndarray,
          us: np.ndarray, ue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The marks (unique positions uint32, bits uint8): segments between the token spans
    ``ss/se``, the dummy where the model's plan puts one, every span (tokens and the
    user-defined pieces ``us/ue``) as ``OUTSIDE`` bytes with ``SPECIAL_START`` first."""
    doc_off = np.asarray(doc_off, np.int64)
    if not len(ss):  # segments are the non-empty documents: no sort, no merge of bits
        lo = doc_off[:-1][doc_off[1:] > doc_off[:-1]]
    else:
        lo, _ = _segments(doc_off, ss, se)
    bits = np.where(_dummies(t, buf, lo, doc_off), SEG_START | DUMMY, SEG_START).astype(np.uint8)
    if not len(ss) and not len(us):
        return lo.astype(np.uint32), bits
    s = np.concatenate([ss, us]).astype(np.int64)
    e = np.concatenate([se, ue]).astype(np.int64)
    ln = e - s
    inside = np.repeat(s - np.cumsum(ln) + ln, ln) + np.arange(int(ln.sum()))
    pos = np.concatenate([lo, inside, s])
    allbits = np.concatenate([bits, np.full(len(inside), OUTSIDE, np.uint8),
                              np.full(len(s), SPECIAL_START, np.uint8)])
    upos, inv = np.unique(pos, return_inverse=True)
    ubits = np.zeros(len(upos), np.uint8)
    np.bitwise_or.at(ubits, inv.reshape(-1), allbits)
    return upos.astype(np.uint32), ubits


def plan_chunk(model, t: SpmTables, buf: bytes, doc_off: np.ndarray, spans: tuple,
               rewrite=None, find_ud=None) -> SpmChunk:
    """A chunk of packed documents (``buf``, ``doc_off`` from 0) with its token spans
    ``(starts, ends, ids)`` (``split.token_spans``) as the kernels take it. A model whose
    normaliser rewrites the chunk (``SpmTables.normalizer`` "rewrite" or "host") has it
    rewritten first: by ``rewrite(buf, doc_off, ss, se)`` (the device's kernels: the new buffer,
    wherever it lives, and the moved positions), else on the host. The user-defined pieces are
    found by ``find_ud(buf, seg_starts, seg_ends)`` where given (the native CPU's), else by
    ``user_defined_spans``."""
    ss, se, sid = (np.asarray(x) for x in spans)
    doc_off = np.asarray(doc_off, np.int64)
    if t.normalizer == "rewrite" and rewrite is not None:
        buf, doc_off, ss, se = rewrite(buf, doc_off, ss, se)
    elif t.normalizer != "device":
        buf, doc_off, ss, se = normalize_segments(model, buf, doc_off, ss, se)
    if find_ud is not None and t.ud_set:
        us, ue, uid = find_ud(buf, *_segments(doc_off, np.asarray(ss, np.int64),
                                              np.asarray(se, np.int64)))
    else:
        us, ue, uid = user_defined_spans(t, buf, doc_off, ss, se)
    data = np.frombuffer(buf, np.uint8) if isinstance(buf, (bytes, bytearray)) else buf
    mpos, mbits = marks(t, data, doc_off, ss, se, us, ue)
    sp_pos = np.concatenate([ss, us]).astype(np.int64)
    order = np.argsort(sp_pos, kind="stable")
    sp_id = np.concatenate([np.asarray(sid, np.uint32), uid])[order]
    return SpmChunk(data, doc_off, mpos, mbits, sp_pos[order].astype(np.uint32), sp_id)


def mark_array(c: SpmChunk) -> np.ndarray:
    """The per-byte marks (uint8, n + 2) that encode_pretok_marks scatters."""
    mark = np.zeros(c.n + 2, np.uint8)
    mark[c.mpos] = c.mbits
    return mark
