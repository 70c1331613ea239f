"""The encode kernels (``kernels/encode_*.cu``) without a GPU, on the CPU emulator.

1. Each stage's kernels, in forward, reverse and shuffled thread orders (dedup also with a
   thread switch at every atomic), against the numpy stages on real text (English, code, CJK,
   emoji corpora) and edge cases ("aaa", "\\t" * 32, " " * 1000, digit runs, contractions, CRLF
   runs, empty documents):
   class table vs the ``regex`` module on every code point; prefix scans vs numpy; device
   pre-tokenization vs ``piece_spans`` (the reference regex) for the GPT-2, cl100k, Llama 3 and
   Qwen2 patterns; whole-token lookup, short and long merges vs ``merge_small`` / ``merge_long``;
   emit vs concatenation.
2. The whole pipeline: ``gputok.backends.driver.DeviceBackend`` (the driver the GPU runs) with
   the emulator as its launch layer (``ArrayDevice``), against tiktoken for r50k / cl100k / o200k
   and HF tokenizers for Llama 3 / Qwen2, with small chunks (several in flight), special tokens,
   simulated out-of-memory, and the CPU pre-tokenization paths.
Sizes are kept small: the file runs in well under two minutes on two cores. The same pipeline on
a real GPU is ``tests/test_cuda_gpu.py``.
"""

from __future__ import annotations

import copy
import os
import random
import sys
import warnings

import numpy as np
import pytest
import regex

import gputok
import testdata
from conftest import hf_encoding, hf_oracle, tiktoken_oracle
from cpu_ref.patterns import CL100K_PATTERN, GPT2_PATTERN
from emulator import compile_cuda
from fakecupy import fake_cupy as _fake_cupy
from gputok.backends import FallbackWarning, cuda, device_tables, driver, hostplan, kernels
from gputok.backends.cuda import build as cuda_build
from gputok.backends.driver import DeviceBackend
from gputok.stages.pack import Documents
from gputok.stages.split import find_tokens
from devicekit import (EDGE, EMULATED_HUGE_PIECE, ORDER_IDS, ORDERS, PATTERNS, _regex_classes,
                       assert_pieces_like_regex, assert_same, check_byte_blocks_are_read,
                       corpus_snippets, device_entries, e2e_docs, emu_device, expected_merge,
                       merge_pieces, pack, pretok_docs, run_merge, specials_of, tiny_encoding,
                       tricky_texts)



# ---------------------------------------------------------------- compile-level facts

def test_kernel_names_match_the_driver():
    from gputok.backends import device_stages, spm_device

    src = {f: kernels.source(f) for f in kernels.ENCODE_FILES}
    for f in kernels.ENCODE_FILES:  # the driver's name scan finds what the compiler finds
        found = compile_cuda(kernels.build_source(f)[0]).kernels
        assert set(found) == set(kernels.kernel_names(src[f])), f
    names = {k for s in src.values() for k in kernels.kernel_names(s)}
    used = {k for m in (device_stages, spm_device)
            for k in regex.findall(r'"(encode_\w+)"', open(m.__file__).read())}
    used |= {"encode_scan_reduce_add", "encode_scan_apply_add"}
    assert used == names, (used - names, names - used)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvrtc_compiles_what_the_driver_loads(arch):
    """CuPy compiles with NVRTC, not nvcc: the driver's sources and defines, with the options
    CuPy's RawModule adds (runs where CuPy is installed; NVRTC needs no GPU)."""
    if os.environ.get("GPUTOK_REQUIRE_NVRTC"):
        from cupy_backends.cuda.libs import nvrtc  # CI: must be there
    else:
        nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    import cupy

    dev = cuda.CupyDevice.__new__(cuda.CupyDevice)  # defines() only: no device needed
    cupy_inc = f"-I{cupy.__path__[0]}/_core/include"
    for f in kernels.ENCODE_FILES:
        text = kernels.build_source(f, dev.defines())[0]  # what CupyDevice hands to RawModule
        prog = nvrtc.createProgram(text, f, [], [])
        try:
            nvrtc.compileProgram(prog, ["-std=c++17", cupy_inc,
                                        "-ftz=true", f"-arch={arch}",
                                        "--device-as-default-execution-space"])
        except Exception as e:
            pytest.fail(f"{f}: {e}\n{nvrtc.getProgramLog(prog)}")
        finally:
            nvrtc.destroyProgram(prog)


