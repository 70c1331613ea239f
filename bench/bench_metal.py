"""Metal encode throughput on Apple silicon: gputok's metal backend vs the fastest exact peers.

On a Mac with Apple silicon (the first run; the README's "Metal" section):

    pip install -e ".[test,bench,metal]" && python tests/testdata.py fetch
    python bench/bench_metal.py --size-mb 256 --record bench/results/metal.md

Without a Mac, ``--emulated`` runs the same script on the Metal backend over the CPU emulator
(``mlx[cpu]`` arrays, one fiber per GPU thread): a proof that the script works, not a speed
(``python bench/bench_metal.py --emulated --size-mb 0.2 --repeat 1``).

What it does, per encoding:
1. builds the text from the test corpora (``bench_cuda.build_corpus``: every kind, shuffled,
   deterministic), as ``str`` documents and as UTF-8 bytes;
2. checks correctness before any timing: gputok's ids and document offsets (metal backend)
   equal tiktoken's on every document; otherwise it stops and names the first document;
3. times, best of ``--repeat`` after a warm-up (shader compilation, tables): gputok end to end
   (Python str in -> numpy ids out; and bytes in), the fastest exact peers on all cores
   (gigatoken and its tiktoken mode, toktok-rs, quicktok-v1: ``bench/peers.py``; each one's ids
   checked against tiktoken's first, an inexact one not timed), tiktoken
   ``encode_ordinary_batch`` on all cores, and tiktoken on one thread (on a ``--single-mb``
   slice);
4. per-stage throughput of one chunk already on the device (``DeviceBackend.time_kernels``:
   the adapter's ``mark`` waits for the queued MLX work, so each stage is timed to completion);
5. prints MB/s and the ratio of gputok to each peer; ``--record`` writes the record, ``--out``
   the tables as markdown (+ JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import _common
import peers as peer_lib

import gputok  # noqa: E402  (path set up by _common)
from bench_cuda import build_corpus, first_difference, flatten  # noqa: E402


def make_backend(emulated: bool, chunk_mb: "float | None"):
    from gputok.backends import metal

    chunk = int(chunk_mb * (1 << 20)) if chunk_mb else None
    if emulated:
        from emulator.mlx_bridge import metal_kernel_maker

        return metal.emulated(metal_kernel_maker(), block=32, max_blocks=4, chunk_bytes=chunk,
                              name="metal emulator (mlx[cpu])")
    ok, why = metal.available()
    if not ok:
        raise SystemExit(f"the metal backend is not available: {why}\n(to check the script "
                         "without a Mac: --emulated --size-mb 0.2)")
    return metal.create(chunk_bytes=chunk)


def run_encoding(name: str, docs: list[str], be, args) -> dict:
    enc = gputok.get_encoding(name)
    tk = _common.tiktoken_for(name)
    threads = args.threads or os.cpu_count() or 1
    docs_b = [d.encode("utf-8") for d in docs]
    mb = sum(map(len, docs_b)) / 1e6
    row: dict = {"encoding": name, "docs": len(docs), "MB": round(mb, 3), "MB/s": {},
                 "where": be.describe(enc.model), "notes": []}
    print(f"  {row['where']}")

    def ours(batch=docs):
        return enc.encode_batch_arrays(batch, disallowed_special=(), backend=be)

    before = dict(be.fallbacks)
    ref_lists = tk.encode_ordinary_batch(docs, num_threads=threads)
    ref_ids, ref_off = flatten(ref_lists, enc.id_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for label, batch in (("str", docs), ("bytes", docs_b)):
            ids, off = ours(batch)
            bad = first_difference(ids, off, ref_ids, ref_off)
            if bad is not None:
                raise SystemExit(f"{name}: gputok metal ({label} input) differs from tiktoken "
                                 f"at document {bad}: {docs[bad][:100]!r}; not timing")
    row["tokens"] = int(len(ref_ids))
    row["fallbacks"] = {f"{s}/{r}": n - before.get((s, r), 0) for (s, r), n in
                        be.fallbacks.items() if n > before.get((s, r), 0)}  # these two runs
    print(f"  ids identical: gputok metal == tiktoken ({len(ref_ids):,} tokens); host "
          f"fallbacks: {row['fallbacks'] or 'none'}")

    print("  the fastest exact peers (ids checked against tiktoken's first):")
    fast = peer_lib.checked(peer_lib.FASTEST, name, docs, ref_lists, threads=threads)
    timed = {"gputok metal (str in)": ours, "gputok metal (bytes in)": lambda: ours(docs_b)}
    timed.update({f"{label} {threads} threads": (lambda p=p: p.batch(docs))
                  for label, p in fast.items()})
    timed[f"tiktoken batch {threads} threads"] = lambda: tk.encode_ordinary_batch(
        docs, num_threads=threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # after a warm-up each, rounds of every runner in turn
        for label, t in _common.best_interleaved(timed, args.repeat).items():
            row["MB/s"][label] = mb / t
            print(f"  {label:<36} {mb / t:10.2f} MB/s")
    single = docs[:max(1, int(len(docs) * min(1.0, args.single_mb / max(mb, 1e-9))))]
    smb = sum(len(d.encode()) for d in single) / 1e6
    t = _common.best_of(lambda: [tk.encode_ordinary(d) for d in single], 1)
    row["MB/s"]["tiktoken 1 thread"] = smb / t
    print(f"  {'tiktoken 1 thread':<36} {smb / t:10.2f} MB/s  (on {smb:.1f} MB)")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        k = be.time_kernels(enc.model, docs, repeat=args.repeat)
    row["stages"] = k
    kmb = k["bytes"] / 1e6
    row["MB/s"]["gputok metal stages only"] = kmb / max(k["total_ms"] / 1e3, 1e-12)
    print(f"  per stage on one {kmb:.2f} MB chunk ({k['mode']} pre-tokenization): "
          + ", ".join(f"{s} {v:.2f} ms ({kmb / max(v / 1e3, 1e-12):,.1f} MB/s)"
                      for s, v in k["ms"].items()))
    base = row["MB/s"]["gputok metal (str in)"]
    row["ratio"] = {label: base / v for label, v in row["MB/s"].items()}
    print(f"  gputok metal / tiktoken all cores: "
          f"{row['ratio'][f'tiktoken batch {threads} threads']:.2f}x")
    bar = max((f"{label} {threads} threads" for label in fast), key=row["MB/s"].get,
              default=None)
    if bar:
        row["bar"] = bar
        print(f"  the bar: {bar} {row['MB/s'][bar]:.2f} MB/s; gputok metal / it: "
              f"{row['ratio'][bar]:.2f}x")
    return row


def markdown(res: dict) -> str:
    out = [f"# gputok metal benchmark ({res['date']})", "", f"- machine: {res['machine']}",
           f"- device: {res['device']}", f"- command: `{res['command']}`",
           f"- text: {res['MB']} MB ({res['docs']} documents, kinds {', '.join(res['kinds'])})",
           ""]
    for row in res["encodings"]:
        out += [f"## {row['encoding']}", "", row["where"], "",
                "| | MB/s | gputok metal (str in) / this |", "|---|---:|---:|"]
        out += [f"| {k} | {v:,.2f} | {row['ratio'][k]:.2f}x |" for k, v in row["MB/s"].items()]
        k = row["stages"]
        out += ["", f"Per stage, one chunk of {k['bytes'] / 1e6:.2f} MB ({k['mode']} "
                    "pre-tokenization), best of runs:", "", "| stage | ms | MB/s |",
                "|---|---:|---:|"]
        out += [f"| {s} | {ms:.2f} | {k['bytes'] / 1e3 / max(ms, 1e-9):,.1f} |"
                for s, ms in k["ms"].items()]
        out += [f"\n_note_: {n}" for n in row["notes"]] + [""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base", "r50k_base"])
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual", "emoji"])
    p.add_argument("--size-mb", type=float, default=256.0, help="text to build (MB)")
    p.add_argument("--corpus-mb", type=float, default=None,
                   help="MB of each corpus kind to draw documents from (default: the tests')")
    p.add_argument("--chunk-mb", type=float, default=None, help="chunk size (MiB)")
    p.add_argument("--threads", type=int, default=None, help="tiktoken threads (default: all)")
    p.add_argument("--single-mb", type=float, default=16.0,
                   help="MB for the one-thread tiktoken run")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--emulated", action="store_true",
                   help="the Metal backend on the CPU emulator (checks the script, not speed)")
    p.add_argument("--out", help="write results here (markdown; JSON next to it)")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/metal.md")
    args = p.parse_args(argv)

    be = make_backend(args.emulated, args.chunk_mb)
    device = be.dev.name + (" (emulated: timings mean nothing)" if args.emulated else "")
    dists = ["mlx", "tiktoken", "gigatoken", "toktok-rs", "quicktok-v1"]
    with _common.recording(args.record, "bench_metal.py", f"Metal encode throughput ({device}) "
                           "vs the fastest exact CPU peers", dists) as rec:
        print(f"machine: {_common.machine()}\ndevice: {device}")
        docs = build_corpus(args.kinds, args.size_mb, args.corpus_mb)
        nbytes = sum(len(d.encode()) for d in docs)
        print(f"text: {nbytes / 1e6:.2f} MB, {len(docs)} documents")
        res = {"date": time.strftime("%Y-%m-%d"), "machine": _common.machine(),
               "device": device, "commit": _common.commit(),
               "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
               "MB": round(nbytes / 1e6, 3), "docs": len(docs), "kinds": args.kinds,
               "encodings": []}
        rec["data"] = res
        for name in args.encodings:
            print(f"\n{name}:")
            res["encodings"].append(run_encoding(name, docs, be, args))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(markdown(res))
        out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
        print(f"\nwrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
