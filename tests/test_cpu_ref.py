"""The chain of trust: cpu_ref vs the oracles, and every fast merge path vs cpu_ref.

    cpu_ref (literal rules) == tiktoken / HF tokenizers        (the spec is right)
    merge_small / merge_long / merge_rounds == cpu_ref.bpe     (the table-driven paths are right)
    gputok numpy backend == cpu_ref                            (the pipeline is right)
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import gputok
from conftest import HF_FILES, NAMED, hf_encoding, hf_oracle, testdata, tiktoken_oracle
from cpu_ref import bpe, hf as hf_ref, patterns
from cpu_ref.decode import StreamDecoder
from cpu_ref.encoding import RefEncoding
from gputok.stages.merge import (merge_heap_ids, merge_long, merge_long_ids,
                                 merge_long_rounds, merge_rounds, merge_small)
from gputok.stages.table import MergeTable, cache_key

TRAPS = ["aaa", "\t" * 32, " " * 100, "a" * 3000, "", "hello world", "don't", "ab" * 700,
         "\u00e9" * 50, "😀😀😀", "=== ---- ____", "0123456789" * 5]


def ref_encoding(name: str) -> RefEncoding:
    tk = tiktoken_oracle(name)
    return RefEncoding(name, pat_str=tk._pat_str, mergeable_ranks=tk._mergeable_ranks,
                       special_tokens=tk._special_tokens)


def _sample_docs(corpora, per_kind=6, max_chars=4000):
    return [d[:max_chars] for kind in corpora for d in corpora[kind][:per_kind]]


@pytest.mark.parametrize("name", NAMED)
def test_cpu_ref_vs_tiktoken(name, corpora):
    ref, tk = ref_encoding(name), tiktoken_oracle(name)
    docs = _sample_docs(corpora) + TRAPS
    bad = [i for i, d in enumerate(docs) if ref.encode_ordinary(d) != tk.encode_ordinary(d)]
    assert not bad
    s = "x<|endoftext|>y"
    assert ref.encode(s, allowed_special="all") == tk.encode(s, allowed_special="all")
    with pytest.raises(ValueError):
        ref.encode(s)
    assert ref.encode("\ud800\ud83d\ude00") == tk.encode("\ud800\ud83d\ude00")


@pytest.mark.parametrize("key", list(HF_FILES))
def test_cpu_ref_hf_vs_tokenizers(key, corpora):
    ref = hf_ref.RefHF(testdata.vocab_path(HF_FILES[key]))
    hf = hf_oracle(key)
    docs = _sample_docs(corpora, per_kind=4, max_chars=2000) + TRAPS
    bad = [i for i, d in enumerate(docs)
           if ref.encode(d, allowed_special="all") != hf.encode(d, add_special_tokens=False).ids]
    assert not bad


@pytest.mark.parametrize("name", NAMED)
def test_numpy_backend_vs_cpu_ref(name, corpora):
    ref, enc = ref_encoding(name), gputok.get_encoding(name)
    docs = _sample_docs(corpora, per_kind=3) + TRAPS
    ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend="numpy")
    for i, d in enumerate(docs):
        assert ids[off[i]:off[i + 1]].tolist() == ref.encode_ordinary(d), i


# ---- table-driven merging == the literal rules -------------------------------------------------

def _pieces(corpora, pat, n=3000):
    rng = random.Random(1)
    pieces = {p.encode() for d in _sample_docs(corpora, 4) for p in patterns.split(pat, d)}
    pieces = sorted(pieces)
    rng.shuffle(pieces)
    return pieces[:n] + [t.encode() for t in TRAPS if t]


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base"])
def test_table_merge_equals_tiktoken_rule(name, corpora):
    tk = tiktoken_oracle(name)
    ranks = tk._mergeable_ranks
    table = MergeTable.from_ranks(ranks)
    pieces = _pieces(corpora, tk._pat_str)
    expect = [bpe.bpe_tiktoken(p, ranks) for p in pieces]
    assert [merge_small(p, table) for p in pieces] == expect
    assert [merge_long(p, table) for p in pieces] == expect
    # merge_rounds does no whole-piece lookup (dedup does), so compare on the pieces that are
    # not themselves tokens, plus the whole-token ones checked through the rule without lookup
    tokens = table.byte_ids[np.frombuffer(b"".join(pieces), np.uint8)]
    offsets = np.cumsum([0] + [len(p) for p in pieces])
    ids, out_off = merge_rounds(tokens, offsets, table)
    got = [ids[out_off[i]:out_off[i + 1]].tolist() for i in range(len(pieces))]
    for p, g, e in zip(pieces, got, expect):
        if p not in ranks:
            assert g == e, p


@pytest.mark.parametrize("key", list(HF_FILES))
def test_table_merge_equals_hf_rule(key, corpora):
    ref = hf_ref.RefHF(testdata.vocab_path(HF_FILES[key]))
    enc = hf_encoding(key)
    table = enc.model.merge_table
    words = sorted({w for d in _sample_docs(corpora, 3, 1500)
                    for w in hf_ref.pre_tokenize(ref.pre_tokenizer, hf_ref.normalize(ref.normalizer, d))})
    expect = [ref.encode_word(w) for w in words]
    raw = [w.encode() for w in words]
    assert [merge_small(b, table) for b in raw] == expect
    assert [merge_long(b, table) for b in raw] == expect
    if table.whole is None:  # without ignore_merges the rounds path sees every word
        tokens = table.byte_ids[np.frombuffer(b"".join(raw), np.uint8)]
        ids, off = merge_rounds(tokens, np.cumsum([0] + [len(b) for b in raw]), table)
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(raw))] == expect


def test_merge_long_is_not_quadratic():
    # 200 KB of one character: the heap path does O(n log n) work; a quadratic loop would take
    # minutes here. Correctness is checked against the sequential rule on a prefix size that
    # the literal algorithm can afford.
    enc = gputok.get_encoding("cl100k_base")
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    for n in (257, 1000, 2001):
        assert merge_long(b"a" * n, enc.model.merge_table) == bpe.bpe_tiktoken(b"a" * n, ranks)
    ids = enc.encode("a" * 200_000)
    assert enc.decode(ids) == "a" * 200_000


def skewed_ranks(seed: int, alphabet: bytes = b"abc", n_tokens: int = 40) -> dict:
    """Every byte plus random tokens over a small alphabet with shuffled ranks, so that many a
    token ranks below one of its parts (a merge can make a pair below the one it merged)."""
    rng = random.Random(seed)
    ranks = {bytes([b]): b for b in range(256)}
    toks = set()
    while len(toks) < n_tokens:
        toks.add(bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 6))))
    order = list(toks)
    rng.shuffle(order)
    for k, t in enumerate(order):
        ranks[t] = 256 + k
    return ranks


def test_merge_long_rounds_then_heap_is_the_sequential_rule():
    """Long runs merge in rounds (one priority everywhere per sweep) while that is the rule
    and pays, then the heap goes on: against the literal rule on runs that finish in rounds,
    runs that stop when a round merges little, and skewed vocabularies where a merge makes a
    pair below the round's priority (the rounds must stop right there)."""
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    table = gputok.get_encoding("cl100k_base").model.merge_table
    bid = table.byte_id_list
    for text in (b"a" * 3001, b" " * 999, b"ab" * 400, b"=-" * 300, b"\xf0\x9f\x98\x80" * 100):
        expect = bpe.bpe_tiktoken(text, ranks)
        assert merge_long(text, table) == expect, text[:8]
        assert merge_heap_ids([bid[b] for b in text], table) == expect
    ids, finished = merge_long_rounds([bid[b] for b in b"a" * 3001], table)
    assert finished and ids == bpe.bpe_tiktoken(b"a" * 3001, ranks)  # aa, aaaa, ... in rounds
    rng = random.Random(5)
    word = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(2000))
    ids, finished = merge_long_rounds([bid[b] for b in word], table)
    assert not finished  # distinct pairs: the first round merges few, the heap goes on
    assert merge_heap_ids(ids, table) == bpe.bpe_tiktoken(word, ranks) == merge_long(word, table)
    # "bc" (257) merges first; the pair (a, bc) it makes is "abc" (256): below the round
    skew = {bytes([b]): b for b in range(256)} | {b"abc": 256, b"bc": 257}
    sk = MergeTable.from_ranks(skew)
    text = b"a" + b"bc" * 300
    ids, finished = merge_long_rounds([sk.byte_id_list[b] for b in text], sk)
    assert not finished and ids[:4] == [97, 257, 98, 99]  # stopped after the first merge
    assert len(ids) == len(text) - 1
    assert merge_long(text, sk) == bpe.bpe_tiktoken(text, skew)
    # "ab" (257) merges; its right pair (ab, a) is "aba" (256), before the next "ab" merges
    skew = {bytes([b]): b for b in range(256)} | {b"aba": 256, b"ab": 257}
    sk = MergeTable.from_ranks(skew)
    text = b"ab" * 300
    ids, finished = merge_long_rounds([sk.byte_id_list[b] for b in text], sk)
    assert not finished and ids[:3] == [257, 97, 98]
    assert merge_long(text, sk) == bpe.bpe_tiktoken(text, skew)
    for seed in range(30):
        skew = skewed_ranks(seed)
        sk = MergeTable.from_ranks(skew)
        r = random.Random(seed)
        for _ in range(4):
            text = bytes(r.choice(b"abc" if r.random() < 0.5 else b"aab") for _ in
                         range(r.choice([300, 700, 1500])))
            assert merge_long(text, sk) == bpe.bpe_tiktoken(text, skew), (seed, text[:20])


