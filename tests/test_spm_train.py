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


# ---------------------------------------------------------------- gputok's trainer


@pytest.mark.parametrize("case", list(CASES))
def test_gputok_trainer_equals_sentencepiece(case, corpora, monkeypatch):
    from gputok.train import native, spm as gspm

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native merge loop")
    lines, kw = corpora[case], CASES[case][1]
    want, _ = oracle(lines, **kw)
    assert gspm.train_spm_bpe(lines, **kw).pieces == want
    monkeypatch.setattr(native, "_par_min", 1)  # every step's words over three workers
    assert gspm.train_spm_bpe(lines, threads=3, **kw).pieces == want


@pytest.mark.parametrize("kind,vocab_size,kw", [
    ("prose", 8000, {}), ("code", 4000, {"byte_fallback": True}),
    ("multilingual", 8000, {"character_coverage": 1.0, "byte_fallback": True}),
    ("emoji", 2000, {"user_defined_symbols": ["<|endoftext|>"]})])
def test_gputok_trainer_on_real_text_and_the_model_file(kind, vocab_size, kw, tmp_path):
    """Default-sized vocabularies on the project's corpora ($GPUTOK_CORPUS_MB sizes them); the
    .model written loads in sentencepiece and encodes held-back text as the oracle's model."""
    from gputok.train import native, spm as gspm

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native merge loop")
    docs = testdata.corpus(kind)
    train = [line for d in docs[1::2] for line in d.split("\n")]
    held = docs[::2][:20]
    want, want_bytes = oracle(train, vocab_size=vocab_size, **kw)
    got = gspm.train_spm_bpe(train, vocab_size=vocab_size, **kw)
    assert got.pieces == want
    got.save(tmp_path / "m.model")
    ours = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    theirs = spm.SentencePieceProcessor(model_proto=want_bytes)
    assert ours.encode(held) == theirs.encode(held)
    assert [ours.id_to_piece(i) for i in range(ours.get_piece_size())] == [p for p, _, _ in want]
    mine, ref_model = spm_proto.load_model(tmp_path / "m.model"), spm_proto.parse_model(
        want_bytes)
    assert mine.normalizer_spec == ref_model.normalizer_spec
    assert mine.trainer_spec.byte_fallback == ref_model.trainer_spec.byte_fallback


def test_gputok_trainer_errors_and_files(tmp_path):
    from gputok.train import native, spm as gspm

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native merge loop")
    with pytest.raises(gspm.SpmTrainError, match="Vocabulary size too high"):
        gspm.train_spm_bpe(["hello world"] * 3, vocab_size=100)
    with pytest.raises(gspm.SpmTrainError, match="smaller than required_chars"):
        gspm.train_spm_bpe(["hello world"] * 3, vocab_size=8)
    with pytest.raises(TypeError, match="unknown option"):
        gspm.train_spm_bpe(["hello"], vocab_size=8, model_type="unigram")
    lines = lines_of("prose", 0.05)[:400]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    want, _ = oracle(lines, vocab_size=500)
    from pathlib import Path

    assert gspm.train_spm_bpe(Path(tmp_path / "c.txt"), vocab_size=500).pieces == want
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(input=str(tmp_path / "c.txt"), model_writer=out,
                                   model_type="bpe", vocab_size=500, minloglevel=2)
    assert spm_proto.parse_model(out.getvalue()).pieces == want  # spm_train reads lines so


def test_text_files_are_read_in_blocks_of_whole_lines(tmp_path, monkeypatch):
    """``.txt`` lines end at "\\n" only (a "\\r" stays), however the file falls into blocks;
    invalid UTF-8 names its line, or is replaced per line with errors="replace"."""
    from gputok.train import spm as gspm

    lines = ["a\r", "", "héllo wörld", "東京" * 5, "", "last"]
    path = tmp_path / "c.txt"
    for data, want in ((("\n".join(lines) + "\n").encode(), lines),
                       ("\n".join(lines).encode(), lines), (b"", []), (b"\n\n", ["", ""])):
        path.write_bytes(data)
        for block in (1, 3, 7, 1 << 20):
            monkeypatch.setattr(gspm, "_BLOCK", block)
            assert list(gspm.sentences_of(path)) == want, (data, block)
    path.write_bytes(b"ok\nfine\nbad \xff here\nafter\n")
    for block in (4, 1 << 20):
        monkeypatch.setattr(gspm, "_BLOCK", block)
        with pytest.raises(ValueError, match=r"c\.txt:3: invalid UTF-8"):
            list(gspm.sentences_of(path))
        assert list(gspm.sentences_of(path, errors="replace")) == ["ok", "fine", "bad \ufffd here",
                                                                   "after"]


