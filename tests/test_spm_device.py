"""SentencePiece BPE on the device: ``kernels/encode_spm.cu`` (CUDA; the native CPU device compiles
the same source), ``shaders/encode_spm_*.metal`` and the native one-call form
(``kernels/host_spm.h``), against their numpy references and the oracles.

1. The references (``gputok/stages/spm_arrays.py``, one per kernel, strung by ``spm_chunk``)
   give the families' host ids (themselves sentencepiece's and HF's: ``test_families.py``) on
   Mistral v1/v3/v7, botchan, the models trained in the tests, SPM-style tokenizer.json shapes
   with and without byte fallback and unk fusion, and crafted models (ties, -0.0, UNUSED,
   USER_DEFINED, CONTROL pieces).
2. Every kernel on the emulator equals its reference, array for array (the normaliser's too:
   botchan's nmt_nfkc, nfkc_cf, whitespace as suffix, kept whitespace): one thread order in the
   default tier, forward, reverse and shuffled in the full tier; the Metal shaders the same
   through ``MetalDevice`` over the strict shim.
3. The whole path (``DeviceBackend`` on the emulated CUDA device, the emulated Metal backend,
   the native device in one call and launch by launch) equals sentencepiece / HF with no
   fallback: the identity normaliser read by the kernels, a charsmap or collapsed whitespace
   rewritten by THE SPM NORMALISER's kernels; the host normaliser that remains (user-defined
   pieces with a charsmap, off the native CPU: tests/test_spm_user_defined_native.py) counted.
4. The native device's single-text path and chunk workers; a fuzz against sentencepiece.
"""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import families as F
import gputok
import testdata
from conftest import fuzz_examples
from devicekit import ORDER_IDS, ORDERS, emu_device
from gputok.backends import FallbackWarning, get_backend
from gputok.backends.device_stages import DeviceStages
from gputok.backends.driver import DeviceBackend
from gputok.backends.spm_device import SpmStages
from gputok.stages.pack import Documents
from gputok.stages.split import token_spans
from gputok.stages.spm_arrays import (encode_spm_fuse, encode_spm_merge, encode_spm_spans,
                                      entries_of, spm_chunk)
from gputok.stages.spm_plan import mark_array, plan_chunk
from gputok.backends.spm_tables import spm_tables


SPM_EDGE = ["", " ", "  ", "a", "  a  b ", "\u2581", "\u2581\u2581 x \u2581", "[REF]x[/REF]",
            "a[REF]b", "[REFERENCE_DOC_1] hi", "abc the cat[X]", "\ufb01 ab", "日本語のテキスト",
            "😀 x 👍🏽", "\x00\x01 \x7f", "a  \n\n b\t\tc", "é" * 300, "a" * 700, " " * 300 + "x",
            "x<s>y</s>", "<ctl> z", "Grüße, 世界! code: x += 1\n", "\u0301a\u0301 ", "\ufffd"]
ALPHABET = list("ab▁c  xé\n\t世界😀<>[]s/") + ["<s>", "</s>", "[INST]", "[REF]", "the", "▁the"]


def fuzz_texts(n: int, seed: int, max_len: int = 40) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, max_len)))
            for _ in range(n)]


def docs_for(per_kind: int = 3, chars: int = 500) -> list[str]:
    out = list(SPM_EDGE) + fuzz_texts(30, 3)
    for kind in testdata.KINDS:
        out += [d[:chars] for d in testdata.corpus(kind, max_mb=0.05)[:per_kind]]
    return out


_ENC: dict = {}


def spm_enc(name: str, tmp_path_factory) -> gputok.Encoding:
    if name not in _ENC:
        p = tmp_path_factory.mktemp("spm") / f"{name}.model"
        p.write_bytes(F.model_source(name))
        _ENC[name] = gputok.load(p)
    return _ENC[name]


def hf_enc(name: str, shape: str, tmp_path_factory, **kw) -> tuple:
    key = (name, shape, tuple(sorted(kw.items())))
    if key not in _ENC:
        cfg = F.spm_tokenizer_json(F.model_source(name), shape=shape, **kw)
        p = tmp_path_factory.mktemp("hfspm") / "tokenizer.json"
        p.write_text(json.dumps(cfg), "utf-8")
        _ENC[key] = gputok.load(p), F.hf_oracle_for(cfg)
    return _ENC[key]


def chunk_of(enc, docs, allowed=frozenset()):
    t = spm_tables(enc.model)
    buf, off = Documents(docs).packed()
    return t, plan_chunk(enc.model, t, buf, off, token_spans(enc.model, buf, off, allowed))


