"""GGUF files (llama.cpp's model format) -> ``Model``: the tokenizer in their metadata.

The header is ``b"GGUF"``, a uint32 version (1-3; a big-endian file is recognised by its byte-
swapped version), the tensor count and the metadata count (uint64; uint32 in version 1), then
key/value pairs: a string key, a uint32 value type, the value (scalars, strings = length +
UTF-8, arrays = element type + count + elements). Only the metadata is read, in blocks: a 70 GB
model file costs the few MB of its vocabulary. No ``gguf`` package is needed.

The tokenizer keys and how each family is built:

    tokenizer.ggml.model   "gpt2"  -> byte-level BPE, HF rule: tokens (GPT-2 byte alphabet),
                                      ``merges``, the ``pre`` name's regexes (``gguf_pre``);
                                      CONTROL tokens are special, USER_DEFINED ones always cut
                           "llama" -> SentencePiece BPE: tokens, ``scores``, ``token_type``;
                                      identity normaliser, dummy prefix iff
                                      ``add_space_prefix``; byte fallback iff BYTE tokens exist
                           "t5"    -> SentencePiece Unigram: as "llama", with scores as
                                      piece scores and ``precompiled_charsmap``
                           "gemma4" -> BPE on characters (``gguf_chars.py``), as are gpt2
                                      files whose ``pre`` runs on characters
                           "bert"  -> WordPiece, BERT's uncased normaliser; the converter's
                                      spelling ("▁x" word-initial, "x" continuation) undone
    token_type             1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE

A charsmap stored in a llama file is ignored (llama.cpp ignores it too). Where llama.cpp departs
from sentencepiece (merging CONTROL pieces, keeping UNUSED ones), gputok keeps sentencepiece's
rules: the file came from a sentencepiece model (``cpu_ref/gguf.py`` has the details).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
from pathlib import Path

from ..model import Model
from .gguf_types import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED  # noqa: F401
from .post import gguf_post

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
_BLOCK = 1 << 20


class _Reader:
    """Little reads from a file in 1 MB blocks."""

    def __init__(self, f, where: str):
        self.f, self.where = f, where
        self.buf, self.pos = b"", 0
        self.end = "<"
        self.wide = True
        self.h = hashlib.sha256()
        self.hashed = 0  # bytes read so far (all hashed): the metadata digest covers them

    def _need(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            return
        rest = self.buf[self.pos:]
        more = self.f.read(max(_BLOCK, n - len(rest)))
        self.h.update(more)
        self.hashed += len(more)
        self.buf, self.pos = rest + more, 0
        if len(self.buf) < n:
            raise ValueError(f"{self.where}: truncated GGUF metadata (file ends early)")

    def take(self, code: str):
        size = struct.calcsize(code)
        self._need(size)
        (v,) = struct.unpack_from(self.end + code, self.buf, self.pos)
        self.pos += size
        return v

    def count(self) -> int:
        return self.take("Q" if self.wide else "I")

    def string(self, what: str) -> str:
        n = self.count()
        if n > 1 << 31:
            raise ValueError(f"{self.where}: {what}: a string of {n} bytes?")
        self._need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.where}: {what} is not UTF-8 ({e.reason} at byte "
                             f"{e.start})") from None

    def strings(self, n: int, what: str) -> list:
        """An array of ``n`` strings: lengths walked in one loop over the buffer (refilled as
        it runs out), the texts decoded at the end. Performance notes: a ``string()`` call per
        element cost ~6 us (777K of them in Gemma 4's vocabulary and merges: 5 s); this loop
        ~0.4 us."""
        size = 8 if self.wide else 4
        unpack = struct.Struct(self.end + ("Q" if self.wide else "I")).unpack_from
        raw = []
        buf, pos = self.buf, self.pos
        for _ in range(n):
            if pos + size > len(buf):
                self.pos = pos
                self._need(size)
                buf, pos = self.buf, self.pos
            (k,) = unpack(buf, pos)
            pos += size
            if pos + k > len(buf):
                if k > 1 << 31:
                    raise ValueError(f"{self.where}: {what}: a string of {k} bytes?")
                self.pos = pos
                self._need(k)
                buf, pos = self.buf, self.pos
            raw.append(buf[pos:pos + k])
            pos += k
        self.pos = pos
        try:
            return [r.decode("utf-8") for r in raw]
        except UnicodeDecodeError:
            i = next(i for i, r in enumerate(raw) if not _is_utf8(r))
            raise ValueError(f"{self.where}: {what}[{i}] is not UTF-8: {raw[i][:40]!r}") from None

    def value(self, kind: int, what: str):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            sub, n = self.take("I"), self.count()
            if sub in _SCALARS:  # one unpack for the whole array
                size = struct.calcsize(_SCALARS[sub])
                self._need(size * n)
                vals = list(struct.unpack_from(f"{self.end}{n}{_SCALARS[sub]}", self.buf,
                                               self.pos))
                self.pos += size * n
                return vals
            if sub == _STRING:
                return self.strings(n, what)
            return [self.value(sub, f"{what}[{i}]") for i in range(n)]
        raise ValueError(f"{self.where}: {what}: unknown GGUF value type {kind}")


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def read_metadata(path: "str | Path") -> tuple[dict, str]:
    """(metadata key -> value, a digest of the metadata bytes) of a GGUF file.

    >>> read_metadata("model.gguf")[0]["tokenizer.ggml.model"]  # doctest: +SKIP
    'llama'
    """
    meta, digest, _ = _read_metadata(path)
    return meta, digest


def _read_metadata(path) -> tuple[dict, str, int]:
    """``read_metadata`` and how many bytes from the start the digest covers."""
    with open(path, "rb") as f:
        r = _Reader(f, str(path))
        r._need(8)
        if r.buf[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (magic {r.buf[:4]!r}, expected b'GGUF')")
        r.pos = 4
        version = r.take("I")
        if version > 0xFFFF:  # a big-endian file read as little-endian
            r.end = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (1, 2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version} (1, 2, 3 are known)")
        r.wide = version >= 2
        r.count()  # tensors: not read
        meta = {}
        for _ in range(r.count()):
            key = r.string("key")
            meta[key] = r.value(r.take("I"), key)
        return meta, r.h.hexdigest()[:32], r.hashed


# ---- the digest of a file seen before, without parsing its metadata -----------------------------
#
# A GGUF's model-cache key is the digest of its metadata bytes, which parsing gives (~1 s for
# Gemma 4's 262K tokens and 515K merges). The first load records, under a key made of the file's
# size, modification time and first 4 KB, how many bytes that digest covers and the digest; a
# later load hashes those bytes again (~20 ms for 15 MB) and uses the digest only when it is the
# same: an entry for a file that changed is never trusted, only a hint where to look.

_HEAD = 4096


def _hint_path(path: Path) -> "str | None":
    from .._cache import cache_dir

    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    h = hashlib.sha256(b"gputok gguf hint 1\0%d\0%d\0" % (st.st_size, st.st_mtime_ns))
    h.update(head)
    return os.path.join(cache_dir("gguf"), h.hexdigest()[:40] + ".hint")


def _known_digest(path: Path, hint: "str | None") -> "str | None":
    """The metadata digest of a file seen before, checked against its bytes; else None."""
    if hint is None:
        return None
    try:
        with open(hint, "rb") as f:
            covered, digest = f.read(200).decode("ascii").split()
        covered = int(covered)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            left = covered
            while left > 0:
                block = f.read(min(left, 1 << 22))
                if not block:
                    break
                h.update(block)
                left -= len(block)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return digest if left == 0 and h.hexdigest()[:32] == digest else None


def load_gguf(path: "str | Path", *, name: "str | None" = None) -> Model:
    """``gputok.load("model.gguf")``: the tokenizer of a GGUF file."""
    from . import model_cache
    from .._cache import write_atomic

    path = Path(path)
    hint = _hint_path(path) if model_cache.enabled() else None
    known = _known_digest(path, hint)
    if known is not None:
        model = model_cache.get(model_cache.make_key("gguf", known, name, path.stem))
        if model is not None:
            return model
    meta, digest, covered = _read_metadata(path)
    if hint is not None and digest != known:
        write_atomic(hint, f"{covered} {digest}".encode("ascii"))
    key = model_cache.make_key("gguf", digest, name, path.stem)
    return model_cache.cached(key, lambda: model_from_metadata(meta, name or path.stem,
                                                               where=str(path), digest=digest))


def model_from_metadata(meta: dict, name: str, *, where: str = "GGUF",
                        digest: "str | None" = None) -> Model:
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{where}: no tokenizer.ggml.tokens (a GGUF file without a tokenizer)")
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    if kind == "gemma4":
        from .gguf_chars import char_level

        model = _hf_model(char_level(meta, tokens, types, where), name, where, digest)
    elif kind == "gpt2":
        model = _byte_level(meta, tokens, types, name, where, digest)
    elif kind in ("llama", "t5"):
        model = _sentencepiece(meta, tokens, types, name, where, digest, unigram=kind == "t5")
    elif kind == "bert":
        model = _wordpiece(meta, tokens, types, name, where, digest)
    else:
        raise ValueError(f"{where}: tokenizer.ggml.model {kind!r} is not supported; gputok reads "
                         "'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE), 't5' "
                         "(SentencePiece Unigram), 'gemma4' (BPE on characters) and 'bert' "
                         "(WordPiece)")
    # what llama.cpp adds with add_special (BOS, EOS, SEP), for add_special_tokens=True
    return dataclasses.replace(model, post=gguf_post(meta, len(tokens)))


def _hf_model(cfg: dict, name: str, where: str, digest):
    from .hf_json import _Fail, _model

    try:
        return _model(cfg, name, digest or "")
    except _Fail as e:
        raise ValueError(f"{where}: {e}") from None


def _byte_level(meta, tokens, types, name, where, digest) -> Model:
    from .gguf_pre import pre_tokenizer

    pre = pre_tokenizer(meta.get("tokenizer.ggml.pre"), where=where)
    if pre.symbols == "chars":
        from .gguf_chars import char_level

        return _hf_model(char_level(meta, tokens, types, where), name, where, digest)
    if pre.symbols != "bytes":
        raise ValueError(f"{where}: tokenizer.ggml.pre {meta.get('tokenizer.ggml.pre')!r} (BPE "
                         f"on {pre.symbols}, llama.cpp's whitespace tokenizer) is not supported")
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        raise ValueError(f"{where}: a gpt2 tokenizer needs tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "special": k == CONTROL}
             for i, (t, k) in enumerate(zip(tokens, types)) if k in (CONTROL, USER_DEFINED)]
    vocab: dict = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    cfg = {
        "added_tokens": added,
        "normalizer": {"type": pre.normalizer} if pre.normalizer else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated"}
              for r in pre.regexes),
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges,
                  "ignore_merges": pre.ignore_merges},
    }
    return _hf_model(cfg, name, where, digest)


def _sentencepiece(meta, tokens, types, name, where, digest, unigram: bool = False) -> Model:
    """A llama (BPE) or t5 (Unigram) file: the SentencePiece model it was converted from, with
    llama.cpp's defaults where a key is absent (t5: no dummy prefix, no whitespace collapsing;
    its charsmap from ``tokenizer.ggml.precompiled_charsmap``)."""
    from .spm_model import SpmSpec, model_from_spec

    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    if len(scores) != len(tokens):
        raise ValueError(f"{where}: {len(scores)} scores for {len(tokens)} tokens")
    charsmap = meta.get("tokenizer.ggml.precompiled_charsmap") if unigram else None
    spec = SpmSpec(pieces=list(tokens), scores=[float(s) for s in scores],
                   types=unk_types(meta, types), model_type=1 if unigram else 2,
                   byte_fallback=BYTE in types, normalizer_name="identity",
                   charsmap=bytes(x & 0xFF for x in charsmap) if charsmap else b"",
                   add_dummy_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix",
                                                  not unigram)),
                   remove_extra_whitespaces=unigram and bool(meta.get(
                       "tokenizer.ggml.remove_extra_whitespaces", False)))
    return model_from_spec(spec, name, where=where, digest=digest)


def unk_types(meta: dict, types: list) -> list:
    """The token types of a llama GGUF with one UNKNOWN piece, its unk: llama.cpp's unk is
    ``tokenizer.ggml.unknown_token_id`` (else the first UNKNOWN token), whatever the token's type
    (Phi-3's converter typed "<unk>" CONTROL and its 53 padding tokens UNKNOWN). llama.cpp treats
    the other UNKNOWN tokens as control tokens (matched in text only where specials are
    parsed, never a merge result), so they become CONTROL; a sentencepiece model may hold one
    UNKNOWN piece only ("unk is already defined")."""
    out = [int(k) if 1 <= int(k) <= 6 else NORMAL for k in types]
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    if not (isinstance(unk, int) and 0 <= unk < len(out)):
        unk = next((i for i, k in enumerate(out) if k == UNKNOWN), None)
    out = [CONTROL if k == UNKNOWN else k for k in out]
    if unk is not None:
        out[unk] = UNKNOWN
    return out


def unphantom(token: str) -> str:
    """Undo the GGUF BERT converter's spelling: "▁x" -> "x", "x" -> "##x", "[X]" kept.

    >>> [unphantom(t) for t in ("▁play", "ing", "[CLS]")]
    ['play', '##ing', '[CLS]']
    """
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[1:] if token.startswith("\u2581") else "##" + token


def _wordpiece(meta, tokens, types, name, where, digest) -> Model:
    vocab_list = [unphantom(t) for t in tokens]
    vocab: dict = {}
    for i, t in enumerate(vocab_list):
        vocab.setdefault(t, i)
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    unk_token = vocab_list[unk] if unk is not None and 0 <= unk < len(vocab_list) else "[UNK]"
    cfg = {
        "added_tokens": [{"id": vocab[t], "content": t, "special": True}
                         for t, k in zip(vocab_list, types) if k == CONTROL and vocab[t] >= 0],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": unk_token, "vocab": vocab,
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100},
    }
    return _hf_model(cfg, name, where, digest)
