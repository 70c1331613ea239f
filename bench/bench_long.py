"""Long single pieces: time per byte and peak memory vs length (10 KB .. 10 MB), gputok vs tiktoken.

Inputs: ``"a" * n`` and ``" " * n`` (one piece each: a run of one character), a run of emoji (one
piece of 4-byte characters), base64 (many mid-size pieces) and one line of prose (a giant
document of ordinary pieces). Each (library, input, size) runs in fresh processes: the
encoder is built and warmed up on texts of the same kind (``WARM_UP``), the peak-RSS counter
is reset (``/proc/self/clear_refs``), then ``encode_ordinary`` is timed (the best call of at
least ``--repeat`` and ``MIN_TIME`` seconds of calls; one call from 1 MB up, its first touch of
fresh memory included, unless ``--warm-large``) and the peak resident memory of the encode is
read back. ``--procs`` processes a cell, taken in rounds (every size and library once a round,
then again), so that a slow minute of a shared machine falls on all sizes alike rather than on
one; a cell's time is its median process's.
Ids are compared between the libraries (a digest of each result) before anything is reported.

    python bench/bench_long.py                       # 10 KB .. 10 MB, both libraries
    python bench/bench_long.py --sizes 10000 1000000 --kinds a emoji
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import subprocess
import sys
import time

import _common

def _line(n: int) -> str:
    """One line of prose (the corpus' documents joined by spaces), repeated to n characters:
    a giant document of ordinary pieces (gputok cuts it into chunks at safe points)."""
    base = " ".join(d.replace("\n", " ") for d in _common.corpus("prose", 2.0))
    return (base * (n // len(base) + 1))[:n]


KINDS = {
    "a": lambda n: "a" * n,
    "space": lambda n: " " * n,
    "emoji": lambda n: "\U0001F600" * (n // 4),
    "base64": lambda n: base64.b64encode(random.Random(n).randbytes(n))[:n].decode(),
    "line": _line,
}


MIN_TIME = 0.3  # seconds of calls per cell below 1 MB (best call reported)
# warm-up texts (characters): 16 KB, and 128 KB before a longer cell. gputok's single-text
# paths switch at 16 KB (one device call) and 64 KB (the batch pipeline for a text of many
# pieces), and each has its own first-use set-up (a pattern compiled, a first list built), which
# a 16 KB warm-up left to a 1 MB cell's one timed call.
WARM_UP = (16384, 131072)
MAX_CALLS = 1000
WARM_LARGE = os.environ.get("BENCH_LONG_WARM_LARGE") == "1"  # set by --warm-large (children)


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def child(lib: str, encoding: str, kind: str, n: int, repeat: int, backend: str = "auto") -> dict:
    """One measurement in this (fresh) process."""
    if lib == "gputok":
        import gputok

        enc = gputok.get_encoding(encoding)
        if backend == "auto":
            encode = enc.encode_ordinary
        else:  # one text through the batch API on the named backend
            def encode(text):
                return enc.encode_batch_arrays([text], backend=backend)[0].tolist()
    else:
        encode = _common.tiktoken_for(encoding).encode_ordinary
    make = KINDS[kind]
    for w in WARM_UP:  # tables built, modules loaded, the paths a text of n takes run once
        if w == WARM_UP[0] or w <= n:
            encode(make(w))
    text = make(n)
    nbytes = len(text.encode("utf-8"))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS counter (VmHWM) to the current RSS
        before = _rss_kb("VmRSS:")
    except OSError:
        before = None
    times = []
    ids = None
    # below 1 MB: at least `repeat` calls and MIN_TIME seconds of them (a 10 KB call is ~0.1-1
    # ms: three calls are at the mercy of one scheduler tick); from 1 MB one call
    start = time.perf_counter()
    many = nbytes < 1_000_000 or WARM_LARGE
    while not times or (many and len(times) < MAX_CALLS and (
            len(times) < repeat or time.perf_counter() - start < MIN_TIME)):
        t0 = time.perf_counter()
        ids = encode(text)
        times.append(time.perf_counter() - t0)
    peak = _rss_kb("VmHWM:") - before if before is not None else None
    digest = hashlib.sha256(b"".join(i.to_bytes(4, "little") for i in ids)).hexdigest()[:16]
    return {"bytes": nbytes, "s": min(times), "calls": len(times),
            "peak_mb": None if peak is None else peak / 1024, "ids": len(ids), "digest": digest}


def run_child(lib, args, kind, n) -> dict:
    cmd = [sys.executable, __file__, "--child", lib, "--encoding", args.encoding, "--kinds", kind,
           "--sizes", str(n), "--repeat", str(args.repeat), "--backend", args.backend]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise SystemExit(f"{lib} {kind} x {n} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_run(runs: list) -> dict:
    """A cell's measurement: its median process (a 1 MB call lasts ~10 ms, and on a VM one
    stall of the host, or page faults that cost 2-3x more on some runs than on others, shows in
    it), every process's time kept (``runs_s``) and the highest peak memory."""
    runs = sorted(runs, key=lambda r: r["s"])
    got = dict(runs[len(runs) // 2])
    got["runs_s"] = [r["s"] for r in runs]
    if got["peak_mb"] is not None:
        got["peak_mb"] = max(r["peak_mb"] for r in runs)
    return got


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--sizes", nargs="+", type=int,
                   default=[10_000, 100_000, 1_000_000, 10_000_000])
    p.add_argument("--kinds", nargs="+", default=[k for k in KINDS if k != "line"],
                   choices=list(KINDS))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--backend", default="auto",
                   help="gputok's backend (default auto: encode_ordinary's own choice)")
    p.add_argument("--warm-large", action="store_true",
                   help="from 1 MB too, the best of several calls (steady state: the first call's "
                        "first touch of its workspace and output is left out), as below 1 MB")
    p.add_argument("--procs", type=int, default=5,
                   help="fresh processes per cell, in rounds over the sizes (the median is "
                        "reported)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.encoding, args.kinds[0], args.sizes[0],
                               args.repeat, args.backend)))
        return
    if args.warm_large:
        os.environ["BENCH_LONG_WARM_LARGE"] = "1"  # (the children read it)
    _common.compile_bytecode()
    print(f"machine: {_common.machine()}\nencoding: {args.encoding}\n"
          f"date: {time.strftime('%Y-%m-%d')}\ncommand: {' '.join(sys.argv)}\n"
          f"gputok backend: {args.backend}")
    print(f"{'input':<8}{'bytes':>10}{'gputok ns/B':>13}{'tiktoken ns/B':>15}{'speed':>7}"
          f"{'gputok MB':>11}{'tiktoken MB':>13}{'memory':>8}")
    rows = []
    for kind in args.kinds:
        runs: dict = {}
        for _ in range(max(1, args.procs)):  # rounds: every size and library once a round
            for n in args.sizes:
                for lib in ("gputok", "tiktoken"):
                    runs.setdefault((lib, n), []).append(run_child(lib, args, kind, n))
        for n in args.sizes:
            ours, theirs = median_run(runs["gputok", n]), median_run(runs["tiktoken", n])
            if (ours["ids"], ours["digest"]) != (theirs["ids"], theirs["digest"]):
                raise SystemExit(f"ids differ for {kind} x {n}: {ours} vs {theirs}")
            b = ours["bytes"]
            rows.append({"kind": kind, "n": n, "gputok": ours, "tiktoken": theirs})
            mem = (f"{ours['peak_mb'] / max(theirs['peak_mb'], 0.1):7.2f}x"
                   if ours["peak_mb"] is not None else "")
            print(f"{kind:<8}{b:>10}{ours['s'] / b * 1e9:13.0f}{theirs['s'] / b * 1e9:15.0f}"
                  f"{theirs['s'] / ours['s']:6.2f}x{ours['peak_mb']:11.1f}"
                  f"{theirs['peak_mb']:13.1f}{mem:>8}", flush=True)
    print("speed = tiktoken time / gputok time; memory = gputok peak / tiktoken peak "
          "(resident memory added by the encode call)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": _common.machine(), "encoding": args.encoding, "rows": rows,
                       "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}, f,
                      indent=1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
