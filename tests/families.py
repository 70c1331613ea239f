"""Test-side builders for the tokenizer-family tests: models are made here, never downloaded.

* ``model_bytes``: a tiny protobuf *writer* for ``ModelProto`` (the mirror of
  ``cpu_ref.spm_proto``), so tests can hand sentencepiece models with exactly the pieces, scores
  and types an edge case needs. sentencepiece loads them with ``model_proto=``, which makes it the
  oracle for crafted models too.
* ``trained_model``: SentencePiece BPE models trained in-process on botchan.txt with the options a
  test wants (user-defined symbols, whitespace as suffix, other normalisers, byte fallback).
* ``spm_tokenizer_json``: an SPM-style HF ``tokenizer.json`` built from a ``.model``, the way
  HF's Llama converter shapes one (vocab = pieces, merges from splitting each piece in two, the
  legacy Prepend/Replace normaliser or a Metaspace pre-tokenizer). HF is the oracle for *that*
  file.
"""

from __future__ import annotations

import functools
import io
import struct

import testdata
from cpu_ref.spm_proto import (BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, load_model,
                               parse_model)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value) -> bytes:
    if isinstance(value, bool) or isinstance(value, int):
        return _varint(number << 3) + _varint(int(value))
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return _varint(number << 3 | 2) + _varint(len(data)) + data


_TRAINER_FIELDS = {"model_type": 3, "treat_whitespace_as_suffix": 24, "byte_fallback": 35,
                   "unk_id": 40, "bos_id": 41, "eos_id": 42, "pad_id": 43, "unk_surface": 44,
                   "unk_piece": 45}
_NORMALIZER_FIELDS = {"name": 1, "precompiled_charsmap": 2, "add_dummy_prefix": 3,
                      "remove_extra_whitespaces": 4, "escape_whitespaces": 5}


def model_bytes(pieces, *, trainer: dict | None = None, normalizer: dict | None = None) -> bytes:
    """Serialize a BPE ``ModelProto``: ``pieces`` are ``(piece, score, type)``."""
    trainer = {"model_type": 2, **(trainer or {})}
    normalizer = {"name": "identity", **(normalizer or {})}
    out = bytearray()
    for piece, score, kind in pieces:
        body = _field(1, piece) + _field(2, float(score)) + _field(3, kind)
        out += _field(1, body)
    out += _field(2, b"".join(_field(_TRAINER_FIELDS[k], v) for k, v in trainer.items()))
    out += _field(3, b"".join(_field(_NORMALIZER_FIELDS[k], v) for k, v in normalizer.items()))
    return bytes(out)


def byte_pieces() -> list[tuple[str, float, int]]:
    return [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]


# name -> SentencePieceTrainer options (model_type bpe, trained on botchan.txt)
TRAINED = {
    "user_defined": dict(vocab_size=800, user_defined_symbols=["ab", "abc", "bcd", "▁the", "[X]",
                                                                 "the cat", "<s>x", "ﬁ"],
                         control_symbols=["<ctl>"]),
    "ws_suffix": dict(vocab_size=700, treat_whitespace_as_suffix=True),
    "nfkc_cf_bytes": dict(vocab_size=700, normalization_rule_name="nfkc_cf", byte_fallback=True),
    "identity_keep_ws": dict(vocab_size=600, normalization_rule_name="identity",
                             remove_extra_whitespaces=False, add_dummy_prefix=False,
                             split_digits=True),
    "nmt_nfkc_cf_ws_pieces": dict(vocab_size=900, normalization_rule_name="nmt_nfkc_cf",
                                  allow_whitespace_only_pieces=True, split_by_whitespace=False,
                                  remove_extra_whitespaces=False),
}


