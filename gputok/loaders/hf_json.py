"""Hugging Face ``tokenizer.json`` with a byte-level BPE model (GPT-2, Llama 3, Qwen2 families).

The file's pieces become gputok's: the normalizer and pre-tokenizer become an
``HFPretokenizer``; ``merges`` become the merge table (priority = index, merged id =
``vocab[a + b]``); added tokens marked ``special`` become special tokens under tiktoken's
allowed/disallowed contract, the others are always split out (they are vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cpu_ref.hf import UNICODE_TO_BYTE

from ..encoding import Encoding
from ..stages.merge import MergeTable
from ..stages.pretok import HFPretokenizer


def _fail(path, msg) -> ValueError:
    return ValueError(f"{path}: {msg}")


def load_hf(path: "str | Path", *, name: "str | None" = None) -> Encoding:
    path = Path(path)
    try:
        cfg = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as e:
        raise _fail(path, f"invalid JSON at line {e.lineno}: {e.msg}") from None
    model = cfg.get("model") or {}
    if model.get("type") != "BPE":
        raise _fail(path, f"model type {model.get('type')!r} is not supported (byte-level BPE only)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        if model.get(key):
            raise _fail(path, f"model.{key} is not supported")
    if model.get("byte_fallback"):
        raise _fail(path, "model.byte_fallback (sentencepiece-style BPE) is not supported yet")
    vocab: dict[str, int] = model["vocab"]
    decoder: dict[int, bytes] = {}
    for tok, i in vocab.items():
        try:
            decoder[i] = bytes(UNICODE_TO_BYTE[ch] for ch in tok)
        except KeyError:
            raise _fail(path, f"vocab entry {tok!r} is not in the byte-level alphabet; only "
                              "byte-level BPE models are supported") from None
    by_bytes = {b: i for i, b in decoder.items()}
    missing = [b for b in range(256) if bytes([b]) not in by_bytes]
    if missing:
        raise _fail(path, f"vocab lacks {len(missing)} single-byte tokens (byte-level BPE needs all)")
    byte_ids = np.array([by_bytes[bytes([b])] for b in range(256)], dtype=np.uint32)

    merges = []
    for k, m in enumerate(model.get("merges", [])):
        a, b = (m.split(" ", 1) if isinstance(m, str) else m)
        try:
            merges.append((vocab[a], vocab[b], vocab[a + b]))
        except KeyError as e:
            raise _fail(path, f"merges[{k}] = {m!r} refers to {e.args[0]!r}, not in vocab") from None

    specials, plain = {}, {}
    for t in cfg.get("added_tokens", []):
        if t.get("single_word"):
            raise _fail(path, f"added token {t['content']!r}: single_word is not supported")
        (specials if t.get("special") else plain)[t["content"]] = t["id"]
        if t["id"] in decoder and decoder[t["id"]] != t["content"].encode("utf-8"):
            pass  # an added token may shadow a vocab id with the same text; HF keeps the vocab bytes
    pretok = HFPretokenizer(cfg.get("normalizer"), cfg.get("pre_tokenizer"))
    whole = by_bytes if model.get("ignore_merges") else None
    return Encoding._from_parts(
        name or path.parent.name or path.stem, pretok=pretok, pat_str=pretok.pattern,
        decoder=decoder, special_tokens=specials, plain_added=plain,
        table_factory=lambda: MergeTable.from_merges(merges, byte_ids, whole), whole=whole,
        lstrip={t["content"] for t in cfg.get("added_tokens", []) if t.get("lstrip")},
        rstrip={t["content"] for t in cfg.get("added_tokens", []) if t.get("rstrip")})
