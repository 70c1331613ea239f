"""The native CPU device: the encode kernels compiled for the host (``gputok.backends.native``).

1. Each stage's kernels against the numpy stages and the reference regex, as
   ``test_cuda_kernels.py`` checks them on the emulator, in three launch shapes: one thread;
   three threads with tiny blocks (many blocks handed out dynamically); two threads with a grid
   smaller than the range (every kernel's grid-stride loop takes several strides). Fresh arrays
   are poisoned (0xCD), so a kernel reading memory nobody wrote shows up as a wrong result.
2. The whole pipeline (the driver with two streams) against tiktoken and HF tokenizers, on real
   corpora, with special tokens, many chunks, the host pre-tokenization paths; every kernel of
   the module runs on real volumes.
3. The module: argument checks, the build cache, no compiler / a failing compiler (``auto``
   falls back to numpy, visibly), a fork()ed child.
Parity over the full corpora on this backend is ``test_parity.py`` (its ``native`` cases).
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest

import gputok
import testdata
from conftest import hf_encoding, hf_oracle, tiktoken_oracle
from gputok.backends import FallbackWarning, native
from gputok.backends.native import build as native_build
from gputok.backends.hostplan import HostChunk
from gputok.backends.runners import onetext, streamed as streamed_batch, workers
from gputok.backends.driver import DeviceBackend
from gputok.stages.pack import Documents
from gputok.stages.pretok import Pretokenizer, PretokSpec, piece_spans
from gputok.unicode import normalize
from devicekit import (EDGE, PATTERNS, _regex_classes, assert_same, check_byte_blocks_are_read,
                       device_entries,
                       e2e_docs, expected_merge, merge_pieces, pack, pretok_docs,
                       run_merge, specials_of, tiny_encoding, tricky_texts)

_ok, _why = native.available()


def create(*args, **options):
    """The native backend without its per-document pass: this file tests the chunk pipeline
    (the pass has test_native_perdoc.py)."""
    return native.create(*args, per_doc=False, **options)
pytestmark = pytest.mark.skipif(not _ok, reason=f"native backend unavailable: {_why}")

# (id, threads, elements per block, max blocks)
LAYOUTS = [("1-thread", 1, native.HOST_BLOCK, native.MAX_BLOCKS),
           ("3-threads-small-blocks", 3, 64, native.MAX_BLOCKS),
           ("2-threads-grid-strides", 2, 32, 3)]
LAYOUT_IDS = [x[0] for x in LAYOUTS]


def device(layout: str = "1-thread") -> native.NativeDevice:
    _, threads, block, max_blocks = next(x for x in LAYOUTS if x[0] == layout)
    dev = native.NativeDevice(threads, poison=True, per_doc=False)
    dev.block, dev.max_blocks = block, max_blocks
    return dev


def backend(layout: str = "1-thread", **options) -> DeviceBackend:
    return DeviceBackend(device(layout), name="native", **options)


# ---------------------------------------------------------------- 1. stage by stage

@pytest.mark.parametrize("threads", [1, 2, 3])
def test_scan_matches_numpy(threads):
    dev = native.NativeDevice(threads, per_doc=False)
    rng = np.random.default_rng(threads)
    for n in (0, 1, 5, (1 << 18) - 1, 1 << 18, (1 << 18) + 7, 3_000_001):
        for exclusive in (False, True):
            for on_stream in (False, True):
                x = rng.integers(0, 1 << 31, n + 3, dtype=np.uint32)  # sums wrap modulo 2^32
                a = x.copy()
                if on_stream:
                    with dev.stream(1):
                        dev.scan(a, n, exclusive)
                        dev.fence()
                else:
                    dev.scan(a, n, exclusive)
                incl = np.cumsum(x[:n], dtype=np.uint32)
                want = np.concatenate([[0], incl])[:n].astype(np.uint32) if exclusive else incl
                np.testing.assert_array_equal(a[:n], want, err_msg=f"n={n} excl={exclusive}")
                np.testing.assert_array_equal(a[n:], x[n:])  # nothing past n is touched


def test_class_table_agrees_with_regex_on_every_code_point():
    from cpu_ref.patterns import CL100K_PATTERN
    from gputok.backends import hostplan

    be = backend("3-threads-small-blocks")
    plan = be.model_plan(tiny_encoding(CL100K_PATTERN).model)
    cps = np.arange(0x110000, dtype=np.uint32)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    data = np.frombuffer(cps.tobytes().decode("utf-32-le").encode("utf-8"), np.uint8)
    n = len(data)
    mark = np.zeros(n + 2, np.uint8)
    mark[0], mark[n] = hostplan.SEG_START, hostplan.SEG_END
    cls = be.dev.empty(n + 2, np.uint8)
    be.stages.go("encode_pretok_classify", n + 1,
                 [data, np.int64(n), mark, plan.tables.arrays["cls_table"], cls])
    starts = np.flatnonzero((data & 0xC0) != 0x80)
    np.testing.assert_array_equal(cls[starts], _regex_classes(gpt2=False)[cps])
    assert (cls[np.flatnonzero((data & 0xC0) == 0x80)] == 8).all() and cls[n] == 0


@pytest.mark.parametrize("layout", LAYOUT_IDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_pretok_matches_regex(name, layout):
    pattern = PATTERNS[name]
    enc = tiny_encoding(pattern)
    be = backend(layout)
    assert be.model_plan(enc.model).mode == "device"
    docs = pretok_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = device_entries(be, enc, buf, off)
    want, want_doc = piece_spans(buf, off, Pretokenizer(PretokSpec.regex(pattern)))
    np.testing.assert_array_equal(pstart, want)
    np.testing.assert_array_equal(doc_entry, want_doc)


@pytest.mark.parametrize("layout", LAYOUT_IDS)
def test_o200k_pretok_matches_regex(layout):
    """encode_o200k.cu (span starts, one matcher per span) on the host's cores."""
    from gputok.patterns import O200K
    from test_device_coverage import o200k_docs

    enc = tiny_encoding(O200K)
    be = backend(layout)
    assert be.model_plan(enc.model).mode == "device"
    docs = o200k_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = device_entries(be, enc, buf, off)
    want, want_doc = piece_spans(buf, off, Pretokenizer(PretokSpec.regex(O200K)))
    np.testing.assert_array_equal(pstart, want)
    np.testing.assert_array_equal(doc_entry, want_doc)
    assert be.dev.launches["encode_o200k_spans"] == 1


@pytest.mark.parametrize("layout", LAYOUT_IDS)
def test_pretok_with_special_tokens_matches_host_paths(layout):
    enc = gputok.get_encoding("cl100k_base")
    eot = "<|endoftext|>"
    docs = [f"{eot}hello{eot}", f"x's {eot}{eot}  \n{eot}", eot, "", "no specials 12345 ",
            f"a  {eot}  b\r\n{eot}'ll 99999{eot}"] + tricky_texts(60, seed=3)
    buf, off = pack(docs)
    sp = specials_of(enc, buf, off, [eot])
    got = {mode: device_entries(backend(layout, pretok=mode), enc, buf, off, sp)
           for mode in ("device", "scanner", "split", "program")}
    for mode in ("scanner", "split", "program"):
        for a, b in zip(got["device"], got[mode]):
            np.testing.assert_array_equal(a, b, err_msg=mode)
    assert (got["device"][1] == enc._special_tokens[eot]).sum() == len(sp[0])


@pytest.mark.parametrize("layout", LAYOUT_IDS)
@pytest.mark.parametrize("rule", ["tiktoken", "hf"])
def test_merge_and_emit_match_the_sequential_rule(rule, layout):
    enc = gputok.get_encoding("r50k_base") if rule == "tiktoken" else hf_encoding("llama3")
    pieces = merge_pieces()
    for whole in ((True, False) if rule == "tiktoken" else (True,)):
        for dedup in (False, True, "crowded"):
            be = backend(layout, dedup=bool(dedup))
            if dedup == "crowded":  # far fewer dedup slots than misses: probes run out, and
                be.stages.dedup_slots_per_entry = 1 / 64  # those pieces merge themselves
            ids, out_doc, doc_entry = run_merge(be, enc, pieces, whole)
            expect = expected_merge(enc.model.merge_table, pieces, whole)
            assert ids.tolist() == [t for e in expect for t in e], (whole, dedup)
            lens = np.array([len(e) for e in expect])
            np.testing.assert_array_equal(out_doc,
                                          np.concatenate([[0], np.cumsum(lens)])[doc_entry])


@pytest.mark.parametrize("key", ["o200k_base", "llama3"])
def test_merge_reads_the_byte_blocks(key, monkeypatch):
    """The host-compiled kernels read the blocks after the tables' slots, launch by launch
    (check_byte_blocks_are_read) and in a chunk's one call (kernels/host_chunk.h: a batch on
    the chunk workers gives the reference's ids, and others with a damaged pair block); Llama
    3: an HF file with the whole-token lookup (ignore_merges)."""
    from gputok.backends import device_tables

    enc = gputok.get_encoding(key) if key.endswith("_base") else hf_encoding(key)
    check_byte_blocks_are_read(lambda: backend("2-threads-grid-strides"), enc,
                               merge_pieces()[::2], monkeypatch)
    docs = e2e_docs()[:40]
    want = enc.encode_batch(docs, disallowed_special=(), backend="numpy")

    def batch():
        be = create(threads=2, chunk_bytes=5000)
        calls = []
        real = be.dev.chunk_inline
        be.dev.chunk_inline = lambda *a: (calls.append(1), real(*a))[1]
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        assert len(calls) > 2  # several chunks, each one call
        return [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]

    assert batch() == want
    monkeypatch.setattr(device_tables, "byte_pair_block", lambda t: np.full(32768, ~np.uint64(0)))
    assert batch() != want


# ---------------------------------------------------------------- 2. the pipeline