@functools.lru_cache(maxsize=None)
def trained_model(name: str) -> bytes:
    """A serialized model trained in-process (deterministic: one thread, no shuffling)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(testdata.botchan_lines()), model_writer=buf, model_type="bpe",
        num_threads=1, shuffle_input_sentence=False, minloglevel=2, **TRAINED[name])
    return buf.getvalue()


def spm_oracle(model: bytes):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=model)


def model_source(name: str) -> bytes:
    """A pinned ``.model`` (``testdata.SPM_MODELS``) or a ``TRAINED`` one, as bytes."""
    if name in TRAINED:
        return trained_model(name)
    return testdata.family_path(name).read_bytes()


# ---- SPM-style tokenizer.json ------------------------------------------------------------

SHAPES = ("legacy", "metaspace", "metaspace_split")


def spm_tokenizer_json(model: bytes, *, shape: str = "legacy", byte_fallback: bool = True,
                       fuse_unk: bool = True) -> dict:
    """An HF tokenizer.json for a SentencePiece BPE model.

    Merges: every way to cut a NORMAL/USER_DEFINED piece into two pieces, ordered by the piece's
    score (highest first), then by the two halves' ids. Control pieces and unk are special added
    tokens (``normalized: false``). ``shape``: "legacy" = ``Prepend("▁")`` + ``Replace(" ",
    "▁")``; "metaspace" = a ``Metaspace`` pre-tokenizer with prepend_scheme "first" and no split;
    "metaspace_split" = "always" and split on "▁".
    """
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".model") as f:
        f.write(model)
        f.flush()
        proto = load_model(f.name)
    vocab = {p: i for i, (p, _, _) in enumerate(proto.pieces)}
    merges = []
    for piece, score, kind in proto.pieces:
        if kind not in (NORMAL, USER_DEFINED):
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab:
                merges.append((-score, vocab[a], vocab[b], a, b))
    merges.sort()
    unk = next((p for p, _, t in proto.pieces if t == UNKNOWN), None)
    cfg = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, (p, _, t) in enumerate(proto.pieces) if t in (CONTROL, UNKNOWN)],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": unk,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": fuse_unk, "byte_fallback": byte_fallback, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for *_, a, b in merges]},
    }
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    replace_back = {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}
    if shape == "legacy":
        cfg["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        cfg["decoder"] = {"type": "Sequence", "decoders": [
            replace_back, {"type": "ByteFallback"}, {"type": "Fuse"}, strip]}
    elif shape in ("metaspace", "metaspace_split"):
        split = shape == "metaspace_split"
        scheme = "always" if split else "first"
        cfg["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                                "prepend_scheme": scheme, "split": split}
        cfg["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme,
             "split": split}]}
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {SHAPES}")
    return cfg


def hf_oracle_for(cfg: dict):
    import json

    from tokenizers import Tokenizer

    return Tokenizer.from_str(json.dumps(cfg))



# ---- GGUF files written with the gguf package ---------------------------------------------

def _write_gguf(path, model: str, tokens, types, *, pre=None, merges=None, scores=None,
                add_space_prefix=None, unk_id=None):
    import gguf

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if unk_id is not None:
        w.add_unk_token_id(unk_id)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def gguf_from_tokenizer_json(cfg: dict, path, *, pre: str):
    """A ``gpt2`` GGUF from a byte-level BPE tokenizer.json (as convert_hf_to_gguf does)."""
    model = cfg["model"]
    by_id = {i: t for t, i in model["vocab"].items()}
    kinds = {}
    for t in cfg.get("added_tokens", []):
        by_id[t["id"]] = t["content"]
        kinds[t["id"]] = CONTROL if t.get("special") else USER_DEFINED
    tokens = [by_id[i] for i in range(max(by_id) + 1)]
    types = [kinds.get(i, NORMAL) for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return _write_gguf(path, "gpt2", tokens, types, pre=pre, merges=merges)


def gguf_from_tiktoken(ranks: dict[bytes, int], special_tokens: dict[str, int], path, *,
                       pre: str):
    """A ``gpt2`` GGUF from tiktoken ranks: tokens in the GPT-2 byte alphabet, and the merges
    recovered the usual way (a token's merge is what BPE with lower ranks only leaves of it)."""
    from cpu_ref.hf import BYTE_TO_UNICODE

    def show(b: bytes) -> str:
        return "".join(BYTE_TO_UNICODE[x] for x in b)

    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        parts = [tok[i:i + 1] for i in range(len(tok))]
        while len(parts) > 2:
            best = min(((ranks.get(parts[i] + parts[i + 1], 1 << 62), i)
                        for i in range(len(parts) - 1)))
            if best[0] >= rank:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise ValueError(f"token {tok!r} is not one merge of two lower-ranked tokens")
        merges.append(f"{show(parts[0])} {show(parts[1])}")
    by_id = {r: show(t) for t, r in ranks.items()}
    by_id.update({i: s for s, i in special_tokens.items()})
    n = max(by_id) + 1
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(n)]
    types = [CONTROL if i in special_tokens.values() else NORMAL if i in by_id else UNUSED
             for i in range(n)]
    return _write_gguf(path, "gpt2", tokens, types, pre=pre, merges=merges)


