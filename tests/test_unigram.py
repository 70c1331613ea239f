"""Unigram models in gputok (``components/segmenters/unigram.py``) against their oracles, on the
numpy and native backends: sentencepiece ``.model`` files (trained in-process, sentencepiece's
botchan and Kyoto models), llama.cpp's XLM-R GGUF (``tokenizer.ggml.model = "t5"``) and HF
Unigram tokenizer.json files, on the project's corpora and a fuzz."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import families as F
import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref.spm_proto import NORMAL, UNKNOWN, USER_DEFINED
from cpu_ref.unigram import RefUnigram
from gputok.backends import get_backend
from gputok.stages import counters, reset_counters

MODELS = ("uni_plain", "uni_ud_bytes", "uni_identity", "botchan_unigram", "kyoto_unigram")
BACKENDS = ("numpy", "native")
EDGES = ["", " ", "  a  b  ", "héllo wörld 東京 ☃ 😀", "the cat sat [X] ﬁne", "aaaaaaa",
         "\t x  y \n", "日本語のテキスト、カタカナ。", "ＡＢＣ１２３", "a\u0000b", "''' \"\"\" ---",
         "x\ud800y"]
_CACHE: dict = {}


def pair(name: str):
    """(gputok Encoding, sentencepiece) of a Unigram model."""
    if name not in _CACHE:
        import sentencepiece as spm

        from gputok.loaders import spm_model

        data = F.unigram_source(name)
        enc = gputok.Encoding.from_model(spm_model.model_from_spec(spm_model.parse(data), name,
                                                                   where=name))
        _CACHE[name] = enc, spm.SentencePieceProcessor(model_proto=data)
    return _CACHE[name]


def _sp(sp, text: str) -> list:
    return sp.encode(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))


def _docs(corpora, n=8, chars=3000) -> list:
    return EDGES + [d[:chars] for kind in corpora for d in corpora[kind][:n]]


def _batch(enc, texts, backend, **kw) -> list:
    ids, off = enc.encode_batch_arrays(texts, backend=backend, **kw)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MODELS)
def test_corpora_vs_sentencepiece(name, backend, corpora):
    enc, sp = pair(name)
    docs = _docs(corpora)
    want = [_sp(sp, d) for d in docs]
    assert _batch(enc, docs, backend, disallowed_special=()) == want
    assert [enc.encode_ordinary(d) for d in docs[:40]] == want[:40]
    assert [enc.decode(w) for w in want[:40]] == [sp.decode(w) for w in want[:40]]


def test_native_runs_the_lattice():
    """The native device runs the lattice (and the SPM normaliser) itself: no counted host
    stage, a model whose normaliser keeps user-defined pieces whole too (THE USER-DEFINED
    MATCH in the native normaliser); numpy runs it all on the host, counted."""
    enc, sp = pair("uni_plain")
    be = get_backend("native")
    before = dict(be.fallbacks)
    reset_counters()
    docs = ["hello world", "  two  spaces ", "日本語", ""] * 3
    assert _batch(enc, docs, be) == [sp.encode(d) for d in docs]
    assert enc.encode("hello world", backend=be) == sp.encode("hello world")
    assert dict(be.fallbacks) == before
    assert counters["device.unigram_calls"] >= 1
    assert all(where.startswith("device") for st, where in be.plan(enc.model).items()
               if st != "split"), be.plan(enc.model)
    enc2, sp2 = pair("uni_ud_bytes")
    docs2 = docs + ["ab the cat ﬁ [X] ▁the abc", "ＡＢ ｆｉ ﬁx  the  cat "]
    assert _batch(enc2, docs2, be) == [_sp(sp2, d) for d in docs2]
    assert [enc2.encode_ordinary(d, backend=be) for d in docs2] == [_sp(sp2, d) for d in docs2]
    assert dict(be.fallbacks) == before
    assert all(where.startswith("device") for st, where in be.plan(enc2.model).items()
               if st != "split"), be.plan(enc2.model)
    np_be = get_backend("numpy")
    assert be.plan(enc.model)["merge"] != np_be.plan(enc.model)["merge"]


def test_specials_split_sentences():
    enc, sp = pair("uni_ud_bytes")
    got = enc.encode("hi<ctl>there <ctl>", allowed_special="all")
    ctl = enc.encode_single_token("<ctl>")
    assert got == sp.encode("hi") + [ctl] + sp.encode("there ") + [ctl]
    with pytest.raises(ValueError, match="<ctl>"):
        enc.encode("x<ctl>")


def test_float32_sums_and_their_rebase(tmp_path):
    """Sums are float32 from the sentence start, and sentencepiece rebases them past 1e5: a
    vocabulary of scores near -1000 crosses it every ~100 pieces (cpu_ref, numpy, sentencepiece
    agree over texts thousands of pieces long, tied and untied)."""
    import sentencepiece as spm

    pieces = [("<unk>", 0.0, UNKNOWN), ("a", -1000.0, NORMAL), ("b", -1000.25, NORMAL),
              ("ab", -2000.25, NORMAL), ("ba", -2000.0, NORMAL), ("aba", -3000.125, NORMAL),
              ("bb", -1999.0, USER_DEFINED), ("▁", -999.5, NORMAL)]
    data = F.model_bytes(pieces, trainer={"model_type": 1})
    path = tmp_path / "heavy.model"
    path.write_bytes(data)
    enc, ref, sp = gputok.load(path), RefUnigram(data), spm.SentencePieceProcessor(model_proto=data)
    texts = ["ab" * 700, "aba b" * 300 + "bb", "ba" * 451 + "x" + "ab" * 300, "a" * 5]
    want = [sp.encode(t) for t in texts]
    assert [ref.encode_ordinary(t) for t in texts] == want
    reset_counters()
    assert _batch(enc, texts, "numpy") == want  # (few units: each on its own)
    assert counters["unigram.steps"] == 0
    many = [t + "ab" * k for k in range(5) for t in texts[:3]]  # (in lockstep, then alone)
    assert _batch(enc, many, "numpy") == [sp.encode(t) for t in many]
    assert counters["unigram.steps"] > 1000


def test_the_rebase_decides(tmp_path):
    """A text whose best path sentencepiece finds only because it rebases its float32 sums
    (found by search: without the rebase the spec, and gputok, pick another path)."""
    import random

    import sentencepiece as spm

    pieces = [("<unk>", 0.0, UNKNOWN), ("a", -1000.7138938812757, NORMAL),
              ("b", -1001.6326876758878, NORMAL), ("ab", -2002.3475815571635, NORMAL),
              ("ba", -2002.3495815571634, NORMAL)]
    data = F.model_bytes(pieces, trainer={"model_type": 1},
                         normalizer={"add_dummy_prefix": False})
    path = tmp_path / "r.model"
    path.write_bytes(data)
    enc, sp = gputok.load(path), spm.SentencePieceProcessor(model_proto=data)
    text = ("baabbaabbbaaabaaaababbbbbbabaaababbbbbbbabababaabbaabbababaabbbaaabbbaabaaaaabbbaabb"
            "babbbbabbabbbbbabbabaabbbbbbaaabbbbbababbbbbaaababababaabbabaababbaaaababbababbbbbbb"
            "bbabaaabbaabbbaabaaaaabaabaabaabaababbabaaaaaabaabbababbabbaaaaaaabaabbababbbbbbabba"
            "aabaaabbbababbbbbbaaabababaabbbabababaabaabaaabaabaaabbbaaaaaabaaaaabbbbbbbabababbab"
            "aaabbbaabaababbbababbbaababbabbababababaaaabaabaaabaababaaaabbabbbaabbbbbaabbabababa"
            "bbabbbbbababbabaaabbaaabbbabbbaaaabbabbbaaabbabbbbabbaabaaaaabbaabaaaabbbabbbbbbbbaa"
            "aaababaaaababaabaaabaababbbbaaaabaaababbaabaaabbbababbabbbbababbbbbbaaabbabaaaaabaaa"
            "aabbaaabbbba")
    assert RefUnigram(data).encode_ordinary(text) == sp.encode(text)
    assert _batch(enc, [text], "numpy") == [sp.encode(text)]  # (one unit: on its own)
    rng = random.Random(1)
    many = [text[:rng.randrange(400, 600)] for _ in range(12)]  # (in lockstep)
    assert _batch(enc, many, "numpy") == [sp.encode(t) for t in many]


@settings(max_examples=fuzz_examples(40), deadline=None)
@given(st.lists(st.sampled_from(list("ab c\t\n▁éﬁ１日😀<>s/'") + ["the", "  ", "[X]", "<ctl>"]),
                max_size=40).map("".join))
def test_fuzz_vs_sentencepiece(text):
    for name in ("uni_plain", "uni_ud_bytes", "kyoto_unigram"):
        enc, sp = pair(name)
        assert enc.encode_ordinary(text) == sp.encode(text), name
        assert _batch(enc, [text, text[::-1]], "numpy", disallowed_special=()) == [
            sp.encode(text), sp.encode(text[::-1])], name


# ---- GGUF t5 -------------------------------------------------------------------------------

def test_xlmr_gguf_vs_sentencepiece(corpora):
    """llama.cpp's XLM-RoBERTa vocabulary (250K pieces, nmt_nfkc charsmap): ids equal the
    sentencepiece model it was converted from; add_special_tokens adds <s> ... </s> as
    llama.cpp does (add_bos_token, add_eos_token)."""
    import sentencepiece as spm

    from gputok.loaders.gguf import read_metadata

    path = testdata.family_path("llama_cpp_nomic-bert-moe")
    meta, _ = read_metadata(path)
    sp = spm.SentencePieceProcessor(model_proto=F.model_from_t5_gguf(meta))
    enc = gputok.load(path)
    docs = _docs(corpora, 4, 2000)
    want = [_sp(sp, d) for d in docs]
    assert _batch(enc, docs, "numpy", disallowed_special=()) == want
    assert enc.encode("Hello world", add_special_tokens=True) == [0, 35378, 8999, 2]


def test_t5_gguf_written_from_a_model(tmp_path):
    import sentencepiece as spm

    data = F.unigram_source("botchan_unigram")
    path = F.gguf_from_spm_unigram(data, tmp_path / "botchan.gguf")
    enc, sp = gputok.load(path), spm.SentencePieceProcessor(model_proto=data)
    docs = EDGES[:-1] + testdata.botchan_lines()[:200]
    assert _batch(enc, docs, "numpy", disallowed_special=()) == [sp.encode(d) for d in docs]
    # llama.cpp's t5 default: add_eos with the eos id 1 when the file names none
    assert enc.encode("hi", add_special_tokens=True) == sp.encode("hi") + [1]


# ---- HF Unigram tokenizer.json ------------------------------------------------------------

def _hf(tmp_path, byte_fallback: bool, pre: str = "Metaspace"):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = (pre_tokenizers.Metaspace() if pre == "Metaspace" else
                         pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                  pre_tokenizers.Metaspace()]))
    tok.train_from_iterator(testdata.botchan_lines(), trainer=trainers.UnigramTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>"], unk_token="<unk>"))
    cfg = json.loads(tok.to_str())
    if byte_fallback:
        cfg["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
        cfg["model"]["byte_fallback"] = True
    cfg["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                      "split": True}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg))
    return gputok.load(path), Tokenizer.from_str(json.dumps(cfg))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("byte_fallback,pre", [(False, "Metaspace"), (True, "Sequence")])
def test_hf_unigram_vs_tokenizers(tmp_path, byte_fallback, pre, backend, corpora):
    enc, hf = _hf(tmp_path, byte_fallback, pre)
    docs = EDGES[:-1] + _docs(corpora, 5, 2000)[len(EDGES):] + ["<s>a <s>", "<0x41> xyz東京 qq"]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert _batch(enc, docs, backend, allowed_special="all") == want
    assert [enc.decode(w) for w in want] == [hf.decode(w) for w in want]
    reset_counters()
    enc.encode_batch([f"qz{i}x vq{i}" for i in range(4)] * 2, backend="numpy")
    assert counters["unigram.units"] == 8  # the lattice ran once per distinct word


def test_hf_unigram_refusals(tmp_path):
    cfg = {"model": {"type": "Unigram", "unk_id": 5, "vocab": [["a", -1.0]]}}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unk_id 5 is not an id"):
        gputok.load(path)
    cfg = {"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]},
           "normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}}
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="Precompiled needs a precompiled_charsmap"):
        gputok.load(path)
    cfg = {"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}
    path.write_text(json.dumps(cfg))
    enc = gputok.load(path)
    assert enc.encode("aaa") == [0, 0, 0]
    with pytest.raises(ValueError, match="no unk_id"):
        enc.encode("ab")