# ---------------------------------------------------------------- 1a. class table


@pytest.mark.parametrize("pattern", [CL100K_PATTERN, GPT2_PATTERN], ids=["cl100k", "gpt2"])
def test_device_class_table_agrees_with_regex_on_every_code_point(pattern):
    be = DeviceBackend(emu_device("shuffle", 3, max_blocks=4, block=64))
    plan = be.model_plan(tiny_encoding(pattern).model)
    cps = np.arange(0x110000, dtype=np.uint32)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    data = np.frombuffer(cps.tobytes().decode("utf-32-le").encode("utf-8"), np.uint8)
    n = len(data)
    mark = np.zeros(n + 2, np.uint8)
    mark[0], mark[n] = hostplan.SEG_START, hostplan.SEG_END
    cls = be.dev.empty(n + 2, np.uint8)
    be.stages.go("encode_pretok_classify", n + 1, [data, np.int64(n), mark, plan.tables.arrays["cls_table"],
                                             cls])
    starts = np.flatnonzero((data & 0xC0) != 0x80)
    assert len(starts) == len(cps)
    expect = _regex_classes(gpt2=pattern == GPT2_PATTERN)[cps]
    got = cls[starts]
    bad = np.flatnonzero(got != expect)
    assert not len(bad), [(hex(int(cps[i])), int(got[i]), int(expect[i])) for i in bad[:10]]
    assert (cls[np.flatnonzero((data & 0xC0) == 0x80)] == 8).all()  # continuation bytes
    assert cls[n] == 0


# ---------------------------------------------------------------- 1b. scans

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_scan_kernels_match_numpy(order, seed):
    be = DeviceBackend(emu_device(order, seed))
    rng = np.random.default_rng(7)
    tile = 32 * 4
    for n in (1, 5, tile - 1, tile, tile + 1, 3 * tile + 7, tile * tile + 3):
        for exclusive in (False, True):
            x = rng.integers(0, 1 << 31, n, dtype=np.uint32)  # sums wrap modulo 2^32
            a = x.copy()
            be.stages.scan(a, n, exclusive)
            incl = np.cumsum(x, dtype=np.uint32)
            want = np.concatenate([[0], incl[:-1]]).astype(np.uint32) if exclusive else incl
            np.testing.assert_array_equal(a, want, err_msg=f"n={n} exclusive={exclusive}")


# ---------------------------------------------------------------- 1c. pre-tokenization


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_device_pretok_matches_regex(name, order, seed):
    pattern = PATTERNS[name]
    enc = tiny_encoding(pattern)
    be = DeviceBackend(emu_device(order, seed))
    assert be.model_plan(enc.model).mode == "device", be.describe(enc.model)
    docs = pretok_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = got = device_entries(be, enc, buf, off)
    assert_pieces_like_regex(docs, buf, off, got, pattern, name)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_device_pretok_with_special_tokens_matches_host_paths(order, seed):
    """Segments between special tokens are pre-tokenized on their own (as split_specials
    does): the device, the vectorized scanner and the regex give the same entries."""
    enc = gputok.get_encoding("cl100k_base")
    eot = "<|endoftext|>"
    docs = [f"{eot}hello{eot}", f"x's {eot}{eot}  \n{eot}", eot, "", "no specials 12345 ",
            f"a  {eot}  b\r\n{eot}'ll 99999{eot}", "<|endof" + "text|>"] + [
        t.replace("<|endoftext|>", eot) for t in tricky_texts(60, seed=3)]
    buf, off = pack(docs)
    sp = specials_of(enc, buf, off, [eot, "<|fim_prefix|>"])
    got = {}
    for mode in ("device", "scanner", "split"):
        be = DeviceBackend(emu_device(order, seed), pretok=mode)
        got[mode] = device_entries(be, enc, buf, off, sp)
    for mode in ("scanner", "split"):
        for a, b in zip(got["device"], got[mode]):
            np.testing.assert_array_equal(a, b, err_msg=mode)
    # and the special entries carry the id
    assert (got["device"][1] == enc._special_tokens[eot]).sum() == len(sp[0])


