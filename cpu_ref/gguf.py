"""GGUF vocabularies: a metadata reader, and the map from ``tokenizer.ggml.*`` to a family.

A GGUF file (llama.cpp's model format) keeps its tokenizer as metadata key/values:

    tokenizer.ggml.model        "gpt2" (byte-level BPE), "llama" (SentencePiece BPE), "bert"
                                (WordPiece); others are refused
    tokenizer.ggml.pre          for gpt2: the pre-tokenizer's *name* (``cpu_ref.gguf_pre``)
    tokenizer.ggml.tokens       the vocabulary, id = index
    tokenizer.ggml.token_type   per token: 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED,
                                5 UNUSED, 6 BYTE (sentencepiece's numbering)
    tokenizer.ggml.scores       for llama: the piece scores
    tokenizer.ggml.merges       for gpt2: "left right" strings, rank = index
    tokenizer.ggml.add_space_prefix          for llama: the dummy prefix (default true)

How each family is read:

* ``gpt2`` -> byte-level BPE with the HF rule (``cpu_ref.hf.RefHF`` on an equivalent
  tokenizer.json): tokens are in the GPT-2 byte alphabet; CONTROL tokens are special tokens
  (allowed explicitly), USER_DEFINED tokens are always split out, like HF's non-special added
  tokens. ``ignore_merges`` comes from the pre-tokenizer table, as in llama.cpp.
* ``llama`` -> SentencePiece BPE (``cpu_ref.spm``) with an identity normaliser: spaces escaped
  to "▁", the dummy prefix iff ``add_space_prefix``, no whitespace collapsing; byte fallback iff
  the vocabulary has BYTE tokens. A charsmap stored in the file is ignored, as llama.cpp ignores
  it for this model type, so a GGUF made from an ``nmt_nfkc`` model (botchan) does not normalise.
  Where llama.cpp departs from sentencepiece (it lets CONTROL and BYTE tokens be merge results,
  does not split UNUSED pieces back, and fails on unknown characters without byte tokens), we
  keep sentencepiece's rules: the file came from a sentencepiece model.
* ``bert`` -> WordPiece (``cpu_ref.wordpiece``) with BERT's uncased normaliser (GGUF has no
  normaliser keys; the converter writes uncased models). The converter stores "##x" as "x" and a
  word-initial "x" as "▁x" (bracketed tokens like "[CLS]" unchanged); we convert back.

What gputok's fast path must compute
------------------------------------
Nothing new: the file is read once on the host, and the tokenizer it describes runs on the fast
path of its family (the byte-level BPE stages; SentencePiece and WordPiece as in ``spm`` and
``wordpiece``).

The reader is our own (no ``gguf`` package needed): little- or big-endian (detected from the
version field), versions 1-3 (v1 used 32-bit counts and lengths), metadata only.
"""

from __future__ import annotations

import struct
from pathlib import Path

from . import gguf_pre, hf, spm, spm_proto, wordpiece

# GGUF value types: id -> (struct code, size) for scalars
_SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
            6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
_STRING, _ARRAY = 8, 9
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = (
    1, 2, 3, 4, 5, 6)


class GGUFError(ValueError):
    """A GGUF file is malformed or holds a tokenizer gputok cannot read."""


class _Reader:
    def __init__(self, data: bytes, where: str):
        self.data, self.pos, self.where = data, 0, where
        self.endian, self.wide = "<", True

    def take(self, fmt: str):
        size = struct.calcsize(self.endian + fmt)
        if self.pos + size > len(self.data):
            raise GGUFError(f"{self.where}: truncated at byte {self.pos} (file has "
                            f"{len(self.data)} bytes)")
        (v,) = struct.unpack_from(self.endian + fmt, self.data, self.pos)
        self.pos += size
        return v

    def count(self) -> int:
        return self.take("Q" if self.wide else "I")

    def string(self, what: str) -> str:
        n = self.count()
        if self.pos + n > len(self.data):
            raise GGUFError(f"{self.where}: {what}: string of {n} bytes runs past the end")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.where}: {what} is not UTF-8 ({e})") from None

    def value(self, kind: int, what: str):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind][0])
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            sub, n = self.take("I"), self.count()
            return [self.value(sub, f"{what}[{i}]") for i in range(n)]
        raise GGUFError(f"{self.where}: {what}: unknown value type {kind}")


def read_metadata(path: "str | Path") -> dict:
    """The key/value metadata of a GGUF file (tensors are not read).

    >>> import gguf, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.gguf")
    >>> w = gguf.GGUFWriter(path, arch="llama"); w.add_tokenizer_model("llama")
    >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.close()
    >>> read_metadata(path)["tokenizer.ggml.model"]
    'llama'
    """
    data = Path(path).read_bytes()
    r = _Reader(data, str(path))
    if data[:4] != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (magic {data[:4]!r}, expected b'GGUF')")
    r.pos = 4
    version = r.take("I")
    if version > 0xFFFF:  # a big-endian file read as little-endian
        r.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (1, 2, 3):
        raise GGUFError(f"{path}: unsupported GGUF version {version} (1, 2 and 3 are known)")
    r.wide = version >= 2
    r.count()  # tensor count: not needed
    meta: dict = {}
    for _ in range(r.count()):
        key = r.string("key")
        meta[key] = r.value(r.take("I"), key)
    return meta


