"""SentencePiece BPE training: ``cpu_ref.spm_train`` (the rules) and gputok's trainer
(``gputok.train.spm``) against ``sentencepiece.SentencePieceTrainer`` (``model_type=bpe``, which
runs offline): pieces, scores, types and ids equal, on the project's corpora and synthetic ones
(CJK, emoji, code, runs, ties), with default options and the ones that change the result; the
written ``.model`` loads in sentencepiece and encodes as the oracle's does.
"""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import testdata
from conftest import fuzz_examples
from cpu_ref import spm_proto
from cpu_ref import spm_train as ref

spm = pytest.importorskip("sentencepiece")


def oracle(lines, **kw):
    """(pieces, model bytes) from sentencepiece's trainer, or the error it raised."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out,
                                   model_type="bpe", minloglevel=2, num_threads=2, **kw)
    return spm_proto.parse_model(out.getvalue()).pieces, out.getvalue()


def lines_of(kind: str, mb: float) -> list[str]:
    return [line for d in testdata.corpus(kind, max_mb=mb) for line in d.split("\n")]


def synthetic(seed: int, n: int = 300) -> list[str]:
    """CJK, kana, emoji, digits, code and runs: scripts, ties and repeated pieces."""
    rng = random.Random(seed)
    atoms = ["東京", "大学", "ひらがな", "カタカナー", "한국어", "😀", "👍🏽", "🇯🇵", "1234", "１２",
             "def f(x):", "x+=1;", "aaaa", "aaa", "ーー", "...", "é", "e\u0301", "Ωμέγα", "abc",
             "\t", "  ", "x", "foo_bar", "<s>", "</s>", "<0x41>"]
    return [" ".join(rng.choice(atoms) + rng.choice(["", "", "s", "ed"])
                     for _ in range(rng.randint(1, 12))) for _ in range(n)]


CASES = {
    "prose": (lambda: lines_of("prose", 0.03)[:100], dict(vocab_size=300)),
    "code": (lambda: lines_of("code", 0.02)[:300], dict(vocab_size=400)),
    "multilingual": (lambda: lines_of("multilingual", 0.02), dict(vocab_size=800)),
    "emoji": (lambda: lines_of("emoji", 0.01), dict(vocab_size=600)),
    "synthetic": (lambda: synthetic(1), dict(vocab_size=180)),
    "byte_fallback_full_coverage": (lambda: synthetic(2), dict(
        vocab_size=430, byte_fallback=True, character_coverage=1.0)),
    "coverage_0_98": (lambda: lines_of("multilingual", 0.01), dict(
        vocab_size=600, character_coverage=0.98)),
    "user_defined_and_control": (lambda: synthetic(3), dict(
        vocab_size=170, user_defined_symbols=["aaa", "東京", "<x>"],
        control_symbols=["<ctl>", "<s>"], bos_id=-1)),
    "split_digits_no_script_split": (lambda: synthetic(4), dict(
        vocab_size=250, split_digits=True, split_by_unicode_script=False)),
    "numbers_join": (lambda: synthetic(5), dict(vocab_size=200, split_by_number=False)),
    "whitespace_suffix": (lambda: synthetic(6), dict(
        vocab_size=190, treat_whitespace_as_suffix=True)),
    "whitespace_only_pieces": (lambda: synthetic(7), dict(
        vocab_size=190, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False)),
    "identity_no_dummy_prefix": (lambda: synthetic(8), dict(
        vocab_size=200, normalization_rule_name="identity", add_dummy_prefix=False)),
    "short_pieces_short_lines": (lambda: lines_of("prose", 0.01)[:150], dict(
        vocab_size=300, max_sentencepiece_length=4, max_sentence_length=200)),
    "ids_moved": (lambda: synthetic(9), dict(
        vocab_size=430, unk_id=3, bos_id=0, eos_id=-1, pad_id=1, byte_fallback=True)),
    "zero_count_merges": (lambda: ["aaaa bbb", "ab ba"] * 3, dict(vocab_size=21)),
}


@pytest.fixture(scope="module")
def corpora():
    return {name: make() for name, (make, _kw) in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_reference_equals_sentencepiece(case, corpora):
    lines, kw = corpora[case], CASES[case][1]
    want, _ = oracle(lines, **kw)
    got = ref.train_spm_bpe(lines, ref.SpmOptions(**kw))
    assert got == want


@settings(max_examples=fuzz_examples(25), deadline=None)
@given(data=st.data(), alphabet=st.sampled_from(["ab ", "aab\u3042 ", "xy1 ー", "é😀 a"]),
       extra=st.integers(0, 30))
def test_reference_on_random_text(data, alphabet, extra):
    lines = data.draw(st.lists(st.text(alphabet=alphabet, min_size=1, max_size=40), min_size=1,
                               max_size=12))
    try:
        ref_chars = ref.prepare_words(lines, ref.SpmOptions(vocab_size=10 ** 6))[1]
    except ref.SpmTrainError:
        return
    kw = dict(vocab_size=3 + len(ref_chars) + extra, character_coverage=1.0)
    try:
        want, _ = oracle(lines, **kw)
    except RuntimeError as e:
        with pytest.raises(ref.SpmTrainError, match="Vocabulary size too high"):
            ref.train_spm_bpe(lines, ref.SpmOptions(**kw))
        assert "Vocabulary size too high" in str(e)
        return
    assert ref.train_spm_bpe(lines, ref.SpmOptions(**kw)) == want


def test_errors_match_sentencepiece():
    lines = ["hello world"] * 3
    with pytest.raises(RuntimeError, match="Vocabulary size too high"):
        oracle(lines, vocab_size=100)
    with pytest.raises(ref.SpmTrainError, match="Vocabulary size too high"):
        ref.train_spm_bpe(lines, ref.SpmOptions(vocab_size=100))
    with pytest.raises(RuntimeError, match="smaller than required_chars"):
        oracle(lines, vocab_size=8)
    with pytest.raises(ref.SpmTrainError, match="smaller than required_chars"):
        ref.train_spm_bpe(lines, ref.SpmOptions(vocab_size=8))


def test_the_script_table_and_valid_pieces():
    opt = ref.SpmOptions()
    assert [ref.script(c) for c in "a東ひ1\u0301Ω"] == \
        ["Latin", "Han", "Hiragana", "Common", "Inherited", "Greek"]
    valid = ["▁abc", "東京ひら", "e\u0301", "12", "..."]
    invalid = ["a▁", "a1", "東a", "a" * 17, "a\x1f", "a\u2585"]
    assert [ref.is_valid_piece(p, opt) for p in valid] == [True] * len(valid)
    assert [ref.is_valid_piece(p, opt) for p in invalid] == [False] * len(invalid)