def host_ids(enc, docs, allowed=frozenset()) -> list:
    ids, off = get_backend("numpy").encode(enc.model, Documents(docs), allowed, frozenset())
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


def split_ids(ids, off) -> list:
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


# ---------------------------------------------------------------- 1. the references

REF_MODELS = ["mistral_v1", "mistral_v3", "mistral_v7", "botchan_bpe"] + list(F.TRAINED)


@pytest.mark.parametrize("name", REF_MODELS)
def test_references_equal_the_family_stages(name, tmp_path_factory):
    enc = spm_enc(name, tmp_path_factory)
    docs = docs_for()
    for allowed in (frozenset(), frozenset(enc.model.specials)):
        t, c = chunk_of(enc, docs, allowed)
        ids, off = spm_chunk(c.buf, c.doc_off, mark_array(c), c.sp_pos, c.sp_id, t)
        assert split_ids(ids, off) == host_ids(enc, docs, allowed)


@pytest.mark.parametrize("shape", F.SHAPES)
@pytest.mark.parametrize("bf,fuse", [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize("name", ["mistral_v3", "user_defined"])
def test_references_equal_hf(name, shape, bf, fuse, tmp_path_factory):
    enc, hf = hf_enc(name, shape, tmp_path_factory, byte_fallback=bf, fuse_unk=fuse)
    docs = docs_for(2, 300)
    t, c = chunk_of(enc, docs, frozenset(enc.model.specials))
    assert not isinstance(t, str) and t.hf
    ids, off = spm_chunk(c.buf, c.doc_off, mark_array(c), c.sp_pos, c.sp_id, t)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert split_ids(ids, off) == want


def test_crafted_models_references_and_native_equal_sentencepiece(tmp_path):
    """Random small models (test_cpu_ref_spm's): every one the device runs (identity or host
    normaliser) gives sentencepiece's ids through the references and the native device; the
    others are refused with the reason (UNUSED merge results, a missing "▁")."""
    from test_cpu_ref_spm import _crafted_model

    rng = random.Random(20261128)
    be = native_backend()
    ran = 0
    for k in range(fuzz_examples(120)):
        data = _crafted_model(rng)
        (tmp_path / f"{k}.model").write_bytes(data)
        enc, sp = gputok.load(tmp_path / f"{k}.model"), F.spm_oracle(data)
        texts = ["".join(rng.choice("ab▁c  xé<s>\n") for _ in range(rng.randrange(0, 30)))
                 for _ in range(30)]
        t = spm_tables(enc.model)
        if isinstance(t, str):
            assert "UNUSED" in t or "not a piece" in t
            continue
        ran += 1
        want = [sp.encode(x) for x in texts]
        _, c = chunk_of(enc, texts)
        assert split_ids(*spm_chunk(c.buf, c.doc_off, mark_array(c), c.sp_pos, c.sp_id,
                                    t)) == want, k
        if be is not None:
            with warnings.catch_warnings():  # (a host normaliser: counted, asserted elsewhere)
                warnings.simplefilter("ignore", FallbackWarning)
                got = enc.encode_batch_arrays(texts, disallowed_special=(), backend=be)
                singles = [enc.encode_ordinary(x) for x in texts]
            assert split_ids(*got) == want == singles, k
    assert ran > fuzz_examples(120) // 6


# ---------------------------------------------------------------- 2. each kernel

def to_host(x) -> np.ndarray:
    a = getattr(x, "a", None)  # a MetalArray: its logical contents
    return np.array(a, copy=True)[:len(x)] if a is not None else np.asarray(x)


def kernels_one_by_one(dev, t, c):
    """The three kernels launched alone on ``dev`` from the references' inputs: (ent,
    (scratch, count, src), (src, count) of the fuse or None), next to the references'."""
    st = DeviceStages(dev)
    sp = SpmStages(dev, st)
    _, up = sp.upload(t)
    a, s = up["arrays"], up["scalars"]
    n = c.n
    mark = mark_array(c)
    d_buf, d_mark = dev.upload([c.buf, mark])
    ent = dev.empty(n + 2, np.uint32)
    st.go("encode_spm_spans", n + 2,
          [d_buf, np.int64(n), d_mark, a["sym"], a["c_slots"], s["c_bits"], s["flags"], ent])
    want_ent = encode_spm_spans(c.buf, mark, t)
    got = {"ent": (to_host(ent), want_ent)}
    pstart, spec, _ = entries_of(want_ent, n, c.sp_pos, c.sp_id, c.doc_off)
    cap = len(pstart)
    room = n + cap
    d_pstart, d_spec, d_n = dev.upload([pstart, spec, np.array([cap], np.uint32)])
    scratch, src, owner, where = (dev.empty(room, np.uint32), dev.empty(cap, np.uint32),
                                  dev.empty(cap, np.uint32), dev.empty(room, np.uint32))
    count = dev.zeros(cap + 1, np.uint32)
    units = room // 256 + 2
    ws = [dev.empty(room, np.uint32), dev.empty(room, np.uint32), dev.empty(room, np.uint64),
          dev.empty(2 * units, np.uint64), dev.empty(units, np.uint32)]
    st.go("encode_spm_merge", cap,
          [d_buf, d_pstart, d_spec, d_n, d_mark, a["sym"], a["t_slots"], s["t_bits"], a["fin"],
           a["byte_ids"], s["flags"], s["unk"], s["space_id"], scratch, count, src, owner, where,
           *ws, np.int64(cap)])
    w_scratch, w_count, w_src = encode_spm_merge(c.buf, pstart, spec, mark, t)
    g_scratch, g_count, g_src = to_host(scratch), to_host(count), to_host(src)
    used = np.zeros(room, bool)
    for a0, k in zip(w_src.tolist(), w_count[:cap].tolist()):
        used[a0:a0 + k] = True
    got["merge"] = ((g_count[:cap], g_src, g_scratch[used]),
                    (w_count[:cap], w_src, w_scratch[used]))
    assert (to_host(owner) == 0xFFFFFFFF).all()
    if t.fuse:
        d_scratch, d_src, d_count = dev.upload([w_scratch, w_src, w_count])
        src2, count2 = dev.empty(cap, np.uint32), dev.zeros(cap + 1, np.uint32)
        st.go("encode_spm_fuse", cap, [d_pstart, d_spec, d_n, d_mark, d_scratch, d_src, d_count,
                                       s["unk"], src2, count2, np.int64(cap)])
        w_src2, w_count2 = encode_spm_fuse(pstart, spec, mark, w_scratch, w_src, w_count, t.unk)
        got["fuse"] = ((to_host(src2), to_host(count2)[:cap]), (w_src2, w_count2[:cap]))
        assert (w_count2 < w_count).any()  # (the docs have runs of unknowns across spans)
    return got


def norm_kernels_one_by_one(dev, enc, docs, allowed):
    """encode_spm_norm_len and _write launched alone on ``dev`` over a raw chunk's pieces,
    next to their references."""
    from gputok.stages.spm_arrays import encode_spm_norm_len, encode_spm_norm_write
    from gputok.stages.spm_plan import pieces

    t = spm_tables(enc.model)
    buf, off = Documents(docs).packed()
    ss, se, _ = token_spans(enc.model, buf, off, allowed)
    _, p_src, p_len, kind = pieces(len(buf), np.asarray(off, np.int64), ss, se)
    raw = np.frombuffer(buf, np.uint8)
    st = DeviceStages(dev)
    _, up = SpmStages(dev, st).upload(t)
    a, s = up["arrays"], up["scalars"]
    cm = [a["cm_units"], s["n_units"], a["cm_strings"], s["n_strings"], s["nflags"]]
    k = len(p_src)
    d_buf, d_src, d_len, d_kind = dev.upload([raw, p_src, p_len, kind])
    out_len = dev.empty(k, np.uint32)
    st.go("encode_spm_norm_len", k, [d_buf, d_src, d_len, d_kind, np.int64(k), *cm, out_len])
    want_len = encode_spm_norm_len(raw, p_src, p_len, kind, enc.model)
    lens = to_host(out_len)
    dst = np.concatenate([[0], np.cumsum(want_len)[:-1]]).astype(np.uint32)
    d_dst, d_lens = dev.upload([dst, want_len])
    out = dev.empty(int(want_len.sum()), np.uint8)
    st.go("encode_spm_norm_write", k, [d_buf, d_src, d_len, d_kind, np.int64(k), *cm, d_dst,
                                       d_lens, out])
    want = encode_spm_norm_write(raw, p_src, p_len, kind, enc.model)
    assert (kind == 0).any() and (want_len != p_len).any()  # (the normaliser changed things)
    return {"norm_len": (lens, want_len), "norm_write": (to_host(out), want)}


def assert_kernels_equal(got: dict) -> None:
    for name, (a, b) in got.items():
        for x, y in zip(a, b) if isinstance(a, tuple) else [(a, b)]:
            np.testing.assert_array_equal(x, y, err_msg=name)


KERNEL_CASES = [("mistral_v7", "spm"), ("botchan_bpe", "spm"), ("nfkc_cf_bytes", "spm"),
                ("mistral_v3", "metaspace_split"), ("user_defined", "legacy")]
NORM_DOCS = ["  Hello   world  ", "\tTab\tand\nnewline\n", "\ufb01 \u2460 \uff21\uff42\uff43 "
             "\u3000x\u3000", "e\u0301 \u1100\u1161\u11a8 \u212b", "   ", "", "\u2581 \u2581",
             "x" * 40 + "   " + "y", "end   "] + SPM_EDGE[:12]
NORM_MODELS = ["botchan_bpe", "nfkc_cf_bytes", "ws_suffix", "nmt_nfkc_cf_ws_pieces"]


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name,shape", KERNEL_CASES)
def test_each_kernel_on_the_emulator_equals_its_reference(name, shape, order, seed,
                                                          tmp_path_factory):
    enc = spm_enc(name, tmp_path_factory) if shape == "spm" else \
        hf_enc(name, shape, tmp_path_factory, byte_fallback=False)[0]
    docs = SPM_EDGE + fuzz_texts(20, 4) + ["x\u0378\u0379 y \u0378"]
    t, c = chunk_of(enc, docs, frozenset(enc.model.specials))
    assert_kernels_equal(kernels_one_by_one(emu_device(order, seed), t, c))


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", NORM_MODELS)
def test_normaliser_kernels_on_the_emulator_equal_their_references(name, order, seed,
                                                                   tmp_path_factory):
    enc = spm_enc(name, tmp_path_factory)
    assert spm_tables(enc.model).normalizer == "rewrite"
    docs = NORM_DOCS + fuzz_texts(20, 6) + ["<s>  a </s>b  "]
    assert_kernels_equal(norm_kernels_one_by_one(emu_device(order, seed), enc, docs,
                                                 frozenset(enc.model.specials)))


# ---------------------------------------------------------------- 3. the whole path

def native_backend(threads: int = 2):
    from gputok.backends import native

    return native.create(threads=threads) if native.available()[0] else None


def run_path(be, enc, docs, want, allowed=frozenset(), disallowed=frozenset()):
    ids, off = be.encode(enc.model, Documents(docs), allowed, disallowed)
    assert ids.dtype == enc.id_dtype and len(off) == len(docs) + 1
    got = split_ids(ids, off)
    bad = [i for i in range(len(docs)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} documents differ; first {docs[bad[0]][:80]!r}"


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["mistral_v7", "botchan_bpe"])
def test_emulated_device_equals_sentencepiece(name, order, seed, tmp_path_factory):
    enc, sp = spm_enc(name, tmp_path_factory), F.spm_oracle(F.model_source(name))
    docs = docs_for(2, 400)
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=3000)  # several chunks
    charsmap = name == "botchan_bpe"
    docs += NORM_DOCS
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run_path(be, enc, docs, [sp.encode(d) for d in docs], disallowed=frozenset())
        run_path(be, enc, docs, host_ids(enc, docs, frozenset(enc.model.specials)),
                 allowed=frozenset(enc.model.specials))
    assert not be.fallbacks
    merges = be.dev.launches["encode_spm_merge"]
    assert merges >= 4
    assert be.dev.launches["encode_spm_fuse"] == (merges if charsmap else 0)
    assert be.dev.launches["encode_spm_norm_len"] == (merges if charsmap else 0)
    plan = be.plan(enc.model)
    assert all(plan[k].startswith("device") for k in ("normalize", "pretok", "merge", "emit"))


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("shape", F.SHAPES)
def test_emulated_device_equals_hf(shape, order, seed, tmp_path_factory):
    enc, hf = hf_enc("mistral_v3", shape, tmp_path_factory)
    docs = docs_for(2, 300)
    be = DeviceBackend(emu_device(order, seed))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run_path(be, enc, docs, [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)],
                 allowed=frozenset(enc.model.specials))
    assert not be.fallbacks


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["mistral_v7", "botchan_bpe"])
def test_emulated_metal_equals_sentencepiece(name, order, seed, tmp_path_factory):
    pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")
    from emulator.mlx_bridge import metal_kernel_maker
    from gputok.backends import metal

    enc, sp = spm_enc(name, tmp_path_factory), F.spm_oracle(F.model_source(name))
    docs = docs_for(2, 300)
    be = metal.emulated(metal_kernel_maker(order=order, seed=seed), block=32, max_blocks=3)
    docs += NORM_DOCS
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run_path(be, enc, docs, [sp.encode(d) for d in docs])
    assert not be.fallbacks
    assert be.dev.launches["encode_spm_merge"] >= 1
    assert be.dev.launches.get("encode_spm_norm_write", 0) == int(name == "botchan_bpe")


