"""The pre-tokenizers named by GGUF's ``tokenizer.ggml.pre`` (for ``tokenizer.ggml.model = gpt2``).

A GGUF file does not carry its pre-tokenizer: the converter hashes what the source HF tokenizer
does to a test string and writes a *name*; readers map the name back to regexes. The names and
what they mean are llama.cpp's (``llama-vocab.cpp``: the name -> pre-type chain and the
pre-type -> regexes switch); this table holds every name it knows. Each entry is a list of
regexes applied in sequence, each one splitting every piece the previous one produced, keeping
both the matches and the gaps between them (HF's ``Split(..., behavior="isolated")``), then the
GPT-2 byte-level mapping. ``ignore_merges``: a piece that is a whole token is emitted as one
(llama.cpp sets it for the Llama 3 family, GLM-4/5, MiniCPM5, Youtu, Tekken and
granite-embed-multi-97m, as their tokenizer.json do).

Which spelling of a regex: where llama.cpp keeps the tokenizer.json's original regex in a comment
and runs an adaptation (its engine has no ``(?i:...)``, no possessive quantifiers), we run the
original: that is what the model was trained with and what HF does. The adaptations differ only
in corners: ``(?i:'s)`` also matches ``'ſ`` (U+017F) and ``'K``-style case folds; tekken's and
gpt-4o's letter classes ``(?=\\p{L})[^a-z]`` also take lower-case non-ASCII letters. Where it
gives no original, its regex is the entry, as written. Three pre-types are code in llama.cpp,
not regexes: Kimi K2 (its tiktoken pattern, quoted in llama.cpp's ``unicode.cpp``, is the entry,
its class intersections written as lookaheads),
AFMoE's digits (a run of ``\\p{N}`` cut into groups of three from the right, the leading group
1-3 long: written here as the regex ``\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))``), and the newline
runs of Gemma 4 / Laguna (the regex ``[^\\n]+|[\\n]+`` it stands for). Tiny Aya's ``\\b`` (the
spec's engine has no word boundary) is written out where it stands. Patterns are run by
Python's ``regex`` with the oracle's pinned Unicode tables (``cpu_ref.patterns``).

``symbols``: most names are byte-level BPE; ``gemma4``, ``granite-embed-multi-311m`` and
``sarvam-moe`` run BPE on characters with spaces as "▁" (``cpu_ref.gguf.RefCharBpe``);
``whitespace`` (llama.cpp's tokenizer.ggml.model "whitespace": raw UTF-8 words, whitespace
dropped) is named so it is known, and refused by the loaders.

Qwen's tokenizer.json files NFC-normalise before splitting; llama.cpp skips that, so its ids for
text that is not in NFC (Bengali or Devanagari with decomposed vowel signs, for instance) differ
from the model's own tokenizer. We keep the NFC step for the Qwen names (``normalizer``): a GGUF
then gives the ids of the tokenizer it was converted from. The other names normalise nothing,
as in llama.cpp.

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
# llama.cpp's spelling of the contractions, where it gives no original (its engine lacks (?i:))
_CONTRACTIONS_CASED = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_YOUTU = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS_CASED}?"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS_CASED}?"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Kimi K2 (a tiktoken pattern): the GPT-4o letter classes without Han, which has its own rule;
# its class intersections [...&&[^\p{Han}]] written as a lookahead (the spec's engine has none)
_NO_HAN_UP = r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
_NO_HAN_LO = r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
_KIMI_K2 = (rf"[\p{{Han}}]+|[^\r\n\p{{L}}\p{{N}}]?{_NO_HAN_UP}*{_NO_HAN_LO}+{_CONTRACTIONS}?"
            rf"|[^\r\n\p{{L}}\p{{N}}]?{_NO_HAN_UP}+{_NO_HAN_LO}*{_CONTRACTIONS}?"
            r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_JAIS2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)"
          r"|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
_MINICPM5 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_BAILING = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
            r"|\s*[\r\n]|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_EXAONE_MOE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LAGUNA = (_CONTRACTIONS_CASED + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
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
_DS3_CJK = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+"  # CJK ideographs, hiragana, katakana
_DS3_ASCII_PUNCT = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"""
_DS3 = (_DS3_ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPARK = (_DS3_ASCII_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
          r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
# Youtu: Hangul and compatibility jamo; CJK punctuation (！…“”‘’—：；，、 U+3001-U+303F,
# U+FE30-U+FE4F); bopomofo; CJK ideographs, hiragana, katakana
_YOUTU_CJK = ("[\uAC00-\uD7A3\u3131-\u318E]+"
              "|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F"
              "\uFE30-\uFE4F]+|[\u3105-\u312F]+|[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+")
# AFMoE: CJK ideographs and extension A, compatibility ideographs, kana, half-width katakana,
# Kangxi radicals, Thai, Lao, Khmer, Myanmar (and extensions), Hangul syllables and jamo
_AFMOE_ASIAN = ("[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u3040-\u309F\u30A0-\u30FF"
                "\uFF65-\uFF9F\u2F00-\u2FDF\u0E00-\u0E7F\u0E80-\u0EFF\u1780-\u17FF\u1000-\u109F"
                "\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF]+")
# a run of numbers cut into groups of three from the right (llama.cpp's AFMoE digit rule)
_AFMOE_DIGITS = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"
# Tiny Aya's digit groups: its tokenizer.json's \d{1,3}(?=(?:\d{3})*\b) with the \b written
# out: right after a digit (a word character) a word boundary is "no word character next"
_AYA_DIGITS = r"\d{1,3}(?=(?:\d{3})*(?!\w))"
_NEWLINE_RUNS = r"[^\n]+|[\n]+"


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = False
    normalizer: "str | None" = None  # "NFC": the source tokenizer.json normalises (see below)
    # what the BPE runs on: "bytes" (the GPT-2 byte alphabet), "chars" (raw UTF-8 with " " as
    # "▁": ``cpu_ref.gguf.RefCharBpe``), "words" (raw UTF-8, whitespace dropped: llama.cpp's
    # tokenizer.ggml.model "whitespace", which gputok does not read)
    symbols: str = "bytes"


_TABLE: dict[tuple[str, ...], PreTokenizer] = {
    ("default",): PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
    ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
     "jina-v1-en", "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum", "modern-bert", "exaone4",
     "mpt", "olmo", "jais", "trillion", "granite-docling"): PreTokenizer((_GPT2,)),
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
     "jina-v5-nano"): PreTokenizer((_LLAMA3,), ignore_merges=True),
    ("dbrx", "smaug-bpe", "chatglm-bpe"): PreTokenizer((_LLAMA3,)),
    ("glm4", "glm5"): PreTokenizer((_LLAMA3,), ignore_merges=True),
    ("minicpm5",): PreTokenizer((r"\p{N}{1,3}", _MINICPM5), ignore_merges=True),
    ("jais-2",): PreTokenizer((_JAIS2,)),
    ("qwen2", "deepseek-r1-qwen"): PreTokenizer((_QWEN2,), normalizer="NFC"),
    ("kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"):
        PreTokenizer((_QWEN2,)),
    # Qwen 3.5's tokenizer has no normaliser (llama.cpp's test ids for it keep "e\u0301" as
    # two symbols), unlike Qwen2's
    ("qwen35",): PreTokenizer((_QWEN35,)),
    ("ufakzeka",): PreTokenizer((_UFAKZEKA,)),
    ("laguna",): PreTokenizer((_NEWLINE_RUNS, _LAGUNA)),
    ("seed-coder",): PreTokenizer((_SEED_CODER,)),
    ("bailingmoe", "bailingmoe2", "llada-moe"): PreTokenizer((_BAILING,)),
    ("exaone-moe",): PreTokenizer((_EXAONE_MOE,)),
    ("deepseek-llm",): PreTokenizer((
        "[\r\n]", rf"\s?[{_DS_LETTERS}]+",
        "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", r"\s+$", _DS_CJK,
        r"\p{N}+")),
    ("deepseek-coder",): PreTokenizer((
        "[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DS_CJK, r"\p{N}")),
    ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"): PreTokenizer((
        r"\p{N}{1,3}", _DS3_CJK, _DS3)),
    ("spark2_5",): PreTokenizer((r"\p{N}{1,3}", _DS3_CJK, _SPARK, r"\p{N}")),
    ("afmoe",): PreTokenizer((_AFMOE_DIGITS, _AFMOE_ASIAN, _DS3)),
    ("youtu",): PreTokenizer((_YOUTU_CJK, _YOUTU), ignore_merges=True),
    ("falcon",): PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
     "mellum2"): PreTokenizer((r"\p{N}", _GPT2)),
    ("poro-chat", "bloom", "gpt3-finnish"): PreTokenizer((_BLOOM,)),
    ("viking",): PreTokenizer((_BLOOM, r"\p{N}")),
    ("chameleon",): PreTokenizer((
        r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
        r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", _GPT2)),
    ("tekken",): PreTokenizer((_TEKKEN,), ignore_merges=True),
    ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"): PreTokenizer((_GPT4O,)),
    # llama.cpp runs GPT-4o's lookahead spelling with \p{M} added to its letter tests, which is
    # what the original classes (marks included) say: the original pattern
    ("granite-embed-multi-97m",): PreTokenizer((_GPT4O,), ignore_merges=True),
    ("tiny_aya", "cohere2moe"): PreTokenizer((_AYA_DIGITS, _GPT4O)),
    ("kimi-k2",): PreTokenizer((_KIMI_K2,)),
    ("superbpe",): PreTokenizer((r"\p{N}+", r"(?=(\d{3})+(?!\d))")),
    ("gemma4", "granite-embed-multi-311m", "sarvam-moe"): PreTokenizer((_NEWLINE_RUNS,),
                                                                     symbols="chars"),
    ("whitespace",): PreTokenizer((r"\S+",), symbols="words"),
}

PRE_TOKENIZERS: dict[str, PreTokenizer] = {name: pre for names, pre in _TABLE.items()
                                           for name in names}

# the names whose BPE runs on characters (``cpu_ref.gguf.RefCharBpe``), not bytes
CHAR_LEVEL = frozenset(n for n, p in PRE_TOKENIZERS.items() if p.symbols == "chars")


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
