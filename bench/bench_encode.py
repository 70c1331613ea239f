"""Encode throughput: gputok (native CPU, numpy) vs the fastest exact peers, tiktoken and others.

For each encoding and corpus kind, every runner encodes the same documents in its own fresh
process (``--child``): the encoder is built (timed as start-up), the first pass over the corpus
is the *cold* time (empty caches, first use of every table), then ``--repeat`` more passes give
the *warm* time. This is done in ``--rounds`` rounds, all runners in turn (each round starting
with the next runner), and medians are reported (the machine's load changes under a long run;
rounds spread it over every runner).
Wall and CPU time (all threads) are both recorded: the wall time is what a user waits; the CPU
time is the per-core cost, but on a virtual machine it is only approximate (here single-thread
code has shown CPU times above its wall time).

Exactness first: before any runner is timed, each one encodes the cell's documents once and its
ids are compared with tiktoken's, document by document. A gputok runner that differs stops the
benchmark; a peer that differs is reported with its mismatches, not timed, and in no ratio.

Runners (peers that are not installed, or lack the encoding, are listed as such):
  gputok native batch   encode_batch_arrays(backend="native"): the kernels on every core
  gputok numpy batch    encode_batch_arrays(backend="numpy"): the portable host path
  gputok per doc        encode_ordinary per document (the default backend for long texts)
  gigatoken batch       Tokenizer.from_tiktoken(ranks).encode_batch (its own API, every core)
  gigatoken tiktoken mode batch   .as_tiktoken().encode_ordinary_batch
  toktok-rs batch       toktok._encoding(name).encode_batch_to_numpy(docs, all cores)
  quicktok-v1 batch     quicktok.get_encoding(name).encode_batch(docs, all cores)
  tiktoken per doc      encode_ordinary per document
  tiktoken batch        encode_ordinary_batch(num_threads=all cores)
  riptoken per doc / batch   (its batch uses every core)
  HF tokenizers batch   encode_batch_fast on gputok's tokenizer.json export of the encoding
The fastest exact peers (gigatoken, toktok-rs, quicktok-v1: ``bench/peers.py``) are the bar;
the report names the fastest of them in each cell and gputok's ratio to it.

``--doc-chars N`` cuts each corpus into documents of N characters (the per-document API on
short texts: ``--doc-chars 200 --runners "gputok per doc" "tiktoken per doc"``).

``--e2e`` adds ``gputok encode`` end to end (a JSONL corpus -> .npy shards) against a minimal
tiktoken script doing the same (read, encode in batches, write), with peak RSS (``bench_e2e.py``).
``--record bench/results/encode.md`` writes the record that replaces the current one.

    python bench/bench_encode.py --encodings cl100k_base o200k_base --kinds prose code multilingual
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import peers

THREADS = os.cpu_count() or 1
# runner -> the peer behind it (bench/peers.py), for the runners that are peers
PEER_RUNNERS = {"gigatoken batch": "gigatoken",
                "gigatoken tiktoken mode batch": "gigatoken tiktoken mode",
                "toktok-rs batch": "toktok-rs", "quicktok-v1 batch": "quicktok-v1",
                "tiktoken batch": "tiktoken", "riptoken batch": "riptoken",
                "HF tokenizers batch": "HF tokenizers"}
FASTEST = [r for r, p in PEER_RUNNERS.items() if p in peers.FASTEST]
RUNNERS = ["gputok native batch", "gputok numpy batch", "gputok per doc", *FASTEST,
           "tiktoken per doc", "tiktoken batch", "riptoken per doc", "riptoken batch",
           "HF tokenizers batch"]
REFERENCE = "tiktoken per doc"  # whose ids everyone must match
OURS = "gputok native batch"


# ---------------------------------------------------------------- one runner, in a child process

def _digest(out) -> str:
    """A digest of a batch result's ids and document lengths (sequences or (ids, offsets))."""
    import numpy as np

    h = hashlib.sha256()
    for ids in peers.per_doc(out):
        a = np.asarray(ids, np.uint32)
        h.update(len(a).to_bytes(8, "little") + a.tobytes())
    return h.hexdigest()[:16]


def make_runner(name: str, encoding: str, hf_json: str):
    """(build seconds, encode(docs) -> per-document ids or one (ids, offsets) pair)."""
    t0 = time.perf_counter()
    if name.startswith("gputok"):
        import gputok

        enc = gputok.get_encoding(encoding)
        if name == "gputok per doc":
            def run(docs):
                return [enc.encode_ordinary(d) for d in docs]
        else:
            backend = name.split()[1]
            gputok.backends.get_backend(backend)  # the native module loads here, not in a pass

            def run(docs):
                return enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
    elif name in PEER_RUNNERS:
        run = peers.build(PEER_RUNNERS[name], encoding, hf_json=hf_json).batch
    elif name.endswith(" per doc"):  # tiktoken / riptoken, one document at a time
        one = peers.build(name[:-len(" per doc")], encoding).one

        def run(docs):
            return [one(d) for d in docs]
    else:
        raise SystemExit(f"unknown runner {name!r}")
    return time.perf_counter() - t0, run


