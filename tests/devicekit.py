"""The emulated encode device and the shared inputs of the kernel tests: thread orders, edge
cases, corpus snippets, the patterns the device pre-tokenizes, and helpers that run one stage's
kernels or the whole driver and compare with the host stages. Used by test_cuda_kernels,
test_native, test_device_coverage, test_metal_encode and the family tests.
"""

from __future__ import annotations

import copy
import functools
import random

import numpy as np
import regex

import gputok
import testdata
from cpu_ref.patterns import CL100K_PATTERN, GPT2_PATTERN
from emulator import compile_cuda
from gputok.backends import hostplan, kernels
from gputok.backends.emulated import ArrayDevice
from gputok.backends.driver import DeviceBackend
from gputok.patterns import BYTELEVEL as GPT2_HF_PATTERN, LLAMA3 as LLAMA3_PATTERN, QWEN2 as QWEN2_PATTERN
from gputok.stages.merge import LONG_PIECE, merge_long, merge_small
from gputok.stages.pack import Documents
from gputok.stages.split import find_tokens


ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1)]
EMULATED_HUGE_PIECE = 1024  # bytes: the emulated GPU's encode_merge_huge threshold


ORDER_IDS = [o for o, _ in ORDERS]


EDGE = ["", "a", "aaa", "\t" * 32, " " * 1000, "\n" * 300, "\r\n" * 40, " \r\n \r\n  x",
        "12345678901234567890", "x 1234567 ٣٣٣٣ １２３４ 123", "don't I'll we've they're it's",
        "DON'T I'LL WE'VE", "'s'll'VE ''s '", "a\u017f 'ſ 'S", "  hello\n\n\n  world  ",
        "!!!\n\n   x", "x\r\n\r\n   \r\n  ", "Grüße, 世界! 👋🏽 code: x += 1\n", "\u0301a\u0301 ",
        "日本語のテキスト", "😀😀😀 👍🏽👍🏽", "\x00\x01 \x7f", "a" * 600, " " * 255 + "x"]


TRICKY = list("aZéÉßǅʰ中日本ﾟ\u0301\u0915\u093f0129٣²½'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
              ".,!?-_/\\\"#$%&*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0f\u017f") + [
    "'s", "'ll", "'VE", "'Re", "\r\n", "  ", "<|endoftext|>", "123", "4567", "\n\n  "]


def tricky_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(TRICKY) for _ in range(rng.randrange(0, 40))) for _ in range(n)]


@functools.lru_cache(maxsize=None)
def corpus_snippets(per_kind: int = 6, chars: int = 1500) -> tuple:
    out = []
    for kind in testdata.KINDS:
        for d in testdata.corpus(kind, max_mb=0.05)[:per_kind]:
            out.append(d[:chars])
    return tuple(out)


@functools.lru_cache(maxsize=None)
def modules(scan_block: int, scan_items: int) -> dict:
    """The exact source the driver builds (constants injected, headers expanded) per file."""
    # (pieces of 1024 bytes or more merge on a whole block here: the tests' long pieces take
    # encode_merge_huge, not only the GPU's multi-MB ones)
    defines = (("ENC_SCAN_BLOCK", scan_block), ("ENC_SCAN_ITEMS", scan_items),
               ("ENC_HUGE_PIECE", EMULATED_HUGE_PIECE))
    out = {}
    for f in kernels.ENCODE_FILES:
        mod = compile_cuda(kernels.build_source(f, defines)[0])
        for k in mod.kernels:
            out[k] = mod
    return out


def emu_device(order: str = "forward", seed: int = 0, *, yield_on_atomic: bool = False,
               block: int = 32, max_blocks: int = 3, scan_block: int = 32, scan_items: int = 4,
               memory_limit: "int | None" = None) -> ArrayDevice:
    """An ArrayDevice whose launches run on the emulator. Small blocks and grids: every thread
    walks many elements (grid-stride loops); the scan tile is 128, so scans recurse."""
    mods = modules(scan_block, scan_items)

    def launch(name, grid, blk, args):
        mods[name].launch(name, grid, blk, args, order=order, seed=seed,
                          yield_on_atomic=yield_on_atomic)

    return ArrayDevice(launch, block=block, max_blocks=max_blocks, scan_block=scan_block,
                            scan_items=scan_items, memory_limit=memory_limit,
                            name=f"emulator ({order})")


def tiny_encoding(pattern: str) -> gputok.Encoding:
    """Bytes-only vocabulary: enough for the pre-tokenizer stage, cheap to build."""
    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"ab"] = 256
    return gputok.Encoding(f"tiny:{pattern[:10]}", pat_str=pattern, mergeable_ranks=ranks,
                           special_tokens={"<|endoftext|>": 257})


def pack(texts) -> tuple[bytes, np.ndarray]:
    parts = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
    off = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=off[1:])
    return b"".join(parts), off


def no_specials():
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint32)


def specials_of(enc, buf, off, tokens):
    s, e = find_tokens(buf, off, frozenset(tokens))
    ids = np.array([enc._special_tokens[buf[a:b].decode()] for a, b in zip(s, e)], np.uint32)
    return s, e, ids


