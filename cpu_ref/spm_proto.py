"""A reader for SentencePiece ``.model`` files, with no protobuf dependency.

A ``.model`` file is one serialized ``ModelProto`` (sentencepiece's ``sentencepiece_model.proto``,
proto2). Reading it needs only the protobuf *wire format*: a message is a sequence of fields, each
a varint key ``(field_number << 3) | wire_type`` followed by a value whose encoding the wire type
gives (0 varint, 1 fixed 8 bytes, 2 length-delimited bytes, 5 fixed 4 bytes; 3/4 are the obsolete
groups, which sentencepiece never writes). Unknown fields are skipped, as protobuf does, so newer
models with fields we do not know still load.

The fields gputok needs, by number (from ``sentencepiece_model.proto``)::

    ModelProto      1 pieces (repeated SentencePiece)   2 trainer_spec   3 normalizer_spec
                    5 denormalizer_spec (4 self_test_data: skipped)
    SentencePiece   1 piece (string)   2 score (float)   3 type (enum, default NORMAL = 1)
    TrainerSpec     3 model_type (UNIGRAM=1, BPE=2, WORD=3, CHAR=4; default UNIGRAM)
                    24 treat_whitespace_as_suffix   35 byte_fallback
                    40..43 unk/bos/eos/pad_id   44 unk_surface (default " \\u2047 ")
                    45..48 unk/bos/eos/pad_piece   30 control_symbols   31 user_defined_symbols
    NormalizerSpec  1 name   2 precompiled_charsmap (bytes)   3 add_dummy_prefix (default true)
                    4 remove_extra_whitespaces (default true)   5 escape_whitespaces (default true)

Nothing here runs on a device: a model is read once, on the host, with no dependency (neither
sentencepiece nor protobuf is needed at run time).

Protobuf semantics we follow: for a non-repeated scalar the *last* occurrence wins; a message
field that occurs twice is merged; an absent field has the proto's declared default (note the three
``NormalizerSpec`` booleans default to *true*). An ``int32`` is sent as a 64-bit two's-complement
varint (a negative id takes 10 bytes). A ``float`` is IEEE binary32, little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# SentencePiece.Type values (ModelProto.SentencePiece.Type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {NORMAL: "NORMAL", UNKNOWN: "UNKNOWN", CONTROL: "CONTROL",
              USER_DEFINED: "USER_DEFINED", UNUSED: "UNUSED", BYTE: "BYTE"}
MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


@dataclass
class NormalizerSpec:
    name: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


@dataclass
class TrainerSpec:
    model_type: int = 1  # UNIGRAM is the proto default; gputok accepts BPE (2) only
    treat_whitespace_as_suffix: bool = False
    byte_fallback: bool = False
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"
    unk_surface: str = " \u2047 "
    control_symbols: list[str] = field(default_factory=list)
    user_defined_symbols: list[str] = field(default_factory=list)


@dataclass
class ModelProto:
    pieces: list[tuple[str, float, int]] = field(default_factory=list)  # (piece, score, type)
    trainer_spec: TrainerSpec = field(default_factory=TrainerSpec)
    normalizer_spec: NormalizerSpec = field(default_factory=NormalizerSpec)
    denormalizer_spec: NormalizerSpec | None = None


class ProtoError(ValueError):
    """The bytes are not a well-formed ModelProto."""


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ProtoError(f"{where}: truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ProtoError(f"{where}: varint longer than 10 bytes at byte {pos}")


def fields(buf: bytes, where: str = "message"):
    """Yield ``(field_number, wire_type, value)`` for each field of one message.

    ``value`` is an int for varints and fixed-width fields (raw bits), bytes for wire type 2.
    """
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError(f"{where}: field number 0 at byte {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, where)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ProtoError(f"{where}: truncated 64-bit field {number}")
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos, where)
            if pos + n > len(buf):
                raise ProtoError(f"{where}: field {number} claims {n} bytes, "
                                 f"{len(buf) - pos} left")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ProtoError(f"{where}: truncated 32-bit field {number}")
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ProtoError(f"{where}: unsupported wire type {wire} (field {number})")
        yield number, wire, value


def _int32(v: int) -> int:
    v &= (1 << 64) - 1  # negative int32 travel as 64-bit two's complement
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _float(bits: int) -> float:
    return struct.unpack("<f", bits.to_bytes(4, "little"))[0]


def _str(v: bytes, where: str) -> str:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtoError(f"{where}: string is not UTF-8 ({e})") from None


def _piece(buf: bytes, index: int) -> tuple[str, float, int]:
    piece, score, kind = "", 0.0, NORMAL
    where = f"pieces[{index}]"
    for number, wire, v in fields(buf, where):
        if number == 1 and wire == 2:
            piece = _str(v, where)
        elif number == 2 and wire == 5:
            score = _float(v)
        elif number == 3 and wire == 0:
            # proto2: an enum value the schema does not know is kept as an unknown field, so the
            # piece keeps its default type.
            if _int32(v) in TYPE_NAMES:
                kind = _int32(v)
    return piece, score, kind


def _normalizer(buf: bytes, spec: NormalizerSpec, where: str) -> NormalizerSpec:
    for number, wire, v in fields(buf, where):
        if number == 1 and wire == 2:
            spec.name = _str(v, where)
        elif number == 2 and wire == 2:
            spec.precompiled_charsmap = bytes(v)
        elif number == 3 and wire == 0:
            spec.add_dummy_prefix = bool(v)
        elif number == 4 and wire == 0:
            spec.remove_extra_whitespaces = bool(v)
        elif number == 5 and wire == 0:
            spec.escape_whitespaces = bool(v)
    return spec


_TRAINER_BOOLS = {24: "treat_whitespace_as_suffix", 35: "byte_fallback"}
_TRAINER_INTS = {3: "model_type", 40: "unk_id", 41: "bos_id", 42: "eos_id", 43: "pad_id"}
_TRAINER_STRS = {44: "unk_surface", 45: "unk_piece", 46: "bos_piece", 47: "eos_piece",
                 48: "pad_piece"}


def _trainer(buf: bytes, spec: TrainerSpec) -> TrainerSpec:
    where = "trainer_spec"
    for number, wire, v in fields(buf, where):
        if number in _TRAINER_BOOLS and wire == 0:
            setattr(spec, _TRAINER_BOOLS[number], bool(v))
        elif number in _TRAINER_INTS and wire == 0:
            setattr(spec, _TRAINER_INTS[number], _int32(v))
        elif number in _TRAINER_STRS and wire == 2:
            setattr(spec, _TRAINER_STRS[number], _str(v, where))
        elif number == 30 and wire == 2:
            spec.control_symbols.append(_str(v, where))
        elif number == 31 and wire == 2:
            spec.user_defined_symbols.append(_str(v, where))
    return spec


def parse_model(data: bytes) -> ModelProto:
    r"""Parse a serialized ``ModelProto``.

    >>> m = parse_model(b"\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    >>> m.pieces, m.normalizer_spec.add_dummy_prefix
    ([('<unk>', 0.0, 2)], True)
    """
    model = ModelProto()
    for number, wire, v in fields(data, "ModelProto"):
        if number == 1 and wire == 2:
            model.pieces.append(_piece(v, len(model.pieces)))
        elif number == 2 and wire == 2:
            model.trainer_spec = _trainer(v, model.trainer_spec)
        elif number == 3 and wire == 2:
            model.normalizer_spec = _normalizer(v, model.normalizer_spec, "normalizer_spec")
        elif number == 5 and wire == 2:
            model.denormalizer_spec = _normalizer(
                v, model.denormalizer_spec or NormalizerSpec(), "denormalizer_spec")
    return model


def load_model(path) -> ModelProto:
    """Read a ``.model`` file; errors name the file."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return parse_model(data)
    except ProtoError as e:
        raise ProtoError(f"{path}: not a SentencePiece model: {e}") from None