# ---------------------------------------------------------------- 1d. merge + emit


@pytest.mark.parametrize("order,seed,yield_on_atomic",
                         [("forward", 0, False), ("reverse", 0, False), ("shuffle", 1, False),
                          ("shuffle", 2, True)], ids=ORDER_IDS + ["shuffle+yield"])
@pytest.mark.parametrize("rule", ["tiktoken", "hf"])
def test_merge_and_emit_kernels_match_the_sequential_rule(rule, order, seed, yield_on_atomic):
    enc = gputok.get_encoding("r50k_base") if rule == "tiktoken" else hf_encoding("llama3")
    pieces = merge_pieces()
    table = enc.model.merge_table
    for whole in ((True, False) if rule == "tiktoken" else (True,)):
        for dedup in (False, True, "crowded"):
            dev = emu_device(order, seed, yield_on_atomic=yield_on_atomic)
            be = DeviceBackend(dev, dedup=bool(dedup))
            if dedup == "crowded":  # probes run out: those pieces merge themselves
                be.stages.dedup_slots_per_entry = 1 / 64
            ids, out_doc, doc_entry = run_merge(be, enc, pieces, whole)
            # (pieces of EMULATED_HUGE_PIECE bytes or more took the block-wide merge)
            assert dev.launches["encode_merge_huge"] == 1
            assert max(map(len, pieces)) >= EMULATED_HUGE_PIECE
            expect = expected_merge(table, pieces, whole)
            flat = [t for e in expect for t in e]
            if ids.tolist() != flat:
                pos = 0
                for p, e in zip(pieces, expect):
                    got = ids[pos:pos + len(e)].tolist()
                    assert got == e, f"piece {p[:40]!r} (len {len(p)}): {got[:12]} != {e[:12]}"
                    pos += len(e)
            assert ids.dtype == enc.id_dtype
            lens = np.array([len(e) for e in expect])
            want_doc = np.concatenate([[0], np.cumsum(lens)])[doc_entry]
            np.testing.assert_array_equal(out_doc, want_doc)


def test_whole_token_table_finds_every_token_and_nothing_else():
    enc = gputok.get_encoding("cl100k_base")
    ranks = enc._mergeable_ranks
    toks = sorted(ranks, key=ranks.get)[::7]  # a seventh of the vocabulary: quick, still varied
    w = device_tables.whole_table(ranks)
    assert w["bits"] >= int(len(ranks) * 2 - 1).bit_length()
    h = device_tables.bytes_hash_many(np.frombuffer(b"".join(toks[:200]), np.uint8),
                             np.concatenate([[0], np.cumsum([len(t) for t in toks[:200]])]))
    assert [int(x) for x in h] == [device_tables.bytes_hash(t) for t in toks[:200]]
    misses = [t + b"\x00" for t in toks[:300]] + [b"\xff" * k for k in range(1, 20)]
    be = DeviceBackend(emu_device("shuffle", 4, max_blocks=4, block=64))
    plan = be.model_plan(enc.model)
    buf, poff = pack(toks + misses)
    pstart = poff.astype(np.uint32)
    spec = np.full(len(pstart), hostplan.NORMAL, np.uint32)
    spec[-1] = hostplan.GAP
    cap = len(pstart)
    owner = be.dev.empty(cap, np.uint32)
    count = be.dev.zeros(cap + 1, np.uint32)
    scratch = be.dev.empty(len(buf), np.uint32)
    a, s = plan.tables.arrays, plan.tables.scalars
    be.stages.go("encode_piece_kind", cap,
           [np.frombuffer(buf, np.uint8), pstart, spec, np.array([cap], np.uint32),
            a["w_slots"], a["w_tok_bytes"], s["w_bits"], be.dev.dummy(np.uint64), np.uint32(0),
            owner, count, scratch, np.int64(cap)])
    k = len(toks)
    assert (owner[:k] == device_tables.EMPTY_SLOT).all() and (count[:k] == 1).all()
    np.testing.assert_array_equal(scratch[pstart[:k]], [ranks[t] for t in toks])
    missed = owner[k:cap - 1]
    assert all(int(o) == k + i or t in ranks for i, (o, t) in enumerate(zip(missed, misses)))


