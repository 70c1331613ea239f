"""Real vocabularies of the byte-level, SentencePiece and GGUF families gputok once refused.

* llama.cpp's test GGUF files (``testdata.LLAMA_CPP_VOCABS``: Command-R, DeepSeek-Coder,
  DeepSeek-LLM, Falcon, MPT, Phi-3, Qwen 3.5, Refact, StarCoder), each with its test texts and
  the ids the family's own HF tokenizer gives them: gputok (numpy and native) and cpu_ref give
  those ids.
* The same vocabularies as tokenizer.json files (rebuilt from the GGUF with the pre-tokenizer the
  name stands for; HF on the rebuilt file gives the test ids above, so the file is faithful) and
  DeepSeek's own tokenizer.json files: gputok == HF on the corpora (``$GPUTOK_FAMILY_GPUTOK_MB``
  per kind, default 0.05) and on a fuzz (``$GPUTOK_FUZZ_EXAMPLES``, default 25) whose texts hold
  the characters these vocabularies lack (controls, planes 4-11), on numpy and native (Falcon,
  StarCoder and DeepSeek-Coder by default; every one with ``GPUTOK_ALL_VOCABS=1``).
* The rule for a byte the vocabulary lacks (``cpu_ref.hf.RefHF.symbols``) on hand-made files:
  skipped without an unk token (neighbours merge across it), unk with one (fused with
  ``fuse_unk``), refused when the unk token is not in the vocabulary.
"""

from __future__ import annotations

import functools
import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref import gguf as ref_gguf
from cpu_ref import gguf_pre as ref_pre
from cpu_ref.hf import BYTE_TO_UNICODE, RefHF

BYTE_LEVEL = ("command-r", "deepseek-coder", "deepseek-llm", "falcon", "mpt", "qwen35", "refact",
              "starcoder")
