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
import functools
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
from gputok.backends import FallbackWarning, cuda, device_tables, driver, hostplan, kernels
from gputok.backends.devices import ArrayDevice
from gputok.backends.driver import DeviceBackend
from gputok.patterns import BYTELEVEL as GPT2_HF_PATTERN, LLAMA3 as LLAMA3_PATTERN, QWEN2 as QWEN2_PATTERN
from gputok.stages.merge import LONG_PIECE, merge_long, merge_small
from gputok.stages.pack import Documents
from gputok.stages.pretok import Pretokenizer, PretokSpec, piece_spans
from gputok.stages.split import find_tokens

ORDERS = [("forward", 0), ("reverse", 0), ("shuffle", 1)]
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


# ---------------------------------------------------------------- the emulated device

@functools.lru_cache(maxsize=None)
def modules(scan_block: int, scan_items: int) -> dict:
    """The exact source the driver builds (constants injected, headers expanded) per file."""
    defines = (("ENC_SCAN_BLOCK", scan_block), ("ENC_SCAN_ITEMS", scan_items))
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


# ---------------------------------------------------------------- compile-level facts

def test_kernel_names_match_the_driver():
    from gputok.backends import device_stages

    src = {f: kernels.source(f) for f in kernels.ENCODE_FILES}
    for f in kernels.ENCODE_FILES:  # the driver's name scan finds what the compiler finds
        found = compile_cuda(kernels.build_source(f)[0]).kernels
        assert set(found) == set(kernels.kernel_names(src[f])), f
    names = {k for s in src.values() for k in kernels.kernel_names(s)}
    used = set(regex.findall(r'"(encode_\w+)"', open(device_stages.__file__).read()))
    used |= {f"encode_scan_{a}_{op}" for a in ("reduce", "apply") for op in ("add", "max")}
    assert used <= names, used - names


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvrtc_compiles_what_the_driver_loads(arch):
    """CuPy compiles with NVRTC, not nvcc: the driver's sources and defines, with the options
    CuPy's RawModule adds (runs where CuPy is installed; NVRTC needs no GPU)."""
    if os.environ.get("GPUTOK_REQUIRE_NVRTC"):
        from cupy_backends.cuda.libs import nvrtc  # CI: must be there
    else:
        nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    import cupy

    from gputok._resources import source_dir

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
@pytest.mark.parametrize("op", ["add", "max"])
def test_scan_kernels_match_numpy(order, seed, op):
    be = DeviceBackend(emu_device(order, seed))
    rng = np.random.default_rng(7)
    tile = 32 * 4
    for n in (1, 5, tile - 1, tile, tile + 1, 3 * tile + 7, tile * tile + 3):
        for exclusive in (False, True):
            x = rng.integers(0, 1 << 20 if op == "max" else 1000, n, dtype=np.uint32)
            a = x.copy()
            be.stages.scan(a, n, op, exclusive)
            incl = np.cumsum(x, dtype=np.uint32) if op == "add" else np.maximum.accumulate(x)
            want = np.concatenate([[0], incl[:-1]]).astype(np.uint32) if exclusive else incl
            np.testing.assert_array_equal(a, want, err_msg=f"n={n} exclusive={exclusive}")


# ---------------------------------------------------------------- 1c. pre-tokenization

