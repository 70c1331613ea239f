"""Differential fuzzing against tiktoken (hypothesis). Examples: ``$GPUTOK_FUZZ_EXAMPLES``.

The alphabet mixes every class the patterns care about (letters of each case, marks, digits
including non-ASCII ones, apostrophes, all whitespace kinds, punctuation, CJK, emoji, controls)
with general Unicode text and lone surrogates (tiktoken repairs those; so must we).

Unicode-version note: general text is drawn from every code point, and ``newer`` adds code points
whose class moved between Unicode versions (unassigned for the oracles' Unicode 16.0 tables,
letters, digits or marks for a recent ``regex`` or ``unicodedata``): gputok's answer must be the
oracle's whatever is installed (see ``gputok/unicode``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gputok
from conftest import NAMED, fuzz_examples, tiktoken_oracle

TRICKY = list("aZéÉßǅʰ中日本ﾟ\u0301\u0915\u093f0129٣²½'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
              ".,!?-_/\\\"#$%&*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0f") + ["'s", "'ll", "'VE", "\r\n", "  ", "<|endoftext|>"]


# some of the code points assigned in Unicode 17.0 (unassigned for the oracles' 16.0 tables)
NEWER = [(0x323B0, 0x33479), (0x3D000, 0x3FC3F), (0x18E00, 0x19191), (0x0558, 0x0558),
         (0xA7CE, 0xA7CE)]
newer_char = st.sampled_from(NEWER).flatmap(lambda r: st.integers(*r)).map(chr)
general = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
newer = st.lists(st.one_of(newer_char, st.sampled_from(TRICKY)), max_size=20).map("".join)
tricky = st.lists(st.sampled_from(TRICKY), max_size=60).map("".join)
runs = st.tuples(st.sampled_from(TRICKY), st.integers(1, 400)).map(lambda t: t[0] * t[1])
surrogate_text = st.lists(st.one_of(st.sampled_from(TRICKY),
                                    st.integers(0xD800, 0xDFFF).map(chr)), max_size=20).map("".join)
texts = st.one_of(general, tricky, runs, surrogate_text, newer,
                  st.lists(st.one_of(general, tricky, runs), max_size=4).map("".join))

SETTINGS = settings(max_examples=fuzz_examples(), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", NAMED)
@SETTINGS
@given(text=texts)
def test_fuzz_vs_tiktoken(name, text):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    assert enc.encode_ordinary(text) == tk.encode_ordinary(text)
    assert enc.encode(text, allowed_special="all") == tk.encode(text, allowed_special="all")
    ids, off = enc.encode_batch_arrays([text, text[::-1]], disallowed_special=())
    assert ids.tolist() == tk.encode_ordinary(text) + tk.encode_ordinary(text[::-1])


@SETTINGS
@given(text=texts)
def test_fuzz_roundtrip(text):
    enc = gputok.get_encoding("o200k_base")
    fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert enc.decode(enc.encode_ordinary(text)) == fixed


# ---------------------------------------------------------------- HF tokenizer.json files

HF_TRICKY = TRICKY + ["e\u0301", "\u0041\u030a", "\u1100\u1161\u11a8", "\ufb01", "\u212b",
                      "\u0301\u0323", "\u1e0b\u0323", "<|im_start|>", "<|im_end|>",
                      "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                      "<|eot_id|>", " \u3000 ", "\t \n"]
hf_texts = st.one_of(general, st.lists(st.sampled_from(HF_TRICKY), max_size=40).map("".join),
                     st.lists(st.one_of(general, st.sampled_from(HF_TRICKY)), max_size=8)
                     .map("".join))


@functools.lru_cache(maxsize=None)
def _hf_pair(key: str, strip: bool):
    """(gputok Encoding, HF Tokenizer) for a tokenizer.json, optionally with lstrip/rstrip set
    on two of its added tokens."""
    import json
    import tempfile

    from tokenizers import Tokenizer

    import testdata
    from conftest import HF_FILES

    path = testdata.vocab_path(HF_FILES[key])
    if strip:
        cfg = json.loads(path.read_text("utf-8"))
        names = {"qwen2": ("<|im_start|>", "<|im_end|>"),
                 "llama3": ("<|start_header_id|>", "<|end_header_id|>")}[key]
        for t in cfg["added_tokens"]:
            t["lstrip"], t["rstrip"] = t["content"] == names[0], t["content"] == names[1]
        path = Path(tempfile.mkdtemp()) / "tokenizer.json"
        path.write_text(json.dumps(cfg, ensure_ascii=False), "utf-8")
    return gputok.load(path), Tokenizer.from_file(str(path))


@pytest.mark.parametrize("strip", [False, True], ids=["plain", "lstrip-rstrip"])
@pytest.mark.parametrize("key", ["llama3", "qwen2"])
@SETTINGS
@given(text=hf_texts)
def test_fuzz_vs_hf_tokenizers(key, strip, text):
    enc, hf = _hf_pair(key, strip)
    fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    want = hf.encode(fixed, add_special_tokens=False).ids
    assert enc.encode(text, allowed_special="all") == want
    ids, off = enc.encode_batch_arrays([text, "x", text], allowed_special="all")
    assert ids.tolist() == want + enc.encode("x") + want
