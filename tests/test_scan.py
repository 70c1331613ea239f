"""gputok.stages.scan: the vectorized pre-tokenizer gives exactly the reference engine's pieces.

Every supported pattern is compared with ``compile_pattern(pat).findall`` (cpu_ref) on real text
found on this machine (CPython's stdlib sources, /usr/share/common-licenses, gettext catalogs
under /usr/share/locale, CPython's CJK test files), on hand-written edge cases and their pairwise
concatenations, and on hypothesis-generated text (``GPUTOK_FUZZ_EXAMPLES``, default 300).
The class table is checked against the ``regex`` module on every code point.
"""

from __future__ import annotations

import functools
import gettext
import os
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu_ref.patterns import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN, compile_pattern
from gputok import patterns, unicode as uni
from gputok.stages import scan
from gputok.stages.scan import scanner_for_pattern

PATTERNS = {spec[0]: pat for pat, spec in scan.SUPPORTED_PATTERNS.items()}
NAMES = sorted(PATTERNS)
FUZZ_EXAMPLES = int(os.environ.get("GPUTOK_FUZZ_EXAMPLES", "300"))
REAL_CHARS = int(float(os.environ.get("GPUTOK_SCAN_REAL_MB", "0.6")) * 1e6)  # per corpus


@pytest.fixture(autouse=True)
def vectorize_everything(monkeypatch):
    """Short inputs normally go to the reference regex (faster there); test the scanner."""
    monkeypatch.setattr(scan.Scanner, "min_chars", 0)


def _findall(name: str):
    return compile_pattern(PATTERNS[name]).findall


def _first_difference(texts, want, got) -> str:
    for d, (t, w, g) in enumerate(zip(texts, want, got)):
        if w != g:
            i = next((i for i, (a, b) in enumerate(zip(w, g)) if a != b), min(len(w), len(g)))
            at = sum(map(len, w[:i]))
            return (f"document {d} (len {len(t)}), piece {i} at char {at}: "
                    f"context {t[max(0, at - 30):at + 30]!r}\n want {w[max(0, i - 3):i + 4]}\n"
                    f" got  {g[max(0, i - 3):i + 4]}")
    return f"lengths differ: {len(want)} vs {len(got)}"


def assert_same_pieces(name: str, texts: list) -> None:
    want = [_findall(name)(t) for t in texts]
    got = scanner_for_pattern(PATTERNS[name]).split_batch(texts)
    assert len(got) == len(want)
    if got != want:
        pytest.fail(f"{name}: " + _first_difference(texts, want, got))


def expected_boundaries(name: str, texts: list) -> list:
    out, off = [], 0
    for t in texts:
        for piece in _findall(name)(t):
            out.append(off)
            off += len(piece)
    return out + [off]


def to_code_points(texts: list):
    cps = np.frombuffer("".join(texts).encode("utf-32-le"), np.uint32)
    offs = np.cumsum([0] + [len(t) for t in texts]).astype(np.int64)
    return cps, offs


# ------------------------------------------------------------------------------------------------
# the class table
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _every_code_point() -> tuple:
    cps = np.arange(0x110000, dtype=np.uint32)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    return cps, cps.tobytes().decode("utf-32-le")


@pytest.mark.parametrize("family", uni.FAMILIES)
def test_class_table_matches_the_pinned_patterns_on_every_code_point(family):
    # the scanner's class table and the pinned regex (what the host pre-tokenizer runs) must
    # agree at every code point, whatever Unicode version the installed ``regex`` has
    cps, chars = _every_code_point()
    table = uni.class_flags(family)["table"]
    assert table.dtype == np.uint8 and table.shape == (0x110000,)
    got = table[cps]
    for bit, prop in uni.PROPERTIES.items():
        matched = uni.compile_pinned(prop, family).findall(chars)
        want = np.zeros(0x110000, bool)
        want[[ord(ch) for ch in matched]] = True
        bad = np.flatnonzero(((got & bit) != 0) != want[cps])
        assert not len(bad), f"{prop}: differs at {[hex(int(c)) for c in cps[bad[:10]]]}"
    assert not table[0xD800:0xE000].any()


