"""Instructions per byte of the native CPU device's per-document pass on warm text, by callgrind.

The box's load makes wall times noisy and its kernel gives no hardware counters; callgrind's
instruction count of ``gputok_cpu_encode_text`` over text the piece cache has already seen is
exact and repeatable. The process starts uninstrumented; after the model is built and the text
encoded once (the cache warm) it turns instrumentation on (``callgrind_control -i on``), encodes
the text ``--reps`` times, and callgrind's totals, divided by the bytes, are the cell's figure.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        python bench/warm_instr.py o200k prose --kb 128 --reps 2
    callgrind_annotate --inclusive=yes /tmp/cg.out | grep gputok_cpu_encode_text

(``python bench/warm_instr.py --all`` runs every cell that way and prints instructions/byte.)

``--peer gigatoken`` counts gigatoken's fast API (``Tokenizer.encode`` of the same text, warm
the same way) instead: callgrind's program total while instrumented, so the call's Python
glue is in its figure (a few hundred instructions a call: nothing per byte at 128 KB).
``--cache-sim`` adds callgrind's cache simulation and prints last-level misses a KB beside
the count (data read misses at the last level: the probes that waited on memory).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

MODELS = {"cl100k": "cl100k_base", "o200k": "o200k_base", "llama3": "llama3_tokenizer_json",
          "qwen2": "qwen2_tokenizer_json"}
KINDS = ("prose", "code", "multilingual")


def _text(model: str, kind: str, kb: int) -> bytes:
    import _common

    text = "\n".join(_common.corpus(kind, max(1, kb // 1024 + 1)))
    data = text.encode("utf-8")[: kb * 1024]
    return data.decode("utf-8", "ignore").encode("utf-8")


def _instrument(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   capture_output=True)


def peer_workload(model: str, kind: str, kb: int, reps: int) -> int:
    """gigatoken's fast API over the cell's text, warm (see the module's docstring)."""
    import peers

    if model not in ("cl100k", "o200k"):
        raise ValueError(f"{model}: the gigatoken count is for the tiktoken models")
    tok = peers.build("gigatoken", MODELS[model], threads=1)
    data = _text(model, kind, kb)
    text = data.decode("utf-8")
    want = list(tok.one(text))
    tok.one(text)
    _instrument(True)
    for _ in range(reps):
        got = tok.one(text)
    _instrument(False)
    if list(got) != want:
        raise RuntimeError("gigatoken's ids changed between passes")
    return len(data)


def workload(model: str, kind: str, kb: int, reps: int) -> int:
    import gputok
    from gputok.backends import get_backend, native
    from gputok.backends.native.perdoc import PerDocPass

    name = MODELS[model]
    if model in ("cl100k", "o200k"):
        enc = gputok.get_encoding(name)
    else:
        import testdata
        enc = gputok.load(str(testdata.vocab_path(name)))
    plan = get_backend("native").model_plan(enc.model)
    if plan.mode != "device":
        raise ValueError(f"{model}: not cut by the native device ({plan.why})")
    data = _text(model, kind, kb)
    p = PerDocPass(native.library(), 1)
    want = p.encode_text(plan.tables, data)  # cold: the cache filled
    p.encode_text(plan.tables, data)
    _instrument(True)
    for _ in range(reps):
        got = p.encode_text(plan.tables, data)
    _instrument(False)
    assert (got == want).all()
    return len(data)


def measure(model: str, kind: str, kb: int, reps: int, peer: str = "",
            cache_sim: bool = False) -> "tuple[float, float | None]":
    """(instructions a byte, last-level data read misses a KB or None without --cache-sim)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        extra = ["--peer", peer] if peer else []
        sim = ["--cache-sim=yes"] if cache_sim else []
        r = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim,
                            f"--callgrind-out-file={out}", os.path.realpath(sys.executable),
                            __file__, model, kind, "--kb", str(kb), "--reps", str(reps), *extra],
                           capture_output=True, text=True)
        m = re.search(r"BYTES (\d+)", r.stdout)
        if m is None:
            raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--show-percs=no", out],
                             capture_output=True, text=True).stdout
        nbytes = reps * int(m.group(1))
        lines = ann.splitlines()
        events = next((l.split(":", 1)[1].split() for l in lines if l.startswith("Events shown:")),
                      ["Ir"])

        def per_byte(line: str) -> "tuple[float, float | None]":
            v = [int(x.replace(",", "")) for x in line.split()[:len(events)]]
            miss = v[events.index("DLmr")] * 1024 / nbytes if "DLmr" in events else None
            return v[0] / nbytes, miss

        if peer:
            return per_byte(next(l for l in lines if "PROGRAM TOTALS" in l))
        # the exported call, where callgrind names it; else the ctypes call into it (the only
        # foreign call while instrumented: the same count, as callgrind attributes a call from
        # libffi's trampoline to the trampoline when it cannot place the library's symbol)
        line = next((l for l in lines if "gputok_cpu_encode_text" in l), None)
        if line is None:
            line = next(l for l in lines if re.search(r":ffi_call \[", l))
        return per_byte(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("kind", nargs="?")
    ap.add_argument("--kb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--peer", default="", choices=("", "gigatoken"))
    ap.add_argument("--cache-sim", action="store_true")
    a = ap.parse_args()
    if a.all:
        for model in a.models.split(","):
            if a.peer and model not in ("cl100k", "o200k"):
                continue
            for kind in KINDS:
                ir, miss = measure(model, kind, a.kb, a.reps, a.peer, a.cache_sim)
                tail = f"  {miss:6.2f} LL read misses/KB" if miss is not None else ""
                print(f"{a.peer or 'gputok':9s} {model:7s} {kind:13s} {ir:6.1f} instr/byte{tail}",
                      flush=True)
        return
    run = peer_workload if a.peer else workload
    print("BYTES", run(a.model, a.kind, a.kb, a.reps))


if __name__ == "__main__":
    main()