@pytest.mark.parametrize("layout", LAYOUT_IDS)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_pipeline_matches_tiktoken(name, layout):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()
    be = backend(layout, chunk_bytes=3000, dedup=layout != "1-thread")  # many chunks
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every stage on the device
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
    assert be.dev.launches["encode_merge_short"] > 4


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_pipeline_special_tokens(name):
    import random

    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    specials = sorted(enc.special_tokens_set)
    rng = random.Random(9)
    docs = [t + rng.choice(specials) + u for t, u in zip(e2e_docs()[::3], e2e_docs()[1::3])]
    docs += [specials[0] * 3, f" {specials[-1]}\n", "<|endof" + "text|>", ""]
    be = backend("3-threads-small-blocks", chunk_bytes=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(enc, be, docs, [tk.encode(d, allowed_special="all") for d in docs],
                    allowed=frozenset(specials))
        with pytest.raises(ValueError, match=r"(?s)document 0: .*allowed_special"):
            be.encode(enc.model, Documents(docs), frozenset(), frozenset(specials))


@pytest.mark.parametrize("key", ["llama3", "qwen2"])
def test_pipeline_matches_hf_tokenizers(key):
    enc, hf = hf_encoding(key), hf_oracle(key)
    specials = sorted(enc.special_tokens_set)[:2]
    docs = e2e_docs() + [f"x {specials[0]}y{specials[1]}\n"]
    be = backend("2-threads-grid-strides", chunk_bytes=8000)
    expect = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # qwen2: NFC checked on the device
        assert_same(enc, be, docs, expect, allowed=frozenset(enc.special_tokens_set))


@pytest.mark.parametrize("name,expected", [
    ("r50k_base", set()), ("cl100k_base", set()), ("llama3", set()), ("o200k_base", set()),
    ("qwen2", set())])
def test_fallbacks_are_exactly_the_host_stages(name, expected):
    enc = hf_encoding(name) if name in ("llama3", "qwen2") else gputok.get_encoding(name)
    be = create(threads=2)
    docs = ["e\u0301t\u00e9 caf\u0065\u0301 ", "plain text", ""]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert set(be.fallbacks) == expected
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
        [enc.encode(d) for d in docs]


def test_every_kernel_runs_on_real_volumes():
    """The full corpora (with special tokens, a long piece and repeats), then a uint16
    vocabulary: every kernel of the module and both scans run; ids as tiktoken's."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = [d for kind in testdata.KINDS for d in testdata.corpus(kind)]
    docs += ["<|endoftext|> x " + "a" * 5000, "ab" * 300 + "<|endoftext|>"]
    be = create(threads=2, chunk_bytes=1 << 20)
    ids, off = be.encode(enc.model, Documents(docs), frozenset(["<|endoftext|>"]), frozenset())
    expect = tk.encode_batch(docs, allowed_special={"<|endoftext|>"}, num_threads=2)
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    assert sum(a != b for a, b in zip(got, expect)) == 0
    # a chunk worker runs a chunk as one call (kernels/host_chunk.h: the entries as a list of
    # starts); the stage-by-stage launches (a profile's, as CUDA's) scan and compact the flags
    few = docs[::25] + docs[-2:]
    be.profile = []
    ids, off = be.encode(enc.model, Documents(few), frozenset(["<|endoftext|>"]), frozenset())
    be.profile = None
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(few))] == \
        tk.encode_batch(few, allowed_special={"<|endoftext|>"}, num_threads=2)
    r50k, tk50 = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")  # uint16 ids
    ids, off = be.encode(r50k.model, Documents(docs[::10]), frozenset(), frozenset())
    assert ids.dtype == np.uint16
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs[::10]))] == \
        tk50.encode_ordinary_batch(docs[::10], num_threads=2)
    # o200k (encode_o200k.cu) and Qwen2 on NFD text (encode_nfc.cu, flagged spans spliced)
    o2, tko2 = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    ids, off = be.encode(o2.model, Documents(docs[::7]), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs[::7]))] == \
        tko2.encode_ordinary_batch(docs[::7], num_threads=2)
    qw, hf = hf_encoding("qwen2"), hf_oracle("qwen2")
    nfd = [normalize("NFD", d) for d in docs[1::9]]
    ids, off = be.encode(qw.model, Documents(nfd), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(nfd))] == \
        [e.ids for e in hf.encode_batch(nfd, add_special_tokens=False)]
    assert be.host_normalized["spans"] > 0
    # encode_wordpiece runs for WordPiece models only (tests/test_families_native.py), the
    # encode_spm kernels for SentencePiece models (tests/test_spm_device.py)
    spm = {k for k in be.dev.lib.kernels if k.startswith("encode_spm_")}
    assert set(be.dev.launches) == (set(be.dev.lib.kernels) - {"encode_wordpiece"} - spm) | {
        "scan_add"}
    assert min(be.dev.launches.values()) >= 1 and not be.fallbacks


def test_profile_marks_are_stream_timestamps():
    enc = gputok.get_encoding("cl100k_base")
    be = create(threads=2, chunk_bytes=5000)
    be.profile = []
    be.encode(enc.model, Documents(e2e_docs()), frozenset(), frozenset())
    assert len(be.profile) >= 2
    for p in be.profile:
        assert set(p["ms"]) == {"h2d", "pretok", "entries", "merge", "emit"}
        assert all(v >= 0 for v in p["ms"].values()) and p["ms"]["pretok"] > 0


def test_encode_batch_arrays_and_long_texts_take_it():
    enc = gputok.get_encoding("cl100k_base")
    ids, off = enc.encode_batch_arrays(["hello world", "", "x" * 300], backend="native")
    assert ids.tolist() == [15339, 1917] + enc.encode("x" * 300) and off.tolist()[:3] == [0, 2, 2]
    text = "a" * 100_000 + " tail"  # one long piece: encode_merge_long on one thread
    assert enc.encode_ordinary(text) == tiktoken_oracle("cl100k_base").encode_ordinary(text)


def test_merge_pieces_is_the_pipeline_for_pieces_cut_on_the_host():
    """``DeviceBackend.merge_pieces``: the merge and emit stages for pieces the host cut; each
    piece's ids as the whole pipeline gives them (whole tokens, short pieces, long runs cut by
    the join map, long heaps), whatever the layout, in order, duplicates included."""
    from gputok.stages.merge import LONG_PIECE

    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    pieces = [" hello", "a" * 3000, "\U0001F600" * 500, " " * (LONG_PIECE + 1), "x", "a" * 3000,
              "=" * 700, "\n\n", "1" * 3, "Ab" * 200]
    raw = [p.encode() for p in pieces]
    for layout in LAYOUT_IDS:
        be = backend(layout, dedup=True)
        got = be.merge_pieces(enc.model, raw)
        assert got == [tuple(tk.encode_ordinary(p)) for p in pieces], layout
        assert be.merge_pieces(enc.model, raw, flat=True) == [i for t in got for i in t]
        assert be.merge_pieces(enc.model, raw[1:2], flat=True) == list(got[1])
    assert be.merge_pieces(enc.model, []) == []
    assert set(be.dev.launches) == {"encode_piece_kind", "encode_merge_short", "encode_merge_long"}


def test_long_runs_merge_in_rounds_then_the_heap_as_the_sequential_rule():
    """``enc_merge_rounds`` then ``enc_merge_heap`` (encode_merge_long) against the literal rule:
    runs that finish in rounds ("a" * n, spaces, "ab" * n), runs whose rounds merge little
    (random letters: the heap takes over), and skewed vocabularies whose merges make pairs
    below the round's priority on either side (the rounds stop there), poisoned workspace."""
    import random

    from cpu_ref import bpe
    from test_cpu_ref import skewed_ranks

    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    rng = random.Random(3)
    letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3000))
    pieces = ["a" * 5001, " " * 777, "ab" * 900, "=" * 1200, letters]  # one piece each
    be = backend("3-threads-small-blocks")
    assert be.merge_pieces(enc.model, [p.encode() for p in pieces]) == [
        tuple(tk.encode_ordinary(p)) for p in pieces]
    byte_ranks = {bytes([b]): b for b in range(256)}
    cases = [(byte_ranks | {b"abc": 256, b"bc": 257},  # a merge's left pair is below it
              [b"a" + b"bc" * 300, b"bc" * 200 + b"a" + b"bc" * 200]),
             (byte_ranks | {b"aba": 256, b"ab": 257}, [b"ab" * 300])]  # its right pair is
    for seed in range(40):
        r = random.Random(seed)
        cases.append((skewed_ranks(seed), [bytes(r.choice(b"abc" if k % 2 else b"aab")
                                                 for _ in range(r.choice([300, 900, 2000])))
                                           for k in range(4)]))
    for ranks, raw in cases:
        model = gputok.Encoding("skewed", pat_str=r"[\s\S]+", mergeable_ranks=ranks,
                                special_tokens={}).model
        got = be.merge_pieces(model, raw)
        assert got == [tuple(bpe.bpe_tiktoken(x, ranks)) for x in raw], sorted(ranks.items())[256:]


