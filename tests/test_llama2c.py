"""llama2.c ``tokenizer.bin`` (``gputok/loaders/llama2c.py``, spec ``cpu_ref/llama2c.py``).

No package on the index ships llama2.c's own tokenizer.bin, so the real-vocabulary file is
written here from the pinned Mistral v1 ``.model`` (32,000 pieces, the Llama 2 layout: <unk>,
<s>, </s>, then the 256 byte pieces) by the rules of llama2.c's exporter ("▁" as " ", BOS
"\\n<s>\\n", EOS "\\n</s>\\n", ``uint32`` max length, records ``float32 score, uint32 length,
bytes``). On it gputok (numpy, native), cpu_ref's literal ``run.c`` rule and sentencepiece on the
``.model`` agree; hand-made files check the rule's corners with hand-derived ids.
"""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import families as F
import gputok
from conftest import fuzz_examples
from cpu_ref.llama2c import RefLlama2c, read

BYTES = [f"<0x{b:02X}>" for b in range(256)]


def write_bin(path, tokens, scores):
    data = [t.encode("utf-8") for t in tokens]
    out = [struct.pack("<I", max(map(len, data)))]
    for t, s in zip(data, scores):
        out.append(struct.pack("<fI", s, len(t)) + t)
    path.write_bytes(b"".join(out))
    return path


def export(model_proto: bytes, path):
    """llama2.c's exporter, on a SentencePiece model."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    tokens, scores = [], []
    for i in range(sp.get_piece_size()):
        t = sp.id_to_piece(i)
        t = "\n<s>\n" if i == sp.bos_id() else "\n</s>\n" if i == sp.eos_id() else t
        tokens.append(t.replace("\u2581", " "))
        scores.append(sp.get_score(i))
    return write_bin(path, tokens, scores)


def _backends():
    from gputok.backends import native

    return ["numpy"] + (["native"] if native.available()[0] else [])


def _batch(enc, texts, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, off = enc.encode_batch_arrays(texts, backend=backend, disallowed_special=())
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


# ids: 0-2 specials, 3-258 bytes, then:
HAND = ["<unk>", "\n<s>\n", "\n</s>\n"] + BYTES + [
    " ", "a", "b", "c", " a", "ab", "bc", " ab", "aa", "aaa"]
#   259  260  261  262   263   264   265    266   267    268
HAND_SCORES = [0.0] * 259 + [-1, -2, -3, -4, -5, -6, -6, -7, -9, -8]


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    path = write_bin(tmp_path_factory.mktemp("l2c") / "tokenizer.bin", HAND, HAND_SCORES)
    return gputok.load(path), RefLlama2c.load(path)


def test_hand_derived_ids(hand):
    enc, ref = hand
    cases = {
        "": [],
        "ab": [266],             # " "+"a" (-5) first, then " a"+"b" (-7)
        "bc": [259, 265],        # dummy " ", then "bc"
        "abc": [263, 265],       # " a" (-5) before "ab"/"bc" (-6); then " a"+"bc" is no token
        "aaa": [263, 267],       # " a" (-5) beats "aa" (-9); then "aa"
        "a aa": [263, 263, 260],  # two " a" merges (leftmost first), an "a" left
        "é": [259, 0xC3 + 3, 0xA9 + 3],  # no token: its UTF-8 bytes, id = byte + 3
        "<s>": [259] + [0x3C + 3, 0x73 + 3, 0x3E + 3],  # plain text: its bytes
    }
    for text, want in cases.items():
        assert ref.encode(text) == want, text
    assert [enc.encode_ordinary(t) for t in cases] == list(cases.values())
    for backend in _backends():
        assert _batch(enc, list(cases), backend) == list(cases.values()), backend
    assert enc.encode("<s>", allowed_special="all") == [1]
    assert enc.decode(enc.encode_ordinary("a bé")) == " a bé"[1:]  # (the dummy space dropped)


@settings(max_examples=fuzz_examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from(["a", "b", "c", " ", "aa", "é", "\n", "<s>"]),
                     max_size=30).map("".join))
def test_fuzz_equals_spec(hand, text):
    enc, ref = hand
    assert enc.encode_ordinary(text) == ref.encode(text)


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    path = export(F.model_source("mistral_v1"), tmp_path_factory.mktemp("l2c") / "tok.bin")
    return path, gputok.load(path), RefLlama2c.load(path)


def test_exported_model_reads_back(mistral):
    path, enc, _ = mistral
    max_len, tokens, scores = read(path.read_bytes())
    assert len(tokens) == 32000 == enc.n_vocab and max_len == max(map(len, tokens))
    assert tokens[1] == b"\n<s>\n" and enc.encode_single_token("<s>") == 1


def test_real_vocabulary_equals_spec_and_sentencepiece(mistral, corpora):
    _, enc, ref = mistral
    sp = F.spm_oracle(F.model_source("mistral_v1"))
    short = ["Hello world", "  two  spaces", "Grüße, 世界! 😀", "tab\there\nline", "x=1;y=22",
             "<s>[INST]", "ſ\u200d\U0010fffd"]
    assert [ref.encode(t) for t in short] == [sp.encode(t) for t in short]
    docs = short + [d[:2000] for kind in corpora for d in corpora[kind][:12]]
    want = [sp.encode(d) for d in docs]
    assert [enc.encode_ordinary(d) for d in docs] == want
    for backend in _backends():
        assert _batch(enc, docs, backend) == want, backend


def test_text_holding_the_space_symbol(mistral):
    """The exported tokens hold " " where the .model had "▁": a "▁" in the text is a character
    no token holds, so run.c gives its three bytes (id = byte + 3), never the space token."""
    _, enc, ref = mistral
    for text in ("a\u2581b", "\u2581", "x \u2581\u2581 y", "\u2581\u2581▁hello"):
        want = ref.encode(text)
        assert enc.encode_ordinary(text) == want, text
        for backend in _backends():
            assert _batch(enc, [text], backend) == [want], backend
    got = enc.encode_ordinary("a\u2581b")
    assert enc.decode(enc.encode(" x", allowed_special="all")) == " x"  # (only the dummy one)
    assert enc.decode([1] + enc.encode_ordinary("hi there")) == "hi there"
    assert [0xE2 + 3, 0x96 + 3, 0x81 + 3] == got[1:4] and enc.decode(got) == "a\u2581b"


@pytest.mark.parametrize("what, tokens, match", [
    ("no byte tokens", ["<unk>", "<s>", "</s>", " ", "a"], "needs <unk>, <s>, </s>"),
    ("bytes elsewhere", ["<unk>", "<s>", "</s>", " "] + BYTES, "token 3 is ' '"),
    ("a duplicate", HAND + ["ab"], "are both 'ab'"),
    ("a special made by merging", HAND + ["<un", "k>"], "token 0 '<unk>' is the concatenation"),
    ("a merge of a byte token", HAND + ["<0x41>a"], "merges a byte token"),
])
def test_refused(tmp_path, what, tokens, match):
    path = write_bin(tmp_path / "tokenizer.bin", tokens, [0.0] * len(tokens))
    with pytest.raises(ValueError, match=match):
        gputok.load(path)


def test_truncated_file(tmp_path):
    path = write_bin(tmp_path / "tokenizer.bin", HAND, HAND_SCORES)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="token 268 claims 3 bytes"):
        gputok.load(path)
    with pytest.raises(ValueError, match="token 268 claims 3 bytes"):
        read(path.read_bytes())
