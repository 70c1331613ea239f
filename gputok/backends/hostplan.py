"""Host planning for a device chunk: token-span marks, and pieces cut on the host.

When pre-tokenization runs on the device, the host only marks where segments start and end
around token spans (``segment_marks``), in the chunk's byte coordinates. When it cannot (a
pattern without kernels, or a multi-step HF pre-tokenizer), the host cuts the pieces — with the
vectorised scanner (``entries_from_scanner``) or the pre-tokenizer's ``split`` per segment
(``entries_from_split``) — and the device merges and emits. A model's normaliser runs here too:
a chunk whose text it changes is rebuilt (``normalize_chunk``) before pieces are cut; a single
normal form is checked on the device instead (``encode_nfc.cu``), and only the spans around the
characters it flags are normalised here (``splice_normalized``).

An *entry* is a piece, a token span (``spec`` = its id, or ``NO_IDS``), or the sentinel at the
end of the chunk (``spec`` = ``NO_IDS``); ``pstart[e]`` is its first byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import unique_sorted
from ..stages.normalize import normalize_text
from ..stages.marks import GAP, NORMAL, OUTSIDE, SEG_END, SEG_START, SPECIAL_START  # noqa: F401


def normalize_chunk(steps: tuple, chunk: bytes, off: np.ndarray, ss: np.ndarray, se: np.ndarray):
    """Normalise every segment (the text between token spans) of a chunk; returns the chunk,
    document offsets and span positions, rebuilt only where the normaliser changed something."""
    bounds = unique_sorted(np.concatenate([off, ss, se])).tolist()
    is_span = set(ss.tolist())
    pieces: list = []
    changed = False
    for a, b in zip(bounds, bounds[1:]):
        raw = chunk[a:b]
        if a not in is_span:
            text = raw.decode("utf-8")
            norm = normalize_text(steps, text)
            if norm != text:
                raw, changed = norm.encode("utf-8"), True
        pieces.append(raw)
    if not changed:
        return chunk, off, ss, se
    new_pos = np.zeros(len(bounds), np.int64)
    np.cumsum([len(p) for p in pieces], out=new_pos[1:])
    remap = dict(zip(bounds, new_pos.tolist()))
    f = np.vectorize(remap.__getitem__, otypes=[np.int64])
    return (b"".join(pieces), f(off) if len(off) else off, f(ss) if len(ss) else ss,
            f(se) if len(se) else se)


def segment_marks(doc_off: np.ndarray, sp_start: np.ndarray, sp_end: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The per-byte marks of a chunk as unique (positions uint32, bits uint8).

    Segments are the non-empty stretches of a document between token spans: SEG_START at
    their first byte, SEG_END just past their last; the bytes of every span are OUTSIDE and
    its first is SPECIAL_START (a span becomes one entry: a token's id, or no ids).
    """
    doc_off = np.asarray(doc_off, np.int64)
    if len(doc_off) == 2 and not len(sp_start):  # one document, no spans (a single encode)
        n = int(doc_off[1] - doc_off[0])
        if n == 0:
            return np.zeros(0, np.uint32), np.zeros(0, np.uint8)
        return (np.array([doc_off[0], doc_off[1]], np.uint32),
                np.array([SEG_START, SEG_END], np.uint8))
    if len(sp_start):
        b = unique_sorted(np.concatenate([doc_off, sp_start, sp_end]))
        lo, hi = b[:-1], b[1:]
        seg = ~np.isin(lo, sp_start)
        lo, hi = lo[seg], hi[seg]
        ln = sp_end - sp_start
        inside = np.repeat(sp_start - np.cumsum(ln) + ln, ln) + np.arange(int(ln.sum()))
        pos = np.concatenate([lo, hi, inside, sp_start])
        bits = np.concatenate([np.full(len(lo), SEG_START), np.full(len(hi), SEG_END),
                               np.full(len(inside), OUTSIDE), np.full(len(sp_start),
                                                                      SPECIAL_START)])
    else:  # no spans: the boundaries are doc_off (sorted); no unique / bitwise_or.at needed
        # (~10 us instead of ~60 for the one-document chunk of a single encode call)
        first = np.empty(len(doc_off), bool)
        first[:1] = True
        first[1:] = doc_off[1:] != doc_off[:-1]
        upos = doc_off[first]
        nonempty = doc_off[1:] > doc_off[:-1]
        ubits = np.zeros(len(upos), np.uint8)
        ubits[np.searchsorted(upos, doc_off[:-1][nonempty])] |= np.uint8(SEG_START)
        ubits[np.searchsorted(upos, doc_off[1:][nonempty])] |= np.uint8(SEG_END)
        keep = ubits != 0
        return upos[keep].astype(np.uint32), ubits[keep]
    upos, inv = np.unique(pos, return_inverse=True)
    ubits = np.zeros(len(upos), np.uint8)
    np.bitwise_or.at(ubits, inv.reshape(-1), bits.astype(np.uint8))
    return upos.astype(np.uint32), ubits


