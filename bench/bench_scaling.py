"""How the native CPU device scales with threads, and where a batch's wall time goes.

For each encoding x corpus kind and each thread count, in one process (warm: the tables are
loaded and the workspace pool is filled by a first pass), best of ``--repeat``:

* gputok native ``encode_batch_arrays`` with that many threads, and with as many threads the
  fast exact peers that take a thread count (toktok-rs ``encode_batch_to_numpy``, quicktok-v1
  ``encode_batch``) and tiktoken's ``encode_ordinary_batch``, on the same documents (every
  peer's ids checked against tiktoken's first; an inexact one is not timed). gigatoken is not
  in this table: its thread pool is the process's, sized once, with no count per call;
* the native batch's phases on the calling thread: packing the documents into one UTF-8 buffer,
  preparing the chunks (handed to the workers one by one), the chunk loop, assembling the result;
  a batch of str documents that the device packs chunk by chunk (``StreamedBatch.encode``) has no
  packing phase: its chunk loop packs and prepares each chunk while the workers run the ones
  before (its prepare time is inside the loop);
* the workers' busy time: the sum over chunks of each chunk's wall time on its worker, over
  (threads x the chunk loop's wall time) = how busy the workers were while the loop ran.

    python bench/bench_scaling.py --threads 1 2 4 8 16 --mb 16
    python bench/bench_scaling.py --record bench/results/scaling.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import _common
import peers

import gputok  # noqa: E402  (path set up by _common)
from gputok.backends import driver, native
from gputok.backends.runners import streamed
from gputok.stages import pack


class _Phases:
    """Wall time of the batch's phases (patched in for this benchmark only)."""

    def __init__(self, be):
        self.t: dict = {}
        self.busy = 0.0
        self._wrap(pack.Documents, "packed", "pack")
        self._wrap(driver, "prepare", "prepare")
        self._wrap(streamed, "prepare", "prepare")
        self._wrap(driver, "assemble", "assemble")
        self._wrap(streamed, "assemble", "assemble")
        self._wrap(be, "_encode", "chunk loop")
        self._wrap(be.streamed, "encode", "streamed loop")
        inner = be.chunk.whole

        def whole(*a, **k):
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                self.busy += time.perf_counter() - t0  # float += under the GIL: fine here
        be.chunk.whole = whole

    def _wrap(self, obj, name, label):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.t[label] = self.t.get(label, 0.0) + time.perf_counter() - t0
        setattr(obj, name, timed)

    def reset(self):
        self.t.clear()
        self.busy = 0.0


THREADED = ("toktok-rs", "quicktok-v1")  # the fast exact peers that take a thread count


def run(name: str, kind: str, args) -> list:
    docs = [d for d in _common.corpus(kind, args.mb) if d]
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    enc, tk = gputok.get_encoding(name), _common.tiktoken_for(name)
    want = tk.encode_ordinary_batch(docs, num_threads=max(args.threads))
    rows = []
    print(f"\n{name} x {kind}: {len(docs)} docs, {mb:.2f} MB")
    fast = list(peers.checked(THREADED, name, docs, want))
    print(f"  {'threads':>7} {'native MB/s':>12} {'tiktoken MB/s':>14} {'ratio':>6}  "
          + "".join(f"{p + ' MB/s':>18}" for p in fast) + f"{'native / bar':>13}  "
          f"{'pack':>6} {'prepare':>8} {'loop':>6} {'assemble':>9} {'busy':>5}  (ms)")
    for t in args.threads:
        be = native.create(threads=t)
        ph = _Phases(be)
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
        got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
        if got != want:
            raise SystemExit(f"{name} x {kind}: native ids differ from tiktoken's")
        fastest: dict = {}  # the native batch's best pass and its phases

        def native_pass():
            ph.reset()
            t0 = time.perf_counter()
            enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
            dt = time.perf_counter() - t0
            if not fastest or dt < fastest["dt"]:
                fastest.update(dt=dt, phases=(dict(ph.t), ph.busy))

        fns = {"native": native_pass,
               "tiktoken": lambda: tk.encode_ordinary_batch(docs, num_threads=t)}
        for p in fast:
            fns[p] = (lambda batch=peers.build(p, name, threads=t).batch: batch(docs))
        times = _common.best_interleaved(fns, args.repeat)  # rounds, every runner in turn
        best, best_ph, tk_best = fastest["dt"], fastest["phases"], times["tiktoken"]
        peer_best = {p: times[p] for p in fast}
        phases, busy = best_ph
        loop = phases.get("chunk loop", 0.0) + phases.get("streamed loop", 0.0)
        util = busy / (t * loop) if loop and busy else float("nan")
        row = {"threads": t, "native_MBps": mb / best, "tiktoken_MBps": mb / tk_best,
               "ratio": tk_best / best, "ms": {k: v * 1e3 for k, v in phases.items()},
               "peers_MBps": {p: mb / v for p, v in peer_best.items()},
               "worker_busy": util, "total_ms": best * 1e3}
        rows.append(row)
        ms = row["ms"]
        bar = min(peer_best.values(), default=None)
        print(f"  {t:>7} {row['native_MBps']:>12.1f} {row['tiktoken_MBps']:>14.1f} "
              f"{row['ratio']:>5.2f}x  "
              + "".join(f"{v:>18.1f}" for v in row["peers_MBps"].values())
              + (f"{bar / best:>12.2f}x  " if bar else f"{'-':>13}  ")
              + f"{ms.get('pack', 0):>6.1f} {ms.get('prepare', 0):>8.1f} "
              f"{loop * 1e3:>6.1f} {ms.get('assemble', 0):>9.1f} {util:>5.2f}")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2, os.cpu_count() or 1])
    p.add_argument("--mb", type=float, default=16.0, help="MB per corpus kind")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/scaling.md")
    args = p.parse_args(argv)
    with _common.recording(args.record, "bench_scaling.py", "the native device against thread "
                           "count, and where a batch's time goes",
                           ["tiktoken", "toktok-rs", "quicktok-v1"]) as rec:
        print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}")
        print("native / bar = the faster of the peers with a thread count (toktok-rs, "
              "quicktok-v1) at that count, its time / native's")
        res = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
               "commit": _common.commit(),
               "command": " ".join(["bench_scaling.py"] + (argv or sys.argv[1:])), "cells": []}
        rec["data"] = res
        for name in args.encodings:
            for kind in args.kinds:
                res["cells"].append({"encoding": name, "kind": kind,
                                     "rows": run(name, kind, args)})
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
