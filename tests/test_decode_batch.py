"""``decode_batch`` and ``decode_bytes_batch`` through the native batch join
(``gputok/stages/join.py``, ``kernels/host_join.h``): equal to each document's ``decode`` and to
the family's library (sentencepiece, tiktoken) on real and random ids, with the join actually
used; what it does not take whole (bad ids, numpy arrays, other error handlers) goes the
per-document way and fails as ``decode`` does.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import gputok
from conftest import fuzz_examples
from gputok.backends import get_backend
from gputok.stages.join import JoinTable
from test_detok_stream import NAMES, pair, random_ids


@pytest.fixture(scope="module")
def joiner():
    got = get_backend("native").tools.joiner
    assert got is not None and got.usable
    return got


@pytest.fixture
def counted(joiner, monkeypatch):
    """Counts the native join's calls (so a test sees the fast path was taken)."""
    calls = []
    fn = joiner._fn

    def spy(*a):
        calls.append(1)
        return fn(*a)

    monkeypatch.setattr(joiner, "_fn", spy)
    return calls


def test_join_lays_out_every_document(joiner):
    parts = [b"ab", b"", b"\xc3", b"\xa9", b"xyz" * 100]
    table = JoinTable(parts, np.array([0, 0, 0, 1, 0], np.uint8))
    rng = random.Random(1)
    for _ in range(200):
        batch = [[rng.randrange(5) for _ in range(rng.randrange(6))]
                 for _ in range(rng.randrange(1, 9))]
        buf, ends, marked = joiner(batch, table)
        assert [buf[a:b] for a, b in zip(ends, ends[1:])] == \
            [b"".join(parts[i] for i in d) for d in batch]
        assert marked == [k for k, d in enumerate(batch) if 3 in d]


@pytest.mark.parametrize("bad", [[[5]], [[-1]], [[2**63]], [[1.0]], [[True]], [["a"]],
                                 [np.array([0])], [[np.int64(0)]], "ab", [{0: 1}]])
def test_join_refuses_what_it_cannot_take_whole(joiner, bad):
    table = JoinTable([b"a"] * 5)
    assert joiner(bad, table) is None


@pytest.mark.parametrize("name", NAMES)
def test_spm_decode_batch_equals_sentencepiece(name, tmp_path_factory, counted):
    enc, sp = pair(name, tmp_path_factory)
    rng = random.Random(21)
    batch = [random_ids(sp, rng, rng.randrange(0, 60)) for _ in range(fuzz_examples(300))]
    batch += [[], sp.encode("  leading spaces"), sp.encode("plain text, déjà vu 世界 😀")]
    assert enc.decode_batch(batch) == [sp.decode(ids) for ids in batch]
    assert counted, "the native join was not used"
    assert enc.decode_batch(tuple(batch)) == [enc.decode(ids) for ids in batch]
    # (sentencepiece's own batch call agrees with its per-text decode)
    assert enc.decode_batch(batch[:50]) == sp.decode(batch[:50])


def test_spm_decode_batch_on_a_corpus(tmp_path_factory, counted):
    from testdata import corpus

    enc, sp = pair("mistral_v7", tmp_path_factory)
    docs = corpus("multilingual")[:40] + corpus("code")[:40]
    ids = sp.encode(docs)
    assert enc.decode_batch(ids) == sp.decode(ids)
    assert counted


def test_spm_nul_and_odd_pieces_take_decodes_own_path(tmp_path_factory, counted):
    enc, sp = pair("mistral_v7", tmp_path_factory)
    b = {x: sp.piece_to_id(f"<0x{x:02X}>") for x in range(256)}
    batch = [sp.encode("a") + [b[0x00]] + sp.encode("b"),  # the NUL byte piece stays
             sp.encode("a") + [b[0xC3], 3, b[0xA9]],  # a control piece ends a byte run
             [b[0xE2], b[0x82]] + sp.encode("x"), [0, 1, 2]]
    assert enc.decode_batch(batch) == [sp.decode(i) for i in batch]
    assert "\x00" in enc.decode_batch(batch)[0]


