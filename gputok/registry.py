"""Named encodings (bundled, offline) and ``load(path)`` for vocabulary files."""

from __future__ import annotations

import functools
from pathlib import Path

from . import patterns
from .encoding import Encoding

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"


def _bundled_ranks(stem: str) -> tuple[dict[bytes, int], str]:
    """Ranks from ``gputok/data/<stem>.tiktoken.gz``, checked against SHA256SUMS, and their
    digest (the file's sha256: it names cached tables). After the first parse they come from
    the ranks cache (``ranks_cache.py``: milliseconds instead of ~0.4 s for o200k),
    keyed by the bundled file's bytes."""
    import gzip
    import hashlib
    from importlib import resources

    from . import ranks_cache
    from .loaders.tiktoken_file import read_ranks

    data_dir = resources.files("gputok") / "data"
    raw_file = (data_dir / f"{stem}.tiktoken.gz").read_bytes()
    key = ranks_cache.source_key(raw_file)
    table = ranks_cache.load(key)
    if table is not None:
        return table, table.digest
    raw = gzip.decompress(raw_file)
    sums = dict(line.split()[::-1] for line in
                (data_dir / "SHA256SUMS").read_text().splitlines() if line.strip())
    expected = sums.get(f"{stem}.tiktoken.gz") or sums.get(f"{stem}.tiktoken")
    actual = hashlib.sha256(raw).hexdigest()
    if expected != actual:
        raise RuntimeError(f"bundled vocabulary {stem} is corrupt (sha256 {actual}, expected "
                           f"{expected}); reinstall gputok")
    ranks = read_ranks(f"gputok/data/{stem}.tiktoken.gz", raw)
    table = ranks_cache.store(key, ranks, actual[:32])
    return (ranks if table is None else table), actual[:32]


def _named(name: str, pat_str: str, stem: str, specials: dict, *, extra: "dict | None" = None,
           n_vocab: "int | None" = None) -> Encoding:
    from .model import Model

    ranks, digest = _bundled_ranks(stem)
    if extra:  # derived vocabularies (p50k) get their own digest
        ranks = {**ranks, **extra}
        digest = f"{digest}+{len(extra)}x{max(extra.values())}"
    model = Model.from_ranks(name, pat_str=pat_str, ranks=ranks, specials=specials,
                             digest=digest)
    if n_vocab is not None and model.max_token_value != n_vocab - 1:
        raise RuntimeError(f"{name}: expected {n_vocab} tokens, got {model.max_token_value + 1}")
    return Encoding.from_model(model)


# p50k_base is r50k_base plus 24 tokens for runs of 2..25 spaces (ranks 50257..50280)
_P50K_SPACES = {b" " * n: 50255 + n for n in range(2, 26)}


def _r50k(name: str) -> Encoding:
    return _named(name, patterns.GPT2, "r50k_base", {ENDOFTEXT: 50256}, n_vocab=50257)


def _p50k_base() -> Encoding:
    return _named("p50k_base", patterns.GPT2, "r50k_base", {ENDOFTEXT: 50256},
                  extra=_P50K_SPACES, n_vocab=50281)


def _p50k_edit() -> Encoding:
    return _named("p50k_edit", patterns.GPT2, "r50k_base",
                  {ENDOFTEXT: 50256, FIM_PREFIX: 50281, FIM_MIDDLE: 50282, FIM_SUFFIX: 50283},
                  extra=_P50K_SPACES)


def _cl100k_base() -> Encoding:
    return _named("cl100k_base", patterns.CL100K, "cl100k_base",
                  {ENDOFTEXT: 100257, FIM_PREFIX: 100258, FIM_MIDDLE: 100259,
                   FIM_SUFFIX: 100260, ENDOFPROMPT: 100276})


def _o200k_base() -> Encoding:
    return _named("o200k_base", patterns.O200K, "o200k_base",
                  {ENDOFTEXT: 199999, ENDOFPROMPT: 200018})


def _o200k_harmony() -> Encoding:
    specials = {ENDOFTEXT: 199999, ENDOFPROMPT: 200018, "<|startoftext|>": 199998,
                "<|reserved_200000|>": 200000, "<|reserved_200001|>": 200001,
                "<|return|>": 200002, "<|constrain|>": 200003, "<|reserved_200004|>": 200004,
                "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
                "<|message|>": 200008, "<|reserved_200009|>": 200009,
                "<|reserved_200010|>": 200010, "<|reserved_200011|>": 200011, "<|call|>": 200012}
    specials.update({f"<|reserved_{i}|>": i for i in range(200013, 201088)})
    return _named("o200k_harmony", patterns.O200K, "o200k_base", specials)


_CONSTRUCTORS = {
    "gpt2": lambda: _r50k("gpt2"),
    "r50k_base": lambda: _r50k("r50k_base"),
    "p50k_base": _p50k_base,
    "p50k_edit": _p50k_edit,
    "cl100k_base": _cl100k_base,
    "o200k_base": _o200k_base,
    "o200k_harmony": _o200k_harmony,
}


def list_encoding_names() -> list[str]:
    """Names accepted by ``get_encoding``.

    >>> "cl100k_base" in gputok.list_encoding_names()
    True
    """
    return list(_CONSTRUCTORS)


@functools.lru_cache(maxsize=None)
def get_encoding(encoding_name: str) -> Encoding:
    """A named encoding, from vocabularies bundled in the package (no network).

    >>> gputok.get_encoding("o200k_base").encode("hello world")
    [24912, 2375]
    """
    if not isinstance(encoding_name, str) or encoding_name not in _CONSTRUCTORS:
        raise ValueError(f"unknown encoding {encoding_name!r}. Known encodings: "
                         f"{', '.join(_CONSTRUCTORS)}. For a vocabulary file use gputok.load(path).")
    return _CONSTRUCTORS[encoding_name]()


def load(path: "str | Path", *, pat_str: "str | None" = None,
         special_tokens: "dict[str, int] | None" = None, name: "str | None" = None) -> Encoding:
    """Load a vocabulary file, recognised by content: a HF ``tokenizer.json`` (BPE, WordPiece,
    Unigram, WordLevel), a ``.tiktoken`` ranks file, a SentencePiece ``.model`` (BPE, Unigram), a
    ``.gguf``, or a model directory (read as ``AutoTokenizer`` reads it: ``loaders/directory.py``).
    A ``.tiktoken`` file carries no pattern: pass ``pat_str`` (a
    regex or one of ``gpt2``/``cl100k``/``o200k``/``llama3``/``qwen2``), or keep a
    ``<file>.json`` sidecar with ``pat_str`` and ``special_tokens`` next to it (``gputok train``
    writes one). A malformed file raises ``ValueError`` naming the file (and line or field).

    >>> enc = gputok.load("tokenizer.json")  # doctest: +SKIP
    """
    from .loaders import load_model

    return Encoding.from_model(load_model(path, pat_str=pat_str, special_tokens=special_tokens,
                                          name=name))
