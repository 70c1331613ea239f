"""gputok's WordPiece (BERT tokenizer.json): pinned Unicode tables, the stages, the kernel.

* the BERT tables (``gputok.unicode.bert``) equal a live probe of HF on every code point where
  they differ from Python's ``unicodedata``, and the normaliser + pre-tokenizer equal HF's on
  every code point alone and in context, with each normaliser option;
* ids: HF == cpu_ref == gputok on the MiniLM vocabulary (uncased, cased, no CJK spacing, strip
  accents without lowercase, no clean_text), single-text and batch paths, scalar and vectorised
  longest match;
* ``kernels/encode_wordpiece.cu`` on the CPU emulator in forward, reverse and shuffled thread
  orders against its numpy reference, and the whole device pipeline against HF.
"""

from __future__ import annotations

import json
import unicodedata
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref.wordpiece import RefWordPiece
from gputok.unicode import bert as bu
from gputok.stages import counters, reset_counters
from gputok.components.pretokenizers.bert import BertSteps
from gputok.components.segmenters.wordpiece import WordPieceFamily, encode_wordpiece

VARIANTS = {"uncased": {}, "cased": {"lowercase": False},
            "no_cjk": {"handle_chinese_chars": False},
            "strip_cased": {"strip_accents": True, "lowercase": False},
            "no_clean": {"clean_text": False}}
EDGES = ["", " ", "  a", "Héllo, Wörld! 中文 don't", "[CLS] x [SEP] [MASK]", "a" * 150,
         "x" * 101 + " y", "İstanbul ΣΑΣ ǅ", "\x00\ufffd\u200b a\u0301\u0316\u0300 b",
         "naïve café 日本語のテキスト", "$5+3=8 ^_^ `x` ~~", "\t\n\r\x0b\x0c\x85\u2028",
         "😀👍🏽 \U0010ffff\ue000", "ab\u0345\u0301\u0316", "don't stop!!", "ＡＢＣ１２３"]
CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def config(variant: str) -> dict:
    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    cfg["normalizer"].update(VARIANTS[variant])
    return cfg


_CACHE: dict = {}


def trio(variant: str):
    """(gputok Encoding, cpu_ref spec, HF tokenizer) for one normaliser variant."""
    if variant not in _CACHE:
        from tokenizers import Tokenizer

        from gputok.loaders.hf_json import _model

        cfg = config(variant)
        hf = Tokenizer.from_str(json.dumps(cfg))
        hf.no_truncation()
        hf.no_padding()
        _CACHE[variant] = (gputok.Encoding.from_model(_model(cfg, variant, "d")),
                           RefWordPiece(cfg), hf)
    return _CACHE[variant]


def hf_words(hf_norm, text: str) -> list:
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.BertPreTokenizer()
    return [w for w, _ in pre.pre_tokenize_str(hf_norm.normalize_str(text))]


# ---- the pinned tables -----------------------------------------------------------------------

def test_tables_equal_hf_where_python_differs():
    """On every code point where Python's ``unicodedata`` gives another clean_text /
    strip_accents / lowercase / punctuation answer than the pinned tables, HF agrees with the
    tables (Python 3.11: 13 / 386 / 55 / 106 such code points)."""
    from tokenizers import normalizers, pre_tokenizers

    t = bu.tables()
    bert = {k: normalizers.BertNormalizer(**{**dict(clean_text=False, handle_chinese_chars=False,
                                                    strip_accents=False, lowercase=False), k: True})
            for k in ("clean_text", "strip_accents", "lowercase")}
    pre = pre_tokenizers.BertPreTokenizer()
    ws = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
         "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
    diff = {"clean": [], "strip": [], "lower": [], "punct": []}
    for c in CPS:
        ch = chr(c)
        drop = ch in "\x00\ufffd" or (ch not in "\t\n\r" and unicodedata.category(ch)
                                      in ("Cc", "Cf", "Co"))
        py = "" if drop else " " if ch in ws else ch
        ours = "" if t.flags[c] & bu.DROP else " " if t.flags[c] & bu.SPACE else ch
        if py != ours:
            diff["clean"].append(c)
            assert bert["clean_text"].normalize_str(ch) == ours, hex(c)
        py = "".join(x for x in unicodedata.normalize("NFD", ch)
                     if unicodedata.category(x) != "Mn")
        ours = "".join(x for x in t.nfd.get(c, ch) if not t.flags[ord(x)] & bu.MN)
        if py != ours:
            diff["strip"].append(c)
            assert bert["strip_accents"].normalize_str(ch) == ours, hex(c)
        if ch.lower() != t.lower.get(c, ch):
            diff["lower"].append(c)
            assert bert["lowercase"].normalize_str(ch) == t.lower.get(c, ch), hex(c)
        py = (33 <= c <= 47 or 58 <= c <= 64 or 91 <= c <= 96 or 123 <= c <= 126
              or unicodedata.category(ch).startswith("P"))
        if py != bool(t.flags[c] & bu.PUNCT):
            diff["punct"].append(c)
            assert (len(pre.pre_tokenize_str(f"a{ch}a")) == 3) == bool(t.flags[c] & bu.PUNCT)
    counts = {k: len(v) for k, v in diff.items()}
    print(f"\n[bert tables] code points where Python {unicodedata.unidata_version} differs: "
          f"{counts}")
    if unicodedata.unidata_version == "14.0.0":
        assert counts == {"clean": 13, "strip": 386, "lower": 55, "punct": 106}