def test_spm_decode_batch_bad_input_fails_as_decode(tmp_path_factory):
    enc, sp = pair("mistral_v7", tmp_path_factory)
    n = sp.get_piece_size()
    for bad in (n, -1, -n - 1):
        with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
            enc.decode_batch([[1, 2], [5, bad]])
    mixed = [np.array(sp.encode("array ids"), np.int64), sp.encode("list ids")]
    assert enc.decode_batch(mixed) == [sp.decode(sp.encode("array ids")),
                                       sp.decode(sp.encode("list ids"))]
    b = {x: sp.piece_to_id(f"<0x{x:02X}>") for x in range(256)}
    broken = [sp.encode("a") + [b[0xC3]], sp.encode("ok")]
    assert enc.decode_batch(broken, errors="ignore") == [enc.decode(i, errors="ignore")
                                                         for i in broken]
    with pytest.raises(UnicodeDecodeError):
        enc.decode_batch(broken, errors="strict")


@pytest.fixture(scope="module")
def cl100k():
    from conftest import tiktoken_oracle

    return gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")


def test_bytelevel_decode_batch_equals_tiktoken(cl100k, counted):
    from testdata import corpus

    enc, tk = cl100k
    docs = corpus("multilingual")[:30] + corpus("prose")[:30]
    ids = tk.encode_batch(docs, allowed_special="all")
    rng = random.Random(5)
    # cut at random ids: documents that end or start inside a character
    cut = [d[rng.randrange(len(d) + 1):] for d in ids if d] + [[], [100257, 100258]]
    for batch in (ids, cut):
        for errors in ("replace", "ignore", "backslashreplace"):
            assert enc.decode_batch(batch, errors=errors) == \
                tk.decode_batch(batch, errors=errors)
        assert enc.decode_bytes_batch(batch) == tk.decode_bytes_batch(batch)
    assert len(counted) >= 8


def test_bytelevel_decode_batch_bad_ids(cl100k):
    enc, _ = cl100k
    for bad in (100256, 2**40, -1):  # a gap between ranks and specials, out of range
        with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
            enc.decode_batch([[15339], [1917, bad]])
        with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
            enc.decode_bytes_batch([[15339], [bad]])
    with pytest.raises(UnicodeDecodeError):
        enc.decode_batch([[15339], [9468, 248]], errors="strict")


def test_numpy_backend_decodes_without_the_join(cl100k):
    enc, tk = cl100k
    batch = [[15339, 1917], [9468, 248, 222], []]
    assert enc.decode_batch(batch, backend="numpy") == tk.decode_batch(batch)
    assert get_backend("numpy").tools.joiner is None


def test_decode_of_one_list_takes_the_built_in(cl100k, joiner):
    """``decode`` / ``decode_bytes`` of one list or tuple join it in the built-in
    (``PieceJoin.one``, ONE LIST AS A BUILT-IN); what it does not take (a numpy array, bools,
    an id in a gap or out of range) goes the decoder's way and fails as it did."""
    import types

    from gputok.onetext import JOIN as _JOIN
    enc, tk = cl100k
    rng = random.Random(9)
    docs = tk.encode_batch(["caf\u00e9 \u4e2d\u6587 \U0001F600 hello", "x" * 3000, ""],
                           allowed_special="all") + [[100257, 100276], [9468, 248], [248, 222]]
    docs += [[rng.randrange(100256) for _ in range(rng.randrange(60))] for _ in range(200)]
    for ids in docs:
        for form in (ids, tuple(ids)):
            assert enc.decode_bytes(form) == tk.decode_bytes(ids)
            for errors in ("replace", "ignore", "surrogateescape"):
                assert enc.decode(form, errors=errors) == tk.decode(ids, errors=errors)
    one = enc._text_calls[_JOIN]
    assert isinstance(one, types.BuiltinFunctionType)
    assert one([15339, 1917]) == b"hello world"
    assert one(np.array([15339])) is None and one([True]) is None and one([100256]) is None
    assert enc.decode(np.array([15339, 1917])) == "hello world"
    assert enc.decode([True]) == tk.decode([1])
    for bad in (100256, 2**40, -1):
        with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
            enc.decode([15339, bad])
        with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
            enc.decode_bytes((bad,))
    with pytest.raises(UnicodeDecodeError):
        enc.decode([15339, 9468, 248], errors="strict")
    with pytest.raises(KeyError, match="invalid token for decoding: a"):
        enc.decode(["a"])
    # the model pickles after the built-in was made (a corpus job's workers), and decodes there
    import pickle
    table = enc.model.detok.joined
    assert table.one is one
    again = pickle.loads(pickle.dumps(enc))
    assert again.model.detok.joined.one is None and again.decode([15339, 1917]) == "hello world"