def device_entries(be: DeviceBackend, enc, buf, off, specials=None):
    """Run the pretok + entries kernels on one chunk; (pstart, spec, doc_entry) on the host."""
    plan = be.model_plan(enc.model)
    hc = hostplan.prepare(plan.mode, plan.pretok, buf, off, specials or no_specials(), 0,
                          len(off) - 1, plan.normalizer)
    if hc.mode != "device":
        return hc.inputs[1], hc.inputs[2], hc.inputs[3]  # cut on the host
    ins = be.dev.upload(hc.inputs)
    ent = be.stages.pretok(plan.tables, hc.n, ins[0], ins[2], ins[3], hc.n_marks)
    pstart, spec, doc_entry, n_ent, _ = be.stages.entries(hc.n, ent, ins[1], hc.n_docs, ins[4],
                                                          ins[5], hc.n_spans)
    e = int(n_ent[0])
    return pstart[:e].copy(), spec[:e].copy(), doc_entry.copy()


def _regex_classes(gpt2: bool) -> np.ndarray:
    """The class of every code point, from the pinned patterns (the oracle's tables, not
    scan.py's class table)."""
    from gputok.unicode import compile_pinned

    cps = np.arange(0x110000, dtype=np.uint32)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    text = cps.tobytes().decode("utf-32-le")
    cls = np.full(0x110000, 3, np.uint8)  # P
    for prop, k in ((r"\p{N}", 2), (r"\p{L}", 1), (r"\s", 6), (r"[\r\n]", 6 if gpt2 else 7)):
        hit = np.zeros(len(cps), bool)
        for m in compile_pinned(prop + "+", "tiktoken").finditer(text):
            hit[m.start():m.end()] = True
        cls[cps[hit]] = k
    cls[0x20], cls[0x27] = 5, 4
    return cls


PATTERNS = {"gpt2": GPT2_PATTERN, "gpt2-hf": GPT2_HF_PATTERN, "cl100k": CL100K_PATTERN,
            "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}


def one_segment(text: str, class_table, cont: int) -> tuple:
    """One segment's device arrays, as a span kernel reads them: (buf (one spare byte), mark,
    cls (``cont`` on continuation bytes, X at n), the first byte of every character, the code
    points)."""
    raw = text.encode()
    n = len(raw)
    data = np.frombuffer(raw + b"\0", np.uint8)
    first = np.flatnonzero((data[:n] & 0xC0) != 0x80)
    cps = np.array([ord(c) for c in text], np.uint32)
    cls = np.full(n + 1, cont, np.uint8)
    cls[first], cls[n] = class_table[cps], 0  # (X: past the segment)
    mark = np.zeros(n + 2, np.uint8)
    mark[0], mark[n] = hostplan.SEG_START, hostplan.SEG_END
    return data, mark, cls, first, cps


def pretok_docs() -> list[str]:
    return list(corpus_snippets()) + EDGE + tricky_texts(250, seed=11)


def merge_pieces() -> list[bytes]:
    rng = random.Random(5)
    pieces = [p.encode() for t in list(corpus_snippets(3, 800)) + EDGE
              for p in regex.findall(CL100K_PATTERN, t)]
    pieces += [b"aaa", b"\t" * 32, b" " * 1000, b"a" * 5000, b"ab" * 300, b"\n" * 700,
               b"1234567890" * 30, bytes(range(256)), b"\xf0\x9f\x98\x80" * 100,
               "日本語".encode() * 120, b"x" * (LONG_PIECE - 1), b"y" * LONG_PIECE]
    b64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    pieces += [bytes(rng.choice(b64) for _ in range(rng.randrange(200, 1500))) for _ in range(3)]
    # long pieces that the merge cuts into runs no token spans (encode_merge_long's join bits)
    pieces += [bytes(rng.randrange(256) for _ in range(1200)), ("😀👍🏽x" * 120).encode(),
               ("é" * 200 + "😀" * 80 + "a" * 300).encode()]
    pieces += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(150)]
    pieces += pieces[:50]  # repeats: the dedup path
    return [p for p in pieces if p]


def run_merge(be, enc, pieces, whole: bool = True, n_docs: int = 7):
    """Pieces as host-cut entries -> merge + emit kernels -> (ids, doc offsets, entries)."""
    plan = be.model_plan(enc.model)
    tables = copy.copy(plan.tables)
    if not whole:
        tables.scalars = dict(tables.scalars, w_bits=np.uint32(0))
    buf, poff = pack(pieces)
    n = len(buf)
    pstart = poff.astype(np.uint32)  # the last one is the sentinel
    spec = np.full(len(pstart), hostplan.NORMAL, np.uint32)
    spec[-1] = hostplan.GAP
    doc_entry = np.linspace(0, len(pieces), n_docs + 1).astype(np.uint32)
    dev = be.dev
    d_buf, d_pstart, d_spec, d_doc, d_nent = dev.upload(
        [np.frombuffer(buf, np.uint8), pstart, spec, doc_entry,
         np.array([len(pstart)], np.uint32)])
    cap = len(pstart)
    owner, count, scratch = be.stages.merge(tables, n, d_buf, d_pstart, d_spec, d_nent, cap)
    out, out_doc = be.stages.emit(n, d_pstart, d_nent, cap, owner, count, scratch, d_doc,
                                  n_docs, enc.id_dtype)
    return out[:int(out_doc[-1])], out_doc, doc_entry


