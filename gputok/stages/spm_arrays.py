"""What each kernel of ``kernels/encode_spm.cu`` must compute, in plain numpy and Python: one
reference function per kernel, named after it (the tests run every kernel on the emulator, the
Metal shaders on the strict shim and the native CPU device, and compare with these), and
``spm_chunk`` strings them into one chunk's ids.

Arrays are a chunk's: ``buf`` (uint8, n bytes: each segment's raw UTF-8, or its normalised
form where a normaliser rewrote the chunk first: ``encode_spm_norm_len`` / ``_write``), ``mark``
(uint8, n + 2: the host's bits, ``spm_plan``), entries (``pstart``, ``spec``: as for byte-level pieces, the sentinel last). The rules are
``kernels/common/spm_rules.h``'s (THE SPM CUT, THE SPM SYMBOLS, THE COMPARATOR, THE SPM EXPAND,
THE UNK RUN); the families' host stages (``spm.py``, ``hf_spm.py``) compute the same ids another
way, and the tests check that too.
"""

from __future__ import annotations

import numpy as np

from .marks import GAP, NORMAL, OUTSIDE, SEG_START, SPECIAL_START
from .merge import LONG_PIECE, merge_long_ids, merge_small_ids
from .spm_plan import normalize_piece
from .spm_tables import (BYTE_FALLBACK, CP_MASK, CUT_UNKNOWN, DUMMY, ESCAPE, FUSE_UNK, HF,
                         NO_ID, SPACE_CP, SPLIT, UNKNOWN, SpmTables)


def _chars(buf: np.ndarray, t: SpmTables) -> tuple[np.ndarray, np.ndarray]:
    """(first byte of each character, its normalised code point: " " as "▁" when escaping)."""
    first = np.flatnonzero((buf & 0xC0) != 0x80)
    cps = np.frombuffer(buf.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32).copy()
    if t.flags & ESCAPE:
        cps[cps == 0x20] = SPACE_CP
    return first, cps


def encode_spm_spans(buf: np.ndarray, mark: np.ndarray, t: SpmTables) -> np.ndarray:
    """``ent`` (uint32, n + 2): 1 where an entry starts. A token span's first byte; a character
    that starts a segment (``SEG_START``), the chunk, or follows a token span; a character after
    which THE SPM CUT falls: the pair of normalised code points is not an inner pair (the cut
    set), or, with ``SPLIT``, the character is "▁"; next to a character without a symbol there
    is no cut unless ``CUT_UNKNOWN``. The sentinel at n."""
    n = len(buf)
    ent = np.zeros(n + 2, np.uint32)
    ent[n] = 1
    if not n:
        return ent
    first, cps = _chars(buf, t)
    m = mark[first]
    prev_out = np.zeros(len(first), bool)
    prev_out[1:] = (mark[first[1:] - 1] & OUTSIDE) != 0
    a, b = cps[:-1], cps[1:]
    key = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    cut = np.ones(len(first), bool)
    inner = np.isin(key, t.cut_keys)
    if not t.flags & CUT_UNKNOWN:
        unknown = t.sym[cps] >= UNKNOWN
        inner |= unknown[:-1] | unknown[1:]
    cut[1:] = ~inner
    if t.flags & SPLIT:
        cut[1:] |= b == SPACE_CP
    starts = ((m & SEG_START) != 0) | prev_out | cut
    starts[0] = True
    starts &= (m & OUTSIDE) == 0
    ent[first[starts]] = 1
    sp = np.flatnonzero(mark[:n] & SPECIAL_START)
    ent[sp] = 1
    return ent


def spm_symbols(buf: np.ndarray, s: int, end: int, dummy: bool, t: SpmTables) -> list:
    """THE SPM SYMBOLS of the span ``buf[s:end]``, a "▁" first when ``dummy``: one symbol per
    character (SentencePiece), or HF's ``BPE::merge_word`` before merging (``HF``): the
    character's id; else its byte tokens when byte fallback has them all; else nothing without
    an unk token; else an unk, fused with a pending one (``FUSE_UNK``) and written when the
    next character of the vocabulary (or the end) comes."""
    text = buf[s:end].tobytes().decode("utf-8")
    cps = [SPACE_CP if (c == " " and t.flags & ESCAPE) else ord(c) for c in text]
    if dummy:
        cps.insert(0, SPACE_CP if t.flags & ESCAPE else 0x20)
    if not t.flags & HF:
        return [int(t.sym[c]) for c in cps]
    out: list = []
    pending = False
    for c in cps:
        sy = int(t.sym[c])
        if sy < UNKNOWN:
            if pending:
                out.append(t.unk)
                pending = False
            out.append(sy)
            continue
        if t.flags & BYTE_FALLBACK:
            toks = [int(t.byte_ids[b]) for b in chr(c).encode("utf-8")]
            if NO_ID not in toks:
                out.extend(toks)
                continue
        if t.unk == NO_ID:
            continue
        if pending and not t.flags & FUSE_UNK:
            out.append(t.unk)
        pending = True
    if pending:
        out.append(t.unk)
    return out


def spm_expand(syms: list, t: SpmTables) -> list:
    """THE SPM EXPAND of final symbols (SentencePiece; HF's final symbols are its ids): a symbol
    some piece emits is that id (``fin``); any other is one character, its UTF-8 bytes as byte
    pieces (byte fallback) or the unk id, a run of them one."""
    if t.flags & HF:
        return list(syms)
    out: list = []
    prev_unk = False
    for f in syms:
        g = int(t.fin[f]) if f < UNKNOWN else f
        if g < UNKNOWN:
            out.append(g)
            prev_unk = False
        elif t.flags & BYTE_FALLBACK:
            out.extend(int(t.byte_ids[b]) for b in chr(g & CP_MASK).encode("utf-8"))
        else:
            if not prev_unk:
                out.append(t.unk)
            prev_unk = True
    return out