SETTINGS = settings(max_examples=fuzz_examples(25), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _backends() -> list:
    from gputok.backends import native

    return ["numpy"] + (["native"] if native.available()[0] else [])


def _batch(enc, docs, backend) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


@functools.lru_cache(maxsize=None)
def _gguf(name: str):
    return gputok.load(testdata.family_path(f"llama_cpp_{name}"))


# ---- llama.cpp's test texts and the source tokenizers' ids -----------------------------------

# (the largest two, Command-R's 256K and DeepSeek-LLM's 100K tokens, with GPUTOK_ALL_VOCABS=1)
GGUF_NAMES = [n for n in testdata.LLAMA_CPP_VOCABS
              if os.environ.get("GPUTOK_ALL_VOCABS") or n not in ("command-r", "deepseek-llm")]


@pytest.mark.parametrize("name", GGUF_NAMES)
def test_gguf_gives_the_source_tokenizers_ids(name):
    cases = testdata.llama_cpp_cases(name)
    enc = _gguf(name)
    texts, want = [t for t, _ in cases], [w for _, w in cases]
    assert [enc.encode_ordinary(t) for t in texts] == want
    for backend in _backends():
        assert _batch(enc, texts, backend) == want, backend
    ref = ref_gguf.load(testdata.family_path(f"llama_cpp_{name}"))
    assert [ref.encode_ordinary(t) for t in texts] == want


def test_gemma4_is_bpe_on_characters():
    """Gemma 4 (``tokenizer.ggml.model = "gemma4"``): "▁" for spaces, merges by rank on
    characters across words (">▁</" is one token), newline runs apart, <0xXX> byte fallback,
    tokens typed USER_DEFINED always split out; decoding gives the text back."""
    enc = _gguf("gemma-4")
    from gputok.components.segmenters.hf_charbpe import HFSpmFamily

    assert isinstance(enc.model.segmenter, HFSpmFamily)
    tok = enc.encode_single_token
    assert enc.encode_ordinary("> </") == [tok(">\u2581</")]
    assert enc.encode_ordinary("a\n\n\nb") == [tok("a"), tok("\n\n\n"), tok("b")]
    assert enc.encode_ordinary("\U000e0100") == [tok(f"<0x{b:02X}>") for b in
                                                   "\U000e0100".encode()]
    assert enc.encode_ordinary("x<|tool_call>y") == [tok("x"), 48, tok("y")]
    assert enc.encode("<bos>", allowed_special="all") == [2]
    text = "  Grüße,\tworld!\n\n 😶\u200d🌫️ > </a>\U000e0100"
    assert enc.decode(enc.encode_ordinary(text)) == text
    ref = ref_gguf.load(testdata.family_path("llama_cpp_gemma-4"))
    assert ref.decode_bytes(ref.encode_ordinary(text)).decode() == text
    assert ref.encode_ordinary(text) == enc.encode_ordinary(text)


def test_phi3_unk_is_the_unknown_token_id():
    """Phi-3's GGUF types "<unk>" CONTROL and 53 padding tokens UNKNOWN: the unk is
    ``tokenizer.ggml.unknown_token_id``; the padding tokens are control tokens (as in
    llama.cpp), plain text unless allowed."""
    enc = _gguf("phi-3")
    assert enc.model.segmenter.unk_id == 0
    assert enc.encode("[PAD32011]", allowed_special="all") == [32011]
    assert 32011 not in enc.encode_ordinary("[PAD32011]")


def test_spm_model_with_two_unknown_pieces_is_refused_like_sentencepiece(tmp_path):
    import families as F
    import sentencepiece as spm
    from cpu_ref.spm_proto import CONTROL, NORMAL, UNKNOWN

    data = F.model_bytes([("<unk>", 0, UNKNOWN), ("<s>", 0, CONTROL), ("a", -1, NORMAL),
                          ("[PAD]", 0, UNKNOWN)])
    with pytest.raises(RuntimeError, match="unk is already defined"):
        spm.SentencePieceProcessor(model_proto=data)
    (tmp_path / "m.model").write_bytes(data)
    with pytest.raises(ValueError, match="more than one UNKNOWN piece"):
        gputok.load(tmp_path / "m.model")


def test_qwen35_does_not_normalise():
    enc = _gguf("qwen35")
    assert enc.encode_ordinary("e\u0301") == [68, 53839] != enc.encode_ordinary("\u00e9")
    assert ref_pre.pre_tokenizer("qwen35").normalizer is None
    assert ref_pre.pre_tokenizer("qwen2").normalizer == "NFC"


# ---- tokenizer.json files: gputok == HF on corpora and a fuzz --------------------------------

def tokenizer_json_from_gguf(name: str) -> dict:
    """The tokenizer.json a byte-level GGUF was converted from, rebuilt: vocabulary = tokens,
    the merges, CONTROL tokens special added tokens and USER_DEFINED ones plain added tokens,
    the pre-tokenizer ``tokenizer.ggml.pre`` names (``cpu_ref.gguf_pre``), no unk token."""
    meta = ref_gguf.read_metadata(testdata.family_path(f"llama_cpp_{name}"))
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    pre = ref_pre.pre_tokenizer(meta.get("tokenizer.ggml.pre"))
    vocab: dict = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return {
        "version": "1.0", "truncation": None, "padding": None, "post_processor": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": k == 3}
                         for i, (t, k) in enumerate(zip(tokens, types)) if k in (3, 4)],
        "normalizer": {"type": pre.normalizer} if pre.normalizer else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
              for r in pre.regexes),
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": pre.ignore_merges,
                  "vocab": vocab, "merges": meta["tokenizer.ggml.merges"]},
    }


@functools.lru_cache(maxsize=None)
def _pair(key: str):
    """(gputok Encoding, HF Tokenizer) of a byte-level tokenizer.json."""
    import tempfile
    from pathlib import Path

    from tokenizers import Tokenizer

    if key.startswith("real-"):
        path = testdata.family_path(f"{key[5:].replace('-', '_')}_tokenizer_json")
    else:
        path = Path(tempfile.mkdtemp()) / "tokenizer.json"
        path.write_text(json.dumps(tokenizer_json_from_gguf(key), ensure_ascii=False), "utf-8")
    return gputok.load(path), Tokenizer.from_file(str(path))


