"""Corpus jobs end to end: ``gputok encode`` throughput, peak RSS and scaling over workers.

Builds a corpus of real text (prose, code, multilingual from tests/testdata.py, cycled with a
per-copy prefix up to ``--mb``) as one .jsonl file, then runs ``gputok encode`` as a subprocess
for each (workers, format) asked, and reports MB/s and the peak RSS of the whole process tree
(the encoder's own pool processes included). Ids are checked first: the shards of every run are
compared with the first run's, and a sample of documents with tiktoken.

The peers do the same job on the same file, each as the smallest script a user of it would
write (``bench_e2e.py``'s: gigatoken ``encode_files``, toktok-rs and quicktok-v1 batches on all
cores, tiktoken ``encode_ordinary_batch``); each one's ids are compared with gputok's first
(one that differs is reported and not timed), then each is timed as gputok is, with its peak
RSS. (gputok runs ``--backend`` numpy by default here: what this bench has always measured is
the corpus job's own layer and its scaling over workers; ``--backend native`` measures the
encoder the peers compete with.)

A second check streams one single-line document of ``--line-mb`` MB through the reader and the
shard writer (no encoding: a fixed stand-in id array) and reports the peak RSS of that layer,
so a regression that holds the corpus or copies a line several times shows up as a number.

    python bench/bench_corpus.py --mb 200 --workers 1 2 --formats npy megatron
    python bench/bench_corpus.py --record bench/results/corpus.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import _common
from _common import ROOT, corpus, machine, tiktoken_for


def build_corpus(path, mb: float) -> int:
    per_kind = min(16.0, mb / 3)  # real text, each document once when mb <= 48
    docs = corpus("prose", per_kind) + corpus("code", per_kind) + corpus("multilingual", per_kind)
    target, size, k = int(mb * 1e6), 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            for i, d in enumerate(docs):
                text = f"[copy {k} doc {i}]\n{d}"  # copies differ: no document repeats exactly
                line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
                f.write(line)
                size += len(text.encode("utf-8"))
                if size >= target:
                    break
            k += 1
    return size


# Linux carries a process's peak RSS across fork + exec, so a child of this (large) process would
# report at least our own peak: a small wrapper process starts each job and reports its children.
_WRAP = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
         "print('RSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
         "sys.exit(r.returncode)")


def run(cmd) -> "tuple[float, float, str]":
    """Wall seconds, peak RSS (MB) of the largest process of the job, stdout."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _WRAP, *cmd], cwd=ROOT, capture_output=True,
                       text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    kb = int(r.stderr.strip().splitlines()[-1].split()[1])
    return dt, kb / 1024, r.stdout.strip()


def line_layer_rss(line_mb: float, tmp: str) -> str:
    p = os.path.join(tmp, "line.jsonl")
    with open(p, "w") as f:  # written here, so the measured process only reads
        f.write('{"text": "')
        chunk = "abcdefghij " * 100000
        for _ in range(int(line_mb * 1e6 / len(chunk))):
            f.write(chunk)
        f.write('"}\n')
    code = f"""
import resource, sys
sys.path.insert(0, {str(ROOT)!r})
import numpy as np
from gputok.corpus import resolve_inputs, read_batches
from gputok.corpus import ShardWriter
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
base = rss()
src = resolve_inputs([{p!r}])
w = ShardWriter({tmp!r} + "/out", meta={{}}, n_vocab=50257, cap_tokens=1 << 24, overwrite=True)
n = 0
for b in read_batches(src, batch_bytes=8 << 20):
    n += b.nbytes
    ids = np.zeros(b.nbytes // 4, np.uint16)  # stand-in for the encoder's output
    w.add(ids, np.array([0, len(ids)]), b.ends)
    del ids
w.close()
print(f"{{n / 1e6:.0f}} MB line: peak RSS {{rss():.0f}} MB ({{base:.0f}} MB after imports)")
"""
    r = subprocess.run([sys.executable, "-c", _WRAP, sys.executable, "-c", code],
                       capture_output=True, text=True)
    os.remove(p)
    return (r.stdout or r.stderr).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--formats", nargs="+", default=["npy"])
    ap.add_argument("--encoding", default="cl100k_base")
    ap.add_argument("--line-mb", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per setting, interleaved (the machine is shared: compare medians)")
    ap.add_argument("--backend", default="numpy", help="gputok's backend (default numpy)")
    ap.add_argument("--no-peers", action="store_true", help="time gputok alone")
    ap.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                     "e.g. bench/results/corpus.md")
    args = ap.parse_args()
    with _common.recording(args.record, "bench_corpus.py", "`gputok encode` over workers and "
                           "formats: MB/s and peak RSS, against peer scripts",
                           ["tiktoken", "gigatoken", "toktok-rs", "quicktok-v1"]):
        measure(args)