@pytest.mark.parametrize("inline", [True, False], ids=["one-call", "launches"])
def test_merge_pieces_skips_the_whole_token_lookup_only_past_the_longest_token(inline):
    """A piece longer than every token cannot be one: when all are, ``merge_pieces`` launches
    ``encode_piece_kind`` without the whole-token table (no hash of a long piece); a piece as
    long as the longest token still finds it. Both forms of the stage: the native device's
    one call (``merge_inline``) and the driver's launches (any device)."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    longest = max(enc.model.ranks, key=len)
    seen = []
    be = backend("1-thread")
    if inline:
        real_inline = be.dev.merge_inline

        def spy_inline(tables, data, starts, spec, has_long, whole):
            seen.append(tables.scalars["w_bits"] if whole else 0)
            return real_inline(tables, data, starts, spec, has_long, whole)

        be.dev.merge_inline = spy_inline
    else:
        be.dev.caps = replace(be.dev.caps, merge_inline=False)  # the driver's generic form
        real = be.dev.launch

        def spy(name, grid, block, args):
            if name == "encode_piece_kind":
                seen.append(int(args[6]))  # w_bits
            return real(name, grid, block, args)

        be.dev.launch = spy
    ranks = enc.model.ranks
    for pieces, whole in (([b"a" * 4000, b" " * 900], False), ([longest, b"a" * 4000], True)):
        got = be.merge_pieces(enc.model, pieces)
        assert got == [(ranks[p],) if p in ranks else tuple(tk.encode_ordinary(p.decode()))
                       for p in pieces]
        assert (seen[-1] != 0) == whole
    assert len(got[0]) == 1 and len(longest) >= 64


def test_a_text_of_a_few_pieces_merges_them_on_the_device(monkeypatch):
    """``Encoding.encode``: a text the pre-tokenizer cuts into a few pieces (runs of one
    character class) is cut on the host and only its long pieces go to the device's merge
    stage (an ASCII text; a long one that is not all ASCII is cut on this thread by the
    device's pre-tokenization instead, ``OneCall.few``, no chunk either); prose takes the batch
    pipeline; a short text merges its long pieces on the device too. The ids are tiktoken's
    every way."""
    from gputok.stages import counters

    be = create(threads=2, one_call_max=0)  # (else short texts: one call)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    few = ["a" * 20_000, " " * 9000 + "end", "\U0001F600" * 4000, "x " + "7" * 30 + "b" * 5000,
           "\n" * 3000 + "tail", "a" * 1000, "ab " + "\u00e9" * 700]
    def cuts():
        return sum(v for k, v in be.dev.launches.items() if k.startswith("encode_pretok"))

    for text in few:
        before, cut = dict(counters), cuts()
        assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
        assert enc.encode(text, backend=be) == tk.encode(text)
        on_device = not text.isascii() and len(text) >= onetext.DEVICE_PATH_MIN
        assert counters["merge.device_pieces"] - before.get("merge.device_pieces", 0) >= \
            (0 if on_device else 2)
        assert counters["device.few_texts"] - before.get("device.few_texts", 0) == \
            (2 if on_device else 0)
        assert (cuts() > cut) == on_device
        assert counters["device.merge_pieces"] - before.get("device.merge_pieces", 0) >= 2
        assert counters["device.chunks"] == before.get("device.chunks", 0)
    prose = " ".join(e2e_docs())[:30_000]
    assert enc.encode_ordinary(prose, backend=be) == tk.encode_ordinary(prose)
    assert be.dev.launches.get("encode_pretok_spans", 0) >= 1  # the batch pipeline
    spec = "a" * 3000 + "<|endoftext|>"  # active specials: the batch pipeline too
    assert enc.encode(spec, allowed_special="all", backend=be) == tk.encode(spec, allowed_special="all")


def test_a_long_ascii_run_is_cut_by_the_ascii_regex(monkeypatch):
    """``split_few`` of an ASCII text runs the pattern's ASCII form (``re``), stopping after
    ``limit + 1`` matches, never the vectorised scanner (its numpy passes made ~9 bytes of
    temporaries per byte of a run); the pieces are ``split``'s, None past the limit. A 3 MB run
    through ``Encoding.encode_ordinary`` merges on the device with tiktoken's ids."""
    from gputok.stages import counters

    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        pre = gputok.get_encoding(name).model.pretokenizer
        want = {t: pre.split(t) for t in ("a" * 50_000, " " * 40_000 + "x", "A" * 30_000 + "b",
                                          "7" * 30, "x " + "b" * 9000 + " y\n\n",
                                          "\t" * 20_000, "Ab" * 4000, "a b c d e f")}
        monkeypatch.setattr(type(pre), "scanner", property(lambda self: pytest.fail("scanner")))
        for text, pieces in want.items():
            assert pre.split_few(text, 16) == (pieces if len(pieces) <= 16 else None), text[:9]
        assert pre.split_few(" ".join(["word"] * 40), 16) is None
        assert pre.split_few("a" * 5000 + " word" * 40, 16) is None
        monkeypatch.undo()
        # a non-ASCII text: probed by the scanner, never the pinned regex (its first compile)
        monkeypatch.setattr(type(pre), "_regex_for", lambda self, t: pytest.fail("regex"))
        for text in ("\U0001F600" * 3000 + " ok", "\u00e9" * 5000, "\u4e2d\u6587 " * 900):
            pieces = pre.split(text)
            assert pre.split_few(text, 16) == (pieces if len(pieces) <= 16 else None)
        monkeypatch.undo()
    # a pattern that skips characters: not this path's to decide
    from gputok.stages.pretok import Pretokenizer, PretokSpec, Split

    assert Pretokenizer(PretokSpec((Split(r"[a-z]+"),), "tiktoken")).split_few("ab!cd", 16) is None
    assert Pretokenizer(PretokSpec((Split(r"[a-z]*|."),), "tiktoken")).split_few("ab!cd",
                                                                                 16) is None
    be = create(threads=2)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    for text in ("a" * (3 << 20), "x " + " " * 100_000 + "y"):  # (tiktoken: a longer space run
        # overflows its regex stack)
        before = counters["merge.device_pieces"]
        assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
        assert counters["merge.device_pieces"] > before


def test_a_long_ascii_text_merges_from_its_own_characters(monkeypatch):
    """A long ASCII text of a few pieces is not copied: its merge reads the str's own
    characters (``pack.utf8_data``, ``OneText.merge_spans``), every piece a span of them,
    and the ids are tiktoken's (one run, runs with pieces around them, cl100k / o200k / r50k).
    A str subclass, a text under ``VIEW_MIN`` and a non-ASCII text of a few pieces cut on the
    host give their own bytes and the same ids."""
    from gputok.stages import pack

    be = create(threads=2)
    be.dev.poison = True
    import sys
    seen: list = []
    inline = be.dev.merge_inline

    def spy(tables, data, *args):
        seen.append(data)
        return inline(tables, data, *args)

    monkeypatch.setattr(be.dev, "merge_inline", spy)

    class Text(str):
        pass

    n = pack.VIEW_MIN
    texts = ["a" * (n + 5), " " * n + "end", "x = " + "b" * (n + 1) + " 7\n",
             "\n" * n + "tail  ", "A" * 70_000 + "bc" + "1" * 30, "".join(["ab"] * n)]
    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        for text in texts:
            seen.clear()
            assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text), (name, text[:9])
            assert len(seen) == 1 and isinstance(seen[0], np.ndarray), (name, text[:9])
            addr = seen[0].__array_interface__["data"][0]  # (in the str object itself)
            assert id(text) < addr < id(text) + sys.getsizeof(text) - len(text) + 1
            assert seen[0].base.text is text
        for text in (Text("a" * (n + 5)), "a" * (n - 1), "\u00e9" * n + " " + "a" * 9):
            seen.clear()
            assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(str(text))
            assert all(isinstance(d, bytes) for d in seen)


def test_an_ascii_view_is_the_str_characters_and_keeps_the_str():
    """``StrLayout.ascii_view``: a read-only uint8 array over an ASCII str's characters, equal
    to its UTF-8; it (and any view cut from it) keeps the str alive; None for a non-ASCII
    text, an empty one or a str subclass. ``utf8_data``: bytes below ``VIEW_MIN``, the view
    from there, ``UnicodeEncodeError`` on a surrogate. ``_utf8_starts``: the pieces' byte
    starts in the text's UTF-8, None where they do not cover it."""
    import gc
    import sys

    from gputok.stages.text import _utf8_starts
    from gputok.stages import pack

    layout = native.library().packer
    assert layout is not None
    text = "".join(["ab c", "d\n"] * 20_000)  # (made here: no other reference)
    refs = sys.getrefcount(text)
    view = layout.ascii_view(text)
    assert view.dtype == np.uint8 and not view.flags.writeable
    assert view.tobytes() == text.encode()
    assert sys.getrefcount(text) == refs + 1
    part = view[7:19]
    want = text[7:19].encode()
    del view, text
    gc.collect()
    assert part.tobytes() == want  # (the str lives on through the view's base)
    class Text(str):
        pass

    for other in ("\u00e9" * 100, "", Text("abc" * 100), "a\U0001F600"):
        assert layout.ascii_view(other) is None
    short = "q" * (pack.VIEW_MIN - 1)
    assert type(pack.utf8_data(short, layout)) is bytes and pack.utf8_data(short, layout) == short.encode()
    long = "q" * pack.VIEW_MIN
    assert isinstance(pack.utf8_data(long, layout), np.ndarray)
    assert pack.utf8_data(long, layout).tobytes() == long.encode()
    assert pack.utf8_data(long) == long.encode()  # (no packer given: its bytes)
    with pytest.raises(UnicodeEncodeError):
        pack.utf8_data("a\ud800" + "b" * pack.VIEW_MIN, layout)
    mixed = ["ab", " \u00e9\u00e9", "\U0001F600" * 3, "\n"]
    t = "".join(mixed)
    assert _utf8_starts(mixed, t, t.encode()).tolist() == [0, 2, 7, 19, 20]
    assert _utf8_starts(["ab", "c"], "abc", b"abc").tolist() == [0, 2, 3]
    assert _utf8_starts(["ab"], "abc", b"abc") is None


def test_a_short_text_is_one_device_call(monkeypatch):
    """``Encoding.encode`` of a text of ``_SHORT_MIN`` .. ``_SHORT_MAX`` characters (from
    ``_SHORT_MIN_NON_ASCII`` when not all ASCII) with no special token active:
    ``OneCall.short``, the whole sequence in one call
    (prose, code, CJK, emoji, runs, lone surrogates, byte-level HF BPE); active specials, a
    normaliser (Qwen2's NFC) or a shorter text take the other paths. Ids as the oracles'."""
    from gputok.stages import counters

    be = create(threads=2)
    be.dev.poison = True
    docs = e2e_docs()
    base = " ".join(docs)
    texts = [base[:600], base[1000:5000], base[-16_000:], "\u65e5\u672c\u8a9e\u306e\u6587" * 150,
             "\U0001F600" * 700 + " ok", "a" * 3000 + " " * 900 + "b", "x\ud800y " * 200,
             "tab\tand\r\nlines 123456 " * 40, base[:40_000],  # (over 64 KB of UTF-8: two calls)
             "\u65e5\u672c\u8a9e \u0444\u044b\u0432 " * 3000]
    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        for text in texts:
            before = counters["device.short_texts"]
            assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text), (name, text[:30])
            assert counters["device.short_texts"] == before + 1
        special = texts[1] + "<|endoftext|>"
        before = counters["device.short_texts"]
        assert enc.encode(special, allowed_special="all", backend=be) == tk.encode(special,
                                                                      allowed_special="all")
        assert enc.encode_ordinary(texts[0][:150], backend=be) == tk.encode_ordinary(texts[0][:150])
        assert counters["device.short_texts"] == before  # specials active; under _SHORT_MIN
        for text in ("\u00e9t\u00e9 " * 20, "\U0001F600 x" * 30):  # not ASCII: from 64 on
            assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
        assert counters["device.short_texts"] == before + 2
    # threads side by side (no backend lock around the call)
    import concurrent.futures

    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    jobs = [base[k * 700:k * 700 + 600 + 37 * k] for k in range(40)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(enc.encode_ordinary, jobs))
    assert got == [tk.encode_ordinary(t) for t in jobs]
    llama, qwen = hf_encoding("llama3"), hf_encoding("qwen2")
    for enc, hf in ((llama, hf_oracle("llama3")), (qwen, hf_oracle("qwen2"))):
        before = counters["device.short_texts"]
        for text in [t for t in texts[:6] if "<|" not in t]:  # (HF splits its added tokens)
            assert enc.encode_ordinary(text, backend=be) == hf.encode(text, add_special_tokens=False).ids
        assert (counters["device.short_texts"] > before) == (enc is llama)


