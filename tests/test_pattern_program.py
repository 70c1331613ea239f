"""The native pattern matcher (``stages/pattern_program.py`` -> ``kernels/host_regex.h``): the
pieces of every pre-tokenizer spec it compiles equal the host split's (``Pretokenizer._steps``,
Python ``regex`` on the pinned pattern), on every pattern the loaders know, adversarial patterns
and texts; what it cannot run it refuses; models whose pattern has no scanner cut on the native
device with no host stage, on every path."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import gputok
import testdata
from gputok import patterns
from gputok.loaders import gguf_pre
from gputok.stages.pattern_program import Unsupported, compile_pattern
from gputok.stages.pretok import PrefixSpace, Pretokenizer, PretokSpec, Split


def _native():
    from gputok.backends import native

    ok, why = native.available()
    if not ok:
        pytest.skip(f"no native device: {why}")
    from gputok.backends.native.pattern import ProgramCut

    return ProgramCut


TRICKY = list("aZéÉßǅʰ中日本ﾟ\u0301\u0915\u093f0129٣²½'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
              ".,!?-_/\\\"#$%&*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0fｱｲ①ﬁ\u212b\u1100가") + \
    ["'s", "'LL", "\r\n", "  ", "e\u0301", "123456", "    x", "\n\n", "IMGIMG", "AB", "Z"]


def texts(n: int, seed: int) -> list:
    rng = random.Random(seed)
    out = ["", " ", "a", "\n", "   ", "hello world", "x" * 300, " " * 70 + "a", "1" * 40,
           "don't STOP'S", "\u4e2d\u6587" * 30 + " ok", "a\n\n\n b  \t c\r\n", "😀" * 9]
    for _ in range(n):
        k = rng.randrange(4)
        if k == 0:
            out.append("".join(rng.choice(TRICKY) for _ in range(rng.randrange(1, 60))))
        elif k == 1:
            out.append("".join(chr(rng.choice([rng.randrange(0x20, 0x7F),
                                               rng.randrange(0xA0, 0x3000),
                                               rng.randrange(0x3000, 0xD800),
                                               rng.randrange(0xE000, 0x110000)]))
                               for _ in range(rng.randrange(1, 40))))
        elif k == 2:
            out.append(rng.choice(TRICKY) * rng.randrange(1, 200))
        else:
            out.append(" ".join(rng.choice(["The", "quick", "fox's", "12,345.67", "naïve",
                                            "\u6771\u4eac", "  ", "\t", "x=y+1;", "(IMGIMG)"])
                                for _ in range(rng.randrange(1, 30))))
    return out


def program_for(spec: PretokSpec):
    return Pretokenizer(spec).program()


def native_pieces(spec: PretokSpec, docs: list, threads: int = 1) -> list:
    """Each document's pieces as the native matcher cuts them."""
    cut = _native()(Pretokenizer(spec), program_for(spec), threads)
    data = [d.encode("utf-8") for d in docs]
    off = np.zeros(len(docs) + 1, np.int64)
    np.cumsum([len(b) for b in data], out=off[1:])
    none = np.zeros(0, np.int64)
    raw, pstart, spec_, doc_entry = cut.cut_chunk(b"".join(data), off, none, none,
                                                  np.zeros(0, np.uint32))
    ps = pstart.tolist()
    out = []
    for d in range(len(docs)):
        a, b = int(doc_entry[d]), int(doc_entry[d + 1])
        out.append([raw[ps[e]:ps[e + 1]].decode("utf-8") for e in range(a, b)])
    return out


def host_pieces(spec: PretokSpec, docs: list) -> list:
    """The host's pieces (empty ones dropped, as its chunk entries drop them)."""
    pre = Pretokenizer(spec)
    return [[p for p in pre._steps(d) if p] for d in docs]


def _specs() -> dict:
    out = {}
    for name, pre in gguf_pre.PRE_TOKENIZERS.items():
        if pre.symbols == "bytes":
            out[f"gguf:{name}"] = PretokSpec(tuple(Split(r, keep_gaps=True) for r in pre.regexes),
                                             "hf")
    for name, pat in patterns.NAMED.items():
        out[f"named:{name}"] = PretokSpec.regex(pat, "tiktoken")
    out["bytelevel+prefix"] = PretokSpec((PrefixSpace(), Split(patterns.BYTELEVEL, True)), "hf")
    out["empties+prefix"] = PretokSpec((Split(r"\p{L}*|\s+"), PrefixSpace(),
                                        Split(patterns.BYTELEVEL, True)), "hf")
    out["digits+bytelevel"] = PretokSpec((Split(r"\p{N}{1,3}", True),
                                          Split(patterns.BYTELEVEL, True)), "hf")
    return out


SPECS = _specs()
DOCS = texts(400, 20261129)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_pieces_equal_the_host_split(name):
    spec = SPECS[name]
    if program_for(spec) is None:
        pytest.fail(f"{name}: no program (every loader's pattern should compile)")
    assert native_pieces(spec, DOCS) == host_pieces(spec, DOCS)


