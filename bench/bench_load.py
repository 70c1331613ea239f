"""Load time of a real vocabulary and the first encode after it: ``gputok.load`` against
``sentencepiece.SentencePieceProcessor`` (a .model) and ``tokenizers.Tokenizer.from_file`` (a
tokenizer.json), in the same run; GGUF files alone (no peer here reads one).

    python bench/bench_load.py [--rounds 5] [--files NAME ...] [--record bench/results/load.md]

Every number is taken in a fresh Python process (numpy imported before the clock starts, for
every library: gputok needs it, the peers do not). Each round runs, interleaved:

* gputok first: an empty cache folder (``$GPUTOK_CACHE``; only the compiled CPU library is
  kept, a one-time build per machine): a file gputok has never seen;
* gputok cached: the cache filled by an earlier process (the built model, the SentencePiece
  encode tables, a GGUF's hint): what every later process of a user sees;
* the peer (sentencepiece or HF), which has no cache.

and in each process: ``import`` the library, ``load`` the file, the ``1st encode`` of a short
text (lazily built tables included), ``warm load`` (the same file again in that process) and a
second encode. gputok's ids for the text are checked equal to the peer's first. Printed: the
median per phase over the rounds, and the ratios gputok / peer (below 1: gputok is faster).

Files: Mistral v1/v3/v7 and botchan (SentencePiece BPE), a 262K-piece SentencePiece BPE .model
written once from the pinned Gemma 4 vocabulary (its pieces and types; scores -id) under
``$GPUTOK_TEST_DATA/bench`` (no 256K .model is pinned), DeepSeek-LLM's and Qwen2's
tokenizer.json, and llama.cpp's Gemma 4 (262K, BPE on characters), Phi-3 (SentencePiece BPE)
and Qwen 3.5 (byte-level BPE) GGUF files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _common

ROOT = _common.ROOT
TEXT = "Hello world, this is a test of 2026: déjà vu, 世界!"

# name -> (test-data key, how it is found, the peer)
FILES = {"mistral_v1": ("mistral_v1", "family", "sentencepiece"),
         "mistral_v3": ("mistral_v3", "family", "sentencepiece"),
         "mistral_v7": ("mistral_v7", "family", "sentencepiece"),
         "botchan": ("botchan_bpe", "family", "sentencepiece"),
         "gemma4-256k.model": ("llama_cpp_gemma-4", "built", "sentencepiece"),
         "deepseek-llm": ("deepseek_llm_tokenizer_json", "family", "tokenizers"),
         "qwen2": ("qwen2_tokenizer_json", "vocab", "tokenizers"),
         "gemma-4.gguf": ("llama_cpp_gemma-4", "family", None),
         "phi-3.gguf": ("llama_cpp_phi-3", "family", None),
         "qwen35.gguf": ("llama_cpp_qwen35", "family", None)}

_CHILD = r"""
import sys, time, json
import numpy
kind, path, text = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if kind == "gputok":
    import gputok
    load = lambda: gputok.load(path)
    encode = lambda t: t.encode(text, disallowed_special=())
elif kind == "tokenizers":
    from tokenizers import Tokenizer
    load = lambda: Tokenizer.from_file(path)
    encode = lambda t: t.encode(text, add_special_tokens=False).ids
else:
    import sentencepiece as spm
    load = lambda: spm.SentencePieceProcessor(model_file=path)
    encode = lambda t: t.encode(text)
t1 = time.perf_counter()
tok = load()
t2 = time.perf_counter()
ids = encode(tok)
t3 = time.perf_counter()
tok = load()
t4 = time.perf_counter()
encode(tok)
t5 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "encode1": t3 - t2, "warm": t4 - t3,
                  "encode2": t5 - t4, "ids": [int(i) for i in ids]}))
