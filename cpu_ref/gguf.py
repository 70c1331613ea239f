"""GGUF vocabularies: a metadata reader, and the map from ``tokenizer.ggml.*`` to a family.

A GGUF file (llama.cpp's model format) keeps its tokenizer as metadata key/values:

    tokenizer.ggml.model        "gpt2" (byte-level BPE), "llama" (SentencePiece BPE), "gemma4"
                                (BPE on characters), "bert" (WordPiece); others are refused
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
* ``gemma4`` (Gemma 4), and ``gpt2`` with a ``pre`` of ``gguf_pre.CHAR_LEVEL`` -> ``RefCharBpe``,
  llama.cpp's BPE on raw UTF-8 (its ``llm_tokenizer_bpe_session`` with ``byte_encode`` off and
  ``escape_whitespaces`` on): every " " becomes "▁" (U+2581; other whitespace is kept); the text
  splits into runs of "\n" and runs of other characters; a newline run that is a token is that
  token; every other run starts as its characters and merges the adjacent pair of lowest
  ``merges`` rank (leftmost on ties: llama.cpp's queue orders by rank, then left index) while a
  pair has a rank; a final symbol that is not a token becomes the ``<0xXX>`` tokens of its UTF-8
  bytes, a byte whose token is missing being dropped. CONTROL and UNKNOWN tokens are special
  tokens, USER_DEFINED ones always split out. Gemma 4's HF tokenizer (``Replace(" ", "▁")``, no
  pre-tokenizer, BPE with byte fallback) gives the same ids on its vocabulary: no token joins a
  newline to another character, every newline token is what merging its text gives, no merge
  takes a byte token.
* ``bert`` -> WordPiece (``cpu_ref.wordpiece``) with BERT's uncased normaliser (GGUF has no
  normaliser keys; the converter writes uncased models). The converter stores "##x" as "x" and a
  word-initial "x" as "▁x" (bracketed tokens like "[CLS]" unchanged); we convert back.

What gputok's fast path must compute
------------------------------------
Nothing new: the file is read once on the host, and the tokenizer it describes runs on the fast
path of its family (the byte-level BPE stages; SentencePiece and WordPiece as in ``spm`` and
``wordpiece``; ``RefCharBpe`` as the SentencePiece-style tokenizer.json family, ``hf_spm``, with a
``Replace(" ", "▁")`` normaliser and byte fallback, its merges that join a newline to another
character dropped).

The reader is our own (no ``gguf`` package needed): little- or big-endian (detected from the
version field), versions 1-3 (v1 used 32-bit counts and lengths), metadata only.
"""

from __future__ import annotations

import struct
from pathlib import Path

import regex

from . import gguf_pre, hf, specials, spm, spm_proto, wordpiece

# GGUF value types (gguf.h's enum gguf_type): id -> struct code, for the scalars
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # uint8, int8, uint16, int16, uint32, int32, float32, bool, u/int64, f64
_STRING, _ARRAY = 8, 9
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = (
    1, 2, 3, 4, 5, 6)


class GGUFError(ValueError):
    """A GGUF file is malformed or holds a tokenizer gputok cannot read."""


def read_metadata(path: "str | Path") -> dict:
    """The key/value metadata of a GGUF file (tensors are not read).

    The layout, in the file's byte order: ``b"GGUF"``, the version (uint32), the tensor count
    and the key/value count (uint64; uint32 in version 1), then each pair: the key (a string),
    the value's type (uint32) and the value. A string is its byte length (uint64; uint32 in
    version 1) and that many bytes of UTF-8; an array is its element type (uint32), its length
    and the elements.

    >>> import gguf, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.gguf")
    >>> w = gguf.GGUFWriter(path, arch="llama"); w.add_tokenizer_model("llama")
    >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.close()
    >>> read_metadata(path)["tokenizer.ggml.model"]
    'llama'
    """
    data = Path(path).read_bytes()
    if data[:4] != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (magic {data[:4]!r}, expected b'GGUF')")
    # The version tells the byte order: a big-endian file's small version number reads as a
    # huge one little-endian.
    order = "<" if data[4:6] != b"\0\0" else ">"
    pos = 4

    def unpack(code: str):
        nonlocal pos
        fmt = struct.Struct(order + code)
        if pos + fmt.size > len(data):
            raise GGUFError(f"{path}: truncated at byte {pos} (file has {len(data)} bytes)")
        (v,) = fmt.unpack_from(data, pos)
        pos += fmt.size
        return v

    version = unpack("I")
    if version not in (1, 2, 3):
        raise GGUFError(f"{path}: unsupported GGUF version {version} (1, 2 and 3 are known)")
    length = "Q" if version >= 2 else "I"  # counts and string lengths

    def read(kind: int, what: str):
        nonlocal pos
        if kind in _SCALARS:
            return unpack(_SCALARS[kind])
        if kind == _ARRAY:
            element, n = unpack("I"), unpack(length)
            return [read(element, f"{what}[{i}]") for i in range(n)]
        if kind != _STRING:
            raise GGUFError(f"{path}: {what}: unknown value type {kind}")
        n = unpack(length)
        raw = data[pos:pos + n]
        if len(raw) < n:
            raise GGUFError(f"{path}: {what}: string of {n} bytes runs past the end")
        pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{path}: {what} is not UTF-8 ({e})") from None

    unpack(length)  # tensor count: not needed
    meta: dict = {}
    for _ in range(unpack(length)):
        key = read(_STRING, "key")
        meta[key] = read(unpack("I"), key)
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
    families = {"gpt2": _byte_level, "llama": _sentencepiece, "bert": _wordpiece}
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise GGUFError(f"{where}: no tokenizer.ggml.tokens")
    types = meta.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)  # absent: all
    if len(types) != len(tokens):
        raise GGUFError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    if model == "gemma4":
        return RefCharBpe(meta, tokens, types, where=where)
    if model not in families:
        raise GGUFError(f"{where}: tokenizer.ggml.model {model!r} is not supported; gputok "
                        "reads 'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE), 'gemma4' "
                        "(BPE on characters) and 'bert' (WordPiece)")
    return families[model](meta, tokens, types, where)


