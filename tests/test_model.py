"""gputok.model and the Encoding over it: construction, the API/model boundary, and the bugs
that boundary fixed (batch methods reach a backend, Llama 3 padding, unknown specials)."""

from __future__ import annotations

import numpy as np
import pytest

import gputok
import testdata
from conftest import HF_FILES, hf_encoding, hf_oracle, tiktoken_oracle
from gputok.backends import Backend, get_backend
from gputok.model import Model
from gputok.stages.pretok import PretokSpec

BYTES = {bytes([b]): b for b in range(256)}


class SpyBackend(Backend):
    """Records what reaches a backend, and encodes with numpy."""

    name = "spy"

    def __init__(self):
        super().__init__()
        self.calls = []

    def plan(self, model):
        return {}

    def encode(self, model, docs, allowed, disallowed):
        self.calls.append((model.name, len(docs), allowed, disallowed))
        return get_backend("numpy").encode(model, docs, allowed, disallowed)


def test_model_from_ranks_checks_its_parts():
    with pytest.raises(ValueError, match="lacks 1 of the 256"):
        Model.from_ranks("m", pat_str=r"\S+", ranks={bytes([b]): b for b in range(255)},
                         specials={})
    with pytest.raises(ValueError, match="same rank"):
        Model.from_ranks("m", pat_str=r"\S+", ranks={**BYTES, b"ab": 7}, specials={})
    with pytest.raises(ValueError, match="special token '<x>' has id 97"):
        Model.from_ranks("m", pat_str=r"\S+", ranks=BYTES, specials={"<x>": 97})
    m = Model.from_ranks("m", pat_str=r"\S+|\s+", ranks={**BYTES, b"ab": 256},
                         specials={"<x>": 257})
    assert m.max_token_value == 257 and m.id_dtype == np.uint16
    assert m.decoder[257] == b"<x>" and m.token_id("<x>") == 257
    assert m.pretok == PretokSpec.regex(r"\S+|\s+") and m.pretok.family == "tiktoken"
    with pytest.raises(ValueError, match="either ranks or merges"):
        Model(name="x", pretok=m.pretok, decoder={}, byte_ids=m.byte_ids)
    with pytest.raises(ValueError, match="lstrip/rstrip name tokens"):
        Model(name="x", pretok=m.pretok, decoder=m.decoder, byte_ids=m.byte_ids, ranks=BYTES,
              lstrip=frozenset({"<y>"}))
    with pytest.raises(ValueError, match="normaliser 'Strip'"):
        Model(name="x", pretok=m.pretok, decoder=m.decoder, byte_ids=m.byte_ids, ranks=BYTES,
              normalizer=("Strip",))


def test_encoding_is_the_api_over_a_model():
    enc = gputok.get_encoding("cl100k_base")
    again = gputok.Encoding.from_model(enc.model)
    assert again.model is enc.model and again.encode("hello world") == [15339, 1917]
    # tiktoken's private attributes, which some code reads, are views of the model
    tk = tiktoken_oracle("cl100k_base")
    assert enc._pat_str == tk._pat_str and enc._special_tokens == tk._special_tokens
    assert enc._mergeable_ranks is enc.model.ranks and len(enc._mergeable_ranks) == 100256
    hf = hf_encoding("llama3")
    assert hf._mergeable_ranks is None and hf.pat_str == hf.model.pretok.pattern


def test_batch_methods_reach_the_backend():
    enc = gputok.get_encoding("r50k_base")
    spy = SpyBackend()
    texts = ["hello world", "", "<|endoftext|> tail"]
    tk = tiktoken_oracle("r50k_base")
    assert enc.encode_batch(texts, allowed_special="all", backend=spy) == \
        tk.encode_batch(texts, allowed_special="all")
    assert enc.encode_ordinary_batch(texts, backend=spy) == tk.encode_ordinary_batch(texts)
    assert [c[:2] for c in spy.calls] == [("r50k_base", 3), ("r50k_base", 3)]
    assert spy.calls[0][2] == {"<|endoftext|>"} and spy.calls[1][3] == frozenset()


def test_large_single_texts_take_the_batch_pipeline_of_their_backend():
    spy = SpyBackend()
    enc = gputok.get_encoding("cl100k_base")
    text = "word " * 20_000
    assert enc.encode(text, backend=spy) == tiktoken_oracle("cl100k_base").encode(text)
    assert spy.calls and spy.calls[0][:2] == ("cl100k_base", 1)
    spy.calls.clear()  # a short one: on the host
    assert enc.encode_ordinary("word " * 20, backend=spy) == \
        tiktoken_oracle("cl100k_base").encode_ordinary("word " * 20) and not spy.calls


