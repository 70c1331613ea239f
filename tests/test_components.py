"""The component protocols (``gputok/components``): every model a loader builds is made of
components that implement their protocol, and the pipeline asks nothing else of them."""

from __future__ import annotations

import pathlib
import re

import pytest

import gputok
from gputok.components import Decoder, Normalizer, PostProcessor, PreTokenizer, Segmenter
from gputok.components.normalizers import BertNormalizer, HFSteps, UnicodeSteps
from gputok.components.pretokenizers import BertPreTokenizer, Metaspace, Whole

ROOT = pathlib.Path(gputok.__file__).parent


def _parts(model):
    return {Normalizer: model.normalizer, PreTokenizer: model.pretokenizer,
            Segmenter: model.segmenter, PostProcessor: model.post, Decoder: model.detok}


def test_named_encodings_are_compositions():
    m = gputok.get_encoding("gpt2").model
    for proto, part in _parts(m).items():
        assert isinstance(part, proto), (proto.__name__, part)
    assert m.segmenter.byte_level and m.segmenter.device.stage == "merge"
    assert not m.normalizer and m.front == (None, m.pretokenizer)


@pytest.mark.parametrize("part, proto", [
    (UnicodeSteps(("NFC",)), Normalizer), (HFSteps((("prepend", "x"),)), Normalizer),
    (BertNormalizer(), Normalizer), (Whole(), PreTokenizer), (Metaspace(), PreTokenizer),
    (BertPreTokenizer(), PreTokenizer)])
def test_component_classes_implement_their_protocol(part, proto):
    assert isinstance(part, proto)


def test_bert_normaliser_alone_equals_its_fused_pass():
    norm = BertNormalizer()
    texts = ["Héllo, Wörld 中文!", "", "a\u0000b\tc", "ÅΣ\u0301x"]
    fused = BertPreTokenizer().fuse(norm)
    assert fused is not None and BertPreTokenizer().fuse(UnicodeSteps()) is None
    assert fused.split_batch(texts) == BertPreTokenizer().split_batch(norm.normalize_batch(texts))
    assert norm.normalize("Héllo 中") == "hello  中 "


def test_no_kind_strings_outside_the_loaders():
    """A family is its components: no module outside gputok/loaders compares a kind string or
    asks whether a model has a family."""
    bad = re.compile(r"\.kind\s*[!=]=\s*\"(spm-bpe|wordpiece|bytelevel-bpe|unigram|wordlevel)\""
                     r"|\bfamily is (not )?None|model\.family\b|model\.kind\b")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if "loaders" not in p.parts
            for i, line in enumerate(p.read_text("utf-8").splitlines(), 1) if bad.search(line)]
    assert hits == []


def test_every_family_a_loader_builds_is_a_composition(tmp_path):
    """One model of each family, as its loader builds it: every part implements its protocol,
    and byte-level BPE, WordPiece and SentencePiece BPE state a device form (Unigram and
    WordLevel: none)."""
    import json

    import families as F
    import testdata

    (tmp_path / "wl.json").write_text(json.dumps({
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"},
        "pre_tokenizer": {"type": "Whitespace"}}))
    (tmp_path / "uni.model").write_bytes(F.unigram_source("botchan_unigram"))
    paths = {"SentencePiece BPE": testdata.family_path("mistral_v3"),
             "WordPiece": testdata.family_path("minilm_tokenizer_json"),
             "byte-level BPE": testdata.vocab_path("qwen2_tokenizer_json"),
             "Unigram": tmp_path / "uni.model", "WordLevel": tmp_path / "wl.json"}
    for family, path in paths.items():
        m = gputok.load(path).model
        assert m.segmenter.name == family
        for proto, part in _parts(m).items():
            assert isinstance(part, proto), (family, proto.__name__, part)
        assert (m.segmenter.device is not None) == (family in ("WordPiece", "byte-level BPE",
                                                               "SentencePiece BPE", "Unigram"))


def test_metaspace_after_another_step_cuts_each_document_at_once():
    """``Sequence`` hands a Metaspace ("always", split) every document's words at once
    (``Metaspace.split_joined``): the pieces equal the word-by-word ``split_batch``, whatever
    the words hold (spaces, the replacement, newlines, nothing), and HF's on a real pipeline."""
    import random

    from gputok.components.pretokenizers import Sequence
    from gputok.stages.pretok import Pretokenizer, PretokSpec, Split

    meta = Metaspace("\u2581", "always", True)
    rng = random.Random(7)
    alphabet = ["a", "\xe9", " ", "\u2581", "\n", "x", "\U0001F600", "\t"]
    for _ in range(3000):
        docs = [["".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
                 for _ in range(rng.randrange(6))] for _ in range(rng.randrange(4))]
        want = [[p for w in ws for p in meta.split_batch([w])[0]] for ws in docs]
        assert meta.split_joined(docs) == want, docs
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.WhitespaceSplit(),
        tokenizers.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")])
    ours = Sequence([Pretokenizer(PretokSpec((Split(r"\S+"),), family="hf")), meta])
    texts = ["hi  there", "\u2581a\u2581\u2581b c", "", "  ", "d\xe9j\xe0 vu\n\tx\u2581"]
    got = ours.split_batch(texts)
    assert got == [[w for w, _ in hf.pre_tokenize_str(t)] for t in texts]