def _byte_level(meta, tokens, types, where):
    pre = gguf_pre.pre_tokenizer(meta.get("tokenizer.ggml.pre"), where=where)
    if pre.symbols == "chars":
        return RefCharBpe(meta, tokens, types, where=where)
    if pre.symbols != "bytes":
        raise GGUFError(f"{where}: tokenizer.ggml.pre {meta.get('tokenizer.ggml.pre')!r} "
                        f"(BPE on {pre.symbols}) is not supported")
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        raise GGUFError(f"{where}: a gpt2 tokenizer needs tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "special": k == TOKEN_CONTROL}
             for i, (t, k) in enumerate(zip(tokens, types))
             if k in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    # the tokenizer.json the file was converted from: the named regexes, each splitting every
    # piece of the one before, then the GPT-2 byte alphabet (no regex of its own)
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated"}
              for r in pre.regexes]
    to_bytes = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}  # a repeated token: first id
    return hf.RefHF({
        "added_tokens": added,
        "normalizer": {"type": pre.normalizer} if pre.normalizer else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": splits + [to_bytes]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges,
                  "ignore_merges": pre.ignore_merges},
    })


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
    """The WordPiece token the GGUF BERT converter spelled as ``token``.

    The converter marks word-initial tokens with "▁" and writes continuations without their
    "##"; bracketed tokens ([CLS], [SEP], ...) it leaves alone.

    >>> [unphantom(t) for t in ("▁play", "ing", "[CLS]")]
    ['play', '##ing', '[CLS]']
    """
    bracketed = token[:1] == "[" and token[-1:] == "]"
    if bracketed:
        return token
    word_initial = token[:1] == "\u2581"
    return token[1:] if word_initial else f"##{token}"


def _wordpiece(meta, tokens, types, where):
    vocab = [unphantom(t) for t in tokens]
    specials = tuple(t for t, k in zip(vocab, types) if k == TOKEN_CONTROL)
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    unk_token = vocab[unk] if unk is not None else "[UNK]"
    return wordpiece.RefWordPiece.from_vocab(vocab, specials_=specials, unk_token=unk_token)


class RefCharBpe:
    r"""llama.cpp's BPE on characters (Gemma 4), literally (see the module docstring).

    >>> meta = {"tokenizer.ggml.merges": ["a b", "▁ ab"]}
    >>> tok = RefCharBpe(meta, ["a", "b", "ab", "▁", "▁ab", "\n", "\n\n"], [1] * 7)
    >>> tok.encode_ordinary("ab ab\n\nba")
    [2, 4, 6, 1, 0]
    """

    def __init__(self, meta: dict, tokens: list, types: list, *, where: str = "GGUF"):
        merges = meta.get("tokenizer.ggml.merges")
        if merges is None:
            raise GGUFError(f"{where}: a BPE tokenizer needs tokenizer.ggml.merges")
        self.vocab: dict[str, int] = {}
        for i, t in enumerate(tokens):
            self.vocab.setdefault(t, i)
        self.rank: dict[tuple[str, str], int] = {}
        for i, m in enumerate(merges):
            cut = m.find(" ", 1)  # llama.cpp: the first space after the first character
            if cut > 0:
                self.rank.setdefault((m[:cut], m[cut + 1:]), i)
        self.special_tokens = {t: i for i, (t, k) in enumerate(zip(tokens, types))
                               if k in (TOKEN_CONTROL, TOKEN_UNKNOWN)}
        self.always = {t: i for i, (t, k) in enumerate(zip(tokens, types))
                       if k == TOKEN_USER_DEFINED}
        self.tokens = list(tokens)

    def encode_run(self, run: str) -> list[int]:
        """One run (all newlines, or none): the whole-newline-run rule, merging, byte tokens."""
        if run.strip("\n") == "" and run in self.vocab:
            return [self.vocab[run]]
        parts = list(run)
        while len(parts) > 1:
            best = None  # (rank, left index): THE COMPARATOR, lowest rank then leftmost
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        out = []
        for p in parts:
            if p in self.vocab:
                out.append(self.vocab[p])
                continue
            for b in p.encode("utf-8"):  # bytes without a token are dropped
                tok = self.vocab.get(f"<0x{b:02X}>")
                if tok is not None:
                    out.append(tok)
        return out

    def _encode_text(self, text: str) -> list[int]:
        text = text.replace(" ", "\u2581")
        return [i for run in regex.findall(r"\n+|[^\n]+", text) for i in self.encode_run(run)]

    def _encode(self, text: str, allowed: frozenset) -> list[int]:
        text = specials.fix_surrogates(text)
        out: list[int] = []
        for seg, is_tok in specials.split_specials(text, allowed | frozenset(self.always)):
            if is_tok:
                out.append(self.special_tokens.get(seg, self.always.get(seg)))
            else:
                out.extend(self._encode_text(seg))
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        return self._encode(text, frozenset())

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        specials.check_disallowed(text, disallowed)
        return self._encode(text, allowed)

    def decode_bytes(self, ids) -> bytes:
        """Token texts with "▁" as " ", ``<0xXX>`` tokens as their byte."""
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                out.append(int(t[3:5], 16))
            else:
                out += t.replace("\u2581", " ").encode("utf-8")
        return bytes(out)
