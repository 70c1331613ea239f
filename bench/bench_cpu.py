"""The fastest exact tokenizer on a CPU: gputok's native device against the CPU tokenizers.

Cells: cl100k_base and o200k_base (tiktoken's rule) and Llama 3 / Qwen2 (tokenizer.json), each
on prose, code and multilingual text. Peers, where installed and where they have the model:

  gputok             ``encode_batch_arrays(backend="native")`` (all threads, or one)
  gigatoken          the fast API: ``Tokenizer.from_tiktoken(path)`` / ``Tokenizer(json)``,
                     ``encode_batch``
  gigatoken tiktoken its tiktoken mode: ``as_tiktoken().encode_ordinary_batch``
  toktok             ``toktok._encoding(name).encode_batch_to_numpy(docs, threads)``
  quicktok           ``quicktok.get_encoding(name).encode_batch(docs, threads)``
  tiktoken           ``encode_ordinary_batch(docs, num_threads)``
  HF tokenizers      ``encode_batch_fast`` (tiktoken models: gputok's tokenizer.json export)

Every peer runs in fresh processes (``--child``): the tokenizer is built (start-up), the first
pass over the corpus is the *cold* time, ``--repeat`` more passes of the same documents the
*warm* time; ``--rounds`` rounds take the peers in turn, each round starting with the next one,
and medians are reported. Before any time is reported, each peer's ids are compared document by
document with the reference library's (tiktoken, or HF tokenizers for tokenizer.json): a peer
that differs is listed with the documents it gets wrong and left out of the ratios. Times are
CPU seconds of the whole process (every thread) and wall seconds; MB/s is of the wall time, the
ratio is gputok's MB/s over the peer's (above 1: gputok faster). ``--threads 1`` gives every
peer one thread (the per-core table).

    python bench/bench_cpu.py                                # every cell, all threads
    python bench/bench_cpu.py --threads 1 --cells o200k/prose

The corpus job (``gputok encode`` of a JSONL file to shards, against gigatoken's
``encode_files`` and the other peers' minimal scripts) is ``bench_e2e.py``: its 96 MB form is
``python bench/bench_e2e.py --encoding o200k_base --mb 32`` (three kinds of 32 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

TIKTOKEN_MODELS = ("cl100k_base", "o200k_base")
JSON_MODELS = {"llama3": "llama3_tokenizer_json", "qwen2": "qwen2_tokenizer_json"}
SHORT = {"cl100k": "cl100k_base", "o200k": "o200k_base", "llama3": "llama3", "qwen2": "qwen2"}
KINDS = ("prose", "code", "multilingual")
PEERS = ("gputok", "gigatoken", "gigatoken tiktoken", "toktok", "quicktok", "tiktoken",
         "HF tokenizers")
OURS = "gputok"
# which of their bundled encodings the peers with no loader have the model as
TOKTOK_NAMES = {"cl100k_base": "cl100k_base", "o200k_base": "o200k_base"}
QUICKTOK_NAMES = {"cl100k_base": "cl100k_base", "o200k_base": "o200k_base", "llama3": "llama3"}


def model_file(model: str) -> str:
    import testdata

    if model in JSON_MODELS:
        return str(testdata.vocab_path(JSON_MODELS[model]))
    return str(testdata.vocab_path(model))


def tiktoken_path(model: str, tmp: Path) -> str:
    """The model's .tiktoken file under its own name (gigatoken takes the pattern from it)."""
    dst = tmp / f"{model}.tiktoken"
    if not dst.exists():
        dst.write_bytes(Path(model_file(model)).read_bytes())
    return str(dst)


# ---------------------------------------------------------------- one peer, in a child process

def _split(ids, off) -> list:
    return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)]


