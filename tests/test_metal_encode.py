"""The Metal encode backend without a Mac: its shaders on the emulator, through its own adapter.

``gputok.backends.metal.MetalDevice`` runs here unchanged over ``mlx[cpu]`` arrays, with
``mx.fast.metal_kernel`` replaced by the emulator-backed stand-in (``emulator.mlx_bridge``): every
``shaders/encode_*.metal`` body is compiled with MLX's exact wrapping against the strict Metal
shim and run one fiber per thread, in forward, reverse and shuffled thread orders.

1. Stages, as in ``test_cuda_kernels.py`` (whose inputs and references these reuse): the pretok
   shaders + entry compaction against the reference regex for the GPT-2, cl100k, Llama 3 and
   Qwen2 patterns (prose, code, CJK, emoji, edge cases), with special tokens against the host
   paths; piece kind + short/long merges + emit against the sequential rule.
2. The whole backend (the shared driver over ``MetalDevice``): ids equal to tiktoken on every
   named encoding, to HF tokenizers (Llama 3, Qwen2) on the corpora, 0 mismatched documents, and
   the fallbacks counted exactly as the CUDA kernels' (the emulated CUDA device) count them.
3. The backend's contract: ``available()`` says why not, dedup is refused with the reason.

o200k pre-tokenization, the normaliser's quick check and WordPiece on the Metal backend are
``test_metal_coverage.py``. The fidelity of the wrapping (MLX's own generated source) is
``test_metal_fidelity.py``; what only a Mac can show is ``test_metal_mac.py``.
"""

from __future__ import annotations

import copy
import random
import warnings
from dataclasses import replace

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")

import gputok  # noqa: E402
from conftest import hf_encoding, hf_oracle, tiktoken_oracle  # noqa: E402
from emulator.mlx_bridge import metal_kernel_maker  # noqa: E402
from gputok.backends import FallbackWarning, hostplan, metal  # noqa: E402
from gputok.backends.driver import DeviceBackend  # noqa: E402
from gputok.stages.merge import HUGE_PIECE  # noqa: E402
from gputok.stages.pack import Documents  # noqa: E402
from devicekit import (EDGE, ORDER_IDS, ORDERS, PATTERNS, assert_pieces_like_regex,  # noqa: E402
                       corpus_snippets, emu_device, expected_merge, merge_pieces, pack, pretok_docs,
                       specials_of, tiny_encoding, tricky_texts)

ENCODE_SHADERS = metal.SHADERS


def metal_backend(order: str = "forward", seed: int = 0, **options) -> DeviceBackend:
    """The metal backend on the emulator: small threadgroups and grids, so every thread walks
    many elements of the grid-stride loops."""
    options.setdefault("block", 32)
    options.setdefault("max_blocks", 3)
    return metal.emulated(metal_kernel_maker(order=order, seed=seed), **options)


def host(x) -> np.ndarray:
    """A MetalArray's logical contents as numpy."""
    return np.array(x.a, copy=True)[:len(x)]


def metal_entries(be: DeviceBackend, enc, buf, off, specials=None):
    """The pretok + entries stages on one chunk: (pstart, spec, doc_entry) on the host."""
    plan = be.model_plan(enc.model)
    sp = specials or (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint32))
    hc = hostplan.prepare(plan.mode, plan.pretok, buf, off, sp, 0, len(off) - 1, plan.normalizer)
    if hc.mode != "device":
        return hc.inputs[1], hc.inputs[2], hc.inputs[3]
    ins = be.dev.upload(hc.inputs)
    ent = be.stages.pretok(plan.tables, hc.n, ins[0], ins[2], ins[3], hc.n_marks)
    pstart, spec, doc_entry, n_ent, _ = be.stages.entries(hc.n, ent, ins[1], hc.n_docs, ins[4],
                                                          ins[5], hc.n_spans)
    e = int(host(n_ent)[0])
    return host(pstart)[:e], host(spec)[:e], host(doc_entry)


# ---------------------------------------------------------------- 1. stages