def test_a_short_text_in_one_call_is_the_chunk_sequence(monkeypatch):
    """``NativeDevice.text_short`` (kernels/host_chunk.h, ``gputok_native_text_short``: one
    call, the thread's own workspace) gives ``chunk_inline``'s ids and counts the same kernels,
    for texts of every kind and size up to ``TEXT_SHORT_MAX`` in an order that grows and shrinks
    the workspace, with and without the dedup set, uint16 and uint32 ids; ``OneCall.short`` takes
    it up to ``text_short_max`` bytes and ``chunk_inline`` past that, the same ids either way."""
    from gputok.stages import counters

    docs = e2e_docs()
    base = " ".join(docs)
    texts = [base[:600], "a" * 9000, base[:native.TEXT_SHORT_MAX], "x", base[3000:4000],
             "\U0001F600" * 3000 + " ok", "\u65e5\u672c\u8a9e" * 5000, " " * 700 + "b" * 300,
             base[-20_000:], "7" * 999 + "+/" * 500]
    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        enc = gputok.get_encoding(name)
        for dedup in (True, False):
            be = create(threads=2, dedup=dedup)
            be.dev.poison = True
            plan = be.model_plan(enc.model)
            spe = be.stages.dedup_slots_per_entry if dedup else 0.0
            for text in texts:
                data = text.encode()[:native.TEXT_SHORT_MAX]
                a = be.dev.launches.copy()
                got = be.dev.text_short(plan.tables, data, onetext.SEGMENT_BITS,
                                        enc.model.id_dtype, spe)
                ran = {k: v - a.get(k, 0) for k, v in be.dev.launches.items() if v != a.get(k, 0)}
                ends = np.array([0, len(data)], np.uint32)
                hc = HostChunk(0, 1, len(data), "device", [
                    np.frombuffer(data, np.uint8), ends, ends, onetext.SEGMENT_BITS,
                    np.zeros(0, np.uint32), np.zeros(0, np.uint32)], 1, n_marks=2)
                a = be.dev.launches.copy()
                want, doc = be.dev.chunk_inline(plan.tables, hc, enc.model.id_dtype, spe)
                ran2 = {k: v - a.get(k, 0) for k, v in be.dev.launches.items() if v != a.get(k, 0)}
                assert got.dtype == want.dtype and got.tolist() == want.tolist(), (name, text[:9])
                assert ran == ran2 and int(doc[1]) == len(got)
    be = create(threads=2)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    text = base[:5000]
    calls: list = []
    short = be.dev.text_short
    monkeypatch.setattr(be.dev, "text_short", lambda *a: calls.append(1) or short(*a))
    before = counters["device.short_texts"]
    assert be.text.one_call.short(enc.model, text) == tk.encode_ordinary(text)
    be.dev.caps = replace(be.dev.caps, text_short_max=1000)
    assert be.text.one_call.short(enc.model, text) == tk.encode_ordinary(text)
    assert be.text.one_call.short(enc.model, text[:900]) == tk.encode_ordinary(text[:900])
    assert len(calls) == 2 and counters["device.short_texts"] == before + 3


def test_a_short_text_sends_its_misses_to_the_device_when_there_are_many(monkeypatch):
    """``Encoding.encode`` of a text under the batch path's threshold: with a cold piece cache
    and ``DEVICE_MISSES`` misses or more, every miss merges in one ``merge_pieces`` call; a few
    misses merge in Python; either way the ids are tiktoken's and the cache is filled."""
    from gputok.stages import counters, dedup

    be = create(threads=2, one_call_max=0)  # (else short texts: one call)
    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    text = " ".join(e2e_docs())[:1500]
    enc.model.piece_cache.clear()
    before = counters["merge.device_pieces"]
    assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
    sent = counters["merge.device_pieces"] - before
    assert sent >= dedup.DEVICE_MISSES and be.dev.launches.get("encode_merge_short", 0) == 1
    assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)  # now from the cache
    assert counters["merge.device_pieces"] - before == sent
    few = "zqxw vbnm"  # two misses: merged in Python
    enc.model.piece_cache.clear()
    assert enc.encode_ordinary(few * 10, backend=be) == tk.encode_ordinary(few * 10)
    assert counters["merge.device_pieces"] - before == sent


def test_split_few_is_split_or_none():
    enc = gputok.get_encoding("cl100k_base")
    pre = enc.model.pretokenizer
    for text in ["", "a" * 50_000, " " * 5000 + "x", "\U0001F600" * 3000 + " ok", "a b c d e f",
                 "Ab" * 4000]:
        got = pre.split_few(text, 16)
        want = pre.split(text)
        assert got == (want if len(want) <= 16 else None), text[:10]
    assert pre.split_few(" ".join(["word"] * 40), 16) is None
    assert pre.split_few("a" * 5000 + " word" * 40, 16) is None  # many pieces after a run


def test_a_batch_of_one_big_chunk_runs_on_every_thread():
    """With chunk workers, a batch of one chunk (a blob with no safe cut point) runs its
    launches at once on every thread, not on one stream's thread."""
    import base64
    import random

    enc = gputok.get_encoding("cl100k_base")
    blob = base64.b64encode(random.Random(3).randbytes(600_000)).decode()
    be = create(threads=2)
    ids, off = be.encode(enc.model, Documents([blob]), frozenset(), frozenset())
    assert ids.tolist() == tiktoken_oracle("cl100k_base").encode_ordinary(blob)
    assert not be.dev._streams  # no stream was made


class _StreamsOnly(native.NativeDevice):
    """The native device without chunk workers: the driver's two-stream path (as on CUDA)."""

    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        self.caps = replace(self.caps, chunk_workers=0, per_doc=False)


def test_chunk_workers_match_the_streams_and_one_thread():
    """Batches of several chunks run on the chunk workers (each chunk start to end on one
    worker thread, ``solo`` launches; guided chunk sizes, ``guided_ends``); ids and offsets
    are those of the two-stream path and of one thread, with empty documents between chunks
    and a batch of one chunk (which stays on the calling thread)."""
    import threading

    from gputok.stages import counters

    enc = gputok.get_encoding("cl100k_base")
    docs = e2e_docs()
    docs = [d for i, d in enumerate(docs) for d in ((d, "", "") if i % 5 == 0 else (d,))]
    docs += ["", ""] * 50
    ran_on = []
    workers = create(threads=2, chunk_bytes=1500)
    real = workers.chunk.whole

    def spy(*a):
        ran_on.append(threading.current_thread().name)
        time.sleep(0.002)  # chunks this small end before the other worker wakes up otherwise
        return real(*a)

    workers.chunk.whole = spy
    streams = DeviceBackend(_StreamsOnly(2, poison=True), name="native", chunk_bytes=1500,
                            dedup=True)
    one = create(threads=1, chunk_bytes=1500)
    got = {}
    for name, be in (("workers", workers), ("streams", streams), ("one", one)):
        before = counters["device.chunks"]
        got[name] = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        got[name + " chunks"] = counters["device.chunks"] - before
    for name in ("streams", "one"):
        np.testing.assert_array_equal(got["workers"][0], got[name][0])
        np.testing.assert_array_equal(got["workers"][1], got[name][1])
    assert got["streams chunks"] == got["one chunks"] and got["workers chunks"] == len(ran_on)
    assert len(ran_on) > 10 and all(n.startswith("gputok-chunk") for n in ran_on)
    assert len(set(ran_on)) == 2  # both workers took chunks
    assert not workers.fallbacks and not streams.fallbacks
    tk = tiktoken_oracle("cl100k_base")
    ids, off = got["workers"]
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
        [tk.encode_ordinary(d) for d in docs]
    ran_on.clear()  # one chunk: the calling thread, no hand-off
    ids, off = workers.encode(enc.model, Documents(docs[:3]), frozenset(), frozenset())
    assert ran_on == [] and ids.tolist() == [t for d in docs[:3] for t in tk.encode_ordinary(d)]


def test_chunk_cap_grows_with_the_chunk_workers():
    """``chunk_bytes_for``: 128 KB a worker, from 256 KB to 1 MB; ``create`` takes it for its
    device's workers unless told."""
    assert [native.chunk_bytes_for(w) for w in (0, 1, 2, 3, 8, 16)] == \
        [1 << 18, 1 << 18, 1 << 18, 3 << 17, 1 << 20, 1 << 20]
    assert create(threads=2).chunk_bytes == 1 << 18
    assert create(threads=1).chunk_bytes == 1 << 18  # (no workers: one stream)
    assert create(threads=12).chunk_bytes == 1 << 20
    assert create(threads=2, chunk_bytes=5000).chunk_bytes == 5000


