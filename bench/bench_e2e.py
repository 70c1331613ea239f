"""`gputok encode` end to end vs a minimal tiktoken script doing the same job, with peak RSS.

The job: a JSONL corpus (the chosen corpus kinds, one document per line) -> token ids on disk.
gputok runs its command line (``gputok encode ... -o DIR``: batches, .npy shards, manifest);
the tiktoken script reads the file, encodes 8 MB batches with ``encode_ordinary_batch`` on all
cores and writes one .npy of ids and one of offsets per batch. Both are started as fresh
processes under ``/usr/bin/time`` (wall seconds, peak RSS), ``repeat`` times (median), and
their outputs are compared id for id first. Used by ``bench_encode.py --e2e``; alone:

    python bench/bench_e2e.py --encoding cl100k_base --kinds prose code --mb 8
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

TIKTOKEN_SCRIPT = r'''
import json, sys
import numpy as np
import tiktoken
from tiktoken.load import load_tiktoken_bpe

spec = json.loads(sys.argv[3])
enc = tiktoken.Encoding(spec["name"], pat_str=spec["pat_str"],
                        mergeable_ranks=load_tiktoken_bpe(spec["ranks_file"]),
                        special_tokens=spec["special_tokens"])
out, batch, size, k = sys.argv[2], [], 0, 0

def flush():
    global batch, size, k
    ids = enc.encode_ordinary_batch(batch, num_threads=spec["threads"])
    np.save(f"{out}/{k:05d}.ids.npy", np.fromiter((t for d in ids for t in d), np.uint32))
    np.save(f"{out}/{k:05d}.offsets.npy", np.cumsum([0] + [len(d) for d in ids]))
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

    from gputok.shards import read_shards

    ids = [i.astype(np.uint32) for i, _ in read_shards(out)]
    return np.concatenate(ids) if ids else np.zeros(0, np.uint32)


def _ids_tiktoken(out: Path):
    import numpy as np

    parts = sorted(out.glob("*.ids.npy"))
    return np.concatenate([np.load(p) for p in parts]) if parts else np.zeros(0, np.uint32)


def run(encoding: str, kinds, mb: float, repeat: int, tmp: Path) -> dict:
    import numpy as np

    tk = _common.tiktoken_for(encoding)
    corpus = tmp / "e2e.jsonl"
    nbytes = 0
    with open(corpus, "w", encoding="utf-8") as f:
        for kind in kinds:
            for d in _common.corpus(kind, mb):
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
                nbytes += len(d.encode("utf-8"))
    # the rank file tiktoken would have downloaded (the test data cache holds it)
    import testdata

    ranks_file = testdata.vocab_path({"p50k_base": "r50k_base"}.get(encoding, encoding))
    spec = json.dumps({"name": encoding, "pat_str": tk._pat_str, "ranks_file": str(ranks_file),
                       "special_tokens": tk._special_tokens, "threads": os.cpu_count() or 1})
    script = tmp / "tiktoken_encode.py"
    script.write_text(TIKTOKEN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(_common.ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # both start as an installed package would
    runs = {"gputok encode": [], "tiktoken script": []}
    outs = {k: tmp / k.replace(" ", "_") for k in runs}
    for _ in range(repeat):
        for name, out in outs.items():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            if name == "gputok encode":
                cmd = [sys.executable, "-m", "gputok.cli", "encode", "--encoding", encoding,
                       str(corpus), "-o", str(out), "--special-as-text", "-q", "--overwrite"]
            else:
                cmd = [sys.executable, str(script), str(corpus), str(out), spec]
            runs[name].append(_timed(cmd, env))
    a, b = _ids_gputok(outs["gputok encode"]), _ids_tiktoken(outs["tiktoken script"])
    if not np.array_equal(a, b):
        raise SystemExit(f"e2e: gputok encode wrote {len(a)} ids, the tiktoken script {len(b)}; "
                         "they differ")
    res = {"encoding": encoding, "kinds": list(kinds), "bytes": nbytes, "tokens": int(len(a))}
    print(f"\nend to end ({encoding}, {' + '.join(kinds)}: {nbytes / 1e6:.1f} MB -> {len(a)} ids "
          f"on disk, identical); median of {repeat} fresh processes")
    print(f"  {'':<18}{'wall s':>8}{'MB/s':>8}{'peak RSS MB':>13}")
    for name, rs in runs.items():
        wall = statistics.median(w for w, _ in rs)
        rss = statistics.median(m for _, m in rs)
        res[name] = {"wall_s": wall, "peak_mb": rss, "runs": rs}
        print(f"  {name:<18}{wall:8.2f}{nbytes / 1e6 / wall:8.2f}{rss:13.0f}")
    g, t = res["gputok encode"], res["tiktoken script"]
    print(f"  gputok / tiktoken: {t['wall_s'] / g['wall_s']:.2f}x faster, "
          f"{g['peak_mb'] / t['peak_mb']:.2f}x the memory")
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"])
    p.add_argument("--mb", type=float, default=4.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    _common.compile_bytecode()
    print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}\n"
          f"command: python {' '.join(sys.argv)}")
    with tempfile.TemporaryDirectory() as d:
        run(args.encoding, args.kinds, args.mb, args.repeat, Path(d))


if __name__ == "__main__":
    main()
