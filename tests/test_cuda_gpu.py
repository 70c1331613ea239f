"""The CUDA backend on a real GPU (CuPy): full parity with the oracle libraries.

Skipped, with the reason, where CuPy or a CUDA device is missing (every CI machine today); run
on a GPU machine with::

    pip install -e ".[test,cuda12]"          # or [cuda13] for a CUDA 13 driver
    GPUTOK_CORPUS_MB=8 python -m pytest tests/test_cuda_gpu.py -m gpu -v

Every named encoding x every corpus kind must give 0 mismatched documents against tiktoken
(HF tokenizers for the tokenizer.json vocabularies); then fuzzing, special tokens, small chunks
(several in flight on the two streams), piece dedup, and out-of-memory handling (CuPy's pool
limit forces the batch to split, then to fall back to the CPU).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gputok
from conftest import (CORPUS_KINDS, EXTRA_NAMED, HF_FILES, NAMED, fuzz_examples, hf_encoding,
                      hf_oracle, tiktoken_oracle)
from gputok.backends import FallbackWarning, cuda

_OK, _WHY = cuda.available()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _OK, reason=f"no CUDA GPU for the cuda backend: {_WHY}")]


@pytest.fixture(scope="module")
def backend():
    return cuda.create()


# The stages this version runs on the host for a model on the cuda backend: any other fallback
# fails the test (a warning is an error), and these must really be the only ones counted. None
# since o200k (encode_o200k.cu) and Qwen2's NFC (encode_nfc.cu) run on the device.
HOST_STAGES: dict = {}


class only_expected_fallbacks:
    """Every fallback warning is an error, except the model's known host stages."""

    def __init__(self, backend, name: str):
        self.backend, self.allowed = backend, HOST_STAGES.get(name, set())

    def __enter__(self):
        self.before = dict(self.backend.fallbacks)
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("error", FallbackWarning)
        if self.allowed:
            warnings.filterwarnings("ignore", category=FallbackWarning,
                                    message=".*(o200k|normaliser)")
        return self

    def __exit__(self, *exc):
        self._w.__exit__(*exc)
        new = {k for k, v in self.backend.fallbacks.items() if v > self.before.get(k, 0)}
        assert new <= self.allowed, f"unexpected host fallbacks: {new - self.allowed}"
        return False


def _mismatches(got_ids, got_off, expect):
    got = [got_ids[got_off[i]:got_off[i + 1]].tolist() for i in range(len(expect))]
    return [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]


def _report(label, docs, bad):
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"\n[cuda parity] {label}: {len(docs)} docs, {nbytes / 1e6:.2f} MB, {len(bad)} mismatched")


def test_device_and_kernels(backend):
    assert backend.dev.kind == "cupy"
    enc = gputok.get_encoding("cl100k_base")
    ids, off = enc.encode_batch_arrays(["hello world"], backend=backend)
    assert ids.tolist() == [15339, 1917] and off.tolist() == [0, 2]
    print(backend.describe(enc.model))


@pytest.mark.parametrize("kind", CORPUS_KINDS)
@pytest.mark.parametrize("name", NAMED)
def test_named_vs_tiktoken(backend, name, kind, corpora):
    docs = corpora[kind]
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    expect = tk.encode_ordinary_batch(docs, num_threads=8)
    with only_expected_fallbacks(backend, name):
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    bad = _mismatches(ids, off, expect)
    _report(f"{name} x {kind}", docs, bad)
    assert not bad, f"first mismatched doc: {bad[0]}"
    assert ids.dtype == enc.id_dtype


@pytest.mark.parametrize("name", EXTRA_NAMED)
def test_extra_named_vs_tiktoken(backend, name, corpora):
    docs = [d for kind in CORPUS_KINDS for d in corpora[kind][:200]]
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    with only_expected_fallbacks(backend, name):
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    bad = _mismatches(ids, off, [tk.encode_ordinary(d) for d in docs])
    _report(name, docs, bad)
    assert not bad


@pytest.mark.parametrize("kind", CORPUS_KINDS)
@pytest.mark.parametrize("key", list(HF_FILES))
def test_hf_vs_tokenizers(backend, key, kind, corpora):
    docs = corpora[kind]
    enc, hf = hf_encoding(key), hf_oracle(key)
    expect = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    with only_expected_fallbacks(backend, key):
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=backend)
    bad = _mismatches(ids, off, expect)
    _report(f"{key} x {kind}", docs, bad)
    assert not bad


@pytest.mark.parametrize("name", NAMED)
def test_special_tokens(backend, name, corpora):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    specials = sorted(enc.special_tokens_set)
    docs = [d[:2000] + specials[i % len(specials)] + d[2000:4000]
            for i, d in enumerate(corpora["code"][:300])]
    with only_expected_fallbacks(backend, name):
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=backend)
        assert not _mismatches(ids, off, [tk.encode(d, allowed_special="all") for d in docs])
        with pytest.raises(ValueError, match="allowed_special"):
            enc.encode_batch_arrays(docs, backend=backend)