# ---------------------------------------------------------------- 2. the whole pipeline


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_emulated_pipeline_matches_tiktoken(name, order, seed):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=6000)  # several chunks
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every stage on the device
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
    assert be.dev.launches["encode_emit_u16" if name == "r50k_base" else "encode_emit_u32"] > 2


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_emulated_pipeline_special_tokens(name):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    specials = sorted(enc.special_tokens_set)
    rng = random.Random(9)
    docs = [t + rng.choice(specials) + u for t, u in zip(e2e_docs()[::3], e2e_docs()[1::3])]
    docs += [specials[0] * 3, f" {specials[-1]}\n", "<|endof" + "text|>", ""]
    be = DeviceBackend(emu_device("shuffle", 6), chunk_bytes=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert_same(enc, be, docs, [tk.encode(d, allowed_special="all") for d in docs],
                    allowed=frozenset(specials))
        # disallowed: the numpy backend's error, naming the document and the token
        with pytest.raises(ValueError, match=r"(?s)document 0: .*allowed_special"):
            be.encode(enc.model, Documents(docs), frozenset(), frozenset(specials))


@pytest.mark.parametrize("key", ["llama3", "qwen2"])
def test_emulated_pipeline_matches_hf_tokenizers(key):
    enc, hf = hf_encoding(key), hf_oracle(key)
    specials = sorted(enc.special_tokens_set)[:2]
    docs = e2e_docs() + [f"x {specials[0]}y{specials[1]}\n"]
    be = DeviceBackend(emu_device("reverse"), chunk_bytes=8000)
    expect = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # qwen2: NFC checked on the device
        assert_same(enc, be, docs, expect, allowed=frozenset(enc.special_tokens_set))
    assert be.model_plan(enc.model).mode == "device" and not be.fallbacks


def test_pre_tokenization_off_the_device_is_announced():
    be = DeviceBackend(emu_device())
    enc = tiny_encoding(r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+")  # no vectorised form
    assert "host" in be.plan(enc.model)["pretok"] and "regex" in be.describe(enc.model)
    assert be.plan(gputok.get_encoding("o200k_base").model)["pretok"].startswith("device")
    with pytest.warns(FallbackWarning, match="vectorised form"):
        be.encode(enc.model, Documents(["hi"]), frozenset(), frozenset())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per encoding and backend
        be.encode(enc.model, Documents(["hi"]), frozenset(), frozenset())
    with pytest.raises(ValueError, match="cannot run on the device"):
        DeviceBackend(emu_device(), pretok="device").model_plan(enc.model)


def test_out_of_memory_splits_the_batch_then_falls_back_to_numpy():
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = e2e_docs()
    expect = [tk.encode_ordinary(d) for d in docs]
    big = sum(len(d.encode()) for d in docs)
    # tables fit; a chunk of the whole batch does not, halves do: split, no fallback
    dev = emu_device("shuffle", 8)
    dev.memory_limit = None
    be = DeviceBackend(dev, chunk_bytes=big)
    be.model_plan(enc.model)
    dev.memory_limit = 60 * big // 2 + 4096
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, expect)
    assert dev.launches["encode_doc_offsets"] >= 2 and not be.fallbacks
    # nothing fits: every document on the CPU, with a warning
    dev2 = emu_device("forward")
    be2 = DeviceBackend(dev2, chunk_bytes=big, min_chunk=big)
    be2.model_plan(enc.model)
    dev2.memory_limit = 1000
    with pytest.warns(FallbackWarning, match="out of device memory"):
        assert_same(enc, be2, docs, expect)
    assert be2.fallbacks[("chunk", "out of memory")] >= 1


def test_oversized_documents_go_to_the_cpu(monkeypatch):
    enc, tk = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")
    docs = ["short one", "x" * 5000 + " tail", "", "after it"]
    monkeypatch.setattr(driver, "CHUNK_LIMIT", 1000)
    be = DeviceBackend(emu_device(), chunk_bytes=100)
    with pytest.warns(FallbackWarning, match="document 1"):
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])


