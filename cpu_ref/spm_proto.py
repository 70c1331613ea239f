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


# ---------------------------------------------------------------- the wire format
# A message is read in two steps, the way the format is specified: first into its fields (a
# field number may occur any number of times, each occurrence with its wire type and value),
# then each field is interpreted by the schema. Step one knows nothing of sentencepiece.

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class _Cursor:
    """Reads one message's bytes front to back; every read checks that the bytes are there."""

    def __init__(self, buf: bytes, where: str):
        self.buf, self.pos, self.where = buf, 0, where

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ProtoError(f"{self.where}: a field claims {n} bytes at byte {self.pos}, "
                             f"{len(self.buf) - self.pos} left (truncated)")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def varint(self) -> int:
        """Base 128, least significant group first; a set top bit means "more bytes". A
        64-bit value needs at most 10 bytes."""
        value = 0
        for shift in range(0, 70, 7):
            if self.pos >= len(self.buf):
                raise ProtoError(f"{self.where}: truncated varint at byte {self.pos}")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise ProtoError(f"{self.where}: varint longer than 10 bytes at byte {self.pos}")


def read_fields(buf: bytes, where: str = "message") -> dict[int, list[tuple[int, object]]]:
    """Field number -> ``[(wire type, value), ...]`` in the order they occur.

    A value is an int for VARINT, FIXED64 and FIXED32 (the raw bits, little-endian) and bytes
    for LEN. Groups (wire types 3 and 4) are obsolete; sentencepiece never writes them.

    >>> read_fields(b"\\x08\\x96\\x01\\x12\\x02hi")
    {1: [(0, 150)], 2: [(2, b'hi')]}
    """
    cur = _Cursor(buf, where)
    found: dict[int, list[tuple[int, object]]] = {}
    while cur.pos < len(buf):
        key = cur.varint()
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError(f"{where}: field number 0 at byte {cur.pos}")
        if wire == VARINT:
            value: object = cur.varint()
        elif wire == LEN:
            value = bytes(cur.take(cur.varint()))
        elif wire in (FIXED64, FIXED32):
            value = int.from_bytes(cur.take(8 if wire == FIXED64 else 4), "little")
        else:
            raise ProtoError(f"{where}: unsupported wire type {wire} (field {number})")
        found.setdefault(number, []).append((wire, value))
    return found


def _values(fields: dict, number: int, wire: int) -> list:
    """Every value of a field sent with the wire type the schema gives it (a value sent with
    another wire type is not this field's: protobuf keeps it as an unknown field)."""
    return [v for w, v in fields.get(number, []) if w == wire]


def _last(fields: dict, number: int, wire: int, default):
    """proto2 scalar semantics: the last occurrence wins; absent, the schema's default."""
    vals = _values(fields, number, wire)
    return vals[-1] if vals else default


def _message(fields: dict, number: int, where: str) -> "dict | None":
    """A message field: occurrences are merged, which protobuf defines as parsing their
    concatenation. None when absent."""
    parts = _values(fields, number, LEN)
    return read_fields(b"".join(parts), where) if parts else None


def _int32(v: int) -> int:
    """An int32 travels as a 64-bit two's-complement varint: a negative id takes 10 bytes."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _text(v: bytes, where: str) -> str:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtoError(f"{where}: string is not UTF-8 ({e})") from None


# ---------------------------------------------------------------- the schema

def _piece(buf: bytes, index: int) -> tuple[str, float, int]:
    where = f"pieces[{index}]"
    f = read_fields(buf, where)
    piece = _text(_last(f, 1, LEN, b""), where)
    score = struct.unpack("<f", _last(f, 2, FIXED32, 0).to_bytes(4, "little"))[0]
    # proto2: an enum value the schema does not know is kept as an unknown field, so the last
    # known value is the piece's type (absent: the default)
    kinds = [k for k in map(_int32, _values(f, 3, VARINT)) if k in TYPE_NAMES]
    return piece, score, kinds[-1] if kinds else NORMAL


def _normalizer(f: dict, where: str) -> NormalizerSpec:
    d = NormalizerSpec()
    return NormalizerSpec(
        name=_text(_last(f, 1, LEN, d.name.encode()), where),
        precompiled_charsmap=_last(f, 2, LEN, d.precompiled_charsmap),
        add_dummy_prefix=bool(_last(f, 3, VARINT, d.add_dummy_prefix)),
        remove_extra_whitespaces=bool(_last(f, 4, VARINT, d.remove_extra_whitespaces)),
        escape_whitespaces=bool(_last(f, 5, VARINT, d.escape_whitespaces)))


# TrainerSpec fields gputok reads: number -> (attribute, wire type)
_TRAINER = {3: ("model_type", VARINT), 24: ("treat_whitespace_as_suffix", VARINT),
            35: ("byte_fallback", VARINT), 40: ("unk_id", VARINT), 41: ("bos_id", VARINT),
            42: ("eos_id", VARINT), 43: ("pad_id", VARINT), 44: ("unk_surface", LEN),
            45: ("unk_piece", LEN), 46: ("bos_piece", LEN), 47: ("eos_piece", LEN),
            48: ("pad_piece", LEN)}


def _trainer(f: dict) -> TrainerSpec:
    spec = TrainerSpec()
    for number, (name, wire) in _TRAINER.items():
        default = getattr(spec, name)
        if wire == LEN:
            value = _text(_last(f, number, LEN, default.encode()), "trainer_spec")
        else:
            value = _last(f, number, VARINT, None)
            value = default if value is None else type(default)(_int32(value))
        setattr(spec, name, value)
    spec.control_symbols = [_text(v, "trainer_spec") for v in _values(f, 30, LEN)]
    spec.user_defined_symbols = [_text(v, "trainer_spec") for v in _values(f, 31, LEN)]
    return spec


def parse_model(data: bytes) -> ModelProto:
    r"""Parse a serialized ``ModelProto``.

    >>> m = parse_model(b"\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    >>> m.pieces, m.normalizer_spec.add_dummy_prefix
    ([('<unk>', 0.0, 2)], True)
    """
    f = read_fields(data, "ModelProto")
    trainer = _message(f, 2, "trainer_spec")
    normalizer = _message(f, 3, "normalizer_spec")
    denormalizer = _message(f, 5, "denormalizer_spec")
    return ModelProto(
        pieces=[_piece(v, i) for i, v in enumerate(_values(f, 1, LEN))],
        trainer_spec=_trainer(trainer or {}),
        normalizer_spec=_normalizer(normalizer or {}, "normalizer_spec"),
        denormalizer_spec=None if denormalizer is None else _normalizer(denormalizer,
                                                                        "denormalizer_spec"))


def load_model(path) -> ModelProto:
    """Read a ``.model`` file; errors name the file."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return parse_model(data)
    except ProtoError as e:
        raise ProtoError(f"{path}: not a SentencePiece model: {e}") from None
