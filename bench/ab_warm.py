"""A/B of the native CPU device's warm per-document pass between two source trees.

For a change to kernels/cpu_*.h on a loaded box: each round runs one fresh process per tree (in
turn, the order alternating by round) that builds the model, encodes each cell's text once (the
piece cache filled) and then times ``--reps`` warm passes of it by the thread's CPU time (the
pass runs on the calling thread), so the other processes' load counts less than in wall time.
Cells: the models of ``warm_instr.py`` x prose, code, multilingual, ``--kb`` of each.
``--peer gigatoken`` adds gigatoken's fast API (``Tokenizer.encode`` of the same text, one
call a pass, process CPU time) as a third arm, for a ratio in the same run. Medians over rounds.

    python bench/ab_warm.py /work/main . --rounds 5
    python bench/ab_warm.py . . --b-env GPUTOK_NATIVE_FLAGS=-mavx2   # the same tree, B's flags
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def child(arm: str, models: list, kb: int, reps: int) -> dict:
    import warm_instr

    out = {}
    for model in models:
        if arm == "gigatoken":
            import peers

            if model not in ("cl100k", "o200k"):
                continue
            tok = peers.build("gigatoken", warm_instr.MODELS[model], threads=1)
            for kind in warm_instr.KINDS:
                text = warm_instr._text(model, kind, kb).decode("utf-8")
                tok.one(text)
                t0 = time.process_time()
                for _ in range(reps):
                    tok.one(text)
                out[f"{model}/{kind}"] = len(text.encode("utf-8")) * reps / (
                    time.process_time() - t0) / 1e6
            continue
        import gputok
        from gputok.backends import get_backend, native
        from gputok.backends.native.perdoc import PerDocPass

        name = warm_instr.MODELS[model]
        if model in ("cl100k", "o200k"):
            enc = gputok.get_encoding(name)
        else:
            import testdata
            enc = gputok.load(str(testdata.vocab_path(name)))
        tables = get_backend("native").model_plan(enc.model).tables
        p = PerDocPass(native.library(), 1)
        for kind in warm_instr.KINDS:
            data = warm_instr._text(model, kind, kb)
            p.encode_text(tables, data)
            t0 = time.thread_time()
            for _ in range(reps):
                p.encode_text(tables, data)
            out[f"{model}/{kind}"] = len(data) * reps / (time.thread_time() - t0) / 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a", nargs="?", help="the baseline tree")
    ap.add_argument("b", nargs="?", help="the changed tree")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default="cl100k,o200k,llama3,qwen2")
    ap.add_argument("--peer", default="", choices=("", "gigatoken"))
    ap.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for arm B only (e.g. the library's flags)")
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    models = a.models.split(",")
    if a.child:
        print("RESULT", json.dumps(child(a.child, models, a.kb, a.reps)))
        return
    arms = {"A": os.path.abspath(a.a), "B": os.path.abspath(a.b)}
    if a.peer:
        arms[a.peer] = os.path.abspath(a.b)
    got: dict = {arm: {} for arm in arms}
    for r in range(a.rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for arm in order:
            env = dict(os.environ, PYTHONPATH=arms[arm])
            if arm == "B":
                env.update(kv.split("=", 1) for kv in a.b_env)
            res = subprocess.run([sys.executable, __file__, "--child", arm if arm == a.peer
                                  else "gputok", "--models", a.models, "--kb", str(a.kb),
                                  "--reps", str(a.reps)], env=env, capture_output=True,
                                 text=True, cwd=arms[arm])
            line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(res.stdout[-2000:] + res.stderr[-2000:])
            for cell, mbs in json.loads(line[7:]).items():
                got[arm].setdefault(cell, []).append(mbs)
        print(f"round {r + 1} done", file=sys.stderr, flush=True)
    head = f"{'cell':22s} {'A MB/s':>8s} {'B MB/s':>8s} {'B/A':>6s}"
    if a.peer:
        head += f" {a.peer + ' MB/s':>16s} {'B/peer':>7s}"
    print(head)
    for cell in got["B"]:
        ma, mb = statistics.median(got["A"][cell]), statistics.median(got["B"][cell])
        line = f"{cell:22s} {ma:8.1f} {mb:8.1f} {mb / ma:6.2f}"
        if a.peer and cell in got[a.peer]:
            mp = statistics.median(got[a.peer][cell])
            line += f" {mp:16.1f} {mb / mp:7.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