@pytest.mark.parametrize("name,shape", KERNEL_CASES[:3])
def test_metal_shaders_equal_their_references(name, shape, tmp_path_factory):
    pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")
    from emulator.mlx_bridge import metal_kernel_maker
    from gputok.backends import metal

    enc = spm_enc(name, tmp_path_factory)
    t, c = chunk_of(enc, SPM_EDGE + fuzz_texts(12, 5), frozenset(enc.model.specials))
    be = metal.emulated(metal_kernel_maker(order="reverse", seed=0), block=32, max_blocks=3)
    assert_kernels_equal(kernels_one_by_one(be.dev, t, c))
    if t.normalizer == "rewrite":
        assert_kernels_equal(norm_kernels_one_by_one(be.dev, enc, NORM_DOCS,
                                                     frozenset(enc.model.specials)))


@pytest.mark.parametrize("name", ["mistral_v1", "mistral_v3", "mistral_v7", "botchan_bpe",
                                  "nfkc_cf_bytes", "ws_suffix", "nmt_nfkc_cf_ws_pieces"])
def test_native_device_equals_sentencepiece(name, tmp_path_factory):
    be = native_backend()
    if be is None:
        pytest.skip("no C++ compiler: the native device is unavailable")
    enc, sp = spm_enc(name, tmp_path_factory), F.spm_oracle(F.model_source(name))
    docs = docs_for(10, 4000) + testdata.botchan_lines()[:300] + NORM_DOCS
    want = [sp.encode(d) for d in docs]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        run_path(be, enc, docs, want)  # one call per chunk, chunks side by side
        # launch by launch on the same device
        sp_stages = SpmStages(be.dev, be.stages)
        t, up = sp_stages.tables(enc.model)
        buf, off = Documents(docs).packed()
        c = plan_chunk(enc.model, t, buf, off, token_spans(enc.model, buf, off,
                                                                   frozenset()),
                       lambda *a: sp_stages.rewrite(t, up, *a))
        ids, off = sp_stages.run(t, up, c, enc.id_dtype)
        assert split_ids(ids, off) == want
        # one text at a time: encode's one native call
        assert [enc.encode_ordinary(d) for d in docs[:60]] == want[:60]
    assert be.dev.launches["encode_spm_merge"] >= 2


