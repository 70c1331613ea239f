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
from dataclasses import dataclass, field
from pathlib import Path

from ..components.decoders import SpmDecoder
from ..components.pretokenizers import Whole
from ..model import Model
from .post import spm_post
from ..components.normalizers.charsmap import CharsMap, CharsMapError
from ..components.segmenters.spm_bpe import SpmFamily, decoder_map
from ..components.segmenters.unigram import SpmUnigram
from ..components.normalizers.spm import SpmNormalizer

MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


@dataclass
class SpmSpec:
    """What gputok reads from a ``ModelProto`` (or builds from a GGUF vocabulary)."""

    pieces: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    types: list = field(default_factory=list)
    model_type: int = 1
    byte_fallback: bool = False
    bos_id: int = 1
    treat_whitespace_as_suffix: bool = False
    unk_surface: str = " \u2047 "
    normalizer_name: str = ""
    charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    denormalizer_charsmap: bytes = b""


class _Bad(ValueError):
    pass


def _fields(buf: bytes, where: str):
    """(number, wire type, value) of each field of one message."""
    pos, n = 0, len(buf)
    while pos < n:
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
        yield number, wire, value


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
    spec = SpmSpec()
    mv = memoryview(data)
    for number, wire, v in _fields(mv, "ModelProto"):
        if number == 1 and wire == 2:
            fast = _piece_fast(v)
            if fast is not None:  # the layout sentencepiece writes: piece, score, type
                spec.pieces.append(fast[0])
                spec.scores.append(fast[1])
                spec.types.append(fast[2])
                continue
            piece, score, kind = "", 0.0, 1
            where = f"pieces[{len(spec.pieces)}]"
            for n2, w2, v2 in _fields(v, where):
                if n2 == 1 and w2 == 2:
                    piece = _text(v2, where)
                elif n2 == 2 and w2 == 5:
                    score = struct.unpack("<f", v2.to_bytes(4, "little"))[0]
                elif n2 == 3 and w2 == 0 and 1 <= _int32(v2) <= 6:
                    kind = _int32(v2)  # (an enum value the schema lacks keeps the default)
            spec.pieces.append(piece)
            spec.scores.append(score)
            spec.types.append(kind)
        elif number == 2 and wire == 2:
            for n2, w2, v2 in _fields(v, "trainer_spec"):
                if n2 == 3 and w2 == 0:
                    spec.model_type = _int32(v2)
                elif n2 == 24 and w2 == 0:
                    spec.treat_whitespace_as_suffix = bool(v2)
                elif n2 == 35 and w2 == 0:
                    spec.byte_fallback = bool(v2)
                elif n2 == 41 and w2 == 0:
                    spec.bos_id = _int32(v2)
                elif n2 == 44 and w2 == 2:
                    spec.unk_surface = _text(v2, "trainer_spec.unk_surface")
        elif number == 3 and wire == 2:
            for n2, w2, v2 in _fields(v, "normalizer_spec"):
                if n2 == 1 and w2 == 2:
                    spec.normalizer_name = _text(v2, "normalizer_spec.name")
                elif n2 == 2 and w2 == 2:
                    spec.charsmap = bytes(v2)
                elif n2 == 3 and w2 == 0:
                    spec.add_dummy_prefix = bool(v2)
                elif n2 == 4 and w2 == 0:
                    spec.remove_extra_whitespaces = bool(v2)
                elif n2 == 5 and w2 == 0:
                    spec.escape_whitespaces = bool(v2)
        elif number == 5 and wire == 2:
            for n2, w2, v2 in _fields(v, "denormalizer_spec"):
                if n2 == 2 and w2 == 2:
                    spec.denormalizer_charsmap = bytes(v2)
    return spec


_F32 = struct.Struct("<f")


def _piece_fast(v) -> "tuple | None":
    """A SentencePiece message laid out as ``0a len piece 15 score [18 type]`` with a one-byte
    length and type, read without the generic loop (~5x faster); None for anything else."""
    n = len(v)
    if n < 2 or v[0] != 0x0A or v[1] >= 0x80:
        return None
    end = 2 + v[1]
    if end + 5 > n or v[end] != 0x15:
        return None
    score = _F32.unpack_from(v, end + 1)[0]
    pos = end + 5
    kind = 1
    if pos < n:
        if pos + 2 != n or v[pos] != 0x18 or not 1 <= v[pos + 1] <= 6:
            return None
        kind = v[pos + 1]
    try:
        return bytes(v[2:end]).decode("utf-8"), score, kind
    except UnicodeDecodeError:
        return None


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
    user_defined = [p for p, t in zip(spec.pieces, spec.types) if t == 4 and p]
    norm = SpmNormalizer(charsmap=charsmap, add_dummy_prefix=spec.add_dummy_prefix,
                         remove_extra_whitespaces=spec.remove_extra_whitespaces,
                         escape_whitespaces=spec.escape_whitespaces,
                         treat_whitespace_as_suffix=spec.treat_whitespace_as_suffix,
                         user_defined=user_defined)
    make = SpmUnigram if spec.model_type == 1 else SpmFamily
    fam = make(spec.pieces, spec.scores, spec.types, byte_fallback=spec.byte_fallback,
               unk_surface=spec.unk_surface, where=where,
               decode_strip=spec.add_dummy_prefix or spec.remove_extra_whitespaces,
               decode_all_ws=spec.remove_extra_whitespaces)
    return Model(name=name, decoder=decoder_map(fam), byte_ids=fam.byte_ids,
                 specials=dict(fam.specials), digest=digest, segmenter=fam, normalizer=norm,
                 pretokenizer=Whole(), detok=SpmDecoder(fam),
                 post=spm_post(spec.bos_id, fam.types))


def load_spm(path: "str | Path", *, name: "str | None" = None) -> Model:
    """``gputok.load("tokenizer.model")``: a SentencePiece BPE model."""
    from . import model_cache

    path = Path(path)
    data = path.read_bytes()
    key = model_cache.make_key("spm_model", hashlib.sha256(data).hexdigest(), name, path.stem)
    return model_cache.cached(key, lambda: _load_spm(path, data, name))


def _load_spm(path: Path, data: bytes, name: "str | None") -> Model:
    try:
        spec = parse(data)
    except _Bad as e:
        raise ValueError(f"{path}: not a SentencePiece model: {e}") from None
    return model_from_spec(spec, name or path.stem, where=str(path),
                           digest=hashlib.sha256(data).hexdigest()[:32])
