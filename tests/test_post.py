"""``add_special_tokens=True`` (``components/postprocessors``, ``loaders/post.py``) and
``gputok.load(directory)`` (``loaders/directory.py``): what each library adds around a text, on
every encode method and the CLI; nothing by default."""

from __future__ import annotations

import json
import numpy as np
import pytest

import families as F
import gputok
import testdata
from cpu_ref.post import gguf_post, hf_post
from gputok.components.postprocessors import NO_POST, Template

TEXTS = ["hello world", "", "Ünïcode 東京 😀", "x" * 50]


def _hf_file(name: str):
    from tokenizers import Tokenizer

    path = (testdata.family_path(name) if name.startswith("minilm")
            else testdata.vocab_path(name))
    hf = Tokenizer.from_file(str(path))
    hf.no_truncation()
    hf.no_padding()
    return gputok.load(path), hf, json.loads(path.read_text("utf-8"))


@pytest.mark.parametrize("name", ["minilm_tokenizer_json", "llama3_tokenizer_json",
                                  "qwen2_tokenizer_json"])
def test_real_post_processors_vs_tokenizers(name):
    """BERT's TemplateProcessing ([CLS] $A [SEP]), Llama 3's Sequence (ByteLevel + a template
    with <|begin_of_text|>), Qwen2's ByteLevel (nothing): ids equal ``Tokenizer.encode(text)``
    and the spec's, one text and batches, and nothing is added by default."""
    enc, hf, cfg = _hf_file(name)
    for t in TEXTS:
        want = hf.encode(t).ids
        assert enc.encode(t, add_special_tokens=True) == want == \
            hf_post(cfg.get("post_processor"), hf.encode(t, add_special_tokens=False).ids)
        assert enc.encode_ordinary(t, add_special_tokens=True) == want
        assert enc.encode(t) == hf.encode(t, add_special_tokens=False).ids
    want = [e.ids for e in hf.encode_batch(TEXTS)]
    assert enc.encode_batch(TEXTS, add_special_tokens=True) == want
    assert enc.encode_ordinary_batch(TEXTS, add_special_tokens=True) == want
    ids, off = enc.encode_batch_arrays(TEXTS, add_special_tokens=True, backend="numpy")
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == want
    assert enc.encode_to_numpy(TEXTS[0], add_special_tokens=True).tolist() == want[0]
    ids, mask = enc.encode_batch_padded(TEXTS, add_special_tokens=True, pad_id=0)
    assert [row[m == 1].tolist() for row, m in zip(ids, mask)] == want


def _tokenizer_json(tmp_path, post) -> tuple:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "[CLS]": 5, "[SEP]": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<unk>", "<s>", "</s>", "[CLS]", "[SEP]"])
    if post is not None:
        tok.post_processor = post
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return gputok.load(path), tok


def test_each_post_processor_vs_tokenizers(tmp_path):
    from tokenizers import processors as P

    cases = [
        (None, NO_POST),
        (P.TemplateProcessing(single="<s> $A </s> </s>", special_tokens=[("<s>", 1),
                                                                          ("</s>", 2)]),
         Template([1], [2, 2])),
        (P.TemplateProcessing(single="$A [SEP]", special_tokens=[("[SEP]", 6)]),
         Template([], [6])),
        (P.BertProcessing(("[SEP]", 6), ("[CLS]", 5)), Template([5], [6])),
        (P.RobertaProcessing(("</s>", 2), ("<s>", 1)), Template([1], [2])),
        (P.ByteLevel(), NO_POST),
        (P.Sequence([P.ByteLevel(), P.BertProcessing(("[SEP]", 6), ("[CLS]", 5))]),
         Template([5], [6])),
    ]
    for k, (post, want_post) in enumerate(cases):
        enc, hf = _tokenizer_json(tmp_path, post)
        assert (enc.model.post.prefix, enc.model.post.suffix) == (want_post.prefix,
                                                                  want_post.suffix), k
        for t in ["a b", "", "b [CLS] a"]:
            assert enc.encode(t, allowed_special="all", add_special_tokens=True) == \
                hf.encode(t).ids, (k, t)
    # HF runs a template's output through BertProcessing as a pair: refused, not guessed
    seq = P.Sequence([P.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)]),
                      P.BertProcessing(("[SEP]", 6), ("[CLS]", 5))])
    with pytest.raises(ValueError, match="more than one processor that adds tokens"):
        _tokenizer_json(tmp_path, seq)


