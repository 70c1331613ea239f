"""`gputok encode` end to end vs minimal peer scripts doing the same job, with peak RSS.

The job: a JSONL corpus (the chosen corpus kinds, one document per line) -> token ids on disk.
gputok runs its command line (``gputok encode ... -o DIR``: batches, .npy shards, manifest).
Each peer runs the smallest script that does the job with it: read the file, encode 8 MB
batches with its batch API on all cores (``tiktoken`` ``encode_ordinary_batch``, toktok-rs
``encode_batch_to_numpy``, quicktok-v1 ``encode_batch``), write one .npy of ids and one of
offsets per batch; gigatoken reads the file itself (``encode_files(JsonlFileSource)``, its
corpus API) and writes one pair. Every job is a fresh process under ``/usr/bin/time`` (wall
seconds, peak RSS).

Exactness first: every job runs once and its ids are compared with gputok's, id for id; a peer
that differs is reported and not timed. Then ``repeat`` rounds, every job in turn (each round
starting with the next), and medians. Used by ``bench_encode.py --e2e``; alone:

    python bench/bench_e2e.py --encoding cl100k_base --kinds prose code --mb 8
    python bench/bench_e2e.py --record bench/results/e2e.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

# the peers' scripts: argv = corpus, output dir, JSON spec; ENCODE_SETUP builds `encode(batch)
# -> (ids, offsets)`. Kept minimal: what a user of that library would write for this job.
PEER_SCRIPT = r'''
import json, sys
import numpy as np

spec = json.loads(sys.argv[3])
out, batch, size, k = sys.argv[2], [], 0, 0
%s

def flush():
    global batch, size, k
    ids, offsets = encode(batch)
    np.save(f"{out}/{k:05d}.ids.npy", np.asarray(ids, np.uint32))
    np.save(f"{out}/{k:05d}.offsets.npy", np.asarray(offsets, np.int64))
    batch, size, k = [], 0, k + 1

with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        batch.append(json.loads(line)["text"])
        size += len(batch[-1])
        if size >= 8 << 20:
            flush()
if batch:
    flush()
'''

ENCODE_SETUP = {
    "tiktoken script": '''
import tiktoken
from tiktoken.load import load_tiktoken_bpe
enc = tiktoken.Encoding(spec["name"], pat_str=spec["pat_str"],
                        mergeable_ranks=load_tiktoken_bpe(spec["ranks_file"]),
                        special_tokens=spec["special_tokens"])
def encode(batch):
    ids = enc.encode_ordinary_batch(batch, num_threads=spec["threads"])
    return (np.fromiter((t for d in ids for t in d), np.uint32),
            np.cumsum([0] + [len(d) for d in ids]))
''',
    "toktok-rs script": '''
import toktok
enc = toktok._encoding(spec["name"])
def encode(batch):
    return enc.encode_batch_to_numpy(batch, spec["threads"])
''',
    "quicktok-v1 script": '''
import quicktok
enc = quicktok.get_encoding(spec["name"])
def encode(batch):
    return enc.encode_batch(batch, spec["threads"], False)
''',
}

# gigatoken reads the corpus itself: its files API is what a user of it would call for this job
GIGATOKEN_SCRIPT = r'''
import json, sys
import numpy as np
import gigatoken

spec = json.loads(sys.argv[3])
tok = gigatoken.Tokenizer.from_tiktoken(spec["ranks_file"], pretokenizer=spec["gigatoken_pre"])
layout = tok.encode_files(gigatoken.JsonlFileSource([sys.argv[1]], field="text")).layout
np.save(f"{sys.argv[2]}/00000.ids.npy", np.asarray(layout.content.data, np.uint32))
np.save(f"{sys.argv[2]}/00000.offsets.npy", np.asarray(layout.offsets, np.int64))
'''
PEER_DISTS = {"tiktoken script": "tiktoken", "toktok-rs script": "toktok-rs",
              "quicktok-v1 script": "quicktok-v1", "gigatoken encode_files": "gigatoken"}


def _timed(cmd: list, env=None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one fresh process."""
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    wall, kb = r.stderr.strip().splitlines()[-1].split()
    return float(wall), int(kb) / 1024


def _ids_gputok(out: Path):
    import numpy as np

    from gputok.corpus import read_shards

    ids = [i.astype(np.uint32) for i, _ in read_shards(out)]
    return np.concatenate(ids) if ids else np.zeros(0, np.uint32)


def _ids_peer(out: Path):
    import numpy as np

    parts = sorted(out.glob("*.ids.npy"))
    return np.concatenate([np.load(p) for p in parts]) if parts else np.zeros(0, np.uint32)


def peer_spec(encoding: str) -> str:
    """The JSON argument every peer script takes (encoding, ranks file, threads...)."""
    import peers

    tk = _common.tiktoken_for(encoding)
    return json.dumps({"name": encoding, "pat_str": tk._pat_str,
                       "ranks_file": str(peers._ranks_file(encoding)),
                       "gigatoken_pre": peers._GIGATOKEN_PRETOKENIZER.get(encoding),
                       "special_tokens": tk._special_tokens, "threads": os.cpu_count() or 1})


