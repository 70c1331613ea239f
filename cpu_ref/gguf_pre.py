"""The pre-tokenizers named by GGUF's ``tokenizer.ggml.pre`` (for ``tokenizer.ggml.model = gpt2``).

A GGUF file does not carry its pre-tokenizer: the converter hashes what the source HF tokenizer
does to a test string and writes a *name*; readers map the name back to regexes. The names and
what they mean are llama.cpp's (``llama-vocab.cpp``). Each entry is a list of regexes applied in
sequence, each one splitting every piece the previous one produced, keeping both the matches and
the gaps between them (HF's ``Split(..., behavior="isolated")``), then the GPT-2 byte-level
mapping. ``ignore_merges``: a piece that is a whole token is emitted as one (llama.cpp sets it for
the Llama 3 family, as their tokenizer.json do).

Where llama.cpp keeps the tokenizer.json's original regex in a comment and runs an adaptation
(its engine has no ``(?i:...)``), we run the original: that is what the model was trained with and
what HF does. The adaptations differ only in corners: ``(?i:'s)`` also matches ``'ſ`` (U+017F) and
``'K``-style case folds; tekken's and gpt-4o's letter classes ``(?=\\p{L})[^a-z]`` also take
lower-case non-ASCII letters. Patterns are run by Python's ``regex`` (see ``cpu_ref.patterns``
for the engine differences that matter and how ``$`` is read).

Qwen's tokenizer.json files NFC-normalise before splitting; llama.cpp skips that, so its ids for
text that is not in NFC (Bengali or Devanagari with decomposed vowel signs, for instance) differ
from the model's own tokenizer. We keep the NFC step for the Qwen names (``normalizer``): a GGUF
then gives the ids of the tokenizer it was converted from.

What gputok's fast path must compute
------------------------------------
Exactly what the regex stage computes for tokenizer.json files: piece offsets. A list of several
regexes is a sequence of ``Split`` stages; the existing pre-tokenizer kernels run one stage per
regex over the previous stage's pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek's letter class: the cased letters (Lu, Ll, Lt) of the Unicode version it was made with,
# written out as code point ranges in its tokenizer.json.
_DS_LETTERS = (
    "A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1"
    "\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD"
    "\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D"
    "\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4"
    "\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC"
    "\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128"
    "\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B"
    "\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787"
    "\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
    "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943")
_DS_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"  # CJK ideographs, U+0800.., Hangul


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = False
    normalizer: "str | None" = None  # "NFC": the source tokenizer.json normalises (see below)


_TABLE: dict[tuple[str, ...], PreTokenizer] = {
    ("default",): PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
    ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
     "jina-v1-en", "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum", "modern-bert", "exaone4",
     "mpt", "olmo", "jais", "trillion", "granite-docling"): PreTokenizer((_GPT2,)),
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
     "jina-v5-nano"): PreTokenizer((_LLAMA3,), ignore_merges=True),
    ("dbrx", "smaug-bpe", "chatglm-bpe", "glm4"): PreTokenizer((_LLAMA3,)),
    ("qwen2", "deepseek-r1-qwen"): PreTokenizer((_QWEN2,), normalizer="NFC"),
    ("kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"): PreTokenizer((_QWEN2,)),
    # Qwen 3.5's tokenizer has no normaliser (llama.cpp's test ids for it keep "e\u0301" as
    # two symbols), unlike Qwen2's
    ("qwen35",): PreTokenizer((_QWEN35,)),
    ("deepseek-llm",): PreTokenizer((
        "[\r\n]", rf"\s?[{_DS_LETTERS}]+",
        "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", r"\s+$", _DS_CJK,
        r"\p{N}+")),
    ("deepseek-coder",): PreTokenizer((
        "[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DS_CJK, r"\p{N}")),
    ("deepseek-v3",): PreTokenizer((
        r"\p{N}{1,3}", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
        r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
        r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")),
    ("falcon",): PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
     "mellum2"): PreTokenizer((r"\p{N}", _GPT2)),
    ("poro-chat", "bloom", "gpt3-finnish"): PreTokenizer(
        (" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+",)),
    ("viking",): PreTokenizer(
        (" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+", r"\p{N}")),
    ("tekken",): PreTokenizer((_TEKKEN,), ignore_merges=True),
    ("gpt-4o", "llama4"): PreTokenizer((_GPT4O,)),
}

# gpt2-model names that llama.cpp runs as BPE on characters (``cpu_ref.gguf.RefCharBpe``), not
# byte-level BPE
CHAR_LEVEL = frozenset({"gemma4", "granite-embed-multi-311m", "sarvam-moe"})

PRE_TOKENIZERS: dict[str, PreTokenizer] = {name: pre for names, pre in _TABLE.items()
                                           for name in names}


def pre_tokenizer(name: "str | None", *, where: str = "GGUF") -> PreTokenizer:
    """The pre-tokenizer a ``tokenizer.ggml.pre`` name stands for.

    A missing name means "default", as in llama.cpp (which warns that quality will suffer).

    >>> pre_tokenizer("qwen2").regexes[0][:24]
    "(?i:'s|'t|'re|'ve|'m|'ll"
    """
    if name is None:
        name = "default"
    try:
        return PRE_TOKENIZERS[name]
    except KeyError:
        raise ValueError(
            f"{where}: unknown tokenizer.ggml.pre {name!r}; known pre-tokenizers: "
            f"{', '.join(sorted(PRE_TOKENIZERS))}") from None