def gguf_from_spm(model: bytes, path):
    """A ``llama`` GGUF from a SentencePiece BPE model: pieces, scores, types, dummy prefix."""
    proto = parse_model(model)
    return _write_gguf(path, "llama", [p for p, _, _ in proto.pieces],
                       [t for _, _, t in proto.pieces], scores=[s for _, s, _ in proto.pieces],
                       add_space_prefix=proto.normalizer_spec.add_dummy_prefix)


def phantom(token: str) -> str:
    """The GGUF BERT converter's spelling: "##x" -> "x", word-initial "x" -> "▁x", "[X]" kept."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def gguf_from_wordpiece(cfg: dict, path):
    """A ``bert`` GGUF from a BERT tokenizer.json."""
    by_id = {i: t for t, i in cfg["model"]["vocab"].items()}
    special = {t["id"] for t in cfg.get("added_tokens", []) if t.get("special")}
    tokens = [phantom(by_id[i]) for i in range(len(by_id))]
    types = [CONTROL if i in special else NORMAL for i in range(len(tokens))]
    unk = cfg["model"]["vocab"][cfg["model"]["unk_token"]]
    return _write_gguf(path, "bert", tokens, types, unk_id=unk)


# ---- Unigram ------------------------------------------------------------------------------

# name -> SentencePieceTrainer options (model_type unigram, trained on botchan.txt)
UNIGRAM_TRAINED = {
    "uni_plain": dict(vocab_size=1000),
    "uni_ud_bytes": dict(vocab_size=800, byte_fallback=True, control_symbols=["<ctl>"],
                         user_defined_symbols=["ab", "the cat", "[X]", "ﬁ", "▁the"]),
    "uni_identity": dict(vocab_size=600, normalization_rule_name="identity",
                         remove_extra_whitespaces=False, add_dummy_prefix=False),
}


@functools.lru_cache(maxsize=None)
def trained_unigram(name: str) -> bytes:
    """A serialized Unigram model trained in-process (one thread, no shuffling)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(testdata.botchan_lines()), model_writer=buf,
        model_type="unigram", num_threads=1, shuffle_input_sentence=False, minloglevel=2,
        **UNIGRAM_TRAINED[name])
    return buf.getvalue()


def unigram_source(name: str) -> bytes:
    """A pinned Unigram ``.model`` ("botchan_unigram", "kyoto_unigram") or a trained one."""
    if name in UNIGRAM_TRAINED:
        return trained_unigram(name)
    return testdata.family_path(name).read_bytes()


def model_from_t5_gguf(meta: dict) -> bytes:
    """The sentencepiece model a ``t5`` GGUF was converted from (the oracle for the file):
    its pieces, scores and types, the charsmap and the whitespace flags."""
    pieces = list(zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"],
                      meta["tokenizer.ggml.token_type"]))
    charsmap = bytes(x & 0xFF for x in meta.get("tokenizer.ggml.precompiled_charsmap", ()))
    return model_bytes(pieces, trainer={"model_type": 1}, normalizer={
        "name": "nmt_nfkc" if charsmap else "identity", "precompiled_charsmap": charsmap,
        "add_dummy_prefix": bool(meta.get("tokenizer.ggml.add_space_prefix", False)),
        "remove_extra_whitespaces": bool(meta.get("tokenizer.ggml.remove_extra_whitespaces",
                                                  False))})


def gguf_from_spm_unigram(model: bytes, path, *, add_bos=None, add_eos=None):
    """A ``t5`` GGUF from a SentencePiece Unigram model, as convert_hf_to_gguf writes one."""
    import gguf

    proto = parse_model(model)
    ns = proto.normalizer_spec
    w = gguf.GGUFWriter(str(path), arch="t5")
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list([p for p, _, _ in proto.pieces])
    w.add_token_scores([s for _, s, _ in proto.pieces])
    w.add_token_types([t for _, _, t in proto.pieces])
    w.add_add_space_prefix(ns.add_dummy_prefix)
    w.add_remove_extra_whitespaces(ns.remove_extra_whitespaces)
    if ns.precompiled_charsmap:
        w.add_precompiled_charsmap(ns.precompiled_charsmap)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path
