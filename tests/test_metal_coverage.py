"""The Metal backend runs every encode stage the CUDA kernels run: o200k pre-tokenization, the
normaliser's quick check, the WordPiece match and SentencePiece BPE as shaders, with no host
fallback.

Mirrors ``test_device_coverage.py`` (the CUDA kernels on the emulator, whose inputs and
references these reuse) for ``gputok.backends.metal.MetalDevice`` on the emulator over
``mlx[cpu]`` arrays (``emulator.mlx_bridge``: ``mx.fast.metal_kernel`` replaced, everything
else the backend's own code):

1. ``shaders/encode_o200k_classify.metal`` + ``encode_o200k_spans.metal`` in forward / reverse /
   shuffled thread orders: piece starts as the regex gives them (corpora, edge cases, fuzzed
   o200k text), with special tokens as the host paths cut them, and the same flags as the CUDA
   kernels; o200k_base and o200k_harmony end to end against tiktoken, warnings as errors.
2. ``shaders/encode_nfc_flags.metal`` + ``encode_nfc_compact.metal``: flagged positions as
   ``nfc_unsafe`` gives them; Qwen2 on NFD text against HF ``tokenizers`` with the same
   host-normalised spans and bytes counted as the CUDA kernels count them.
3. ``shaders/encode_wordpiece.metal``: MiniLM (BERT WordPiece) against HF, no merge fallback.
4. ``shaders/encode_spm_*.metal``: Mistral v7 and botchan against sentencepiece, no fallback
   (botchan's charsmap normaliser rewrites the chunk on the GPU).
"""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")

import gputok  # noqa: E402
from conftest import hf_encoding, hf_oracle, tiktoken_oracle  # noqa: E402
from gputok.backends import FallbackWarning, hostplan, metal  # noqa: E402
from gputok.backends.driver import DeviceBackend  # noqa: E402
from gputok.patterns import O200K  # noqa: E402
from devicekit import (ORDER_IDS, ORDERS, assert_pieces_like_regex, assert_same,  # noqa: E402
                       corpus_snippets, device_entries, e2e_docs, emu_device, pack, specials_of,
                       tiny_encoding)
from test_device_coverage import NFD_DOCS, nfd, o200k_docs, o200k_texts  # noqa: E402
from test_metal_encode import metal_backend, metal_entries  # noqa: E402


