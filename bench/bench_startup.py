"""Start-up: a fresh process importing a library, loading an encoding and encoding one short text.

Each phase is timed inside fresh processes (median of ``--repeat``), for gputok and for the
fastest exact peers that load offline (toktok-rs and quicktok-v1 bundle their vocabularies,
gigatoken reads the ranks file of the test data; tiktoken's ``get_encoding`` needs its download
cache, which an offline machine lacks, so it is not timed). The target is absolute
(``get_encoding`` + a first short ``encode`` under 0.2 s with warm caches). Run twice in a row,
the second run shows the warm disk caches (ranks index, merge tables, compiled pinned patterns),
which is what a user sees after the first. Every library's ids for the short text are checked
equal to tiktoken's.

    python bench/bench_startup.py --encoding o200k_base --repeat 7
    python bench/bench_startup.py --record bench/results/startup.md
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import subprocess
import sys
import time

import _common
import peers

TEXT = "hello world, it's 2026!"
_PROBE = r"""
import json, time
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
{imp}
t2 = time.perf_counter()
enc = {load}
t3 = time.perf_counter()
ids = enc.{encode}({text!r})
t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3, [int(i) for i in ids]]))
"""
# library -> (distribution, import, load an encoding, the one-text call)
LIBRARIES = {
    "gputok": (None, "import gputok", "gputok.get_encoding({name!r})", "encode"),
    "toktok-rs": ("toktok-rs", "import toktok", "toktok._encoding({name!r})", "encode_ordinary"),
    "quicktok-v1": ("quicktok-v1", "import quicktok", "quicktok.get_encoding({name!r})",
                    "encode_ordinary"),
    "gigatoken": ("gigatoken", "import gigatoken",
                  "gigatoken.Tokenizer.from_tiktoken({path!r}, pretokenizer={pre!r})", "encode"),
}


def measure(lib: str, name: str, repeat: int) -> list:
    _, imp, load, encode = LIBRARIES[lib]
    path = str(peers._ranks_file(name)) if lib == "gigatoken" else None
    code = _PROBE.format(imp=imp, encode=encode, text=TEXT, load=load.format(
        name=name, path=path, pre=peers._GIGATOKEN_PRETOKENIZER.get(name)))
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ids = runs[0][4]
    return [statistics.median(r[k] for r in runs) for k in range(4)] + [ids]


_IMPORT_ONLY = r"""
import json, sys, time
before = set(sys.modules)
t0 = time.perf_counter()
import gputok
t1 = time.perf_counter()
new = sorted(set(sys.modules) - before)
print(json.dumps([t1 - t0, new]))
"""


def import_check(repeat: int) -> None:
    """``import gputok`` alone in a fresh process (numpy not imported first): its time and the
    modules it loads, which must not include numpy, regex or any of gputok's own stages (they
    are imported on first use)."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", _IMPORT_ONLY], capture_output=True,
                                      text=True, check=True).stdout.strip().splitlines()[-1])
            for _ in range(repeat)]
    modules = runs[0][1]
    heavy = [m for m in modules if m.split(".")[0] in ("numpy", "regex", "cupy", "mlx")
             or m.startswith("gputok.")]
    print(f"import gputok alone: {statistics.median(r[0] for r in runs) * 1e3:.2f} ms, "
          f"{len(modules)} modules ({', '.join(modules[:8])}{', ...' if len(modules) > 8 else ''})"
          f"{'; HEAVY: ' + ', '.join(heavy) if heavy else ''}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoding", default="o200k_base")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/startup.md")
    args = p.parse_args()
    _common.compile_bytecode()
    with _common.recording(args.record, "bench_startup.py", "a fresh process: import, load an "
                           "encoding, encode one short text",
                           ["gigatoken", "toktok-rs", "quicktok-v1"]):
        print(f"machine: {_common.machine()}\ndate: {time.strftime('%Y-%m-%d')}\n"
              f"command: {' '.join(sys.argv)}")
        import_check(args.repeat)
        want = _common.tiktoken_for(args.encoding).encode_ordinary(TEXT)
        print(f"{'library':<13}{'numpy':>8}{'import':>8}{'get':>8}{'encode':>8}"
              f"{'get+encode':>12}{'total':>8}   (ms, median of {args.repeat} fresh processes)")
        for lib, (dist, *_rest) in LIBRARIES.items():
            try:
                if dist:
                    importlib.metadata.version(dist)
                n, i, g, e, ids = measure(lib, args.encoding, args.repeat)
            except importlib.metadata.PackageNotFoundError:
                print(f"{lib:<13}skipped: not installed (pip install {dist})")
                continue
            except subprocess.CalledProcessError as err:
                print(f"{lib:<13}skipped: {err.stderr.strip().splitlines()[-1][:120]}")
                continue
            if ids != want:
                if lib == "gputok":
                    raise SystemExit(f"gputok's ids for {TEXT!r} differ from tiktoken's")
                print(f"{lib:<13}NOT EXACT: {ids} against tiktoken's {want}")
                continue
            n, i, g, e = (x * 1e3 for x in (n, i, g, e))
            print(f"{lib:<13}{n:8.1f}{i:8.1f}{g:8.1f}{e:8.1f}{g + e:12.1f}{n + i + g + e:8.1f}")


if __name__ == "__main__":
    main()