def test_chunk_workers_chunks_are_guided():
    """The workers' chunks (``guided_ends``): each about the bytes left over the workers
    (``GUIDED_SHARE``), at most the budget, at least ``GUIDED_MIN``, cut at the nearest document
    boundary that keeps it within the budget: they shrink toward the end of the batch, and every
    document is in exactly one chunk."""
    guided = workers.guided_ends
    assert workers.GUIDED_SHARE == 1 and workers.GUIDED_MIN == 128 << 10
    off = np.cumsum([0] + [1000] * 4000)  # 4 MB of 1 KB documents, budget 1 MB, two workers
    ends = guided(off, 0, 1 << 20, 2)
    sizes = np.diff(off[np.concatenate([[0], ends])])
    assert ends[-1] == 4000 and (np.diff(ends) > 0).all()
    assert sizes.max() <= 1 << 20 and sizes[0] == 1_049_000 - 1000  # the budget's last boundary
    assert (np.diff(sizes[:-1]) <= 0).all()  # never growing (the last one takes what is left)
    assert (sizes[:-1] >= (128 << 10) - 1000).all()  # GUIDED_MIN at the nearest boundary
    left = 4_000_000 - int(off[ends[2]])
    assert abs(int(sizes[3]) - left // 2) <= 500  # the bytes left over the workers
    assert sizes.sum() == 4_000_000
    assert guided(off, 3900, 1 << 20, 2).tolist() == [4000]  # 100 KB left: one chunk
    assert guided(off, 0, 1 << 20, 16)[0] == 250  # 16 workers: 4 MB / 16 from the start
    big = np.array([0, 900_000, 1_900_000, 1_950_000])  # documents near the budget
    assert guided(big, 0, 1 << 20, 2).tolist() == [1, 2, 3]


def test_heavy_kernels_of_a_one_chunk_batch_are_cut_for_every_thread():
    """A batch of one chunk launches each kernel over all threads: the heavy ones (SPLIT_MIN)
    in blocks small enough for four per thread, the cheap ones in BLOCK-element blocks; a solo
    worker keeps BLOCK; the ids stay tiktoken's. (Past ``caps.inline_max_bytes``: shorter chunks
    run as one call, test below.)"""
    import base64
    import random

    be = create(threads=2)
    dev = be.dev
    dev.caps = replace(dev.caps, inline_max_bytes=0)  # no lone chunk in one call
    assert dev.launch_shape("encode_merge_short", 2500) == ((8,), (313,))  # 4 a thread
    assert dev.launch_shape("encode_merge_short", 1000) == ((1,), (native.HOST_BLOCK,))  # < 4 blocks
    assert dev.launch_shape("encode_pretok_classify", 10_000) == ((1,), (native.HOST_BLOCK,))
    assert dev.launch_shape("encode_merge_short", 10 * native.HOST_BLOCK) == ((10,), (native.HOST_BLOCK,))
    with dev.solo():
        assert dev.launch_shape("encode_merge_short", 2500) == ((1,), (native.HOST_BLOCK,))
    text = base64.b64encode(random.Random(5).randbytes(7500)).decode()  # ~2,000 entries
    shapes = {}
    real = dev.launch

    def spy(name, grid, block, args):
        shapes[name] = (tuple(grid), tuple(block))
        return real(name, grid, block, args)

    dev.launch = spy
    enc = gputok.get_encoding("cl100k_base")
    ids, _ = be.encode(enc.model, Documents([text]), frozenset(), frozenset())
    assert ids.tolist() == tiktoken_oracle("cl100k_base").encode_ordinary(text)
    grid, block = shapes["encode_merge_short"]
    assert grid[0] >= 4 and block[0] < native.HOST_BLOCK
    assert shapes["encode_pretok_classify"][1] == (native.HOST_BLOCK,)


@pytest.mark.parametrize("layout", ["short-text", "chunk-workers", "one-thread"])
def test_a_chunk_runs_as_one_call_where_it_can(layout, monkeypatch):
    """``NativeDevice.chunk_inline`` (kernels/host_chunk.h): a chunk cut on the device runs its
    whole sequence in two calls - a batch of one short chunk, each chunk of a chunk workers'
    batch, every chunk of a one-thread device - with the launches' ids (specials, marks,
    duplicates through the dedup set, long pieces, u16 and u32 ids, o200k and cl pre-tokenizers,
    poisoned workspace); a normaliser check (Qwen2) or a profile keeps the launches."""
    threads, chunk = {"short-text": (2, None), "chunk-workers": (2, 5000),
                      "one-thread": (1, 5000)}[layout]
    be = create(threads=threads, **({"chunk_bytes": chunk} if chunk else {}))
    be.dev.poison = True
    calls = []
    real = be.dev.chunk_inline
    be.dev.chunk_inline = lambda *a: (calls.append(a[1].n), real(*a))[1]
    docs = e2e_docs()
    if layout == "short-text":
        docs = [" ".join(docs)[:12_000]]
    docs = docs + ["x" + " " * 700 + "y", "<|endoftext|> hello <|endoftext|>"]
    for name in ("cl100k_base", "o200k_base", "r50k_base"):
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        calls.clear()
        ids, off = be.encode(enc.model, Documents(docs), frozenset({"<|endoftext|>"}),
                             frozenset())
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
            tk.encode_batch(docs, allowed_special={"<|endoftext|>"}), name
        assert calls and sum(calls) == len("".join(docs).encode())  # every chunk, one call each
    assert be.dev.launches.get("encode_merge_long") and be.dev.launches.get("encode_dup_counts")
    qw, hf = hf_encoding("qwen2"), hf_oracle("qwen2")
    calls.clear()
    sub = [d for d in docs if "<|" not in d][:5]  # (Qwen2 splits its added tokens always)
    ids, off = be.encode(qw.model, Documents(sub), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(sub))] == \
        [e.ids for e in hf.encode_batch(sub, add_special_tokens=False)]
    assert not calls  # its normaliser's check runs between the launches


def test_a_long_single_text_gives_its_idle_workspace_back_before_the_list(monkeypatch):
    """``encode_list`` (the single-text API on the native device): after a text of TRIM_CHARS
    characters or more the idle workspace is freed before the ids become a list (a 1 MB blob's
    workspace would sit beside its list); a shorter text keeps it for the next call."""
    import base64
    import random

    be = create(threads=2)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    pool = be.dev.pool
    sizes = []
    for n in (onetext.TRIM_CHARS // 8, onetext.TRIM_CHARS):
        text = base64.b64encode(random.Random(n).randbytes(n))[:n].decode()
        trimmed = []
        monkeypatch.setattr(be.dev, "trim_idle", lambda: (trimmed.append(pool.idle_bytes),
                                                           native.NativeDevice.trim_idle(be.dev)))
        assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
        sizes.append((n, trimmed))
        assert not trimmed or pool.idle_bytes < trimmed[0]
    (short, t_short), (long_, t_long) = sizes
    assert t_short == [] and len(t_long) == 1 and t_long[0] > 0  # there was idle workspace


def test_long_piece_workspace_only_for_chunks_with_long_pieces():
    """On host memory the merge stage reads the entry starts: a chunk without a piece of
    LONG_PIECE bytes allocates no long-piece workspace and launches no encode_merge_long; a
    chunk with one does, and the ids are tiktoken's either way."""
    from gputok.stages.merge import LONG_PIECE

    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    split = enc.model.pretokenizer.split
    short = [d for d in e2e_docs() if all(len(p.encode()) < LONG_PIECE for p in split(d))]
    assert len(short) > 20
    for docs, launched in ((short, False), (short + ["x" + "a" * (2 * LONG_PIECE)], True)):
        be = create(threads=1)
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
            [tk.encode_ordinary(d) for d in docs]
        assert ("encode_merge_long" in be.dev.launches) == launched


def test_a_worker_out_of_memory_retries_with_smaller_chunks():
    """A chunk worker's MemoryError reaches the driver, which waits for the other chunks, keeps
    the finished prefix of the batch and runs the rest with half the budget: ids unchanged."""
    enc = gputok.get_encoding("cl100k_base")
    docs = [d.encode() for d in e2e_docs() * 4]  # (bytes: packed as one batch first)
    want = create(threads=1, chunk_bytes=6000).encode(enc.model, Documents(docs),
                                                             frozenset(), frozenset())
    # (half of 6000 is still a device chunk)
    be = create(threads=2, chunk_bytes=6000, min_chunk=1000)
    real, calls = be.dev.chunk_inline, []

    def fails_once(tables, hc, *rest):
        calls.append(hc.n)
        if len(calls) == 4:
            raise MemoryError("injected")
        return real(tables, hc, *rest)

    be.dev.chunk_inline = fails_once  # (a worker's chunk is one call)
    ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    np.testing.assert_array_equal(ids, want[0])
    np.testing.assert_array_equal(off, want[1])
    # chunks queued before the error was seen ran at full size; the retry at half
    assert calls[-1] <= 3000 and not be.fallbacks
    # str documents packed chunk by chunk: the batch starts over on the batch path (which
    # halves its chunks if that runs out of memory too), same ids
    calls.clear()
    ids, off = be.encode(enc.model, Documents([d.decode() for d in docs]), frozenset(),
                         frozenset())
    np.testing.assert_array_equal(ids, want[0])
    np.testing.assert_array_equal(off, want[1])
    assert len(calls) > 4 and not be.fallbacks


# ---------------------------------------------------------------- 3. the module

def test_arguments_are_checked_before_a_launch():
    dev = native.NativeDevice(1)
    d = np.zeros(4, np.uint32)
    ok = [d, np.zeros(4, np.uint32), np.int64(2), np.zeros(4, np.int64)]
    dev.launch("encode_doc_offsets", (1,), (32,), ok)  # doc_entry, out_off, n_docs1, out_doc
    bad = [
        ([d, d, 2, np.zeros(4, np.int64)], "numpy int64 scalar"),
        ([d, d, np.int32(2), np.zeros(4, np.int64)], "numpy int64 scalar"),
        ([d.astype(np.int32), d, np.int64(2), np.zeros(4, np.int64)], "array of uint32"),
        ([d, d, np.int64(2), np.zeros(4, np.int64)[::2]], "contiguous"),
        ([d, d, np.int64(2)], "3 arguments for 4"),
    ]
    ro = np.zeros(4, np.int64)
    ro.flags.writeable = False
    bad.append(([d, d, np.int64(2), ro], "read-only"))
    # an array the device already knows (it made it, or a launch checked it) meeting a parameter
    # of another dtype, or a writable parameter after it was made read-only
    known = dev.empty(4, np.uint32)
    bad.append(([d, d, np.int64(2), known], "array of int64"))
    out = dev.zeros(4, np.int64)
    dev.launch("encode_doc_offsets", (1,), (32,), [d, d, np.int64(2), out])
    out.flags.writeable = False
    bad.append(([d, d, np.int64(2), out], "read-only"))
    for args, msg in bad:
        with pytest.raises(TypeError, match=msg):
            dev.launch("encode_doc_offsets", (1,), (32,), args)
    with pytest.raises(KeyError, match="encode_scan_apply_add"):
        dev.launch("encode_scan_apply_add", (1,), (32,), ok)  # block scans have no host form


def test_the_library_is_cached_by_sources_compiler_and_flags(monkeypatch, tmp_path):
    path, cxx, units, fl = native_build.library_path()
    assert path.exists() and set(units) == {"encode_kernels.cpp", "host_runtime.cpp",
                                            "host_jsonl.cpp", "host_train.cpp", "cpu_encode.cpp",
                                            "host_regex.cpp"}
    before = path.stat().st_mtime_ns
    assert native_build.build() == path and path.stat().st_mtime_ns == before  # no rebuild
    # found by the sources' stamp without expanding the units; a touched file, a new stamp
    stamp = native_build._stamp(cxx, fl)
    key_file = native_build.cache_root() / f"{native_build.LIB_NAME}-{stamp}.key"
    assert key_file.read_text() == path.name[len(native_build.LIB_NAME) + 1:-3]
    monkeypatch.setattr(native_build, "translation_units", lambda: 1 / 0)
    assert native_build.build() == path  # (the units were not needed)
    assert native_build.build(compile=False) == path
    monkeypatch.undo()
    src = native_build.kernels.kernel_dir() / "encode_emit.cu"
    st = src.stat()
    try:
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert native_build._stamp(cxx, fl) != stamp
        assert native_build.build() == path  # the same text: the same library, found again
    finally:
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    monkeypatch.setenv("GPUTOK_NATIVE_FLAGS", "-DGPUTOK_TEST_FLAG=1")
    assert native_build.library_path()[0] != path
    changed = dict(units, **{"encode_kernels.cpp": units["encode_kernels.cpp"] + "\n"})
    assert native_build.library_key(cxx, changed, fl) != native_build.library_key(cxx, units, fl)
    # the kernels' unit holds the exact sources every device gets (constants injected; a header
    # the files share expanded once), every kernel in its file's launch table
    from gputok.backends import kernels

    text = units["encode_kernels.cpp"]
    constants = kernels.defines_block(tuple(kernels.kernel_constants().items()))
    assert native_build._unit_text(constants + kernels.sources(native_build.HOST_FILES)) in text
    for f in native_build.HOST_FILES:
        assert f"gputok_native_table_{f.rsplit('.', 1)[0]}" in text
        for k in kernels.kernel_names(kernels.source(f)):
            assert f"ENC_HOST_KERNEL({k})" in text


def _fake_compiler(tmp_path, body: str) -> str:
    exe = tmp_path / "fake-c++"
    exe.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fake c++ 1.0'; exit 0; fi\n"
                   + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_without_a_compiler_auto_takes_numpy(monkeypatch, tmp_path):
    from gputok import backends

    monkeypatch.setenv("GPUTOK_CXX", str(tmp_path / "no-such-compiler"))
    ok, why = native.available()
    assert not ok and "GPUTOK_CXX" in why and "no-such-compiler" in why
    assert backends.availability()["native"] == (False, why)
    monkeypatch.setattr(backends, "_instances", {})
    with pytest.raises(RuntimeError, match="backend 'native' is not available"):
        backends.get_backend("native")
    from gputok.stages import counters

    counters.clear()
    assert backends.get_backend("auto").name == "numpy"
    assert backends.auto_report["skipped"]["native"] == why
    assert counters["backend.auto.skipped.native"] == 1
    assert backends.availability()["numpy"][1].endswith("used by backend='auto'")


def test_a_failing_compiler_is_a_visible_fallback(monkeypatch, tmp_path):
    from gputok import backends
    from gputok.stages import counters

    monkeypatch.setenv("GPUTOK_CXX", _fake_compiler(tmp_path, "echo 'error: boom' >&2\nexit 1\n"))
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path / "cache"))
    with pytest.raises(native_build.NativeBuildError, match="(?s)boom.*GPUTOK_CXX"):
        native_build.build()
    monkeypatch.setattr(backends, "_instances", {})
    counters.clear()
    with pytest.warns(FallbackWarning, match="native backend failed to start"):
        assert backends.get_backend("auto").name == "numpy"
    assert counters["backend.auto.failed.native"] == 1
    assert "boom" in backends.auto_report["skipped"]["native"]


