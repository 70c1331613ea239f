"""Load time of a real vocabulary: ``gputok.load`` against ``tokenizers.Tokenizer.from_file`` (a
tokenizer.json) and ``sentencepiece.SentencePieceProcessor`` (a .model), in the same run.

    python bench/bench_load.py [--rounds 5] [--files NAME ...]

Each round times every loader once, interleaved (gputok, peer, gputok, peer, ...):

* cold: a fresh Python process imports the library and loads the file (the time inside the
  process, from before the import to after the load; interpreter start-up excluded);
* warm: the same process loads the file again (gputok's content-keyed caches, the page cache).

Files: the pinned test vocabularies (``tests/testdata.py``): DeepSeek-LLM's tokenizer.json (100K
entries), Qwen2's (152K), Mistral v7's .model (32K pieces). Prints the median per loader and the
ratio gputok / peer (below 1: gputok loads faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

FILES = {"deepseek-llm": ("deepseek_llm_tokenizer_json", "family"),
         "qwen2": ("qwen2_tokenizer_json", "vocab"),
         "mistral_v7": ("mistral_v7", "family")}

_CHILD = r"""
import sys, time, json
t0 = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
if kind == "gputok":
    import gputok
    load = lambda: gputok.load(path)
elif kind == "hf":
    from tokenizers import Tokenizer
    load = lambda: Tokenizer.from_file(path)
else:
    import sentencepiece as spm
    load = lambda: spm.SentencePieceProcessor(model_file=path)
load()
cold = time.perf_counter() - t0
t1 = time.perf_counter()
load()
print(json.dumps({"cold": cold, "warm": time.perf_counter() - t1}))
"""


def path_of(name: str) -> str:
    import testdata

    key, where = FILES[name]
    return str(testdata.family_path(key) if where == "family" else testdata.vocab_path(key))


def run(kind: str, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, path], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", nargs="*", default=list(FILES))
    args = ap.parse_args()
    for name in args.files:
        path = path_of(name)
        peer = "spm" if path.endswith(".model") else "hf"
        times: dict = {"gputok": [], peer: []}
        for _ in range(args.rounds):
            for kind in ("gputok", peer):
                times[kind].append(run(kind, path))
        print(f"{name} ({Path(path).name}, {os.path.getsize(path) / 1e6:.1f} MB):")
        for phase in ("cold", "warm"):
            med = {k: statistics.median(t[phase] for t in v) for k, v in times.items()}
            print(f"  {phase}: gputok {med['gputok'] * 1e3:8.1f} ms   {peer} "
                  f"{med[peer] * 1e3:8.1f} ms   ratio {med['gputok'] / med[peer]:.2f}")


if __name__ == "__main__":
    main()
