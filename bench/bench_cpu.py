"""The fastest exact tokenizer on a CPU: gputok's native device against the CPU tokenizers.

One run gives the whole table: cells cl100k_base and o200k_base (tiktoken's rule) and Llama 3 /
Qwen2 (tokenizer.json) x prose, code and multilingual text; one thread and all cores; cold and
warm. Peers (bench/peers.py builds those it shares with the other scripts), where installed and
where they have the model:

  gputok                   ``encode_batch_arrays(backend="native")``
  gigatoken                the fast API: ``Tokenizer.from_tiktoken(path)`` / ``Tokenizer(json)``,
                           ``encode_batch(docs, parallel=...)``
  gigatoken tiktoken mode  ``as_tiktoken().encode_ordinary_batch``
  toktok-rs                ``toktok._encoding(name).encode_batch_to_numpy(docs, threads)``
  quicktok-v1              ``quicktok.get_encoding(name).encode_batch(docs, threads, False)``
  tiktoken                 ``encode_ordinary_batch(docs, num_threads)``
  HF tokenizers            ``encode_batch_fast`` (tiktoken models: gputok's tokenizer.json export)

How: each round, every (model, peer, thread count) runs in a fresh process (``--child``) that
builds the tokenizer and then, for each kind of text, encodes this round's own slice of the
corpus once (*cold*: text this process has never seen, so no cache of whole pieces has it) and
``--repeat`` more times (*warm*: the same documents again). Rounds take the slices in turn (no
round re-encodes another's text) and the peers in a rotated order (interleaved); medians over
rounds are reported. A process's first batch (one-time set-up: lazy tables, thread pools) is
64 KB of other text, timed on its own and listed with the build time and peak RSS. Before a peer's speed is quoted its ids are compared, document
by document and on every slice, with the reference library's (tiktoken; HF tokenizers for a
tokenizer.json): a peer that differs anywhere is listed with the documents it gets wrong and left
out of the ratios. MB/s is of wall time; a ratio is gputok's MB/s over the peer's (above 1:
gputok faster), given against gigatoken's fast API and toktok-rs in every cell.

    python bench/bench_cpu.py                                   # the whole table, ~6 min, 2 cores
    python bench/bench_cpu.py --threads 1 --cells o200k/prose --mb 4
    python bench/bench_cpu.py --record bench/results/cpu.md

The corpus job (``gputok encode`` of a JSONL file to shards, against gigatoken's
``encode_files``) is ``bench_e2e.py``; per-thread scaling is ``bench_scaling.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import peers as _peers

TIKTOKEN_MODELS = ("cl100k_base", "o200k_base")
JSON_MODELS = {"llama3": "llama3_tokenizer_json", "qwen2": "qwen2_tokenizer_json"}
SHORT = {"cl100k": "cl100k_base", "o200k": "o200k_base", "llama3": "llama3", "qwen2": "qwen2"}
KINDS = ("prose", "code", "multilingual")
OURS = "gputok"
PEERS = (OURS, "gigatoken", "gigatoken tiktoken mode", "toktok-rs", "quicktok-v1", "tiktoken",
         "HF tokenizers")
FIRST_KB = 64  # the first batch's size
BARS = ("gigatoken", "toktok-rs")  # the ratios every cell gives
TARGET = {"gigatoken": 1.0, "toktok-rs": 1.5}  # issue: >= 1.0x gigatoken, >= 1.5x toktok


def model_file(model: str) -> str:
    import testdata

    if model in JSON_MODELS:
        return str(testdata.vocab_path(JSON_MODELS[model]))
    return str(testdata.vocab_path(model))


# ---------------------------------------------------------------- one peer, in a child process

def make_peer(peer: str, model: str, threads: int, files: dict):
    """encode(docs) -> per-document id sequences (or an (ids, offsets) pair)."""
    n = threads or _peers.THREADS
    if peer == OURS:
        import gputok

        enc = gputok.get_encoding(model) if model in TIKTOKEN_MODELS else gputok.load(
            model_file(model))
        kw = {"disallowed_special": ()} if model in TIKTOKEN_MODELS else {"allowed_special": "all"}
        gputok.backends.get_backend("native")  # (the library loads here, not in a pass)
        return lambda docs: enc.encode_batch_arrays(docs, backend="native", **kw)
    if peer == "gigatoken":  # its own builder: the thread count is its ``parallel`` flag
        _peers._need("gigatoken")
        import gigatoken

        tok = gigatoken.Tokenizer.from_tiktoken(files["tiktoken"]) if model in TIKTOKEN_MODELS \
            else gigatoken.Tokenizer(model_file(model))

        def run(docs):
            lay = tok.encode_batch(docs, parallel=threads != 1).layout
            return lay.content.data, lay.offsets.data
        return run
    if peer == "gigatoken tiktoken mode" and model not in TIKTOKEN_MODELS:
        raise _peers.Unavailable("a tiktoken encoding only")
    if peer == "tiktoken" and model not in TIKTOKEN_MODELS:
        raise _peers.Unavailable("a tiktoken encoding only")
    if peer == "HF tokenizers":
        return _peers.build(peer, model, threads=n, hf_json=files["json"]).batch
    return _peers.build(peer, model, threads=n).batch


def _digests(out) -> list:
    import numpy as np

    return [hashlib.sha1(np.asarray(x, np.uint32).tobytes()).hexdigest()[:12]
            for x in _peers.per_doc(out)]


def child(args) -> dict:
    files = json.loads(args.files)
    t0 = time.perf_counter()
    try:
        run = make_peer(args.child, args.model, args.threads[0], files)
    except _peers.Unavailable as e:
        return {"unavailable": str(e)}
    out = {"build_s": time.perf_counter() - t0, "kinds": {}}
    first = first_batch()
    t0 = time.perf_counter()
    run(first)  # the process's first batch (one-time set-up shows here, not in the kinds' times)
    out["first_s"] = time.perf_counter() - t0
    for kind, path in json.loads(args.docs):
        docs = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
        w0 = time.perf_counter()
        got = run(docs)
        cold = time.perf_counter() - w0
        digests = _digests(got)
        del got
        warm = []
        for _ in range(args.repeat):
            w0 = time.perf_counter()
            run(docs)
            warm.append(time.perf_counter() - w0)
        out["kinds"][kind] = {"cold": cold, "warm": warm, "digests": digests}
    out["rss_mb"] = peak_rss_mb()
    return out


def first_batch() -> list:
    """The first batch a process encodes: the opening FIRST_KB of sample/austen.jsonl (text of
    none of the measured slices)."""
    docs, size = [], 0
    for line in open(_common.ROOT / "sample" / "austen.jsonl", encoding="utf-8"):
        docs.append(json.loads(line)["text"])
        size += len(docs[-1].encode("utf-8"))
        if size >= FIRST_KB * 1000:
            break
    return docs


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM: ru_maxrss keeps the parent's peak
    across fork and exec)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------- the parent

def reference(model: str, docs: list, files: dict) -> list:
    """The reference library's ids per document (tiktoken / HF tokenizers), as digests."""
    if model in TIKTOKEN_MODELS:
        tk = _common.tiktoken_for(model)
        return _digests([tk.encode_ordinary(d) for d in docs])
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(files["json"])
    return _digests([e.ids for e in hf.encode_batch(docs, add_special_tokens=False)])


