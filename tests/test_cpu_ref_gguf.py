"""cpu_ref.gguf: the metadata reader, the pre-tokenizer table, and GGUF files written here (with
the ``gguf`` package) from vocabularies we have, which must give the source tokenizer's ids.
"""

from __future__ import annotations

import json

import pytest

import families as F
import testdata
from conftest import LazyMap, tiktoken_oracle
from cpu_ref import gguf as G, gguf_pre, patterns
from cpu_ref.hf import BYTE_TO_UNICODE

EDGES = ["", " ", " hello  world\n\n", "Grüße, 世界! 👋🏽 code: x += 1\n", "I'm  don't 12345 'ſ",
         "\t\tdef f(x):\n    return x\n", "a\n  ", "ｆｕｌｌ ﬁ", "<s> [INST] </s>"]


def _hf(key: str):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(key))
    hf.no_truncation()
    hf.no_padding()
    return hf


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (GGUF path, function giving the source tokenizer's ids, encode kwargs), each
    written on first use."""
    d = tmp_path_factory.mktemp("gguf")

    # llama.cpp's "llama-bpe" means ignore_merges (as Meta's tiktoken original does), but our
    # pinned Llama 3 tokenizer.json says "ignore_merges": false: so the "llama-bpe" GGUF is
    # compared with that file with the flag set, and "smaug-bpe" (same regex, no flag) with the
    # file as it is.
    def from_json(key, src_key, pre, flag):
        cfg = json.loads(testdata.vocab_path(src_key).read_text("utf-8"))
        path = F.gguf_from_tokenizer_json(cfg, d / f"{key}.gguf", pre=pre)
        if flag is not None:
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

    builders = {
        "qwen2_tokenizer_json": lambda: from_json("qwen2_tokenizer_json", "qwen2_tokenizer_json",
                                                  "qwen2", None),
        "llama3_tokenizer_json": lambda: from_json("llama3_tokenizer_json",
                                                   "llama3_tokenizer_json", "llama-bpe", True),
        "llama3_smaug": lambda: from_json("llama3_smaug", "llama3_tokenizer_json", "smaug-bpe",
                                          None),
        "r50k_base": r50k, "minilm": minilm}
    for name in ("mistral_v1", "mistral_v3", "mistral_v7", "identity_keep_ws"):
        builders[name] = lambda name=name: spm(name)
    return LazyMap(builders)


NAMES = ["qwen2_tokenizer_json", "llama3_tokenizer_json", "llama3_smaug", "r50k_base", "mistral_v1", "mistral_v3",
         "mistral_v7", "identity_keep_ws", "minilm"]


# -- the reader ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mistral_v3", "identity_keep_ws", "minilm", "tiny_gpt2"])
def test_reader_matches_gguf_package(files, name, tmp_path):
    """Every key, as the gguf package reads it. (The big byte-level files are left to the ids
    tests: the package's reader takes ~20 s on a 150k-token vocabulary.)"""
    import gguf

    if name == "tiny_gpt2":
        path = F._write_gguf(tmp_path / "tiny.gguf", "gpt2", ["a", "b", "ab", "<|x|>"],
                             [1, 1, 1, 3], pre="gpt-2", merges=["a b"])
    else:
        path = files[name][0]
    ours = G.read_metadata(path)
    reader = gguf.GGUFReader(str(path))
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert sorted(keys) == sorted(ours)
    for k in keys:
        f = reader.fields[k]
        want = f.contents()
        got = ours[k]
        if isinstance(want, list) and want and isinstance(want[0], float):
            assert [float(x) for x in got] == want, k  # both float32 values
        else:
            assert got == want, k


def test_reader_big_endian_and_errors(tmp_path):
    import gguf

    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama", endianess=gguf.GGUFEndian.BIG)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a", "▁a"])
    w.add_token_scores([0.0, -1.5, -0.25])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    meta = G.read_metadata(path)
    assert meta["tokenizer.ggml.tokens"] == ["<unk>", "a", "▁a"]
    assert meta["tokenizer.ggml.scores"] == [0.0, -1.5, -0.25]
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + path.read_bytes()[4:])
    with pytest.raises(G.GGUFError, match="bad.gguf: not a GGUF file"):
        G.read_metadata(bad)
    bad.write_bytes(path.read_bytes()[:40])
    with pytest.raises(G.GGUFError, match="bad.gguf: .*(truncated|runs past)"):
        G.read_metadata(bad)


def test_unsupported_models_and_names(tmp_path):
    with pytest.raises(G.GGUFError, match="'t5' is not supported.*'gpt2'.*'llama'.*'bert'"):
        G.from_metadata({"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(ValueError, match="unknown tokenizer.ggml.pre 'nope'.*llama-bpe.*qwen2"):
        G.from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "nope",
                         "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": []})


