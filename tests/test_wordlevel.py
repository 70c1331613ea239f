"""HF WordLevel tokenizer.json files (``components/segmenters/wordlevel.py``) against HF
``tokenizers``: each pre-tokenizer HF's WordLevelTrainer is used with, its normalisers, unk,
added tokens, decoding; numpy and native."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import gputok
import testdata
from conftest import fuzz_examples

PRES = ("Whitespace", "WhitespaceSplit", "BertPreTokenizer", "Sequence")
EDGES = ["", " ", "a\u00a0b\u3000c\u2028d\x85e\x0bf", "it's 3.14! (x_y) -- ok", "Héllo, Wörld",
         "中文字 test", "tab\there\nnew", "[CLS] a [UNK] b", "😀👍🏽", "x" * 300]
_CACHE: dict = {}


def pair(pre: str, tmp_path_factory):
    """(gputok Encoding, HF Tokenizer) of a WordLevel file trained on botchan."""
    if pre not in _CACHE:
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        if pre == "Sequence":
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                         pre_tokenizers.Metaspace()])
        else:
            tok.pre_tokenizer = getattr(pre_tokenizers, pre)()
        tok.normalizer = (normalizers.BertNormalizer() if pre == "BertPreTokenizer" else
                          normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]))
        tok.train_from_iterator(testdata.botchan_lines(), trainer=trainers.WordLevelTrainer(
            vocab_size=3000, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
        path = tmp_path_factory.mktemp(pre) / "tokenizer.json"
        tok.save(str(path))
        _CACHE[pre] = gputok.load(path), tok
    return _CACHE[pre]


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("pre", PRES)
def test_vs_tokenizers(pre, backend, corpora, tmp_path_factory):
    enc, hf = pair(pre, tmp_path_factory)
    docs = EDGES + [d[:2000] for kind in corpora for d in corpora[kind][:6]]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=backend)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want
    assert [enc.encode(d, allowed_special="all") for d in docs[:20]] == want[:20]
    assert [enc.decode(w) for w in want] == [hf.decode(w) for w in want]
    assert enc.encode_single_token(hf.id_to_token(10)) == 10


@pytest.mark.parametrize("pre", ["Whitespace", "WhitespaceSplit"])
def test_pre_tokenizer_classes_are_hf(pre):
    """Every character is a word character, whitespace or other exactly as HF's pre-tokenizer
    sees it (Oniguruma's \\w has ZWJ and not "²"): the classes probed in context on the
    characters where they once differed and on a sample of all code points."""
    from tokenizers import pre_tokenizers

    from gputok.loaders.hf_models import _pretokenizer

    hf = getattr(pre_tokenizers, pre)()
    mine = _pretokenizer({"type": pre}, lambda ok, msg: None)
    cps = [0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE, 0x200C, 0x200D, 0xFE0F, 0x85, 0xA0, 0x3000]
    cps += [cp for cp in range(0, 0x30000, 37) if not 0xD800 <= cp < 0xE000]
    for cp in cps:
        text = f"a{chr(cp)}!"
        assert mine.split(text) == [w for w, _ in hf.pre_tokenize_str(text)], hex(cp)


@settings(max_examples=fuzz_examples(40), deadline=None)
@given(text=st.lists(st.sampled_from(list("ab c\t\n.,!'é日😀") + ["the", "  ", "[CLS]", "Cat"]),
                max_size=30).map("".join))
def test_fuzz_vs_tokenizers(tmp_path_factory, text):
    for pre in PRES:
        enc, hf = pair(pre, tmp_path_factory)
        assert enc.encode(text, allowed_special="all") == \
            hf.encode(text, add_special_tokens=False).ids, pre


def test_unk_and_refusals(tmp_path):
    path = tmp_path / "tokenizer.json"
    cfg = {"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "[UNK]"},
           "pre_tokenizer": {"type": "WhitespaceSplit"}}
    path.write_text(json.dumps(cfg))
    enc = gputok.load(path)
    assert enc.encode("a b a") == [0, 1, 0]
    with pytest.raises(ValueError, match="'c' is not in the vocabulary and the unk_token"):
        enc.encode("a c")  # HF raises too: no unk token in the vocabulary
    cfg["pre_tokenizer"] = {"type": "Punctuation"}
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="pre_tokenizer 'Punctuation' is not supported"):
        gputok.load(path)