def check_byte_blocks_are_read(make_backend, enc, pieces, monkeypatch) -> None:
    """The merge kernels of ``make_backend()``'s device read both byte blocks of the tables
    (device_tables.byte_pair_block, whole_byte_block: flags set in the plan's bits): with the
    blocks as built they give the sequential rule's ids, with the whole-token lookup and
    without; with a damaged block (no byte pair merges; every byte is the token "!", for an
    encoding with the whole-token lookup) other ids; with no blocks (flags clear) the rule's
    ids again. The tables are built for each backend, not mapped from the cache."""
    from gputok.backends import device_tables as dt

    monkeypatch.setattr(dt, "_cache_path", lambda model: None)
    table = enc.model.merge_table
    # the device's whole-token lookup: the vocabulary's, or a merges model's proven tokens
    # (whose lookup gives the rule's ids: expected_merge merges them)
    whole = table.whole if table.whole is not None else dt.proven_whole(enc.model, table)
    wholes = (False, True) if whole else (False,)
    want = {w: [i for e in expected_merge(table, pieces, w) for i in e] for w in wholes}
    be = make_backend()
    sc = be.model_plan(enc.model).tables.scalars
    assert sc["t_bits"] & dt.PAIR_BYTES
    assert bool(sc["w_bits"] & dt.WHOLE_BYTES) == bool(whole)
    for w in wholes:
        assert run_merge(be, enc, pieces, w)[0].tolist() == want[w], w
    pairs, ones = dt.byte_pair_block, dt.whole_byte_block
    monkeypatch.setattr(dt, "byte_pair_block", lambda t: np.full(32768, ~np.uint64(0)))
    assert run_merge(make_backend(), enc, pieces, False)[0].tolist() != want[False]
    monkeypatch.setattr(dt, "byte_pair_block", pairs)
    if whole:
        bang = whole[b"!"]
        monkeypatch.setattr(dt, "whole_byte_block", lambda whole: np.full(256, bang, np.uint32))
        assert run_merge(make_backend(), enc, pieces, True)[0].tolist() != want[True]
        monkeypatch.setattr(dt, "whole_byte_block", ones)
    # no blocks (flags clear): the probes as before the blocks, the long pieces' runs from ids
    blocks = dt.with_byte_blocks
    monkeypatch.setattr(dt, "with_byte_blocks", lambda out, table, whole=None: out)
    bare = make_backend()
    sc = bare.model_plan(enc.model).tables.scalars
    assert not sc["t_bits"] & dt.PAIR_BYTES and not sc.get("w_bits", 0) & dt.WHOLE_BYTES
    for w in wholes:
        assert run_merge(bare, enc, pieces, w)[0].tolist() == want[w], ("no blocks", w)
    monkeypatch.setattr(dt, "with_byte_blocks", blocks)


def expected_merge(table, pieces, whole: bool):
    if not whole:
        table = copy.copy(table)
        table.whole = None
    return [merge_long(p, table) if len(p) >= LONG_PIECE else merge_small(p, table)
            for p in pieces]


def e2e_docs() -> list[str]:
    return list(corpus_snippets(4, 1200)) + EDGE + tricky_texts(40, seed=2)


def assert_same(enc, be, docs, expect, allowed=frozenset(), disallowed=frozenset()):
    ids, off = be.encode(enc.model, Documents(docs), allowed, disallowed)
    assert ids.dtype == enc.id_dtype and off.dtype == np.int64 and len(off) == len(docs) + 1
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    bad = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
    assert not bad, f"{len(bad)} documents differ; first {bad[0]}: {docs[bad[0]][:80]!r}"


def assert_pieces_like_regex(docs, buf, off, got, pattern: str, who: str) -> None:
    """The (piece start, spec, doc entry) arrays a device cut equal the reference regex's pieces:
    every piece start, every document's first entry, one GAP entry at the end. A difference names
    the first document and offsets that differ."""
    from gputok.stages.pretok import Pretokenizer, PretokSpec, piece_spans

    pstart, spec, doc_entry = got
    want, want_doc = piece_spans(buf, off, Pretokenizer(PretokSpec.regex(pattern)))
    if not np.array_equal(pstart, want):
        k = int(np.flatnonzero(pstart[:len(want)] != want[:len(pstart)])[0])
        d = int(np.searchsorted(off, min(pstart[k], want[k]), "right") - 1)
        raise AssertionError(f"{who}: first difference in document {d} {docs[d][:80]!r}: piece "
                             f"start {pstart[k] - off[d]}, regex {want[k] - off[d]}")
    np.testing.assert_array_equal(doc_entry, want_doc)
    assert (spec[:-1] == hostplan.NORMAL).all() and spec[-1] == hostplan.GAP
