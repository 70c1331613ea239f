"""A piece merged by a whole block of threads: ``encode_merge_huge`` (kernels/encode_merge_huge.cu,
common/encode_merge_huge.h) on the emulator, and its ops reference ``stages.merge.merge_huge``.

Both against the sequential rule (``merge_heap_ids``, ``merge_small_ids``, cpu_ref's literal
BPE): runs of one character ("a" * n, spaces, "\\t" * 64: same-priority runs and overlapping
pairs), CJK and emoji runs, base64 and random bytes, cl100k's real table (compact, byte-pair
block) and tables that are not compact; vocabularies whose merges make pairs below the round's
priority on either side, and tables whose pairs share priorities (SentencePiece's equal scores,
where a merge can make a pair of the round's own priority). The kernel runs with small blocks
and segments, so a piece spans many segments and threads (every thread order in the full tier),
and must leave every other entry as it was.
"""

from __future__ import annotations

import base64
import functools
import random

import numpy as np
import pytest

import gputok
from conftest import tiktoken_oracle
from cpu_ref import bpe
from devicekit import ORDER_IDS, ORDERS
from emulator import compile_cuda
from gputok.backends import device_tables, kernels
from gputok.stages.merge import merge_heap_ids, merge_huge, merge_long_ids, merge_small_ids
from gputok.stages.table import NO_MERGE, MergeTable
from test_cpu_ref import skewed_ranks

HUGE, SEG, BLOCK = 64, 16, 32  # bytes, bytes, threads: many segments a thread, many threads
DONE = kernels.ENC_DONE


@functools.lru_cache(maxsize=None)
def module(huge: int = HUGE, seg: int = SEG, block: int = BLOCK):
    defines = (("ENC_HUGE_PIECE", huge), ("ENC_HUGE_SEG", seg), ("ENC_HUGE_BLOCK", block))
    return compile_cuda(kernels.build_source("encode_merge_huge.cu", defines)[0])


def tied_table(seed: int, alphabet: int = 3, n_pairs: int = 30, levels: int = 4) -> MergeTable:
    """Random merges over a small alphabet whose priorities are drawn from a few values: pairs
    share priorities as SentencePiece's equal scores make them (a merge can then make a pair of
    its own round's priority), merged ids past the alphabet."""
    rng = random.Random(seed)
    syms = list(range(alphabet))
    pairs: dict = {}
    while len(pairs) < n_pairs:
        a, b = rng.choice(syms), rng.choice(syms)
        if (a << 32 | b) not in pairs:
            new = 256 + len(pairs)
            pairs[a << 32 | b] = (rng.randrange(levels), new)
            syms.append(new)
    return MergeTable(pairs, np.arange(256, dtype=np.uint32), None)


def literal(ids: list[int], table: MergeTable) -> list[int]:
    return merge_small_ids(list(ids), table)