def entries_from_scanner(scanner, data: np.ndarray, doc_off, sp_start, sp_end, sp_id):
    """Entries of a chunk with pieces cut on the CPU by ``scanner.boundaries`` (code points),
    in the chunk's own byte coordinates: (pstart, spec, doc_entry), uint32."""
    n = len(data)
    is_cs = (data & 0xC0) != 0x80
    char_pos = np.flatnonzero(is_cs)
    cps = np.frombuffer(data.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32)
    doc_off = np.asarray(doc_off, np.int64)
    b = unique_sorted(np.concatenate([doc_off, sp_start, sp_end]))
    is_sp = np.isin(b[:-1], sp_start)
    cp_b = np.searchsorted(char_pos, b)  # code points before each boundary
    cuts = scanner.boundaries(cps, cp_b.astype(np.int64))
    cuts = cuts[cuts < len(char_pos)]
    seg = np.searchsorted(cp_b, cuts, "right") - 1
    starts = char_pos[cuts[~is_sp[seg]]]
    pstart = np.concatenate([starts, sp_start, [n]]).astype(np.int64)
    pstart.sort()
    spec = np.full(len(pstart), NORMAL, np.uint32)
    spec[np.searchsorted(pstart, sp_start)] = sp_id
    spec[-1] = GAP
    doc_entry = np.searchsorted(pstart, doc_off, "left")
    return pstart.astype(np.uint32), spec, doc_entry.astype(np.uint32)


def entries_from_split(split, data: bytes, doc_off, sp_start, sp_end, sp_id):
    """Entries with pieces from ``split(text)`` per segment (any pre-tokenizer, a normaliser
    included: the chunk's buffer is rebuilt from the pieces). Returns (buffer, pstart, spec,
    doc_entry)."""
    parts: list = []
    starts: list = []
    spec: list = []
    doc_entry = [0]
    pos = 0
    k = 0
    n_sp = len(sp_start)
    for d in range(len(doc_off) - 1):
        lo, hi = int(doc_off[d]), int(doc_off[d + 1])
        cur = lo
        while True:
            nxt = int(sp_start[k]) if k < n_sp and sp_start[k] < hi else hi
            if nxt > cur:
                for p in split(data[cur:nxt].decode("utf-8")):
                    b = p.encode("utf-8")
                    if b:
                        parts.append(b)
                        starts.append(pos)
                        spec.append(NORMAL)
                        pos += len(b)
            if nxt >= hi:
                break
            end = int(sp_end[k])
            parts.append(data[nxt:end])
            starts.append(pos)
            spec.append(int(sp_id[k]))
            pos += end - nxt
            cur = end
            k += 1
        doc_entry.append(len(starts))
    starts.append(pos)
    spec.append(GAP)
    return (b"".join(parts), np.array(starts, np.uint32), np.array(spec, np.uint32),
            np.array(doc_entry, np.uint32))