def test_pad_defaults_to_the_end_of_text_token():
    llama = hf_encoding("llama3")
    assert llama.eot_token == 128001  # <|end_of_text|>, not 0
    ids, mask = llama.encode_batch_padded(["hello world", "hi"])
    assert ids[1, 1] == 128001 and mask.tolist() == [[1, 1], [1, 0]]
    qwen = hf_encoding("qwen2")
    assert qwen.eot_token == qwen.model.specials["<|endoftext|>"]
    tiny = gputok.Encoding("tiny", pat_str=r"\S+|\s+", mergeable_ranks=BYTES, special_tokens={})
    assert tiny.pad(np.array([1, 2, 3]), np.array([0, 2, 3]))[0].tolist() == [[1, 2], [3, 0]]
    with pytest.raises(KeyError, match="no end-of-text"):
        tiny.eot_token


def test_unknown_names_in_allowed_special_are_plain_text():
    """tiktoken ignores names that are not special tokens of the encoding."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    text = "a<|im_start|>b<|endoftext|>"
    for allowed in ({"<|im_start|>"}, {"<|im_start|>", "<|endoftext|>"}):
        kw = dict(allowed_special=allowed, disallowed_special=())
        assert enc.encode(text, **kw) == tk.encode(text, **kw)
        ids, _ = enc.encode_batch_arrays([text], **kw)
        assert ids.tolist() == tk.encode(text, **kw)
    with pytest.raises(ValueError, match="<|endoftext|>"):
        enc.encode(text, allowed_special={"<|im_start|>"})  # the real one is still disallowed
    # an explicit disallowed string is searched for, special token or not (as tiktoken)
    with pytest.raises(ValueError, match="'foo'"):
        enc.encode("a foo b", disallowed_special={"foo"})
    with pytest.raises(ValueError):
        tk.encode("a foo b", disallowed_special={"foo"})
    with pytest.raises(TypeError, match="allowed_special must be 'all'"):
        enc.encode("x", allowed_special="none")
    with pytest.raises(TypeError, match="disallowed_special must be 'all'"):
        enc.encode("x", disallowed_special="none")


def test_disallowed_error_names_document_and_fix():
    enc = gputok.get_encoding("cl100k_base")
    with pytest.raises(gputok.specials.DisallowedSpecialError) as e:
        enc.encode_batch_arrays(["ok", "bad <|endoftext|>"])
    assert e.value.doc == 1 and e.value.token == "<|endoftext|>"
    assert "document 1" in str(e.value) and "allowed_special={'<|endoftext|>'}" in str(e.value)


@pytest.mark.parametrize("key", list(HF_FILES))
def test_hf_models(key):
    enc = hf_encoding(key)
    m = enc.model
    assert m.merges is not None and m.ranks is None and m.pretok.family == "hf"
    assert m.normalizer == (("NFC",) if key == "qwen2" else ())
    hf = hf_oracle(key)
    text = "Hello <|begin_of_text|> wörld 12345"
    assert enc.encode(text, allowed_special="all") == hf.encode(text, add_special_tokens=False).ids


def test_models_are_reused_not_rebuilt():
    a = gputok.get_encoding("o200k_base")
    assert gputok.get_encoding("o200k_base") is a
    h = gputok.get_encoding("o200k_harmony")
    assert h.model.ranks is not a.model.ranks or h.model.digest == a.model.digest
    # a file loaded again while an encoding holds its model is the same model (by content) ...
    held = hf_encoding("llama3")
    path = testdata.vocab_path("llama3_tokenizer_json")
    assert gputok.load(path).model is held.model


def test_a_changed_file_is_a_new_model(tmp_path):
    """... and a file whose bytes changed is built again, not looked up."""
    held = hf_encoding("llama3")
    data = testdata.vocab_path("llama3_tokenizer_json").read_bytes()
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(data)
    same = gputok.load(copy)  # (the model's name comes from its folder: a model of its own)
    assert gputok.load(copy).model is same.model
    copy.write_bytes(data.replace(b'"Hello"', b'"Hello" ', 1) if b'"Hello"' in data
                     else data + b"\n")
    other = gputok.load(copy)
    assert other.model is not same.model
    assert other.encode("Hello world") == held.encode("Hello world")
