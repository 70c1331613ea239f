"""gputok.unicode.pin_pattern: pinned patterns split text exactly as the oracle engines do.

tiktoken's pieces are recovered with a vocabulary holding every substring of the probe strings:
a piece that is a token comes back as one id (tiktoken's rule), so decoding the ids yields the
pieces. HF's come from ``pre_tokenizers.Split(Regex(pattern), "isolated")``. The boundary walk
probes every code point where a class flag changes, a sample inside every run, and the members of
the contraction letters' case folds, each in several contexts, through cl100k / o200k / GPT-2
(tiktoken) and the Qwen2 / Llama 3 tokenizer.json patterns (HF).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import regex

from cpu_ref.patterns import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN
from gputok import unicode as gu
from gputok.unicode import pattern as pattern_mod

sys.path.insert(0, str(Path(__file__).parent))
import testdata  # noqa: E402

TEMPLATES = ("{c}.a", "a{c}1", "{c}'s", " {c}", "A{c}b")
KIMI_K2 = ("[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
           "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
           "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def tiktoken_pieces(pattern: str, texts: list) -> list:
    try:
        import tiktoken
    except ImportError:
        pytest.skip("tiktoken is not installed: no oracle for the tiktoken family")
    enc = tiktoken.Encoding("pieces", pat_str=pattern, mergeable_ranks=_substrings(tuple(texts)),
                            special_tokens={})
    return [[enc.decode_single_token_bytes(i).decode() for i in ids]
            for ids in enc.encode_ordinary_batch(texts, num_threads=2)]


@functools.lru_cache(maxsize=4)
def _substrings(texts: tuple) -> dict:
    """Ranks for the 256 bytes and every substring of the texts (each piece is one token)."""
    ranks = {bytes([b]): b for b in range(256)}
    for t in texts:
        for i in range(len(t)):
            for j in range(i + 1, len(t) + 1):
                ranks.setdefault(t[i:j].encode(), len(ranks))
    return ranks


def hf_pieces(pattern: str, texts: list) -> list:
    try:
        from tokenizers import Regex, pre_tokenizers
    except ImportError:
        pytest.skip("tokenizers is not installed: no oracle for the hf family")
    split = pre_tokenizers.Split(Regex(pattern), "isolated")
    return [[p for p, _ in split.pre_tokenize_str(t)] for t in texts]


def pinned_pieces(pattern: str, family: str, texts: list, plain: bool = False) -> list:
    """Pieces from ``compile_pinned`` (or, ``plain``, from ``pin_pattern``'s text compiled)."""
    rx = regex.compile(gu.pin_pattern(pattern, family)) if plain else \
        gu.compile_pinned(pattern, family)
    if family == "tiktoken":  # tiktoken keeps the matches only
        return [rx.findall(t) for t in texts]
    out = []
    for t in texts:  # HF "isolated": matches and the gaps between them
        pieces, pos = [], 0
        for m in rx.finditer(t):
            if m.start() > pos:
                pieces.append(t[pos:m.start()])
            if m.end() > m.start():
                pieces.append(m.group())
            pos = m.end()
        if pos < len(t):
            pieces.append(t[pos:])
        out.append(pieces)
    return out


def oracle_pieces(pattern: str, family: str, texts: list) -> list:
    return (tiktoken_pieces if family == "tiktoken" else hf_pieces)(pattern, texts)


def assert_same(pattern: str, family: str, texts: list, plain_every: int = 1) -> None:
    """compile_pinned on every text, pin_pattern's plain text on every ``plain_every``-th one
    (explicit ranges make the regex module ~15x slower)."""
    want = oracle_pieces(pattern, family, texts)
    for plain, step in ((False, 1), (True, plain_every)):
        got = pinned_pieces(pattern, family, texts[::step], plain)
        bad = [(t, w, g) for t, w, g in zip(texts[::step], want[::step], got) if w != g]
        assert not bad, f"{family} {pattern!r} (plain={plain}): {len(bad)} texts differ, " \
                        f"e.g. {bad[:3]}"


@functools.lru_cache(maxsize=None)
def boundary_texts(family: str) -> tuple:
    flags = gu.class_flags(family)
    table = flags["table"]
    change = np.flatnonzero(table[1:] != table[:-1]) + 1
    cps = set(change.tolist()) | set((change - 1).tolist())
    starts, ends = np.append(0, change), np.append(change, 0x110000)
    cps |= set(np.random.default_rng(0).integers(starts, ends).tolist())  # one inside each run
    for ch in gu.FOLD_LETTERS:
        cps |= set(flags["fold_" + ch].tolist())
    chars = [chr(c) for c in sorted(cps) if not 0xD800 <= c <= 0xDFFF]
    return tuple(t.format(c=c) for c in chars for t in TEMPLATES)


def hf_pattern(key: str) -> str:
    path = testdata.vocab_path({"qwen2": "qwen2_tokenizer_json",
                                "llama3": "llama3_tokenizer_json"}[key])
    pre = json.loads(path.read_text("utf-8"))["pre_tokenizer"]
    return next(p["pattern"]["Regex"] for p in pre["pretokenizers"] if p["type"] == "Split")


# ----------------------------------------------------------------------------------------------
# boundary walk: real patterns on every class boundary
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cl100k", "o200k", "gpt2"])
def test_boundary_walk_tiktoken(name):
    pattern = {"cl100k": CL100K_PATTERN, "o200k": O200K_PATTERN, "gpt2": GPT2_PATTERN}[name]
    texts = boundary_texts("tiktoken")
    assert len(texts) > 25_000
    assert_same(pattern, "tiktoken", texts, plain_every=13)


@pytest.mark.parametrize("key", ["qwen2", "llama3"])
def test_boundary_walk_hf(key):
    assert_same(hf_pattern(key), "hf", boundary_texts("hf"), plain_every=13)


def test_kimi_k2_pattern_with_class_intersections():
    texts = ["中文English混合Text's", "ÀB中c'S d", "日本語のテキスト ABCdef", "\U0003e472.a 123456"]
    texts += list(boundary_texts("tiktoken"))[::7]
    assert_same(KIMI_K2, "tiktoken", texts, plain_every=5)


# ----------------------------------------------------------------------------------------------
# engine rules, construct by construct
# ----------------------------------------------------------------------------------------------

TEXTS = ["a\u00b2 \u00b3\u00bd_\u00b9x", "a\na\r\na\n", "a\n\n", "a\nb", "aA ſ K k\u212a kK",
         "ß ss SS ẞ sst ßt", "x1 y2\r\n z",
         " \n\n  a b", "éÉ\u0301 e\u0301", "中文かなカナ한글 abc", "Ωω\u0345ιΙ\u1fbe", "ab ba a b",
         "AB Ab ab aB", "]a-b^c", "\t\x0b\x0c \u00a0\u2028x", "0x1F 9af G", "\U0003e472.a\u1c89 b",
         "'s 'S 'll 'LL 're", "ǅ ǆ Ǆ µ μ Μ", "\ud7fe\ud7ff\ue000\ue001 \u0378\U000f0000"]
BOTH = [r"a$", r"^a", r"(?m:^a)", r"(?m:a$)", r"a\Z", r"a\z", r"\Aa", r"\ba\w*", r"a\B\w",
        r"(?i)k+", r"(?i:[^k])", r"(?i:[\p{Lu}&&[a-z]])", r"(?i:\p{Lu})", r"(?i:[\p{Lu}])",
        r"(?i:\P{Ll})", r"(?i:[\P{Ll}])", r"(?i:[^\p{Lu}])", r"(?i:[k&&\p{Lu}])",
        r"(?i:[[k]&&\p{Lu}])", r"(?i:[\p{Lu}&&[^K]])", r"(?i:[a-z&&[^k]])", r"(?i:\u00b5)",
        r"[\p{L}&&[^\p{Han}]]+", r"[^\s\p{L}\p{N}]+", r"\p{Greek}+", r"\p{^L}+", r"\P{^L}+",
        r"a(?i)b|c", r"x(?:a(?i)b|c)", r"(?i:a(?-i)a)", r"(?i)a(?-i:b)", r"[\w&&[^\d]]+",
        r"[a-z&&[^aeiou]]+", r"\h+", r"\H+", r"\x{61}+", r"[\x{61}-\x{63}]+", r"\t|\n|\r|\v|\f",
        r"[]a]", r"[^]a]+", r"[a-]", r"\N+", r"(a)\1", r"\p{Letter}\p{Uppercase_Letter}",
        r"\p{Hani}+|\p{Hira}|\p{Kana}|\p{Hang}", r"\p{White_Space}+", r"\p{Alpha}+", r"\s+\S",
        r"\d+\D", r"\w+\W", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)", r"'(?i:[sdmt]|ll|ve|re)", r".",
        r"(?#note)a", r"\p{LC}+", r"[\p{Sm}\p{Sc}\p{Sk}\p{So}]+", r"\p{Zs}|\p{Zl}|\p{Cc}",
        r"(?i:ǆ)", r"(?i:[ǅ])", r"[^\x{D7FF}\x{E000}]", r"[^\p{Cn}\p{Co}]", r"[^\p{C}]",
        r"\P{C}", r"[^\x{D7FC}-\x{D7FF}\x{E000}-\x{F8FF}]", r"[\p{Cn}\p{Co}&&[^\x{D7FF}]]",
        r"[^\x{0}-\x{5FF}]", r"[\x{0}-\x{10FFFF}&&[^\x{20}-\x{5FF}]]", r"[x&&[\x{0}-\x{5FF}]]",
        r"[\w&&[^a-z]]", r"[^\w\s]", r"\w\W[\w][^\W]"]
