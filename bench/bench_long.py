"""Long single pieces: time per byte and peak memory vs length (10 KB .. 10 MB), gputok vs peers.

Inputs: ``"a" * n`` and ``" " * n`` (one piece each: a run of one character), a run of emoji (one
piece of 4-byte characters), base64 (many mid-size pieces) and one line of prose (a giant
document of ordinary pieces). Each (library, input, size) runs in fresh processes: the
encoder is built and warmed up on texts of the same kind (``WARM_UP``), the peak-RSS counter
is reset (``/proc/self/clear_refs``), then ``encode_ordinary`` is called once (the first call:
its peak resident memory, its page faults and system time are read back) and again until at
least ``--repeat`` calls and ``MIN_TIME`` seconds (``MAX_TIME`` at most past the first call).

Two times a cell:

* **steady** (the band's measure): the best call of the cell's processes. Every size is
  measured alike; a call's workspace is memory an earlier call of the process used.
* **cold**: the median process's, below 1 MB its best call, from 1 MB its first call, whose
  first touch of fresh memory is in it. On a VM the host may back a page the guest touches for
  the first time only then, at a cost that changes from run to run: under the table, each
  cold call's time over its own process's best call is set beside its new memory times the
  cost per MB of touching new memory measured in that process right after it
  (``fresh_ms_per_mb``). (A whole process can also run ~1.5x slower than the next on a shared
  VM, which is why the steady time is the best process's.)

``--procs`` processes a cell, taken in rounds (every size and library once a round, then
again), so that a slow minute of a shared machine falls on all sizes alike rather than on one.
The libraries: gputok, tiktoken (the reference), and the fastest exact peers (``--peers``,
default gigatoken, its tiktoken mode, toktok-rs and quicktok-v1: their one-text calls, see
``bench/peers.py``). Exactness: before the rounds, every peer's ids on each input at 10 and 100
KB are checked against tiktoken's (an inexact peer is reported and not timed); after them, every
cell's ids are compared through a digest of each result (gputok differing stops the run; a peer
differing is reported and left out of the ratios).

    python bench/bench_long.py                       # 10 KB .. 10 MB, every library
    python bench/bench_long.py --sizes 10000 1000000 --kinds a emoji --peers
    python bench/bench_long.py --record bench/results/long.md

``--job``: the memory of ``gputok encode`` on one huge document instead (the figure the README
gives): each input written as a one-document ``.txt`` file, encoded by ``python -m gputok
encode`` in a fresh process, its peak resident memory over that of the same job on a one-word
document, as a multiple of the document's size.

    python bench/bench_long.py --job --sizes 10000000 50000000 --kinds a base64 line
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time

import numpy as np

import _common
import peers

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


MIN_TIME = 0.3  # seconds of calls per cell (the best call reported)
MAX_TIME = 2.0  # seconds of calls after the first at most (tiktoken takes 6-8 s on a 10 MB run)
COLD_FROM = 1_000_000  # bytes: from here the cold time is the first call's
# warm-up texts (characters): 16 KB, and 128 KB before a longer cell. gputok's single-text
# paths switch at 16 KB (one device call) and 64 KB (the batch pipeline for a text of many
# pieces), and each has its own first-use set-up (a pattern compiled, a first list built), which
# a 16 KB warm-up left to a 1 MB cell's one timed call.
WARM_UP = (16384, 131072)
MAX_CALLS = 1000


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
        encode = peers.build(lib, encoding).one
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
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    ids = encode(text)
    first = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    peak = _rss_kb("VmHWM:") - before if before is not None else None
    fresh = fresh_ms_per_mb()  # (after the first call: it must not hand the call warm pages)
    digest = hashlib.sha256(np.asarray(ids, np.uint32).tobytes()).hexdigest()[:16]
    count = len(ids)
    # then at least `repeat` calls and MIN_TIME seconds of them (a 10 KB call is ~0.1-1 ms:
    # three calls are at the mercy of one scheduler tick), MAX_TIME at most; the previous
    # call's ids freed before the next call
    times = [first]
    start = time.perf_counter()
    while len(times) < MAX_CALLS and time.perf_counter() - start < MAX_TIME and (
            len(times) < repeat or time.perf_counter() - start < MIN_TIME):
        ids = None
        t0 = time.perf_counter()
        ids = encode(text)
        times.append(time.perf_counter() - t0)
    return {"bytes": nbytes, "s": min(times), "first_s": first, "calls": len(times),
            "peak_mb": None if peak is None else peak / 1024, "ids": count, "digest": digest,
            "first_faults": r1.ru_minflt - r0.ru_minflt,
            "first_sys_s": r1.ru_stime - r0.ru_stime, "first_user_s": r1.ru_utime - r0.ru_utime,
            "fresh_ms_per_mb": fresh}


FRESH_MB = 8  # the control's size


def fresh_ms_per_mb() -> float:
    """The control for the cold time: milliseconds per MB to touch memory new to this process
    (an anonymous mapping of ``FRESH_MB`` MB, one byte written per 4 KB page), as a cold call
    touches its fresh workspace and output. A kernel zeroes a page in well under a
    microsecond; on a VM whose host backs guest memory lazily it can take far longer, and it
    changes from run to run."""
    import mmap

    n = FRESH_MB << 20
    m = mmap.mmap(-1, n)
    t0 = time.perf_counter()
    for k in range(0, n, 4096):
        m[k] = 1
    took = time.perf_counter() - t0
    m.close()
    return took * 1e3 / FRESH_MB


def cold_s(run: dict) -> float:
    """A process's cold time: its first call from ``COLD_FROM`` bytes, else its best call."""
    return run["first_s"] if run["bytes"] >= COLD_FROM else run["s"]