def test_every_encode_shader_is_launched_by_the_pipeline():
    """The adapter has a form of every kernel the driver launches, and each shader runs."""
    be = metal_backend()
    enc = gputok.get_encoding("cl100k_base")
    docs = ["Hello world, it's 12345\n\n  ok", "", "a" * 700, "日本語 😀👍🏽",
            "x\r\n  y 1234567", "=" * (HUGE_PIECE + 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # everything on the device
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    tk = tiktoken_oracle("cl100k_base")
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
        [tk.encode_ordinary(d) for d in docs]
    shaders = {name for name, _ in be.dev.factory._built}
    # the o200k, quick-check, WordPiece and SentencePiece shaders serve other models
    # (test_metal_coverage.py, test_spm_device.py)
    others = {"encode_emit_u16", "encode_o200k_classify", "encode_o200k_spans",
              "encode_nfc_flags", "encode_nfc_compact", "encode_wordpiece",
              *metal.SPM_SHADERS}
    assert shaders == set(ENCODE_SHADERS) - others
    assert be.dev.shaders_run["encode_merge_long"] == 1 and be.fallbacks == {}
    assert be.dev.shaders_run["encode_merge_huge"] == 1


def test_long_piece_shaders_run_only_for_chunks_that_need_them():
    """``encode_merge_long`` / ``encode_merge_huge`` carry every entry's ids through fresh
    outputs: they run only for a chunk whose longest entry is that long (the driver launches
    them; the adapter reads the longest entry once per chunk). No merge shader's output starts
    filled (the emulator fills outputs with 0xCD bytes: a count or id nobody wrote shows)."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    for docs, ran in ((["short text, no long piece", "x" * 40], set()),
                      (["a" * 300, "y"], {"encode_merge_long"}),
                      (["b" * (HUGE_PIECE + 1), "y"], {"encode_merge_long", "encode_merge_huge"})):
        be = metal_backend()
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
            [tk.encode_ordinary(d) for d in docs]
        assert {"encode_merge_long", "encode_merge_huge"} & set(be.dev.shaders_run) == ran
        assert be.dev.launches["encode_merge_long"] == be.dev.launches["encode_merge_huge"] == 1


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_metal_pretok_matches_regex(name, order, seed):
    pattern = PATTERNS[name]
    enc = tiny_encoding(pattern)
    be = metal_backend(order, seed)
    assert be.model_plan(enc.model).mode == "device", be.describe(enc.model)
    docs = pretok_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = got = metal_entries(be, enc, buf, off)
    assert_pieces_like_regex(docs, buf, off, got, pattern, name)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_pretok_with_special_tokens_matches_host_paths(order, seed):
    enc = gputok.get_encoding("cl100k_base")
    eot = "<|endoftext|>"
    docs = [f"{eot}hello{eot}", f"x's {eot}{eot}  \n{eot}", eot, "", "no specials 12345 ",
            f"a  {eot}  b\r\n{eot}'ll 99999{eot}", "<|endof" + "text|>"] + tricky_texts(60, 3)
    buf, off = pack(docs)
    sp = specials_of(enc, buf, off, [eot, "<|fim_prefix|>"])
    got = metal_entries(metal_backend(order, seed), enc, buf, off, sp)
    for mode in ("scanner", "split"):
        want = metal_entries(metal_backend(order, seed, pretok=mode), enc, buf, off, sp)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=mode)
    assert (got[1] == enc._special_tokens[eot]).sum() == len(sp[0])


def run_merge(be, enc, pieces, whole: bool = True, n_docs: int = 7):
    """Pieces as host-cut entries -> merge + emit shaders -> (ids, doc offsets, doc entries)."""
    plan = be.model_plan(enc.model)
    tables = copy.copy(plan.tables)
    if not whole:
        tables.scalars = dict(tables.scalars, w_bits=np.uint32(0))
    buf, poff = pack(pieces)
    pstart = poff.astype(np.uint32)  # the last one is the sentinel
    spec = np.full(len(pstart), hostplan.NORMAL, np.uint32)
    spec[-1] = hostplan.GAP
    doc_entry = np.linspace(0, len(pieces), n_docs + 1).astype(np.uint32)
    d_buf, d_pstart, d_spec, d_doc, d_nent = be.dev.upload(
        [np.frombuffer(buf, np.uint8), pstart, spec, doc_entry,
         np.array([len(pstart)], np.uint32)])
    cap, n = len(pstart), len(buf)
    owner, count, scratch = be.stages.merge(tables, n, d_buf, d_pstart, d_spec, d_nent, cap)
    out, out_doc = be.stages.emit(n, d_pstart, d_nent, cap, owner, count, scratch, d_doc,
                                  n_docs, enc.id_dtype)
    out_doc = host(out_doc)
    return host(out)[:int(out_doc[-1])], out_doc, doc_entry


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("rule", ["tiktoken", "hf"])
def test_metal_merge_and_emit_match_the_sequential_rule(rule, order, seed):
    enc = gputok.get_encoding("r50k_base") if rule == "tiktoken" else hf_encoding("llama3")
    pieces = merge_pieces()
    for whole in ((True, False) if rule == "tiktoken" else (True,)):
        ids, out_doc, doc_entry = run_merge(metal_backend(order, seed), enc, pieces, whole)
        expect = expected_merge(enc.model.merge_table, pieces, whole)
        pos = 0
        for p, e in zip(pieces, expect):
            got = ids[pos:pos + len(e)].tolist()
            assert got == e, f"piece {p[:40]!r} (len {len(p)}): {got[:12]} != {e[:12]}"
            pos += len(e)
        assert pos == len(ids) and ids.dtype == enc.id_dtype
        lens = np.array([len(e) for e in expect])
        np.testing.assert_array_equal(out_doc, np.concatenate([[0], np.cumsum(lens)])[doc_entry])


# ---------------------------------------------------------------- 2. the whole backend

def e2e_docs() -> list[str]:
    return list(corpus_snippets(4, 1200)) + EDGE + tricky_texts(40, seed=2)


def encode_all(be, enc, docs, allowed=frozenset()) -> list[list[int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), allowed, frozenset())
    assert ids.dtype == enc.id_dtype and off.dtype == np.int64 and len(off) == len(docs) + 1
    return [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]


def assert_no_mismatch(got, expect, docs) -> None:
    bad = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
    assert not bad, f"{len(bad)} documents differ; first {bad[0]}: {docs[bad[0]][:80]!r}"


def cuda_fallbacks(enc, docs, chunk_bytes: int, allowed=frozenset()) -> dict:
    """What the CUDA kernels (the emulated CUDA device) count as fallbacks on the same batch,
    with pre-tokenization on the device for the scanner families the Metal shaders implement,
    and the quick check for the normal forms they check."""
    dev = emu_device("forward")
    mine = metal_backend().dev.caps
    dev.caps = replace(dev.caps, pretok_families=mine.pretok_families,
                       normal_forms=mine.normal_forms)
    be = DeviceBackend(dev, chunk_bytes=chunk_bytes)
    encode_all(be, enc, docs, allowed)
    return dict(be.fallbacks)


@pytest.mark.parametrize("name", gputok.list_encoding_names())
def test_metal_backend_matches_tiktoken(name):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()
    be = metal_backend("shuffle", 3, chunk_bytes=6000)  # several chunks
    assert_no_mismatch(encode_all(be, enc, docs), [tk.encode_ordinary(d) for d in docs], docs)
    assert be.dev.launches["encode_merge_short"] > 2  # several chunks, on the device
    assert dict(be.fallbacks) == cuda_fallbacks(enc, docs, 6000)


@pytest.mark.parametrize("order,seed", ORDERS[:2], ids=ORDER_IDS[:2])
def test_metal_backend_matches_tiktoken_in_every_thread_order(order, seed):
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = e2e_docs()
    be = metal_backend(order, seed, chunk_bytes=8000)
    assert_no_mismatch(encode_all(be, enc, docs), [tk.encode_ordinary(d) for d in docs], docs)
    assert be.fallbacks == {}


def test_merge_pieces_on_the_metal_backend():
    """``DeviceBackend.merge_pieces`` (a text's long pieces and a cold cache's misses, cut on
    the host) through the Metal adapter: the merge shaders alone, tiktoken's ids."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    pieces = [" hello", "a" * 600, "\U0001F600" * 70, " " * 300, "x", " unbelievably", "\t" * 260]
    be = metal_backend("shuffle", 3)
    got = be.merge_pieces(enc.model, [p.encode() for p in pieces])
    assert got == [tuple(tk.encode_ordinary(p)) for p in pieces]


def test_metal_backend_special_tokens():
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    specials = sorted(enc.special_tokens_set)
    rng = random.Random(9)
    docs = [t + rng.choice(specials) + u for t, u in zip(e2e_docs()[::3], e2e_docs()[1::3])]
    docs += [specials[0] * 3, f" {specials[-1]}\n", "<|endof" + "text|>", ""]
    be = metal_backend("reverse", chunk_bytes=3000)
    got = encode_all(be, enc, docs, frozenset(specials))
    assert_no_mismatch(got, [tk.encode(d, allowed_special="all") for d in docs], docs)
    with pytest.raises(ValueError, match=r"(?s)document 0: .*allowed_special"):
        be.encode(enc.model, Documents(docs), frozenset(), frozenset(specials))


@pytest.mark.parametrize("key", ["llama3", "qwen2"])
def test_metal_backend_matches_hf_tokenizers(key):
    enc, hf = hf_encoding(key), hf_oracle(key)
    specials = sorted(enc.special_tokens_set)[:2]
    docs = e2e_docs() + [f"x {specials[0]}y{specials[1]}\n"]
    be = metal_backend("reverse", chunk_bytes=8000)
    expect = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    got = encode_all(be, enc, docs, frozenset(enc.special_tokens_set))
    assert_no_mismatch(got, expect, docs)
    assert be.model_plan(enc.model).mode == "device"
    assert dict(be.fallbacks) == cuda_fallbacks(enc, docs, 8000, frozenset(enc.special_tokens_set))


# ---------------------------------------------------------------- 3. the contract

def test_unavailable_here_says_why_and_auto_skips_it():
    ok, why = metal.available()
    assert not ok and "mx.metal.is_available() is False" in why and "gputok[metal]" in why
    assert gputok.backends.availability()["metal"] == (False, why)
    with pytest.raises(RuntimeError, match="metal backend is not available"):
        metal.create()


def test_available_names_the_gpu_and_info_prints_it(monkeypatch, capsys):
    """On a Mac, ``available()`` names the GPU (``mx.device_info()``) and ``gputok info`` prints
    it; MLX's answers are stood in for here."""
    info = {"device_name": "Apple M3 Max", "memory_size": 36 << 30}
    monkeypatch.setattr(mx.metal, "is_available", lambda: True)
    monkeypatch.setattr(mx, "device_info", lambda: info, raising=False)
    monkeypatch.setattr(metal.sys, "platform", "darwin")
    ok, why = metal.available()
    assert ok and why.endswith("Metal GPU: Apple M3 Max, 36 GiB unified memory")
    from gputok import cli

    assert cli.main(["info"]) == 0
    assert "Metal GPU: Apple M3 Max" in capsys.readouterr().out


def test_a_family_without_metal_shaders_is_cut_on_the_host_and_counted():
    """A scanner family the CUDA kernels know and the shaders do not (as when a new family's
    CUDA kernels land first) runs its pre-tokenization on the host: counted, ids unchanged."""
    be = metal_backend()
    be.dev.caps = replace(be.dev.caps, pretok_families=("cl3",))  # as if gpt2 had no shaders
    enc, tk = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")
    assert "no pretok kernels for the gpt2 rules" in be.plan(enc.model)["pretok"]
    docs = ["Hello world, it's 12345", "a" * 300, ""]
    with pytest.warns(FallbackWarning, match="no pretok kernels"):
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(3)] == \
        [tk.encode_ordinary(d) for d in docs]
    assert be.fallbacks == {("pretok", "scanner"): 1}
    assert "encode_pretok_spans" not in be.dev.launches


def test_out_of_memory_from_mlx_splits_the_batch_then_falls_back():
    """MLX's failed allocations (RuntimeError) reach the driver as MemoryError: the batch is
    split, then a document that still fails goes to the host, counted as on CUDA."""
    calls = []

    def failing(*a, **k):
        calls.append(1)
        raise RuntimeError("[metal::malloc] Attempting to allocate 4294967296 bytes which is "
                           "greater than the maximum allowed buffer size of 2147483648 bytes.")

    emulator = metal_kernel_maker(order="forward", seed=0)

    def make(**kernel):  # (mx.fast.metal_kernel's signature: this shader's allocation fails)
        return failing if kernel["name"].startswith("encode_merge_short") else emulator(**kernel)

    be = metal.emulated(make, block=32, max_blocks=3, chunk_bytes=4 << 20, min_chunk=1 << 20)
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = ["hello world " * 10, "x = 1\n" * 5]
    with pytest.warns(FallbackWarning, match="out of device memory"):
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(2)] == \
        [tk.encode_ordinary(d) for d in docs]
    assert be.fallbacks[("chunk", "out of memory")] >= 1 and len(calls) >= 2
    with pytest.raises(RuntimeError, match="not about memory"):  # other errors pass through
        with metal._oom_as_memory_error():
            raise RuntimeError("not about memory")


def test_dedup_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="64-bit compare-and-swap"):
        metal_backend(dedup=True)


def test_small_arrays_are_padded_for_the_device_address_space():
    dev = metal_backend().dev
    a = dev.put(np.arange(3, dtype=np.uint32))
    assert len(a) == 3 and a.a.shape == (metal.PAD,) and host(a).tolist() == [0, 1, 2]
    assert host(a[1:3]).tolist() == [1, 2]
