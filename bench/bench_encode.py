"""Encode throughput: gputok (native CPU, numpy) vs tiktoken, riptoken and HF tokenizers.

For each encoding and corpus kind, every runner encodes the same documents in its own fresh
process (``--child``): the encoder is built (timed as start-up), the first pass over the corpus
is the *cold* time (empty caches, first use of every table), then ``--repeat`` more passes give
the *warm* time. This is done in ``--rounds`` rounds, all runners in turn (each round starting
with the next runner), and medians are reported (the machine's load changes under a long run;
rounds spread it over every runner).
Wall and CPU time (all threads) are both recorded: the wall time is what a user waits; the CPU
time is the per-core cost, but on a virtual machine it is only approximate (here single-thread
code has shown CPU times above its wall time). Before anything is reported, every runner's ids
are checked identical to tiktoken's (a digest of all ids and document lengths); a runner that
differs stops the benchmark.

Runners (peers that are not installed are listed as such):
  gputok native batch   encode_batch_arrays(backend="native"): the kernels on every core
  gputok numpy batch    encode_batch_arrays(backend="numpy"): the portable host path
  gputok per doc        encode_ordinary per document (the default backend for long texts)
  tiktoken per doc      encode_ordinary per document
  tiktoken batch        encode_ordinary_batch(num_threads=all cores)
  riptoken per doc / batch   (pip install riptoken; its batch uses every core)
  HF tokenizers batch   encode_batch_fast on gputok's tokenizer.json export of the encoding

``--doc-chars N`` cuts each corpus into documents of N characters (the per-document API on
short texts: ``--doc-chars 200 --runners "gputok per doc" "tiktoken per doc"``).

``--e2e`` adds ``gputok encode`` end to end (a JSONL corpus -> .npy shards) against a minimal
tiktoken script doing the same (read, encode in batches, write), with peak RSS (``bench_e2e.py``).

    python bench/bench_encode.py --encodings cl100k_base o200k_base --kinds prose code multilingual
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

THREADS = os.cpu_count() or 1
RUNNERS = ["gputok native batch", "gputok numpy batch", "gputok per doc", "tiktoken per doc",
           "tiktoken batch", "riptoken per doc", "riptoken batch", "HF tokenizers batch"]
REFERENCE = "tiktoken per doc"  # whose ids everyone must match
OURS = "gputok native batch"
# PyPI packages of these names that are not comparable BPE tokenizers, checked by hand
NOT_COMPARABLE = {
    "toktok": "toktok 0.0.2 on PyPI is the tok-tok word tokenizer (no BPE, no ids)",
    "quicktok": "quicktok 0.2.0 on PyPI is a minbpe-style BasicTokenizer (no regex split, no "
                "tiktoken vocabulary loader): it cannot produce tiktoken's ids",
}


# ---------------------------------------------------------------- one runner, in a child process

def _digest(per_doc_ids) -> str:
    import numpy as np

    h = hashlib.sha256()
    for ids in per_doc_ids:
        a = np.asarray(ids, np.uint32)
        h.update(len(a).to_bytes(8, "little") + a.tobytes())
    return h.hexdigest()[:16]


def _split(ids, off) -> list:
    return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)]


def make_runner(name: str, encoding: str, hf_json: str):
    """(build seconds, encode(docs) -> per-document id sequences)."""
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
                return _split(*enc.encode_batch_arrays(docs, disallowed_special=(),
                                                       backend=backend))
    elif name.startswith("tiktoken"):
        tk = _common.tiktoken_for(encoding)
        if name == "tiktoken per doc":
            def run(docs):
                return [tk.encode_ordinary(d) for d in docs]
        else:
            def run(docs):
                return tk.encode_ordinary_batch(docs, num_threads=THREADS)
    elif name.startswith("riptoken"):
        import riptoken

        tk = _common.tiktoken_for(encoding)
        core = riptoken.CoreBPE(tk._mergeable_ranks, tk._special_tokens, tk._pat_str)
        if name == "riptoken per doc":
            def run(docs):
                return [core.encode_ordinary(d) for d in docs]
        else:
            def run(docs):
                return core.encode_ordinary_batch(docs)
    elif name == "HF tokenizers batch":
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(hf_json)
        fast = getattr(hf, "encode_batch_fast", hf.encode_batch)

        def run(docs):
            return [e.ids for e in fast(docs, add_special_tokens=False)]
    else:
        raise SystemExit(f"unknown runner {name!r}")
    return time.perf_counter() - t0, run


def child(args) -> dict:
    docs = [json.loads(line)["text"] for line in open(args.docs, encoding="utf-8")]
    build_s, run = make_runner(args.child, args.encoding, args.hf_json)
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
    """None when the runner can run here, else why not."""
    if name.startswith("riptoken") and importlib.util.find_spec("riptoken") is None:
        return "not installed (pip install riptoken)"
    if name.startswith("HF") and importlib.util.find_spec("tokenizers") is None:
        return "not installed (pip install tokenizers)"
    if name == OURS:
        from gputok.backends import native

        ok, why = native.available()
        if not ok:
            return why
    return None


def measure(name, encoding, docs_file, hf_json, repeat, timeout) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--encoding", encoding, "--docs",
           docs_file, "--hf-json", hf_json, "--repeat", str(repeat)]
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
    cell = {"docs": len(docs), "bytes": nbytes, "runners": {}, "skipped": {}}
    names = []
    for name in args.runners:
        why = available(name)
        if why is None:
            names.append(name)
        else:
            cell["skipped"][name] = why
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
    ref = cell["runners"][REFERENCE]["digest"]
    bad = [n for n, r in cell["runners"].items() if r["digest"] != ref]
    if bad:
        raise SystemExit(f"{encoding} x {kind}: ids differ from tiktoken's for {bad}; not "
                         "reporting timings")
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
    print(f"\n{encoding} x {kind}: {cell['docs']} docs, {mb:.2f} MB; ids identical to "
          f"tiktoken for all {len(cell['runners'])} runners")
    rates = {n: _rates(r, mb) for n, r in cell["runners"].items()}
    ours = rates.get(OURS)
    print(f"  {'MB/s (median of warm passes)':<26}{'start s':>8}{'cold':>8}{'cold cpu':>9}"
          f"{'warm':>8}{'warm cpu':>9}  {'native cold / this':>19}{'(cpu)':>7}")
    lines = []
    for n, x in rates.items():
        rel = (f"{ours['cold'] / x['cold']:18.2f}x{ours['cold_cpu'] / x['cold_cpu']:6.2f}x"
               if ours else "")
        label = n.replace("tiktoken batch", f"tiktoken batch {THREADS}t")
        print(f"  {label:<26}{x['build_s']:8.2f}{x['cold']:8.2f}{x['cold_cpu']:9.2f}"
              f"{x['warm']:8.2f}{x['warm_cpu']:9.2f}  {rel}")
        lines.append((n, x))
    for n, why in cell["skipped"].items():
        print(f"  {n:<26} skipped: {why}")
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
    p.add_argument("--child", help=argparse.SUPPRESS)
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
    print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}\n"
          f"command: python {' '.join(sys.argv)}\nload average: {os.getloadavg()}")
    for mod, why in NOT_COMPARABLE.items():
        print(f"peer {mod}: not timed: {why}")
    results = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
               "command": " ".join(sys.argv), "cells": {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "HF tokenizers batch" in args.runners and available("HF tokenizers batch") is None:
            import gputok
            from gputok.export import save_hf_json

            for encoding in args.encodings:  # before any timing, not between cells
                save_hf_json(gputok.get_encoding(encoding), tmp / f"{encoding}.tokenizer.json")
        if any(r.startswith("gputok") and r.endswith("batch") for r in args.runners):
            warm_caches(args.encodings, args.runners)
        for encoding in args.encodings:
            for kind in args.kinds:
                cell = run_cell(encoding, kind, args, tmp)
                results["cells"][f"{encoding}/{kind}"] = cell
                report(encoding, kind, cell)
        if args.e2e:
            import bench_e2e

            results["e2e"] = bench_e2e.run(args.encodings[0], args.kinds, args.mb, args.repeat,
                                           tmp)
    print(f"\nload average at the end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