def run_kernel(tables: dict, pieces: list[bytes], order: str = "forward", seed: int = 0,
               *, grid: int = 3, block: int = BLOCK, yield_on_atomic: bool = False,
               mod=None) -> list[list[int]]:
    """``pieces`` as the entries of one chunk (short ones and a finished one between them) ->
    encode_merge_huge -> each piece's ids; every entry it must not touch is checked too."""
    entries = []
    for k, p in enumerate(pieces):
        entries.append((b"xy", "done"))  # a whole token's entry: owner ENC_DONE
        entries.append((p, "merge"))
        entries.append((b"z" * (k % 5 + 1), "merge"))  # short: left to encode_merge_short
    buf = b"".join(p for p, _ in entries)
    n = len(buf)
    pstart = np.zeros(len(entries) + 1, np.uint32)
    np.cumsum([len(p) for p, _ in entries], out=pstart[1:])
    cap = len(entries)
    owner = np.array([DONE if w == "done" else e for e, (_, w) in enumerate(entries)], np.uint32)
    owner_in = owner.copy()
    count = np.full(cap + 1, 7, np.uint32)
    scratch = np.full(n, 0xABCDEF, np.uint32)
    prio_ws, nxt_ws, prv_ws = (np.zeros(n, np.uint32) for _ in range(3))
    heap_ws = np.zeros(n, np.uint64)
    seg_ws = np.zeros(6 * (n // SEG + 2), np.uint32)
    (mod or module()).launch(
        "encode_merge_huge", (grid,), (block,),
        [np.frombuffer(buf, np.uint8), pstart, np.array([cap + 1], np.uint32), owner,
         tables["t_slots"], np.uint32(tables["t_bits"]), tables["byte_ids"], scratch, prio_ws,
         nxt_ws, prv_ws, heap_ws, seg_ws, count, np.int64(cap)],
        order=order, seed=seed, yield_on_atomic=yield_on_atomic)
    out = []
    for e, (p, what) in enumerate(entries):
        s = int(pstart[e])
        if what == "merge" and len(p) >= HUGE:
            assert owner[e] == DONE
            out.append(scratch[s:s + int(count[e])].tolist())
        else:  # untouched: owner, count and its bytes' ids
            assert owner[e] == owner_in[e] and count[e] == 7, e
            assert (scratch[s:s + len(p)] == 0xABCDEF).all(), e
    assert count[cap] == 7
    return out


def tables_of(table: MergeTable, byte_block: bool = False) -> dict:
    slots, bits = device_tables.pair_slots(table)
    out = {"t_slots": slots, "t_bits": bits, "byte_ids": table.byte_ids.astype(np.uint32)}
    return device_tables.with_byte_blocks(out, table) if byte_block else out


@functools.lru_cache(maxsize=None)
def cl100k():
    enc = gputok.get_encoding("cl100k_base")
    return enc, device_tables.host_tables(enc.model)


def cl100k_pieces() -> list[bytes]:
    rng = random.Random(11)
    b64 = base64.b64encode(rng.randbytes(1200))
    cjk = ("日本語のテキストと中文的文本混在" * 40).encode()
    return [b"a" * 3001, b" " * 999, b"\t" * 64, b"ab" * 400, b"=-" * 300, cjk, b64,
            ("😀👍🏽x" * 40).encode(), bytes(rng.randrange(256) for _ in range(900)),
            b"1234567890" * 30, b"a" * HUGE, b"b" * (HUGE + 1)]


# ---------------------------------------------------------------- the ops reference

def test_merge_huge_is_the_sequential_rule():
    """``merge_huge`` (rounds over every pair at once, never a heap) against the literal rule
    and the heap: cl100k's table on the kernel's test pieces, skewed vocabularies (a merge makes
    a pair below the round on its left or right), tables with shared priorities."""
    enc, _ = cl100k()
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    table = enc.model.merge_table
    bid = table.byte_id_list
    for piece in cl100k_pieces():
        assert merge_huge([bid[b] for b in piece], table) == bpe.bpe_tiktoken(piece, ranks)
    for seed in range(30):
        skew = skewed_ranks(seed)
        sk = MergeTable.from_ranks(skew)
        rng = random.Random(seed)
        for _ in range(3):
            text = bytes(rng.choice(b"abc" if rng.random() < 0.5 else b"aab")
                         for _ in range(rng.choice([30, 300, 700])))
            assert merge_huge([sk.byte_id_list[b] for b in text], sk) == \
                bpe.bpe_tiktoken(text, skew), (seed, text[:20])
    for seed in range(40):
        tied = tied_table(seed)
        rng = random.Random(seed)
        ids = [rng.randrange(3) for _ in range(rng.choice([5, 40, 400]))]
        assert merge_huge(ids, tied) == literal(ids, tied) == merge_heap_ids(list(ids), tied), seed


def test_long_rounds_stop_at_a_pair_of_their_own_priority():
    """``merge_long_rounds`` (the long pieces' rounds, kernels' ``enc_merge_rounds``) with pairs
    that share a priority: merging "ab" makes ("ab", "c") of the same priority, which the rule
    takes before the "cd" right of it; a sweep that went on would merge "cd" (this failed
    before the rounds stopped at a new pair of their own priority)."""
    pairs = {0 << 32 | 1: (0, 4), 4 << 32 | 2: (0, 5), 2 << 32 | 3: (0, 6)}
    table = MergeTable(pairs, np.arange(256, dtype=np.uint32), None)
    ids = [0, 1, 2, 3] * 100
    assert literal(ids[:4], table) == [5, 3]
    assert merge_long_ids(list(ids), table) == literal(ids, table) == [5, 3] * 100
    for seed in range(40):
        tied = tied_table(seed)
        rng = random.Random(seed)
        ids = [rng.randrange(3) for _ in range(rng.choice([40, 400]))]
        assert merge_long_ids(list(ids), tied) == literal(ids, tied), seed


# ---------------------------------------------------------------- the kernel

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_kernel_on_cl100k_pieces(order, seed):
    enc, tables = cl100k()
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    pieces = cl100k_pieces()
    got = run_kernel(tables, pieces, order, seed)
    want = [bpe.bpe_tiktoken(p, ranks) for p in pieces if len(p) >= HUGE]
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert len(got) == len(want) and not bad, bad


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_kernel_on_skewed_and_tied_tables(order, seed):
    """Tables that are not compact (priorities are not the merged ids), with and without the
    byte-pair block: skewed vocabularies and shared priorities; one block and several."""
    for k in range(6):
        rng = random.Random(100 + k)
        skew = skewed_ranks(k)
        sk = MergeTable.from_ranks(skew)
        texts = [bytes(rng.choice(b"abc" if j % 2 else b"aab")
                       for _ in range(rng.choice([70, 300]))) for j in range(3)]
        # a vocabulary of the tiktoken rule with its priorities apart from the merged ids
        loose = MergeTable({key: (prio + 7, merged) for key, (prio, merged) in sk.pairs.items()},
                           sk.byte_ids, None)
        for table in (sk, loose):
            assert run_kernel(tables_of(table, byte_block=k % 2 == 1), texts, order, seed,
                              grid=1 + k % 3) == [bpe.bpe_tiktoken(t, skew) for t in texts], k
    for k in range(8):
        tied = tied_table(k)
        rng = random.Random(k)
        texts = [bytes(rng.randrange(3) for _ in range(rng.choice([70, 200]))) for _ in range(3)]
        want = [literal(list(t), tied) for t in texts]
        assert run_kernel(tables_of(tied, byte_block=k % 2 == 0), texts, order, seed) == want, k


def test_kernel_with_a_thread_switch_at_every_atomic():
    """The queue of huge pieces (shared atomics) and the round's minima with threads switching
    at every atomic; one thread per block and blocks wider than the piece's segments too."""
    enc, tables = cl100k()
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    pieces = [b"a" * 700, (b" " * 70 + b"x") * 6, ("中文" * 100).encode()]
    want = [bpe.bpe_tiktoken(p, ranks) for p in pieces]
    assert run_kernel(tables, pieces, "shuffle", 4, yield_on_atomic=True) == want
    assert run_kernel(tables, pieces, "forward", 0, block=1, grid=2) == want
    wide = module(HUGE, 64, 128)
    assert run_kernel(tables, pieces, "reverse", 0, block=128, grid=1, mod=wide) == want


def test_priorities_must_leave_the_top_bit_free():
    """The kernel flags merging pairs in the top bit of a priority: a table whose priorities
    reach it is refused where the device tables are built, with the reason."""
    table = MergeTable({0 << 32 | 1: (0x7FFFFFFF, 256)}, np.arange(256, dtype=np.uint32), None)
    with pytest.raises(ValueError, match="priorit"):
        device_tables.pair_slots(table)
    assert NO_MERGE == 0xFFFFFFFF


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_rounds_that_merge_little_hand_over_to_the_heap(order, seed):
    """Where rounds merge fewer than ENC_HUGE_ROUND_MERGES pairs each on average (built here to
    judge after one round), the parts left go to the long pieces' block heaps on one thread,
    from the rounds' state: the ids are the rule's still, on every table kind."""
    mod = compile_cuda(kernels.build_source("encode_merge_huge.cu", (
        ("ENC_HUGE_PIECE", HUGE), ("ENC_HUGE_SEG", SEG), ("ENC_HUGE_BLOCK", BLOCK),
        ("ENC_HUGE_ROUNDS_MIN", 1), ("ENC_HUGE_ROUND_MERGES", 1 << 20)))[0])
    enc, tables = cl100k()
    ranks = tiktoken_oracle("cl100k_base")._mergeable_ranks
    pieces = cl100k_pieces()
    assert run_kernel(tables, pieces, order, seed, mod=mod) == [
        bpe.bpe_tiktoken(p, ranks) for p in pieces if len(p) >= HUGE]
    skew = skewed_ranks(5)
    sk = MergeTable.from_ranks(skew)
    rng = random.Random(5)
    texts = [bytes(rng.choice(b"abc") for _ in range(400)) for _ in range(2)]
    assert run_kernel(tables_of(sk), texts, order, seed, mod=mod) == [
        bpe.bpe_tiktoken(t, skew) for t in texts]
    tied = tied_table(3)
    texts = [bytes(rng.randrange(3) for _ in range(300)) for _ in range(2)]
    assert run_kernel(tables_of(tied), texts, order, seed, mod=mod) == [
        literal(list(t), tied) for t in texts]


def test_long_piece_kernel_rounds_stop_at_a_pair_of_their_own_priority():
    """``encode_merge_long`` (one thread a piece: rounds, then the heap; what the native device
    and SentencePiece's device merge run) on tables whose pairs share priorities: the literal
    rule's ids (the rounds went on past a new pair of their own priority before)."""
    mod = compile_cuda(kernels.build_source("encode_merge.cu")[0])
    from gputok.stages.merge import LONG_PIECE

    pairs = {0 << 32 | 1: (0, 4), 4 << 32 | 2: (0, 5), 2 << 32 | 3: (0, 6)}
    cases = [(MergeTable(pairs, np.arange(256, dtype=np.uint32), None),
              [bytes([0, 1, 2, 3] * 100)])]
    for k in range(6):
        rng = random.Random(k)
        cases.append((tied_table(k), [bytes(rng.randrange(3) for _ in range(rng.choice(
            [LONG_PIECE, 700]))) for _ in range(2)]))
    for table, pieces in cases:
        tb = tables_of(table)
        buf = b"".join(pieces)
        n = len(buf)
        pstart = np.zeros(len(pieces) + 1, np.uint32)
        np.cumsum([len(p) for p in pieces], out=pstart[1:])
        cap = len(pieces)
        owner = np.arange(cap, dtype=np.uint32)
        count = np.zeros(cap + 1, np.uint32)
        scratch = np.zeros(n, np.uint32)
        units = n // LONG_PIECE + 2
        ws = [np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32),
              np.zeros(n, np.uint64), np.zeros(2 * units, np.uint64), np.zeros(units, np.uint32)]
        join = np.full(2048, 0xFFFFFFFF, np.uint32)  # no cut: every byte pair may join
        mod.launch("encode_merge_long", (2,), (32,),
                   [np.frombuffer(buf, np.uint8), pstart, np.array([cap + 1], np.uint32),
                    owner, tb["t_slots"], np.uint32(tb["t_bits"]), tb["byte_ids"], join,
                    scratch, *ws, count, np.int64(cap)])
        got = [scratch[pstart[e]:pstart[e] + count[e]].tolist() for e in range(cap)]
        assert got == [literal(list(p), table) for p in pieces]