ONLY = {"tiktoken": [r"(?s:.)", r"(?m:\n^)", r"[\w--\d]+", r"[a-c~~b-d]+", r"\pL+\pN",
                     r"\p{IsGreek}", r"\p{gc=Lu}", r"\p{Script=Han}+", r"\u{61}", r"(?i:ss)",
                     r"(?i)\p{ASCII}+", r"\p{Any}"],
        "hf": [r"(?m:.)", r"\n^", r"\pL", r"\141", r"\0", r"(?i:[ǅa-c])+"]}


@pytest.mark.parametrize("family", gu.FAMILIES)
def test_constructs_match_the_engine(family):
    for pattern in BOTH + ONLY[family]:
        assert_same(pattern, family, TEXTS)


def test_hf_flag_scope_and_anchors_spelled_out():
    assert gu.pin_pattern(r"a(?i)b|c", "hf") == "a(?:[Bb]|[Cc])"
    assert gu.pin_pattern(r"a(?i)b|c", "tiktoken") == "a[Bb]|[Cc]"
    assert gu.pin_pattern(r"^a$", "hf") == r"(?:\A|(?<=\n)(?!\Z))a(?=\n|\Z)"
    assert gu.pin_pattern(r"^a$", "tiktoken") == r"\Aa\Z"
    assert gu.pin_pattern(r"\s++$|x\Z", "tiktoken").endswith(r"++\Z|x(?=\n*\Z)")
    assert gu.pin_pattern(r"[\r\n]{1,3}+\p{Zl}", "hf") == r"[\x0a\x0d]{1,3}+[\u2028]"
    assert gu.pin_pattern(r"(?>a)(?<=b)(?P<n>c)(?P=n)", "tiktoken") == r"(?>a)(?<=b)(?P<n>c)(?P=n)"