PATTERNS = {"gpt2": GPT2_PATTERN, "gpt2-hf": GPT2_HF_PATTERN, "cl100k": CL100K_PATTERN,
            "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}


def pretok_docs() -> list[str]:
    return list(corpus_snippets()) + EDGE + tricky_texts(250, seed=11)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_device_pretok_matches_regex(name, order, seed):
    pattern = PATTERNS[name]
    enc = tiny_encoding(pattern)
    be = DeviceBackend(emu_device(order, seed))
    assert be.model_plan(enc.model).mode == "device", be.describe(enc.model)
    docs = pretok_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = device_entries(be, enc, buf, off)
    want, want_doc = piece_spans(buf, off, Pretokenizer(PretokSpec.regex(pattern)))
    if not np.array_equal(pstart, want):
        k = int(np.flatnonzero(pstart[:len(want)] != want[:len(pstart)])[0])
        d = int(np.searchsorted(off, min(pstart[k], want[k]), "right") - 1)
        pytest.fail(f"{name}: first difference in document {d} {docs[d][:80]!r}: "
                    f"device piece start {pstart[k] - off[d]}, regex {want[k] - off[d]}")
    np.testing.assert_array_equal(doc_entry, want_doc)
    assert (spec[:-1] == hostplan.NORMAL).all() and spec[-1] == hostplan.GAP


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


def expected_merge(table, pieces, whole: bool):
    if not whole:
        table = copy.copy(table)
        table.whole = None
    return [merge_long(p, table) if len(p) >= LONG_PIECE else merge_small(p, table)
            for p in pieces]


@pytest.mark.parametrize("order,seed,yield_on_atomic",
                         [("forward", 0, False), ("reverse", 0, False), ("shuffle", 1, False),
                          ("shuffle", 2, True)], ids=ORDER_IDS + ["shuffle+yield"])
@pytest.mark.parametrize("rule", ["tiktoken", "hf"])
def test_merge_and_emit_kernels_match_the_sequential_rule(rule, order, seed, yield_on_atomic):
    enc = gputok.get_encoding("r50k_base") if rule == "tiktoken" else hf_encoding("llama3")
    pieces = merge_pieces()
    table = enc.model.merge_table
    for whole in ((True, False) if rule == "tiktoken" else (True,)):
        for dedup in (False, True):
            dev = emu_device(order, seed, yield_on_atomic=yield_on_atomic)
            be = DeviceBackend(dev, dedup=dedup)
            ids, out_doc, doc_entry = run_merge(be, enc, pieces, whole)
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

def e2e_docs() -> list[str]:
    return list(corpus_snippets(4, 1200)) + EDGE + tricky_texts(40, seed=2)


def assert_same(enc, be, docs, expect, allowed=frozenset(), disallowed=frozenset()):
    ids, off = be.encode(enc.model, Documents(docs), allowed, disallowed)
    assert ids.dtype == enc.id_dtype and off.dtype == np.int64 and len(off) == len(docs) + 1
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    bad = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
    assert not bad, f"{len(bad)} documents differ; first {bad[0]}: {docs[bad[0]][:80]!r}"


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_emulated_pipeline_matches_tiktoken(name, order, seed):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=6000)  # several chunks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # o200k: pieces on the CPU
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
        warnings.simplefilter("ignore", FallbackWarning)  # qwen2: NFC on the CPU
        assert_same(enc, be, docs, expect, allowed=frozenset(enc.special_tokens_set))
    assert be.model_plan(enc.model).mode == "device"  # qwen2: NFC on the host, cut on the device


def test_pre_tokenization_off_the_device_is_announced():
    be = DeviceBackend(emu_device())
    enc = gputok.get_encoding("o200k_base")
    assert "host" in be.plan(enc.model)["pretok"] and "o200k" in be.describe(enc.model)
    assert be.plan(gputok.get_encoding("cl100k_base").model)["pretok"].startswith("device")
    with pytest.warns(FallbackWarning, match="o200k"):
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
    old = driver.MIN_CHUNK
    driver.MIN_CHUNK = big
    try:
        dev2 = emu_device("forward")
        be2 = DeviceBackend(dev2, chunk_bytes=big)
        be2.model_plan(enc.model)
        dev2.memory_limit = 1000
        with pytest.warns(FallbackWarning, match="out of device memory"):
            assert_same(enc, be2, docs, expect)
        assert be2.fallbacks[("chunk", "out of memory")] >= 1
    finally:
        driver.MIN_CHUNK = old


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

class _DevArray(np.ndarray):
    """A numpy array with CuPy's ``.data.ptr``."""

    @property
    def data(self):
        return type("MemoryPointer", (), {"ptr": self.ctypes.data})()