def test_auto_takes_native_when_there_is_no_gpu(monkeypatch):
    from gputok import backends

    monkeypatch.setattr(backends, "_instances", {})
    if backends.availability()["cuda"][0] or backends.availability()["metal"][0]:
        pytest.skip("a GPU backend is available here: auto takes it")
    assert backends.get_backend("auto").name == "native"
    assert backends.auto_report["backend"] == "native"
    assert set(backends.auto_report["skipped"]) == {"cuda", "metal"}


def _encode_in_child(queue):
    enc = gputok.get_encoding("cl100k_base")
    be = create(threads=2, chunk_bytes=2000)  # streams made again in this process
    ids, off = be.encode(enc.model, Documents(EDGE * 3), frozenset(), frozenset())
    queue.put((ids.tolist(), off.tolist()))


def test_a_forked_child_gets_its_own_workers():
    enc = gputok.get_encoding("cl100k_base")
    be = create(threads=2, chunk_bytes=2000)
    ids, off = be.encode(enc.model, Documents(EDGE * 3), frozenset(), frozenset())  # streams up
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_encode_in_child, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0 and got == (ids.tolist(), off.tolist())


def test_threads_option_and_environment(monkeypatch):
    monkeypatch.setenv("GPUTOK_NUM_THREADS", "3")
    assert native.threads_default() == 3 and native.NativeDevice().threads == 3
    monkeypatch.setenv("GPUTOK_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="GPUTOK_NUM_THREADS"):
        native.threads_default()
    monkeypatch.delenv("GPUTOK_NUM_THREADS")
    assert native.threads_default() == len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="threads must be >= 1"):
        native.NativeDevice(0)


# ---------------------------------------------------------------- giant documents

def _giant_line() -> str:
    return " ".join(d.replace("\n", " ") for d in testdata.corpus("prose", max_mb=0.6)
                    + testdata.corpus("multilingual", max_mb=0.2))


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base", "llama3", "qwen2"])
def test_a_giant_line_runs_as_ordinary_chunks(name):
    from gputok.stages import counters

    line = _giant_line()
    if name in ("llama3", "qwen2"):
        enc, hf = hf_encoding(name), hf_oracle(name)
        sp = sorted(enc.special_tokens_set)[0]
        docs = [line, "short", line[:200_000] + sp + " " + line[200_000:400_000], ""]
        want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    else:
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        sp = sorted(enc.special_tokens_set)[0]
        docs = [line, "short", line[:200_000] + sp + " " + line[200_000:400_000], ""]
        want = tk.encode_batch(docs, allowed_special={sp}, num_threads=2)
    be = create(threads=2, chunk_bytes=40_000)
    before = counters["device.chunks"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), frozenset([sp]), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
    assert counters["device.chunks"] - before >= len(line.encode()) // 40_000


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base", "llama3", "qwen2"])
def test_a_blob_without_spaces_is_cut_where_letters_meet_digits(name):
    """base64, hex and digit-letter runs have no space: they are cut where an ASCII letter
    meets an ASCII digit (``find_safe_cut``), run as several chunks over both workers, and give
    the oracle's ids (every pattern family with a scanner); a blob with no such point (letters
    and "+/" only) stays one chunk, and the same ids."""
    import base64
    import random

    from gputok.stages import counters

    rng = random.Random(11)
    blob = base64.b64encode(rng.randbytes(300_000)).decode()
    hexes = rng.randbytes(100_000).hex()
    mixed = "".join(rng.choice(["ab", "7", "X9", "0000", "q", "Zz1", "'s", "\u00e9", "5\u0301"])
                    for _ in range(60_000))
    flat = "".join(rng.choice("abcXYZ+/") for _ in range(300_000))
    docs = [blob, "short", hexes, mixed, flat]
    if name in ("llama3", "qwen2"):
        enc, hf = hf_encoding(name), hf_oracle(name)
        want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    else:
        enc = gputok.get_encoding(name)
        want = tiktoken_oracle(name).encode_ordinary_batch(docs, num_threads=2)
    be = create(threads=2, chunk_bytes=40_000)
    for doc, ids in zip(docs, want):
        before = counters["device.chunks"]
        got, off = be.encode(enc.model, Documents([doc]), frozenset(), frozenset())
        assert got.tolist() == ids
        chunks = counters["device.chunks"] - before
        assert chunks == 1 if doc in ("short", flat) else chunks >= len(doc) // 40_000, chunks


def test_cut_points_are_safe_and_outside_token_spans():
    from gputok.backends.hostplan import cut_long_documents

    text = ("word " * 3000 + "é" * 500 + " x").encode()
    buf = text + b"a" * 20_000 + text
    off = np.array([0, len(text), len(text) + 20_000, len(buf)], np.int64)
    spans = (np.array([1000, 6000], np.int64), np.array([1012, 6400], np.int64),
             np.array([1, 2], np.uint32))
    sub, keep = cut_long_documents(buf, off, spans, 1000)
    assert sub[keep].tolist() == off.tolist() and (np.diff(sub) > 0).all()
    cuts = sorted(set(sub.tolist()) - set(off.tolist()))
    for p in cuts:
        assert buf[p - 1:p + 2].decode().isascii() and buf[p:p + 1] == b" "
        assert buf[p - 1:p].isalpha() and buf[p + 1:p + 2].isalpha()
        assert not any(a <= p < b for a, b in zip(*spans[:2]))
    assert not [p for p in cuts if off[1] < p < off[2]]  # "a" * 20000: no safe point, kept whole
    parts = np.diff(sub)
    assert parts.max() <= 20_000 and (parts[:5] <= 1000).all()
    assert cut_long_documents(buf, off, spans, 10 ** 6) == (off, None)


def test_safe_cut_search_matches_its_definition():
    """find_safe_cut against the plain definition (a regex search), on random bytes rich in
    letters, digits and spaces and on the long runs where a scan must not be slow or wrong."""
    import random
    import re

    from gputok.backends.hostplan import find_safe_cut

    rule = re.compile(rb"(?=[A-Za-z] [A-Za-z]|[A-Za-z][0-9].|[0-9][A-Za-z].)", re.DOTALL)
    rng = random.Random(7)
    for k in range(600):
        n = rng.choice([0, 1, 2, 3, 5, 40, 5000, 9000])
        alphabet = b"ab  Z\xc3\xa9.\n" if k % 2 else b"ab  Z\xc3\xa9.\n097+/"
        buf = bytes(rng.choice(alphabet) for _ in range(n))
        lo, hi = sorted(rng.randint(0, n) for _ in range(2))
        m = rule.search(buf, lo, hi)
        assert find_safe_cut(np.frombuffer(buf, np.uint8), lo, hi) == (
            m.start() + 1 if m else -1), (buf, lo, hi)
    for run in (b"a" * 3_000_000, b" " * 3_000_000, "\U0001F600".encode() * 700_000,
                b"7" * 3_000_000, b"+/" * 1_500_000):
        buf = run + b"x y" + run
        data = np.frombuffer(buf, np.uint8)
        at = 10
        for _ in range(3):  # the run's own cuts (none), then those around "x y"
            m = rule.search(buf, at)
            want = m.start() + 1 if m else -1
            assert find_safe_cut(data, at, len(buf)) == want
            if want < 0:
                break
            assert len(run) <= want <= len(run) + 3
            at = want


def test_no_cuts_for_pre_tokenizers_without_known_safe_points():
    enc = gputok.get_encoding("cl100k_base")
    line = _giant_line()[:300_000]
    be = backend("1-thread", pretok="split", chunk_bytes=40_000)  # host split: not cut
    with pytest.warns(FallbackWarning, match="pre-tokenizer split"):
        ids, off = be.encode(enc.model, Documents([line]), frozenset(), frozenset())
    assert ids.tolist() == tiktoken_oracle("cl100k_base").encode_ordinary(line)
    assert be.dev.launches["encode_merge_short"] == 1  # one document, one chunk