@pytest.mark.parametrize("family", uni.FAMILIES)
def test_contraction_letters_match_the_pinned_case_folding(family):
    cps, chars = _every_code_point()
    letters = uni.FOLD_LETTERS
    probe = uni.compile_pinned("(?i:" + "|".join(f"({c})" for c in letters) + ")", family)
    want = {c: [] for c in letters}
    for ch in chars:
        m = probe.fullmatch(ch)
        if m:
            want[letters[m.lastindex - 1]].append(ord(ch))
    tabs = uni.class_flags(family)
    for c in letters:
        assert tabs["fold_" + c].tolist() == want[c], c
    assert 0x17F in want["s"]  # LATIN SMALL LETTER LONG S matches (?i:s)


@pytest.mark.parametrize("family", uni.FAMILIES)
def test_class_assumptions_behind_the_rules(family):
    t = uni.class_flags(family)["table"]
    is_l, is_n, is_s, is_m = ((t & b) != 0 for b in (uni.F_L, uni.F_N, uni.F_S, uni.F_M))
    assert not (is_l & is_n).any() and not (is_l & is_s).any() and not (is_n & is_s).any()
    assert not (is_m & (is_l | is_n | is_s)).any()
    nl = np.flatnonzero(t & uni.F_NL).tolist()
    assert nl == [0x0A, 0x0D] and all(t[c] & uni.F_S for c in nl)
    # o200k: every letter is in one of its two letter classes, every mark in both
    up, lo = (t & uni.F_UP) != 0, (t & uni.F_LO) != 0
    assert not (is_l & ~(up | lo)).any()
    assert (up & lo)[is_m].all() and not ((up | lo) & ~(is_l | is_m)).any()
    # the rules' special characters are plain punctuation / whitespace
    assert t[0x27] == 0 and t[0x2F] == 0 and t[0x20] == uni.F_S


# ------------------------------------------------------------------------------------------------
# pattern recognition
# ------------------------------------------------------------------------------------------------


def test_scanner_for_pattern_recognises_exactly_the_supported_strings():
    assert set(NAMES) == {"cl100k", "llama3", "qwen2", "gpt2", "gpt2_hf", "o200k"}
    for pat in (CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN, patterns.LLAMA3,
                patterns.QWEN2, patterns.BYTELEVEL):
        sc = scanner_for_pattern(pat)
        assert sc is not None and sc.pattern == pat
        assert scanner_for_pattern(pat) is sc
    for other in (CL100K_PATTERN + "|x", CL100K_PATTERN.replace("{1,3}", "{1,4}"), r"\w+|\W",
                  patterns.LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}{1,2}"), ""):
        assert scanner_for_pattern(other) is None


def test_hf_gpt2_spelling_and_llama3_spelling():
    # the HF spelling of GPT-2 is equivalent to tiktoken's; Llama 3 is *not* cl100k: at the end
    # of the text it cuts whitespace after the last newline ("\s*[\r\n]+" before "\s+(?!\S)")
    text = "a\n  "
    assert _findall("cl100k")(text) == ["a", "\n  "]
    assert _findall("llama3")(text) == ["a", "\n", "  "]
    for name in ("cl100k", "llama3"):
        assert scanner_for_pattern(PATTERNS[name]).split(text) == _findall(name)(text)


# ------------------------------------------------------------------------------------------------
# real text from this machine
# ------------------------------------------------------------------------------------------------


def _read(path: Path, encoding: str = "utf-8") -> "str | None":
    try:
        return path.read_text(encoding)
    except (OSError, UnicodeDecodeError):
        return None


def _take(docs, budget: int) -> list:
    out, total = [], 0
    for d in docs:
        if d:
            out.append(d)
            total += len(d)
            if total >= budget:
                break
    return out