def test_normalising_many_sentences_at_once():
    from gputok.components.normalizers.charsmap import CharsMap
    from gputok.components.normalizers.spm import SpmNormalizer
    from gputok.train import spm_options as gspm

    lines = lines_of("multilingual", 0.05) + synthetic(11, 50) + \
        ["", "\x00a  b", "  ", "ｱｲｳ  ", "aaa東京x", "ﬁ\u3000x"]
    for kw in ({}, {"user_defined": ["aaa", "東京"]}, {"remove_extra_whitespaces": False},
               {"treat_whitespace_as_suffix": True}):
        n = SpmNormalizer(charsmap=CharsMap(gspm.charsmap_blob("nmt_nfkc")), **kw)
        assert n.normalize_many(lines) == [n.normalize(t) for t in lines]


def _rule_sentences(blob: bytes) -> list[str]:
    """Every 37th key of a charsmap alone and in context (the rules the normaliser applies)."""
    from cpu_ref.charsmap import CharsMap as RefCharsMap

    keys = sorted(RefCharsMap(blob).rules())[::37]
    out = []
    for key in keys:
        k = key.decode("utf-8")
        out += [k, f"a{k}b", f" {k} {k}", f"{k}{k}  x"]
    return out


EDGE_LINES = ["", " ", "  a  b  ", "▁", "a ▁", "a▁▁ ", "▁▁a▁ ▁b▁", "\x00x", "a\x00 \x00b", "\r",
              "a\rb \r", "<s>x</s> y", "<0x41>", "\t a\tb", "ｱｲｳ ｱｲ", "ﾊﾟﾋﾟ ｶﾞ", "ﬁx ﬁ ﬁxﬁ",
              "a b  a  b", "東京大学 ひらがな 한국어", "😀👍🏽🇯🇵 x", "\u3000x\u3000", "a\u2585b c",
              "x " * 3000, "é" * 2100, "e\u0301 \u0301", "①②  ㍿", "\ufeffa", "a\nb c"]


@pytest.mark.parametrize("kw", [
    {}, {"byte_fallback": True}, {"user_defined_symbols": ["aaa", "x"]},
    {"user_defined_symbols": ["ｱｲ", "ﬁx", "a b"]}, {"treat_whitespace_as_suffix": True},
    {"allow_whitespace_only_pieces": True, "remove_extra_whitespaces": False},
    {"treat_whitespace_as_suffix": True, "allow_whitespace_only_pieces": True},
    {"normalization_rule_name": "identity", "add_dummy_prefix": False},
    {"normalization_rule_name": "identity", "remove_extra_whitespaces": False},
    {"max_sentence_length": 200, "control_symbols": ["<ctl>", "▁a"]},
    {"rules": "nfkc_cf"}, {"rules": "nfkc_cf", "treat_whitespace_as_suffix": True}])
def test_words_of_the_fast_path_equal_sentence_by_sentence(kw, monkeypatch):
    """The native word counting (host_train_spm_words.h: the encoder's normaliser, meta pieces,
    SplitIntoWords) equals the Python normaliser and split sentence by sentence, on real and
    synthetic text, the edge cases, and the charsmap's own rules (nmt_nfkc; nfkc_cf's, from a
    model sentencepiece trained); over one and three workers, in one batch and in many."""
    import re
    from collections import Counter

    from gputok.train import native, spm_options, spm_words

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native word counter")
    kw = dict(kw)
    if kw.pop("rules", None) == "nfkc_cf":
        import families as F

        blob = spm_proto.parse_model(F.model_source("nfkc_cf_bytes")).normalizer_spec \
            .precompiled_charsmap
        monkeypatch.setattr(spm_words, "charsmap_blob", lambda name: blob)
    o = spm_options.SpmOptions(**kw)
    blob = spm_words.charsmap_blob(o.normalization_rule_name)
    lines = lines_of("multilingual", 0.3) + lines_of("code", 0.05) + synthetic(12, 200) + \
        EDGE_LINES + (_rule_sentences(blob) if blob else [])
    norm = spm_words._normalizer(o)
    keys = sorted({p for p, _ in spm_options.meta_pieces(o).values()}, key=lambda k: (-len(k), k))
    meta = re.compile("|".join(map(re.escape, keys)))
    want: Counter = Counter()
    for s in lines:
        if s and spm_options.UNK_CHAR not in s and len(s.encode()) <= o.max_sentence_length:
            t = meta.sub(spm_options.BOUNDARY, norm.normalize(s))
            want.update(spm_words.split_into_words(t, o) if t else [])
    assert spm_words.as_counter(spm_words.count_words(lines, o, threads=1)) == want
    monkeypatch.setattr(spm_words, "BATCH", 97)
    assert spm_words.as_counter(spm_words.count_words(lines, o, threads=3)) == want


