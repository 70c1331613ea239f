"""The docstring examples of the tokenizer-family modules of cpu_ref run and are right."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["spm_proto", "charsmap", "spm", "hf_spm", "wordpiece", "gguf", "gguf_pre", "unigram",
           "post"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"cpu_ref.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0  # every module shows at least one example