def run_child(lib, args, kind, n) -> dict:
    cmd = [sys.executable, __file__, "--child", lib, "--encoding", args.encoding, "--kinds", kind,
           "--sizes", str(n), "--repeat", str(args.repeat), "--backend", args.backend]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise SystemExit(f"{lib} {kind} x {n} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell_of(runs: list) -> dict:
    """A cell's measurement from its processes: the steady time (``s``) is the best call of
    any process (on a shared VM a whole process can run 1.5x slower than the next, for
    reasons outside it: noise only ever adds time), the cold time (``cold_s``) the median
    process's, with that process's first-call faults and system time; every process's times
    kept (``runs_s``, ``runs_cold_s``) and the highest peak memory."""
    by_steady = sorted(runs, key=lambda r: r["s"])
    by_cold = sorted(runs, key=cold_s)
    got = dict(by_steady[0])
    mid = by_cold[len(runs) // 2]
    got["cold_s"] = cold_s(mid)
    got["cold_faults"], got["cold_sys_s"] = mid["first_faults"], mid["first_sys_s"]
    got["cold_fresh_ms_per_mb"] = mid["fresh_ms_per_mb"]
    got["cold_over_own_s"] = cold_s(mid) - mid["s"]  # (over that process's own best call)
    got["first_median_s"] = sorted(r["first_s"] for r in runs)[len(runs) // 2]
    got["runs_s"] = [r["s"] for r in by_steady]
    got["runs_cold_s"] = [cold_s(r) for r in by_cold]
    if got["peak_mb"] is not None:
        got["peak_mb"] = max(r["peak_mb"] for r in runs)
    return got


def band(rows: list, kind: str, key: str) -> "tuple[float, str]":
    """The slowest over the fastest ns per byte of gputok's ``key`` time across an input's
    sizes, and the per-size ns per byte."""
    per = [r["gputok"][key] / r["gputok"]["bytes"] * 1e9 for r in rows if r["kind"] == kind]
    return max(per) / min(per), " / ".join(f"{v:.0f}" for v in per)


def precheck(names, encoding: str, kinds) -> dict:
    """{peer: why it is left out} for the peers that are unavailable or whose ids on each input
    at 10 and 100 KB differ from tiktoken's (checked here, before any timing)."""
    tk = _common.tiktoken_for(encoding)
    out = {}
    for name in names:
        try:
            one = peers.build(name, encoding).one
            for kind in kinds:
                for n in (10_000, 100_000):
                    text = KINDS[kind](n)
                    if list(map(int, one(text))) != tk.encode_ordinary(text):
                        raise ValueError(f"ids differ from tiktoken's on {kind} x {n}")
        except peers.Unavailable as e:
            out[name] = f"skipped: {e}"
        except Exception as e:
            out[name] = f"NOT EXACT, not timed: {type(e).__name__}: {str(e)[:200]}"
    return out


def job_peak_mb(path: str, args) -> "tuple[float, float]":
    """(peak resident MB, seconds) of ``gputok encode`` on ``path`` in a fresh process."""
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "gputok", "encode", path, "-o", out, "--overwrite", "-q",
               "-e", args.encoding, "--workers", "1"]
        if args.backend != "auto":
            cmd += ["--backend", args.backend]
        code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
                "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
                "assert r.returncode == 0, r.stderr; "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
                "time.perf_counter() - t)")
        got = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True,
                             timeout=args.timeout)
        if got.returncode != 0:
            raise SystemExit(f"gputok encode {path} failed:\n{got.stderr[-2000:]}")
        kb, secs = got.stdout.split()
        return int(kb) / 1024, float(secs)


