"""Parity on real corpora: gputok vs tiktoken / HF tokenizers, counting mismatched documents.

Corpora (prose, code, multilingual, emoji; ``$GPUTOK_CORPUS_MB`` MB of each) come from pinned
registry packages and files on the machine, see ``tests/testdata.py``. The batch suites run on
the numpy backend and on the native CPU backend (the device kernels compiled for the host). Every test prints its
document and byte counts so CI logs show what was compared; the mismatch count must be 0.
"""

from __future__ import annotations

import pytest

import gputok
from conftest import CORPUS_KINDS, EXTRA_NAMED, HF_FILES, NAMED, hf_encoding, hf_oracle, \
    tiktoken_oracle
from gputok.backends import native

_native_ok, _native_why = native.available()
# the portable path, and the kernels compiled for this CPU (every kernel on real volumes)
BACKENDS = ["numpy", pytest.param("native", marks=pytest.mark.skipif(
    not _native_ok, reason=f"native backend unavailable: {_native_why}"))]


def _report(label, docs, mismatched):
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"\n[parity] {label}: {len(docs)} docs, {nbytes / 1e6:.2f} MB, "
          f"{len(mismatched)} mismatched")
    return nbytes


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CORPUS_KINDS)
@pytest.mark.parametrize("name", NAMED)
def test_named_vs_tiktoken(name, kind, backend, corpora):
    docs = corpora[kind]
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    expect = tk.encode_ordinary_batch(docs, num_threads=2)
    ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    mismatched = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
    _report(f"{name} x {kind} ({backend}, batch arrays)", docs, mismatched)
    assert not mismatched, f"first mismatched doc: {mismatched[0]}"
    # the one-string API too, on a slice (it shares the cache, so this is cheap)
    for d, e in zip(docs[:50], expect[:50]):
        assert enc.encode_ordinary(d) == e


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", EXTRA_NAMED)
def test_extra_named_vs_tiktoken(name, backend, corpora):
    docs = [d for kind in CORPUS_KINDS for d in corpora[kind][:40]]
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    if backend == "numpy":  # the one-string API
        got = [enc.encode_ordinary(d) for d in docs]
    else:
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
        got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    mismatched = [i for i, (g, d) in enumerate(zip(got, docs)) if g != tk.encode_ordinary(d)]
    _report(f"{name} ({backend})", docs, mismatched)
    assert not mismatched
    assert enc.special_tokens_set == tk.special_tokens_set and enc.n_vocab == tk.n_vocab


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CORPUS_KINDS)
@pytest.mark.parametrize("key", list(HF_FILES))
def test_hf_vs_tokenizers(key, kind, backend, corpora):
    docs = corpora[kind]
    enc, hf = hf_encoding(key), hf_oracle(key)
    expect = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=backend)
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    mismatched = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
    _report(f"{key} x {kind} ({backend})", docs, mismatched)
    assert not mismatched, f"first mismatched doc: {mismatched[0]}"


@pytest.mark.parametrize("key", list(HF_FILES))
def test_hf_specials_and_decode(key):
    enc, hf = hf_encoding(key), hf_oracle(key)
    specials = sorted(enc.special_tokens_set)[:3]
    text = f"hi {specials[0]} there{specials[1]}\n{specials[-1]}end"
    assert enc.encode(text, allowed_special="all") == hf.encode(text, add_special_tokens=False).ids
    with pytest.raises(ValueError, match="allowed_special"):
        enc.encode(text)
    ids = enc.encode("Grüße, 世界! 👋🏽 code: x += 1\n")
    assert enc.decode(ids) == hf.decode(ids) == "Grüße, 世界! 👋🏽 code: x += 1\n"
    assert enc.n_vocab == hf.get_vocab_size(with_added_tokens=True)
