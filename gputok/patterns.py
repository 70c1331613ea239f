"""Pre-tokenizer patterns gputok knows by name, and the short names users may pass for them.

These strings are data: gputok compares patterns by exact string to pick a vectorised scanner
or a device kernel, so each is spelled exactly as its oracle ships it (tiktoken's
``openai_public``, the ``pre_tokenizer`` of the HF tokenizer.json files). ``cpu_ref.patterns``
states the tiktoken ones independently; a test checks that the two agree.
"""

from __future__ import annotations

# GPT-2 / r50k_base / p50k_base, in tiktoken's possessive spelling
GPT2 = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
          r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")

O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# HF tokenizer.json pre-tokenizers (Split, behavior "isolated")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# HF ByteLevel(use_regex=true): the original GPT-2 spelling
BYTELEVEL = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

#: short names accepted wherever a pattern is asked for (``load``, the trainer, the CLI)
NAMED = {"gpt2": GPT2, "r50k": GPT2, "p50k": GPT2, "cl100k": CL100K, "o200k": O200K,
         "llama3": LLAMA3, "qwen2": QWEN2}


def resolve(name_or_regex: str) -> str:
    """A short name from ``NAMED``, or a regex returned unchanged.

    >>> resolve("cl100k") == CL100K
    True
    """
    return NAMED.get(name_or_regex, name_or_regex)