"""
PHASES = ("import", "load", "encode1", "warm", "encode2")


def path_of(name: str) -> str:
    import testdata

    key, where, _ = FILES[name]
    if where == "built":
        return str(build_256k(testdata.family_path(key), testdata.cache_dir() / "bench" / name))
    return str(testdata.family_path(key) if where == "family" else testdata.vocab_path(key))


def build_256k(gguf_path, out: Path) -> Path:
    """A SentencePiece BPE .model with Gemma 4's 262,144 pieces (once)."""
    if out.exists():
        return out
    import families as F
    from cpu_ref import gguf

    meta = gguf.read_metadata(gguf_path)
    kinds = {3: 3, 4: 4, 6: 6}  # CONTROL, USER_DEFINED, BYTE; the rest NORMAL
    pieces = [(t, -float(i), kinds.get(k, 1)) for i, (t, k) in
              enumerate(zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]))]
    unk = meta["tokenizer.ggml.unknown_token_id"]
    pieces[unk] = (pieces[unk][0], 0.0, 2)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(F.model_bytes(pieces, trainer={"byte_fallback": True}))
    os.replace(tmp, out)
    return out


def run(kind: str, path: str, cache: "str | None" = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if cache is not None:
        env["GPUTOK_CACHE"] = cache
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, path, TEXT], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def first_run(path: str) -> dict:
    """gputok in a fresh process with an empty cache folder but for the compiled CPU library."""
    from gputok._cache import cache_dir

    with tempfile.TemporaryDirectory() as empty:
        native = cache_dir("native")
        if os.path.isdir(native):
            os.symlink(native, os.path.join(empty, "native"))
        return run("gputok", path, cache=empty)


def measure(name: str, rounds: int) -> dict:
    path = path_of(name)
    peer = FILES[name][2]
    runners = {"gputok first": lambda: first_run(path),
               "gputok cached": lambda: run("gputok", path)}
    if peer:
        runners[peer] = lambda: run(peer, path)
    run("gputok", path)  # (fills the cache for "cached")
    got: dict = {k: [] for k in runners}
    for _ in range(rounds):
        for k, fn in runners.items():
            got[k].append(fn())
    if peer:
        ids = {k: v[0]["ids"] for k, v in got.items()}
        if ids["gputok cached"] != ids[peer] or ids["gputok first"] != ids[peer]:
            raise SystemExit(f"{name}: gputok's ids for {TEXT!r} differ from {peer}'s: {ids}")
    med = {k: {p: statistics.median(r[p] for r in v) for p in PHASES} for k, v in got.items()}
    return {"path": path, "peer": peer, "median_s": med}


def report(name: str, res: dict) -> None:
    path, peer, med = res["path"], res["peer"], res["median_s"]
    print(f"\n{name} ({Path(path).name}, {os.path.getsize(path) / 1e6:.1f} MB): ms, median")
    print(f"  {'':15}{'import':>9}{'load':>9}{'1st encode':>12}{'load+1st':>10}"
          f"{'warm load':>11}{'2nd encode':>12}")
    for k, m in med.items():
        print(f"  {k:15}{m['import'] * 1e3:9.1f}{m['load'] * 1e3:9.1f}{m['encode1'] * 1e3:12.2f}"
              f"{(m['load'] + m['encode1']) * 1e3:10.1f}{m['warm'] * 1e3:11.2f}"
              f"{m['encode2'] * 1e3:12.3f}")
    if not peer:
        return
    p = med[peer]
    for k in ("gputok first", "gputok cached"):
        m = med[k]
        print(f"  {k} / {peer}: load {m['load'] / p['load']:.2f}, import + load "
              f"{(m['import'] + m['load']) / (p['import'] + p['load']):.2f}, load + 1st encode "
              f"{(m['load'] + m['encode1']) / (p['load'] + p['encode1']):.2f}, warm load "
              f"{m['warm'] / p['warm']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", nargs="*", default=list(FILES), choices=list(FILES))
    ap.add_argument("--record", help="write the benchmark's record here (bench/README.md)")
    args = ap.parse_args()
    _common.compile_bytecode()
    with _common.recording(args.record, "bench_load.py", "load a real vocabulary, then the "
                           "first encode, in fresh processes", ["sentencepiece", "tokenizers"]
                           ) as rec:
        print(f"machine: {_common.machine()}\ncommand: {' '.join(sys.argv)}\ntext: {TEXT!r}")
        rec["data"] = {}
        for name in args.files:
            res = measure(name, args.rounds)
            rec["data"][name] = res
            report(name, res)


if __name__ == "__main__":
    main()
