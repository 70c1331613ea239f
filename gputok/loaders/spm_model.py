"""SentencePiece ``.model`` files -> ``Model`` (SentencePiece BPE or Unigram), with no protobuf
dependency.

A ``.model`` is one serialized ``ModelProto`` (proto2). Reading it needs only the protobuf wire
format: fields are ``varint key = number << 3 | wire type`` then a value (0 varint, 1 fixed64,
2 length-delimited, 5 fixed32); unknown fields are skipped, the last occurrence of a scalar wins,
absent fields take the schema's defaults (the three ``NormalizerSpec`` booleans default to
true). The fields read, by number::

    ModelProto      1 pieces   2 trainer_spec   3 normalizer_spec   5 denormalizer_spec
    SentencePiece   1 piece   2 score (float)   3 type (default NORMAL)
    TrainerSpec     3 model_type (UNIGRAM = 1, BPE = 2)   24 treat_whitespace_as_suffix
                    35 byte_fallback   41 bos_id (default 1)
                    44 unk_surface (default " \\u2047 ")
    NormalizerSpec  1 name   2 precompiled_charsmap   3 add_dummy_prefix
                    4 remove_extra_whitespaces   5 escape_whitespaces

Ids equal sentencepiece's ``encode`` (no BOS/EOS; ``add_special_tokens=True`` adds what
``encode(text, add_bos=True)`` adds: the BOS control piece); control pieces (``<s>``,
``[INST]``...) are the special tokens, under tiktoken's allowed/disallowed contract.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np

from ..components.decoders import SpmDecoder
from ..components.pretokenizers import Whole
from ..model import Model
from .post import spm_post
from ..components.normalizers.charsmap import CharsMap, CharsMapError
from ..components.segmenters.pieces import PieceTable
from ..components.segmenters.spm_bpe import SpmFamily, decoder_map
from ..components.normalizers.spm import SpmNormalizer

MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


class SpmSpec:
    """What gputok reads from a ``ModelProto`` (or builds from a GGUF vocabulary): the pieces as
    a ``PieceTable`` (``table``; or given as ``pieces``, ``scores``, ``types`` lists) and the
    trainer's and normaliser's options."""

    OPTIONS = {"model_type": 1, "byte_fallback": False, "bos_id": 1,
               "treat_whitespace_as_suffix": False, "unk_surface": " \u2047 ",
               "normalizer_name": "", "charsmap": b"", "add_dummy_prefix": True,
               "remove_extra_whitespaces": True, "escape_whitespaces": True,
               "denormalizer_charsmap": b""}

    def __init__(self, *, table: "PieceTable | None" = None, pieces=None, scores=None,
                 types=None, **options):
        unknown = set(options) - set(self.OPTIONS)
        if unknown:
            raise TypeError(f"SpmSpec: unknown options {sorted(unknown)}")
        for k, v in self.OPTIONS.items():
            setattr(self, k, options.get(k, v))
        if table is None:
            pieces = list(pieces or [])
            table = PieceTable.from_lists(pieces, scores if scores is not None else
                                          [0.0] * len(pieces),
                                          types if types is not None else [1] * len(pieces))
        self.table = table

    # the pieces as lists (the Unigram segmenter's constructor, tests)
    @property
    def pieces(self) -> list:
        return self.table.texts

    @property
    def scores(self) -> list:
        return self.table.scores.tolist()

    @property
    def types(self) -> list:
        return self.table.types.tolist()


class _Bad(ValueError):
    pass


def _fields(buf, where: str):
    """(number, wire type, value) of each field of one message."""
    pos, n = 0, len(buf)
    while pos < n:
        number, wire, value, pos = _field_at(buf, pos, where)
        yield number, wire, value


def _field_at(buf, pos: int, where: str) -> tuple:
    """The field at ``pos``: (number, wire type, value, the position after it)."""
    n = len(buf)
    key, pos = _varint(buf, pos, where)
    number, wire = key >> 3, key & 7
    if number == 0:
        raise _Bad(f"{where}: field number 0 at byte {pos}")
    if wire == 0:
        value, pos = _varint(buf, pos, where)
    elif wire == 2:
        length, pos = _varint(buf, pos, where)
        if pos + length > n:
            raise _Bad(f"{where}: field {number} claims {length} bytes, {n - pos} left")
        value, pos = buf[pos:pos + length], pos + length
    elif wire in (1, 5):
        size = 8 if wire == 1 else 4
        if pos + size > n:
            raise _Bad(f"{where}: truncated fixed-width field {number}")
        value, pos = int.from_bytes(buf[pos:pos + size], "little"), pos + size
    else:
        raise _Bad(f"{where}: unsupported wire type {wire} (field {number})")
    return number, wire, value, pos


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise _Bad(f"{where}: truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise _Bad(f"{where}: varint longer than 10 bytes at byte {pos}")


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF  # an int32 travels as 64-bit two's complement
    return v - (1 << 32) if v >= 1 << 31 else v


def _text(v: bytes, where: str) -> str:
    try:
        return bytes(v).decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Bad(f"{where}: string is not UTF-8 ({e.reason} at byte {e.start})") from None


def parse(data: bytes) -> SpmSpec:
    r"""Read a serialized ``ModelProto``.

    >>> s = parse(b"\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    >>> s.pieces, s.types, s.add_dummy_prefix
    (['<unk>'], [2], True)
    """
    data = bytes(data)
    opts: dict = {}
    mv = memoryview(data)
    walk = _Records(data)
    runs, odd = [], []  # runs of records read as arrays; (position, piece) of the others
    count, pos, n = 0, 0, len(data)
    while pos < n:
        run = walk.run_at(pos)
        if run is not None:
            runs.append(run)
            count += run[1] - run[0] + 1
            pos = int(walk.nxt[run[1]])
            continue
        start = pos
        number, wire, v, pos = _field_at(mv, pos, "ModelProto")
        if number == 1 and wire == 2:
            odd.append((start, _piece(v, f"pieces[{count}]")))
            count += 1
        elif number == 2 and wire == 2:
            _trainer_spec(v, opts)
        elif number == 3 and wire == 2:
            _normalizer_spec(v, opts)
        elif number == 5 and wire == 2:
            for n2, w2, v2 in _fields(v, "denormalizer_spec"):
                if n2 == 2 and w2 == 2:
                    opts["denormalizer_charsmap"] = bytes(v2)
    return SpmSpec(table=walk.table(runs, odd, mv), **opts)


def _piece(v, where: str) -> tuple:
    """(piece bytes, score, type) of one SentencePiece message, any layout."""
    piece, score, kind = b"", 0.0, 1
    for n2, w2, v2 in _fields(v, where):
        if n2 == 1 and w2 == 2:
            piece = bytes(v2)
        elif n2 == 2 and w2 == 5:
            score = struct.unpack("<f", v2.to_bytes(4, "little"))[0]
        elif n2 == 3 and w2 == 0 and 1 <= _int32(v2) <= 6:
            kind = _int32(v2)  # (an enum value the schema lacks keeps the default)
    return piece, score, kind


def _trainer_spec(v, opts: dict) -> None:
    for n2, w2, v2 in _fields(v, "trainer_spec"):
        if n2 == 3 and w2 == 0:
            opts["model_type"] = _int32(v2)
        elif n2 == 24 and w2 == 0:
            opts["treat_whitespace_as_suffix"] = bool(v2)
        elif n2 == 35 and w2 == 0:
            opts["byte_fallback"] = bool(v2)
        elif n2 == 41 and w2 == 0:
            opts["bos_id"] = _int32(v2)
        elif n2 == 44 and w2 == 2:
            opts["unk_surface"] = _text(v2, "trainer_spec.unk_surface")


def _normalizer_spec(v, opts: dict) -> None:
    for n2, w2, v2 in _fields(v, "normalizer_spec"):
        if n2 == 1 and w2 == 2:
            opts["normalizer_name"] = _text(v2, "normalizer_spec.name")
        elif n2 == 2 and w2 == 2:
            opts["charsmap"] = bytes(v2)
        elif n2 == 3 and w2 == 0:
            opts["add_dummy_prefix"] = bool(v2)
        elif n2 == 4 and w2 == 0:
            opts["remove_extra_whitespaces"] = bool(v2)
        elif n2 == 5 and w2 == 0:
            opts["escape_whitespaces"] = bool(v2)


class _Records:
    """The pieces as sentencepiece writes them, read as arrays: a record ``0a len`` (one-byte
    length) holding ``0a plen piece 15 score [18 type]``. Every byte position that could start
    one (``0a``, a length under 128, ``0a``) is a candidate, with the position after it; the
    walk in ``parse`` follows true records only (it starts where the last field ended), so a
    candidate inside a piece ("\\n\\n\\n") is never taken: a run of candidates is read at once
    up to the first one whose successor is not the next candidate. A record in any other
    layout is read by the generic path (``_piece``).

    Performance notes: a Python loop over 262K records (the generic one, or a lean one that
    only steps over lengths) cost 0.75 s / 0.13 s; this is a few numpy passes."""

    def __init__(self, data: bytes):
        b = self.b = np.frombuffer(data, np.uint8)
        nl = b == 0x0A
        c = np.flatnonzero(nl[:-2] & nl[2:]) if len(b) >= 3 else np.zeros(0, np.int64)
        size = b[c + 1]
        c = c[size < 0x80]
        nxt = c + 2 + size[size < 0x80]
        keep = nxt <= len(b)
        self.c, self.nxt = c[keep], nxt[keep]
        self.breaks = np.flatnonzero(self.nxt[:-1] != self.c[1:])

    def run_at(self, pos: int) -> "tuple[int, int] | None":
        """(first, last) candidate of the run of records starting at ``pos``, or None."""
        k = int(np.searchsorted(self.c, pos))
        if k == len(self.c) or self.c[k] != pos:
            return None
        at = int(np.searchsorted(self.breaks, k))
        return k, int(self.breaks[at]) if at < len(self.breaks) else len(self.c) - 1

    def table(self, runs: list, odd: list, mv) -> PieceTable:
        """The pieces of ``runs`` and the ``odd`` records, in file order."""
        b, last = self.b, len(self.b) - 1
        mark = np.zeros(len(self.c) + 1, np.int8)
        for a, z in runs:
            mark[a] += 1
            mark[z + 1] -= 1
        taken = np.flatnonzero(np.cumsum(mark[:-1], dtype=np.int8))
        # (positions as int32 where the file allows: half the memory a fresh process faults in)
        pos_t = np.int32 if len(b) < (1 << 31) - 16 else np.int64
        s, end = self.c[taken].astype(pos_t), self.nxt[taken].astype(pos_t)
        plen = b[s + 3].astype(pos_t)
        ps = s + 4
        pe = ps + plen
        typed = end == pe + 7
        t5, t6 = b[np.minimum(pe + 5, last)], b[np.minimum(pe + 6, last)]
        ok = (plen < 0x80) & (pe + 5 <= end) & (b[np.minimum(pe, last)] == 0x15) & (
            (end == pe + 5) | (typed & (t5 == 0x18) & (t6 >= 1) & (t6 <= 6)))
        kinds = np.where(typed, t6, 1).astype(np.uint8)
        # every float32 at every byte offset (a strided view, no copy), read at each score
        f32 = np.ndarray((max(len(b) - 3, 0),), "<f4", self.b.data, strides=(1,))
        scores = f32[np.minimum(pe + 1, max(last - 3, 0))].astype(np.float32)
        src = b
        if odd or not ok.all():
            # a record the arrays cannot read goes the generic way; then all in file order
            rec = [(int(x), _piece(mv[int(x) + 2:int(e)], "pieces"))
                   for x, e in zip(s[~ok].tolist(), end[~ok].tolist())]
            more = rec + odd
            ext = np.cumsum([0] + [len(p) for _, (p, _, _) in more]) + len(b)
            order = np.argsort(np.concatenate([s[ok], [x for x, _ in more]]), kind="stable")
            ps = np.concatenate([ps[ok], ext[:-1]]).astype(np.int64)[order]
            plen = np.concatenate([plen[ok], np.diff(ext)]).astype(np.int64)[order]
            scores = np.concatenate([scores[ok], np.array([r[1] for _, r in more],
                                                          np.float32)])[order]
            kinds = np.concatenate([kinds[ok], np.array([r[2] for _, r in more],
                                                        np.uint8)])[order]
            src = np.frombuffer(bytes(b) + b"".join(p for _, (p, _, _) in more), np.uint8)
        offsets = np.zeros(len(plen) + 1, np.int64)
        np.cumsum(plen, out=offsets[1:])
        if src is b:  # in file order, apart: a mask of the pieces' bytes (no index per byte)
            runs = np.empty(2 * len(ps), ps.dtype)
            runs[0::2] = np.diff(ps, prepend=0) - np.concatenate([[0], plen[:-1]])
            runs[1::2] = plen
            keep = np.repeat(np.tile(np.array([False, True]), len(ps)), runs)
            blob = b[:len(keep)][keep].tobytes()
        else:
            blob = src[np.repeat(ps - offsets[:-1], plen)
                       + np.arange(int(offsets[-1]))].tobytes()
        table = PieceTable(blob, offsets, scores.astype(np.float32), kinds)
        _check_utf8(table)
        return table


def _check_utf8(table: PieceTable) -> None:
    """Every piece is UTF-8 on its own: the blob is, and no piece starts inside a character."""
    b = np.frombuffer(table.blob, np.uint8)
    off = table.offsets
    try:
        table.joined  # (decodes the blob; kept for the tables)
        inside = bool(((b[off[:-1][off[1:] > off[:-1]]] & 0xC0) == 0x80).any())
    except UnicodeDecodeError:
        inside = True
    if inside:
        for i in range(len(table)):
            _text(table.blob[off[i]:off[i + 1]], f"pieces[{i}]")


def looks_like_model(head: bytes) -> bool:
    """Does a file start like a ModelProto (field 1, a SentencePiece message whose own first
    field is its piece string)?"""
    if len(head) < 4 or head[0] != 0x0A:
        return False
    try:
        _, pos = _varint(head, 1, "head")
    except _Bad:
        return False
    return pos < len(head) and head[pos] in (0x0A, 0x15, 0x18)


def model_from_spec(spec: SpmSpec, name: str, *, where: str, digest: "str | None" = None
                    ) -> Model:
    """The ``Model`` of a SentencePiece BPE vocabulary."""
    if spec.model_type not in (1, 2):
        kind = MODEL_TYPES.get(spec.model_type, str(spec.model_type))
        raise ValueError(f"{where}: model_type {kind} is not supported; gputok reads "
                         "SentencePiece BPE and UNIGRAM models (trainer_spec.model_type)")
    if spec.denormalizer_charsmap:
        raise ValueError(f"{where}: a denormalizer_spec charsmap is not supported")
    charsmap = None
    if spec.charsmap:
        try:
            charsmap = CharsMap(spec.charsmap, where=f"{where}: normalizer_spec")
            charsmap.check_utf8()
        except CharsMapError as e:
            raise ValueError(str(e)) from None
    table = spec.table
    user_defined = [table.text(i) for i in np.flatnonzero(
        (table.types == 4) & (np.diff(table.offsets) > 0)).tolist()]
    norm = SpmNormalizer(charsmap=charsmap, add_dummy_prefix=spec.add_dummy_prefix,
                         remove_extra_whitespaces=spec.remove_extra_whitespaces,
                         escape_whitespaces=spec.escape_whitespaces,
                         treat_whitespace_as_suffix=spec.treat_whitespace_as_suffix,
                         user_defined=user_defined)
    options = dict(byte_fallback=spec.byte_fallback, unk_surface=spec.unk_surface, where=where,
                   decode_strip=spec.add_dummy_prefix or spec.remove_extra_whitespaces,
                   decode_all_ws=spec.remove_extra_whitespaces)
    if spec.model_type == 1:
        from ..components.segmenters.unigram import SpmUnigram

        fam = SpmUnigram(spec.pieces, spec.scores, spec.types, **options)
        types = table.types
    else:
        fam = SpmFamily(table, **options)
        types = fam.type_codes  # (the NUL piece sentencepiece skips: UNUSED)
    return Model(name=name, decoder=decoder_map(fam, table, types), byte_ids=fam.byte_ids,
                 specials=dict(fam.specials), digest=digest, segmenter=fam, normalizer=norm,
                 pretokenizer=Whole(), detok=SpmDecoder(fam, table, types),
                 post=spm_post(spec.bos_id, table.types))


def load_spm(path: "str | Path", *, name: "str | None" = None) -> Model:
    """``gputok.load("tokenizer.model")``: a SentencePiece BPE model."""
    from . import model_cache

    path = Path(path)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    key = model_cache.make_key("spm_model", digest, name, path.stem)
    return model_cache.cached(key, lambda: _load_spm(path, data, name, digest[:32]))


def _load_spm(path: Path, data: bytes, name: "str | None", digest: str) -> Model:
    try:
        spec = parse(data)
    except _Bad as e:
        raise ValueError(f"{path}: not a SentencePiece model: {e}") from None
    return model_from_spec(spec, name or path.stem, where=str(path), digest=digest)