def child(args) -> dict:
    docs = [json.loads(line)["text"] for line in open(args.docs, encoding="utf-8")]
    try:
        build_s, run = make_runner(args.child, args.encoding, args.hf_json)
    except peers.Unavailable as e:
        return {"skipped": str(e)}
    if args.check:  # one digest per document, for the exactness check before any timing
        try:
            return {"per_doc": [_digest([ids]) for ids in peers.per_doc(run(docs))]}
        except Exception as e:
            return {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
    c0, w0 = time.process_time(), time.perf_counter()
    out = run(docs)
    cold = (time.perf_counter() - w0, time.process_time() - c0)
    digest = _digest(out)
    del out
    warm = []
    for _ in range(args.repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        run(docs)
        warm.append((time.perf_counter() - w0, time.process_time() - c0))
    return {"build_s": build_s, "cold": cold, "warm": warm, "digest": digest}


# ---------------------------------------------------------------- the parent

def available(name: str) -> "str | None":
    """None when the runner can run here, else why not (peers answer in their check child)."""
    if name == OURS:
        from gputok.backends import native

        ok, why = native.available()
        if not ok:
            return why
    return None


def measure(name, encoding, docs_file, hf_json, repeat, timeout, check=False) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--encoding", encoding, "--docs",
           docs_file, "--hf-json", hf_json, "--repeat", str(repeat)] + ["--check"] * check
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{name} on {encoding} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def warm_caches(encodings, runners) -> None:
    """Build each encoding's on-disk caches (ranks, device tables) once, here in the parent:
    a cold run is a fresh process on a machine that has run gputok before. On a fresh machine
    the first cold native batch of each encoding built its device tables itself (0.5-1.5 s of
    a 4 MB batch: 2.4-3.6 MB/s on a 16-core host)."""
    import gputok

    texts = ["warm the caches", "up 123 \u4e2d\u6587"] * 2
    for encoding in encodings:
        enc = gputok.get_encoding(encoding)
        for name in runners:
            if name.startswith("gputok") and name.endswith("batch") and \
                    available(name) is None:
                enc.encode_batch_arrays(texts, disallowed_special=(), backend=name.split()[1])


def run_cell(encoding, kind, args, tmp: Path) -> dict:
    import gputok
    from gputok.export import save_hf_json

    docs = _common.corpus(kind, args.mb)
    if args.doc_chars:  # the same text cut into short documents (chat messages, sentences)
        text = " ".join(docs)
        docs = [text[i:i + args.doc_chars] for i in range(0, len(text), args.doc_chars)]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    docs_file = tmp / f"{kind}.jsonl"
    with open(docs_file, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    hf_json = tmp / f"{encoding}.tokenizer.json"
    if not hf_json.exists():  # (main exports every encoding's before the first cell)
        save_hf_json(gputok.get_encoding(encoding), hf_json)
    cell = {"docs": len(docs), "bytes": nbytes, "runners": {}, "skipped": {}, "inexact": {}}
    # exactness before any timing: each runner's ids, document by document, against tiktoken's
    reference = [_digest([ids]) for ids in
                 _common.tiktoken_for(encoding).encode_ordinary_batch(docs, num_threads=THREADS)]
    names = []
    for name in args.runners:
        why = available(name)
        got = {} if why else measure(name, encoding, str(docs_file), str(hf_json), 0,
                                     args.timeout, check=True)
        why = why or got.get("skipped")
        if why:
            cell["skipped"][name] = why
            continue
        bad = got.get("failed") or [i for i, (a, b) in enumerate(zip(got["per_doc"], reference))
                                    if a != b] or len(got["per_doc"]) != len(reference)
        if not bad:
            names.append(name)
            continue
        what = bad if isinstance(bad, str) else (
            f"ids differ from tiktoken's on {len(bad) if isinstance(bad, list) else 'all'} of "
            f"{len(docs)} documents" + (f" (first: document {bad[0]} {docs[bad[0]][:60]!r})"
                                        if isinstance(bad, list) else ""))
        if name.startswith("gputok"):
            raise SystemExit(f"{encoding} x {kind}: {name}: {what}; not timing")
        cell["inexact"][name] = what
    # rounds of every runner in turn: a change in the machine's load hits all of them alike; each
    # round starts with the next runner, so none is always the first fresh process after this
    # one's set-up (the corpus, and the HF export, built and freed here: on a VM that backs
    # freed memory again slowly, the next process's new pages cost several times more)
    for k in range(args.rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            got = measure(name, encoding, str(docs_file), str(hf_json), args.repeat,
                          args.timeout)
            r = cell["runners"].setdefault(name, {"build_s": [], "cold": [], "warm": [],
                                                  "digest": got["digest"]})
            if got["digest"] != r["digest"]:
                raise SystemExit(f"{name}: ids differ between two runs")
            r["build_s"].append(got["build_s"])
            r["cold"].append(got["cold"])
            r["warm"].extend(got["warm"])
    return cell


def _rates(r: dict, mb: float) -> dict:
    """MB/s from the medians over all rounds (cold: one per round; warm: every pass)."""
    med = statistics.median
    nan = float("nan")
    warm_wall = med(w for w, _ in r["warm"]) if r["warm"] else nan
    warm_cpu = med(c for _, c in r["warm"]) if r["warm"] else nan
    return {"cold": mb / med(w for w, _ in r["cold"]), "cold_cpu": mb / med(c for _, c in r["cold"]),
            "warm": mb / warm_wall, "warm_cpu": mb / warm_cpu, "build_s": med(r["build_s"])}


def report(encoding, kind, cell) -> list:
    mb = cell["bytes"] / 1e6
    print(f"\n{encoding} x {kind}: {cell['docs']} docs, {mb:.2f} MB; ids checked identical to "
          f"tiktoken's before timing, for all {len(cell['runners'])} runners timed")
    rates = {n: _rates(r, mb) for n, r in cell["runners"].items()}
    ours = rates.get(OURS)
    print(f"  {'MB/s (median of warm passes)':<30}{'start s':>8}{'cold':>8}{'cold cpu':>9}"
          f"{'warm':>8}{'warm cpu':>9}  {'native cold / this':>19}{'(cpu)':>7}")
    lines = []
    for n, x in rates.items():
        rel = (f"{ours['cold'] / x['cold']:18.2f}x{ours['cold_cpu'] / x['cold_cpu']:6.2f}x"
               if ours else "")
        label = n.replace("tiktoken batch", f"tiktoken batch {THREADS}t")
        print(f"  {label:<30}{x['build_s']:8.2f}{x['cold']:8.2f}{x['cold_cpu']:9.2f}"
              f"{x['warm']:8.2f}{x['warm_cpu']:9.2f}  {rel}")
        lines.append((n, x))
    for n, why in cell["inexact"].items():
        print(f"  {n:<30} NOT EXACT (not timed, in no ratio): {why}")
    for n, why in cell["skipped"].items():
        print(f"  {n:<30} skipped: {why}")
    fast = {n: x for n, x in rates.items() if n in FASTEST}
    if ours and fast:
        cold = max(fast, key=lambda n: fast[n]["cold"])
        warm = max(fast, key=lambda n: fast[n]["warm"])
        print(f"  the bar: fastest exact peer cold {cold} ({fast[cold]['cold']:.2f} MB/s), warm "
              f"{warm} ({fast[warm]['warm']:.2f}); native / it: cold "
              f"{ours['cold'] / fast[cold]['cold']:.2f}x, warm "
              f"{ours['warm'] / fast[warm]['warm']:.2f}x")
    elif ours:
        print("  the bar: no fastest exact peer ran in this cell (see skipped / NOT EXACT)")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"],
                   help="corpus kinds from tests/testdata.py, or 'sample' (bundled Austen)")
    p.add_argument("--mb", type=float, default=4.0, help="MB per corpus kind")
    p.add_argument("--repeat", type=int, default=2, help="warm passes per runner and round")
    p.add_argument("--rounds", type=int, default=3,
                   help="fresh processes per runner, taken in turns (medians are reported)")
    p.add_argument("--runners", nargs="+", default=RUNNERS, choices=RUNNERS)
    p.add_argument("--doc-chars", type=int, default=0,
                   help="cut each corpus into documents of this many characters (default: "
                        "the corpus' own documents, 4-14 KB)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--e2e", action="store_true", help="also time `gputok encode` end to end")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/encode.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--encoding", help=argparse.SUPPRESS)
    p.add_argument("--docs", help=argparse.SUPPRESS)
    p.add_argument("--hf-json", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if REFERENCE not in args.runners:
        args.runners = [REFERENCE] + args.runners
    _common.compile_bytecode()
    dists = ["tiktoken", "riptoken", "tokenizers", "gigatoken", "toktok-rs", "quicktok-v1"]
    with _common.recording(args.record, "bench_encode.py", "encode throughput vs the peers, "
                           "cold and warm, fresh processes", dists) as rec:
        print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}\n"
              f"command: python {' '.join(sys.argv)}\nload average: {os.getloadavg()}\n"
              f"versions: {_common.versions(dists)}")
        results = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
                   "command": " ".join(sys.argv), "commit": _common.commit(), "cells": {}}
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            if "HF tokenizers batch" in args.runners:
                import gputok
                from gputok.export import save_hf_json

                for encoding in args.encodings:  # before any timing, not between cells
                    save_hf_json(gputok.get_encoding(encoding),
                                 tmp / f"{encoding}.tokenizer.json")
            if any(r.startswith("gputok") and r.endswith("batch") for r in args.runners):
                warm_caches(args.encodings, args.runners)
            for encoding in args.encodings:
                for kind in args.kinds:
                    cell = run_cell(encoding, kind, args, tmp)
                    results["cells"][f"{encoding}/{kind}"] = cell
                    report(encoding, kind, cell)
            if args.e2e:
                import bench_e2e

                results["e2e"] = bench_e2e.run(args.encodings[0], args.kinds, args.mb,
                                               args.repeat, tmp)
        print(f"\nload average at the end: {os.getloadavg()}")
        rec["data"] = results
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
