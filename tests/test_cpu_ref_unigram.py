"""The Unigram spec (``cpu_ref/unigram.py``) against its oracles: sentencepiece for ``.model``
files (trained in-process, sentencepiece's own test models, llama.cpp's XLM-R vocabulary), HF
``tokenizers`` for its Unigram model."""

from __future__ import annotations

import json
import random

import pytest

import families as F
import testdata
from conftest import fuzz_examples
from cpu_ref.unigram import RefUnigram, UnigramHF, f32
from cpu_ref.spm_proto import CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED

MODELS = ("uni_plain", "uni_ud_bytes", "uni_identity", "botchan_unigram", "kyoto_unigram")
EDGES = ["", " ", "  a  b  ", "héllo wörld 東京 ☃ 😀", "the cat sat [X] ﬁne", "aaaaaaa",
         "\t x  y \n", "日本語のテキスト、カタカナ。", "ＡＢＣ１２３", "a\u0000b", "<s> </s> <ctl>",
         "''' \"\"\" ---"]


def _docs(corpora, n=6, chars=1500) -> list:
    return EDGES + [d[:chars] for kind in corpora for d in corpora[kind][:n]]


@pytest.mark.parametrize("name", MODELS)
def test_spec_vs_sentencepiece(name, corpora):
    import sentencepiece as spm

    data = F.unigram_source(name)
    ref, sp = RefUnigram(data), spm.SentencePieceProcessor(model_proto=data)
    for d in _docs(corpora, 3, 800):
        assert ref.encode_ordinary(d) == sp.encode(d), d[:60]
    want = sp.encode("hello world")
    assert ref.decode(want) == sp.decode(want)


def test_spec_vs_sentencepiece_xlmr(corpora):
    """llama.cpp's XLM-R vocabulary (250K pieces, nmt_nfkc charsmap) as the sentencepiece model
    it was converted from: float32 sums decide real ties (three apostrophes)."""
    import sentencepiece as spm

    from gputok.loaders.gguf import read_metadata

    meta, _ = read_metadata(testdata.family_path("llama_cpp_nomic-bert-moe"))
    data = F.model_from_t5_gguf(meta)
    ref, sp = RefUnigram(data), spm.SentencePieceProcessor(model_proto=data)
    docs = ["Anarchism '''is''' a", "'''", "x''''y"] + _docs(corpora, 2, 600)
    for d in docs:
        assert ref.encode_ordinary(d) == sp.encode(d), d[:60]


def _crafted(rng: random.Random) -> bytes:
    """A small Unigram model with tied scores, user-defined and unused pieces."""
    alphabet = "ab▁c"
    pieces = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL)]
    seen = {"<unk>", "<s>"}
    for _ in range(rng.randint(3, 14)):
        p = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
        if p in seen:
            continue
        seen.add(p)
        kind = rng.choice([NORMAL] * 6 + [USER_DEFINED, UNUSED])
        pieces.append((p, rng.choice([-1.0, -2.0, -0.5, -1.5, -3.25, -0.0]), kind))
    return F.model_bytes(pieces, trainer={"model_type": 1},
                         normalizer={"add_dummy_prefix": rng.random() < 0.5})


def test_crafted_models_vs_sentencepiece():
    """Ties (equal scores: the earliest start, then the shortest piece wins), user-defined
    bonuses, unused pieces skipped, unknown characters, on models sentencepiece loads too."""
    import sentencepiece as spm

    rng = random.Random(20261128)
    for k in range(fuzz_examples(60)):
        data = _crafted(rng)
        ref, sp = RefUnigram(data), spm.SentencePieceProcessor(model_proto=data)
        for _ in range(20):
            text = "".join(rng.choice("ab c xé▁") for _ in range(rng.randint(0, 25)))
            assert ref.encode_ordinary(text) == sp.encode(text), (k, text)


def test_unknown_score_and_float32_rounding():
    # the unknown edge scores min_score - 10 (float32); "x" has no piece: one fused unk
    data = F.model_bytes([("<unk>", 0.0, UNKNOWN), ("▁", -1.0, NORMAL), ("a", -2.0, NORMAL)],
                         trainer={"model_type": 1})
    ref = RefUnigram(data)
    assert ref.unk_score == f32(-12.0) and ref.encode_ordinary("axxa") == [1, 2, 0, 2]
    assert f32(0.1) != 0.1 and f32(f32(0.1) + f32(0.2)) == f32(0.3)


def _hf_unigram(byte_fallback: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(testdata.botchan_lines(), trainer=trainers.UnigramTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>"], unk_token="<unk>"))
    cfg = json.loads(tok.to_str())
    if byte_fallback:  # the trainer does not write byte tokens: add them, as converters do
        cfg["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
        cfg["model"]["byte_fallback"] = True
    return cfg, Tokenizer.from_str(json.dumps(cfg))


@pytest.mark.parametrize("byte_fallback", [False, True])
def test_hf_model_vs_tokenizers(byte_fallback, corpora):
    cfg, hf = _hf_unigram(byte_fallback)
    m = cfg["model"]
    ref = UnigramHF([tuple(v) for v in m["vocab"]], m["unk_id"], byte_fallback)
    # (the model alone: no text with the added token <s>, which HF cuts out before the words)
    for d in [d for d in _docs(corpora, 3, 800) if "<s>" not in d] + ["<0x41> xy東京 qq"]:
        words = [w for w, _ in hf.pre_tokenizer.pre_tokenize_str(d)] if d else []
        assert [i for w in words for i in ref.encode_word(w)] == \
            hf.encode(d, add_special_tokens=False).ids, d[:60]


def test_hf_fuses_unknown_runs_before_the_lookup():
    """HF fuses consecutive unknown edges (and the unk token itself) into one piece, then looks
    the piece up: a fused run that spells an entry is that entry."""
    u = UnigramHF([("<unk>", 0.0), ("a", -1.0), ("xy", -100.0)], 0, False)
    assert u.pieces("axya") == ["a", "xy", "a"] and u.encode_word("axya") == [1, 2, 1]
    assert u.encode_word("azza") == [1, 0, 1]