def job_main(args) -> None:
    """``--job``: peak memory of ``gputok encode`` on one document (see the module docstring)."""
    import tempfile

    print(f"machine: {_common.machine()}\nencoding: {args.encoding}\n"
          f"date: {time.strftime('%Y-%m-%d')}\ncommand: {' '.join(sys.argv)}\n"
          f"gputok encode, one document per file, peak resident memory over a one-word job's")
    print(f"{'input':<8}{'doc MB':>9}{'peak MB':>9}{'over base MB':>14}{'x doc':>7}{'s':>7}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tiny = os.path.join(d, "tiny.txt")
        with open(tiny, "w") as f:
            f.write("hello")
        job_peak_mb(tiny, args)  # (a first job may build the model and store it: not measured)
        base = min(job_peak_mb(tiny, args)[0] for _ in range(max(1, args.procs)))
        for kind in args.kinds:
            for n in args.sizes:
                path = os.path.join(d, f"{kind}-{n}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(KINDS[kind](n))
                mb = os.path.getsize(path) / 2**20
                runs = [job_peak_mb(path, args) for _ in range(max(1, args.procs))]
                peak, secs = max(r[0] for r in runs), min(r[1] for r in runs)
                rows.append({"kind": kind, "n": n, "doc_mb": mb, "peak_mb": peak,
                             "base_mb": base, "x_doc": (peak - base) / mb, "s": secs})
                print(f"{kind:<8}{mb:9.1f}{peak:9.1f}{peak - base:14.1f}"
                      f"{(peak - base) / mb:7.2f}{secs:7.2f}", flush=True)
                os.remove(path)
    print(f"base: the same job on a one-word document peaked at {base:.1f} MB; x doc = "
          "(peak - base) / document size; the highest peak and the best time of the processes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": _common.machine(), "encoding": args.encoding, "job": rows,
                       "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}, f,
                      indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--sizes", nargs="+", type=int,
                   default=[10_000, 100_000, 1_000_000, 10_000_000])
    p.add_argument("--kinds", nargs="+", default=[k for k in KINDS if k != "line"],
                   choices=list(KINDS))
    p.add_argument("--peers", nargs="*", default=list(peers.FASTEST), choices=peers.FASTEST,
                   help="the fast peers to time beside tiktoken (default: all; none: --peers)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--backend", default="auto",
                   help="gputok's backend (default auto: encode_ordinary's own choice)")
    p.add_argument("--procs", type=int, default=5,
                   help="fresh processes per cell, in rounds over the sizes (the median is "
                        "reported)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/long.md")
    p.add_argument("--job", action="store_true",
                   help="peak memory of `gputok encode` on one document per file instead")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.job:
        job_main(args)
        return
    if args.child:
        print(json.dumps(child(args.child, args.encoding, args.kinds[0], args.sizes[0],
                               args.repeat, args.backend)))
        return
    _common.compile_bytecode()
    dists = ["tiktoken", "gigatoken", "toktok-rs", "quicktok-v1"]
    with _common.recording(args.record, "bench_long.py", "one long text: time per byte and "
                           "peak memory against length", dists) as rec:
        rows = run(args)
        rec["data"] = {"machine": _common.machine(), "encoding": args.encoding, "rows": rows,
                       "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
                       "commit": _common.commit()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec["data"], f, indent=1)


def run(args) -> list:
    print(f"machine: {_common.machine()}\nencoding: {args.encoding}\n"
          f"date: {time.strftime('%Y-%m-%d')}\ncommand: {' '.join(sys.argv)}\n"
          f"gputok backend: {args.backend}")
    left_out = precheck(args.peers, args.encoding, args.kinds)
    for name, why in left_out.items():
        print(f"peer {name}: {why}")
    libs = ["gputok", "tiktoken"] + [n for n in args.peers if n not in left_out]
    print(f"{'input':<8}{'bytes':>10}{'gputok ns/B':>13}{'cold ns/B':>11}{'tiktoken ns/B':>15}"
          f"{'speed':>8}{'gputok MB':>11}{'tiktoken MB':>13}{'memory':>8}")
    rows = []
    for kind in args.kinds:
        runs: dict = {}
        for _ in range(max(1, args.procs)):  # rounds: every size and library once a round
            for n in args.sizes:
                for lib in libs:
                    runs.setdefault((lib, n), []).append(run_child(lib, args, kind, n))
        for n in args.sizes:
            cells = {lib: cell_of(runs[lib, n]) for lib in libs}
            ours, theirs = cells["gputok"], cells["tiktoken"]
            if (ours["ids"], ours["digest"]) != (theirs["ids"], theirs["digest"]):
                raise SystemExit(f"ids differ for {kind} x {n}: {ours} vs {theirs}")
            row = {"kind": kind, "n": n, "gputok": ours, "tiktoken": theirs, "peers": {},
                   "inexact": []}
            for lib in libs[2:]:
                if (cells[lib]["ids"], cells[lib]["digest"]) == (theirs["ids"],
                                                                  theirs["digest"]):
                    row["peers"][lib] = cells[lib]
                else:
                    row["inexact"].append(lib)
            b = ours["bytes"]
            rows.append(row)
            mem = (f"{ours['peak_mb'] / max(theirs['peak_mb'], 0.1):7.2f}x"
                   if ours["peak_mb"] is not None else "")
            print(f"{kind:<8}{b:>10}{ours['s'] / b * 1e9:13.0f}{ours['cold_s'] / b * 1e9:11.0f}"
                  f"{theirs['s'] / b * 1e9:15.0f}{theirs['s'] / ours['s']:7.2f}x"
                  f"{ours['peak_mb']:11.1f}{theirs['peak_mb']:13.1f}{mem:>8}", flush=True)
    print("gputok ns/B: steady (the best call); cold: from 1 MB the first call of a fresh "
          "process; speed = tiktoken time / gputok time (steady); memory = gputok peak / "
          "tiktoken peak (resident memory added by the first call)")
    if len(libs) > 2:
        peers_table(rows, libs[2:])
    print(f"\n{'input':<8}{'steady band':>12}  {'ns/B by size':<22}{'cold band':>10}  "
          f"{'ns/B by size':<22}")
    for kind in args.kinds:
        (sb, sp), (cb, cp) = band(rows, kind, "s"), band(rows, kind, "cold_s")
        print(f"{kind:<8}{sb:11.2f}x  {sp:<22}{cb:9.2f}x  {cp:<22}")
    print("band = slowest / fastest ns per byte over the sizes (target: 1.5x at most)")
    big = [r for r in rows if r["gputok"]["bytes"] >= COLD_FROM]
    if big:
        print(f"\ncold calls from 1 MB (gputok, the median process by cold time):\n"
              f"{'input':<8}{'bytes':>10}{'cold - best ms':>16}{'peak MB':>9}"
              f"{'fresh ms/MB':>13}{'peak x fresh ms':>17}{'faults':>8}{'system s':>10}")
        for r in big:
            g = r["gputok"]
            print(f"{r['kind']:<8}{g['bytes']:>10}{g['cold_over_own_s'] * 1e3:16.1f}"
                  f"{g['peak_mb']:9.1f}{g['cold_fresh_ms_per_mb']:13.2f}"
                  f"{g['peak_mb'] * g['cold_fresh_ms_per_mb']:17.1f}{g['cold_faults']:>8}"
                  f"{g['cold_sys_s']:10.3f}")
        print("cold - best: that process's first call over its own best call; fresh ms/MB: its "
              "control, touching 8 MB of memory new to it after the call (fresh_ms_per_mb); "
              "peak x fresh: what the call's own new memory would cost at that rate")
    return rows


def peers_table(rows: list, names: list) -> None:
    """ns/B of each fast peer, first call and steady, and gputok's speed over the fastest exact
    one on first calls (a peer whose ids differed in a cell is marked and left out of it).

    First calls, because a library may keep results between calls: gigatoken caches its
    pretokens, so its repeated calls on one text measure that cache (a run of one character is
    one pretoken). The first call of a process (after the warm-up on other texts of the kind)
    is the work itself, for every library alike."""
    print("\nthe fast peers, ns/B of the first call / the best call (medians over processes for "
          "the first call):")
    print(f"{'input':<8}{'bytes':>10}{'gputok':>14}" + "".join(f"{n:>26}" for n in names)
          + f"{'gputok / bar':>14}")
    for r in rows:
        b = r["gputok"]["bytes"]

        def ns(c):
            return f"{c['first_median_s'] / b * 1e9:.0f} / {c['s'] / b * 1e9:.0f}"
        cells = [("NOT EXACT" if r["peers"].get(n) is None else ns(r["peers"][n]))
                 for n in names]
        bar = min(r["peers"].values(), key=lambda c: c["first_median_s"], default=None)
        ratio = (f"{bar['first_median_s'] / r['gputok']['first_median_s']:13.2f}x" if bar
                 else f"{'-':>14}")
        print(f"{r['kind']:<8}{b:>10}{ns(r['gputok']):>14}" + "".join(f"{c:>26}" for c in cells)
              + ratio)
    print("bar = the fastest exact peer by first call; gputok / bar = its first-call time / "
          "gputok's (above 1: gputok is faster)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