@pytest.mark.parametrize("threads", [1, 2])
def test_native_memo_of_merged_spans_is_per_model_and_per_dummy(threads, tmp_path_factory):
    """The chunk workers' memos of merged spans (``kernels/host_spm.h``): two models take
    turns on the same threads over the same words (a span memoised for one is merged again
    for the other: ENC_SPM_TAB_MODEL), words that start a document (the dummy "▁") and the same
    words inside one, over and over (memo hits); every pass equals sentencepiece."""
    be = native_backend(threads)
    if be is None:
        pytest.skip("no C++ compiler: the native device is unavailable")
    rng = random.Random(3)
    words = ["the", "cat", "é", "世界", "theatre", "cathedral", "ab", "▁x", "😀", "tee"]
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            for _ in range(400)] + [w for w in words] + ["  " + w for w in words]
    models = [(spm_enc(n, tmp_path_factory), F.spm_oracle(F.model_source(n)))
              for n in ("mistral_v1", "mistral_v3", "botchan_bpe")]
    for _ in range(2):
        for enc, sp in models:
            run_path(be, enc, docs, [sp.encode(d) for d in docs])


def test_native_single_texts_take_one_call(tmp_path_factory):
    """``encode`` of one text on the native device: one call, special tokens as the contract
    says, the counters show it; a short text stays on the host path (no call)."""
    from gputok.stages import counters

    be = get_backend("auto")
    if be.name != "native":
        pytest.skip(f"auto is {be.name} here")
    enc = spm_enc("mistral_v7", tmp_path_factory)
    text = "Hello [INST] world, this is a text of some length " * 8 + "[REF] ok </s> 😀"
    before = counters["device.spm_texts"]
    got = enc.encode(text, allowed_special={"[INST]", "</s>"})
    assert counters["device.spm_texts"] == before + 1
    assert got == host_ids(enc, [text], frozenset({"[INST]", "</s>"}))[0]
    with pytest.raises(ValueError, match="special token"):
        enc.encode(text)
    merges = be.dev.launches.get("encode_spm_merge", 0)
    short = ["Hello world", "ok", "", " x  y "]
    assert [enc.encode_ordinary(t) for t in short] == host_ids(enc, short, frozenset())
    assert [enc.encode(t) for t in short] == host_ids(enc, short, frozenset())
    assert be.dev.launches["encode_spm_merge"] == merges + 8  # (one call each, counted)


