"""cpu_ref's Unicode data and pattern rewrite, checked against the oracle engines themselves.

The spec reads the pinned data files by path and states its own rules (``cpu_ref.unicode``,
``cpu_ref.patterns.pin_pattern``); nothing of gputok's code is involved, so these tests compare
with HF ``tokenizers`` and tiktoken directly, and check that the spec never imports gputok.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_ref import gguf_pre, hf as hf_ref, patterns, unicode as ref_unicode

ROOT = Path(__file__).resolve().parent.parent
# every code point but the surrogates, each after U+0000 (a starter that composes with nothing),
# so one normaliser call answers for each code point alone
EVERY_CODE_POINT = "".join("\x00" + chr(c) for c in range(1, 0x110000)
                           if not 0xD800 <= c < 0xE000)


def test_the_spec_never_imports_the_product():
    """cpu_ref imports nothing from gputok (an allow-list, empty), and runs with gputok
    unimportable: patterns of both families, HF normalisers, a tokenizer.json."""
    found = set()
    for path in (ROOT / "cpu_ref").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "gputok" or n.startswith("gputok.") for n in names):
                found.add(str(path.relative_to(ROOT)))
    assert not found, found
    code = ("import sys; sys.modules['gputok'] = None\n"
            "import pkgutil, importlib, cpu_ref\n"
            "for m in pkgutil.iter_modules(cpu_ref.__path__):\n"
            "    importlib.import_module('cpu_ref.' + m.name)\n"
            "from cpu_ref import patterns, unicode\n"
            "for fam in ('tiktoken', 'hf'):\n"
            "    for pat in patterns.NAMED_PATTERNS.values():\n"
            "        assert patterns.compile_pattern(pat, fam).findall('Hi 123 x')\n"
            "assert unicode.normalize('NFC', 'e\\u0301') == '\\u00e9'\n"
            "assert unicode.lowercase('\\u0130') == 'i\\u0307'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_normalisers_equal_hf_on_every_code_point(form, corpora):
    from tokenizers import normalizers

    hf = getattr(normalizers, form)().normalize_str
    assert ref_unicode.normalize(form, EVERY_CODE_POINT) == hf(EVERY_CODE_POINT)
    decomposed = normalizers.NFD().normalize_str("\n".join(corpora["multilingual"][:40]))
    assert ref_unicode.normalize(form, decomposed) == hf(decomposed)
    # marks out of order, blocked compositions, Hangul by arithmetic
    for text in ["a\u0323\u0301\u0307", "\u1100\u1161\u11a8", "\uac00\u11a8", "e\u0301\u0301",
                 "\u0915\u093c", "a\u05b0\u0301\u0300b", "\u212b\u2126"]:
        assert ref_unicode.normalize(form, text) == hf(text), text


def test_lowercase_equals_hf_on_every_code_point():
    from tokenizers import normalizers

    assert ref_unicode.lowercase(EVERY_CODE_POINT) == \
        normalizers.Lowercase().normalize_str(EVERY_CODE_POINT)


def _hf_split(pattern: str, text: str) -> list[str]:
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    return [w for w, _ in split.pre_tokenize_str(text)]


def _hf_regexes() -> list[str]:
    """The regexes HF runs: ByteLevel's and the GGUF pre-tokenizers' (the named patterns are
    tiktoken's: Oniguruma reads their possessive ``{1,3}+`` as a repeat)."""
    found = {hf_ref.BYTELEVEL_PATTERN}
    for pre in gguf_pre.PRE_TOKENIZERS.values():
        found |= set(pre.regexes)
    return sorted(found)


@pytest.mark.parametrize("pattern", _hf_regexes(), ids=lambda p: p[:30])
def test_pinned_pieces_equal_oniguruma(pattern, corpora):
    """Family "hf": pieces of every regex the spec runs for HF equal HF's Split over code points
    across the whole range (every 11th, around letters, digits, spaces and newlines) and real
    text."""
    around = "".join(f"{chr(c)}a1 \n'S" for c in range(0, 0x110000, 11)
                     if not 0xD800 <= c < 0xE000)
    texts = [around] + [d[:3000] for kind in corpora for d in corpora[kind][:3]]
    for text in texts:
        assert patterns.split_isolated(pattern, text) == _hf_split(pattern, text), text[:60]


def test_pinned_named_patterns_equal_tiktoken(corpora):
    """Family "tiktoken": the named encodings' pieces, each encoded alone by tiktoken, give
    tiktoken's ids for the whole text (so the pieces are tiktoken's cuts)."""
    from conftest import tiktoken_oracle

    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        tk = tiktoken_oracle(name)
        text = "".join(f"{chr(c)}a1 \n'S" for c in range(0, 0x110000, 13)
                       if not 0xD800 <= c < 0xE000)
        for t in [text] + [d[:3000] for kind in corpora for d in corpora[kind][:3]]:
            pieces = patterns.split(tk._pat_str, t)
            assert "".join(pieces) == t
            assert [i for p in pieces for i in tk.encode_ordinary(p)] == tk.encode_ordinary(t)


def test_anchors_are_the_engines():
    # Oniguruma's $ and ^ are line anchors; Rust's are the ends of the text
    assert patterns.split_isolated(r"\s+$", "a  \n b  ") == ["a", "  ", "\n b", "  "]
    assert patterns.split_isolated(r"\s+$", "a  \n b  ") == _hf_split(r"\s+$", "a  \n b  ")
    assert patterns.split_isolated(r"^\n", "a\n\n") == _hf_split(r"^\n", "a\n\n")
    assert patterns.split_isolated(r"\s+$", "a  \n b  ", family="tiktoken") == \
        ["a  \n b", "  "]
    # case folding: (?i:k) takes the Kelvin sign in both engines
    assert patterns.split(r"(?i:k)", "kK\u212a") == ["k", "K", "\u212a"]


@pytest.mark.parametrize("pattern", [r"\bx", r"[a&&b]", r"[[a]]", r"(?x)a", r"(?i:\p{Lu})",
                                     r"\p{Nope}", r"(a", r"a)", r"[ab", r"\1", "(?i:ss)"])
def test_syntax_outside_the_spec_is_refused(pattern):
    with pytest.raises(ValueError, match="pattern|property"):
        patterns.pin_pattern(pattern, "hf")