# the default run: the vocabularies that lack bytes text can hold (controls; planes 4-11), and
# DeepSeek's own file; ``GPUTOK_ALL_VOCABS=1``: every one (Command-R's 256K tokens take ~10 s)
JSON_KEYS = (list(BYTE_LEVEL) + ["real-deepseek-coder", "real-deepseek-llm"]
             if os.environ.get("GPUTOK_ALL_VOCABS") else
             ["falcon", "starcoder", "real-deepseek-coder"])


@pytest.mark.parametrize("name", [k for k in JSON_KEYS if not k.startswith("real-")])
def test_rebuilt_tokenizer_json_is_faithful(name):
    _, hf = _pair(name)
    for text, want in testdata.llama_cpp_cases(name):
        assert hf.encode(text, add_special_tokens=False).ids == want, ascii(text)


def _docs(corpora) -> list:
    cap = int(float(os.environ.get("GPUTOK_FAMILY_GPUTOK_MB", "").strip() or 0.05) * 1e6)
    out = []
    for kind in corpora:
        total = 0
        for d in corpora[kind]:
            if total >= cap:
                break
            out.append(d)
            total += len(d.encode("utf-8"))
    return out + ["a\x03b .\x03. \x0b\x1c x\U00040000y \U00080001\x04", "\x03", "\x03\x04 \x05"]


@pytest.mark.parametrize("key", JSON_KEYS)
def test_tokenizer_json_vs_hf_on_corpora(key, corpora):
    enc, hf = _pair(key)
    docs = _docs(corpora)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    for name in _backends():
        from gputok.backends import native

        backend = native.create(threads=2) if name == "native" else name
        got = _batch(enc, docs, backend)
        bad = [i for i in range(len(docs)) if got[i] != want[i]]
        print(f"\n[parity] {key} ({name}): {len(docs)} docs, {len(bad)} mismatched")
        assert not bad, (name, ascii(docs[bad[0]][:80]))
        if name == "native":  # the merge runs on the device, whatever bytes are missing
            assert not [k for k in backend.fallbacks if k[0] == "merge"], backend.fallbacks
            assert backend.plan(enc.model)["merge"].startswith("device")


GAP_CHARS = ["\x03", "\x04", "\x0b", "\x11", "\x1c", "\x1e", "\U00040000", "\U0004abcd",
             "\U00080000", "\U000b0101", "\u00f5", "\u00ff", "\u00c0", ".", "..", " ", "a", "1",
             "\n", "é", "中", "😀", "\u200d"]
gap_texts = st.one_of(
    st.lists(st.sampled_from(GAP_CHARS), max_size=30).map("".join),
    st.lists(st.one_of(st.sampled_from(GAP_CHARS), st.text(max_size=8)), max_size=10)
    .map("".join))


@pytest.mark.parametrize("key", JSON_KEYS)
@SETTINGS
@given(text=gap_texts)
def test_fuzz_vs_hf(key, text):
    enc, hf = _pair(key)
    want = hf.encode(text, add_special_tokens=False).ids
    assert enc.encode_ordinary(text) == want
    for backend in _backends():
        assert _batch(enc, [text, "x", text], backend) == [want, enc.encode_ordinary("x"), want]


# ---- the rule, on hand-made files --------------------------------------------------------------

def _hand(missing, merges, *, unk=None, fuse=False, ignore=False, unk_in_vocab=True) -> dict:
    vocab = {BYTE_TO_UNICODE[b]: 0 for b in range(256) if b not in missing}
    vocab = {t: i for i, t in enumerate(vocab)}
    spelled = [(BYTE_TO_UNICODE.get(a, a) if isinstance(a, int) else a,
                BYTE_TO_UNICODE.get(b, b) if isinstance(b, int) else b) for a, b in merges]
    if unk is not None and unk_in_vocab:
        vocab[unk] = len(vocab)
    for a, b in spelled:
        vocab.setdefault(a + b, len(vocab))
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "post_processor": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": False, "use_regex": True},
            "decoder": None, "truncation": None, "padding": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": unk, "fuse_unk": fuse,
                      "byte_fallback": False, "ignore_merges": ignore, "vocab": vocab,
                      "merges": [f"{a} {b}" for a, b in spelled]}}


