"""SentencePiece ``.model`` files as arrays (``segmenters/pieces.py``, ``spm_build.py``, the proto
reader in ``loaders/spm_model.py``): the reader's array path gives what the generic field walk
gives on every record layout; the encode tables built from hashed runs equal a literal dict
build (the rules as ``spm_bpe``'s docstring states them); the tables are kept on disk by content
and a damaged or foreign file is rebuilt; load-time checks name the same piece a walk in id order
would."""

from __future__ import annotations

import numpy as np
import pytest

import families as F
import gputok
from cpu_ref import spm_proto
from gputok.components.segmenters import pieces as P, spm_build
from gputok.components.segmenters.spm_bpe import (BYTE, CONTROL, NORMAL, UNKNOWN_T, UNUSED,
                                                  USER_DEFINED, SpmFamily, score_ranks)
from gputok.loaders import spm_model

UNK = ("<unk>", 0.0, UNKNOWN_T)


def _family(pieces, byte_fallback=False) -> SpmFamily:
    return SpmFamily([p for p, _, _ in pieces], [s for _, s, _ in pieces],
                     [t for _, _, t in pieces], byte_fallback=byte_fallback,
                     unk_surface=" \u2047 ", where="t", decode_strip=True, decode_all_ws=True)


def reference_tables(fam: SpmFamily) -> dict:
    """The encode tables as dicts, walking every split of every piece (the rules of the
    ``spm_bpe`` docstring, written the obvious way)."""
    pieces, types, n = fam.pieces, fam.types, fam.n_vocab
    pid = {p: i for i, p in enumerate(pieces) if fam.in_pid[i]}
    rank = score_ranks(fam.table.scores).tolist()
    results = [(p, i) for p, i in pid.items() if len(p) > 1 and types[i] in (NORMAL, UNUSED)]
    extra: dict = {}
    for p, _ in results:
        for c in p:
            if c not in pid and c not in extra:
                extra[c] = n + len(extra)
    chars = {p: i for p, i in pid.items() if len(p) == 1}
    chars.update(extra)
    frozen = {i for p, i in pid.items() if types[i] == USER_DEFINED}
    text = {c: i for c, i in chars.items() if i not in frozen}
    text.update(results)
    pairs = {}
    for p, i in results:
        for k in range(1, len(p)):
            a, b = text.get(p[:k]), text.get(p[k:])
            if a is not None and b is not None:
                pairs[a << 32 | b] = (rank[i], i)
    inner = {(ord(a) << 21) | ord(b) for p, i in pid.items()
             if types[i] in (NORMAL, USER_DEFINED, UNUSED) for a, b in zip(p, p[1:])}
    emit = [i < n and fam.in_pid[i] and types[i] in (NORMAL, USER_DEFINED)
            for i in range(n + len(extra))]
    return {"pairs": pairs, "inner": sorted(inner), "extra": list(extra), "chars": chars,
            "emit": emit, "sentence_wide": any(types[i] == UNUSED for _, i in pairs.values())}


def _check(fam: SpmFamily) -> None:
    want = reference_tables(fam)
    t = fam.bpe.table
    got = dict(zip(t.pair_keys.tolist(), zip(t.pair_prio.tolist(), t.pair_merged.tolist())))
    assert len(t.pair_keys) == len(got) and got == want["pairs"]
    assert [k for k in fam.bpe.inner_keys.tolist() if k < 1 << 63] == want["inner"]
    assert fam.extra_chars == want["extra"]
    assert fam.emittable.tolist() == want["emit"]
    assert fam.sentence_wide == want["sentence_wide"]
    sym = fam.bpe.sym_of
    for c, i in want["chars"].items():
        assert sym[ord(c)] == i
    assert int((sym < 0x80000000).sum()) == len(want["chars"])
    for a in list(got)[:200]:  # the hash layout finds every pair
        assert t.lookup(np.array([a >> 32], np.uint32), np.array([a & 0xFFFFFFFF], np.uint32)
                        )[1][0] == got[a][1]