def entries_from_words(words_bytes_batch, data: bytes, doc_off, sp_start, sp_end, sp_id):
    """``entries_from_split`` for a pre-tokenizer that cuts a whole batch of segments at once
    into one UTF-8 buffer (``BertSteps.words_bytes_batch``: no Python object per word); the
    same (buffer, pstart, spec, doc_entry). The loop runs per segment and special token, the
    words move as arrays."""
    texts: list = []
    items: list = []  # ("s", segment index) or ("t", special start, end, id), in order
    doc_items = [0]
    k, n_sp = 0, len(sp_start)
    for d in range(len(doc_off) - 1):
        lo, hi = int(doc_off[d]), int(doc_off[d + 1])
        cur = lo
        while True:
            nxt = int(sp_start[k]) if k < n_sp and sp_start[k] < hi else hi
            if nxt > cur:
                items.append(("s", len(texts)))
                texts.append(data[cur:nxt].decode("utf-8"))
            if nxt >= hi:
                break
            end = int(sp_end[k])
            items.append(("t", nxt, end, int(sp_id[k])))
            cur = end
            k += 1
        doc_items.append(len(items))
    wbuf, wstart, first = words_bytes_batch(texts)
    parts, starts, specs, n_ent = [], [], [], [0]
    pos = 0
    for it in items:
        if it[0] == "s":
            a, b = int(first[it[1]]), int(first[it[1] + 1])
            if b > a:
                w0, w1 = int(wstart[a]), int(wstart[b])
                parts.append(wbuf[w0:w1])
                starts.append(wstart[a:b] - w0 + pos)
                specs.append(np.full(b - a, NORMAL, np.uint32))
                pos += w1 - w0
            n_ent.append(n_ent[-1] + b - a)
        else:
            _, a, b, tid = it
            parts.append(data[a:b])
            starts.append(np.array([pos], np.int64))
            specs.append(np.array([tid], np.uint32))
            pos += b - a
            n_ent.append(n_ent[-1] + 1)
    starts.append(np.array([pos], np.int64))
    specs.append(np.array([GAP], np.uint32))
    doc_entry = np.array(n_ent, np.int64)[doc_items]
    return (b"".join(parts), np.concatenate(starts).astype(np.uint32),
            np.concatenate(specs).astype(np.uint32), doc_entry.astype(np.uint32))


# Documents are cut at THE SAFE CUT (``stages/pretok.py``: an ASCII letter, a space, an ASCII
# letter; the cut at the space), found here in UTF-8 bytes; a cut is never inside a token span.
_CUT_WINDOW = 1 << 12  # bytes looked at first; doubled up to _CUT_WINDOW_MAX while none is found
_CUT_WINDOW_MAX = 1 << 20


def find_safe_cut(data: np.ndarray, lo: int, hi: int) -> int:
    r"""The first safe cut in ``data[lo:hi]`` (uint8): the smallest position ``p`` with
    ``lo <= p - 1`` and ``p + 1 < hi`` where either a space has ASCII letters on both sides
    (THE SAFE CUT, ``stages/pretok.py``: the cut is at the space), or an ASCII letter and an
    ASCII digit meet, in either order (the cut is at the second); -1 when there is none.

    A letter next to a digit is a piece boundary in every pattern family with a scanner
    (cl100k / Llama 3, Qwen2, GPT-2, o200k): no alternative of those patterns matches both a
    letter and a digit (digits only in ``\p{N}`` runs, letters only in letter runs whose
    optional first character is neither), and none looks behind, so the pieces after the
    cut are those of the text from the cut on. Neither composes with the other under NFC. A
    base64 blob has no space and ~one such boundary every 3 bytes: it had no cut at all, and a
    10 MB one ran as a single chunk (~180 MB of workspace, one core).

    Vectorised over growing windows, so the cost is ~1 ns per byte looked at whatever the bytes
    are (a regex search costs 7-20 ns per byte on runs of letters, spaces or emoji that never
    match, and one 10 MB run is all such bytes)."""
    win = _CUT_WINDOW
    a = lo + 1  # the first cut position allowed
    while a + 1 < hi:
        b = min(hi - 1, a + win)  # cut positions [a, b), their right neighbours < hi
        w = data[a - 1:b + 1]
        letter = ((w | 32) - 97) < 26  # uint8 arithmetic wraps: a-z, A-Z only
        digit = (w - 48) < 10
        ok = ((w[1:-1] == 32) & letter[:-2] & letter[2:]) | (letter[:-2] & digit[1:-1]) \
            | (digit[:-2] & letter[1:-1])
        k = int(ok.argmax())
        if ok[k]:
            return a + k
        a = b
        win = min(2 * win, _CUT_WINDOW_MAX)
    return -1