def make_peer(peer: str, model: str, threads: int, files: dict):
    """(build seconds, encode(docs) -> per-document id sequences)."""
    t0 = time.perf_counter()
    par = threads != 1
    if peer == "gputok":
        import gputok

        enc = gputok.get_encoding(model) if model in TIKTOKEN_MODELS else gputok.load(
            model_file(model))
        kw = {"disallowed_special": ()} if model in TIKTOKEN_MODELS else {"allowed_special": "all"}
        gputok.backends.get_backend("native")  # (the library loads here, not in a pass)

        def run(docs):
            return _split(*enc.encode_batch_arrays(docs, backend="native", **kw))
    elif peer.startswith("gigatoken"):
        import gigatoken

        tok = gigatoken.Tokenizer.from_tiktoken(files["tiktoken"]) if model in TIKTOKEN_MODELS \
            else gigatoken.Tokenizer(model_file(model))
        if peer == "gigatoken":
            def run(docs):
                lay = tok.encode_batch(docs, parallel=par).layout
                return _split(lay.content.data, lay.offsets.data)
        else:
            tk = tok.as_tiktoken()

            def run(docs):
                return tk.encode_ordinary_batch(docs, num_threads=threads or 8)
    elif peer == "toktok":
        import toktok

        tok = toktok._encoding(TOKTOK_NAMES[model])
        n = threads or (os.cpu_count() or 1)

        def run(docs):
            return _split(*tok.encode_batch_to_numpy(docs, n))
    elif peer == "quicktok":
        import quicktok

        tok = quicktok.get_encoding(QUICKTOK_NAMES[model])

        def run(docs):
            return _split(*tok.encode_batch(docs, threads))
    elif peer == "tiktoken":
        tk = _common.tiktoken_for(model)
        n = threads or (os.cpu_count() or 1)

        def run(docs):
            return tk.encode_ordinary_batch(docs, num_threads=n)
    elif peer == "HF tokenizers":
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(files["json"])
        fast = getattr(hf, "encode_batch_fast", hf.encode_batch)

        def run(docs):
            return [e.ids for e in fast(docs, add_special_tokens=False)]
    else:
        raise SystemExit(f"unknown peer {peer!r}")
    return time.perf_counter() - t0, run


def _digests(per_doc) -> list:
    import numpy as np

    return [hashlib.sha1(np.asarray(x, np.uint32).tobytes()).hexdigest()[:12] for x in per_doc]


def _times():
    return time.perf_counter(), time.process_time()


def child(args) -> dict:
    if args.threads == 1:  # every peer on one thread (those that read these)
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    docs = [json.loads(line)["text"] for line in open(args.docs, encoding="utf-8")]
    files = json.loads(args.files)
    build_s, run = make_peer(args.child, args.model, args.threads, files)
    w0, c0 = _times()
    out = run(docs)
    w1, c1 = _times()
    cold = (w1 - w0, c1 - c0)
    digests = _digests(out) if args.check else []
    del out
    warm = []
    for _ in range(args.repeat):
        w0, c0 = _times()
        run(docs)
        w1, c1 = _times()
        warm.append((w1 - w0, c1 - c0))
    return {"build_s": build_s, "cold": cold, "warm": warm, "digests": digests,
            "rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM: ru_maxrss keeps the parent's peak
    across fork and exec)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- the parent

def available(peer: str, model: str) -> "str | None":
    mods = {"gigatoken": "gigatoken", "gigatoken tiktoken": "gigatoken", "toktok": "toktok",
            "quicktok": "quicktok", "tiktoken": "tiktoken", "HF tokenizers": "tokenizers"}
    mod = mods.get(peer)
    if mod and importlib.util.find_spec(mod) is None:
        return f"not installed ({mod})"
    if peer == "toktok" and model not in TOKTOK_NAMES:
        return "no such bundled encoding"
    if peer == "quicktok" and model not in QUICKTOK_NAMES:
        return "no such bundled encoding"
    if peer in ("tiktoken", "gigatoken tiktoken") and model not in TIKTOKEN_MODELS:
        return "a tiktoken encoding only"
    return None


def reference(model: str, docs: list, files: dict) -> list:
    """The reference library's ids per document (tiktoken / HF tokenizers)."""
    if model in TIKTOKEN_MODELS:
        tk = _common.tiktoken_for(model)
        return _digests([tk.encode_ordinary(d) for d in docs])
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(files["json"])
    return _digests([e.ids for e in hf.encode_batch(docs, add_special_tokens=False)])