def test_table_file_is_what_the_generator_writes(tmp_path):
    """The shipped file holds what it says (counts in its header), reads back the same, and its
    DECOMP / LOWER flags are exactly the keys of the shared hf_norm mappings it is used with."""
    from gputok.unicode import store

    f = store.load(bu.FILE)
    runs = f.get("runs")
    store.write(tmp_path / "x.ucd", f.meta, {}, {"runs": runs})
    assert (tmp_path / "x.ucd").read_bytes() == f.path.read_bytes()
    t = bu.tables()
    assert (bu.runs_of(t.flags) == runs).all()
    counts = f.meta["counts"]
    assert counts["mn"] == int(np.count_nonzero(t.flags & bu.MN))
    assert counts["lower"] == len(t.lower) == int(np.count_nonzero(t.flags & bu.LOWER))
    assert counts["decomp"] == len(t.nfd) == int(np.count_nonzero(t.flags & bu.DECOMP))
    assert sorted(t.nfd) == np.flatnonzero(t.flags & bu.DECOMP).tolist()
    assert sorted(t.lower) == np.flatnonzero(t.flags & bu.LOWER).tolist()
    assert t.lower[0x130] == "i\u0307" and t.ccc[0x301] == 230 and t.nfd[0xE9] == "e\u0301"
    assert t.nfd[0xD4DB] == "\u1111\u1171\u11b6"  # Hangul, by arithmetic


@pytest.mark.parametrize("variant", ["uncased", "strip_cased", "no_clean"])
@pytest.mark.parametrize("context", ["{}", "A{}\u0301b"], ids=["alone", "in_context"])
def test_every_code_point_normalises_and_splits_like_hf(variant, context):
    from tokenizers import normalizers

    opts = {"clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
            "lowercase": True, **VARIANTS[variant]}
    steps, hf = BertSteps(**opts), normalizers.BertNormalizer(**opts)
    segs = [context.format(chr(c)) for c in CPS]
    got = steps.words_batch(segs)
    bad = [hex(CPS[i]) for i, s in enumerate(segs) if got[i] != hf_words(hf, s)]
    assert not bad, bad[:10]


def _native_words(steps: BertSteps, segs: list, threads: int = 2) -> list:
    """Each segment's words as the native device's BERT pass (``kernels/host_bert.h``) cuts
    them (segments as documents of one chunk)."""
    import numpy as np

    from gputok.backends import native
    from gputok.backends.native.pattern import cutter
    from gputok.components.pretokenizers.bert import BertPreTokenizer

    if not native.available()[0]:
        pytest.skip("no native device")
    data = [s.encode("utf-8") for s in segs]
    off = np.zeros(len(segs) + 1, np.int64)
    np.cumsum([len(b) for b in data], out=off[1:])
    none = np.zeros(0, np.int64)
    pre = BertPreTokenizer(steps)
    raw, pstart, _, doc_entry = cutter(pre, pre.program(), threads).cut_chunk(
        b"".join(data), off, none, none, np.zeros(0, np.uint32))
    ps = pstart.tolist()
    return [[raw[ps[e]:ps[e + 1]].decode("utf-8") for e in range(doc_entry[d], doc_entry[d + 1])]
            for d in range(len(segs))]


