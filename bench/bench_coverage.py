"""Device coverage: o200k cut on the device vs on the host, and Qwen2's NFC checked on the device.

Runs the native CPU device (the same kernel sources a GPU runs) and compares, on the test
corpora (``--mb`` per kind), best of ``--repeat`` warm passes, wall time:

* o200k_base: ``pretok="device"`` (encode_o200k.cu: span starts + one matcher per span) vs
  ``pretok="scanner"`` (the vectorised scanner on the host, the previous route) vs tiktoken's
  ``encode_ordinary_batch`` on every core and the fastest exact peer on every core (the best
  of gigatoken, its tiktoken mode, toktok-rs and quicktok-v1 whose ids equal tiktoken's);
* Qwen2: NFC checked on the device (encode_nfc.cu; flagged spans normalised on the host) vs the
  host normaliser over the whole text, on the corpus as it is and in NFD.
Ids are checked equal (to tiktoken / to each other) before anything is timed.

    python bench/bench_coverage.py --mb 1 --repeat 3
    python bench/bench_coverage.py --record bench/results/coverage.md
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import _common
import peers

KINDS = ("prose", "code", "multilingual")


def _mbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e6:.1f}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/coverage.md")
    args = p.parse_args()
    with _common.recording(args.record, "bench_coverage.py", "what runs on the device: o200k's "
                           "cut and Qwen2's NFC check, against the host routes and the peers",
                           ["tiktoken", "gigatoken", "toktok-rs", "quicktok-v1"]):
        measure(args)


def measure(args) -> None:

    import gputok
    from conftest import hf_encoding
    from gputok.backends import FallbackWarning, native
    from gputok.stages.pack import Documents
    from gputok.unicode import normalize

    warnings.simplefilter("ignore", FallbackWarning)
    print(f"machine: {_common.machine()}; native threads {args.threads}")
    enc = gputok.get_encoding("o200k_base")
    tk = _common.tiktoken_for("o200k_base")
    dev = native.create(threads=args.threads)
    host = native.create(threads=args.threads, pretok="scanner")
    print("\no200k_base, MB/s (wall, best of %d)" % args.repeat)
    print("| corpus | device pretok | host scanner pretok | tiktoken batch | fastest exact peer |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        docs = _common.corpus(kind, args.mb)
        nbytes = sum(len(d.encode()) for d in docs)
        want = tk.encode_ordinary_batch(docs, num_threads=args.threads)
        for be in (dev, host):
            ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
            got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
            if got != want:
                sys.exit(f"{be.pretok}: ids differ from tiktoken on {kind}")
        fast = peers.checked(peers.FASTEST, "o200k_base", docs, want, threads=args.threads)
        fns = {"device": lambda: dev.encode(enc.model, Documents(docs), frozenset(),
                                            frozenset()),
               "host": lambda: host.encode(enc.model, Documents(docs), frozenset(), frozenset()),
               "tiktoken": lambda: tk.encode_ordinary_batch(docs, num_threads=args.threads)}
        fns.update({n: (lambda p=p: p.batch(docs)) for n, p in fast.items()})
        best = _common.best_interleaved(fns, args.repeat)  # rounds, every runner in turn
        bar = min(fast, key=best.get, default=None)
        print(f"| {kind} ({nbytes / 1e6:.1f} MB) | "
              + " | ".join(_mbps(nbytes, best[k]) for k in ("device", "host", "tiktoken"))
              + (f" | {_mbps(nbytes, best[bar])} ({bar}) |" if bar else " | - |"))

    qw = hf_encoding("qwen2")
    dev = native.create(threads=args.threads)
    host = native.create(threads=args.threads, pretok="scanner")  # host NFC, host cut
    print("\nQwen2 (NFC), MB/s (wall, best of %d); host-normalised bytes per MB" % args.repeat)
    print("| corpus | device check | host normaliser + scanner | flagged spans' bytes / MB |")
    print("|---|---|---|---|")
    for kind in KINDS:
        for form in ("as is", "NFD"):
            docs = _common.corpus(kind, args.mb)
            if form == "NFD":
                docs = [normalize("NFD", d) for d in docs]
            nbytes = sum(len(d.encode()) for d in docs)
            outs = []
            for be in (dev, host):
                ids, off = be.encode(qw.model, Documents(docs), frozenset(), frozenset())
                outs.append((ids.tolist(), off.tolist()))
            if outs[0] != outs[1]:
                sys.exit(f"Qwen2 {kind} {form}: device check and host normaliser differ")
            dev.host_normalized.clear()
            best = _common.best_interleaved(
                {be: (lambda be=be: be.encode(qw.model, Documents(docs), frozenset(),
                                              frozenset())) for be in (dev, host)},
                args.repeat, warm_up=False)
            t = [best[dev], best[host]]
            per_mb = dev.host_normalized["bytes"] / args.repeat / (nbytes / 1e6)
            print(f"| {kind}, {form} ({nbytes / 1e6:.1f} MB) | "
                  + " | ".join(_mbps(nbytes, x) for x in t) + f" | {per_mb:.0f} |")


if __name__ == "__main__":
    main()
