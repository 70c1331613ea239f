"""One text at a time on one thread: ``encode_ordinary`` of texts from 100 bytes to 1 MB, gputok
against the fastest exact peers' one-text calls (``bench/peers.py``) and tiktoken; then
``decode`` of those texts' ids (a list each), against the same libraries' ``decode``.

Each cell (encoding x kind of text x size) has its own texts, cut from the pinned corpora at
character boundaries: ``--texts`` of them below 1 MB (fewer as they grow), new texts every
round. Within a round every runner encodes the cell's texts once (**cold**: text new to every
runner) and once again (**warm**: the same texts), the runners' order rotating from round to
round; a cell's figure is the median round's time per text. Everything runs on one core: the
process is pinned to one CPU (``os.sched_setaffinity``), gputok's native device has one thread
(``GPUTOK_NUM_THREADS=1``, set before gputok is imported) and so have the peers' thread pools
(``RAYON_NUM_THREADS=1``), whatever a library would do with a long text.

Exactness first: every runner's ids on every text of every round (decode: its text from every
id list) are compared with tiktoken's before anything is timed; a peer that differs is reported
and left out (gputok differing stops the run).

    python bench/bench_single.py                      # cl100k and o200k, 100 B .. 1 MB
    python bench/bench_single.py --sizes 100 10000 --kinds prose --rounds 2 --what decode
    python bench/bench_single.py --record bench/results/single.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ["GPUTOK_NUM_THREADS"] = "1"  # (read when gputok's native device is made)
os.environ["RAYON_NUM_THREADS"] = "1"  # (the Rust peers' pools, read when they first start)
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import _common  # noqa: E402
import peers  # noqa: E402

SIZES = (100, 1_000, 10_000, 100_000, 1_000_000)
KINDS = ("prose", "code", "multilingual")


def texts_for(kind: str, size: int, count: int, rounds: int) -> list:
    """``rounds`` lists of ``count`` texts of ``size`` UTF-8 bytes (cut back to a character
    boundary), each cut from a different place of the kind's corpus."""
    data = "\n".join(_common.corpus(kind, max(2.0, 2.5 * size * count * rounds / 1e6))).encode()
    need = count * rounds
    step = max(1, (len(data) - size) // need)
    if len(data) < size:
        raise SystemExit(f"the {kind} corpus has only {len(data)} bytes for {size}-byte texts")
    out = [data[(k * step) % (len(data) - size + 1):][:size].decode("utf-8", "ignore")
           for k in range(need)]
    return [out[r * count:(r + 1) * count] for r in range(rounds)]


def count_for(size: int, texts: int) -> int:
    return max(2, min(texts, 2_000_000 // size))


def runners_for(enc, encoding: str, names, what: str) -> dict:
    """{name: one-text call}: ``encode_ordinary``, or (``what == "decode"``) the ``decode`` of
    the same library object (every peer's one-text call is a bound method of it)."""
    runners = {"gputok": enc.encode_ordinary if what == "encode" else enc.decode}
    for name in names:
        try:
            one = peers.build(name, encoding, threads=1).one
        except peers.Unavailable as e:
            print(f"  {name}: skipped for {encoding}: {e}")
            continue
        dec = one.__self__.decode
        if name == "gigatoken":  # (its own API's decode gives bytes: made text as tiktoken's)
            dec = lambda ids, raw=dec: raw(ids).decode("utf-8", "replace")  # noqa: E731
        runners[name] = one if what == "encode" else dec
    return runners


def run(args, what: str = "encode") -> dict:
    import gputok

    results = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
               "command": " ".join(sys.argv), "what": what, "cells": []}
    for encoding in args.encodings:
        enc = gputok.get_encoding(encoding)
        tk = _common.tiktoken_for(encoding)
        runners = runners_for(enc, encoding, args.peers, what)
        left_out: dict = {}
        unit = "text" if what == "encode" else "id list (decode)"
        print(f"\n== {encoding} {what}: microseconds per {unit}, median round (cold: new "
              "input; warm: the same again); ratio = the peer's time / gputok's")
        head = f"  {'kind':<13}{'bytes':>9}{'texts':>6}"
        shown = [n for n in runners]
        for n in shown:
            head += f" {n[:18]:>19}"
        print(head + "  (cold / warm)")
        for kind in args.kinds:
            for size in args.sizes:
                count = count_for(size, args.texts)
                rounds = texts_for(kind, size, count, args.rounds)
                want = [[tk.encode_ordinary(t) for t in ts] for ts in rounds]
                if what == "decode":  # (the inputs: the id lists; the answers: the texts)
                    rounds, want = want, [[tk.decode(i) for i in ids] for ids in want]
                same = (lambda got, w: list(map(int, got)) == w) if what == "encode" else \
                    (lambda got, w: got == w)
                for name, one in list(runners.items()):
                    try:
                        bad = sum(not same(one(t), w) for ts, ws in zip(rounds, want)
                                  for t, w in zip(ts, ws))
                    except Exception as e:  # a runner that fails is as good as inexact
                        bad = f"failed: {type(e).__name__}: {str(e)[:120]}"
                    if bad:
                        if name == "gputok":
                            raise SystemExit(f"gputok's {what} differs from tiktoken's on "
                                             f"{kind} x {size}: {bad}")
                        left_out[name] = (f"NOT EXACT on {kind} x {size} ({bad} of "
                                          f"{count * args.rounds} texts differ), not timed")
                        del runners[name]
                times = {n: ([], []) for n in runners}
                names = list(runners)
                for r, ts in enumerate(rounds):
                    for k in range(len(names)):
                        name = names[(k + r) % len(names)]
                        one = runners[name]
                        for which in (0, 1):
                            t0 = time.perf_counter()
                            for t in ts:
                                one(t)
                            times[name][which].append((time.perf_counter() - t0) / len(ts))
                med = {n: (statistics.median(c), statistics.median(w))
                       for n, (c, w) in times.items()}
                line = f"  {kind:<13}{size:>9}{count:>6}"
                for n in shown:
                    line += (f" {med[n][0] * 1e6:9.1f}/{med[n][1] * 1e6:<9.1f}" if n in med
                             else f" {'-':>19}")
                ratios = {n: (med[n][0] / med["gputok"][0], med[n][1] / med["gputok"][1])
                          for n in med if n != "gputok"}
                results["cells"].append({"encoding": encoding, "kind": kind, "bytes": size,
                                         "texts": count, "us": {n: [v * 1e6 for v in med[n]]
                                                                for n in med},
                                         "ratio": ratios})
                print(line, flush=True)
        for name, why in left_out.items():
            print(f"  {name}: {why}")
        cells = [c for c in results["cells"] if c["encoding"] == encoding]
        for peer in [n for n in shown if n != "gputok"]:
            rs = [c["ratio"][peer] for c in cells if peer in c["ratio"]]
            if rs:
                print(f"  {peer}'s time / gputok's: cold {min(r[0] for r in rs):.2f}-"
                      f"{max(r[0] for r in rs):.2f}x, warm {min(r[1] for r in rs):.2f}-"
                      f"{max(r[1] for r in rs):.2f}x over {len(rs)} cells")
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    p.add_argument("--texts", type=int, default=400, help="texts a cell (fewer as they grow)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peers", nargs="+", default=["toktok-rs", "gigatoken",
                                                  "gigatoken tiktoken mode", "quicktok-v1",
                                                  "tiktoken"])
    p.add_argument("--what", nargs="+", default=["encode", "decode"],
                   choices=["encode", "decode"])
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md)")
    args = p.parse_args()
    _common.compile_bytecode()
    print(f"machine: {_common.machine()}; load average {os.getloadavg()[0]:.2f}")
    with _common.recording(args.record, "bench_single.py", "one text at a time on one thread, "
                           "100 B to 1 MB, against the fastest exact peers' one-text calls",
                           ["tiktoken", "gigatoken", "toktok-rs", "quicktok-v1"]) as rec:
        rec["data"] = {what: run(args, what) for what in args.what}


if __name__ == "__main__":
    main()
