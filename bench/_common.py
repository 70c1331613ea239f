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


def compile_bytecode() -> None:
    """Compile gputok's modules to bytecode before anything is timed, as ``pip install`` does.
    A source checkout run with PYTHONDONTWRITEBYTECODE=1 (or from a read-only tree) compiles
    every module it imports again in every fresh process: ~0.05 s of start-up and 5-7 ms of a
    first pass (the modules imported on first use), charged to gputok alone (the peers are
    installed packages, compiled at install)."""
    import compileall

    compileall.compile_dir(str(ROOT / "gputok"), quiet=1)


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