# ---------------------------------------------------------------- 4. the fallbacks that remain

def test_a_host_normaliser_is_a_counted_fallback(tmp_path_factory):
    """User-defined pieces with a charsmap (matched before any rule; the CUDA and Metal
    normaliser kernels take no trie: the normaliser stays on the host, segment by segment),
    counted as ("normalize", "host"); the merge on the device."""
    enc, sp = spm_enc("user_defined", tmp_path_factory), F.spm_oracle(
        F.model_source("user_defined"))
    t = spm_tables(enc.model)
    assert t.normalizer == "rewrite" and len(t.ud_trie)
    be = DeviceBackend(emu_device())
    docs = ["abc the cat[X] ﬁ", "  <s>x  "] + fuzz_texts(10, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        run_path(be, enc, docs, [sp.encode(d) for d in docs])
    assert be.fallbacks == {("normalize", "host"): 1}
    assert be.plan(enc.model)["normalize"] == "host" and be.dev.launches["encode_spm_merge"]


def test_a_model_the_device_cannot_run_is_a_counted_fallback(tmp_path):
    """UNUSED pieces that merges make (a sentence-wide split-back map): the host stages, warned
    once and counted as ("merge", "SentencePiece BPE") with the reason."""
    data = F.model_source("mistral_v1")
    from cpu_ref import spm_proto

    proto = spm_proto.parse_model(data)
    pieces = [(p, s, spm_proto.UNUSED if p == "▁the" else t) for p, s, t in proto.pieces]
    crafted = F.model_bytes(pieces, trainer={"byte_fallback": True, "model_type": 2})
    (tmp_path / "u.model").write_bytes(crafted)
    enc, sp = gputok.load(tmp_path / "u.model"), F.spm_oracle(crafted)
    be = DeviceBackend(emu_device())
    docs = ["the other day the cat", "x"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_path(be, enc, docs, [sp.encode(d) for d in docs])
    assert be.fallbacks == {("merge", "SentencePiece BPE"): 1}
    assert any("UNUSED" in str(w.message) for w in caught)
    assert not be.dev.launches


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(st.lists(st.lists(st.sampled_from(ALPHABET + list("XYZ .,!?\u3000\u2581é")),
                         max_size=40).map("".join), min_size=1, max_size=8))
def test_fuzz_native_equals_sentencepiece(texts):
    be = native_backend()
    if be is None:
        return
    for name in ("mistral_v7", "botchan_bpe"):
        enc = _ENC.get(name) or gputok.load(testdata.family_path(name))
        _ENC[name] = enc
        sp = F.spm_oracle(F.model_source(name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            got = split_ids(*enc.encode_batch_arrays(texts, disallowed_special=(), backend=be))
        assert got == [sp.encode(x) for x in texts]


@pytest.mark.parametrize("name", ["mistral_v1", "botchan_bpe"])
def test_decode_equals_sentencepiece_and_refuses_bad_ids(name, tmp_path_factory):
    """decode (its joined path) equals sentencepiece's, and an id outside the vocabulary,
    negative ones included (a tuple lookup would wrap them), is a KeyError naming it."""
    enc, sp = spm_enc(name, tmp_path_factory), F.spm_oracle(F.model_source(name))
    docs = docs_for(6, 2000) + NORM_DOCS
    ids = [sp.encode(d) for d in docs]
    assert [enc.decode(w) for w in ids] == [sp.decode(w) for w in ids]
    assert enc.decode_batch(ids) == sp.decode(ids)
    n = enc.n_vocab
    for bad in (-1, -n, -n - 1, n, 2 * n - 1, 2 * n, 10 ** 9):
        for seq in ([bad], [5, bad], [bad, 5, 6]):
            with pytest.raises(KeyError, match=f"invalid token for decoding: {bad}"):
                enc.decode(seq)