def test_stream_decoder_matches_decode():
    enc = gputok.get_encoding("o200k_base")
    ids = enc.encode("€uro 😀 ж 日本 ok \U0001F469\u200d\U0001F4BB")
    for chunk in (1, 2, 3, 5):
        dec = StreamDecoder(enc.decode_single_token_bytes)  # the reference decoder
        out = "".join(dec.feed(ids[i:i + chunk]) for i in range(0, len(ids), chunk)) + dec.flush()
        assert out == enc.decode(ids)


def test_merge_table_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    ranks = tiktoken_oracle("r50k_base")._mergeable_ranks
    built = MergeTable.from_ranks(ranks, digest="k1")
    files = list(tmp_path.glob(f"merge-table-{cache_key('k1')}.npz"))
    assert len(files) == 1
    cached = MergeTable.from_ranks(ranks, digest="k1")
    assert cached.pairs == built.pairs
    for k, v in built.arrays().items():
        assert np.array_equal(cached.arrays()[k], v), k
    files[0].write_bytes(b"not an npz")  # a damaged cache is rebuilt, not trusted
    again = MergeTable.from_ranks(ranks, digest="k1")
    assert again.pairs == built.pairs
    assert merge_long(b"a" * 700, again) == bpe.bpe_tiktoken(b"a" * 700, ranks)


