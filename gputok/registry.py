"""Named encodings (bundled, offline) and ``load(path)`` for vocabulary files."""

from __future__ import annotations

import functools
import gzip
import hashlib
from importlib import resources
from pathlib import Path

from cpu_ref import patterns

from .encoding import Encoding
from .loaders.tiktoken_file import read_ranks, read_sidecar

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"


def _bundled_ranks(stem: str) -> dict[bytes, int]:
    """Ranks from ``gputok/data/<stem>.tiktoken.gz``, checked against SHA256SUMS."""
    data_dir = resources.files("gputok") / "data"
    raw = gzip.decompress((data_dir / f"{stem}.tiktoken.gz").read_bytes())
    sums = dict(line.split()[::-1] for line in
                (data_dir / "SHA256SUMS").read_text().splitlines() if line.strip())
    expected = sums.get(f"{stem}.tiktoken.gz") or sums.get(f"{stem}.tiktoken")
    actual = hashlib.sha256(raw).hexdigest()
    if expected != actual:
        raise RuntimeError(f"bundled vocabulary {stem} is corrupt (sha256 {actual}, expected "
                           f"{expected}); reinstall gputok")
    return read_ranks(f"gputok/data/{stem}.tiktoken.gz", raw)


def _r50k(name: str) -> Encoding:
    return Encoding(name, pat_str=patterns.GPT2_PATTERN, mergeable_ranks=_bundled_ranks("r50k_base"),
                    special_tokens={ENDOFTEXT: 50256}, explicit_n_vocab=50257)


def _p50k_ranks() -> dict[bytes, int]:
    # p50k_base is r50k_base plus 24 tokens for runs of 2..25 spaces (ranks 50257..50280)
    ranks = dict(_bundled_ranks("r50k_base"))
    ranks.update({b" " * n: 50255 + n for n in range(2, 26)})
    return ranks


def _p50k_base() -> Encoding:
    return Encoding("p50k_base", pat_str=patterns.GPT2_PATTERN, mergeable_ranks=_p50k_ranks(),
                    special_tokens={ENDOFTEXT: 50256}, explicit_n_vocab=50281)


def _p50k_edit() -> Encoding:
    return Encoding("p50k_edit", pat_str=patterns.GPT2_PATTERN, mergeable_ranks=_p50k_ranks(),
                    special_tokens={ENDOFTEXT: 50256, FIM_PREFIX: 50281, FIM_MIDDLE: 50282,
                                    FIM_SUFFIX: 50283})


def _cl100k_base() -> Encoding:
    return Encoding("cl100k_base", pat_str=patterns.CL100K_PATTERN,
                    mergeable_ranks=_bundled_ranks("cl100k_base"),
                    special_tokens={ENDOFTEXT: 100257, FIM_PREFIX: 100258, FIM_MIDDLE: 100259,
                                    FIM_SUFFIX: 100260, ENDOFPROMPT: 100276})


def _o200k_base() -> Encoding:
    return Encoding("o200k_base", pat_str=patterns.O200K_PATTERN,
                    mergeable_ranks=_bundled_ranks("o200k_base"),
                    special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018})


def _o200k_harmony() -> Encoding:
    specials = {ENDOFTEXT: 199999, ENDOFPROMPT: 200018, "<|startoftext|>": 199998,
                "<|reserved_200000|>": 200000, "<|reserved_200001|>": 200001,
                "<|return|>": 200002, "<|constrain|>": 200003, "<|reserved_200004|>": 200004,
                "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
                "<|message|>": 200008, "<|reserved_200009|>": 200009,
                "<|reserved_200010|>": 200010, "<|reserved_200011|>": 200011, "<|call|>": 200012}
    specials.update({f"<|reserved_{i}|>": i for i in range(200013, 201088)})
    return Encoding("o200k_harmony", pat_str=patterns.O200K_PATTERN,
                    mergeable_ranks=_bundled_ranks("o200k_base"), special_tokens=specials)


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
    if encoding_name not in _CONSTRUCTORS:
        raise ValueError(f"unknown encoding {encoding_name!r}. Known encodings: "
                         f"{', '.join(_CONSTRUCTORS)}. For a vocabulary file use gputok.load(path).")
    return _CONSTRUCTORS[encoding_name]()


def load(path: "str | Path", *, pat_str: "str | None" = None,
         special_tokens: "dict[str, int] | None" = None, name: "str | None" = None) -> Encoding:
    """Load a vocabulary file: a HF ``tokenizer.json`` (byte-level BPE) or a ``.tiktoken`` ranks
    file. A ``.tiktoken`` file carries no pattern: pass ``pat_str`` (a regex or one of
    ``gpt2``/``cl100k``/``o200k``), or keep a ``<file>.json`` sidecar with ``pat_str`` and
    ``special_tokens`` next to it (``gputok train`` writes one).

    >>> enc = gputok.load("tokenizer.json")  # doctest: +SKIP
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such vocabulary file: {path}")
    head = path.read_bytes()[:64].lstrip()
    if head.startswith(b"{"):
        from .loaders.hf_json import load_hf

        return load_hf(path, name=name)
    meta = read_sidecar(path) or {}
    pat = pat_str or meta.get("pat_str")
    if pat is None:
        raise ValueError(f"{path}: a .tiktoken file has no pre-tokenizer pattern; pass pat_str= "
                         f"(a regex, or one of {', '.join(patterns.NAMED_PATTERNS)})")
    specials = special_tokens if special_tokens is not None else meta.get("special_tokens", {})
    return Encoding(name or meta.get("name") or path.name.split(".")[0],
                    pat_str=patterns.resolve_pattern(pat), mergeable_ranks=read_ranks(path),
                    special_tokens=specials)