def test_template_on_arrays():
    t = Template((9,), (7, 8))
    ids, off = t.apply_arrays(np.array([1, 2, 3], np.uint16), np.array([0, 0, 2, 3]))
    assert ids.dtype == np.uint16 and off.tolist() == [0, 3, 8, 12]
    assert ids.tolist() == [9, 7, 8, 9, 1, 2, 7, 8, 9, 3, 7, 8]
    assert NO_POST.apply([1]) == [1] and not NO_POST and Template() .apply([1]) == [1]


def test_sentencepiece_adds_its_bos(tmp_path):
    """A .model: what ``encode(text, add_bos=True)`` adds (the BOS control piece), and nothing
    when the model has none (``bos_id = -1``)."""
    import sentencepiece as spm

    data = F.model_source("mistral_v3")
    path = tmp_path / "m.model"
    path.write_bytes(data)
    enc, sp = gputok.load(path), spm.SentencePieceProcessor(model_proto=data)
    for t in TEXTS:
        assert enc.encode_ordinary(t, add_special_tokens=True) == sp.encode(t, add_bos=True)
    uni = F.unigram_source("botchan_unigram")
    path.write_bytes(uni)
    assert gputok.load(path).encode("hi", add_special_tokens=True) == \
        spm.SentencePieceProcessor(model_proto=uni).encode("hi", add_bos=True)
    unk = ("<unk>", 0.0, 2)
    path.write_bytes(F.model_bytes([unk, ("▁a", -1.0, 1), ("<s>", 0.0, 1)],
                                   trainer={"bos_id": -1}))
    assert gputok.load(path).model.post is NO_POST


def test_gguf_follows_llama_cpp(tmp_path):
    """llama.cpp's add_special per tokenizer model and keys (cpu_ref.post.gguf_post)."""
    data = F.model_source("mistral_v3")
    enc = gputok.load(F.gguf_from_spm(data, tmp_path / "llama.gguf"))
    assert enc.encode("hi", add_special_tokens=True) == [1] + enc.encode("hi")  # add_bos
    from gputok.loaders.gguf import read_metadata

    for name in ("llama_cpp_phi-3", "llama_cpp_falcon", "llama_cpp_nomic-bert-moe"):
        path = testdata.family_path(name)
        meta, _ = read_metadata(path)
        enc = gputok.load(path)
        body = enc.encode_ordinary("Hello world")
        assert enc.encode_ordinary("Hello world", add_special_tokens=True) == \
            gguf_post(meta, body), name
    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    enc = gputok.load(F.gguf_from_wordpiece(cfg, tmp_path / "bert.gguf"))
    assert enc.encode("hello world", add_special_tokens=True) == [101, 7592, 2088, 102]


def test_tiktoken_encodings_add_nothing():
    enc = gputok.get_encoding("cl100k_base")
    assert enc.encode("hello", add_special_tokens=True) == enc.encode("hello") == [15339]


# ---- model directories ------------------------------------------------------------------------

def _directory(tmp_path, post, config: dict, smap: "dict | None" = None,
               added=("<unk>", "<s>", "</s>")):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "[X]": 5, "c": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(added))
    if post is not None:
        tok.post_processor = post
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    if smap is not None:
        (d / "special_tokens_map.json").write_text(json.dumps(smap))
    elif (d / "special_tokens_map.json").exists():
        (d / "special_tokens_map.json").unlink()
    return d