@pytest.mark.parametrize("variant", list(VARIANTS) + ["off"])
@pytest.mark.parametrize("context", ["{}", "A{}\u0301b"], ids=["alone", "in_context"])
def test_native_pass_equals_the_numpy_pass_on_every_code_point(variant, context):
    """The native BERT pass (normaliser and pre-tokenizer in C) against ``BertSteps`` (itself
    equal to HF on every code point: the test above), and on the edge texts."""
    opts = {"clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
            "lowercase": True, **VARIANTS.get(variant, {})}
    steps = BertSteps(normalize=False) if variant == "off" else BertSteps(**opts)
    segs = [context.format(chr(c)) for c in CPS] + EDGES
    want = steps.words_batch(segs)
    got = _native_words(steps, segs)
    bad = [ascii(s) for s, g, w in zip(segs, got, want) if g != w]
    assert not bad, bad[:10]


def test_native_pass_reorders_marks_like_hf():
    from tokenizers import normalizers

    t = bu.tables()
    marks = sorted(t.ccc)[::6]
    hf = normalizers.BertNormalizer(strip_accents=True, lowercase=False)
    steps = BertSteps(strip_accents=True, lowercase=False)
    segs = [f"a{chr(x)}{chr(y)}{chr(x)}b" for x in marks for y in marks[::5]]
    got = _native_words(steps, segs, threads=1)
    bad = [s for s, g in zip(segs, got) if g != hf_words(hf, s)]
    assert not bad, [ascii(s) for s in bad[:5]]


def test_combining_marks_reorder_like_hf():
    """Pairs of marks in both orders (NFD's canonical ordering happens before the marks go)."""
    from tokenizers import normalizers

    t = bu.tables()
    marks = sorted(t.ccc)[::6]
    hf = normalizers.BertNormalizer(strip_accents=True, lowercase=False)
    steps = BertSteps(strip_accents=True, lowercase=False)
    segs = [f"a{chr(x)}{chr(y)}b" for x in marks for y in marks[::5]]
    reset_counters()
    got = steps.words_batch(segs)
    assert counters["bert.reorder"] > 100
    bad = [s for s, g in zip(segs, got) if g != hf_words(hf, s)]
    assert not bad, [ascii(s) for s in bad[:5]]


# ---- ids -------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ids_vs_hf_and_spec(variant, corpora):
    enc, ref, hf = trio(variant)
    docs = EDGES + [d[:3000] for kind in corpora for d in corpora[kind][:10]]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend="numpy")
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want
    assert [enc.encode(d, allowed_special="all") for d in EDGES] == want[:len(EDGES)]
    assert [ref.encode(d, allowed_special="all") for d in EDGES] == want[:len(EDGES)]
    assert [enc.decode(w) for w in want] == [hf.decode(w) for w in want]


def test_scalar_and_vectorised_longest_match_agree(corpora):
    enc, _, hf = trio("uncased")
    fam = enc.model.segmenter
    words = sorted({w for kind in corpora for d in corpora[kind][:20]
                    for w in enc.model.pieces_batch([d[:5000]])[0]})
    words += ["x" * 100, "x" * 101, "unaffable", "##", "a##b", "\u00e9t\u00e9"]
    reset_counters()
    vec = fam.segment(words)
    assert counters["wordpiece.vector"] == len(words) > 5000
    assert vec == [tuple(fam.word(w)) for w in words]
    assert [list(v) for v in vec[:300]] == [
        hf.encode(w, add_special_tokens=False).ids for w in words[:300]]


def test_hand_derived_wordpiece():
    wp = WordPieceFamily({"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "a": 4, "##a": 5,
                          "##ble": 6, "able": 7}, max_input_chars_per_word=9)
    assert wp.segment(["unaffable", "able", "aaa", "unable", "unaffablx", "aaaaaaaaaa"]) == [
        (1, 2, 3), (7,), (4, 5, 5), (1, 3), (0,), (0,)]  # one failure spoils the word; > 9 chars
    assert wp.cont == wp.trie.pairs[(wp.trie.pairs[0 << 32 | ord("#")][0]) << 32
                                    | ord("#")][0]


