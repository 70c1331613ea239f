"""``gputok.encoding_for_model``: tiktoken's model -> encoding table, entry for entry."""

from __future__ import annotations

import pytest

import gputok
from gputok.model_names import MODELS, PREFIXES


def _probes():
    names = list(MODELS)
    for prefix, _ in PREFIXES:
        names += [prefix, prefix + "x", prefix + "2024-08-06", prefix + "mini-2024"]
    names += ["gpt-4o-mini", "gpt-4-0613", "gpt-4.5-preview", "gpt-5-nano", "o3-pro",
              "ft:gpt-4o-mini:org::id", "gpt-oss-120b", "chatgpt-4o-latest", "gpt-3.5-turbo-16k"]
    return names


def test_every_name_maps_as_tiktoken_maps_it():
    tiktoken_model = pytest.importorskip("tiktoken.model")
    theirs_exact = dict(tiktoken_model.MODEL_TO_ENCODING)
    theirs_prefix = list(tiktoken_model.MODEL_PREFIX_TO_ENCODING.items())
    assert MODELS == theirs_exact and list(PREFIXES) == theirs_prefix
    for name in _probes() + ["llama-3", "claude", "", "gpt"]:
        try:
            want = tiktoken_model.encoding_name_for_model(name)
        except KeyError:
            with pytest.raises(KeyError, match="get_encoding"):
                gputok.encoding_name_for_model(name)
            continue
        assert gputok.encoding_name_for_model(name) == want, name


def test_encoding_for_model_gives_the_bundled_encoding():
    enc = gputok.encoding_for_model("gpt-4o-mini")
    assert enc.name == "o200k_base" and enc.encode("hello world") == \
        gputok.get_encoding("o200k_base").encode("hello world")
    assert gputok.encoding_for_model("text-davinci-edit-001").name == "p50k_edit"
    with pytest.raises(KeyError, match="'llama-3' is not a model gputok knows"):
        gputok.encoding_for_model("llama-3")