def test_a_library_not_built_yet_is_not_compiled_when_asked_not_to(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    monkeypatch.setattr(native_build, "_compile", lambda *a: pytest.fail("compiled"))
    assert native_build.build(compile=False) is None
    assert native.library(compile=False) is None


@pytest.mark.skipif(not hasattr(__import__("mmap"), "PROT_READ"), reason="no mmap protection")
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_short_pieces_ending_at_an_unreadable_page_are_read_within_theirs(name):
    """The native device reads a piece of under 8 bytes as one 8-byte word only where that does
    not cross into the next 4 KB page (kernels/dialect_host.h, enc_word_at): documents ending
    just before a page that cannot be read, with short pieces of every length at the end, encode
    as tiktoken's with no fault (whole-token lookups, dedup and merges all compare such words)."""
    import ctypes
    import mmap

    from gputok.stages.pack import Packed

    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    be = create(threads=1)
    for tail in ["a", " é", "end", "zq!", " 12", "xyzw", " qwxz", "\u4e2d\u6587", "qqqqqqq"]:
        m = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        view = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(view)
        head = "word " * 20 + tail  # a document ending exactly at the page's end, after filler
        raw = head.encode()
        filler = b" " * (page - len(raw))
        m[:page] = filler + raw
        assert libc.mprotect(base + page, page, 0) == 0  # PROT_NONE
        try:
            ids, off = be.encode(enc.model, Documents(Packed(m, [0, len(filler), page])),
                                 frozenset(), frozenset())
            got = [ids[off[i]:off[i + 1]].tolist() for i in range(2)]
        finally:
            assert libc.mprotect(base + page, page, mmap.PROT_READ | mmap.PROT_WRITE) == 0
        assert got == [tk.encode_ordinary(filler.decode()), tk.encode_ordinary(head)], tail
        del got, ids, off, view
        m.close()


@pytest.mark.parametrize("packer", ["native", "python"])
def test_str_batches_are_packed_chunk_by_chunk_with_the_same_ids(packer, monkeypatch):
    """A batch of str documents over several chunks is packed one chunk at a time while the
    workers run the chunks before (``StreamedBatch.encode``), with the ids of the
    whole-batch path: ASCII and non-ASCII documents, empty ones, lone surrogates (repaired the
    tiktoken way), by the native str packer (``pack.StrLayout``) and by Python's encoder where
    there is none. Batches that need the whole batch's bytes take the batch path."""
    from gputok.stages import counters
    from gputok.stages.pack import utf8_of

    native.library()  # (loads the library: the native packer where this CPython's layout fits)

    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    be = create(threads=2, chunk_bytes=4000)
    if packer == "python":  # (the native backend as it is where the packer cannot work)
        monkeypatch.setattr(be, "tools", replace(be.tools, packer=None))
    else:
        assert be.tools.packer is not None
    docs = e2e_docs()[:40] + ["", "caf\u00e9 \u4e2d\u6587 \U0001F600", "\ud83d lone", ""] * 3
    docs += ["plain ascii text " * 30] * 5

    def run(texts, allowed=frozenset(), disallowed=frozenset()):
        before = counters["device.streamed_batches"]
        ids, off = be.encode(enc.model, Documents(texts), allowed, disallowed)
        return ([ids[off[i]:off[i + 1]].tolist() for i in range(len(texts))],
                counters["device.streamed_batches"] - before)

    got, streamed = run(docs)
    assert streamed == 1 and got == tk.encode_ordinary_batch(docs, num_threads=2)
    # special tokens refused (none there): chunk by chunk too; one there: the batch path's
    # error, naming the same document, wherever its chunk is
    eot = frozenset(["<|endoftext|>"])
    assert run(docs, disallowed=eot) == (got, 1)
    for at in (0, 7, len(docs) - 2, len(docs)):
        bad = docs[:at] + ["a <|endoftext|> b"] + docs[at:]
        with pytest.raises(ValueError, match=f"^document {at}: .*endoftext"):
            run(bad, disallowed=eot)
        with pytest.raises(ValueError) as whole:
            be.encode(enc.model, Documents([utf8_of(d) for d in bad]), frozenset(), eot)
        assert str(whole.value).startswith(f"document {at}: ")
    # the same documents as bytes, with a special token to find, or one document longer than a
    # chunk: the whole batch first, the same ids
    assert run([utf8_of(d) for d in docs]) == (got, 0)
    special = docs + ["a <|endoftext|> b"]
    expect = tk.encode_batch(special, allowed_special={"<|endoftext|>"}, num_threads=2)
    assert run(special, allowed=frozenset(["<|endoftext|>"])) == (expect, 0)
    long = docs + ["word " * 2000]
    assert run(long) == (tk.encode_ordinary_batch(long, num_threads=2), 0)
    # a document within the budget in characters and over it in bytes is a chunk alone
    wide = docs[:20] + ["\u4e2d\u6587" * 750] + docs[20:]
    assert run(wide) == (tk.encode_ordinary_batch(wide, num_threads=2), 1)
    # the chunks as they are encoded: every document once, in order, each chunk within the
    # budget unless it is one document, sizes guided (shrinking toward the end)
    chars = [len(d) for d in wide]
    pieces = list(streamed_batch.streamed_pieces(wide, chars, sum(chars), 4000, 2))
    assert [p[0] for p in pieces] == [0] + [p[1] for p in pieces[:-1]]
    assert pieces[-1][1] == len(wide)
    for d0, d1, data, off in pieces:
        assert data == b"".join(utf8_of(d) for d in wide[d0:d1])
        assert off.tolist() == np.cumsum([0] + [len(utf8_of(d)) for d in wide[d0:d1]]).tolist()
        assert len(data) <= 4000 or d1 - d0 == 1
    assert any(len(p[2]) > 4000 for p in pieces)  # (the wide one)
    many = ["x" * 999 + "\u00e9"] * 4000  # 4 MB in 1 KB documents, budget 1 MB, two workers
    sizes = [len(p[2]) for p in streamed_batch.streamed_pieces(many, [1000] * 4000, 4_000_000,
                                                               1 << 20, 2)]
    assert sum(sizes) == 4_004_000 and max(sizes) <= 1 << 20
    assert sizes[0] > 1_000_000 and sizes[3] < 600_000 and sizes[-2] < 200_000


@pytest.mark.parametrize("slow", [None, 0, 2])
def test_streamed_chunks_take_their_places_in_order_whoever_finishes_first(slow, monkeypatch):
    """A streamed batch's chunks put their ids into the batch's output as they finish
    (``emit.Placement``): a big chunk that knows its id count while every earlier chunk has
    its place emits there, any other is copied in by whichever thread places the chunk before
    it. Chunk ``slow`` held back, so that later chunks finish first and wait; the output too
    small for the ids (the chunks from there on joined at the end): the same ids each time."""
    import threading

    from gputok.stages import counters
    from gputok.stages.emit import Placement

    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    be = create(threads=2, chunk_bytes=100_000)
    docs = e2e_docs()  # ~17 KB in 77 documents: 1.2 MB in documents of ~3 KB
    docs = ["\n".join(docs[i % 77:] + docs[:i % 77])[:3000] for i in range(400)]
    want = tk.encode_ordinary_batch(docs, num_threads=2)
    in_place, copied = [], []
    real_reserve, real_place, real_whole = Placement.reserve, Placement.place, be.chunk.whole
    release = threading.Event()

    def reserve(self, k, count):
        got = real_reserve(self, k, count)
        (in_place if got is not None else copied).append(k)
        return got

    def held(hc) -> bool:
        return slow is not None and len(starts) > slow and hc.d0 == starts[slow]

    def whole(plan, hc, out_dtype, out_for=None):
        if held(hc):
            release.wait(10)  # until a later chunk has finished
        got = real_whole(plan, hc, out_dtype, out_for)
        if not held(hc) and slow is not None and len(starts) > slow and hc.d0 > starts[slow]:
            release.set()
        return got

    monkeypatch.setattr(Placement, "reserve", reserve)
    monkeypatch.setattr(be.chunk, "whole", whole)
    starts = []
    real_pieces = be.streamed.native_pieces

    def pieces(*a):
        for got in real_pieces(*a):
            starts.append(got[0])
            yield got

    monkeypatch.setattr(be.streamed, "native_pieces", pieces)

    def run():
        before = counters["device.streamed_batches"]
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        assert counters["device.streamed_batches"] - before == 1
        return [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]

    assert run() == want
    assert len(starts) >= 8 and in_place  # (chunks over EXACT_OUT_BYTES: some emitted in place)
    if slow is not None:
        assert copied  # (the slow chunk's followers found no place and were copied in later)
    # an output too small: placed as far as it goes, the rest joined
    real_placement = be.streamed.placement
    monkeypatch.setattr(be.streamed, "placement", lambda model, nbytes, chars: Placement(
        real_placement(model, nbytes, chars).out[:50_000]))
    in_place.clear()
    release.clear()
    assert run() == want


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_str_batches_chunk_by_chunk_fuzzed(seed):
    """Random str batches - documents of every size from empty to a chunk's budget in
    characters (over it in bytes), every kind of character, surrogates, special-token text -
    through the chunk-by-chunk path with small budgets (many guided chunks) on both encodings:
    ids, offsets and the refused token's document as tiktoken and the batch path give them."""
    import random

    from gputok.stages import counters
    from gputok.stages.pack import utf8_of

    native.library()
    rng = random.Random(seed)
    pool = e2e_docs()
    alphabet = ["a", " ", "\n", "\u00e9", "\u4e2d", "\U0001F600", "\ud800", "'s", "123", "<|"]

    def doc(budget):
        r = rng.random()
        if r < 0.1:
            return ""
        if r < 0.6:
            return rng.choice(pool)[: rng.randint(0, budget)]
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, budget)))[:budget]

    for name in ("cl100k_base", "o200k_base"):
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        budget = rng.choice([1500, 4000, 9000])
        be = create(threads=2, chunk_bytes=budget)
        docs = [doc(budget) for _ in range(rng.randint(20, 120))]
        before = counters["device.streamed_batches"]
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
        assert got == tk.encode_ordinary_batch(docs, num_threads=2)
        at = rng.randrange(len(docs))
        bad = docs[:at] + ["x <|endoftext|> y"] + docs[at:]
        with pytest.raises(ValueError) as streamed:
            be.encode(enc.model, Documents(bad), frozenset(), frozenset(["<|endoftext|>"]))
        with pytest.raises(ValueError) as whole:
            be.encode(enc.model, Documents([utf8_of(d) for d in bad]), frozenset(),
                      frozenset(["<|endoftext|>"]))
        assert str(streamed.value) == str(whole.value)
        assert counters["device.streamed_batches"] - before >= 1


