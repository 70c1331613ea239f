"""The disallowed-special prefilter (kernels/host_corpus.h ``gputok_first_token``, given to
the stages as ``HostTools.first_token``): the first match it reports is ``find_tokens``'
first, document by document, on fuzzed documents; ``check_buffer`` with it raises the same
error on the same document as without it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gputok.stages.split import check_buffer, find_tokens

TOKEN_SETS = [frozenset(["<|endoftext|>", "<|fim_prefix|>"]),  # one first byte: memchr
              frozenset(["<|endoftext|>", "<|fim_prefix|>", "x<y", "ab", "é", "<|e"]),
              frozenset(["ab"]), frozenset(["\U0001f600"])]
ALPHABET = ["<|endoftext|>", "<|fim_prefix|>", "<|", "<|endoftext", "x", "<", "y", "a", "b",
            "é", " ", "e", "\U0001f600", "\n"]


@pytest.fixture(scope="module")
def first_token():
    from gputok.backends import native

    return native.library().first_token


def _packed(docs):
    raw = [d.encode() for d in docs]
    off = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(r) for r in raw], out=off[1:])
    return b"".join(raw), off


def test_first_match_equals_find_tokens(first_token):
    rng = random.Random(11)
    hits = 0
    for _ in range(4000):
        docs = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 7)))
                for _ in range(rng.randint(1, 6))]
        buf, off = _packed(docs)
        for tokens in TOKEN_SETS:
            starts, _ = find_tokens(buf, off, tokens)
            want = int(starts[0]) if len(starts) else -1
            assert first_token(buf, off, tokens) == want, (docs, sorted(tokens))
            hits += want >= 0
    assert hits > 1000  # (the fuzz finds tokens, and across document boundaries too)
    # a token cut by a document boundary is no match; an array buffer is read as its bytes
    buf, off = _packed(["x <|endof", "text|> y"])
    assert first_token(buf, off, TOKEN_SETS[0]) == -1
    assert first_token(np.frombuffer(buf, np.uint8), off, frozenset(["y"])) == len(buf) - 1
    with pytest.raises(ValueError, match="document offsets"):
        first_token(b"abc", np.array([0, 9], np.int64), TOKEN_SETS[2])
    # a caller's set or list of tokens (a batch call's disallowed_special as given)
    buf, off = _packed(["a", "b <|endoftext|>"])
    assert first_token(buf, off, {"<|endoftext|>"}) == first_token(buf, off, ["<|endoftext|>"]) \
        == 3


def test_check_buffer_with_the_prefilter_raises_the_same_error(first_token):
    rng = random.Random(5)
    for _ in range(500):
        docs = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 5)))
                for _ in range(rng.randint(1, 5))]
        buf, off = _packed(docs)
        for tokens in TOKEN_SETS[:2]:
            errors = []
            for pre in (None, first_token):
                try:
                    check_buffer(buf, off, tokens, 3, pre)
                    errors.append(None)
                except ValueError as e:
                    errors.append((str(e), getattr(e, "doc", None)))
            assert errors[0] == errors[1], docs