@functools.lru_cache(maxsize=None)
def corpus(kind: str) -> tuple:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if kind == "code":
        files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
        stride = max(1, len(files) // 60)  # spread over the whole library
        return tuple(_take(((_read(p) or "")[:30000] for p in files[::stride]), REAL_CHARS))
    if kind == "licenses":
        root = Path("/usr/share/common-licenses")
        files = sorted({p.resolve() for p in root.iterdir() if p.is_file()}) if root.is_dir() \
            else []
        return tuple(_take((_read(p, "latin-1") for p in files), REAL_CHARS))
    if kind == "multilingual":
        docs = [_read(p) for p in sorted((stdlib / "test" / "cjkencodings").glob("*-utf8.txt"))]
        root = Path("/usr/share/locale")
        langs = ["ja", "zh_CN", "zh_TW", "ko", "ru", "uk", "ar", "fa", "he", "hi", "bn", "ta", "th",
                 "el", "ka", "hy", "am", "ml", "my", "km", "vi", "tr", "pl", "de", "fr", "es"]
        for lang in langs:
            for mo in sorted((root / lang / "LC_MESSAGES").glob("*.mo"))[:3]:
                try:
                    with open(mo, "rb") as fp:
                        cat = gettext.GNUTranslations(fp)._catalog
                except Exception:
                    continue
                docs.append("\n".join(v for k, v in sorted(cat.items(), key=str) if k and v))
        return tuple(_take(docs, REAL_CHARS))
    raise ValueError(kind)


KINDS = ["code", "licenses", "multilingual"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", NAMES)
def test_real_text(name, kind):
    docs = list(corpus(kind))
    if not docs:
        pytest.skip(f"no {kind} text on this machine")
    assert_same_pieces(name, docs)


@pytest.mark.parametrize("name", NAMES)
def test_real_text_single_documents_and_array_form(name):
    docs = [d for kind in KINDS for d in corpus(kind)[:8]]
    if not docs:
        pytest.skip("no text on this machine")
    sc = scanner_for_pattern(PATTERNS[name])
    f = _findall(name)
    for d in docs:
        assert sc.split(d) == f(d)
    cps, offs = to_code_points(docs)
    assert sc.boundaries(cps, offs).tolist() == expected_boundaries(name, docs)


# ------------------------------------------------------------------------------------------------
# hand-written edge cases
# ------------------------------------------------------------------------------------------------

WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85",
              "\u00a0", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000"]
EDGE = [
    "", "a", "A", "1", ".", "'", " ", "\n", "\x00", "\u0301", "中", "😀",
    "'s", "'S", "'t", "'T", "'d", "'m", "'M", "'ll", "'LL", "'lL", "'ve", "'VE", "'vE", "'re",
    "'RE", "''s", " 's", "x's", "X'S", "don't", "DON'T", "a'", "a''", "'", "''", "'''", "'x",
    "'sa", "'lla", "'l", "it's'", "x's's's", "x'd've", "'ſ", "x'ſ", "rock'n'roll", "’s",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789", "1234567890",
    "a1234b", " 12345 ", "x٣٣٣٣y", "²³¹⁴", "½¾", "1,234.5678",
    "!!!\n\r\n", ".\n", ".\n\n  x", "...\r\n\r\n", "?!\n/", "*/\n/* c */", "}\n//x", ".\n/.x",
    "\t" * 32, " " * 1000, "\n" * 50, " \n \n ", "a \n  b", "a\n ", "x  ", "  x", " \t x",
    "\u00a0x", "\u3000中", " .x", " .hello", " ...x", "(x", " (x", "\t.x", "x.y.z",
    "HelloWorld", "helloWORLD", "ABCdef", "abcDEF", "XMLHttpRequest", "ǅemal", "ʼabc", "Aʼb",
    "A中B", "中文ABC", "中Ab", "ab中CD", "aB中CD", "ßẞ", "𝐀𝐁c", "ーアA",
    "e\u0301", "E\u0301a", "\u0301a", " \u0301x", ".\u0301x", "..\u0301,", "x\u0301.",
    "❤\ufe0f", " ❤\ufe0f ", "❤\ufe0fabc", "1\ufe0f\u20e3", "👨\u200d👩\u200d👧", "👍🏽",
    "🇺🇸", "a😀b", "😀a", "कि", "हिन्दी", "مرحبا", "Привет, мир", "日本語のテキスト",
    "x" * 300, "aA" * 50, "'s" * 20, " '" * 10, "\r" * 5 + "x",
]
EDGE += WHITESPACE + [w * 3 for w in WHITESPACE] + [f"a{w}b" for w in WHITESPACE] \
    + [f".{w}x" for w in WHITESPACE] + [f"{w}'s" for w in WHITESPACE]
# single characters of every class the tables distinguish
EDGE += [chr(c) for c in (0x41, 0x61, 0x1C5, 0x2B0, 0x5D0, 0x300, 0x903, 0x20DD, 0x30, 0x663,
                          0xB2, 0x2160, 0x21, 0x2F, 0x24, 0x2B, 0x7F, 0xAD, 0x200D, 0xFEFF,
                          0xE000, 0x10FFFF, 0x1F600, 0x1D400, 0xE0100, 0x378)]


@pytest.mark.parametrize("name", NAMES)
def test_edge_cases_alone_and_in_pairs(name):
    assert_same_pieces(name, EDGE)
    short = [e for e in EDGE if len(e) <= 12]
    assert_same_pieces(name, [a + b for a in short for b in short])


@pytest.mark.parametrize("name", NAMES)
def test_document_ends_act_as_text_ends(name):
    batches = [["a  ", "  b"], ["x\n", "\n y"], ["'", "s"], ["x'", "s"], ["12", "34"],
               ["a", "\u0301b"], [".", "\nx"], ["\n", "/"], [" ", "x"], ["x", " "],
               ["", "a", "", "", " b", ""], ["\t\t", "\t"], ["A", "b"], ["ab", "CD"]]
    sc = scanner_for_pattern(PATTERNS[name])
    f = _findall(name)
    for docs in batches:
        want = [f(d) for d in docs]
        assert sc.split_batch(docs) == want, docs
        assert [sc.split(d) for d in docs] == want
        cps, offs = to_code_points(docs)
        assert sc.boundaries(cps, offs).tolist() == expected_boundaries(name, docs)
    assert sc.split_batch(["a  ", "  b"]) == [f("a  "), f("  b")]


@pytest.mark.parametrize("name", NAMES)
def test_default_threshold_for_short_inputs(name, monkeypatch):
    monkeypatch.undo()  # the shipped min_chars: short inputs take the regex, long ones do not
    sc = scanner_for_pattern(PATTERNS[name])
    assert sc.min_chars > 0
    docs = ["a b", "x" * sc.min_chars + " 'll 12345\n  y", "", " ".join(EDGE)]
    assert [sc.split(d) for d in docs] == [_findall(name)(d) for d in docs]
    assert_same_pieces(name, docs)
    assert_same_pieces(name, docs[:1])


@pytest.mark.parametrize("name", NAMES)
def test_empty_inputs(name):
    sc = scanner_for_pattern(PATTERNS[name])
    assert sc.split("") == []
    assert sc.split_batch([]) == []
    assert sc.split_batch(["", ""]) == [[], []]
    assert sc.boundaries(np.zeros(0, np.uint32), np.zeros(1, np.int64)).tolist() == [0]
    assert sc.boundaries(np.zeros(0, np.uint32), np.zeros(3, np.int64)).tolist() == [0]


@pytest.mark.parametrize("name", NAMES)
def test_texts_containing_every_separator_candidate(name):
    # the pieces are cut by inserting a character absent from the text; make every candidate
    # present (and the latin-1 ones all at once, which forces the slicing fallback)
    low = "".join(ch for ch in scan._SEP_CANDIDATES if ord(ch) < 256)
    allc = "".join(scan._SEP_CANDIDATES)
    docs = [low + " ab's 12345\n x", "x" + allc + " y\u0301", "\x00\x00a b", "q" + low]
    assert_same_pieces(name, docs)
    sc = scanner_for_pattern(PATTERNS[name])
    assert [sc.split(d) for d in docs] == [_findall(name)(d) for d in docs]


# ------------------------------------------------------------------------------------------------
# fuzzing
# ------------------------------------------------------------------------------------------------

STRESS = list("aAbBsStTdDmMlLvVeErRxXzZ") \
    + ["ſ", "ß", "ǅ", "ʼ", "ー", "中", "文", "ä", "Ä", "𝐀"] \
    + list("0123456789") + ["٣", "²", "½", "Ⅻ"] + ["'", "'", "'", "/", "/"] \
    + [" ", " ", " ", "\t", "\r", "\n", "\n", "\r\n", "\x0b", "\x0c", "\x85", "\u00a0", "\u2028",
       "\u3000", "\x1c"] \
    + list(".,;:!?-_()[]{}\"*#@$%&+=<>|\\^`~") + ["\x00", "\u200d", "\ufeff"] \
    + ["\u0301", "\u0301", "\u0300", "\u093f", "\u20e3", "\ufe0f", "\u0903"] \
    + ["😀", "❤", "🏽", "🇺", "👨", "क", "ि", "م", "ر", "Я", "я"]


def _runs(chars):
    run = st.tuples(st.sampled_from(chars), st.one_of(st.integers(1, 4), st.integers(5, 70)))
    return st.lists(run, max_size=24).map(lambda rs: "".join(c * n for c, n in rs))


TEXT = st.one_of(
    _runs(STRESS),
    st.lists(st.sampled_from(STRESS), max_size=40).map("".join),
    st.text(max_size=40),
    st.lists(st.sampled_from(EDGE), max_size=6).map("".join),
)
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(text=TEXT)
def test_fuzz_split(name, text):
    assert scanner_for_pattern(PATTERNS[name]).split(text) == _findall(name)(text)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(docs=st.lists(TEXT, max_size=5))
def test_fuzz_batch_and_boundaries(name, docs):
    sc = scanner_for_pattern(PATTERNS[name])
    f = _findall(name)
    want = [f(d) for d in docs]
    assert sc.split_batch(docs) == want
    assert [sc.split(d) for d in docs] == want
    cps, offs = to_code_points(docs)
    assert sc.boundaries(cps, offs).tolist() == expected_boundaries(name, docs)


def test_pretokenizer_routes_short_texts_by_their_characters(monkeypatch):
    """``Pretokenizer.split``: the scanner from ``_SCAN_MIN_WIDE`` characters when the text is
    not ASCII (the pinned regex costs ~150 ns a character there), the regex for ASCII text under
    ``_SCAN_MIN`` and for text with under one non-ASCII character in 64; same pieces either way."""
    monkeypatch.undo()
    import gputok
    from gputok.stages import pretok

    wide, ascii_min = pretok._SCAN_MIN_WIDE, pretok._SCAN_MIN
    used = []
    real = scan.Scanner.split
    monkeypatch.setattr(scan.Scanner, "split", lambda self, text, min_chars=None:
                        used.append(len(text)) or real(self, text, min_chars))
    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        pre = gputok.get_encoding(name).model.pretokenizer
        assert isinstance(pre.scanner, scan.Scanner)
        f = compile_pattern(pre.pattern).findall
        cases = {  # text -> whether the scanner cuts it
            ("Привет, мир! " * 100)[:wide]: True,
            ("Привет, мир! " * 100)[:wide - 1]: False,
            ("日本語のテキスト😀 " * 400)[:3000]: True,
            ("The cat's 12 hats. " * 300)[:ascii_min - 1]: False,
            ("The cat's 12 hats. " * 300)[:ascii_min]: True,
            ("The cat's 12 hats. " * 300)[:2000] + "é": False,  # one in 2001: the regex
            ("The café's hats. " * 200)[:2000]: True,  # one in 16
        }
        for text, scanner in cases.items():
            used.clear()
            assert pre.split(text) == f(text), (name, text[:40])
            assert bool(used) == scanner, (name, len(text), text[:40])
