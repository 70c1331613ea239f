"""Parity over the full corpora on the native CPU device: every document the pinned sources give
this machine (no ``$GPUTOK_CORPUS_MB`` cap; about 256 MB on the CI image: prose 32, code 135,
multilingual 88, emoji 0.7), against tiktoken for the named encodings and HF tokenizers for the
byte-level tokenizer.json files. 0 mismatched documents, and no host fallback.

These take minutes: the full tier (``--full`` or ``GPUTOK_FULL=1``; ``.ci/run`` turns it on;
``GPUTOK_PARITY_FULL=1`` still runs them alone). The corpus is compared in slices of about ``SLICE_BYTES`` so
neither side's ids are ever all in Python lists at once; each slice is compared as one flat
array of ids plus document lengths, and only a slice that differs is compared per document.
"""

from __future__ import annotations

import os
import warnings
from itertools import chain

import numpy as np
import pytest

import gputok
import testdata
from conftest import HF_FILES, NAMED, hf_encoding, hf_oracle, tiktoken_oracle
from gputok.backends import FallbackWarning, native

_native_ok, _native_why = native.available()
pytestmark = [
    pytest.mark.slow,
    *([] if os.environ.get("GPUTOK_PARITY_FULL") == "1" else [pytest.mark.full]),
    pytest.mark.skipif(not _native_ok, reason=f"native backend unavailable: {_native_why}"),
]

SLICE_BYTES = 16 << 20


@pytest.fixture(scope="module")
def full_corpora() -> dict:
    return {kind: testdata.corpus(kind, 0) for kind in testdata.KINDS}


@pytest.fixture(scope="module")
def backend():
    return native.create()


def _slices(docs: list):
    part, size = [], 0
    for d in docs:
        part.append(d)
        size += len(d)
        if size >= SLICE_BYTES:
            yield part
            part, size = [], 0
    if part:
        yield part


def _compare(label: str, docs: list, ours, oracle) -> None:
    """``ours(part) -> (ids, offsets)``, ``oracle(part) -> list of id lists``; asserts 0
    mismatched documents over all slices and prints the counts for the CI log."""
    n_docs = n_bytes = n_ids = 0
    bad: list = []
    for part in _slices(docs):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)  # no host fallback
            ids, off = ours(part)
        want = oracle(part)
        lens = np.fromiter(map(len, want), np.int64, len(want))
        flat = np.fromiter(chain.from_iterable(want), np.int64, int(lens.sum()))
        if not (np.array_equal(np.diff(off), lens) and np.array_equal(ids.astype(np.int64), flat)):
            bad += [n_docs + i for i, w in enumerate(want)
                    if ids[off[i]:off[i + 1]].tolist() != w]
        n_docs += len(part)
        n_bytes += sum(len(d.encode("utf-8")) for d in part)
        n_ids += len(flat)
    print(f"\n[full parity] {label}: {n_docs} docs, {n_bytes / 1e6:.1f} MB, {n_ids} ids, "
          f"{len(bad)} mismatched")
    assert n_docs == len(docs) and n_bytes > 0
    assert not bad, f"{label}: {len(bad)} documents differ; first {bad[0]}: {docs[bad[0]][:80]!r}"


@pytest.mark.parametrize("kind", list(testdata.KINDS))
@pytest.mark.parametrize("name", NAMED)
def test_named_encodings_on_the_full_corpora(name, kind, full_corpora, backend):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    _compare(f"{name} x {kind}", full_corpora[kind],
             lambda part: enc.encode_batch_arrays(part, disallowed_special=(), backend=backend),
             lambda part: tk.encode_ordinary_batch(part, num_threads=os.cpu_count() or 1))


@pytest.mark.parametrize("kind", list(testdata.KINDS))
@pytest.mark.parametrize("key", list(HF_FILES))
def test_tokenizer_json_on_the_full_corpora(key, kind, full_corpora, backend):
    enc, hf = hf_encoding(key), hf_oracle(key)
    _compare(f"{key} x {kind}", full_corpora[kind],
             lambda part: enc.encode_batch_arrays(part, allowed_special="all", backend=backend),
             lambda part: [e.ids for e in hf.encode_batch(part, add_special_tokens=False)])