def _tie_lines() -> list[str]:
    """Words of equal counts whose pieces share their first 6+ bytes (THE SPM COMPARATOR past
    the heap entry's stored prefix), rare characters, digits and a user-defined piece."""
    stems = ["abcdefg", "abcdefh", "abcdxyz", "ñandúes", "ñandúez", "東京大学院", "東京大学生"]
    lines = [" ".join(s + t for s in stems) for t in ("", "q", "qq", "r")] * 3
    lines += ["rare ☃ ⛄ ᚠ once", "x <|endoftext|> y abcdefg", "1234 12345 123456"] * 2
    return lines


@pytest.mark.parametrize("kw", [
    dict(vocab_size=150, character_coverage=1.0),
    dict(vocab_size=150, character_coverage=0.98, user_defined_symbols=["<|endoftext|>"]),
    dict(vocab_size=400, byte_fallback=True, max_sentencepiece_length=5,
         required_chars="Ω☃"),
    dict(vocab_size=130, max_sentence_length=1 << 16, user_defined_symbols=["q q"])])
def test_gputok_trainer_from_a_text_file_in_small_pieces(kw, tmp_path, monkeypatch):
    """A .txt file goes to the native counter as bytes blocks of whole lines: lines longer
    than a block (and than the default max_sentence_length), lines holding a user-defined
    piece (counted the Python way, the rest of their block natively), rare characters below
    the coverage, required characters absent from the text; the words decoded, weighed and
    looked up a few characters at a time. Pieces equal sentencepiece's from the same lines."""
    from gputok.train import native, spm as gspm, spm_words

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native merge loop")
    long_line = " ".join(f"abcdefg{i % 7} ñandú{i % 5}" for i in range(700))  # ~11 KB
    lines = _tie_lines() + [long_line, "q q abcdefg q q"] + synthetic(13, 60) + [long_line]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    want, _ = oracle(lines, **kw)
    assert gspm.train_spm_bpe(path, **kw).pieces == want
    monkeypatch.setattr(gspm, "_BLOCK", 100)
    monkeypatch.setattr(gspm, "_CHARS_AT_ONCE", 37)
    monkeypatch.setattr(spm_words, "_DECODE_AT_ONCE", 41)
    assert gspm.train_spm_bpe(path, **kw).pieces == want
    assert gspm.train_spm_bpe(lines, **kw).pieces == want


def test_words_of_text_blocks_equal_the_sentences(tmp_path, monkeypatch):
    """count_batches over a file's bytes blocks (user-defined pieces held out per line, invalid
    UTF-8 replaced per line) counts the words the str sentences give; word_chars' runs agree
    with one decode."""
    import numpy as np

    from gputok.train import native, spm as gspm, spm_options, spm_words

    if not native.available()[0]:
        pytest.skip("no C++ compiler for the native word counter")
    o = spm_options.SpmOptions(user_defined_symbols=["<|endoftext|>", "東京"])
    lines = _tie_lines() + lines_of("multilingual", 0.05) + ["a <|endoftext|>", "東京 x"] * 3
    data = ("\n".join(lines) + "\n").encode("utf-8") + b"bad \xff line\nlast"
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    want = spm_words.as_counter(spm_words.count_words(
        list(gspm.sentences_of(path, errors="replace")), o))
    assert want[spm_options.SPACE + "bad"] == 1 and want[spm_options.SPACE + "last"] == 1
    for block in (1 << 20, 64, 5):
        monkeypatch.setattr(gspm, "_BLOCK", block)
        got = spm_words.count_batches(gspm.sentence_batches(path, errors="replace"), o)
        assert spm_words.as_counter(got) == want, block
    words = spm_words.count_words(lines, o)
    cps, off = spm_words.word_chars(words)
    text = words.data.tobytes().decode("utf-8")
    assert cps.tolist() == [ord(c) for c in text]
    for at_once in (1, 7, 1000):
        monkeypatch.setattr(spm_words, "_DECODE_AT_ONCE", at_once)
        c2, o2 = spm_words.word_chars(words)
        assert c2.tolist() == cps.tolist() and o2.tolist() == off.tolist()
    assert off[-1] == len(text) and np.all(np.diff(off) > 0)
