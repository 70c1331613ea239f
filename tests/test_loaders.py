"""Vocabulary files: bundled data integrity, .tiktoken and tokenizer.json loading, clear errors."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

import gputok
from conftest import HF_FILES, testdata, tiktoken_oracle
from gputok.export import save_hf_json, save_tiktoken

DATA = Path(gputok.__file__).parent / "data"


@pytest.mark.parametrize("stem", ["r50k_base", "cl100k_base", "o200k_base"])
def test_bundled_vocab_matches_published_and_checksum(stem):
    raw = gzip.decompress((DATA / f"{stem}.tiktoken.gz").read_bytes())
    sums = {name: h for h, name in (l.split() for l in (DATA / "SHA256SUMS").read_text().splitlines())}
    assert hashlib.sha256(raw).hexdigest() == sums[f"{stem}.tiktoken.gz"]
    # and it is the same file the oracle was built from (fetched independently)
    assert raw == testdata.vocab_path(stem).read_bytes()


def test_corrupt_bundle_is_refused(monkeypatch, tmp_path):
    from gputok import registry

    fake = tmp_path / "gputok" / "data"
    fake.mkdir(parents=True)
    (fake / "r50k_base.tiktoken.gz").write_bytes(gzip.compress(b"YQ== 0\n"))
    (fake / "SHA256SUMS").write_text((DATA / "SHA256SUMS").read_text())

    class Files:
        def __truediv__(self, name):
            return fake if name == "data" else None

    import importlib.resources

    monkeypatch.setattr(importlib.resources, "files", lambda pkg: Files())
    with pytest.raises(RuntimeError, match="corrupt"):
        registry._bundled_ranks("r50k_base")


def test_load_tiktoken_file_with_pattern_and_sidecar(tmp_path):
    path = testdata.vocab_path("cl100k_base")
    enc = gputok.load(path, pat_str="cl100k")
    tk = tiktoken_oracle("cl100k_base")
    assert enc.encode_ordinary("Hello, world!\n  x") == tk.encode_ordinary("Hello, world!\n  x")
    with pytest.raises(ValueError, match="pat_str"):
        gputok.load(path)
    # round trip through gputok's export (ranks + sidecar), read back and by tiktoken itself
    out = save_tiktoken(gputok.get_encoding("r50k_base"), tmp_path / "r50k.tiktoken")
    back = gputok.load(out)
    assert back.encode("hi <|endoftext|>", allowed_special="all") == [5303, 220, 50256]
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    meta = json.loads((tmp_path / "r50k.tiktoken.json").read_text())
    tk2 = tiktoken.Encoding("r50k", pat_str=meta["pat_str"], mergeable_ranks=load_tiktoken_bpe(
        str(out)), special_tokens=meta["special_tokens"])
    assert tk2.encode("hi there  friend") == back.encode("hi there  friend")


@pytest.mark.parametrize("content,needle", [
    (b"aGk= 0\nnot-a-line\n", r":2: expected"),
    (b"aGk= 0\n!!!! 1\n", r":2: bad base64"),
    (b"aGk= 0\naGk= 1\n", r":2: token b'hi' appears twice"),
    (b"", "the file is empty"),
    (b"aGk= 0\naGU= 0\n", r":2: rank 0 was already given to the token on line 1"),
])
def test_malformed_tiktoken_names_file_and_line(tmp_path, content, needle):
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(content)
    with pytest.raises(ValueError, match=needle) as e:
        gputok.load(bad, pat_str="gpt2")
    assert "bad.tiktoken" in str(e.value)


def test_incomplete_byte_alphabet_is_refused():
    ranks = {bytes([b]): b for b in range(255)}
    with pytest.raises(ValueError, match="single-byte"):
        gputok.Encoding("x", pat_str=r"\S+", mergeable_ranks=ranks, special_tokens={})


def test_malformed_hf_json(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": ')
    with pytest.raises(ValueError, match="invalid JSON"):
        gputok.load(bad)
    bad.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {}}}))
    with pytest.raises(ValueError, match="WordPiece"):
        gputok.load(bad)
    with pytest.raises(FileNotFoundError):
        gputok.load(tmp_path / "missing.json")


@pytest.mark.parametrize("style", ["byte-level", "spm"])
@pytest.mark.parametrize("change, needle", [
    (lambda m: m["vocab"].update({"zz": -1}), r"model.vocab\['zz'\] = -1 is not an id"),
    (lambda m: m["vocab"].update({"zz": 0}), "gives id 0 to"),
    (lambda m: m["merges"].append("a"), r"model.merges\[2\] = 'a': expected 'a b'"),
    (lambda m: m["merges"].append(["a", "\u0100"]), r"model.merges\[2\] = \['a', 'Ā'\] refers "
                                                    "to 'Ā', not in vocab"),
    (lambda m: m["merges"].append("b a"), r"model.merges\[2\] = 'b a' refers to 'ba'"),
])
def test_malformed_hf_vocab_and_merges_name_the_entry(tmp_path, style, change, needle):
    """The first bad vocabulary entry or merge is named, for byte-level and SPM-style files."""
    chars = [chr(c) for c in range(0x21, 0x7F)]
    vocab = {c: i for i, c in enumerate(chars)}
    model = {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"]]}
    vocab.update({"ab": len(vocab), "abc": len(vocab) + 1})
    if style == "spm":
        model["byte_fallback"] = True
    change(model)
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"model": model}))
    with pytest.raises(ValueError, match=needle) as e:
        gputok.load(bad)
    assert "tokenizer.json" in str(e.value)


def test_hf_export_of_named_encoding_matches_tiktoken(tmp_path, corpora):
    from tokenizers import Tokenizer

    enc = gputok.get_encoding("cl100k_base")
    path = save_hf_json(enc, tmp_path / "tokenizer.json")
    hf = Tokenizer.from_file(str(path))
    docs = [d for k in corpora for d in corpora[k][:15]]
    tk = tiktoken_oracle("cl100k_base")
    bad = [i for i, d in enumerate(docs)
           if hf.encode(d, add_special_tokens=False).ids != tk.encode_ordinary(d)]
    assert not bad
    back = gputok.load(path)
    assert back.encode(docs[0], disallowed_special=()) == enc.encode_ordinary(docs[0])


@pytest.mark.parametrize("key", list(HF_FILES))
def test_hf_file_metadata(key):
    enc = gputok.load(testdata.vocab_path(HF_FILES[key]))
    assert enc.special_tokens_set and enc.eot_token in {v for v in enc._special_tokens.values()}
    assert enc.id_dtype.__name__ == "uint32"


def test_hf_added_token_lstrip_rstrip(tmp_path):
    from tokenizers import Tokenizer

    cfg = json.loads(testdata.vocab_path("qwen2_tokenizer_json").read_text("utf-8"))
    opts = {"<|im_start|>": ("lstrip", True), "<|im_end|>": ("rstrip", True)}
    for t in cfg["added_tokens"]:
        if t["content"] in opts:
            t[opts[t["content"]][0]] = opts[t["content"]][1]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg, ensure_ascii=False), "utf-8")
    enc, hf = gputok.load(path), Tokenizer.from_file(str(path))
    texts = ["a  <|im_start|>  b<|im_end|> \n c", "\t<|im_start|>x <|im_end|>\u3000y",
             "x\x1c<|im_start|>", "<|im_end|>   ", "  <|im_start|><|im_end|>  z"]
    for t in texts:
        expect = hf.encode(t, add_special_tokens=False).ids
        assert enc.encode(t, allowed_special="all") == expect, repr(t)
    ids, off = enc.encode_batch_arrays(texts, allowed_special="all")
    assert ids.tolist() == [i for t in texts for i in hf.encode(t, add_special_tokens=False).ids]
    # not allowed -> plain text, no stripping
    assert enc.encode(texts[0], disallowed_special=()) == enc.encode_ordinary(texts[0])


@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_added_token_ids_are_the_ones_hf_gives(tmp_path, kind):
    """HF reads a tokenizer.json's added tokens in file order and gives each the id of its
    text where that is a vocabulary entry or an added token already, else the next id after
    the largest so far (or the vocabulary's size): the ids the file states are not used. A
    file HF wrote agrees; these do not, and gputok reads them as HF does."""
    from tokenizers import Tokenizer

    if kind == "bpe":
        cfg = json.loads(testdata.vocab_path(HF_FILES["qwen2"]).read_text("utf-8"))
        known = "OK"
    elif kind == "wordpiece":
        cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
        known = "ok"
    else:
        import families as F
        from test_precompiled import t5_json

        cfg = t5_json(F.unigram_source("botchan_unigram"))
        known = "\u2581the"
    top = max([t["id"] for t in cfg.get("added_tokens") or []] + [0])
    extra = [("<a>", 10**6), (known, top + 1), ("<b>", 3), ("<a>", top + 9), ("<c>", top + 2)]
    for content, i in extra:
        cfg.setdefault("added_tokens", []).append(
            {"id": i, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": content == "<b>"})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg), "utf-8")
    hf, enc = Tokenizer.from_file(str(path)), gputok.load(path)
    hf.no_padding()
    hf.no_truncation()
    text = f"x<a>y<b> {known} z<c><a>"
    assert enc.encode(text, allowed_special="all") == hf.encode(text,
                                                                add_special_tokens=False).ids
    for content, _ in extra:
        assert enc.encode_single_token(content) == hf.token_to_id(content), content
