"""A model whose pattern has no device form cuts its pieces on the host on every path of the
default backend (one-call, few-pieces, batch, streamed), and gets the reference's ids.

Before the fix, ``encode`` of such a model sent a text of a few hundred characters to the
device's one-call path as if its pieces were cut there, and the native device raised
``KeyError: 'n_letters'`` (it has no class tables for a pattern it cannot run).
"""

from __future__ import annotations

import pytest

import gputok
from cpu_ref.encoding import RefEncoding

# patterns no scanner family implements: the host regex cuts their pieces on every backend
HOST_PATTERNS = [r"\S+|\s+", r"[A-Za-z]+|[0-9]{1,2}|\s+|[^\sA-Za-z0-9]+"]

TEXTS = {
    "empty": "",
    "ascii": "hello world, the quick brown fox 123 jumps " * 8,
    "multilingual": "Grüße aus Köln, Привет мир! 你好世界。 ça va? 😀 " * 60,
    "long": ("mixed text δ 42 with a few words and 😀 emoji\n" * 900),
    "run": "x" * 5000,
}


@pytest.fixture(scope="module", params=HOST_PATTERNS, ids=["split-space", "classes"])
def trained(request):
    corpus = [t for t in TEXTS.values() if t] * 3
    enc = gputok.train_bpe(corpus, vocab_size=400, pattern=request.param,
                           special_tokens=["<|eot|>"])
    return enc, request.param


def _reference(enc, pattern):
    ranks = {}
    for i in range(enc.max_token_value + 1):
        b = enc.decode_single_token_bytes(i)
        if b != b"<|eot|>":
            ranks[b] = i
    return RefEncoding("ref", pat_str=pattern, mergeable_ranks=ranks,
                       special_tokens={"<|eot|>": enc.encode_single_token("<|eot|>")})


@pytest.mark.parametrize("kind", list(TEXTS))
def test_every_single_text_path_cuts_on_the_host(trained, kind):
    enc, pattern = trained
    ref = _reference(enc, pattern)
    text = TEXTS[kind]
    want = ref.encode_ordinary(text)
    assert enc.encode_ordinary(text) == want
    assert enc.encode(text) == want
    assert enc.encode(text + "<|eot|>", allowed_special="all") == want + [
        enc.encode_single_token("<|eot|>")]


def test_batches_cut_on_the_host(trained):
    enc, pattern = trained
    ref = _reference(enc, pattern)
    docs = list(TEXTS.values()) * 4
    want = [ref.encode_ordinary(t) for t in docs]
    assert enc.encode_ordinary_batch(docs) == want
    ids, off = enc.encode_batch_arrays(docs)
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
