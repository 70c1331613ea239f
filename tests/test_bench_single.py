"""bench/bench_single.py runs from a clean clone: ids (decode: texts) checked against tiktoken's
on every text before anything is timed, a peer that differs left out, one row per cell with a
ratio per peer, an encode table and a decode table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_single.py"


def test_bench_single_prints_every_cell_with_its_ratios(tmp_path):
    pytest.importorskip("tiktoken")
    record = tmp_path / "single.md"
    got = subprocess.run([sys.executable, str(BENCH), "--encodings", "cl100k_base", "--kinds",
                          "prose", "multilingual", "--sizes", "100", "3000", "--texts", "20",
                          "--rounds", "2", "--peers", "tiktoken", "--record", str(record)],
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    rows = [ln.split() for ln in got.stdout.splitlines()
            if ln.strip().startswith(("prose", "multilingual"))]
    # the encode table, then the decode table (every id list's text checked first)
    assert [(r[0], r[1]) for r in rows] == 2 * [("prose", "100"), ("prose", "3000"),
                                                ("multilingual", "100"), ("multilingual", "3000")]
    assert "cl100k_base encode:" in got.stdout and "cl100k_base decode:" in got.stdout
    assert got.stdout.count("tiktoken's time / gputok's: cold") == 2
    text = record.read_text()
    assert text.startswith("# bench_single.py:") and '"cells":[' in text
    assert text.count('"encoding":"cl100k_base"') == 8
    assert '"what":"encode"' in text and '"what":"decode"' in text
