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


def workload(model: str, kind: str, kb: int, reps: int) -> int:
    import gputok
    from gputok.backends import get_backend, native
    from gputok.backends.native.perdoc import PerDocPass
    import _common

    name = MODELS[model]
    if model in ("cl100k", "o200k"):
        enc = gputok.get_encoding(name)
    else:
        import testdata
        enc = gputok.load(str(testdata.vocab_path(name)))
    plan = get_backend("native").model_plan(enc.model)
    if plan.mode != "device":
        raise ValueError(f"{model}: not cut by the native device ({plan.why})")
    text = "\n".join(_common.corpus(kind, max(1, kb // 1024 + 1)))
    data = text.encode("utf-8")[: kb * 1024]
    data = data.decode("utf-8", "ignore").encode("utf-8")
    p = PerDocPass(native.library(), 1)
    want = p.encode_text(plan.tables, data)  # cold: the cache filled
    p.encode_text(plan.tables, data)
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    for _ in range(reps):
        got = p.encode_text(plan.tables, data)
    subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True)
    assert (got == want).all()
    return len(data)


def measure(model: str, kind: str, kb: int, reps: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        r = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                            f"--callgrind-out-file={out}", os.path.realpath(sys.executable), __file__, model, kind,
                            "--kb", str(kb), "--reps", str(reps)], capture_output=True, text=True)
        m = re.search(r"BYTES (\d+)", r.stdout)
        if m is None:
            raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], capture_output=True,
                             text=True).stdout
        # the exported call, where callgrind names it; else the ctypes call into it (the only
        # foreign call while instrumented: the same count, as callgrind attributes a call from
        # libffi's trampoline to the trampoline when it cannot place the library's symbol)
        lines = ann.splitlines()
        line = next((l for l in lines if "gputok_cpu_encode_text" in l), None)
        if line is None:
            line = next(l for l in lines if re.search(r":ffi_call \[", l))
        ir = int(line.split()[0].replace(",", ""))
        return ir / (reps * int(m.group(1)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("kind", nargs="?")
    ap.add_argument("--kb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    if a.all:
        for model in a.models.split(","):
            for kind in KINDS:
                print(f"{model:7s} {kind:13s} {measure(model, kind, a.kb, a.reps):6.1f} instr/byte",
                      flush=True)
        return
    print("BYTES", workload(a.model, a.kind, a.kb, a.reps))


if __name__ == "__main__":
    main()
