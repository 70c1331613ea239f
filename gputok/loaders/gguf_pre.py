"""The pre-tokenizers that GGUF's ``tokenizer.ggml.pre`` names (``tokenizer.ggml.model = gpt2``).

A GGUF file does not carry its pre-tokenizer, only a *name*: every name llama.cpp's
``llama-vocab.cpp`` knows is here. Each stands for a sequence of regexes, every one splitting
every piece of the previous one and keeping the gaps (HF's ``Split(behavior="isolated")``), then
the GPT-2 byte mapping. These strings are data, spelled as the source tokenizer.json files ship
them where llama.cpp quotes the original next to an adaptation for its engine (no ``(?i:...)``,
no possessive quantifiers): that is what the model was trained with, and what HF runs; else as
llama.cpp writes them. llama.cpp's code-only rules are regexes here: AFMoE's digit groups,
Gemma 4's newline runs; Kimi K2 is its tiktoken pattern. ``cpu_ref/gguf_pre.py`` states the same
table independently (and says more); a test checks that the two agree name by name.

``ignore_merges``: a piece that is a whole token is one id (as llama.cpp sets it).
``normalizer``: Qwen's tokenizer.json files NFC-normalise first, so the Qwen names keep that step
(llama.cpp skips it; gputok gives the source tokenizer's ids). ``symbols``: "bytes" (byte-level
BPE), "chars" (BPE on characters, spaces as "▁": ``gguf_chars.py``), "words" (llama.cpp's
whitespace tokenizer: known, not read).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import patterns

_C = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_C_CASED = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"  # llama.cpp's spelling
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_TAIL = r"|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = _C + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*" + _TAIL
_UP = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LO = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_NOT_LN = r"[^\r\n\p{L}\p{N}]?"
TEKKEN = (f"{_NOT_LN}{_UP}*{_LO}+|{_NOT_LN}{_UP}+{_LO}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*" + _TAIL)
GPT4O = (f"{_NOT_LN}{_UP}*{_LO}+{_C}?|{_NOT_LN}{_UP}+{_LO}*{_C}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*" + _TAIL)
_YOUTU = (f"{_NOT_LN}{_UP}*{_LO}+{_C_CASED}?|{_NOT_LN}{_UP}+{_LO}*{_C_CASED}?"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*" + _TAIL)
_UP_NO_HAN = r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
_LO_NO_HAN = r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
KIMI_K2 = (rf"[\p{{Han}}]+|{_NOT_LN}{_UP_NO_HAN}*{_LO_NO_HAN}+{_C}?"
           rf"|{_NOT_LN}{_UP_NO_HAN}+{_LO_NO_HAN}*{_C}?"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL)
_SPACE_LADDER = "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4))
JAIS2 = (_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         + _SPACE_LADDER + r"|\s{1,2}(?!\S)|\s{1}")
MINICPM5 = _C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL
BAILING = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
           r"|\s*[\r\n]|\s+(?!\S)|\s+")
SEED_CODER = (_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+" + _TAIL)
EXAONE_MOE = (_C + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL
LAGUNA = _C_CASED + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL
NEWLINE_RUNS = r"[^\n]+|[\n]+"
# DeepSeek LLM's letter class: the cased letters (Lu Ll Lt) of its Unicode version, as ranges
_DS = ("A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
       "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
       "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
       "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
       "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
       "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
       "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
       "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
       "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
       "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
       "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
       "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
       "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943")
_DS_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"
_DS3_CJK = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+"
_PUNCT = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"""
DS3 = (_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
       + _TAIL)
SPARK = (_PUNCT + r"[A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]"
         r"|\s+(?!\S)|\s+")
_YOUTU_CJK = ("[\uAC00-\uD7A3\u3131-\u318E]+"
              "|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F"
              "\uFE30-\uFE4F]+|[\u3105-\u312F]+|[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+")
_AFMOE_ASIAN = ("[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u3040-\u309F\u30A0-\u30FF"
                "\uFF65-\uFF9F\u2F00-\u2FDF\u0E00-\u0E7F\u0E80-\u0EFF\u1780-\u17FF\u1000-\u109F"
                "\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF]+")