HAND = {
    "skip": _hand({3, 4}, [(".", "."), ("..", "."), ("a", "b")]),
    "unk": _hand({3, 4}, [(".", "."), (".", "<unk>")], unk="<unk>"),
    "unk-fused": _hand({3, 4}, [(".", "."), ("<unk>", ".")], unk="<unk>", fuse=True),
    "skip-ignore-merges": _hand({3}, [(".", "."), ("..", ".")], ignore=True),
}


@pytest.mark.parametrize("case", list(HAND))
def test_missing_byte_rule_vs_hf_and_spec(case, tmp_path):
    from tokenizers import Tokenizer

    cfg = HAND[case]
    if case == "skip-ignore-merges":  # a whole word holding a missing byte is still one token
        cfg["model"]["vocab"][".\u0103."] = len(cfg["model"]["vocab"])
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc, hf, ref = gputok.load(tmp_path / "tokenizer.json"), Tokenizer.from_str(json.dumps(cfg)), \
        RefHF(cfg)
    texts = [".\x03.", ".\x03\x04.\x04.", "\x03", "\x03\x04", "ab\x03", "a\x03b", "x \x03 y",
             ".\x03" * 50 + "." * 30, "\x04" * 300 + "ab", "." * 40 + "\x03" + "." * 41,
             "\x03\x04" * 2000 + "ab" * 1000, ""]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert [ref.encode_ordinary(t) for t in texts] == want
    assert [enc.encode_ordinary(t) for t in texts] == want
    for backend in _backends():
        assert _batch(enc, texts, backend) == want, backend
    if case == "skip":  # hand-derived: the neighbours of a skipped byte merge
        assert want[:3] == [[enc.encode_single_token("..")], [enc.encode_single_token("...")], []]


def test_unk_token_missing_from_vocab_is_refused(tmp_path):
    from tokenizers import Tokenizer

    cfg = _hand({3}, [], unk="<unk>", unk_in_vocab=False)
    hf = Tokenizer.from_str(json.dumps(cfg))
    assert hf.encode("ab", add_special_tokens=False).ids == [96, 97]  # (byte 3 is missing)
    with pytest.raises(Exception, match="Unk token"):
        hf.encode("a\x03", add_special_tokens=False)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        RefHF(cfg).encode_ordinary("a\x03")
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    with pytest.raises(ValueError, match="unk_token '<unk>' is not in model.vocab"):
        gputok.load(tmp_path / "tokenizer.json")


def test_entries_outside_the_byte_alphabet_load_like_hf(tmp_path):
    """Command-R's vocabulary holds "\\u200d" and other entries not spelled in the byte
    alphabet: unreachable by merging, decoded as their text, as HF does."""
    from tokenizers import Tokenizer

    cfg = _hand(set(), [("a", "b")])
    vocab = cfg["model"]["vocab"]
    for t in ("\u200d", "a\u200d", "\u0120\u203c"):
        vocab[t] = len(vocab)
    cfg["model"]["merges"].append("a \u200d")
    cfg["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                      "use_regex": False}
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc, hf = gputok.load(tmp_path / "tokenizer.json"), Tokenizer.from_str(json.dumps(cfg))
    text = "a\u200d ab \u203c"
    assert enc.encode_ordinary(text) == hf.encode(text, add_special_tokens=False).ids
    ids = [vocab["\u200d"], vocab["a\u200d"], vocab["\u0120\u203c"], vocab["ab"]]
    assert enc.decode(ids) == hf.decode(ids)
