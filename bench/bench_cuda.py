"""GPU encode throughput: gputok's cuda backend vs the fastest exact CPU peers on all cores.

On a GPU machine (H100/H200), about 1 GB of mixed text built from the test corpora:

    pip install -e ".[test,bench,cuda12]"
    python bench/bench_cuda.py --size-mb 1024 --record bench/results/cuda.md

Without a GPU, a small dry run proves the script (the numpy backend stands in, kernel timings
are skipped with a note):

    python bench/bench_cuda.py --backend numpy --size-mb 2 --out /tmp/bench_cuda.md

What it does, per encoding:
1. builds the text: documents of every corpus kind, repeated in shuffled order until
   ``--size-mb`` is reached (deterministic seed); also the same documents as UTF-8 bytes;
2. checks correctness before any timing: gputok's ids (and document offsets) equal tiktoken's
   on every document, and so do each peer's (a peer that disagrees is not timed and in no
   ratio, with a note naming the first document that differs);
3. times, best of ``--repeat`` after a warm-up: gputok end to end (Python str in -> numpy ids
   out; and bytes in), with piece dedup off and on; the fastest exact peers on all cores
   (gigatoken and its tiktoken mode, toktok-rs, quicktok-v1: ``bench/peers.py``), tiktoken
   ``encode_ordinary_batch`` with all cores and on one thread (on a ``--single-mb`` slice), HF
   tokenizers' batch encode;
4. kernel-only throughput of one chunk already on the GPU, per stage (CUDA events);
5. prints MB/s and the ratio of gputok to each peer (and to the fastest exact one), and writes
   the record (``--record``; ``--out`` writes the tables as markdown plus JSON next to it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import warnings
from itertools import chain
from pathlib import Path

import numpy as np

import _common
import peers as peer_lib

import gputok  # noqa: E402  (path set up by _common)


def build_corpus(kinds, size_mb: float, corpus_mb: float, seed: int = 0) -> list[str]:
    pool = [d for kind in kinds for d in _common.corpus(kind, corpus_mb) if d]
    if not pool:
        raise SystemExit("no documents: run `python tests/testdata.py fetch` first")
    rng = random.Random(seed)
    want = int(size_mb * 1e6)
    docs: list[str] = []
    total = 0
    while total < want:
        batch = pool[:]
        rng.shuffle(batch)
        for d in batch:
            docs.append(d)
            total += len(d.encode("utf-8"))
            if total >= want:
                break
    return docs


def flatten(lists, dtype) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    off = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    ids = np.fromiter(chain.from_iterable(lists), dtype, int(off[-1]))
    return ids, off


def first_difference(ids, off, ref_ids, ref_off) -> "int | None":
    if len(off) != len(ref_off):
        return 0
    same_len = off == ref_off
    if not same_len.all():
        return int(np.flatnonzero(~same_len)[0]) - 1
    if len(ids) != len(ref_ids):
        return 0
    diff = np.flatnonzero(ids != ref_ids)
    if not len(diff):
        return None
    return int(np.searchsorted(off, diff[0], "right") - 1)


def make_backend(name: str, dedup: bool = False, chunk_mb: "float | None" = None):
    if name == "numpy":
        from gputok.backends import get_backend

        return get_backend("numpy")
    from gputok.backends import cuda

    ok, why = cuda.available()
    if not ok:
        raise SystemExit(f"the cuda backend is not available: {why}\n(for a dry run without a "
                         "GPU use --backend numpy)")
    return cuda.DeviceBackend(cuda.CupyDevice(), name="cuda", dedup=dedup,
                              chunk_bytes=int(chunk_mb * (1 << 20)) if chunk_mb else None)


def hf_peer(enc):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None, "HF tokenizers not installed (pip install tokenizers): skipped"
    from gputok.export import save_hf_json

    path = Path(tempfile.mkdtemp()) / "tokenizer.json"
    try:
        save_hf_json(enc, path)
    except Exception as e:  # an encoding the exporter does not handle
        return None, f"HF tokenizers: cannot export {enc.name} ({type(e).__name__}: {e})"
    tok = Tokenizer.from_file(str(path))
    fast = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    return (lambda docs: [e.ids for e in fast(docs, add_special_tokens=False)]), None


def run_encoding(name: str, docs: list[str], args, notes: list) -> dict:
    enc = gputok.get_encoding(name)
    tk = _common.tiktoken_for(name)
    threads = args.threads or os.cpu_count() or 1
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    mb = nbytes / 1e6
    docs_b = [d.encode("utf-8") for d in docs]
    be = make_backend(args.backend, chunk_mb=args.chunk_mb)
    row: dict = {"encoding": name, "docs": len(docs), "MB": round(mb, 2), "MB/s": {},
                 "notes": []}
    if args.backend != "numpy":
        row["where"] = be.describe(enc.model)
        print(f"  {row['where']}")
    if args.kernels_only:
        kernel_row(row, be, enc, docs, args)
        return row

    def ours(batch=docs, backend=be):
        return enc.encode_batch_arrays(batch, disallowed_special=(), backend=backend)

    # ---- correctness first
    t0 = time.perf_counter()
    ref_lists = tk.encode_ordinary_batch(docs, num_threads=threads)
    ref_ids, ref_off = flatten(ref_lists, enc.id_dtype)
    print(f"  reference ids from tiktoken: {len(ref_ids):,} tokens ({time.perf_counter() - t0:.1f} s)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for label, fn in (("str", lambda: ours()), ("bytes", lambda: ours(docs_b))):
            ids, off = fn()
            bad = first_difference(ids, off, ref_ids, ref_off)
            if bad is not None:
                raise SystemExit(f"{name}: gputok ({args.backend}, {label} input) differs from "
                                 f"tiktoken at document {bad}: {docs[bad][:100]!r}; not timing")
    row["tokens"] = int(len(ref_ids))
    peers = {}
    print("  the fastest exact peers (ids checked against tiktoken's first):")
    fast = peer_lib.checked(peer_lib.FASTEST, name, docs, ref_lists, threads=threads)
    for label, p in fast.items():
        peers[f"{label} {threads} threads"] = (lambda p=p: p.batch(docs))
    for label in peer_lib.FASTEST:
        if label not in fast:
            row["notes"].append(f"{label}: not timed (not available here, or not exact: see "
                                "the log)")
    peers[f"tiktoken batch {threads} threads"] = lambda: tk.encode_ordinary_batch(
        docs, num_threads=threads)
    hf, why = hf_peer(enc)
    if hf is None:
        row["notes"].append(why)
    else:
        hf_ids, hf_off = flatten(hf(docs), enc.id_dtype)
        bad = first_difference(hf_ids, hf_off, ref_ids, ref_off)
        if bad is None:
            peers["HF tokenizers batch"] = lambda: hf(docs)
        else:
            row["notes"].append(f"HF tokenizers differs from tiktoken at document {bad}: "
                                "not timed")
    print(f"  ids identical: gputok ({args.backend}) == tiktoken"
          + (" == HF tokenizers" if "HF tokenizers batch" in peers else ""))

    # ---- timings
    timed = {f"gputok {args.backend} (str in)": ours,
             f"gputok {args.backend} (bytes in)": lambda: ours(docs_b)}
    held = [be]
    if args.backend == "cuda":
        be_dd = make_backend("cuda", dedup=True, chunk_mb=args.chunk_mb)
        held.append(be_dd)
        timed["gputok cuda dedup=True (str in)"] = lambda: ours(docs, be_dd)
        if not args.no_native:  # the CPU device on this host's cores, same documents
            from gputok.backends import get_backend

            native = get_backend("native")
            ids, off = ours(docs, native)
            if first_difference(ids, off, ref_ids, ref_off) is None:
                timed[f"gputok native {native.dev.threads} threads (str in)"] = \
                    lambda: ours(docs, native)
            else:
                row["notes"].append("gputok native differs from tiktoken: not timed")
    timed.update(peers)
    with warnings.catch_warnings(), contextlib.ExitStack() as hold:
        warnings.simplefilter("ignore", RuntimeWarning)
        for b in held:  # (as a job does: the pools kept from one timed call to the next)
            hold.enter_context(b.holding())
        # after a warm-up each (tables, compilation, caches), rounds of every runner in turn
        for label, t in _common.best_interleaved(timed, args.repeat).items():
            row["MB/s"][label] = mb / t
            print(f"  {label:<40} {mb / t:10.1f} MB/s")
    single = [d for d in docs[: max(1, int(len(docs) * min(1.0, args.single_mb / mb)))]]
    smb = sum(len(d.encode()) for d in single) / 1e6
    t = _common.best_of(lambda: [tk.encode_ordinary(d) for d in single], 1)
    row["MB/s"]["tiktoken 1 thread"] = smb / t
    print(f"  {'tiktoken 1 thread':<40} {smb / t:10.1f} MB/s  (on {smb:.1f} MB)")

    kernel_row(row, be, enc, docs, args)
    base = row["MB/s"][f"gputok {args.backend} (str in)"]
    row["ratio"] = {label: base / v for label, v in row["MB/s"].items()}
    bar = max((k for k in row["MB/s"] if k.split(" ")[0] in ("gigatoken", "toktok-rs",
                                                             "quicktok-v1")),
              key=row["MB/s"].get, default=None)
    if bar:
        row["bar"] = bar
        print(f"  the bar: {bar} {row['MB/s'][bar]:.1f} MB/s; gputok {args.backend} (str in) / "
              f"it: {row['ratio'][bar]:.2f}x")
    return row


def kernel_row(row: dict, be, enc, docs, args) -> None:
    """Kernel-only throughput of one chunk already on the GPU, per stage (into ``row``)."""
    if args.backend != "cuda":
        row["notes"].append("kernel-only timings need the cuda backend (skipped)")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        k = be.time_kernels(enc.model, docs, repeat=args.repeat)
    row["kernels"] = k
    kmb = k["bytes"] / 1e6
    row["MB/s"]["gputok cuda kernels only"] = kmb / (k["total_ms"] / 1e3)
    stages = ", ".join(f"{s} {v:.2f} ms" for s, v in k["ms"].items())
    print(f"  kernels only on one {kmb:.0f} MB chunk ({k['mode']} pre-tokenization): "
          f"{kmb / (k['total_ms'] / 1e3):.0f} MB/s; {stages}")


def markdown(res: dict) -> str:
    out = [f"# gputok cuda benchmark ({res['date']})", "",
           f"- machine: {res['machine']}", f"- device: {res['device']}",
           f"- command: `{res['command']}`", f"- text: {res['MB']} MB ({res['docs']} documents, "
           f"kinds {', '.join(res['kinds'])})", ""]
    for row in res["encodings"]:
        out += [f"## {row['encoding']}", ""]
        if row.get("where"):
            out += [f"{row['where']}", ""]
        out += ["| | MB/s | gputok (str in) / this |", "|---|---:|---:|"]
        for label, v in row["MB/s"].items():
            ratio = row.get("ratio", {}).get(label)
            out.append(f"| {label} | {v:,.1f} | " + (f"{ratio:.2f}x |" if ratio else "- |"))
        if "kernels" in row:
            k = row["kernels"]
            out += ["", f"Kernel-only, one chunk of {k['bytes'] / 1e6:.0f} MB on the GPU "
                        f"({k['mode']} pre-tokenization), best of runs:", "",
                    "| stage | ms | MB/s |", "|---|---:|---:|"]
            for s, ms in k["ms"].items():
                out.append(f"| {s} | {ms:.2f} | {k['bytes'] / 1e3 / max(ms, 1e-9):,.0f} |")
        for note in row["notes"]:
            out.append(f"\n_note_: {note}")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base", "r50k_base"])
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual", "emoji"])
    p.add_argument("--size-mb", type=float, default=1024.0, help="text to build (MB)")
    p.add_argument("--corpus-mb", type=float, default=None,
                   help="MB of each corpus kind to draw documents from (default: the tests')")
    p.add_argument("--backend", default="cuda", choices=["cuda", "numpy"])
    p.add_argument("--chunk-mb", type=float, default=None, help="cuda chunk size (MiB)")
    p.add_argument("--threads", type=int, default=None, help="tiktoken threads (default: all)")
    p.add_argument("--single-mb", type=float, default=32.0,
                   help="MB for the one-thread tiktoken run")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", help="write results here (markdown; JSON next to it)")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/cuda.md")
    p.add_argument("--no-native", action="store_true",
                   help="do not time the native CPU device on this host beside CUDA")
    p.add_argument("--kernels-only", action="store_true",
                   help="only the per-stage kernel timings (no parity check, no peers): for "
                        "A/B runs of two source trees on one machine; parity is the GPU tests'")
    args = p.parse_args(argv)

    device = "none (dry run with the numpy backend)"
    if args.backend == "cuda":
        be = make_backend("cuda")
        device = be.dev.name
    dists = ["cupy", "tiktoken", "tokenizers", "gigatoken", "toktok-rs", "quicktok-v1"]
    with _common.recording(args.record, "bench_cuda.py", f"GPU encode throughput ({device}) "
                           "vs the fastest exact CPU peers", dists) as rec:
        print(f"machine: {_common.machine()}\ndevice: {device}")
        t0 = time.perf_counter()
        docs = build_corpus(args.kinds, args.size_mb, args.corpus_mb)
        nbytes = sum(len(d.encode()) for d in docs)
        print(f"text: {nbytes / 1e6:.1f} MB, {len(docs)} documents "
              f"({time.perf_counter() - t0:.1f} s)")
        res = {"date": time.strftime("%Y-%m-%d"), "machine": _common.machine(),
               "device": device, "commit": _common.commit(),
               "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
               "backend": args.backend, "MB": round(nbytes / 1e6, 2), "docs": len(docs),
               "kinds": args.kinds, "encodings": []}
        rec["data"] = res
        notes: list = []
        for name in args.encodings:
            print(f"\n{name}:")
            res["encodings"].append(run_encoding(name, docs, args, notes))
            if args.out:  # after each encoding: a run cut short keeps what it measured
                out = Path(args.out)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(markdown(res))
                out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
                print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
