"""Thread CPU time of the native CPU device's per-document pass on cold text, one thread.

Cold: each timed slice is text this process has not encoded before (the piece cache warm with
the slices before it, as a long-running encoder's would be), so its new pieces miss the cache
and are solved (kernels/cpu_window.h, enc_cpu_solve_window). The process encodes a first slice
untimed (the cache and the tables' pages warmed), then times each later slice once by
``time.thread_time`` and prints MB/s over all of them, with the miss rate (the cache's inserts
over its lookups). For an A/B, run it with PYTHONPATH set to either tree, in turns:

    PYTHONPATH=$PWD python bench/cold_time.py o200k prose --kb 256 --slices 8
    python bench/cold_time.py --all --kb 256 --slices 6        # every cell, one line each

With ``--peer`` gigatoken's fast API encodes the same slices in the same process (its own
cache cold the same way), timed the same.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

from warm_instr import KINDS, MODELS  # noqa: E402  (the same cells)


def slices(kind: str, kb: int, n: int) -> list:
    import _common

    text = "\n".join(_common.corpus(kind, (kb * (n + 1)) / 1024 + 1))
    data = text.encode("utf-8")
    out = []
    for k in range(n + 1):
        part = data[k * kb * 1024: (k + 1) * kb * 1024].decode("utf-8", "ignore")
        if len(part) < kb * 512:
            raise ValueError(f"{kind}: the corpus holds too little text for {n + 1} slices")
        out.append(part.encode("utf-8"))
    return out


def cell(model: str, kind: str, kb: int, n: int, peer: bool) -> str:
    import gputok
    from gputok.backends import get_backend, native
    from gputok.backends.native.perdoc import PerDocPass
    import testdata

    name = MODELS[model]
    enc = (gputok.get_encoding(name) if model in ("cl100k", "o200k")
           else gputok.load(str(testdata.vocab_path(name))))
    plan = get_backend("native").model_plan(enc.model)
    p = PerDocPass(native.library(), 1)
    parts = slices(kind, kb, n)
    p.encode_text(plan.tables, parts[0])
    before = p.cache_stats(plan.tables)
    if os.environ.get("COLD_CALLGRIND"):  # under valgrind --instr-atstart=no: the timed slices
        import subprocess
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    spent = 0.0
    for data in parts[1:]:
        t0 = time.thread_time()
        p.encode_text(plan.tables, data)
        spent += time.thread_time() - t0
    if os.environ.get("COLD_CALLGRIND"):
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True)
    after = p.cache_stats(plan.tables)
    mb = sum(len(d) for d in parts[1:]) / 1e6
    miss = (after["inserts"] - before["inserts"]) / max(1, after["lookups"] - before["lookups"])
    line = f"{model}/{kind}: gputok {mb / spent:7.1f} MB/s (misses {miss:.1%})"
    if peer:
        import gigatoken

        path = testdata.vocab_path(name)
        tok = (gigatoken.Tokenizer.from_tiktoken(str(path)) if model in ("cl100k", "o200k")
               else gigatoken.Tokenizer(str(path)))
        docs = [d.decode("utf-8") for d in parts]
        tok.encode_batch(docs[:1], parallel=False)
        g = 0.0
        for d in docs[1:]:
            t0 = time.thread_time()
            tok.encode_batch([d], parallel=False)
            g += time.thread_time() - t0
        line += f"  gigatoken {mb / g:7.1f} MB/s  ratio {g / spent:.2f}x"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", choices=sorted(MODELS))
    ap.add_argument("kind", nargs="?", choices=KINDS)
    ap.add_argument("--all", action="store_true", help="every model x kind")
    ap.add_argument("--kb", type=int, default=256, help="KB a slice")
    ap.add_argument("--slices", type=int, default=6, help="timed slices")
    ap.add_argument("--peer", action="store_true", help="gigatoken on the same slices")
    a = ap.parse_args()
    cells = ([(m, k) for m in MODELS for k in KINDS] if a.all else [(a.model, a.kind)])
    if None in cells[0]:
        ap.error("give a model and a kind, or --all")
    for m, k in cells:
        print(cell(m, k, a.kb, a.slices, a.peer), flush=True)


if __name__ == "__main__":
    main()
