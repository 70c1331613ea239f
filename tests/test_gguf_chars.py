"""GGUF vocabularies whose BPE runs on characters (``gputok/loaders/gguf_chars.py``): hand-made
files, encoded by gputok (numpy, native) and by ``cpu_ref.gguf.RefCharBpe`` (llama.cpp's rule,
literally), with hand-derived ids; what the loader refuses. The real Gemma 4 vocabulary is in
``test_real_vocabs.py``."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gputok
from conftest import fuzz_examples
from cpu_ref import gguf as G

BYTES = [f"<0x{b:02X}>" for b in range(256)]
# id:     0        1     2    3    4     5     6    7       8       9     10     11     12
BASE = ["<unk>", "<s>", "a", "b", "ab", "\u2581", "\u2581ab", "\n", "\n\n", "c", "b\n", "ca",
        "<x>"]
MERGES = ["a b", "\u2581 ab", "\n \n", "b \n", "c a"]


def _write(tmp_path, tokens, types, merges, *, model="gemma4", pre=None):
    import gguf

    path = tmp_path / "v.gguf"
    w = gguf.GGUFWriter(str(path), arch="gemma4")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def _types(tokens):
    return [3 if t in ("<unk>", "<s>") else 4 if t == "<x>" else 6 if t in BYTES else 1
            for t in tokens]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    tokens = BASE + BYTES
    path = _write(tmp_path_factory.mktemp("chars"), tokens, _types(tokens), MERGES)
    return gputok.load(path), G.load(path), {t: i for i, t in enumerate(tokens)}


def _backends():
    from gputok.backends import native

    return ["numpy"] + (["native"] if native.available()[0] else [])


def _all_ways(enc, texts):
    want = [enc.encode_ordinary(t) for t in texts]
    for backend in _backends():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ids, off = enc.encode_batch_arrays(texts, backend=backend, disallowed_special=())
        assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want, backend
    return want


def test_hand_derived_ids(vocab):
    enc, ref, ids = vocab
    cases = {
        # "▁ab" merges across the space; "b\n" never forms (runs merge apart)
        "ab ab": [ids["ab"], ids["\u2581ab"]],
        "ab\n\nab": [ids["ab"], ids["\n\n"], ids["ab"]],
        "b\nc": [ids["b"], ids["\n"], ids["c"]],
        # "\n\n\n": "\n\n" + "\n" (no token for three), leftmost pair first
        "b\n\n\nca": [ids["b"], ids["\n\n"], ids["\n"], ids["ca"]],
        # "é" is no token: its UTF-8 bytes; the tab too
        "é\t": [ids["<0xC3>"], ids["<0xA9>"], ids["<0x09>"]],
        # a USER_DEFINED token is always cut out; CONTROL ones only when allowed
        "a<x>b<s>": [ids["a"], ids["<x>"], ids["b"], ids["<0x3C>"], ids["<0x73>"],
                     ids["<0x3E>"]],
        "": [],
    }
    for text, want in cases.items():
        assert ref.encode_ordinary(text) == want, ascii(text)
    assert _all_ways(enc, list(cases)) == list(cases.values())
    assert enc.encode("a<s>", allowed_special="all") == [ids["a"], ids["<s>"]]
    assert ref.encode("a<s>", allowed_special="all") == [ids["a"], ids["<s>"]]
    assert enc.decode(enc.encode_ordinary("ab ab\n\né<x>")) == "ab ab\n\né<x>"


CHARS = ["a", "b", "c", " ", "\n", "é", "\t", "<x>", "<s>", "ab", "\u2581"]


@settings(max_examples=fuzz_examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from(CHARS), max_size=40).map("".join))
def test_fuzz_equals_spec(vocab, text):
    enc, ref, _ = vocab
    assert enc.encode_ordinary(text) == ref.encode_ordinary(text)


def test_without_byte_tokens(tmp_path):
    """llama.cpp drops a character without a token after merging (its neighbours stay apart);
    HF's family would drop it before: gputok refuses such a file."""
    path = _write(tmp_path, BASE, _types(BASE), MERGES)
    assert G.load(path).encode_ordinary("aéb") == [2, 3]
    with pytest.raises(ValueError, match="0 of the 256 <0xXX> byte tokens"):
        gputok.load(path)


def test_gpt2_model_with_a_character_level_pre(tmp_path):
    tokens = BASE + BYTES
    path = _write(tmp_path, tokens, _types(tokens), MERGES, model="gpt2", pre="sarvam-moe")
    enc, ref = gputok.load(path), G.load(path)
    assert enc.encode_ordinary("ab ab\n") == ref.encode_ordinary("ab ab\n") == [4, 6, 7]


@pytest.mark.parametrize("what, tokens, merges, match", [
    ("some byte tokens", BASE + BYTES[:10], MERGES, "10 of the 256"),
    ("a merge of a byte token", BASE + BYTES, MERGES + ["<0x41> a"], "merges a byte token"),
    ("an unreachable newline token", BASE + ["\n\n\n"] + BYTES, MERGES,
     "newline token '\\\\n\\\\n\\\\n' is not reached"),
    ("a bad merge", BASE + BYTES, MERGES + ["ab"], "expected 'a b'"),
])
def test_refused(tmp_path, what, tokens, merges, match):
    path = _write(tmp_path, tokens, _types(tokens), merges)
    with pytest.raises(ValueError, match=match):
        gputok.load(path)