@pytest.mark.parametrize("family,pattern,message", [
    ("tiktoken", r"\p{Klingon}", r"unknown property \\p\{Klingon\}"),
    ("hf", r"\p{Script=Han}", r"unknown property"),  # Oniguruma rejects key=value
    ("hf", r"[\w--\d]", r"bad range"),  # Oniguruma has no class difference
    ("tiktoken", r"[[:alpha:]]", r"POSIX"),
    ("tiktoken", r"(?x) a", r"flag 'x'"),
    ("hf", r"(?s:.)", r"flag 's'"),
    ("tiktoken", r"\K", r"escape \\K"),
    ("hf", r"(?i:ss)", r"Oniguruma also matches"),
    ("hf", r"(?i:[ß])", r"several-character"),
    ("tiktoken", r"(?i:é)x(", r"missing '\)'"),
    ("tiktoken", r"a)", r"unbalanced"),
    ("tiktoken", r"[ab", r"unterminated bracket"),
    ("tiktoken", r"(a)(?i)\1", r"backreference under \(\?i\)"),
    ("hf", r"[x&&[^\x00-\u05ff]]", r"mis-evaluated by Oniguruma"),
])
def test_unpinnable_patterns_raise(family, pattern, message):
    with pytest.raises(ValueError, match=message) as err:
        gu.pin_pattern(pattern, family)
    assert repr(pattern) in str(err.value) and family in str(err.value)