AFMOE_DIGITS = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"  # a number run in threes from the right
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"
# Tiny Aya's digit groups: its tokenizer.json's \d{1,3}(?=(?:\d{3})*\b) with the \b written
# out: right after a digit (a word character) a word boundary is "no word character next"
_AYA_DIGITS = r"\d{1,3}(?=(?:\d{3})*(?!\w))"


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple
    ignore_merges: bool = False
    normalizer: "str | None" = None
    symbols: str = "bytes"  # "bytes" | "chars" | "words" (module docstring)


_TABLE = (
    (("default",), PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))),
    (("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
      "jina-v1-en", "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum", "modern-bert", "exaone4",
      "mpt", "olmo", "jais", "trillion", "granite-docling"), PreTokenizer((GPT2,))),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano", "glm4", "glm5"), PreTokenizer((patterns.LLAMA3,), ignore_merges=True)),
    (("dbrx", "smaug-bpe", "chatglm-bpe"), PreTokenizer((patterns.LLAMA3,))),
    (("minicpm5",), PreTokenizer((r"\p{N}{1,3}", MINICPM5), ignore_merges=True)),
    (("jais-2",), PreTokenizer((JAIS2,))),
    (("qwen2", "deepseek-r1-qwen"), PreTokenizer((patterns.QWEN2,), normalizer="NFC")),
    (("kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"),
     PreTokenizer((patterns.QWEN2,))),
    (("qwen35",), PreTokenizer((QWEN35,))),  # (Qwen 3.5 does not normalise: "e\u0301" stays two)
    (("ufakzeka",), PreTokenizer((UFAKZEKA,))),
    (("laguna",), PreTokenizer((NEWLINE_RUNS, LAGUNA))),
    (("seed-coder",), PreTokenizer((SEED_CODER,))),
    (("bailingmoe", "bailingmoe2", "llada-moe"), PreTokenizer((BAILING,))),
    (("exaone-moe",), PreTokenizer((EXAONE_MOE,))),
    (("deepseek-llm",), PreTokenizer((
        "[\r\n]", rf"\s?[{_DS}]+",
        "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", r"\s+$", _DS_CJK,
        r"\p{N}+"))),
    (("deepseek-coder",), PreTokenizer(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DS_CJK,
                                        r"\p{N}"))),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
     PreTokenizer((r"\p{N}{1,3}", _DS3_CJK, DS3))),
    (("spark2_5",), PreTokenizer((r"\p{N}{1,3}", _DS3_CJK, SPARK, r"\p{N}"))),
    (("afmoe",), PreTokenizer((AFMOE_DIGITS, _AFMOE_ASIAN, DS3))),
    (("youtu",), PreTokenizer((_YOUTU_CJK, _YOUTU), ignore_merges=True)),
    (("falcon",), PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))),
    (("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
      "mellum2"), PreTokenizer((r"\p{N}", GPT2))),
    (("poro-chat", "bloom", "gpt3-finnish"), PreTokenizer((_BLOOM,))),
    (("viking",), PreTokenizer((_BLOOM, r"\p{N}"))),
    (("chameleon",), PreTokenizer((
        r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
        r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2))),
    (("tekken",), PreTokenizer((TEKKEN,), ignore_merges=True)),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), PreTokenizer((GPT4O,))),
    (("granite-embed-multi-97m",), PreTokenizer((GPT4O,), ignore_merges=True)),
    (("tiny_aya", "cohere2moe"), PreTokenizer((_AYA_DIGITS, GPT4O))),
    (("kimi-k2",), PreTokenizer((KIMI_K2,))),
    (("superbpe",), PreTokenizer((r"\p{N}+", r"(?=(\d{3})+(?!\d))"))),
    (("gemma4", "granite-embed-multi-311m", "sarvam-moe"),
     PreTokenizer((NEWLINE_RUNS,), symbols="chars")),
    (("whitespace",), PreTokenizer((r"\S+",), symbols="words")),
)

PRE_TOKENIZERS = {name: pre for names, pre in _TABLE for name in names}


def pre_tokenizer(name: "str | None", *, where: str = "GGUF") -> PreTokenizer:
    """The pre-tokenizer a ``tokenizer.ggml.pre`` name stands for ("default" when absent, as in
    llama.cpp).

    >>> pre_tokenizer("llama-bpe").ignore_merges
    True
    """
    try:
        return PRE_TOKENIZERS["default" if name is None else name]
    except KeyError:
        raise ValueError(f"{where}: unknown tokenizer.ggml.pre {name!r}; known pre-tokenizers: "
                         f"{', '.join(sorted(PRE_TOKENIZERS))}") from None