def peer_jobs(encoding: str, tmp: Path, corpus: Path) -> dict:
    """{label: command without its last two arguments (output directory, ``peer_spec``)} of
    the peer scripts that can run here for ``encoding``."""
    import importlib.metadata

    jobs = {}
    for label, dist in PEER_DISTS.items():
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            print(f"  {label}: skipped: not installed (pip install {dist})")
            continue
        if dist in ("toktok-rs", "quicktok-v1") and encoding not in ("cl100k_base",
                                                                    "o200k_base"):
            print(f"  {label}: skipped: {dist} bundles cl100k_base and o200k_base only")
            continue
        script = tmp / (label.replace(" ", "_") + ".py")
        script.write_text(GIGATOKEN_SCRIPT if dist == "gigatoken"
                          else PEER_SCRIPT % ENCODE_SETUP[label])
        jobs[label] = [sys.executable, str(script), str(corpus)]
    return jobs


def run(encoding: str, kinds, mb: float, repeat: int, tmp: Path, backends=("auto",),
        size_mb: "float | None" = None) -> dict:
    import random

    import numpy as np

    corpus = tmp / "e2e.jsonl"
    nbytes = 0
    docs = [d for kind in kinds for d in _common.corpus(kind, mb)]
    rng = random.Random(0)
    with open(corpus, "w", encoding="utf-8") as f:
        while True:  # the corpora once, or shuffled rounds of them up to --size-mb
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
                nbytes += len(d.encode("utf-8"))
                if size_mb and nbytes >= size_mb * 1e6:
                    break
            if not size_mb or nbytes >= size_mb * 1e6:
                break
            rng.shuffle(docs)
    spec = peer_spec(encoding)
    env = dict(os.environ, PYTHONPATH=str(_common.ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # all start as an installed package would
    jobs = {}
    for b in backends:  # (the first is the one every other job's ids are compared with)
        label = "gputok encode" if b == "auto" else f"gputok encode --backend {b}"
        jobs[label] = [sys.executable, "-m", "gputok.cli", "encode", "--encoding", encoding,
                       str(corpus), "-q", "--special-as-text", "--overwrite",
                       *(() if b == "auto" else ("--backend", b)), "-o", None]  # None: its output
    jobs.update({k: v + [None, spec] for k, v in peer_jobs(encoding, tmp, corpus).items()})
    outs = {k: tmp / ("out_" + k.replace(" ", "_")) for k in jobs}

    def once(name):
        shutil.rmtree(outs[name], ignore_errors=True)
        outs[name].mkdir()
        return _timed([str(outs[name]) if c is None else c for c in jobs[name]], env)

    # exactness first: one run of every job, ids compared with gputok's
    runs: dict = {name: [] for name in jobs}
    first = next(iter(jobs))
    once(first)
    ours = _ids_gputok(outs[first])
    for name in list(jobs)[1:]:
        try:
            once(name)
            theirs = _ids_gputok(outs[name]) if name.startswith("gputok") else _ids_peer(outs[name])
        except SystemExit as e:
            print(f"  {name}: failed, not timed: {str(e)[-300:]}")
            del runs[name]
            continue
        if not np.array_equal(ours, theirs):
            print(f"  {name}: NOT EXACT, not timed and in no ratio: {len(theirs)} ids on disk "
                  f"against gputok's {len(ours)} (first difference at id "
                  f"{int(np.argmax(ours[:len(theirs)] != theirs[:len(ours)]))})")
            del runs[name]
    names = list(runs)
    for k in range(repeat):  # rounds, each starting with the next job
        for name in names[k % len(names):] + names[:k % len(names)]:
            runs[name].append(once(name))
    res = {"encoding": encoding, "kinds": list(kinds), "bytes": nbytes, "tokens": int(len(ours))}
    print(f"\nend to end ({encoding}, {' + '.join(kinds)}: {nbytes / 1e6:.1f} MB -> {len(ours)} "
          f"ids on disk, identical for every job below); median of {repeat} fresh processes")
    print(f"  {'':<24}{'wall s':>8}{'MB/s':>8}{'peak RSS MB':>13}{'gputok speed':>14}"
          f"{'memory':>8}")
    for name, rs in runs.items():
        res[name] = {"wall_s": statistics.median(w for w, _ in rs),
                     "peak_mb": statistics.median(m for _, m in rs), "runs": rs}
    g = res[first]
    for name in runs:
        r = res[name]
        print(f"  {name:<24}{r['wall_s']:8.2f}{nbytes / 1e6 / r['wall_s']:8.2f}"
              f"{r['peak_mb']:13.0f}{r['wall_s'] / g['wall_s']:13.2f}x"
              f"{g['peak_mb'] / r['peak_mb']:7.2f}x")
    print("  gputok speed = this job's wall time / gputok's; memory = gputok's peak / this one's")
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"])
    p.add_argument("--mb", type=float, default=4.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--backends", nargs="+", default=["auto"],
                   help="gputok's jobs: one per backend (e.g. cuda native), the first the one "
                        "every other job's ids are compared with")
    p.add_argument("--size-mb", type=float, default=None,
                   help="write the corpora in shuffled rounds up to this many MB of text")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/e2e.md")
    args = p.parse_args()
    _common.compile_bytecode()
    with _common.recording(args.record, "bench_e2e.py", "`gputok encode` end to end vs peer "
                           "scripts, wall time and peak RSS", PEER_DISTS.values()) as rec:
        print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}\n"
              f"command: python {' '.join(sys.argv)}")
        with tempfile.TemporaryDirectory() as d:
            rec["data"] = run(args.encoding, args.kinds, args.mb, args.repeat, Path(d),
                              args.backends, args.size_mb)


if __name__ == "__main__":
    main()