def test_compile_pinned_is_cached():
    a = gu.compile_pinned(CL100K_PATTERN, "tiktoken")
    assert gu.compile_pinned(CL100K_PATTERN, "tiktoken") is a
    assert a.findall("\U0003e472.a") == ["\U0003e472.", "a"]  # U+3E472: a letter in Unicode 17


# ----------------------------------------------------------------------------------------------
# independence from the installed regex release
# ----------------------------------------------------------------------------------------------

def want_cl100k(texts: list) -> list:
    return [gu.compile_pinned(CL100K_PATTERN, "tiktoken").findall(t) for t in texts]


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import importlib.metadata, regex
sys.path.insert(1, sys.argv[2])
from gputok import unicode as gu
from gputok.unicode import pattern as pattern_mod
texts = json.load(open(sys.argv[3]))
out = {"regex": importlib.metadata.version("regex"), "file": regex.__file__,
       "unicode16": bool(regex.match(r"\p{L}", "\u1c89")) and not regex.match(r"\p{L}",
                                                                          "\U000323b0")}
for fam, pat in json.load(open(sys.argv[4])):
    out[fam + pat] = [gu.compile_pinned(pat, fam).findall(t) for t in texts]
    out["plain" + fam + pat] = [regex.compile(gu.pin_pattern(pat, fam)).findall(t)
                                for t in texts[::10]]
    out["unpinned" + fam + pat] = [regex.findall(pat, t) for t in texts]