# -- the pre-tokenizer table --------------------------------------------------------------------

def test_table_regexes_are_the_tokenizer_json_ones():
    for key, name in (("qwen2_tokenizer_json", "qwen2"), ("llama3_tokenizer_json", "llama-bpe")):
        cfg = json.loads(testdata.vocab_path(key).read_text("utf-8"))
        split = cfg["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
        assert gguf_pre.pre_tokenizer(name).regexes == (split,)
    assert gguf_pre.pre_tokenizer("llama-bpe").ignore_merges
    assert gguf_pre.pre_tokenizer(None) == gguf_pre.pre_tokenizer("default")
    for pre in gguf_pre.PRE_TOKENIZERS.values():
        for r in pre.regexes:
            patterns.compile_pattern(r)


def _hf_pretok(spec: list):
    from tokenizers import pre_tokenizers as P

    return P.Sequence(spec)


def _ours(name: str, text: str) -> list[str]:
    pieces = [text]
    for r in gguf_pre.pre_tokenizer(name).regexes:
        pieces = [p for piece in pieces for p in patterns.split_isolated(r, piece)]
    return ["".join(BYTE_TO_UNICODE[b] for b in p.encode("utf-8")) for p in pieces]


def _hf_equivalents():
    """Pre-tokenizers as the models' tokenizer.json files declare them."""
    from tokenizers import Regex, pre_tokenizers as P

    byte_level = P.ByteLevel(add_prefix_space=False, use_regex=True)
    out = {"gpt-2": [byte_level], "mpt": [byte_level],
           "starcoder": [P.Digits(individual_digits=True), byte_level],
           "command-r": [P.Digits(individual_digits=True), byte_level]}
    for name in ("deepseek-llm", "deepseek-coder", "deepseek-v3"):
        out[name] = [P.Split(Regex(r), behavior="isolated")
                     for r in gguf_pre.pre_tokenizer(name).regexes]
        out[name].append(P.ByteLevel(add_prefix_space=False, use_regex=False))
    return out


def test_table_entries_vs_hf_pre_tokenizers(corpora):
    docs = EDGES + [d[:4000] for kind in corpora for d in corpora[kind][:10]]
    for name, spec in _hf_equivalents().items():
        hf = _hf_pretok(spec)
        for d in docs:
            assert _ours(name, d) == [w for w, _ in hf.pre_tokenize_str(d)], (name, d[:60])


# -- GGUF files give the source tokenizer's ids ----------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_gguf_ids_equal_source(files, name, corpora):
    path, oracle, kwargs = files[name]
    ref = G.load(path)
    docs = EDGES + [d[:3000] for kind in corpora for d in corpora[kind][:15]]
    bad = [d for d in docs if ref.encode(d, **kwargs) != oracle(d)]
    assert not bad, f"{name}: {len(bad)} mismatched, first {bad[0][:60]!r}"


def test_gguf_decode_and_specials(files):
    ref = G.load(files["llama3_tokenizer_json"][0])
    hf = _hf(testdata.vocab_path("llama3_tokenizer_json"))
    text = "hi <|begin_of_text|> there"
    with pytest.raises(ValueError, match="allowed_special"):
        ref.encode(text)
    ids = ref.encode(text, allowed_special="all")
    assert ids == hf.encode(text, add_special_tokens=False).ids
    assert ref.decode_bytes(ids).decode("utf-8") == hf.decode(ids, skip_special_tokens=False)
    sp_ref = G.load(files["mistral_v3"][0])
    sp = F.spm_oracle(F.model_source("mistral_v3"))
    ids = sp.encode("Grüße  \n 世界 😀")
    assert sp_ref.decode(ids) == sp.decode(ids)


def test_bert_token_spelling_round_trips():
    vocab = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    tokens = list(vocab["model"]["vocab"])
    assert [G.unphantom(F.phantom(t)) for t in tokens] == tokens


def test_llama_gguf_drops_the_charsmap(tmp_path):
    """A GGUF made from botchan (nmt_nfkc) does not normalise, as llama.cpp reads it: it agrees
    with sentencepiece on text nmt_nfkc leaves alone, and not on full-width letters."""
    data = F.model_source("botchan_bpe")
    ref = G.load(F.gguf_from_spm(data, tmp_path / "botchan.gguf"))
    sp = F.spm_oracle(data)
    plain = [line for line in testdata.botchan_lines()[:300]
             if "  " not in line and line == line.strip() and line.isascii()]
    assert len(plain) > 100
    assert [ref.encode_ordinary(t) for t in plain] == [sp.encode(t) for t in plain]
    assert ref.encode_ordinary("ｆｕｌｌ") != sp.encode("ｆｕｌｌ") == sp.encode("full")
