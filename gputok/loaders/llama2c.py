"""llama2.c ``tokenizer.bin`` -> ``Model`` (SentencePiece BPE).

The file: ``uint32 max_token_length``, then per token until the end ``float32 score, uint32
length, bytes``; llama2.c's exporter writes a SentencePiece model's pieces with "▁" as " ", BOS
as "\\n<s>\\n", EOS as "\\n</s>\\n", the <0xXX> byte pieces at ids 3-258. ``run.c``'s encode (stated
in ``cpu_ref/llama2c.py``: dummy " ", characters or their bytes at id byte + 3, merge the pair
whose concatenation is the best-scoring token, leftmost on ties) is SentencePiece BPE on those
pieces as they are (" " kept: the identity normaliser without whitespace escaping), whenever no merge can make or use a
special or byte token; the loader checks that, and the byte layout, and refuses a file where the
two could differ. BOS and EOS become the special tokens "<s>" and "</s>".
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from pathlib import Path

from ..components.decoders.llama2c import Llama2cDecoder
from ..model import Model

NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def looks_like_llama2c(head: bytes) -> bool:
    """A header and a first record that fit: max_token_length below 65536, a float score, a
    length at most max_token_length (no text or protobuf file starts with two NUL bytes)."""
    if len(head) < 12 or head[2:4] != b"\0\0":
        return False
    max_len, score, n = struct.unpack_from("<IfI", head, 0)
    return 0 < max_len and n <= max_len and score == score and len(head) >= min(12 + n, 256)


def read_tokenizer_bin(data: bytes, where: str) -> tuple[list, list]:
    """(token strings by id, scores) of a ``tokenizer.bin``."""
    if len(data) < 4:
        raise ValueError(f"{where}: {len(data)} bytes: too short for a tokenizer.bin")
    (max_len,) = struct.unpack_from("<I", data, 0)
    rec = struct.Struct("<fI")
    unpack, end = rec.unpack_from, len(data)
    pos, raw, scores = 4, [], []
    while pos < end:
        if pos + 8 > end:
            raise ValueError(f"{where}: truncated record at byte {pos} (token {len(raw)})")
        score, n = unpack(data, pos)
        pos += 8
        if n > max_len or pos + n > end:
            raise ValueError(f"{where}: token {len(raw)} claims {n} bytes (max_token_length "
                             f"{max_len}, {end - pos} left)")
        raw.append(data[pos:pos + n])
        scores.append(score)
        pos += n
    try:
        return [t.decode("utf-8") for t in raw], scores
    except UnicodeDecodeError:
        bad = next(i for i, t in enumerate(raw) if not _utf8(t))
        raise ValueError(f"{where}: token {bad} is not UTF-8: {raw[bad]!r}") from None


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def load_llama2c(path: "str | Path", *, name: "str | None" = None) -> Model:
    """``gputok.load("tokenizer.bin")``: a llama2.c tokenizer."""
    from . import model_cache

    path = Path(path)
    data = path.read_bytes()
    key = model_cache.make_key("llama2c", hashlib.sha256(data).hexdigest(), name, path.stem)
    return model_cache.cached(key, lambda: _load(path, data, name))


def _load(path: Path, data: bytes, name: "str | None") -> Model:
    from .spm_model import SpmSpec, model_from_spec

    where = str(path)
    tokens, scores = read_tokenizer_bin(data, where)
    if len(tokens) < 259:
        raise ValueError(f"{where}: {len(tokens)} tokens; llama2.c's byte fallback needs "
                         "<unk>, <s>, </s> and the 256 byte tokens at ids 3-258")
    for b in range(256):
        if tokens[b + 3] != f"<0x{b:02X}>":
            raise ValueError(f"{where}: token {b + 3} is {tokens[b + 3]!r}, not <0x{b:02X}>: "
                             "llama2.c's byte fallback (id = byte + 3) would not be bytes")
    ids: dict = {}
    for i, t in enumerate(tokens):
        if ids.setdefault(t, i) != i:
            raise ValueError(f"{where}: tokens {ids[t]} and {i} are both {t!r} (llama2.c's "
                             "lookup of that string is ambiguous)")
    if " " not in ids:
        raise ValueError(f"{where}: no token \" \" for llama2.c's dummy prefix")
    special = set(range(259))
    for i in special:  # a merge result in llama2.c, never in SentencePiece
        t = tokens[i]
        for k in range(1, len(t)):
            if t[:k] in ids and t[k:] in ids:
                raise ValueError(f"{where}: token {i} {t!r} is the concatenation of tokens "
                                 f"{t[:k]!r} and {t[k:]!r}: not supported")
    for t, i in ids.items():  # a byte token as an operand of a merge
        if i not in special and "<0x" in t:
            for b in range(3, 259):
                s = tokens[b]
                if (t.startswith(s) and t[6:] in ids) or (t.endswith(s) and t[:-6] in ids):
                    raise ValueError(f"{where}: token {i} {t!r} merges a byte token: not "
                                     "supported")
    # The pieces keep their " ": the normaliser adds a " " dummy prefix and leaves spaces alone
    # (escape_whitespaces off), so a "▁" in the text stays a character no token holds, and goes
    # to its bytes as in run.c (with "▁" for " ", text "▁" would read as a space).
    pieces = list(tokens)
    types = [NORMAL] * len(pieces)
    types[0] = UNKNOWN  # (decoded by ``Llama2cDecoder``: the dummy " " dropped)
    for i in (1, 2):
        pieces[i] = tokens[i].strip("\n") or tokens[i]
        types[i] = CONTROL
    for b in range(256):
        types[b + 3] = BYTE
    spec = SpmSpec(pieces=pieces, scores=scores, types=types, model_type=2, byte_fallback=True,
                   normalizer_name="identity", add_dummy_prefix=True,
                   remove_extra_whitespaces=False, escape_whitespaces=False)
    model = model_from_spec(spec, name or path.stem, where=where,
                            digest=hashlib.sha256(data).hexdigest()[:32])
    fam = model.segmenter
    return dataclasses.replace(model, detok=Llama2cDecoder(fam, fam.table, fam.type_codes))