def test_str_layout_packs_what_python_encodes():
    """``pack.StrLayout`` (kernels/host_pack.h) reads each str's characters where CPython keeps
    them (the public C API): the UTF-8 of every kind of str (ASCII, Latin-1, UCS-2, UCS-4, empty, long) is
    exactly ``utf8_of``'s, in any slice of the batch; a lone or paired surrogate is encoded by
    Python (tiktoken's repair) and packed as bytes; str subclasses and other objects are not
    taken (None: the caller encodes)."""
    import random

    from gputok.stages import pack

    native.library()
    layout = native.library().packer
    assert layout is not None and layout.usable
    rng = random.Random(11)
    ranges = [(0x20, 0x7F), (0x80, 0xFF), (0x100, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF),
              (0x10000, 0x10FFFF)]

    def rand_text():
        parts = []
        for _ in range(rng.randint(0, 6)):
            lo, hi = rng.choice(ranges)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(0, 40))))
        return "".join(parts)

    docs = ["", "ascii only", "caf\u00e9 \u00ff", "\u0100\u4e2d\u6587", "\U0001F600 x",
            "a\ud83d\ude00 \ud800", "\udfff", "x" * 100_000, "\u00e9" * 70_000,
            "\u4e2d" * 50_000 + "\U0001F600"] + [rand_text() for _ in range(400)]
    units = layout.units(docs)
    want = [pack.utf8_of(d) for d in docs]
    assert units[3].tolist() == [len(w) for w in want]
    for d0, d1 in ((0, len(docs)), (3, 9), (5, 6), (7, 7), (100, 410)):
        out = np.empty(sum(len(w) for w in want[d0:d1]) + 1, np.uint8)
        n = layout.pack(units, d0, d1, out)
        assert out[:n].tobytes() == b"".join(want[d0:d1])

    class Sub(str):
        pass

    assert layout.units(["a", Sub("b")]) is None and layout.units(["a", b"b"]) is None
    assert layout.units([]) is None
    raw = [w for w in want if w] + [b""]  # bytes documents: their own bytes, in place
    got = layout.units(raw)
    assert got[3].tolist() == [len(w) for w in raw] and not got[1].any()
    for threads in (1, 3):  # (in parts of 4 MB or more: one part here, and several below)
        out = np.empty(sum(map(len, raw)) + 1, np.uint8)
        assert layout.pack(got, 0, len(raw), out, threads) == len(out) - 1
        assert out[:-1].tobytes() == b"".join(raw)
    big = ["\u00e9" * (1 << 20), "x" * (3 << 20), "\u4e2d" * (2 << 20), "y"] * 3
    units = layout.units(big)
    out = np.empty(int(units[3].sum()), np.uint8)
    assert layout.pack(units, 0, len(big), out, threads=4) == len(out)
    assert out.tobytes() == "".join(big).encode()



def test_id_lists_are_tolist_with_shared_ints():
    """``lists.id_list`` (kernels/host_lists.h): the list ``tolist`` gives, for uint16 and
    uint32 ids of any length (below and above ``NATIVE_MIN``, both ends of each range, ids
    recurring near and far apart); ids that recur share one int object, and every reference the
    list holds is its own (deleting the list gives each object back its count)."""
    import sys

    from gputok.stages import lists

    builder = native.library().lister
    assert builder is not None and create(threads=1).tools.lister is builder
    rng = np.random.default_rng(5)
    for dtype, top in ((np.uint16, 2**16 - 1), (np.uint32, 2**32 - 1)):
        for n in (0, 1, lists.NATIVE_MIN - 1, lists.NATIVE_MIN, 1000, 300_000):
            ids = rng.integers(0, 200_000 if dtype is np.uint32 else top, n, dtype=np.int64)
            ids[: n // 3] = rng.integers(0, 50, n // 3)  # recurring within a few ids
            ids[n // 3: n // 3 + 4] = [0, top, top, 1 << 16] if n >= 8 else ids[n // 3:n // 3 + 4]
            ids = ids.astype(dtype)
            got = lists.id_list(ids, builder)
            assert type(got) is list and got == ids.tolist()
            assert all(type(x) is int for x in got[:5000])
    big = np.full(100_000, 70_000, np.uint32)
    big[::2] = 123_456
    got = lists.id_list(big, builder)
    assert got[0] is got[2] and got[1] is got[3] and len({id(x) for x in got}) == 2
    x = got[0]
    before = sys.getrefcount(x)
    del got
    assert sys.getrefcount(x) == before - 50_000
    # views, other dtypes and strided arrays: tolist's list (int64 ids, every other id)
    assert lists.id_list(big[::2], builder) == big[::2].tolist()
    assert lists.id_list(big.astype(np.int64), builder) == big.tolist()


def test_id_lists_keep_only_the_layout_they_write():
    """``IdLists`` is kept only where its probe list reads back as CPython lists are laid out
    and its builder's lists equal ``tolist``'s: a builder that returns wrong lists, or raises,
    is not used (``usable`` False), and then ``id_list`` is ``tolist``."""
    from gputok.stages import lists

    lib = native.library()
    import ctypes

    real = ctypes.PyDLL(lib.path).gputok_id_list
    real.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p,
                     ctypes.c_longlong]
    real.restype = ctypes.py_object
    assert lists.IdLists(real).usable
    assert not lists.IdLists(lambda *a: [0]).usable

    def boom(*a):
        raise MemoryError

    assert not lists.IdLists(boom).usable
    ids = np.arange(1000, dtype=np.uint32)
    assert lists.id_list(ids) == ids.tolist()  # (no builder given: tolist)
    # a stage's lists never depend on what some backend loaded: numpy's are tolist's
    from gputok.backends import get_backend

    got = get_backend("numpy").id_list(np.full(100, 7, np.uint32))
    assert got == [7] * 100 and get_backend("numpy").tools.lister is None


def test_long_runs_come_back_with_shared_ints():
    """A long run's ids (``encode_ordinary`` of ``"a" * n`` and of an emoji run, the few-pieces
    path; a long base64 text, the batch path) are tiktoken's, their recurring ids one object
    each: the list is 8 bytes an id, not 40."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    be = create(threads=2)
    for text in ("a" * 200_000, "\U0001F600" * 50_000, "x " + "=" * 100_001):
        got = enc.encode_ordinary(text, backend=be)
        assert got == tk.encode_ordinary(text)
        assert len({id(x) for x in got}) == len(set(got))
    import base64
    import random

    text = base64.b64encode(random.Random(3).randbytes(600_000)).decode()
    got = enc.encode_ordinary(text, backend=be)
    assert got == tk.encode_ordinary(text)
    assert len({id(x) for x in got}) < len(got) // 4


@pytest.mark.parametrize("key", ["cl100k_base", "o200k_base", "r50k_base"])
def test_few_pieces_cut_on_the_device(key):
    """``OneCall.few`` (a long non-ASCII text of a few pieces: the device's
    pre-tokenization on this thread, ``NativeDevice.pretok_inline``, then the pieces' merge):
    the pieces start where the host pre-tokenizer's do, the ids are tiktoken's, a text of more
    pieces than the limit is left to the caller (None), and ``encode_ordinary`` takes this
    path for such texts (counted)."""
    from gputok.backends.hostplan import SEG_END, SEG_START
    from gputok.stages import counters

    enc, tk = gputok.get_encoding(key), tiktoken_oracle(key)
    be = create(threads=2)
    seg = np.array([SEG_START, SEG_END], np.uint8)
    texts = ["\U0001F600" * 3000, "x \u00e9 " + "\U0001F600" * 3000 + " \u4e2d\n",
             "\u4e2d" * 4000 + "\U0001F600" * 2000, "\u00e9" * 5000, "\u3000" * 3000 + "a",
             "\U0001F600\U0001F44D\U0001F3FD" * 900, " \n" * 300 + "\u00e9" * 5000,
             "\u0627\u0644" * 3000, "\U0001F600" * 3000 + "\n\n \t" + "\u00e9" * 3]
    pt = enc.model.pretokenizer
    for text in texts:
        data = text.encode()
        pieces = pt.split_few(text, 16)
        assert pieces is not None, text[:10]
        want_starts = np.cumsum([0] + [len(p.encode()) for p in pieces]).tolist()
        plan = be.model_plan(enc.model)
        got = be.dev.pretok_inline(plan.tables, data, np.array([0, len(data)], np.uint32),
                                   seg, 16)
        assert got is not None and got.tolist() == want_starts, text[:10]
        assert be.text.one_call.few(enc.model, data, 16) == tk.encode_ordinary(text)
        assert be.dev.pretok_inline(plan.tables, data, np.array([0, len(data)], np.uint32),
                                    seg, len(pieces) - 1) is None
    prose = "caf\u00e9 " * 2000
    assert be.text.one_call.few(enc.model, prose.encode(), 16) is None
    before = counters["device.few_texts"]
    text = "x " + "\U0001F600" * (onetext.SHORT_MAX + 1000)  # (shorter: one call)
    assert enc.encode_ordinary(text, backend=be) == tk.encode_ordinary(text)
    assert counters["device.few_texts"] == before + 1

def test_chunks_without_a_dedup_set():
    """``dedup=False``: every chunk runs with no dedup set (its pointer a placeholder the
    kernels never read), every piece merging itself; ids as tiktoken's."""
    be = create(threads=2, dedup=False)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = e2e_docs()[:60] + ["a" * 3000, "x", ""]
    ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
        [tk.encode_ordinary(d) for d in docs]
    assert "encode_dup_counts" not in be.dev.launches
    assert be.dev.launches.get("encode_merge_short", 0) >= 1


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_runs_of_every_short_length_merge_as_tiktoken(name):
    """The merge step's CPU forms (kernels/dialect_host.h: the pair probe two slots at a time,
    a short run's gap closed by one fixed-size move) on runs of every length around the move's
    size (ENC_HOST_SHIFT_BLOCK + 2 = 18 ids) and past it: one-piece words of Latin, Cyrillic and
    CJK letters and digits, each merged on the native device as tiktoken merges it."""
    import random

    rng = random.Random(5)
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    be = create(threads=2)
    alphabets = ["abcdefghijklmnopqrstuvwxyz", "\u0430\u0431\u0432\u0433\u0434\u0435\u0436\u0438"
                 "\u043a\u043b\u043c\u043d\u043e\u043f\u0440\u0441\u0442", "\u4e2d\u6587\u5b57"
                 "\u7684\u4e00\u662f\u4e0d\u4e86\u4eba\u6211\u5728\u6709\u4ed6\u8fd9",
                 "\u00e9\u00e8\u00e0\u00fc\u00f6\u00e4\u00df\u00e7"]
    docs = []
    for n in range(1, 48):
        for a in alphabets:
            for _ in range(6):
                word = "".join(rng.choice(a) for _ in range(n))
                docs.append(" " + word if rng.random() < 0.5 else word)
    ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    assert got == tk.encode_ordinary_batch(docs, num_threads=2)
