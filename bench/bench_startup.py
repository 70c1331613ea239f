"""Start-up: a fresh process importing gputok, loading an encoding and encoding one short text.

Each phase is timed inside fresh processes (median of ``--repeat``). The target is absolute
(``get_encoding`` + a first short ``encode`` under 0.2 s with warm caches), so no peer is timed:
tiktoken's ``get_encoding`` needs its download cache, which an offline machine lacks. Run twice in a row, the second run shows the warm disk caches
(ranks index, merge tables, compiled pinned patterns), which is what a user sees after the first.

    python bench/bench_startup.py --encoding o200k_base --repeat 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import _common

_PROBE = r"""
import json, time
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
import {lib}
t2 = time.perf_counter()
enc = {lib}.get_encoding({name!r})
t3 = time.perf_counter()
enc.encode("hello world, it's 2026!")
t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3]))
"""


def measure(lib: str, name: str, repeat: int) -> list:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _PROBE.format(lib=lib, name=name)],
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return [statistics.median(col) for col in zip(*runs)]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--encoding", default="o200k_base")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    _common.compile_bytecode()
    print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d')}\n"
          f"command: {' '.join(sys.argv)}")
    print(f"{'library':<10}{'numpy':>8}{'import':>8}{'get':>8}{'encode':>8}"
          f"{'get+encode':>12}{'total':>8}   (ms, median of {args.repeat} fresh processes)")
    n, i, g, e = (x * 1e3 for x in measure("gputok", args.encoding, args.repeat))
    print(f"{'gputok':<10}{n:8.1f}{i:8.1f}{g:8.1f}{e:8.1f}{g + e:12.1f}{n + i + g + e:8.1f}")


if __name__ == "__main__":
    main()