def load(path: "str | Path"):
    """The cpu_ref tokenizer a GGUF file describes: ``RefHF``, ``RefSentencePiece`` or
    ``RefWordPiece``.

    >>> import gguf, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "bert.gguf")
    >>> w = gguf.GGUFWriter(path, arch="bert"); w.add_tokenizer_model("bert")
    >>> w.add_token_list(["[UNK]", "▁un", "aff", "able"]); w.add_token_types([3, 1, 1, 1])
    >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.close()
    >>> load(path).encode_ordinary("unaffable")
    [1, 2, 3]
    """
    return from_metadata(read_metadata(path), where=str(path))


def from_metadata(meta: dict, *, where: str = "GGUF"):
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise GGUFError(f"{where}: no tokenizer.ggml.tokens")
    types = meta.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    if model == "gpt2":
        return _byte_level(meta, tokens, types, where)
    if model == "llama":
        return _sentencepiece(meta, tokens, types, where)
    if model == "bert":
        return _wordpiece(meta, tokens, types)
    raise GGUFError(f"{where}: tokenizer.ggml.model {model!r} is not supported; gputok reads "
                    f"'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE) and 'bert' (WordPiece)")


def _byte_level(meta, tokens, types, where):
    pre = gguf_pre.pre_tokenizer(meta.get("tokenizer.ggml.pre"), where=where)
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        raise GGUFError(f"{where}: a gpt2 tokenizer needs tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "special": k == TOKEN_CONTROL}
             for i, (t, k) in enumerate(zip(tokens, types))
             if k in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    cfg = {
        "added_tokens": added,
        "normalizer": {"type": pre.normalizer} if pre.normalizer else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated"}
              for r in pre.regexes),
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "model": {"type": "BPE", "vocab": {t: i for i, t in reversed(list(enumerate(tokens)))},
                  "merges": merges, "ignore_merges": pre.ignore_merges},
    }
    return hf.RefHF(cfg)


def _sentencepiece(meta, tokens, types, where):
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    if len(scores) != len(tokens):
        raise GGUFError(f"{where}: {len(scores)} scores for {len(tokens)} tokens")
    proto = spm_proto.ModelProto(pieces=[(t, float(s), int(k)) for t, s, k in
                                         zip(tokens, scores, _one_unknown(meta, types))])
    proto.trainer_spec.model_type = 2
    proto.trainer_spec.byte_fallback = any(k == TOKEN_BYTE for k in types)
    ns = proto.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    ns.remove_extra_whitespaces = False
    return spm.RefSentencePiece(proto)


def _one_unknown(meta: dict, types: list) -> list:
    """A sentencepiece model holds one UNKNOWN piece (it refuses a second: "unk is already
    defined"); a GGUF may type several tokens UNKNOWN (Phi-3's converter padded its vocabulary
    with 53 "[PAD...]" tokens typed UNKNOWN and typed "<unk>" itself CONTROL). llama.cpp takes
    the unk from ``tokenizer.ggml.unknown_token_id`` (else the first UNKNOWN token) and treats
    every token typed UNKNOWN as a control token: matched in text only where special tokens are
    parsed, never made by merging. So: the unk id's piece is the UNKNOWN piece, the other
    UNKNOWN pieces are CONTROL."""
    out = [int(k) for k in types]
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    if not (isinstance(unk, int) and 0 <= unk < len(out)):
        unk = next((i for i, k in enumerate(out) if k == TOKEN_UNKNOWN), None)
    out = [TOKEN_CONTROL if k == TOKEN_UNKNOWN else k for k in out]
    if unk is not None:
        out[unk] = TOKEN_UNKNOWN
    return out


def unphantom(token: str) -> str:
    """Undo the GGUF BERT converter's token spelling: "▁x" -> "x", "x" -> "##x", "[X]" kept.

    >>> [unphantom(t) for t in ("▁play", "ing", "[CLS]")]
    ['play', '##ing', '[CLS]']
    """
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[1:] if token.startswith("\u2581") else "##" + token


def _wordpiece(meta, tokens, types):
    vocab = [unphantom(t) for t in tokens]
    specials = tuple(t for t, k in zip(vocab, types) if k == TOKEN_CONTROL)
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    unk_token = vocab[unk] if unk is not None else "[UNK]"
    return wordpiece.RefWordPiece.from_vocab(vocab, specials_=specials, unk_token=unk_token)
