"""Vocabulary files -> ``Model``: one module per format, chosen by the file's content.

    tokenizer.json   hf_json.py        a JSON object with a "model" (byte-level BPE,
                     hf_families.py    SentencePiece-style BPE, WordPiece,
                     hf_models.py      Unigram, WordLevel)
    .tiktoken        tiktoken_file.py  lines of "<base64 token> <rank>" (optionally gzipped)
    .model           spm_model.py      a SentencePiece ModelProto (protobuf; BPE and Unigram)
    .gguf            gguf.py           llama.cpp's model file (its tokenizer metadata), and
                     gguf_pre.py       the pre-tokenizers its tokenizer.ggml.pre names
    tokenizer.bin    llama2c.py        llama2.c's tokenizer (records of score, length, bytes)
    a directory      directory.py      tokenizer.json / tokenizer.model + tokenizer_config.json
                                       + special_tokens_map.json, as AutoTokenizer reads them

Loaders are the one place that reads a file's kind: each builds a ``Model`` from components
(``gputok/components``); ``post.py`` turns each format's rule for BOS/EOS/[CLS]/[SEP] into the
model's post-processor.
"""

from __future__ import annotations

import gc
from pathlib import Path

from .. import patterns
from ..model import Model


def sniff(path: Path, head: bytes) -> str:
    """The format of a file from its first bytes: "hf_json" | "tiktoken" | "spm_model" |
    "gguf" | "llama2c"; else ``ValueError`` saying what the file looks like."""
    from .llama2c import looks_like_llama2c
    from .spm_model import looks_like_model

    if not head:
        raise ValueError(f"{path}: the file is empty (expected a tokenizer.json, a .tiktoken "
                         "ranks file, a SentencePiece .model, a .gguf or a llama2.c "
                         "tokenizer.bin)")
    if head[:2] == b"\x1f\x8b":
        return "tiktoken"
    if head[:4] == b"GGUF":
        return "gguf"
    if looks_like_model(head):
        return "spm_model"
    if looks_like_llama2c(head):
        return "llama2c"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"{":
        return "hf_json"
    if text[:1] == b"[":
        raise ValueError(f"{path}: a JSON array, not a tokenizer.json (which is a JSON object "
                         "with a 'model' field)")
    first = text.split(b"\n", 1)[0].split()
    if len(first) == 2 and first[1].isdigit():
        return "tiktoken"
    raise ValueError(f"{path}: not a vocabulary file gputok reads (expected a HF tokenizer.json, "
                     f"a .tiktoken file of '<base64 token> <rank>' lines, a SentencePiece .model "
                     f"or a .gguf); it starts with {head[:40]!r}")


def load_model(path, *, pat_str: "str | None" = None,
               special_tokens: "dict[str, int] | None" = None,
               name: "str | None" = None) -> Model:
    """The Model of a vocabulary file (see ``gputok.load``)."""
    # A loader makes a few million small objects (dicts of 100K-500K tokens, merge lists) that
    # all live on: the cyclic collector's full passes over them were 40-60% of a large load
    # (Gemma 4's GGUF: 22 s -> 9 s without them). They are paused for the load, as they were.
    was = gc.isenabled()
    gc.disable()
    try:
        return _load_model(path, pat_str=pat_str, special_tokens=special_tokens, name=name)
    finally:
        if was:
            gc.enable()


def _load_model(path, *, pat_str, special_tokens, name) -> Model:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such vocabulary file: {path}")
    if path.is_dir():  # a model directory, as AutoTokenizer reads it
        from .directory import load_directory

        return load_directory(path, lambda p, n: load_model(
            p, pat_str=pat_str, special_tokens=special_tokens, name=name or n), name=name)
    with open(path, "rb") as f:
        head = f.read(256)
    kind = sniff(path, head)
    if kind in ("spm_model", "gguf", "llama2c"):
        if pat_str is not None or special_tokens is not None:
            raise ValueError(f"{path}: pat_str and special_tokens come from the file itself; do "
                             "not pass them")
        if kind == "gguf":
            from .gguf import load_gguf

            return load_gguf(path, name=name)
        if kind == "llama2c":
            from .llama2c import load_llama2c

            return load_llama2c(path, name=name)
        from .spm_model import load_spm

        return load_spm(path, name=name)
    if kind == "hf_json":
        from .hf_json import load_hf

        if pat_str is not None or special_tokens is not None:
            raise ValueError(f"{path}: pat_str and special_tokens come from the tokenizer.json "
                             "itself; do not pass them")
        return load_hf(path, name=name)
    from .tiktoken_file import read_ranks_digest, read_sidecar

    meta = read_sidecar(path) or {}
    pat = pat_str or meta.get("pat_str")
    if pat is None:
        raise ValueError(f"{path}: a .tiktoken file has no pre-tokenizer pattern; pass pat_str= "
                         f"(a regex, or one of {', '.join(patterns.NAMED)}), or put a "
                         f"{path.name}.json sidecar with 'pat_str' next to it")
    specials = special_tokens if special_tokens is not None else meta.get("special_tokens", {})
    if not isinstance(specials, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in specials.items()):
        raise ValueError(f"{path}: special_tokens must map strings to int ids")
    ranks, digest = read_ranks_digest(path)
    try:
        return Model.from_ranks(name or meta.get("name") or path.name.split(".")[0],
                                pat_str=patterns.resolve(pat), ranks=ranks, specials=specials,
                                digest=digest)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
