"""The host's share of a CUDA batch, without a GPU: what predicts whether a GPU can be fed.

The cuda backend runs on a null device (``nullcupy.py``: device arrays in host memory, the
kernels replaced by a copy, one id per four bytes of text): everything the host does for a
CUDA batch runs as it would on a GPU machine (the packing of the input, the chunk plan,
staging, the result arrays; for JSONL, the corpus job's readers and shard writers), and the
stand-ins of the GPU's own work (copies to and from the device, kernels) are timed apart.
Reported per input kind:

    host GB/s per core = input bytes / (process CPU seconds - the stand-ins' CPU seconds)

and the wall-clock rate. The target: 0.8 GB/s per host core on str lists and JSONL
files, so that 16 host cores feed 10 GB/s. Inputs: a str list, the same documents as a bytes
list, as a pyarrow StringArray, and as JSONL files encoded by ``gputok encode``
(``encode_corpus``) to .npy shards. Rounds are interleaved (each round runs every input once);
the best round is reported.

    python bench/bench_host.py --size-mb 256 --rounds 3 --record bench/results/host.md

On a shared machine the per-core rate (CPU time) is the steadier figure; the wall rate also
shows how much of the host work overlaps. The backend keeps its pools between batches
(``holding``), as ``gputok encode`` does: a caller that lets them go pays fresh staging pages
(and, on a GPU, pinning them) every batch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import _common
import nullcupy

TARGET = 0.8  # GB/s per host core: 16 host cores feed 10 GB/s


def build_docs(size_mb: float, seed: int = 0) -> list[str]:
    pool = [d for kind in ("prose", "code", "multilingual", "emoji")
            for d in _common.corpus(kind, 8) if d]
    if not pool:
        raise SystemExit("no documents: run `python tests/testdata.py fetch` first")
    rng = random.Random(seed)
    docs, total, want = [], 0, int(size_mb * 1e6)
    while total < want:
        batch = pool[:]
        rng.shuffle(batch)
        for d in batch:
            docs.append(d)
            total += len(d.encode())
            if total >= want:
                break
    return docs


def measure(fn) -> dict:
    """Wall and CPU seconds of ``fn()``, and the CPU seconds of the null device's stand-ins."""
    dev0, cpu0, t0 = nullcupy.device_seconds(), time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"wall": wall, "cpu": cpu, "device": nullcupy.device_seconds() - dev0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--encoding", default="cl100k_base")
    ap.add_argument("--inputs", nargs="+", default=["str", "bytes", "arrow", "jsonl"])
    ap.add_argument("--shard-tokens", type=int, default=1 << 24,
                    help="the JSONL job's shard cap (encode's default; smaller: more shards, "
                    "written while the job goes on)")
    ap.add_argument("--record", default=None, help="write the record here")
    args = ap.parse_args()
    _common.compile_bytecode()
    nullcupy.install()
    import gputok
    from gputok.backends import cuda

    cuda._no_driver = lambda: False  # the null CuPy is this process's "driver"
    with _common.recording(args.record, "bench_host.py", "the host's share of a CUDA batch "
                           "(a null device: kernels replaced by a copy), GB/s per host core",
                           dists=("numpy", "pyarrow")) as rec:
        enc = gputok.get_encoding(args.encoding)
        be = gputok.backends.get_backend("cuda")
        docs = build_docs(args.size_mb)
        raw = [d.encode() for d in docs]
        nbytes = sum(map(len, raw))
        runs = {}
        if "str" in args.inputs:
            runs["str list"] = lambda: enc.encode_batch_arrays(docs, backend=be)
        if "bytes" in args.inputs:
            runs["bytes list"] = lambda: enc.encode_batch_arrays(raw, backend=be)
        if "arrow" in args.inputs:
            import pyarrow as pa

            arr = pa.array(docs, pa.large_string())
            runs["arrow array"] = lambda: enc.encode_batch_arrays(arr, backend=be)
        tmp = Path(tempfile.mkdtemp(prefix="bench-host-"))
        if "jsonl" in args.inputs:
            from gputok.corpus import encode_corpus

            files = []
            per = max(1, len(docs) // 4)
            for k in range(0, len(docs), per):
                f = tmp / f"part{k // per}.jsonl"
                f.write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n"
                                     for d in docs[k:k + per]))
                files.append(str(f))

            def jsonl():
                encode_corpus(files, str(tmp / "out"), encoding=args.encoding, backend="cuda",
                              overwrite=True, workers=1, shard_tokens=args.shard_tokens)
            runs["jsonl files"] = jsonl

            def reader():
                # the corpus job's reader alone (native JSONL reader, packed batches): the
                # JSONL row less this is the job's own share (encode, shard writes, hashing)
                from gputok.corpus import read_batches, resolve_inputs

                for _ in read_batches(resolve_inputs(files), packed=True):
                    pass
            runs["jsonl reader"] = reader
        # ids are every fourth byte on the null device: the check that the host path is whole
        ids, off = enc.encode_batch_arrays(docs[:200], backend=be)
        want = [b for r in raw[:200] for b in r[::4]]
        assert ids.tolist() == want and off[-1] == len(want), "null ids differ"
        best: dict = {}
        hold = be.holding()  # (as a job does, and a caller of many batches: staging kept)
        hold.__enter__()
        for r in range(args.rounds):
            for name, fn in runs.items():
                got = measure(fn)
                host = max(got["cpu"] - got["device"], 1e-9)
                got["host_gbps_core"] = nbytes / host / 1e9
                got["wall_gbps"] = nbytes / got["wall"] / 1e9
                if name not in best or got["host_gbps_core"] > best[name]["host_gbps_core"]:
                    best[name] = got
        hold.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"{args.encoding}, {nbytes / 1e6:.1f} MB of mixed text ({len(docs)} documents), "
              f"best of {args.rounds} interleaved rounds, {os.cpu_count()} cores")
        print(f"{'input':<12} {'wall s':>8} {'CPU s':>8} {'device s':>9} {'host GB/s/core':>15} "
              f"{'wall GB/s':>10}  target {TARGET}")
        for name, got in best.items():
            ok = "ok" if got["host_gbps_core"] >= TARGET or name in ("bytes list", "arrow array", "jsonl reader") \
                else "below"
            print(f"{name:<12} {got['wall']:>8.3f} {got['cpu']:>8.3f} {got['device']:>9.3f} "
                  f"{got['host_gbps_core']:>15.2f} {got['wall_gbps']:>10.2f}  {ok}")
        rec["data"] = {"encoding": args.encoding, "bytes": nbytes, "docs": len(docs),
                       "rounds": args.rounds, "best": best}


if __name__ == "__main__":
    sys.exit(main())
