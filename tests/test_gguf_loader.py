"""``gputok.load("x.gguf")``: the metadata reader, the pre-tokenizer table, and GGUF files
written here (with the ``gguf`` package) from the vocabularies we have, which must give the
source tokenizer's ids through gputok (and agree with ``cpu_ref.gguf``)."""

from __future__ import annotations

import json
import os

import pytest

import families as F
import gputok
import testdata
from conftest import LazyMap, tiktoken_oracle
from cpu_ref import gguf as G, gguf_pre as ref_pre
from gputok.loaders import gguf as L, gguf_pre

EDGES = ["", " ", " hello  world\n\n", "Grüße, 世界! 👋🏽 code: x += 1\n", "I'm  don't 12345 'ſ",
         "\t\tdef f(x):\n    return x\n", "a\n  ", "ｆｕｌｌ ﬁ", "<s> [INST] </s>"]


def _hf(path):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    hf.no_truncation()
    hf.no_padding()
    return hf


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (GGUF path, the source tokenizer's ids, encode kwargs), each written on first
    use (a byte-level GGUF of a 150k vocabulary takes seconds to write)."""
    d = tmp_path_factory.mktemp("gguf")

    def from_json(key, src, pre, flag):
        cfg = json.loads(testdata.vocab_path(src).read_text("utf-8"))
        path = F.gguf_from_tokenizer_json(cfg, d / f"{key}.gguf", pre=pre)
        if flag is not None:  # "llama-bpe" means ignore_merges (see test_cpu_ref_gguf.py)
            cfg["model"]["ignore_merges"] = flag
        hf = F.hf_oracle_for(cfg)
        return (path, lambda t, hf=hf: hf.encode(t, add_special_tokens=False).ids,
                {"allowed_special": "all"})

    def r50k():
        tk = tiktoken_oracle("r50k_base")
        return (F.gguf_from_tiktoken(tk._mergeable_ranks, tk._special_tokens, d / "r50k.gguf",
                                     pre="gpt-2"),
                lambda t: tk.encode(t, allowed_special="all"), {"allowed_special": "all"})

    def spm(name):
        sp = F.spm_oracle(F.model_source(name))
        return (F.gguf_from_spm(F.model_source(name), d / f"{name}.gguf"), sp.encode,
                {"disallowed_special": ()})

    def minilm():
        src = testdata.family_path("minilm_tokenizer_json")
        hf = _hf(src)
        return (F.gguf_from_wordpiece(json.loads(src.read_text("utf-8")), d / "minilm.gguf"),
                lambda t: hf.encode(t, add_special_tokens=False).ids, {"allowed_special": "all"})

    builders = {"qwen2": lambda: from_json("qwen2", "qwen2_tokenizer_json", "qwen2", None),
                "llama3": lambda: from_json("llama3", "llama3_tokenizer_json", "llama-bpe", True),
                "r50k_base": r50k, "minilm": minilm}
    for name in ("mistral_v1", "mistral_v3", "mistral_v7", "identity_keep_ws"):
        builders[name] = lambda name=name: spm(name)
    return LazyMap(builders)


@pytest.mark.parametrize("name", ["qwen2", "llama3", "r50k_base", "mistral_v1", "mistral_v3",
                                  "mistral_v7", "identity_keep_ws", "minilm"])
def test_gguf_ids_equal_the_source_tokenizer(files, name, corpora):
    path, oracle, kwargs = files[name]
    enc = gputok.load(path)
    docs = EDGES + [d[:3000] for kind in corpora for d in corpora[kind][:12]]
    want = [oracle(d) for d in docs]
    ids, off = enc.encode_batch_arrays(docs, backend="numpy", **kwargs)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want
    assert [enc.encode(d, **kwargs) for d in EDGES] == want[:len(EDGES)]
    ref = G.load(path)
    assert [ref.encode(d, **kwargs) for d in EDGES] == want[:len(EDGES)]


@pytest.mark.parametrize("name", ["mistral_v3", "identity_keep_ws", "minilm", "qwen2"])
def test_reader_equals_spec(files, name):
    meta, digest = L.read_metadata(files[name][0])
    assert meta == G.read_metadata(files[name][0])
    assert len(digest) == 32


def test_reader_big_endian_v3_and_errors(tmp_path):
    import gguf

    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama", endianess=gguf.GGUFEndian.BIG)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a", "▁a"])
    w.add_token_scores([0.0, -1.5, -0.25])
    w.add_token_types([2, 1, 1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    meta, _ = L.read_metadata(path)
    assert meta["tokenizer.ggml.tokens"] == ["<unk>", "a", "▁a"]
    assert meta["tokenizer.ggml.scores"] == [0.0, -1.5, -0.25]
    # "▁b": "▁" and "b" are both unknown, one run, one unk id
    assert gputok.load(path).encode("a a b") == [2, 2, 0] == G.load(path).encode_ordinary("a a b")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match="bad.gguf: truncated GGUF metadata"):
        gputok.load(bad)
    with pytest.raises(ValueError, match="'nope' is not supported.*'gpt2'.*'llama'.*'t5'"):
        L.model_from_metadata({"tokenizer.ggml.model": "nope", "tokenizer.ggml.tokens": ["a"]},
                              "nope")
    with pytest.raises(ValueError, match="unknown tokenizer.ggml.pre 'nope'.*llama-bpe.*qwen2"):
        L.model_from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "nope",
                               "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": []}, "x")
    with pytest.raises(ValueError, match="no tokenizer.ggml.tokens"):
        L.model_from_metadata({"tokenizer.ggml.model": "llama"}, "x")


def test_pre_tokenizer_table_equals_spec():
    assert set(gguf_pre.PRE_TOKENIZERS) == set(ref_pre.PRE_TOKENIZERS)
    for name, pre in gguf_pre.PRE_TOKENIZERS.items():
        want = ref_pre.PRE_TOKENIZERS[name]
        assert (pre.regexes, pre.ignore_merges, pre.normalizer) == (
            want.regexes, want.ignore_merges, want.normalizer), name


def test_gguf_specials_decode_and_gputok_api(files):
    enc = gputok.load(files["llama3"][0])
    hf = _hf(testdata.vocab_path("llama3_tokenizer_json"))
    text = "hi <|begin_of_text|> there"
    with pytest.raises(ValueError, match="allowed_special"):
        enc.encode(text)
    ids = enc.encode(text, allowed_special="all")
    assert enc.decode(ids) == hf.decode(ids, skip_special_tokens=False)
    sp_enc = gputok.load(files["mistral_v3"][0])
    sp = F.spm_oracle(F.model_source("mistral_v3"))
    ids = sp.encode("Grüße  \n 世界 😀\U0010fffd")
    assert sp_enc.decode(ids) == sp.decode(ids)
    wp = gputok.load(files["minilm"][0])
    hf = _hf(testdata.family_path("minilm_tokenizer_json"))
    ids = hf.encode("Héllo, wörld! don't", add_special_tokens=False).ids
    assert wp.decode(ids) == hf.decode(ids) and wp.model.segmenter.name == "WordPiece"


def test_llama_gguf_of_a_charsmap_model_does_not_normalise(tmp_path):
    """As llama.cpp reads it, and as cpu_ref.gguf states: the charsmap is not applied."""
    path = F.gguf_from_spm(F.model_source("botchan_bpe"), tmp_path / "botchan.gguf")
    enc, ref = gputok.load(path), G.load(path)
    sp = F.spm_oracle(F.model_source("botchan_bpe"))
    for text in EDGES + testdata.botchan_lines()[:100]:
        assert enc.encode_ordinary(text) == ref.encode_ordinary(text), text
    assert enc.encode_ordinary("ｆｕｌｌ") != sp.encode("ｆｕｌｌ") == sp.encode("full")


def test_a_file_seen_before_is_not_parsed_again(tmp_path, monkeypatch):
    """A cached GGUF's key comes from the hint of its first load (size, mtime, first 4 KB ->
    the bytes its metadata digest covers), checked by hashing those bytes: no parse. A file
    changed under the same size and mtime fails that check and is parsed anew."""
    from cpu_ref.spm_proto import parse_model
    from gputok.loaders import model_cache

    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUTOK_MODEL_CACHE", raising=False)
    monkeypatch.setattr(model_cache, "MIN_BUILD_S", 0.0)
    pieces = parse_model(F.model_source("mistral_v1")).pieces
    k = next(i for i, (p, _, t) in enumerate(pieces) if t == 1 and p == "▁world")
    changed = list(pieces)
    changed[k] = ("▁QQQQQ", *pieces[k][1:])  # (the same number of bytes)
    path = F.gguf_from_spm(F.model_bytes(pieces), tmp_path / "m.gguf")
    other = F.gguf_from_spm(F.model_bytes(changed), tmp_path / "other.gguf")
    text = "Hello world QQQQQ"
    want = gputok.load(path).encode(text, backend="numpy")
    parsed = []
    real = L._read_metadata
    monkeypatch.setattr(L, "_read_metadata", lambda p: parsed.append(p) or real(p))
    assert gputok.load(path).encode(text, backend="numpy") == want
    assert not parsed
    st = path.stat()
    assert other.stat().st_size == st.st_size
    path.write_bytes(other.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same size and mtime
    got = gputok.load(path).encode(text, backend="numpy")
    assert parsed == [path] and got != want
    assert got == gputok.load(other).encode(text, backend="numpy")