def test_encode_batch_arrays_accepts_the_backend_object():
    enc = gputok.get_encoding("cl100k_base")
    be = DeviceBackend(emu_device())
    for texts in (["hello world", "", "x" * 300], [b"bytes in", b"", "é".encode()]):
        ids, off = enc.encode_batch_arrays(texts, backend=be)
        ref_ids, ref_off = enc.encode_batch_arrays(texts, backend="numpy")
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(off, ref_off)
    ids, off = enc.encode_batch_arrays([], backend=be)
    assert ids.tolist() == [] and off.tolist() == [0]


# ---------------------------------------------------------------- host-side helpers

def test_special_matches_never_span_documents():
    buf, off = pack(["ab<|endof", "text|>cd<|endoftext|>", "<|endoftext|>"])
    s, e = find_tokens(buf, off, frozenset(["<|endoftext|>"]))
    assert [buf[a:b] for a, b in zip(s, e)] == [b"<|endoftext|>"] * 2
    assert s.tolist() == [17, 30]


def test_segment_marks():
    off = np.array([0, 5, 5, 20])
    pos, bits = hostplan.segment_marks(off, np.array([7, 12]), np.array([10, 14]))
    m = dict(zip(pos.tolist(), bits.tolist()))
    S, E, O, T = hostplan.SEG_START, hostplan.SEG_END, hostplan.OUTSIDE, hostplan.SPECIAL_START
    assert m == {0: S, 5: E | S, 7: E | O | T, 8: O, 9: O, 10: S, 12: E | O | T, 13: O,
                 14: S, 20: E}


