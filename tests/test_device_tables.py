"""The device tables of a model (``gputok.backends.device_tables``): the whole-token table a
byte-level merges (HF rule) model gets from its merges (``proven_whole``).

A token enters it only where the merge rule makes that token from its own bytes: a tiny
tokenizer.json whose token "abc" the rule never makes from "abc" (its merge (a, b) comes first,
and no (ab, c) merge follows) must leave "abc" out, and every device must give HF's ids for it.
"""

from __future__ import annotations

import json

import pytest

import gputok
from gputok.backends import device_tables, native


def _byte_chars() -> list:
    """The byte-level alphabet: byte b as HF's ByteLevel writes it (GPT-2's printable map)."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + k) for k, b in enumerate(extra)})
    return [table[b] for b in range(256)]


def _tokenizer_json(path, merges: list) -> str:
    """A byte-level BPE tokenizer.json with the given merges (and no ignore_merges)."""
    chars = _byte_chars()
    vocab = {c: i for i, c in enumerate(chars)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    cfg = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": [f"{a} {b}" for a, b in merges]}}
    p = path / "tokenizer.json"
    p.write_text(json.dumps(cfg), "utf-8")
    return str(p)


# "abc" is a token (a, bc) the rule never makes from "abc": (a, b) ranks before (b, c), and
# there is no (ab, c); " xyz" one neither (y, z first, then (x, yz): [" ", "xyz"]); "abd",
# "xyz" and " x" tokens it does make
MERGES = [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "d"), ("y", "z"), ("x", "yz"),
          ("Ġ", "x"), ("Ġx", "yz")]
NOT_MADE = {b"abc", b" xyz"}


@pytest.fixture
def model_path(tmp_path):
    return _tokenizer_json(tmp_path, MERGES)


def test_proven_whole_keeps_only_tokens_the_rule_makes(model_path):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(model_path)
    m = gputok.load(model_path).model
    whole = device_tables.proven_whole(m, m.merge_table)
    ids = {bytes(t): i for i, t in m.decoder.items()}
    assert not NOT_MADE & set(whole)
    for tok in (b"ab", b"bc", b"abd", b"yz", b"xyz", b" x"):
        assert whole[tok] == ids[tok], tok
    assert all(whole[bytes([b])] == int(m.merge_table.byte_ids[b]) for b in range(256))
    assert len(whole) == 256 + len(MERGES) - len(NOT_MADE)
    # in it exactly where HF's merges give the token for its own text
    for tok, i in ids.items():
        made = hf.encode(tok.decode("utf-8", "replace"), add_special_tokens=False).ids == [i]
        assert (tok in whole) == (made or len(tok) == 1), tok


def test_proven_whole_none_for_ranks_models():
    enc = gputok.get_encoding("gpt2")
    assert device_tables.proven_whole(enc.model, enc.model.merge_table) is None


@pytest.mark.skipif(not native.available()[0], reason="native backend unavailable")
@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_edge_tokens_match_hf(model_path, backend):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(model_path)
    enc = gputok.load(model_path)
    texts = ["abc", "abd", "xyz", " xyz", "abcabc", "ab c", "abcd abc xyz", "a", "abc\n xyz"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    got = [list(x) for x in enc.encode_batch(texts, backend=backend)]
    assert got == want
    assert len(want[0]) == 2 and len(want[3]) == 2  # (the tokens left out: [ab, c], [" ", xyz])