ADVERSARIAL = [
    (r"a++b|a+", False), (r"a*+a|b", False), (r"(?>a|ab)c|a", False), (r"x*?y|x", False),
    (r"\s+(?!\S)|\s+", False), (r"(?<=a)b+|[ab]", False), (r"(?<!\d)\d{1,3}|\d", False),
    (r"(?i:ünïcode|hello)|\w+|\W", False), (r"\p{L}{2,4}?x|\p{L}", False),
    (r"(?:\p{Lu}\p{Ll}*)+|\P{L}+|\p{L}", False), (r"[^\s\p{L}]+$|\S+|\s+", False),
    (r"^\s+|\s+$|\S+", False), (r"\b\w+\b|\W+", False), (r"(ab|a)(bc|c)?", True),
    (r"\d{1,3}(?=(\d{3})+(?!\d))", True), (r"[^\n]+|\n+", False), (r".+|\n", False),
    (r"(?s:.{1,5})", False), (r"[\p{Han}\p{Hiragana}]+|[^\p{Han}]+", False),
    (r"a*", True), (r"a*", False), (r"\d*|x", False), (r"(?=\d)", True), (r"\b", True),
    (r"(?=(\d{3})+(?!\d))", True), (r"x?", False),
]


@pytest.mark.parametrize("pat, gaps", ADVERSARIAL)
@pytest.mark.parametrize("family", ["tiktoken", "hf"])
def test_adversarial_patterns(pat, gaps, family):
    if family == "hf":  # (Oniguruma's dot-all flag is "m")
        pat = pat.replace("(?s:", "(?m:")
    spec = PretokSpec((Split(pat, keep_gaps=gaps),), family)
    assert program_for(spec) is not None, pat
    assert native_pieces(spec, DOCS) == host_pieces(spec, DOCS), pat


@pytest.mark.parametrize("pat, gaps, why", [
    (r"(?:a?)*b", True, "loop whose body"), (r"(?:\s|)+x", False, "loop whose body"),
    (r"(a)|b", False, "capturing groups"), (r"(?<=a+)b", True, "look-behind of varying"),
])
def test_refused(pat, gaps, why):
    from gputok.stages.pattern_program import _pinned

    with pytest.raises(Unsupported, match=why):
        compile_pattern(_pinned(pat, "hf"), gaps)
    assert program_for(PretokSpec((Split(pat, keep_gaps=gaps),), "hf")) is None


def test_threads_and_token_spans_give_the_same_pieces():
    """A chunk cut on several threads, with special-token spans inside documents, equals the
    host's entries (``hostplan.entries_from_split``), entry for entry."""
    ProgramCut = _native()
    from gputok.backends.hostplan import entries_from_split

    spec = SPECS["gguf:deepseek-llm"]
    pre = Pretokenizer(spec)
    docs = [d + "<tok>" + d[::-1] for d in texts(3000, 7)]
    data = "".join(docs).encode("utf-8")
    off = np.zeros(len(docs) + 1, np.int64)
    np.cumsum([len(d.encode()) for d in docs], out=off[1:])
    ss, se = [], []
    for d, doc in enumerate(docs):
        at = off[d] + len(doc[:doc.index("<tok>")].encode())
        ss.append(at)
        se.append(at + 5)
    ss, se = np.array(ss, np.int64), np.array(se, np.int64)
    sid = np.arange(len(ss), dtype=np.uint32) + 7
    want = entries_from_split(pre.split, data, off, ss, se, sid)
    assert len(data) > 1 << 17  # (several threads' ranges)
    for threads in (1, 2, 5):
        got = ProgramCut(pre, program_for(spec), threads).cut_chunk(data, off, ss, se, sid)
        assert got[0] == want[0]
        for a, b in zip(got[1:], want[1:]):
            assert np.array_equal(a, b)


def _batch(enc, docs, backend, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, off = enc.encode_batch_arrays(docs, backend=backend, **kw)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


@pytest.mark.parametrize("name", ["deepseek_coder_tokenizer_json", "llama_cpp_falcon",
                                  "llama_cpp_qwen35"])
def test_models_cut_on_the_native_device_with_no_host_stage(name):
    _native()
    enc = gputok.load(testdata.family_path(name))
    be = gputok.backends.get_backend("native")
    assert be.plan(enc.model)["pretok"].endswith("its own pass")
    docs = texts(300, 3) + ["Hello world " * 2000, "\u4e2d" * 5000 + " x 123456"]
    want = _batch(enc, docs, "numpy", disallowed_special=())
    before = dict(be.fallbacks)
    assert _batch(enc, docs, be, disallowed_special=()) == want
    assert dict(be.fallbacks) == before
    assert [enc.encode(d, backend=be, disallowed_special=()) for d in docs[:60]] == want[:60]
    assert enc.encode_batch(docs[:60], backend=be, disallowed_special=()) == want[:60]


def test_a_trained_vocabulary_with_its_own_pattern():
    """The crash of the real-tokenizers issue: a pattern without a scanner (possessive
    quantifiers), a multilingual text on the one-call path and in batches, native == numpy."""
    _native()
    pat = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++(?!\S)|\s"
    corpus = [d for kind in ("prose", "multilingual") for d in testdata.corpus(kind)[:40]]
    enc = gputok.train_bpe(corpus, vocab_size=600, pattern=pat)
    be = gputok.backends.get_backend("native")
    before = dict(be.fallbacks)
    docs = [d[:10000] for d in corpus[:20]] + texts(100, 11)
    want = _batch(enc, docs, "numpy")
    assert _batch(enc, docs, be) == want
    assert [enc.encode_ordinary(d) for d in docs] == want
    assert dict(be.fallbacks) == before