def encode_spm_merge(buf: np.ndarray, pstart: np.ndarray, spec: np.ndarray, mark: np.ndarray,
                     t: SpmTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scratch, count, src): entry e's ids are ``scratch[src[e]:src[e] + count[e]]``, with
    ``src[e] = pstart[e] + e`` (a span of L bytes has at most L + 1 ids). A token span: its id
    (none for ``GAP``), after the dummy's "▁" (``space_id``) when its mark says ``DUMMY``; a span:
    THE SPM SYMBOLS, merged by THE COMPARATOR (``merge_small_ids`` / ``merge_long_ids``: the
    lowest priority first, leftmost on ties), then THE SPM EXPAND."""
    cap = len(pstart)
    n = len(buf)
    scratch = np.zeros(n + cap, np.uint32)
    count = np.zeros(cap + 1, np.uint32)
    src = (pstart.astype(np.int64) + np.arange(cap)).astype(np.uint32)
    for e in range(cap):
        s, sp = int(pstart[e]), int(spec[e])
        dummy = sp != GAP and bool(mark[s] & DUMMY)
        if sp != NORMAL:
            ids = ([t.space_id] if dummy else []) + ([] if sp == GAP else [sp])
        else:
            syms = spm_symbols(buf, s, int(pstart[e + 1]), dummy, t)
            merged = (merge_small_ids(syms, t.pairs) if len(syms) < LONG_PIECE
                      else merge_long_ids(syms, t.pairs))
            ids = spm_expand(merged, t)
        scratch[src[e]:src[e] + len(ids)] = ids
        count[e] = len(ids)
    return scratch, count, src


def encode_spm_fuse(pstart: np.ndarray, spec: np.ndarray, mark: np.ndarray,
                    scratch: np.ndarray, src: np.ndarray, count: np.ndarray, unk: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """THE UNK RUN: (src, count) after entry e drops its first id where that id is the unk, the
    entry before is a span of the same segment (e does not start one) and its last id (as the
    merge left it) is the unk too."""
    cap = len(pstart)
    c = count[:cap].astype(np.int64)
    first = scratch[np.minimum(src, len(scratch) - 1)]
    last = scratch[np.clip(src.astype(np.int64) + c - 1, 0, len(scratch) - 1)]
    drop = np.zeros(cap, bool)
    drop[1:] = ((spec[1:] == NORMAL) & (spec[:-1] == NORMAL)
                & ((mark[pstart[1:]] & SEG_START) == 0) & (c[1:] > 0) & (c[:-1] > 0)
                & (first[1:] == unk) & (last[:-1] == unk))
    out_count = count.copy()
    out_count[:cap] -= drop
    return src + drop.astype(np.uint32), out_count


def encode_spm_norm_len(buf: np.ndarray, p_src: np.ndarray, p_len: np.ndarray,
                        p_kind: np.ndarray, model) -> np.ndarray:
    """THE SPM NORMALISER's output length of each piece (uint32): a segment normalised as the
    model's host normaliser does it (``spm_plan.normalize_piece``), a token span as it is."""
    out = np.zeros(len(p_src), np.uint32)
    for k, (a, n, kind) in enumerate(zip(p_src.tolist(), p_len.tolist(), p_kind.tolist())):
        out[k] = n if kind else len(normalize_piece(model, buf[a:a + n].tobytes(), True))
    return out


def encode_spm_norm_write(buf: np.ndarray, p_src: np.ndarray, p_len: np.ndarray,
                          p_kind: np.ndarray, model) -> np.ndarray:
    """The rewritten chunk (uint8): every piece's output in order (the lengths' scan places
    them)."""
    parts = [buf[a:a + n].tobytes() if kind else
             normalize_piece(model, buf[a:a + n].tobytes(), True)
             for a, n, kind in zip(p_src.tolist(), p_len.tolist(), p_kind.tolist())]
    return np.frombuffer(b"".join(parts), np.uint8)


def entries_of(ent: np.ndarray, n: int, sp_pos: np.ndarray, sp_id: np.ndarray,
               doc_off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What encode_scan.cu + encode_entries_* make of the flags: (pstart, spec, doc_entry)."""
    pstart = np.flatnonzero(ent[:n + 1]).astype(np.uint32)
    spec = np.full(len(pstart), NORMAL, np.uint32)
    spec[-1] = GAP
    spec[np.searchsorted(pstart, sp_pos)] = sp_id
    doc_entry = np.searchsorted(pstart, np.asarray(doc_off, np.int64)).astype(np.uint32)
    return pstart, spec, doc_entry


def spm_chunk(buf: np.ndarray, doc_off: np.ndarray, mark: np.ndarray, sp_pos: np.ndarray,
              sp_id: np.ndarray, t: SpmTables) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's ids through the references in kernel order: (ids, document offsets)."""
    n = len(buf)
    ent = encode_spm_spans(buf, mark, t)
    pstart, spec, doc_entry = entries_of(ent, n, sp_pos, sp_id, doc_off)
    scratch, count, src = encode_spm_merge(buf, pstart, spec, mark, t)
    if t.fuse:
        src, count = encode_spm_fuse(pstart, spec, mark, scratch, src, count, t.unk)
    c = count[:len(pstart)].astype(np.int64)
    out_off = np.zeros(len(pstart) + 1, np.int64)
    np.cumsum(c, out=out_off[1:])
    ids = np.concatenate([scratch[a:a + k] for a, k in zip(src.tolist(), c.tolist())]
                         + [np.zeros(0, np.uint32)])
    return ids.astype(np.uint32), out_off[doc_entry]