json.dump(out, open(sys.argv[5], "w"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("release", ["2023.6.3", "2024.11.6", "2026.5.9"])
def test_pieces_do_not_depend_on_the_regex_release(release, tmp_path_factory):
    """regex 2023.6.3 (Unicode 15.0, the oldest gputok supports), 2024.11.6 (16.0) and
    2026.5.9 (17.0), each installed into its own directory and imported first in a child
    process: compile_pinned and pin_pattern give the pieces computed here."""
    root = Path(os.environ.get("GPUTOK_TEST_DATA", Path.home() / ".cache/gputok-test-data"))
    target = root / "regex-releases" / release
    if not (target / "regex").is_dir():
        tmp = tmp_path_factory.mktemp("pip")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                            "--target", str(tmp), f"regex=={release}"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            pytest.skip(f"pip could not install regex=={release} (no registry?): "
                        f"{r.stderr.strip()[-300:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)
    work = tmp_path_factory.mktemp("child")
    texts = list(boundary_texts("tiktoken"))[::3]
    pats = [("tiktoken", CL100K_PATTERN), ("tiktoken", O200K_PATTERN), ("hf", hf_pattern("qwen2"))]
    (work / "t.json").write_text(json.dumps(texts))
    (work / "p.json").write_text(json.dumps(pats))
    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", _CHILD, str(target), str(repo), str(work / "t.json"),
                    str(work / "p.json"), str(work / "out.json")], check=True, timeout=600)
    out = json.loads((work / "out.json").read_text())
    assert out["regex"] == release and str(target) in out["file"]
    for fam, pat in pats:
        want = [gu.compile_pinned(pat, fam).findall(t) for t in texts]
        assert out[fam + pat] == want, fam
        assert out["plain" + fam + pat] == want[::10], fam
    # the test has teeth: unless its tables are the oracles' Unicode 16.0, this release splits
    # some texts differently without pinning
    unpinned = out["unpinned" + "tiktoken" + CL100K_PATTERN]
    assert (unpinned == want_cl100k(texts)) == out["unicode16"], release


# -- the compiled text is kept on disk: a process after the first only compiles ----------------

def test_compiled_text_is_cached_on_disk_and_checked(tmp_path, monkeypatch):
    from gputok.unicode import compiled

    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    pat = r"\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"
    text = "héllo \U0003e472 wörld 42 ."
    want = gu.compile_pinned.__wrapped__(pat, "tiktoken").findall(text)
    path = Path(compiled.cache_path(pat, "tiktoken"))
    assert path.is_file() and path.parent == tmp_path / "pinned"

    def no_measuring(*_a):
        raise AssertionError("the cached text should have been used")

    monkeypatch.setattr(compiled, "fast_text", no_measuring)
    assert gu.compile_pinned.__wrapped__(pat, "tiktoken").findall(text) == want
    # a damaged entry (text that does not match its checksum) is never used: measured again
    d = json.loads(path.read_text())
    d["text"] = r"\p{L}+|."
    path.write_text(json.dumps(d))
    monkeypatch.setattr(compiled, "fast_text", pattern_mod.fast_text)
    assert gu.compile_pinned.__wrapped__(pat, "tiktoken").findall(text) == want
    assert json.loads(path.read_text())["text"] != r"\p{L}+|."
    # the key covers the family and the installed regex release
    assert compiled.cache_path(pat, "hf") != str(path)
    monkeypatch.setattr(compiled.regex, "__version__", "0.0.0")
    assert compiled._inputs_digest.__wrapped__("tiktoken") != compiled._inputs_digest("tiktoken")


def test_ascii_text_is_cached_on_disk_and_checked(tmp_path, monkeypatch):
    """compile_ascii's text (the first short encode's main cost) is kept beside the pinned text,
    under its own name; a damaged entry is built again, never used."""
    from gputok.unicode import compiled

    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    pat = CL100K_PATTERN
    text = "Hello, world! It's 2024 -- 12345 tokens?\n\n  ok "
    want = gu.compile_pinned.__wrapped__(pat, "tiktoken").findall(text)
    assert compiled.compile_ascii.__wrapped__(pat, "tiktoken").findall(text) == want
    path = Path(compiled.cache_path(pat, "tiktoken", "ascii"))
    assert path.is_file() and path.parent == tmp_path / "pinned"
    assert str(path) != compiled.cache_path(pat, "tiktoken")
    assert json.loads(path.read_text())["text"] == pattern_mod.ascii_text(pat, "tiktoken")

    def no_building(*_a):
        raise AssertionError("the cached text should have been used")

    monkeypatch.setattr(compiled, "ascii_text", no_building)
    assert compiled.compile_ascii.__wrapped__(pat, "tiktoken").findall(text) == want
    d = json.loads(path.read_text())
    d["text"] = r"[a-z]+|."  # damaged: no longer matches its checksum
    path.write_text(json.dumps(d))
    monkeypatch.setattr(compiled, "ascii_text", pattern_mod.ascii_text)
    assert compiled.compile_ascii.__wrapped__(pat, "tiktoken").findall(text) == want
    assert json.loads(path.read_text())["text"] == pattern_mod.ascii_text(pat, "tiktoken")


def test_an_unwritable_cache_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPUTOK_CACHE", str(blocker))
    assert gu.compile_pinned.__wrapped__(r"\p{Lu}\p{Ll}+", "hf").findall("Hello World") == [
        "Hello", "World"]


def test_class_flags_are_cached_on_disk_and_checked(tmp_path, monkeypatch):
    """The scanner's per-code-point flags (the device class tables start from them) are derived
    once per machine; a damaged or foreign cache file is derived again, never used."""
    from gputok.unicode import flags

    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    want = flags._derive("hf")
    got = flags._build.__wrapped__("hf")
    path = Path(flags.cache_path("hf"))
    assert path.is_file() and path.parent == tmp_path / "pinned"
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)

    def no_deriving(*_a):
        raise AssertionError("the cached flags should have been used")

    monkeypatch.setattr(flags, "_derive", no_deriving)
    again = flags._build.__wrapped__("hf")
    assert all(np.array_equal(again[k], want[k]) for k in want)
    assert not again["table"].flags.writeable
    del again  # a mapping of the file: it is overwritten in place below
    # damaged (truncated) or wrong shape: derived again and rewritten
    from gputok._cache import write_arrays
    for bad in (path.read_bytes()[:100], None):
        if bad is None:
            write_arrays(str(tmp_path / "other.bin"), {"table": np.zeros(10, np.uint8)})
            bad = (tmp_path / "other.bin").read_bytes()
        path.unlink()
        path.write_bytes(bad)
        monkeypatch.setattr(flags, "_derive", lambda fam: want)
        assert np.array_equal(flags._build.__wrapped__("hf")["table"], want["table"])
        assert flags._read(str(path)) is not None
    assert flags.cache_path("tiktoken") != str(path)


# ----------------------------------------------------------------------------------------------
# the ASCII form: the same pieces on text that is all ASCII
# ----------------------------------------------------------------------------------------------

