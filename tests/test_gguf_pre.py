"""The ``tokenizer.ggml.pre`` table (``gputok/loaders/gguf_pre.py``, ``cpu_ref/gguf_pre.py``):
every name llama.cpp knows maps, with llama.cpp's flags; each entry splits tricky texts as the
regexes llama.cpp runs for that name do, and as HF's engine (Oniguruma) runs the entry's own
regexes; gputok's pre-tokenizer stage gives cpu_ref's pieces. Ids of real vocabularies for these
names: ``test_real_vocabs.py`` (llama.cpp's test vocabularies) and ``test_gguf_loader.py``."""

from __future__ import annotations

import pytest
import regex

from cpu_ref import gguf_pre as ref_pre, patterns
from gputok.loaders import gguf as L, gguf_pre

# The regexes llama.cpp 0.3.36's ``llama-vocab.cpp`` (llama-cpp-python 0.3.36's vendored copy)
# runs for each name, as written there (its adaptations for an engine without (?i:...), and the
# triggers of its code-only rules: "\\p{AFMoE_digits}", "\\p{Han}+").
LLAMA_CPP_REGEXES = {
    ('llama3', 'llama-v3', 'llama-bpe', 'falcon3', 'falcon-h1', 'pixtral', 'midm-2.0', 'lfm2',
     'jina-v5-nano'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('jais-2',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)"
        "|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S"
        ")|\\s{1,2}(?!\\S)|\\s{1}",
    ),
    ('dbrx', 'smaug-bpe'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('deepseek-llm',): (
        '[\r\n]',
        '\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af'
        '\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3'
        '-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd'
        '\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-'
        '\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-'
        '\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-'
        '\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126'
        '\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00'
        '-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f'
        '\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-'
        '\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-'
        '\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+',
        '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
        '\\s+$',
        '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
        '\\p{N}+',
    ),
    ('deepseek-v3', 'hunyuan-dense', 'joyai-llm', 'hy_v4'): (
        '\\p{N}{1,3}',
        '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}'
        '\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('spark2_5',): (
        '\\p{N}{1,3}',
        '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}'
        '\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+',
        '\\p{N}',
    ),
    ('youtu',): (
        '[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b'
        '\uff0c\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-'
        '\u30ff]+',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
        "+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{L"
        "u}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'["
        "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s"
        "+(?!\\S)|\\s+",
    ),
    ('deepseek-coder',): (
        '[\r\n]',
        '\\s?\\p{L}+',
        '\\s?\\p{P}+',
        '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
        '\\p{N}',
    ),
    ('falcon',): (
        '[\\p{P}\\$\\+<=>\\^~\\|`]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '[0-9][0-9][0-9]',
    ),
    ('starcoder', 'refact', 'command-r', 'smollm', 'codeshell', 'exaone', 'minerva-7b',
     'mellum2'): (
        '\\p{N}',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('gpt-2', 'phi-2', 'jina-es', 'jina-de', 'gigachat', 'jina-v2-es', 'jina-v2-de',
     'a.x-4.0', 'mellum', 'modern-bert', 'jina-v1-en', 'jina-v2-code', 'roberta-bpe',
     'exaone4', 'mpt', 'olmo', 'jais', 'trillion', 'granite-docling'): (
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('stablelm2', 'qwen2', 'deepseek-r1-qwen', 'kormo', 'f2llmv2', 'megrez', 'hunyuan',
     'solar-open'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('qwen35',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}"
        "\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('poro-chat', 'bloom', 'gpt3-finnish'): (
        ' ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+',
    ),
    ('chatglm-bpe', 'glm4', 'glm5'): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('viking',): (
        ' ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+',
        '\\p{N}',
    ),
    ('tekken',): (
        '[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N'
        '}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*'
        '|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('chameleon',): (
        '<sentinel:[0-9]+>',
        '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
        '([\\t\\n]|    |  )',
        '\\p{N}',
        '[\\p{P}!-/:-@\\[-`{-~]',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    ('gpt-4o', 'llama4', 'kanana2', 'talkie', 'minimax-m2'): (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR]"
        "[eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?="
        "[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3"
        "}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('granite-embed-multi-97m',): (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]"
        "|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{"
        "M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL"
        "][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('tiny_aya', 'cohere2moe'): (
        '\\d{1,3}(?=(?:\\d{3})*\\b)',
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
        "+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{L"
        "u}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'["
        "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]"
        "+|\\s+(?!\\S)|\\s+",
    ),
    ('kimi-k2',): (
        '\\p{Han}+',
    ),
    ('superbpe',): (
        '\\p{N}+',
        '(?=(\\d{3})+(?!\\d))',
    ),
    ('bailingmoe', 'bailingmoe2', 'llada-moe'): (
        "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s"
        "\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    ('seed-coder',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('ufakzeka',): (
        '[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?'
        '!\\S)|\\s+',
    ),
    ('grok-2',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('afmoe',): (
        '\\p{AFMoE_digits}',
        '[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-'
        '\u2fdf\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff'
        '\uac00-\ud7af\u1100-\u11ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L'
        '}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    ('laguna',): (
        '[^\\n]+|[\\n]+',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('exaone-moe',): (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L"
        "}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?"
        "!\\S)|\\s+",
    ),
    ('gemma4', 'granite-embed-multi-311m'): (
        '[^\\n]+|[\\n]+',
    ),
    ('sarvam-moe',): (
        '[^\\n]+|[\\n]+',
    ),
    ('minicpm5',): (
        '\\p{N}{1,3}',
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    ('whitespace',): (
        '\\S+',
    ),
    ('default',): (
        '[\\p{P}\\$\\+<=>\\^~\\|]+',
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        '\\p{N}+',
        '[0-9][0-9][0-9]',
    ),
}

# llama.cpp sets ignore_merges for exactly these names
IGNORE_MERGES = {"minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                 "midm-2.0", "lfm2", "jina-v5-nano", "youtu", "glm4", "glm5", "tekken",
                 "granite-embed-multi-97m"}
CHARS = {"gemma4", "granite-embed-multi-311m", "sarvam-moe"}

TRICKY = [
    "Hello world", "I'm  don't YOU'LL we've they'D", "  lead\n\n  trail  \n", "a\n  ",
    "tabs\t\tand\r\nCRLF\r\n\r\n", "1234567 12 1,234,567.89 0.5 x2 42nd", "½ ٣٤٥ ① 𝟙𝟚𝟛𝟜 Ⅻ",
    "Grüße, Café déjà vu — «quotes» ‘single’ “double”", "ALLCaps camelCase PascalCase iPhone",
    "中文字符和日本語のテキスト、カタカナ。한국어 텍스트 ㄱㄴ ㄅㄆ", "ﾊﾝｶｸ ｶﾀｶﾅ",
    "x += 1; print(foo_bar) # comment\n    return {'a': [1, 2]}", "<sentinel:12> IMGIMGABCZ",
    "emoji 😀👍🏽 🇩🇪", "\u00a0nbsp\u3000ideo\u2028sep",
    "!!!???... ,,, ；：！", "$100 + 200 = 300 ^_^ ~tilde~ |pipe|", "a" * 40 + " " * 40 + "1" * 40,
    "", " ", "\n", "Ελληνικά Кириллица Հայերեն", "URL: https://x.y/z?q=1&r=2#f",
]
# where an adaptation reads differently by design (cpu_ref/gguf_pre.py): (?i:'s) also takes
# "'ſ" and "'K" (Kelvin sign); the lookahead letter classes take lower-case non-ASCII letters
# and leave out marks (\p{M}: the vowel signs of Indic and South-East Asian scripts)
CORNERS = ["'ſ 'K 'Ｓ", "éA ÉaÉ ßSS ǅungla", "e\u0301 a\u0308b ক্ষ नमस्ते ❤️",
           "ไทย ລາວ ខ្មែរ မြန်မာ"]


def _split(regexes, text: str) -> list:
    pieces = [text] if text else []
    for r in regexes:
        pieces = [p for piece in pieces for p in patterns.split_isolated(r, piece)]
    return pieces


def _hf_split(regexes, text: str) -> list:
    """HF's ``Sequence`` of ``Split(Regex(r), "isolated")``: Oniguruma's reading."""
    from tokenizers import Regex, pre_tokenizers

    hf = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), behavior="isolated")
                                  for r in regexes])
    return [w for w, _ in hf.pre_tokenize_str(text)]


def _afmoe_digits(text: str) -> list:
    """llama.cpp's AFMoE digit rule, as its code states it: a run of numbers (\\p{N}) is cut
    into its first len % 3 characters (if any), then threes; the rest stays as it is."""
    out, pos = [], 0
    for m in regex.finditer(r"\p{N}+", text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        run = m.group()
        head = len(run) % 3
        out += ([run[:head]] if head else []) + [run[k:k + 3] for k in range(head, len(run), 3)]
        pos = m.end()
    return out + ([text[pos:]] if pos < len(text) else [])


def test_every_llama_cpp_name_maps_in_both_tables():
    names = {n for group in LLAMA_CPP_REGEXES for n in group}
    assert len(names) == 91
    assert set(gguf_pre.PRE_TOKENIZERS) == set(ref_pre.PRE_TOKENIZERS) == names
    for name in names:
        ours, ref = gguf_pre.pre_tokenizer(name), ref_pre.pre_tokenizer(name)
        assert (ours.regexes, ours.ignore_merges, ours.normalizer, ours.symbols) == (
            ref.regexes, ref.ignore_merges, ref.normalizer, ref.symbols), name
        assert ref.ignore_merges == (name in IGNORE_MERGES), name
        assert ref.symbols == ("chars" if name in CHARS else
                               "words" if name == "whitespace" else "bytes"), name
        assert ref.normalizer == ("NFC" if name in ("qwen2", "deepseek-r1-qwen") else None)


def test_unknown_name_lists_the_known_ones():
    for table in (gguf_pre, ref_pre):
        with pytest.raises(ValueError, match=r"unknown tokenizer.ggml.pre 'nope'; known "
                                             r"pre-tokenizers: a\.x-4\.0, afmoe, .*youtu$"):
            table.pre_tokenizer("nope", where="x.gguf")
    assert gguf_pre.pre_tokenizer(None) == gguf_pre.pre_tokenizer("default")


@pytest.mark.parametrize("group", list(LLAMA_CPP_REGEXES), ids=lambda g: g[0])
def test_entries_split_as_llama_cpp_regexes(group):
    theirs = list(LLAMA_CPP_REGEXES[group])
    for name in group:
        ours = ref_pre.pre_tokenizer(name).regexes
        for text in TRICKY:
            if theirs[0] == "\\p{AFMoE_digits}":  # code in llama.cpp: its rule, stated above
                want = [p for d in _afmoe_digits(text) for p in _split(theirs[1:], d)]
            elif theirs == ["\\p{Han}+"]:  # Kimi K2: code quoting its tiktoken pattern (below)
                continue
            elif any("\\b" in r for r in theirs):  # (Tiny Aya: cpu_ref has no \b; Oniguruma)
                want = _hf_split(theirs, text)
            else:
                want = _split(theirs, text)
            assert _split(ours, text) == want, (name, text)


@pytest.mark.parametrize("regexes", sorted({p.regexes for p in ref_pre.PRE_TOKENIZERS.values()}),
                         ids=lambda rs: rs[0][:24])
def test_entries_split_as_hf_runs_them(regexes):
    """HF's ``Sequence`` of ``Split(Regex(r), "isolated")`` (Oniguruma) and cpu_ref's reading of
    an entry agree on the tricky texts and the corners. (Per entry, not per regex: alone,
    DeepSeek LLM's ``\\s+$`` would differ, Oniguruma's ``$`` being an end of line; its entry
    cuts at every newline first.)"""
    for text in TRICKY + CORNERS:
        assert _split(regexes, text) == _hf_split(regexes, text), ascii(text)


@pytest.mark.parametrize("name", sorted(n for n, p in ref_pre.PRE_TOKENIZERS.items()
                                        if p.symbols == "bytes"))
def test_gputok_pre_tokenizer_stage_equals_spec(name):
    from gputok.bytelevel import spell
    from gputok.stages.pretok import Pretokenizer

    tokens = [spell(bytes([b])) for b in range(256)]
    model = L.model_from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": name,
                                   "tokenizer.ggml.tokens": tokens,
                                   "tokenizer.ggml.merges": []}, name)
    pre = ref_pre.pre_tokenizer(name)
    stage = Pretokenizer(model.pretok)
    for text in TRICKY + CORNERS:
        assert stage.split(text) == _split(pre.regexes, text), (name, ascii(text))


def test_whitespace_tokenizer_is_known_and_refused():
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "whitespace",
            "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": []}
    with pytest.raises(ValueError, match="'whitespace' .*is not supported"):
        L.model_from_metadata(meta, "x")
    with pytest.raises(ValueError, match="'whitespace' .*is not supported"):
        L.model_from_metadata(dict(meta, **{"tokenizer.ggml.model": "whitespace"}), "x")


ORIGINALS = {  # the tokenizer.json / tiktoken originals of the entries spelled otherwise here
    "tiny_aya": r"\d{1,3}(?=(?:\d{3})*\b)",
    "kimi-k2": (r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
                r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
                r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


@pytest.mark.parametrize("name", list(ORIGINALS))
def test_respelled_entries_equal_their_originals(name):
    """Where the spec's engine lacks a construct (\\b, class intersection), the entry spells the
    same set another way; Oniguruma reads both alike."""
    ours = ref_pre.pre_tokenizer(name).regexes[0]
    texts = TRICKY + CORNERS + ["12345abc 1234 12345.6_7 ١٢٣٤", "中文English混合Text漢字ĀB"]
    for text in texts:
        assert _hf_split([ours], text) == _hf_split([ORIGINALS[name]], text), ascii(text)