@pytest.mark.parametrize("dedup", [False, True])
def test_small_chunks_and_dedup(dedup, corpora):
    """Many chunks: two in flight on two streams, pinned buffers reused, results in order."""
    be = cuda.DeviceBackend(cuda.CupyDevice(), chunk_bytes=64 << 10, dedup=dedup)
    docs = [d for kind in CORPUS_KINDS for d in corpora[kind]]
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    with only_expected_fallbacks(be, "cl100k_base"):
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
    bad = _mismatches(ids, off, tk.encode_ordinary_batch(docs, num_threads=8))
    _report(f"cl100k small chunks dedup={dedup}", docs, bad)
    assert not bad


def test_long_pieces_are_not_quadratic(backend):
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = ["a" * 200_000, " " * 50_000 + "x", "\t" * 4096, "ab" * 30_000]
    ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    assert not _mismatches(ids, off, [enc.encode_ordinary(d) for d in docs])
    assert ids[off[3]:off[4]].tolist() == tk.encode_ordinary(docs[3])


def test_huge_pieces_merge_on_a_block_in_seconds(backend):
    """A multi-MB single piece merges on a whole block of threads (encode_merge_huge), not one
    thread for seconds (a display GPU's watchdog): ids equal the native device's and each piece
    takes under a second of kernels on an H200 (one thread took seconds)."""
    import time

    from gputok.backends import native

    enc = gputok.get_encoding("cl100k_base")
    cjk = ("天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏" * 60000)[:1_000_000]
    host = native.create(threads=2)
    for doc in (" " * 10**7, "a" * 10**7, cjk):
        enc.encode_batch_arrays([doc[:1000]], backend=backend)  # kernels compiled, tables up
        t0 = time.perf_counter()
        ids, off = enc.encode_batch_arrays([doc], disallowed_special=(), backend=backend)
        took = time.perf_counter() - t0
        want, _ = enc.encode_batch_arrays([doc], disallowed_special=(), backend=host)
        assert ids.tolist() == want.tolist(), doc[:4]
        assert took < 3.0, (doc[:4], took)


def test_out_of_memory_splits_then_falls_back(corpora):
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = [d for kind in CORPUS_KINDS for d in corpora[kind]]
    expect = tk.encode_ordinary_batch(docs, num_threads=8)
    nbytes = sum(len(d.encode()) for d in docs)
    be = cuda.DeviceBackend(cuda.CupyDevice(), chunk_bytes=nbytes)
    pool = be.dev._pool  # the adapter's own pool (not CuPy's default, which the user shares)
    be.model_plan(enc.model)  # tables first, then cap the pool below one chunk's needs
    try:
        pool.set_limit(size=pool.used_bytes() + 16 * nbytes)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)  # split, never on the host
            ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
        assert not _mismatches(ids, off, expect) and not be.fallbacks
        pool.set_limit(size=pool.used_bytes() + (1 << 16))
        with pytest.warns(FallbackWarning, match="out of device memory"):
            ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
        assert not _mismatches(ids, off, expect)
    finally:
        pool.set_limit(size=0)  # no limit


def test_profile_reports_stages(backend, corpora):
    enc = gputok.get_encoding("cl100k_base")
    backend.profile = []
    try:
        enc.encode_batch_arrays(corpora["prose"], disallowed_special=(), backend=backend)
        stages = backend.profile[0]["ms"]
    finally:
        backend.profile = None
    assert set(stages) == {"h2d", "pretok", "entries", "merge", "emit"}
    assert all(v >= 0 for v in stages.values())


TRICKY = list("aZéÉßǅʰ中日本ﾟ\u0301\u0915\u093f0129٣²½'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
              ".,!?-_/\\\"#$%&*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0f") + [
    "'s", "'ll", "'VE", "\r\n", "  ", "<|endoftext|>"]
texts = st.one_of(st.lists(st.sampled_from(TRICKY), max_size=80).map("".join),
                  st.tuples(st.sampled_from(TRICKY), st.integers(1, 600)).map(lambda t: t[0] * t[1]))


@pytest.mark.parametrize("name", NAMED)
@settings(max_examples=fuzz_examples(), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(texts, min_size=1, max_size=16))
def test_fuzz_vs_tiktoken(backend, name, batch):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    with only_expected_fallbacks(backend, name):
        ids, off = enc.encode_batch_arrays(batch, disallowed_special=(), backend=backend)
    assert not _mismatches(ids, off, [tk.encode_ordinary(t) for t in batch])
    assert np.all(np.diff(off) >= 0)