def _ascii_texts(seed: int = 11, n: int = 1500) -> list:
    """ASCII probes: every character in the templates, the ASCII parts of TEXTS, random strings
    dense in the characters the patterns tell apart, and a slice of the ASCII corpora."""
    import random

    rng = random.Random(seed)
    alphabet = ("aAbBsStTdDmMlLvVrReEkKxXzZ019' \t\n\r\x0b\x0c\x1c\x1f\x00\x7f.,;:!?-_/\\\"()[]"
                "{}<>@#$%^&*+=|~`")
    out = [t.format(c=chr(c)) for c in range(128) for t in TEMPLATES]
    out += [t for t in TEXTS if t.isascii()]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(n)]
    out += ["'s'S'll'LL're're'VE 've 'd'm 't", "a\n  ", "a \n\n  b", "1234567 89 0", "\r\n\r\n x"]
    text = " ".join(d for kind in ("code", "prose") for d in testdata.corpus(kind, 0.2)
                    if d.isascii())
    out += [text[i:i + 300] for i in range(0, min(len(text), 150_000), 300)]
    return out


@pytest.mark.parametrize("family", gu.FAMILIES)
def test_ascii_form_matches_the_pinned_pattern_on_ascii_text(family):
    """``compile_ascii`` (every class cut to its ASCII members, on Python's ``re``) splits
    ASCII text exactly as ``compile_pinned`` does: every construct of the engine tables and
    the real pre-tokenizer patterns of the family."""
    texts = _ascii_texts()
    assert all(t.isascii() for t in texts) and len(texts) > 2000
    real = ([CL100K_PATTERN, O200K_PATTERN, GPT2_PATTERN, KIMI_K2] if family == "tiktoken"
            else [hf_pattern("qwen2"), hf_pattern("llama3")])
    for pattern in BOTH + ONLY[family] + real:
        fast, pinned = gu.compile_ascii(pattern, family), gu.compile_pinned(pattern, family)
        for t in texts:
            assert fast.findall(t) == pinned.findall(t), (pattern, t)


def test_pretokenizer_takes_the_ascii_form_for_ascii_text():
    """``Pretokenizer.split`` uses the ASCII form for an ASCII text and the pinned pattern for
    any other (the pinned one is not even compiled while every text is ASCII)."""
    import gputok

    pre = gputok.get_encoding("o200k_base").model.pretokenizer
    pre.__dict__.pop("_compiled", None)
    text = "Hello world's 123 test\n\n  x"
    assert pre.split(text) == ["Hello", " world's", " ", "123", " test", "\n\n", " ", " x"]
    assert pre.split_few("a" * 5000, 4) == ["a" * 5000]
    assert "_compiled" not in pre.__dict__
    assert pre.split("héllo wörld") == ["héllo", " wörld"] and "_compiled" in pre.__dict__


def _mixed_texts(seed: int = 5) -> list:
    """Short texts that are mostly ASCII with non-ASCII characters here and there, around
    safe cuts and inside words, contractions, digit runs and whitespace."""
    import random

    rng = random.Random(seed)
    words = ["a", "b", "Ab", "the", "it's", "I'LL", "x1", "123456", "  ", "\n", "\r\n", ".", "'s",
             "café", "naïve", "—", "’s", "“q”", "é", "\u00a0", "\u2028", "日本", "😀", "\u0301",
             "ǅ", "ß", "Ω", "\t", "--", "...", "K", "ſ", "\u3000", "x\u0301y"]
    out = []
    for _ in range(3000):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(words) + rng.choice(["", " ", " ", "  ", "\n"])
                           for _ in range(k)))
    text = " ".join(testdata.corpus("prose", 0.2))
    out += [text[i:i + 700] for i in range(0, min(len(text), 300_000), 700)]
    return [t for t in out if not t.isascii()]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base", "llama3", "qwen2"])
def test_mixed_text_splits_as_the_pinned_pattern(name):
    """A short text with some non-ASCII characters: ASCII stretches between safe cuts on the
    ASCII form, the rest on the pinned pattern; the pieces are the pinned pattern's."""
    import gputok

    if name in ("llama3", "qwen2"):
        enc = gputok.load(testdata.vocab_path(f"{name}_tokenizer_json"))
    else:
        enc = gputok.get_encoding(name)
    pre = enc.model.pretokenizer
    assert pre._safe_cuts == (name not in ("llama3", "qwen2"))  # HF splits keep their gaps
    pinned = pre._compiled[0][0].findall
    texts = _mixed_texts()
    assert len(texts) > 2500
    for t in texts:
        assert pre._findall_short(t) == pinned(t), t