def test_specials_and_single_tokens():
    enc, _, hf = trio("uncased")
    with pytest.raises(ValueError, match="allowed_special"):
        enc.encode("a [SEP] b")
    assert enc.encode("a [SEP] b", allowed_special="all") == hf.encode(
        "a [SEP] b", add_special_tokens=False).ids
    assert enc.encode("[SEP]", disallowed_special=()) == [1031, 19802, 1033]  # "[", "sep", "]"
    assert enc.encode_single_token("##ing") == 2075 and enc.encode_single_token("[CLS]") == 101
    assert enc.decode_single_token_bytes(2075) == b"##ing"
    ids = [101] + enc.encode("Hello, world!") + [102]  # the post-processor, done by hand
    assert ids == hf.encode("Hello, world!").ids


@settings(max_examples=fuzz_examples(), deadline=None)
@given(st.lists(st.sampled_from(list("ab AÉé\u0301\u0316,.!?'中日😀\t\n\x00\u200b") +
                                ["[SEP]", "don't", "  ", "##", "İ"]), max_size=40).map("".join))
def test_fuzz_vs_hf(text):
    for variant in ("uncased", "cased"):
        enc, _, hf = trio(variant)
        assert enc.encode(text, allowed_special="all") == hf.encode(
            text, add_special_tokens=False).ids, variant


# ---- the kernel, on the emulator ---------------------------------------------------------------

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1)]


def _words(corpora) -> list:
    enc, _, _ = trio("uncased")
    fam = enc.model.segmenter
    out = []
    for kind in corpora:
        for d in corpora[kind][:3]:
            out += enc.model.pieces_batch([d[:1500]])[0]
    return out + ["x" * 100, "x" * 101, "##", "unaffable", "\u00e9t\u00e9", "a"]


@pytest.mark.parametrize("order,seed", ORDERS, ids=[o for o, _ in ORDERS])
def test_kernel_matches_its_numpy_reference(order, seed, corpora):
    from devicekit import emu_device

    from gputok.backends import hostplan
    from gputok.backends.driver import DeviceBackend

    enc, _, _ = trio("uncased")
    fam = enc.model.segmenter
    words = _words(corpora)
    raw = [w.encode("utf-8") for w in words]
    pstart = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(b) for b in raw], out=pstart[1:])
    buf = np.frombuffer(b"".join(raw), np.uint8)
    want_scratch, want_count = encode_wordpiece(buf, pstart, fam)
    be = DeviceBackend(emu_device(order, seed))
    plan = be.model_plan(enc.model)
    # entries as the driver builds them: the words, one special token, the sentinel
    spec = np.full(len(raw) + 2, hostplan.NORMAL, np.uint32)
    spec[-2], spec[-1] = 101, hostplan.GAP
    ps = np.concatenate([pstart, [pstart[-1] + 1]]).astype(np.uint32)
    data = np.concatenate([buf, np.frombuffer(b"#", np.uint8)])
    n_ent = np.array([len(spec)], np.uint32)
    owner, count, scratch = be.stages.wordpiece(plan.tables, len(data), data, ps, spec, n_ent,
                                                len(spec))
    assert count[:len(raw)].tolist() == want_count.tolist()
    assert count[len(raw)] == 1 and scratch[ps[-2]] == 101 and count[len(raw) + 1] == 0
    for k in range(len(raw)):
        a = int(pstart[k])
        assert scratch[a:a + count[k]].tolist() == want_scratch[a:a + want_count[k]].tolist()
    assert list(map(list, fam.segment(words[:50]))) == [
        want_scratch[pstart[k]:pstart[k] + want_count[k]].tolist() for k in range(50)]