def _fake_cupy(kernel_log: list):
    """Just the CuPy surface CupyDevice uses, on the CPU: copies are memmoves, streams and
    events are immediate, RawModule compiles the source (with its #define header) for the
    emulator. It checks the driver's calls, not CuPy itself."""
    import ctypes
    import types

    from gputok._resources import source_dir

    cp = types.ModuleType("cupy")
    cp.__version__ = "stand-in"
    as_dev = lambda a: a.view(_DevArray)  # noqa: E731
    cp.empty = lambda n, dtype: as_dev(np.full(n, 0xCD, np.uint8).view(dtype)
                                       if np.dtype(dtype).itemsize == 1
                                       else np.empty(n, dtype))
    cp.zeros = lambda n, dtype: as_dev(np.zeros(n, dtype))
    cp.full = lambda n, v, dtype: as_dev(np.full(n, v, dtype))
    cp.asarray = lambda a: as_dev(np.array(a, copy=True))
    pool = types.SimpleNamespace(free_bytes=lambda: 0, free_all_blocks=lambda: None)
    cp.get_default_memory_pool = lambda: pool

    class Ctx:
        def __init__(self, *a, **k):
            self.id = 0
            self.ptr = id(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

        def record(self, stream=None):
            pass

    rt = types.SimpleNamespace(
        getDeviceProperties=lambda i: {"name": b"stand-in GPU", "multiProcessorCount": 1},
        getDeviceCount=lambda: 1, memGetInfo=lambda: (1 << 30, 1 << 31),
        memcpyHostToDevice=1, memcpyDeviceToHost=2,
        memcpyAsync=lambda dst, src, size, kind, stream: ctypes.memmove(dst, src, size))

    class RawModule:
        def __init__(self, code, options=()):
            assert "-std=c++17" in options
            inc = [o[2:] for o in options if o.startswith("-I")]
            self.mod = compile_cuda(code, include_dirs=inc)

        def get_function(self, name):
            def call(grid, block, args):
                assert isinstance(grid, tuple) and isinstance(block, tuple)
                kernel_log.append(name)
                self.mod.launch(name, grid, block, list(args), order="shuffle", seed=1)
            return call

    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(
        Device=Ctx, Stream=Ctx, Event=Ctx, runtime=rt,
        memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError", (MemoryError,),
                                                           {})),
        alloc_pinned_memory=lambda size: bytearray(size), get_elapsed_time=lambda a, b: 0.0)
    assert source_dir("kernels").is_dir()
    return cp


def test_cupy_device_layer_on_a_stand_in(monkeypatch):
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    monkeypatch.setattr(cuda, "_no_driver", lambda: False)  # the stand-in is the "driver"
    kernels._cupy_module.cache_clear()
    try:
        assert cuda.available()[0]
        dev = cuda.CupyDevice()
        dev.block, dev.max_blocks = 64, 2  # keep the emulated grids small
        be = DeviceBackend(dev, chunk_bytes=1500)  # many chunks: pinned buffers reused, grown
        be.profile = []
        enc, tk = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")
        docs = list(corpus_snippets(2, 1000)) + EDGE
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
        assert {"encode_pretok_window", "encode_merge_long", "encode_emit_u16"} <= set(log)
        assert len(be.profile) > 3 and set(be.profile[0]["ms"]) == {"h2d", "pretok", "entries",
                                                                      "merge", "emit"}
    finally:
        kernels._cupy_module.cache_clear()


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
    assert not be.fallbacks and be.dev.launches["encode_pretok_window"] >= 2


@pytest.mark.parametrize("name,expected", [
    ("r50k_base", set()), ("cl100k_base", set()), ("llama3", set()),
    ("o200k_base", {("pretok", "scanner")}), ("qwen2", {("normalize", "host")})])
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
    if name == "qwen2":  # normalised on the host, then cut on the device
        assert be.model_plan(enc.model).mode == "device"
        assert be.dev.launches["encode_pretok_window"] >= 1