def measure(peer, model, slices, files, args, threads) -> dict:
    cmd = [sys.executable, __file__, "--child", peer, "--model", model,
           "--docs", json.dumps(slices), "--files", json.dumps(files),
           "--repeat", str(args.repeat), "--threads", str(threads)]
    env = dict(os.environ)
    if threads == 1:  # every peer on one thread (those that read these)
        env.update(GPUTOK_NUM_THREADS="1", RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def prepare(kinds: dict, args, tmp: Path) -> dict:
    """Per model (``kinds``: model -> its kinds): its files; per kind: ``--rounds`` disjoint
    slices of about ``--mb`` MB, each a JSONL file with the reference's digests."""
    import gputok
    from gputok.export import save_hf_json

    text = {}
    for kind in dict.fromkeys(k for ks in kinds.values() for k in ks):
        docs = _common.corpus(kind, args.mb * args.rounds)
        slices, cur, size = [], [], 0
        for d in docs:
            cur.append(d)
            size += len(d.encode("utf-8"))
            if size >= args.mb * 1e6 and len(slices) < args.rounds - 1:
                slices.append(cur)
                cur, size = [], 0
        slices.append(cur)
        while len(slices) < args.rounds:  # a short corpus: rounds share its slices
            slices.append(slices[len(slices) % max(1, len(slices))])
        text[kind] = []
        for r, s in enumerate(slices):
            path = tmp / f"{kind}.{r}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for d in s:
                    f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
            text[kind].append((str(path), s, sum(len(d.encode("utf-8")) for d in s)))
    plan = {}
    for model in kinds:
        files = {"json": model_file(model)}
        if model in TIKTOKEN_MODELS:
            files["json"] = str(tmp / f"{model}.tokenizer.json")
            save_hf_json(gputok.get_encoding(model), files["json"])
            files["tiktoken"] = str(tmp / f"{model}.tiktoken")  # named so gigatoken knows it
            Path(files["tiktoken"]).write_bytes(Path(model_file(model)).read_bytes())
        plan[model] = {"files": files, "kinds": {
            k: [{"path": p, "bytes": nb, "want": reference(model, s, files)}
                for p, s, nb in text[k]] for k in kinds[model]}}
    return plan


def run_all(plan: dict, args) -> dict:
    """Interleaved rounds; returns {model: {threads: {peer: {...}}}}."""
    res = {m: {t: {} for t in args.threads} for m in plan}
    skipped: dict = {m: {} for m in plan}
    for r in range(args.rounds):
        for model, mp in plan.items():
            kinds = list(mp["kinds"])
            kinds = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
            slices = [(k, mp["kinds"][k][r]["path"]) for k in kinds]
            for threads in args.threads:
                order = [p for p in args.peers if p not in skipped[model]]
                order = order[r % max(1, len(order)):] + order[:r % max(1, len(order))]
                for p in order:
                    got = measure(p, model, slices, mp["files"], args, threads)
                    if "unavailable" in got or "error" in got:
                        skipped[model][p] = got.get("unavailable") or f"failed: {got['error']}"
                        for t in res[model]:
                            res[model][t].pop(p, None)
                        continue
                    cell = res[model][threads].setdefault(
                        p, {"rss_mb": 0.0, "build_s": [], "first_s": [], "kinds": {}})
                    cell["rss_mb"] = max(cell["rss_mb"], got["rss_mb"])
                    cell["build_s"].append(got["build_s"])
                    cell["first_s"].append(got["first_s"])
                    for k, x in got["kinds"].items():
                        sl = mp["kinds"][k][r]
                        mb = sl["bytes"] / 1e6
                        kk = cell["kinds"].setdefault(k, {"cold": [], "warm": [], "bad": []})
                        kk["cold"].append(mb / x["cold"])
                        kk["warm"].append(mb / statistics.median(x["warm"]) if x["warm"]
                                          else float("nan"))
                        if x["digests"] != sl["want"]:
                            bad = [i for i, (a, b) in enumerate(zip(x["digests"], sl["want"]))
                                   if a != b] or ["count"]
                            kk["bad"].append({"round": r, "documents": bad[:20]})
            print(f"  round {r + 1}/{args.rounds} {model} done "
                  f"({time.perf_counter() - START:.0f} s)", flush=True)
    return {"results": res, "skipped": skipped}


def table(plan, out, args) -> list:
    """Prints the table; returns its rows (for the record's JSON)."""
    med = statistics.median
    rows = []
    head = ("| cell | threads | " + " | ".join(f"{p} cold / warm" for p in args.peers)
            + " | " + " | ".join(f"gputok/{b} cold / warm" for b in BARS) + " |")
    print("\nMB/s of wall time, medians over rounds (cold: text new to the process; warm: the "
          "same again). Ratios: gputok over the peer; * marks a missed target "
          f"({', '.join(f'{v}x {k}' for k, v in TARGET.items())}).\n")
    print(head)
    print("|" + "---|" * (2 + len(args.peers) + len(BARS)))
    notes = []
    for model, mp in plan.items():
        for kind in mp["kinds"]:
            for threads in args.threads:
                res = out["results"][model][threads]
                cells, rates = [], {}
                for p in args.peers:
                    x = res.get(p, {}).get("kinds", {}).get(kind)
                    if x is None:
                        cells.append("-")
                        continue
                    c, w = med(x["cold"]), med(x["warm"])
                    if x["bad"]:
                        cells.append(f"NOT EXACT ({c:.1f} / {w:.1f})")
                        notes.append(f"{model} {kind} threads {threads or 'all'} {p}: ids differ "
                                     f"from the reference: {x['bad'][:3]}")
                    else:
                        cells.append(f"{c:.1f} / {w:.1f}")
                        rates[p] = (c, w)
                ratios = []
                for b in BARS:
                    if OURS in rates and b in rates:
                        rc = rates[OURS][0] / rates[b][0]
                        rw = rates[OURS][1] / rates[b][1]
                        mark = lambda v: "*" if v < TARGET[b] else ""  # noqa: E731
                        ratios.append(f"{rc:.2f}x{mark(rc)} / {rw:.2f}x{mark(rw)}")
                    else:
                        ratios.append("-")
                name = f"{[k for k, v in SHORT.items() if v == model][0]} {kind}"
                print(f"| {name} | {threads or 'all'} | " + " | ".join(cells + ratios) + " |")
                rows.append({"model": model, "kind": kind, "threads": threads or "all",
                             "rates": rates, "ratios": dict(zip(BARS, ratios))})
    print(f"\nper process: build s + first batch s ({FIRST_KB} KB of sample/austen.jsonl), "
          "peak RSS MB (the tokenizer and every kind's text), medians:")
    for m in plan:
        for t in args.threads:
            print(f"  {m}, threads {t or 'all'}: " + "; ".join(
                f"{p} {med(v['build_s']):.2f}+{med(v['first_s']):.3f} s {v['rss_mb']:.0f} MB"
                for p, v in out["results"][m][t].items()))
    for m, sk in out["skipped"].items():
        for p, why in sk.items():
            print(f"  {m} {p}: skipped: {why}")
    for n in notes:
        print(f"  {n}")
    return rows


START = time.perf_counter()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=None,
                   help="model/kind cells (models: cl100k, o200k, llama3, qwen2); default all")
    p.add_argument("--mb", type=float, default=1.0, help="MB of text per cell and round")
    p.add_argument("--repeat", type=int, default=2, help="warm passes per process and kind")
    p.add_argument("--rounds", type=int, default=2, help="rounds (fresh processes, new text)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                   help="thread counts to run (0: all cores; default one and all)")
    p.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--record", help="write the record here (bench/results/cpu.md)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--docs", help=argparse.SUPPRESS)
    p.add_argument("--files", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    wanted = args.cells or [f"{m}/{k}" for m in SHORT for k in KINDS]
    kinds: dict = {}
    for c in wanted:
        m, k = c.split("/")
        if m not in SHORT or k not in KINDS:
            raise SystemExit(f"unknown cell {c!r} (models {list(SHORT)}, kinds {list(KINDS)})")
        kinds.setdefault(SHORT[m], []).append(k)
    _common.compile_bytecode()
    dists = [d for d in ("gigatoken", "toktok-rs", "quicktok-v1", "tiktoken", "tokenizers")]
    with _common.recording(args.record, "bench_cpu.py", "the native device against the fastest "
                           "exact CPU tokenizers, every cell, one thread and all cores, cold and "
                           "warm", dists) as rec:
        print(f"machine: {_common.machine()}\nload average: {os.getloadavg()}")
        with tempfile.TemporaryDirectory() as d:
            plan = prepare(kinds, args, Path(d))
            print(f"text ready ({time.perf_counter() - START:.0f} s)", flush=True)
            out = run_all(plan, args)
        rec["data"] = {"rows": table(plan, out, args), "skipped": out["skipped"],
                       "mb": args.mb, "rounds": args.rounds, "repeat": args.repeat}
        print(f"\nload average at the end: {os.getloadavg()}; "
              f"{time.perf_counter() - START:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(rec["data"], indent=1))


if __name__ == "__main__":
    main()