# ---------------------------------------------------------------- 1. o200k

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_o200k_pretok_matches_regex_and_the_cuda_kernels(order, seed):
    enc = tiny_encoding(O200K)
    be = metal_backend(order, seed)
    assert be.model_plan(enc.model).mode == "device", be.describe(enc.model)
    docs = o200k_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = got = metal_entries(be, enc, buf, off)
    assert_pieces_like_regex(docs, buf, off, got, O200K, 'metal_coverage')
    assert be.dev.launches["encode_o200k_spans"] == 1
    assert "encode_pretok_spans" not in be.dev.launches
    cuda = device_entries(DeviceBackend(emu_device(order, seed)), enc, buf, off)
    for a, b in zip((pstart, spec, doc_entry), cuda):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_o200k_with_special_tokens_matches_host_paths(order, seed):
    enc = gputok.get_encoding("o200k_harmony")
    tokens = sorted(enc.special_tokens_set)[:3]
    rng = random.Random(seed)
    docs = [a + rng.choice(tokens) + b for a, b in zip(o200k_texts(80, 7), o200k_texts(80, 8))]
    docs += [tokens[0] * 2, f"x's{tokens[1]}'s", f"\u0301{tokens[0]}\u0301", ""]
    buf, off = pack(docs)
    sp = specials_of(enc, buf, off, tokens)
    got = metal_entries(metal_backend(order, seed), enc, buf, off, sp)
    for mode in ("scanner", "split"):
        want = metal_entries(metal_backend(order, seed, pretok=mode), enc, buf, off, sp)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=mode)
    assert (got[1] < hostplan.GAP).sum() == len(sp[0]) >= 80


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["o200k_base", "o200k_harmony"])
def test_metal_o200k_pipeline_matches_tiktoken_without_fallbacks(name, order, seed):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()[::2] + o200k_texts(60, 9, 60)
    be = metal_backend(order, seed, chunk_bytes=6000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
    assert not be.fallbacks and be.dev.launches["encode_o200k_spans"] > 2
    assert be.plan(enc.model)["pretok"].startswith("device")


# ---------------------------------------------------------------- 2. the quick check

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_quick_check_flags_what_nfc_unsafe_flags(order, seed):
    from gputok.unicode import nfc_unsafe

    enc = hf_encoding("qwen2")
    be = metal_backend(order, seed)
    plan = be.model_plan(enc.model)
    assert plan.norm_form == "NFC"
    docs = NFD_DOCS + nfd(corpus_snippets()[::4]) + list(corpus_snippets()[1::4])
    buf, _ = pack(docs)
    d_buf = be.dev.upload([np.frombuffer(buf, np.uint8)])[0]
    got = be.stages.nfc_check(plan.tables, len(buf), d_buf)
    text = buf.decode()
    cps = np.array([ord(c) for c in text], np.uint32)
    first_byte = np.cumsum([0] + [len(c.encode()) for c in text[:-1]])
    np.testing.assert_array_equal(got, first_byte[nfc_unsafe(cps)])
    assert len(got) > 20 and be.dev.launches == {"encode_nfc_flags": 1, "encode_nfc_compact": 1}


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_qwen2_nfd_input_matches_hf_with_the_host_spans_cuda_counts(order, seed):
    enc, hf = hf_encoding("qwen2"), hf_oracle("qwen2")
    clean = list(corpus_snippets()[::3])
    docs = nfd(NFD_DOCS) + nfd(corpus_snippets()[1::6]) + clean
    sp = sorted(enc.special_tokens_set)[0]
    docs.append(f"e\u0301{sp}\u0301x")
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    be = metal_backend(order, seed, chunk_bytes=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, want, allowed=frozenset([sp]))
    assert not be.fallbacks and be.plan(enc.model)["normalize"] != "host"
    cuda = DeviceBackend(emu_device(order, seed), chunk_bytes=5000)
    assert_same(enc, cuda, docs, want, allowed=frozenset([sp]))
    assert be.host_normalized == cuda.host_normalized and be.host_normalized["spans"] > 10
    # already-NFC text: the check runs on the device and nothing comes back to the host
    be2 = metal_backend(order, seed, chunk_bytes=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be2, clean, [e.ids for e in hf.encode_batch(clean,
                                                                     add_special_tokens=False)])
    assert not be2.host_normalized and not be2.fallbacks
    assert be2.dev.launches["encode_nfc_flags"] >= 2 and "encode_nfc_compact" not in \
        be2.dev.launches


# ---------------------------------------------------------------- 3. WordPiece

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_wordpiece_shader_matches_its_numpy_reference(order, seed, corpora):
    from gputok.components.segmenters.wordpiece import encode_wordpiece
    from test_wordpiece import _words, trio

    enc, _, _ = trio("uncased")
    words = _words(corpora)
    raw = [w.encode("utf-8") for w in words]
    pstart = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(b) for b in raw], out=pstart[1:])
    buf = np.frombuffer(b"".join(raw), np.uint8)
    want_scratch, want_count = encode_wordpiece(buf, pstart, enc.model.segmenter)
    be = metal_backend(order, seed)
    plan = be.model_plan(enc.model)
    # entries as the driver builds them: the words, one special token, the sentinel
    spec = np.full(len(raw) + 2, hostplan.NORMAL, np.uint32)
    spec[-2], spec[-1] = 101, hostplan.GAP
    ps = np.concatenate([pstart, [pstart[-1] + 1]]).astype(np.uint32)
    data = np.concatenate([buf, np.frombuffer(b"#", np.uint8)])
    d_data, d_ps, d_spec, d_n = be.dev.upload([data, ps, spec,
                                               np.array([len(spec)], np.uint32)])
    owner, count, scratch = be.stages.wordpiece(plan.tables, len(data), d_data, d_ps, d_spec,
                                                d_n, len(spec))
    count = np.array(count.a)[:len(spec) + 1]
    scratch, owner = np.array(scratch.a), np.array(owner.a)[:len(spec)]
    assert count[:len(raw)].tolist() == want_count.tolist() and len(raw) > 1000
    # the token, the sentinel (the spare slot past the entries is never read: the exclusive
    # scan's sums up to the last entry do not see it, and no shader fills it)
    assert count[len(raw)] == 1 and scratch[ps[-2]] == 101 and count[len(raw) + 1] == 0
    assert (owner == 0xFFFFFFFF).all()  # every entry final: nothing left for a merge
    for k in range(len(raw)):
        a = int(pstart[k])
        assert scratch[a:a + count[k]].tolist() == want_scratch[a:a + want_count[k]].tolist()
    assert be.dev.launches == {"encode_wordpiece": 1}


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_metal_minilm_wordpiece_matches_hf_without_a_merge_fallback(order, seed, corpora):
    from test_wordpiece import EDGES, trio

    enc, _, hf = trio("uncased")
    docs = EDGES + [d[:1200] for kind in corpora for d in corpora[kind][:4]]
    be = metal_backend(order, seed, chunk_bytes=2048)  # several chunks in flight
    assert be.dev.has_kernel("encode_wordpiece")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == [
        e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert be.dev.launches["encode_wordpiece"] > 3 and "encode_merge_short" not in \
        be.dev.launches
    # the words are cut on the host, as on CUDA (one counted fallback, warned once); the match
    # runs on the device: no ("merge", "WordPiece")
    assert dict(be.fallbacks) == {("pretok", "split"): 1}
    assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 1
    assert be.plan(enc.model)["merge"].startswith("device")


# ---------------------------------------------------------------- 4. SentencePiece BPE

@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["mistral_v7", "botchan_bpe"])
def test_metal_sentencepiece_matches_sentencepiece_without_a_merge_fallback(name, order, seed,
                                                                            tmp_path):
    """``shaders/encode_spm_*.metal``: the cuts, the merge, THE UNK RUN and the normaliser
    (Mistral's identity read as they go, botchan's charsmap rewriting the chunk) on the GPU, as
    on CUDA: no fallback."""
    import families as F

    (tmp_path / "m.model").write_bytes(F.model_source(name))
    enc, sp = gputok.load(tmp_path / "m.model"), F.spm_oracle(F.model_source(name))
    docs = ["Hello  world", "", "日本語 😀 \u2581", "x" * 300] + list(corpus_snippets()[::6])
    be = metal_backend(order, seed, chunk_bytes=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == [sp.encode(d) for d in docs]
    assert dict(be.fallbacks) == {}
    assert be.dev.launches["encode_spm_merge"] >= 2
    assert be.plan(enc.model)["merge"].startswith("device")