@pytest.mark.parametrize("order,seed", ORDERS, ids=[o for o, _ in ORDERS])
def test_device_pipeline_vs_hf(order, seed, corpora):
    from devicekit import emu_device

    from gputok.backends import FallbackWarning
    from gputok.backends.driver import DeviceBackend

    enc, _, hf = trio("uncased")
    docs = EDGES + [d[:1200] for kind in corpora for d in corpora[kind][:4]]
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=2048)  # several chunks in flight
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == [
        e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert be.dev.launches["encode_wordpiece"] > 3 and be.dev.launches.get("encode_merge_short",
                                                                           0) == 0
    # the words are cut on the host: a counted fallback, warned once
    assert be.fallbacks[("pretok", "split")] == 1
    assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 1
    assert be.plan(enc.model)["merge"].startswith("device")


def test_batch_word_entries_equal_the_per_segment_split():
    """``hostplan.entries_from_words`` (one normaliser call per chunk, words as arrays) builds
    exactly the entries ``entries_from_split`` builds from one ``split`` call per segment:
    special tokens between, at the ends and next to each other, empty and blank documents."""
    from gputok.backends import hostplan
    from gputok.stages.split import token_spans

    enc, _, _ = trio("uncased")
    steps = enc.model.front[1].steps  # (BERT's normaliser fused in its pre-tokenizer)
    docs = EDGES + ["[CLS][SEP]", "  [MASK]  ", "x[SEP]", "[CLS]", "\u00e9 \u4e2d\u6587 ##"]
    raw = [d.encode("utf-8") for d in docs]
    off = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(b) for b in raw], out=off[1:])
    data = b"".join(raw)
    ss, se, sid = token_spans(enc.model, data, off, frozenset(enc.special_tokens_set))
    assert len(ss) >= 8
    want = hostplan.entries_from_split(lambda t: steps.words_batch([t])[0], data, off, ss, se,
                                       sid)
    got = hostplan.entries_from_words(steps.words_bytes_batch, data, off, ss, se, sid)
    assert got[0] == want[0]
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_empty_continuing_prefix_is_kept(backend, corpora, tmp_path):
    """``continuing_subword_prefix: ""`` (nomic-bert style): continuations are plain vocabulary
    entries, as HF reads the field; it is not replaced by "##" (which gave [UNK])."""
    from tokenizers import Tokenizer

    from gputok.backends import native

    if backend == "native" and not native.available()[0]:
        pytest.skip(f"native backend unavailable: {native.available()[1]}")
    cfg = config("uncased")
    cfg["model"]["continuing_subword_prefix"] = ""
    cfg["decoder"]["prefix"] = ""
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc, hf = gputok.load(tmp_path / "tokenizer.json"), Tokenizer.from_str(json.dumps(cfg))
    hf.no_truncation()
    hf.no_padding()
    assert enc.encode("unaffable") == hf.encode("unaffable", add_special_tokens=False).ids == [
        enc.encode_single_token(t) for t in ("una", "ff", "able")]
    docs = EDGES + [d[:3000] for kind in corpora for d in corpora[kind][:10]]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    be = native.create(threads=2) if backend == "native" else "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want
    assert RefWordPiece(cfg).encode(docs[3], allowed_special="all") == want[3]
    cfg["model"]["continuing_subword_prefix"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    with pytest.raises(ValueError, match="continuing_subword_prefix must be a string"):
        gputok.load(tmp_path / "tokenizer.json")


OTHER_PRETOKENIZERS = {
    "Whitespace": {"type": "Whitespace"},
    "WhitespaceSplit": {"type": "WhitespaceSplit"},
    "Sequence": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"},
        {"type": "Split", "pattern": {"Regex": r"\d"}, "behavior": "Isolated", "invert": False}]},
}


@pytest.mark.parametrize("pre", list(OTHER_PRETOKENIZERS))
@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_other_pretokenizers_vs_hf(pre, backend, corpora, tmp_path):
    """WordPiece under a pre-tokenizer that is not BertPreTokenizer (a pattern one, after a
    separate BertNormalizer): HF's ids on every path. On the native device the model runs on the
    host, a counted fallback (its normaliser has no device form outside BERT's fused pass)."""
    from tokenizers import Tokenizer

    from gputok.backends import native

    if backend == "native" and not native.available()[0]:
        pytest.skip(f"native backend unavailable: {native.available()[1]}")
    cfg = config("uncased")
    cfg["pre_tokenizer"] = OTHER_PRETOKENIZERS[pre]
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc, hf = gputok.load(tmp_path / "tokenizer.json"), Tokenizer.from_str(json.dumps(cfg))
    hf.no_truncation()
    hf.no_padding()
    docs = EDGES + ["x²½ 1234 a1b2 ¼", "don't-stop 3.14"] + [
        d[:3000] for kind in corpora for d in corpora[kind][:8]]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    be = native.create(threads=2) if backend == "native" else "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert enc.encode_batch(docs, allowed_special="all", backend=be) == want
        assert [enc.encode(d, allowed_special="all", backend=be) for d in docs[:20]] == want[:20]
    if backend == "native":
        assert set(be.fallbacks) == {("merge", "WordPiece")}  # (counted, not silent)


def test_unsupported_pretokenizer_is_refused(tmp_path):
    cfg = config("uncased")
    cfg["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    with pytest.raises(ValueError, match="pre_tokenizer 'Digits' is not supported"):
        gputok.load(tmp_path / "tokenizer.json")