def test_directories_as_auto_tokenizer(tmp_path):
    """What transformers 5.23's ``AutoTokenizer.from_pretrained(dir)`` gives for these
    directories (hand-checked facts, pinned here as ids): the tokenizer.json's post-processor
    rules and add_bos_token/add_eos_token in tokenizer_config.json do not; special tokens named
    in the config or in special_tokens_map.json become special (a new one gets the next id)."""
    from tokenizers import processors as P

    tmpl = P.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    texts = ["a b", "a [X] b", "a [NEW] c b", "a <s> b"]
    cases = [
        (tmpl, {"bos_token": "<s>", "add_bos_token": False}, None, ("<unk>", "<s>", "</s>"),
         [[1, 3, 4, 2], [1, 3, 0, 0, 0, 4, 2], [1, 3, 0, 0, 0, 6, 4, 2], [1, 3, 1, 4, 2]],
         [[3, 4], [3, 0, 0, 0, 4], [3, 0, 0, 0, 6, 4], [3, 1, 4]]),
        (None, {"bos_token": "<s>", "add_bos_token": True, "add_eos_token": True}, None,
         ("<unk>", "<s>", "</s>"),
         [[3, 4], [3, 0, 0, 0, 4], [3, 0, 0, 0, 6, 4], [3, 1, 4]], None),
        (None, {"bos_token": "<s>"}, {"additional_special_tokens": ["[X]", "[NEW]"]},
         ("<unk>", "<s>", "</s>"), [[3, 4], [3, 5, 4], [3, 7, 6, 4], [3, 1, 4]], None),
        (None, {"added_tokens_decoder": {"6": {"content": "c", "special": True}}}, None,
         ("<unk>",), [[3, 4], [3, 0, 0, 0, 4], [3, 0, 0, 0, 6, 4], [3, 0, 0, 0, 4]], None),
    ]
    for k, (post, config, smap, added, want, want_plain) in enumerate(cases):
        d = _directory(tmp_path, post, config, smap, added)
        enc = gputok.load(d)
        assert enc.name == "model"
        assert [enc.encode(t, allowed_special="all", add_special_tokens=True) for t in texts] \
            == want, k
        assert [enc.encode(t, allowed_special="all") for t in texts] == (want_plain or want), k
    enc = gputok.load(_directory(tmp_path, tmpl, {}))
    with pytest.raises(ValueError, match="<s>"):
        enc.encode("a <s> b")  # a special token in text: tiktoken's contract


def test_directory_with_a_sentencepiece_model(tmp_path):
    """tokenizer.model alone: add_bos_token / add_eos_token of the config shape what
    add_special_tokens adds (sentencepiece's BOS by default)."""
    import sentencepiece as spm

    data = F.model_source("mistral_v3")
    sp = spm.SentencePieceProcessor(model_proto=data)
    d = tmp_path / "m"
    d.mkdir()
    (d / "tokenizer.model").write_bytes(data)
    assert gputok.load(d).encode("hi", add_special_tokens=True) == sp.encode("hi", add_bos=True)
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": False, "add_eos_token": True, "eos_token": "</s>"}))
    assert gputok.load(d).encode("hi", add_special_tokens=True) == \
        sp.encode("hi", add_eos=True)


def test_directory_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="without a vocabulary file"):
        gputok.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="tokenizer.json"):
        gputok.load(tmp_path)


def test_cli_add_special_tokens(tmp_path):
    from gputok.cli import main
    from gputok.corpus import read_shards

    src = testdata.family_path("minilm_tokenizer_json")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["hello world", "hi"]))
    docs = {}
    for flag in ([], ["--add-special-tokens"]):
        out = tmp_path / f"out{len(flag)}"
        assert main(["encode", str(inp), "-o", str(out), "--tokenizer", str(src), "-q",
                     "--workers", "1", *flag]) == 0
        docs[len(flag)] = [d.tolist() for ids, off in read_shards(out)
                           for d in np.split(ids, off[1:-1])]
    assert docs[1] == [[101, 7592, 2088, 102], [101, 7632, 102]]
    assert docs[0] == [[7592, 2088], [7632]]