def measure(args) -> None:
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "corpus.jsonl")
        size = build_corpus(src, args.mb)
        print(f"corpus: {size / 1e6:.1f} MB of text, {os.path.getsize(src) / 1e6:.1f} MB jsonl; "
              f"encoding {args.encoding}")
        first = first_ids = None
        times: dict = {}
        for rep in range(args.repeat):
            for fmt in args.formats:
                for w in args.workers:
                    out = os.path.join(tmp, f"out-{fmt}-{w}")
                    cmd = [sys.executable, "-m", "gputok", "encode", "-e", args.encoding, src,
                           "-o", out, "-q", "--format", fmt, "--workers", str(w), "--backend",
                           args.backend]
                    dt, rss, summary = run(cmd)
                    if fmt == args.formats[0] and rep == 0:
                        shards = sorted(p for p in os.listdir(out) if p.startswith("shard_"))
                        blob = [open(os.path.join(out, p), "rb").read() for p in shards]
                        if first is None:
                            first = blob
                            check_sample(out, src, args.encoding)
                        elif blob != first:
                            raise SystemExit(f"--workers {w} wrote different shards")
                        if first_ids is None:
                            first_ids = _ids_of(out)
                    times.setdefault((fmt, w), []).append(dt)
                    print(f"  {fmt:<9} workers={w}: {size / 1e6 / dt:6.2f} MB/s wall "
                          f"({dt:6.1f} s), peak RSS (largest process) {rss:6.0f} MB | {summary}")
                    subprocess.run(["rm", "-rf", out])
        if args.repeat > 1:
            print("medians (MB/s, wall, start-up included):")
            for (fmt, w), ts in times.items():
                ts = sorted(ts)
                print(f"  {fmt:<9} workers={w}: median {size / 1e6 / ts[len(ts) // 2]:6.2f}, "
                      f"best {size / 1e6 / ts[0]:6.2f} over {len(ts)} runs")
        if not args.no_peers:
            peer_runs(args, src, size, tmp, first_ids, times)
        os.remove(src)
        print(f"reader + shard writer, one single-line document: {line_layer_rss(args.line_mb, tmp)}")


def _ids_of(out):
    import numpy as np

    from gputok.corpus import read_shards

    return np.concatenate([i.astype(np.uint32) for i, _ in read_shards(out)])


def peer_runs(args, src, size, tmp, ours, times) -> None:
    """The peer scripts on the same corpus: ids checked against gputok's, then timed (and
    their peak RSS) like gputok's runs, ``--repeat`` times."""
    from pathlib import Path

    import numpy as np

    import bench_e2e

    spec = bench_e2e.peer_spec(args.encoding)
    fastest = None
    for label, cmd in bench_e2e.peer_jobs(args.encoding, Path(tmp), Path(src)).items():
        out = Path(tmp) / ("peer-" + label.replace(" ", "_"))
        ts = []
        for rep in range(args.repeat):
            subprocess.run(["rm", "-rf", str(out)])
            out.mkdir()
            dt, rss, _ = run(cmd + [str(out), spec])
            if rep == 0:
                theirs = bench_e2e._ids_peer(out)
                if not np.array_equal(theirs, ours):
                    print(f"  {label}: NOT EXACT, not timed and in no ratio: {len(theirs)} ids "
                          f"against gputok's {len(ours)}")
                    break
            ts.append(dt)
            print(f"  {label:<22}: {size / 1e6 / dt:6.2f} MB/s wall ({dt:6.1f} s), peak RSS "
                  f"{rss:6.0f} MB")
        if ts and label != "tiktoken script":
            best = sorted(ts)[len(ts) // 2]
            fastest = min(fastest or (best, label), (best, label))
    if fastest:
        ours_best = min(sorted(v)[len(v) // 2] for v in times.values())
        print(f"the bar: {fastest[1]} {size / 1e6 / fastest[0]:.2f} MB/s; gputok's best setting "
              f"/ it: {fastest[0] / ours_best:.2f}x (median runs, start-up included)")


def check_sample(out, src, name):
    import numpy as np

    from gputok.corpus import read_shards

    tk = tiktoken_for(name)
    ids, off = next(read_shards(out))
    with open(src, encoding="utf-8") as f:
        for i in range(min(200, len(off) - 1)):
            text = json.loads(f.readline())["text"]
            if ids[off[i]:off[i + 1]].tolist() != tk.encode_ordinary(text):
                raise SystemExit(f"document {i}: ids differ from tiktoken")
    assert isinstance(ids, np.ndarray)
    print("  ids checked: the first 200 documents equal tiktoken's")


if __name__ == "__main__":
    main()