def measure(peer, model, docs_file, files, args, check: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", peer, "--model", model, "--docs", docs_file,
           "--files", json.dumps(files), "--repeat", str(args.repeat),
           "--threads", str(args.threads)] + (["--check"] if check else [])
    env = dict(os.environ)
    if args.threads == 1:
        env["GPUTOK_NUM_THREADS"] = "1"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_cell(model, kind, args, tmp: Path) -> dict:
    docs = _common.corpus(kind, args.mb)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    docs_file = tmp / f"{kind}.jsonl"
    with open(docs_file, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    files = {"json": str(tmp / f"{model}.tokenizer.json") if model in TIKTOKEN_MODELS
             else model_file(model)}
    if model in TIKTOKEN_MODELS:
        files["tiktoken"] = tiktoken_path(model, tmp)
        if not Path(files["json"]).exists():
            import gputok
            from gputok.export import save_hf_json

            save_hf_json(gputok.get_encoding(model), files["json"])
    want = reference(model, docs, files)
    cell = {"docs": len(docs), "bytes": nbytes, "peers": {}, "skipped": {}, "inexact": {}}
    peers = []
    for p in args.peers:
        why = available(p, model)
        if why is None:
            peers.append(p)
        else:
            cell["skipped"][p] = why
    for k in range(args.rounds):
        for p in peers[k % len(peers):] + peers[:k % len(peers)]:
            if p in cell["skipped"]:
                continue
            got = measure(p, model, str(docs_file), files, args, check=k == 0)
            if "error" in got:
                cell["skipped"][p] = f"failed: {got['error']}"
                cell["peers"].pop(p, None)
                continue
            if k == 0:
                bad = [i for i, (a, b) in enumerate(zip(got["digests"], want)) if a != b]
                if bad or len(got["digests"]) != len(want):
                    cell["inexact"][p] = bad
            r = cell["peers"].setdefault(p, {"build_s": [], "cold": [], "warm": [], "rss_mb": []})
            r["build_s"].append(got["build_s"])
            r["cold"].append(got["cold"])
            r["warm"].extend(got["warm"])
            r["rss_mb"].append(got["rss_mb"])
    return cell


def rates(r: dict, mb: float) -> dict:
    med = statistics.median
    return {"cold": mb / med(w for w, _ in r["cold"]), "warm": mb / med(w for w, _ in r["warm"]),
            "warm_cpu": mb / med(c for _, c in r["warm"]), "build_s": med(r["build_s"]),
            "rss_mb": max(r["rss_mb"])}


def report(model, kind, cell, threads) -> None:
    mb = cell["bytes"] / 1e6
    print(f"\n{model} x {kind}: {cell['docs']} docs, {mb:.2f} MB, "
          f"{'all threads' if threads != 1 else 'one thread'}")
    for p, bad in cell["inexact"].items():
        print(f"  {p}: NOT EXACT on {len(bad)} documents {bad[:10]} (left out of the ratios)")
    rs = {p: rates(r, mb) for p, r in cell["peers"].items()}
    ours = rs.get(OURS) if OURS not in cell["inexact"] else None
    print(f"  {'MB/s (medians)':<20}{'start s':>8}{'cold':>8}{'warm':>8}{'warm cpu':>9}"
          f"{'RSS MB':>8}  {'gputok/peer cold':>17}{'warm':>7}")
    for p, x in rs.items():
        rel = ""
        if ours and p != OURS and p not in cell["inexact"]:
            rel = f"{ours['cold'] / x['cold']:16.2f}x{ours['warm'] / x['warm']:6.2f}x"
        print(f"  {p:<20}{x['build_s']:8.2f}{x['cold']:8.1f}{x['warm']:8.1f}{x['warm_cpu']:9.1f}"
              f"{x['rss_mb']:8.0f}  {rel}")
    for p, why in cell["skipped"].items():
        print(f"  {p:<20}skipped: {why}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=None,
                   help="model/kind cells (models: cl100k, o200k, llama3, qwen2); default all")
    p.add_argument("--mb", type=float, default=8.0, help="MB of text per cell")
    p.add_argument("--repeat", type=int, default=3, help="warm passes per process")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per peer")
    p.add_argument("--threads", type=int, default=0, help="0: all threads; 1: one per peer")
    p.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/cpu.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--docs", help=argparse.SUPPRESS)
    p.add_argument("--files", help=argparse.SUPPRESS)
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    cells = args.cells or [f"{m}/{k}" for m in SHORT for k in KINDS]
    _common.compile_bytecode()
    with _common.recording(args.record, "bench_cpu.py", "the native CPU device against the CPU "
                           "tokenizers, cold and warm, in fresh processes",
                           ["gigatoken", "toktok-rs", "quicktok-v1", "tiktoken",
                            "tokenizers"]) as rec:
        print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d %H:%M')}\n"
              f"command: python {' '.join(sys.argv)}\nload average: {os.getloadavg()}")
        results = {"machine": _common.machine(), "command": " ".join(sys.argv), "cells": {}}
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for c in cells:
                m, kind = c.split("/")
                model = SHORT.get(m, m)
                cell = run_cell(model, kind, args, tmp)
                results["cells"][c] = cell
                report(model, kind, cell, args.threads)
        print(f"\nload average at the end: {os.getloadavg()}")
        rec["data"] = results
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))

if __name__ == "__main__":
    main()
