"""Writing a SentencePiece ``.model`` (a serialized ``ModelProto``, protobuf wire format) from a
trained piece list: pieces with scores and types, the trainer's settings and the normaliser's
(name, precompiled charsmap, whitespace flags), the fields ``spm_train`` writes.

The wire format: each field is a varint key ``number << 3 | wire type`` and its value (varint;
32-bit little-endian for floats; length-delimited for strings, bytes and sub-messages). A
negative int32 is written as a 10-byte varint (its 64-bit two's complement), as protobuf does.
``cpu_ref/spm_proto.py`` reads the format; the tests read what this writes with it and with
sentencepiece.
"""

from __future__ import annotations

import struct

MODEL_TYPE_BPE = 2

# TrainerSpec field numbers (sentencepiece_model.proto), written when set
_TRAINER_FIELDS = {
    "model_type": (3, "int"), "vocab_size": (4, "int"), "character_coverage": (10, "float"),
    "max_sentence_length": (18, "int"), "max_sentencepiece_length": (20, "int"),
    "split_by_unicode_script": (21, "bool"), "split_by_whitespace": (22, "bool"),
    "split_by_number": (23, "bool"), "treat_whitespace_as_suffix": (24, "bool"),
    "split_digits": (25, "bool"), "allow_whitespace_only_pieces": (26, "bool"),
    "control_symbols": (30, "strs"), "user_defined_symbols": (31, "strs"),
    "hard_vocab_limit": (33, "bool"), "byte_fallback": (35, "bool"),
    "required_chars": (36, "str"), "unk_id": (40, "int"), "bos_id": (41, "int"),
    "eos_id": (42, "int"), "pad_id": (43, "int"), "unk_piece": (45, "str"),
    "bos_piece": (46, "str"), "eos_piece": (47, "str"), "pad_piece": (48, "str"),
}


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative ints: 64-bit two's complement (10 bytes)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _field(number: int, kind: str, value) -> bytes:
    if kind in ("int", "bool"):
        return _key(number, 0) + _varint(int(value))
    if kind == "float":
        return _key(number, 5) + struct.pack("<f", value)
    if kind == "str":
        return _bytes_field(number, value.encode("utf-8"))
    if kind == "strs":
        return b"".join(_bytes_field(number, v.encode("utf-8")) for v in value)
    raise ValueError(kind)


def piece_message(piece: str, score: float, kind: int) -> bytes:
    return (_bytes_field(1, piece.encode("utf-8")) + _key(2, 5) + struct.pack("<f", score)
            + _key(3, 0) + _varint(kind))


def model_bytes(pieces, trainer: dict, normalizer: dict) -> bytes:
    """``pieces``: ``(piece, score, type)`` in id order; ``trainer``: TrainerSpec fields by name
    (``_TRAINER_FIELDS``); ``normalizer``: ``name``, ``precompiled_charsmap``,
    ``add_dummy_prefix``, ``remove_extra_whitespaces``, ``escape_whitespaces``."""
    out = bytearray()
    for p, s, k in pieces:
        out += _bytes_field(1, piece_message(p, s, k))
    spec = bytearray()
    for name in sorted(trainer, key=lambda n: _TRAINER_FIELDS[n][0]):
        number, kind = _TRAINER_FIELDS[name]
        spec += _field(number, kind, trainer[name])
    out += _bytes_field(2, bytes(spec))
    norm = bytearray()
    norm += _field(1, "str", normalizer["name"])
    if normalizer.get("precompiled_charsmap"):
        norm += _bytes_field(2, normalizer["precompiled_charsmap"])
    for number, name in ((3, "add_dummy_prefix"), (4, "remove_extra_whitespaces"),
                         (5, "escape_whitespaces")):
        norm += _field(number, "bool", normalizer[name])
    out += _bytes_field(3, bytes(norm))
    return bytes(out)