def test_segment_marks_without_spans_match_the_general_form():
    """The no-span fast path gives the marks the general form gives (empty documents, a
    document that is only empty ones, one document), checked against a hand-rolled merge."""
    rng = np.random.default_rng(5)
    cases = [np.array([0, 0]), np.array([0, 9]), np.array([5, 12]), np.array([3, 3]),
             np.array([0, 0, 4, 4, 4, 9, 9])]
    cases += [np.cumsum(np.r_[0, rng.integers(0, 3, rng.integers(1, 30))]) for _ in range(200)]
    S, E = hostplan.SEG_START, hostplan.SEG_END
    for off in cases:
        want: dict = {}
        for a, b in zip(off[:-1].tolist(), off[1:].tolist()):
            if b > a:
                want[a] = want.get(a, 0) | S
                want[b] = want.get(b, 0) | E
        pos, bits = hostplan.segment_marks(off, np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert pos.dtype == np.uint32 and bits.dtype == np.uint8
        assert dict(zip(pos.tolist(), bits.tolist())) == want and list(pos) == sorted(want)


def test_array_device_wants_numpy_scalars():
    dev = emu_device()
    with pytest.raises(TypeError, match="numpy scalars"):
        dev.launch("encode_doc_offsets", (1,), (32,), [np.zeros(2, np.uint32),
                                                       np.zeros(2, np.uint32), 2,
                                                       np.zeros(2, np.int64)])


def test_unavailable_without_cupy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    ok, why = cuda.available()
    assert not ok and 'pip install "gputok[cuda12]"' in why
    from gputok.backends import _instances, get_backend

    monkeypatch.delitem(_instances, "cuda", raising=False)
    with pytest.raises(RuntimeError, match="gputok\\[cuda12\\]"):
        get_backend("cuda")


# ---------------------------------------------------------------- CupyDevice, on a CuPy stand-in

def test_cupy_device_layer_on_a_stand_in(monkeypatch):
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    monkeypatch.setattr(cuda, "_no_driver", lambda: False)  # the stand-in is the "driver"
    cuda_build._cupy_module.cache_clear()
    try:
        assert cuda.available()[0]
        dev = cuda.CupyDevice()
        dev.block, dev.max_blocks = 64, 2  # keep the emulated grids small
        be = DeviceBackend(dev, chunk_bytes=1500)  # many chunks: pinned buffers reused, grown
        be.profile = []
        enc, tk = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")
        docs = list(corpus_snippets(2, 1000)) + EDGE
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
        assert {"encode_pretok_spans", "encode_merge_long", "encode_emit_u16"} <= set(log)
        assert len(be.profile) > 3 and set(be.profile[0]["ms"]) == {"h2d", "pretok", "entries",
                                                                      "merge", "emit"}
    finally:
        cuda_build._cupy_module.cache_clear()


def test_merge_pieces_on_the_emulator_and_the_cupy_layer(monkeypatch):
    """``DeviceBackend.merge_pieces`` (a text's long pieces, cut on the host) is device-neutral:
    the same ids through the emulator's launch layer and the CuPy adapter (pinned downloads)."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    pieces = [" hello", "a" * 700, "\U0001F600" * 80, " " * 300, "x", "=" * 400, "\t" * 260]
    want = [tuple(tk.encode_ordinary(p)) for p in pieces]
    raw = [p.encode() for p in pieces]
    be = DeviceBackend(emu_device("shuffle", 5))
    assert be.merge_pieces(enc.model, raw) == want
    assert "encode_merge_long" in be.dev.launches and "encode_emit_u32" not in be.dev.launches
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    monkeypatch.setattr(cuda, "_no_driver", lambda: False)
    cuda_build._cupy_module.cache_clear()
    try:
        dev = cuda.CupyDevice()
        dev.block, dev.max_blocks = 64, 2
        assert DeviceBackend(dev).merge_pieces(enc.model, raw) == want
        assert "encode_merge_long" in log
    finally:
        cuda_build._cupy_module.cache_clear()


# ---------------------------------------------------------------- 3. what runs where

def _with_strip_tokens(tmp_path, key: str, lstrip: str, rstrip: str):
    import json

    cfg = json.loads(testdata.vocab_path(f"{key}_tokenizer_json").read_text("utf-8"))
    for t in cfg["added_tokens"]:
        t["lstrip"] = t["content"] == lstrip
        t["rstrip"] = t["content"] == rstrip
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg, ensure_ascii=False), "utf-8")
    from tokenizers import Tokenizer

    return gputok.load(path), Tokenizer.from_file(str(path))


def test_lstrip_rstrip_tokens_run_on_the_device(tmp_path):
    """HF added tokens that swallow whitespace: cut on the host as no-id spans, every other
    stage on the device, no fallback."""
    enc, hf = _with_strip_tokens(tmp_path, "llama3", "<|start_header_id|>", "<|end_header_id|>")
    s, e = "<|start_header_id|>", "<|end_header_id|>"
    docs = [f"a  {s}  b{e} \n c", f"\t{s}x {e}\u3000y", f"x\x1c{s}", f"{e}   ", f"  {s}{e}  z",
            f"{e}\u2028 \u2029{s}", "plain  ", "", s, f"{e}  {s}"] + e2e_docs()[:20]
    be = DeviceBackend(emu_device("shuffle", 5), chunk_bytes=700)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, [x.ids for x in hf.encode_batch(docs, add_special_tokens=False)],
                    allowed=frozenset(enc.special_tokens_set))
    assert not be.fallbacks and be.dev.launches["encode_pretok_spans"] >= 2


@pytest.mark.parametrize("name,expected", [
    ("r50k_base", set()), ("cl100k_base", set()), ("llama3", set()), ("o200k_base", set()),
    ("qwen2", set())])
def test_fallbacks_are_exactly_the_host_stages(name, expected):
    enc = hf_encoding(name) if name in ("llama3", "qwen2") else gputok.get_encoding(name)
    be = DeviceBackend(emu_device())
    docs = ["e\u0301t\u00e9 caf\u0065\u0301 ", "plain text", ""]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert set(be.fallbacks) == expected
    want = [enc.encode(d) for d in docs]
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
    if name == "qwen2":  # checked on the device, the flagged spans normalised on the host
        assert be.model_plan(enc.model).mode == "device"
        assert be.dev.launches["encode_pretok_spans"] >= 1
        assert be.dev.launches["encode_nfc_compact"] == 1 and be.host_normalized["spans"] == 2


def test_merge_table_layouts_probe_alike():
    """THE PAIR PROBE on both layouts of pair_slots: a tiktoken-rule table (priority = merged
    id) in 8-byte slots, an HF merges-list table (priorities apart from ids) in 16-byte ones;
    the emulated merge kernels (no whole-token lookup: every piece merges) give the
    reference's ids either way."""
    tk = gputok.get_encoding("cl100k_base")
    slots, bits = device_tables.pair_slots(tk.model.merge_table)
    assert bits & device_tables.PAIR_COMPACT and len(slots) == 1 << (bits & 0xFF)
    assert slots.nbytes * 2 == device_tables.merge_slots(tk.model.merge_table).nbytes
    hf = hf_encoding("qwen2")  # ids from vocab.json, priorities from the merges list
    slots2, bits2 = device_tables.pair_slots(hf.model.merge_table)
    assert not bits2 & device_tables.PAIR_COMPACT
    assert np.array_equal(slots2, device_tables.merge_slots(hf.model.merge_table))
    pieces = merge_pieces()[::3]
    for enc in (tk, hf):
        be = DeviceBackend(emu_device("shuffle", 3))
        assert bool(be.model_plan(enc.model).tables.scalars["t_bits"] &
                    device_tables.PAIR_COMPACT) == (enc is tk)
        ids, _, ent = run_merge(be, enc, pieces, whole=False)
        want = expected_merge(enc.model.merge_table, pieces, whole=False)
        assert ids.tolist() == [i for e in want for i in e], enc.name


def test_byte_blocks_are_the_probes():
    """THE BYTE-PAIR BLOCK and the one-byte block (device_tables.byte_pair_block,
    whole_byte_block) against the vocabularies themselves: for cl100k a byte pair merges, at
    its rank, exactly when its two bytes are a token, and every byte is a token; for Qwen2
    (an HF merges list: priorities apart from ids) a byte pair has a priority exactly when the
    sequential rule merges its two bytes into one token. Little-endian halves: pair
    x << 8 | y is word k >> 1, the low half for even k."""
    from gputok.stages.merge import merge_small
    from gputok.stages.table import NO_MERGE

    def halves(words):
        return np.stack([words & np.uint64(0xFFFFFFFF), words >> np.uint64(32)], 1).reshape(-1)

    tk = gputok.get_encoding("cl100k_base")
    ranks = tk.model.ranks
    prio = halves(device_tables.byte_pair_block(tk.model.merge_table))
    assert prio.tolist() == [ranks.get(bytes([x, y]), NO_MERGE) for x in range(256)
                             for y in range(256)]
    ones = device_tables.whole_byte_block(tk.model.merge_table.whole)
    assert ones.dtype == np.uint32 and ones.tolist() == [ranks[bytes([b])] for b in range(256)]
    assert device_tables.whole_byte_block({b"a": 7})[ord("a")] == 7
    assert device_tables.whole_byte_block({b"a": 7})[ord("b")] == NO_MERGE
    hf = hf_encoding("qwen2")
    table = copy.copy(hf.model.merge_table)
    table.whole = None
    prio = halves(device_tables.byte_pair_block(table))
    merges = [len(merge_small(bytes([x, y]), table)) == 1 for x in range(256) for y in range(256)]
    assert ((prio != NO_MERGE) == np.array(merges)).all() and 0 < sum(merges) < 65536


@pytest.mark.parametrize("key", ["cl100k_base", "qwen2"])
def test_merge_kernels_read_the_byte_blocks(key, monkeypatch):
    """On the emulator, a compact (cl100k) and a two-word (Qwen2) merge table: the kernels read
    the blocks after the slots (check_byte_blocks_are_read)."""
    enc = gputok.get_encoding(key) if key.endswith("_base") else hf_encoding(key)
    check_byte_blocks_are_read(lambda: DeviceBackend(emu_device("shuffle", 7)), enc,
                               merge_pieces()[::4], monkeypatch)