def test_merge_table_cache_key_covers_hash_constant_and_builder(monkeypatch):
    from gputok.stages import table

    k = cache_key("vocab")
    monkeypatch.setattr(table, "HASH_MUL", np.uint64(0x9E3779B97F4A7C17))
    assert cache_key("vocab") != k
    monkeypatch.undo()
    monkeypatch.setattr(table, "BUILDER_VERSION", table.BUILDER_VERSION + 1)
    assert cache_key("vocab") != k


def test_stale_cached_table_is_detected_and_rebuilt(tmp_path, monkeypatch):
    """A cache file that does not belong to the vocabulary (same key, other content: e.g. a
    builder change without a version bump) fails the spot check and is rebuilt."""
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    ranks = tiktoken_oracle("r50k_base")._mergeable_ranks
    MergeTable.from_ranks(tiktoken_oracle("cl100k_base")._mergeable_ranks, digest="shared")
    table = MergeTable.from_ranks(ranks, digest="shared")  # finds cl100k's arrays under the key
    assert table.pairs == MergeTable.from_ranks(ranks).pairs
    assert len(table) == len(MergeTable.from_ranks(ranks))


# ---------------------------------------------------------------- gputok states the same data

def test_gputok_and_the_spec_state_the_same_data():
    """gputok owns its data (patterns, byte alphabet, special-token contract, surrogate repair);
    cpu_ref states it independently. They must agree."""
    from cpu_ref import hf as hf_ref, patterns as ref_patterns, specials as ref_specials

    from gputok import bytelevel, patterns, specials
    from gputok.stages.pack import fix_surrogates

    assert patterns.GPT2 == ref_patterns.GPT2_PATTERN
    assert patterns.CL100K == ref_patterns.CL100K_PATTERN
    assert patterns.O200K == ref_patterns.O200K_PATTERN
    assert patterns.BYTELEVEL == hf_ref.BYTELEVEL_PATTERN
    assert bytelevel.BYTE_TO_CHAR == hf_ref.BYTE_TO_UNICODE
    specs = frozenset({"<|endoftext|>", "<|fim_prefix|>"})
    for allowed, disallowed in [("all", "all"), (frozenset(), "all"), ({"<|endoftext|>"}, "all"),
                                (frozenset(), ()), ({"<|endoftext|>"}, {"<|fim_prefix|>"})]:
        assert specials.special_args(specs, allowed, disallowed) == \
            ref_specials.normalize_special_args(specs, allowed, disallowed)
    texts = ["a<|x|>b  <|y|>  c", "<|y|><|x|>", "  <|x|>\u3000", "x\x1c<|x|>", "", "<|x|>"]
    for t in texts:
        for ls, rs in [((), ()), ({"<|x|>"}, ()), ((), {"<|y|>"}), ({"<|x|>", "<|y|>"},) * 2]:
            ref = ref_specials.strip_around(
                ref_specials.split_specials(t, frozenset({"<|x|>", "<|y|>"})), ls, rs)
            assert specials.split_text(t, frozenset({"<|x|>", "<|y|>"}), ls, rs) == ref, (t, ls)
    for t in ["a\ud83d\ude00 \ud800", "ok", "\udfff\ud800"]:
        assert fix_surrogates(t) == ref_specials.fix_surrogates(t)