@pytest.mark.parametrize("name", ["mistral_v7", "botchan_bpe", "user_defined", "ws_suffix"])
def test_tables_equal_a_dict_build(name, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    spec = spm_model.parse(F.model_source(name))
    fam = SpmFamily(spec.table, byte_fallback=spec.byte_fallback, unk_surface="x", where=name,
                    decode_strip=True, decode_all_ws=True)
    _check(fam)


def test_tables_of_crafted_pieces(tmp_path, monkeypatch):
    """Extra characters (only inside pieces), frozen user-defined pieces, UNUSED results (a
    sentence-wide model), a CONTROL single character, the NUL piece sentencepiece skips, pieces
    whose prefix is not a piece, and long pieces."""
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    pieces = [UNK, ("a", -1, NORMAL), ("b", -2, NORMAL), ("ab", -3, NORMAL), ("ba", -3, NORMAL),
              ("xyz", -4, NORMAL), ("\u2581", -5, NORMAL), ("\u2581ab", -6, NORMAL),
              ("c", -7, USER_DEFINED), ("cab", -8, USER_DEFINED), ("abab", -9, UNUSED),
              ("|", 0, CONTROL), ("a|b", -10, NORMAL), ("\0", 0, UNUSED), ("é世", -11, NORMAL),
              ("ab" * 20, -12, NORMAL), ("ba" * 19 + "b", -12, NORMAL), ("😀a", -13, NORMAL)]
    fam = _family(pieces)
    _check(fam)
    assert fam.sentence_wide and "x" in fam.extra_chars and "😀" in fam.extra_chars
    assert not fam.in_pid[13]  # the NUL piece
    plain = _family([p for p in pieces if p[2] != UNUSED])
    _check(plain)
    assert not plain.sentence_wide


def test_tables_are_kept_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    # (not the model this process may already hold for these bytes: its tables are built here)
    monkeypatch.setenv("GPUTOK_MODEL_CACHE", "0")
    data = F.model_source("mistral_v7")
    path = tmp_path / "m.model"
    path.write_bytes(data)
    want = gputok.load(path).encode("Hello world, 世界")
    (entry,) = (tmp_path / "tables").glob("spm-*.bin")
    built = []
    monkeypatch.setattr(spm_build, "build", lambda *a: built.append(1) or None)
    monkeypatch.setenv("GPUTOK_MODEL_CACHE", "0")
    assert gputok.load(path).encode("Hello world, 世界") == want and not built  # mapped
    monkeypatch.undo()
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    monkeypatch.setenv("GPUTOK_MODEL_CACHE", "0")
    raw = bytearray(entry.read_bytes())
    raw[-5] ^= 0x10  # a flipped bit in the arrays: refused, rebuilt
    entry.write_bytes(bytes(raw))
    assert gputok.load(path).encode("Hello world, 世界") == want
    assert entry.read_bytes() != bytes(raw)
    entry.write_bytes(b"GPTKARR\0 torn")
    assert gputok.load(path).encode("Hello world, 世界") == want


def test_reader_layouts_equal_the_generic_walk():
    """Records the arrays read (one-byte lengths, ``0a plen piece 15 score [18 type]``) mixed
    with ones they cannot: a piece of 128+ bytes (two-byte lengths), no score field, fields in
    another order, an unknown field, a type the schema lacks, and pieces whose bytes look like
    records ("\\n\\n\\n")."""
    def raw(fields: bytes) -> bytes:
        return F._field(1, fields)

    pieces = [UNK, ("\n\n\n", -1, NORMAL), ("\n", -2, NORMAL), ("\n\x0a\n", -3, NORMAL),
              ("x" * 200, -4, NORMAL), ("a", -5, NORMAL)]
    body = b"".join(raw(F._field(1, p) + F._field(2, float(s)) + F._field(3, t))
                    for p, s, t in pieces)
    body += raw(F._field(1, "noscore") + F._field(3, 1))
    body += raw(F._field(3, 1) + F._field(2, -7.0) + F._field(1, "reordered"))
    body += raw(F._field(1, "unknownfield") + F._field(2, -8.0) + F._field(9, 5))
    body += raw(F._field(1, "badtype") + F._field(2, -9.0) + F._field(3, 9))
    body += raw(F._field(1, "\n\n") + F._field(2, -10.0))
    data = body + F.model_bytes([("b", -11, 1)])
    got, want = spm_model.parse(data), spm_proto.parse_model(data)
    assert list(zip(got.pieces, got.scores, got.types)) == want.pieces
    assert len(got.pieces) == 12 and got.pieces[4] == "x" * 200


def test_reader_says_which_piece_is_not_utf8():
    good = F.model_bytes([UNK, ("a", -1, 1)])
    bad = F._field(1, F._field(1, b"\xc3") + F._field(2, -2.0))  # a lone lead byte
    with pytest.raises(ValueError, match=r"pieces\[2\]: string is not UTF-8"):
        spm_model.parse(good + bad)
    split = F._field(1, F._field(1, b"\xa9z") + F._field(2, -3.0))  # starts inside a character
    with pytest.raises(ValueError, match=r"pieces\[2\]: string is not UTF-8"):
        spm_model.parse(good + bad[:0] + F._field(1, F._field(1, b"x\xc3") + F._field(2, -2.)
                                                  ) + split)


@pytest.mark.parametrize("case, msg", [
    ([UNK, ("a", -1, 1), ("b", -2, 1), ("a", -3, 1), ("", -4, 1)], "'a' is defined twice .ids 1 and 3"),
    ([UNK, ("a", -1, 1), ("", -2, 1), ("a", -3, 1)], "piece 2 is empty"),
    ([UNK, ("a\0b", -1, 1), ("a", -3, 1)], "piece 1 is empty or contains NUL"),
    ([UNK, ("<0x41>", 0, BYTE)], "byte piece '<0x41>' but byte_fallback is off"),
    ([UNK, ("<u2>", 0, UNKNOWN_T)], "more than one UNKNOWN piece"),
])
def test_load_checks_name_the_first_bad_piece(case, msg):
    with pytest.raises(ValueError, match=msg):
        _family(case)


def test_duplicates_by_hash_and_text():
    table = P.PieceTable.from_lists(["a", "bb", "a", "ccc", "bb", "a"], [0.0] * 6, [1] * 6)
    assert P.duplicates(table, np.arange(6)).tolist() == [-1, -1, 0, -1, 1, 0]
    assert P.duplicates(table, np.array([1, 3, 5])).tolist() == [-1] * 6
    many = [f"p{i}" for i in range(5000)]
    assert not P._any_equal(P.PieceTable.from_lists(many, [0.0] * 5000, [1] * 5000)
                            .byte_hashes())
    keys = np.arange(10000, dtype=np.uint64)
    assert not P._any_equal(keys) and P._any_equal(np.append(keys, np.uint64(7)))
    assert sorted(P.distinct(np.array([5, 3, 5, 5, 9, 3], np.uint64)).tolist()) == [3, 5, 9]


def test_index_finds_runs_exactly():
    table = P.PieceTable.from_lists(["ab", "abc", "bc", "日本", "x"], [0.0] * 5, [1] * 5)
    index = P.PieceIndex(table, np.array([0, 1, 2, 3]))
    cps, coff = table.chars  # "ab" "abc" "bc" "日本" "x" -> 0 2 5 7 9 10
    a = np.array([0, 2, 2, 3, 7, 5, 9])
    b = np.array([2, 5, 4, 5, 9, 6, 10])
    assert index.find_runs(a, b).tolist() == [0, 1, 0, 2, 3, -1, -1]


def test_hash_hits_are_checked_and_clashes_retried(monkeypatch):
    """Under a hash where anagrams collide (base 1: the sum of the characters), a run that only
    shares a hash with a piece is not that piece, and an index whose pieces clash takes the
    next seed."""
    monkeypatch.setattr(P, "_BASES", (1,))
    table = P.PieceTable.from_lists(["ab", "ba", "abc", "cab", "acb"], [0.0] * 5, [1] * 5)
    index = P.PieceIndex(table, np.array([0, 2]))
    assert index.find_runs(np.array([0, 2, 4, 7, 10]), np.array([2, 4, 7, 10, 13])).tolist() \
        == [0, -1, 2, -1, -1]  # "ab", "ba" (its anagram), "abc", "cab", "acb" (anagrams)
    with pytest.raises(P.HashClash):
        P.PieceIndex(table, np.arange(5))
    assert spm_build._index(table, np.arange(5)).hasher.base == 3


def test_single_characters_from_bytes():
    pieces = ["a", "é", "世", "😀", "ab", "", "▁", "éa", "\x7f", "߿", "￿"]
    t = P.PieceTable.from_lists(pieces, [0.0] * len(pieces), [1] * len(pieces))
    ids, cps = t.single_chars()
    want = [(i, ord(p)) for i, p in enumerate(pieces) if len(p) == 1]
    assert list(zip(ids.tolist(), cps.tolist())) == want
