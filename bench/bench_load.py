"""Load time of a real vocabulary: ``gputok.load`` against ``tokenizers.Tokenizer.from_file`` (a
tokenizer.json) and ``sentencepiece.SentencePieceProcessor`` (a .model), in the same run.

    python bench/bench_load.py [--rounds 5] [--files NAME ...]

Each round times every loader once, interleaved (gputok, peer, gputok, peer, ...):

* first: gputok in a fresh process with an empty cache folder (``$GPUTOK_CACHE``): a file it
  has never seen (the peers have no cache: their first is their cold);
* cold: a fresh Python process imports the library and loads the file (the time inside the
  process, from before the import to after the load; interpreter start-up excluded), gputok's
  built-model cache (``loaders/model_cache.py``) already holding the file;
* warm: the same process loads the file again;
* load: the cold load without the import.

Files: the pinned test vocabularies (``tests/testdata.py``): DeepSeek-LLM's tokenizer.json (100K
entries), Qwen2's (152K), Mistral v7's .model (32K pieces), and a 262K-piece SentencePiece BPE
.model written once from the pinned Gemma 4 test vocabulary (its pieces and types; scores
-id) under ``$GPUTOK_TEST_DATA/bench``: no 256K .model is pinned. Prints the median per loader
and the ratio gputok / peer (below 1: gputok loads faster).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

FILES = {"deepseek-llm": ("deepseek_llm_tokenizer_json", "family"),
         "qwen2": ("qwen2_tokenizer_json", "vocab"),
         "mistral_v7": ("mistral_v7", "family"),
         "gemma4-256k.model": ("llama_cpp_gemma-4", "built")}

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
t_import = time.perf_counter()
load()
cold = time.perf_counter() - t0
t1 = time.perf_counter()
load()
print(json.dumps({"cold": cold, "warm": time.perf_counter() - t1, "load": cold - (t_import - t0)}))
"""


def path_of(name: str) -> str:
    import testdata

    key, where = FILES[name]
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
        first = []
        run("gputok", path)  # (fills the model cache for "cold")
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as empty:
                first.append(run("gputok", path, cache=empty)["cold"])
            for kind in ("gputok", peer):
                times[kind].append(run(kind, path))
        print(f"{name} ({Path(path).name}, {os.path.getsize(path) / 1e6:.1f} MB):")
        peer_cold = statistics.median(t["cold"] for t in times[peer])
        print(f"  first: gputok {statistics.median(first) * 1e3:8.1f} ms   {peer} "
              f"{peer_cold * 1e3:8.1f} ms   ratio {statistics.median(first) / peer_cold:.2f}")
        for phase in ("cold", "warm", "load"):
            med = {k: statistics.median(t[phase] for t in v) for k, v in times.items()}
            print(f"  {phase}: gputok {med['gputok'] * 1e3:8.1f} ms   {peer} "
                  f"{med[peer] * 1e3:8.1f} ms   ratio {med['gputok'] / med[peer]:.2f}")


if __name__ == "__main__":
    main()
