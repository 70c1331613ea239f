"""Shared benchmark helpers: corpora, oracle construction, timing, reporting."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, python {platform.python_version()}"


def corpus(kind: str, mb: float) -> list[str]:
    import testdata

    if kind == "sample":
        return [json.loads(l)["text"] for l in open(ROOT / "sample" / "austen.jsonl")]
    return testdata.corpus(kind, max_mb=mb)


def tiktoken_for(name: str):
    from conftest import tiktoken_oracle

    return tiktoken_oracle(name)


def best_of(fn, repeat: int) -> float:
    """Minimum wall time of ``repeat`` runs (the least-disturbed run on a shared machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median(xs):
    return statistics.median(xs)
