"""bench/fuzz_families.py: every tokenizer of the test data against its own library on generated
documents (its 20,000-document run is a record, bench/results/fuzz.md); here a small run of a few
families, and the check that it sees a wrong id."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "fuzz_families.py"
sys.path.insert(0, str(ROOT / "bench"))


def test_a_small_run_matches_every_library():
    got = subprocess.run([sys.executable, str(SCRIPT), "--docs", "40", "--only", "cl100k_base",
                          "llama3", "minilm", "mistral_v7", "botchan_unigram"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert "5 tokenizers, 200 documents each way: 0 mismatched" in got.stdout


@pytest.mark.full
def test_every_tokenizer_on_300_documents():
    got = subprocess.run([sys.executable, str(SCRIPT), "--docs", "300"], capture_output=True,
                         text=True, timeout=3600, cwd=ROOT)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert " 0 mismatched" in got.stdout


def test_a_wrong_id_is_seen():
    import argparse

    import fuzz_families as ff

    family, oracle, load = ff.tokenizers()["cl100k_base"]

    def wrong():
        enc, fn, kw, sur = load()
        return enc, (lambda docs: [ids[:-1] if k == 3 else ids
                                   for k, ids in enumerate(fn(docs))]), kw, sur

    args = argparse.Namespace(docs=10, seed=1, backends=["numpy"])
    row = ff.run_one("cl100k_base", (family, oracle, wrong), args)
    assert row["mismatch_numpy"] >= 1 and row["examples"]
    make = ff.make_docs(60, 5, ["<|endoftext|>"], True)
    assert make == ff.make_docs(60, 5, ["<|endoftext|>"], True)  # (a fixed seed: the same docs)
    assert any("<|endoftext|>" in d for d in make)
    assert any(0xD800 <= ord(c) < 0xE000 for d in make for c in d)