def cut_long_documents(buf: bytes, doc_off: np.ndarray, spans, limit: int):
    """Cut documents longer than ``limit`` bytes at safe points (``find_safe_cut``), about every
    ``limit`` bytes: one 200 MB line then runs as chunks of a few MB, not as one chunk that
    needs ~30 bytes of workspace per byte. Returns ``(sub_off, keep)``: the offsets of the
    parts, and where each of ``doc_off`` is in them (None and ``doc_off`` when nothing is cut).
    A document with no safe point stays whole."""
    if len(doc_off) == 2 and int(doc_off[1] - doc_off[0]) <= limit:  # (a single encode)
        return doc_off, None
    lens = np.diff(doc_off)
    long = np.flatnonzero(lens > limit)
    if not len(long):
        return doc_off, None
    data = np.frombuffer(buf, np.uint8)
    sp_start, sp_end = spans[0], spans[1]
    cuts: dict = {}
    for d in long.tolist():
        a, b = int(doc_off[d]), int(doc_off[d + 1])
        pos, got = a, []
        while b - pos > limit:
            cut = find_safe_cut(data, pos + max(1, limit // 2), b)
            while cut >= 0:
                i = int(np.searchsorted(sp_start, cut, "right")) - 1
                if i < 0 or sp_end[i] <= cut:
                    break
                cut = find_safe_cut(data, int(sp_end[i]), b)  # inside a token span: go past it
            if cut < 0:
                break
            got.append(cut)
            pos = cut
        if got:
            cuts[d] = got
    if not cuts:
        return doc_off, None
    sub, keep = [], []
    for d in range(len(doc_off) - 1):
        keep.append(len(sub))
        sub.append(int(doc_off[d]))
        sub.extend(cuts.get(d, ()))
    keep.append(len(sub))
    sub.append(int(doc_off[-1]))
    return np.array(sub, np.int64), np.array(keep, np.int64)


@dataclass
class HostChunk:
    """One chunk's host work, ready to upload (``inputs``, in the order the driver unpacks)."""

    d0: int
    d1: int
    n: int  # bytes of text (after host-side normalisation)
    mode: str
    inputs: list
    n_docs: int
    n_entries: int = 0  # host-cut modes
    n_spans: int = 0
    n_marks: int = 0
    # device mode: (chunk bytes or a view of them, document offsets, token span starts, ends,
    # ids) in chunk coordinates, for ``splice_normalized``
    raw: "tuple | None" = None


def _device_chunk(d0: int, d1: int, chunk: "bytes | memoryview", off, ss, se, sid
                  ) -> HostChunk:
    data = np.frombuffer(chunk, np.uint8)
    mpos, mbits = segment_marks(off, ss, se)
    inputs = [data, off.astype(np.uint32), mpos, mbits, ss.astype(np.uint32), sid]
    return HostChunk(d0, d1, len(chunk), "device", inputs, d1 - d0, n_spans=len(ss),
                     n_marks=len(mpos), raw=(chunk, off, ss, se, sid))


def prepare(mode: str, pretok, buf, doc_off, spans, d0: int, d1: int,
            normalizer: tuple = ()) -> HostChunk:
    """The host side of one chunk (documents d0..d1-1): its inputs, ready to upload.

    ``mode``: where pieces are cut ("device", "scanner": the vectorised scanner on the host,
    "split": the pre-tokenizer's ``split`` per segment, "program": ``pretok.cut_chunk``, the
    device's pattern matcher); ``spans``: (starts, ends, ids) of the
    batch's token spans (``stages.split.token_spans``); ``normalizer``: the steps to run on the
    host here (a chunk whose text they change is rebuilt before its pieces are cut; a form whose
    quick check runs on the device is not passed: ``splice_normalized`` does its rare spans)."""
    b0, b1 = int(doc_off[d0]), int(doc_off[d1])
    n = b1 - b0
    off = doc_off[d0:d1 + 1] - b0
    sp_start, sp_end, sp_id = spans
    i0, i1 = np.searchsorted(sp_start, [b0, b1])
    ss, se, sid = sp_start[i0:i1] - b0, sp_end[i0:i1] - b0, sp_id[i0:i1]
    nd = d1 - d0
    if n == 0:
        return HostChunk(d0, d1, 0, mode, [], nd)
    if mode == "device" and not normalizer:  # a view: the kernels read the batch's buffer
        return _device_chunk(d0, d1, memoryview(buf)[b0:b1], off, ss, se, sid)
    chunk = buf[b0:b1]
    if normalizer and mode != "split":  # (the program cuts the normalised chunk)
        chunk, off, ss, se = normalize_chunk(normalizer, chunk, off, ss, se)
        n = len(chunk)
    data = np.frombuffer(chunk, np.uint8)
    if mode == "device":
        return _device_chunk(d0, d1, chunk, off, ss, se, sid)
    if mode == "scanner":
        pstart, spec, doc_entry = entries_from_scanner(pretok.scanner, data, off, ss, se, sid)
    elif mode == "program":  # the device's pattern matcher (``pretok.cut_chunk``)
        raw, pstart, spec, doc_entry = pretok.cut_chunk(chunk, off, ss, se, sid)
        data = np.frombuffer(raw, np.uint8)
        n = len(data)
        if n == 0:
            return HostChunk(d0, d1, 0, mode, [], nd)
    else:
        if normalizer:
            def cut(text, _split=pretok.split):
                return _split(normalize_text(normalizer, text))
        else:
            cut = pretok.split
        if getattr(pretok, "words_bytes_batch", None) is not None:  # WordPiece: whole chunk
            raw, pstart, spec, doc_entry = entries_from_words(pretok.words_bytes_batch, chunk,
                                                              off, ss, se, sid)
        else:
            raw, pstart, spec, doc_entry = entries_from_split(cut, chunk, off, ss, se, sid)
        data = np.frombuffer(raw, np.uint8)
        n = len(data)
        if n == 0:
            return HostChunk(d0, d1, 0, mode, [], nd)
    inputs = [data, pstart, spec, doc_entry, np.array([len(pstart)], np.uint32)]
    return HostChunk(d0, d1, n, mode, inputs, nd, n_entries=len(pstart))


def normal_spans(data: np.ndarray, pos: np.ndarray, bounds: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The byte spans the host normalises around flagged characters (``encode_nfc_flags``).

    ``data``: the chunk (uint8); ``pos``: sorted first bytes of the flagged characters;
    ``bounds``: sorted segment boundaries (no span crosses one: segments are normalised on their
    own). Each maximal run of consecutive flagged characters of one segment gives one span, from
    the character before the run (the safe starter it may compose with; none at a segment
    start) to the end of its last character: ``gputok.unicode.normalize_spans``' rule, so the
    result equals normalising the whole segment. Returns (starts, ends).
    """
    char_pos = np.flatnonzero((data & 0xC0) != 0x80)
    ci = np.searchsorted(char_pos, pos)  # character index of each flagged character
    seg = np.searchsorted(bounds, pos, "right") - 1
    first = np.ones(len(pos), bool)
    first[1:] = (np.diff(ci) != 1) | (np.diff(seg) != 0)
    last = np.ones(len(pos), bool)
    last[:-1] = first[1:]
    c0, c1, sg = ci[first], ci[last], seg[first]
    before = char_pos[np.maximum(c0 - 1, 0)]
    starts = np.where((c0 > 0) & (before >= bounds[sg]), before, char_pos[c0])
    nxt = c1 + 1
    ends = np.where(nxt < len(char_pos), char_pos[np.minimum(nxt, len(char_pos) - 1)],
                    len(data))
    return starts.astype(np.int64), ends.astype(np.int64)


# Joins the spans for one normaliser call: a noncharacter (combining class 0, no mapping in any
# form, the second half of no composition), so no span's result depends on its neighbours.
_SPAN_SEP = "\uffff".encode("utf-8")


def _normalize_many(spans: list, form: str) -> list:
    """Every span (UTF-8 bytes) in normal form ``form``: one normaliser call over all of them.

    Performance notes: multilingual text flags ~45 KB per MB (Indic and Arabic marks have
    non-zero combining classes), i.e. ~10^4 spans per MB; one call per span cost ~40 us of
    numpy set-up each (2.3 MB/s for Qwen2 on the multilingual corpus, against 7.3 for the host
    normaliser over whole segments); joined, the spans cost one quick check and one pass."""
    joined = _SPAN_SEP.join(spans)
    if joined.count(_SPAN_SEP) == len(spans) - 1:  # (the text has no U+FFFF of its own)
        out = normalize_text((form,), joined.decode("utf-8")).encode("utf-8").split(_SPAN_SEP)
        if len(out) == len(spans):
            return out
    return [normalize_text((form,), s.decode("utf-8")).encode("utf-8") for s in spans]


def splice_normalized(hc: HostChunk, pos: np.ndarray, form: str) -> tuple[HostChunk, int, int]:
    """A device chunk with the spans around the flagged characters ``pos`` normalised on the
    host (``normal_spans``) and spliced back; token spans are never normalised. Returns (the
    rebuilt chunk, or ``hc`` when nothing changed; spans normalised; their bytes)."""
    chunk, off, ss, se, sid = hc.raw
    chunk = bytes(chunk)  # (a view of the batch's buffer)
    pos = np.asarray(pos, np.int64)
    if len(ss):
        i = np.searchsorted(ss, pos, "right") - 1
        pos = pos[~((i >= 0) & (pos < se[np.maximum(i, 0)]))]
    if not len(pos):
        return hc, 0, 0
    bounds = unique_sorted(np.concatenate([off, ss, se]))
    data = np.frombuffer(chunk, np.uint8)
    starts, ends = normal_spans(data, pos, bounds)
    sl, el = starts.tolist(), ends.tolist()
    olds = [chunk[a:b] for a, b in zip(sl, el)]
    news = _normalize_many(olds, form)
    nbytes = int((ends - starts).sum())
    if news == olds:
        return hc, len(starts), nbytes
    parts: list = []
    prev = 0
    for a, b, new in zip(sl, el, news):
        parts += [chunk[prev:a], new]
        prev = b
    delta = np.fromiter(map(len, news), np.int64, len(news)) - (ends - starts)
    parts.append(chunk[prev:])
    shift = np.concatenate([[0], np.cumsum(delta)])

    def remap(x):  # a boundary moves by the growth of every span that ends at or before it
        x = np.asarray(x, np.int64)
        return x + shift[np.searchsorted(ends, x, "right")]

    new = _device_chunk(hc.d0, hc.d1, b"".join(parts), remap(off), remap(ss), remap(se), sid)
    return new, len(starts), nbytes
