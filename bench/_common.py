"""Shared benchmark helpers: corpora, oracle construction, timing, and the record format."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import platform
import statistics
import subprocess
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


def best_interleaved(fns: dict, repeat: int, warm_up: bool = True) -> dict:
    """{label: minimum wall time} of each function, timed in rounds: every function once per
    round, each round starting with the next (a change in the machine's load hits all alike),
    after one warm-up call each."""
    labels = list(fns)
    if warm_up:
        for label in labels:
            fns[label]()
    times: dict = {label: [] for label in labels}
    for k in range(repeat):
        for label in labels[k % len(labels):] + labels[:k % len(labels)]:
            t0 = time.perf_counter()
            fns[label]()
            times[label].append(time.perf_counter() - t0)
    return {label: min(ts) for label, ts in times.items()}


def median(xs):
    return statistics.median(xs)


# ---------------------------------------------------------------- records (bench/README.md)

def commit() -> str:
    """The checkout's commit, and whether it has uncommitted changes (a record says so)."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    head = git("rev-parse", "--short=10", "HEAD").strip() or "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "gputok", "kernels",
                "shaders", "bench").strip()
    return head + (" + uncommitted changes to gputok, kernels, shaders or bench" if dirty else "")


def versions(dists) -> str:
    """``name version`` of gputok's own stack and of each peer distribution named."""
    out = []
    for d in ("numpy", "regex", *dists):
        try:
            out.append(f"{d} {importlib.metadata.version(d)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{d} (not installed)")
    return ", ".join(dict.fromkeys(out))


class _Tee(io.TextIOBase):
    def __init__(self, out):
        self.out, self.seen = out, io.StringIO()

    def write(self, s):
        self.seen.write(s)
        return self.out.write(s)

    def flush(self):
        self.out.flush()


@contextlib.contextmanager
def recording(path: "str | None", script: str, what: str, dists=()):
    """Run a benchmark's main body; with ``path`` (``--record``), write its record there after:
    what it measures, commit, date, machine, command, versions, the printed output, and the
    results as JSON (set ``rec["data"]``). A record replaces the file it is written to: one
    current file per benchmark, history in git (bench/README.md)."""
    rec: dict = {"data": None}
    started, load = time.strftime("%Y-%m-%d %H:%M %Z"), os.getloadavg()[0]
    tee = _Tee(sys.stdout)
    if path:
        sys.stdout = tee
    try:
        yield rec
    finally:
        sys.stdout = tee.out
    if not path:
        return
    lines = [f"# {script}: {what}", "",
             f"- commit: {commit()}",
             f"- date: {started}",
             f"- machine: {machine()}; load average at the start {load:.2f}",
             f"- command: `python {' '.join(sys.argv)}`",
             f"- versions: {versions(dists)}", "",
             "## Output", "", "```text", tee.seen.getvalue().rstrip(), "```", ""]
    if rec["data"] is not None:
        lines += ["## Data", "", "<details><summary>the results as JSON</summary>", "",
                  "```json", json.dumps(rec["data"], separators=(",", ":"), default=str), "```",
                  "", "</details>", ""]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines), encoding="utf-8")
    print(f"record written: {path}")
