"""BPE training: gputok against every trainer people use, on the same corpus file, in one run.

Trainers (each in a fresh subprocess, so its peak memory, ``ru_maxrss``, is its own):

* ``gputok``      ``gputok.train_bpe(Path(corpus.jsonl))`` (HF's ids and merges)
* ``gputok-bytes`` the same with ``id_order="bytes"`` (rustbpe's tie order)
* ``gputok-cuda`` the same with ``backend="cuda"``: the merge loop on the GPU, kernels compiled
                  before the clock starts; fails without CuPy and a GPU, or if the run fell back
                  to the CPU (out of GPU memory). Its merges must equal HF's and ``gputok``'s
                  (pass ``--backend native`` so that ``gputok`` is the CPU trainer on a GPU host)
* ``gigatoken``   ``gigatoken.train_bpe(JsonlFileSource(...))`` (GPT-2 pattern only)
* ``rustbpe``     ``rustbpe.Tokenizer().train_from_iterator`` (nanochat's trainer)
* ``bpeasy``      ``bpeasy.train_bpe``
* ``hf``          HF ``tokenizers`` ``BpeTrainer`` behind ``Split(pattern)`` + ``ByteLevel``
* ``spm``         ``spm_train --model_type=bpe`` (sentencepiece's trainer: byte fallback,
                  character_coverage 1.0, the special token as a user-defined symbol) on the
                  same text, one paragraph per line: its own kind of BPE
* ``gputok-spm``  ``gputok.train_spm_bpe`` with those options on that text file: its pieces,
                  scores and types must equal spm_train's

Every trainer reads the corpus from disk itself (a JSON-lines file; sentencepiece a text file):
those that take an iterator get one that reads the file line by line. Time covers the training
call (reading, word counting, merges), not imports. Runs are interleaved (``--repeat`` rounds;
the best run is reported, every run listed): on a shared machine single runs vary by +-30%.

Merges are compared as the learned tokens' bytes in order (the first difference is printed):
gputok against HF and gigatoken (HF's rule), gputok-bytes against rustbpe (byte-order ties);
gputok-spm's model against spm_train's, piece by piece. The run fails if gputok's merges differ
from HF's or gputok-spm's pieces from spm_train's.

    python bench/bench_train.py --mb 32 --vocab-size 32768            # prose
    python bench/bench_train.py --kind mixed --mb 96 --vocab-size 32768
    python bench/bench_train.py --trainers gputok gigatoken --repeat 1
    python bench/bench_train.py --mb 32 --vocab-size 32768 --trainers gputok-spm spm
    python bench/bench_train.py --mb 1000 --vocab-size 65536 --backend native \
        --trainers gputok-cuda gputok hf gigatoken --repeat 1            # a GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import _common

EOT = "<|endoftext|>"
TRAINERS = ("gputok", "gputok-bytes", "gputok-cuda", "gigatoken", "rustbpe", "bpeasy", "hf",
            "spm", "gputok-spm")
LABELS = {"gputok": "gputok", "gputok-bytes": "gputok id_order=bytes",
          "gputok-cuda": "gputok backend=cuda",
          "gigatoken": "gigatoken train_bpe", "rustbpe": "rustbpe", "bpeasy": "bpeasy",
          "hf": "HF tokenizers BpeTrainer", "spm": "sentencepiece BPE (spm_train)",
          "gputok-spm": "gputok train_spm_bpe"}
SPM_OPTIONS = {"model_type": "bpe", "character_coverage": 1.0, "byte_fallback": True,
               "max_sentence_length": 1 << 16, "user_defined_symbols": [EOT]}


# ---------------------------------------------------------------- workers (one per subprocess)

def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _lines(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def _pattern(name: str) -> str:
    from cpu_ref.patterns import resolve_pattern

    return resolve_pattern(name)


def _cuda_ready() -> None:
    """Fails now without CuPy or a GPU, and compiles the training kernels (NVRTC, cached per
    device) so that the timed run measures training, not the compiler."""
    from gputok.backends.cuda import train as cuda_train

    ok, why = cuda_train.available()
    if not ok:
        raise SystemExit(f"no CUDA training here: {why}")
    cuda_train._launcher()
    import cupy

    cupy.cuda.Device().synchronize()


def worker(args) -> dict:
    tmp = Path(args.tmp)
    docs = tmp / "docs.jsonl"
    out: dict = {"trainer": args.worker, "threads": os.cpu_count()}
    tokens = None  # learned tokens' bytes, in merge order
    if args.worker in ("gputok", "gputok-bytes", "gputok-cuda"):
        import gputok
        import gputok.train as gt
        import gputok.train.native as gn

        gn.library()  # (built and loaded before the clock starts, as a peer's extension is)
        backend = args.backend
        if args.worker == "gputok-cuda":
            backend = "cuda"
            _cuda_ready()
        order = "bytes" if args.worker == "gputok-bytes" else "hf"
        with warnings.catch_warnings():
            if args.worker == "gputok-cuda":  # (out of GPU memory it would train on the CPU)
                warnings.filterwarnings("error", message=".*training on the CPU instead")
            t0 = time.perf_counter()
            enc = gputok.train_bpe(docs, vocab_size=args.vocab_size, pattern=args.pattern,
                                   special_tokens=[EOT], min_frequency=args.min_frequency,
                                   backend=backend, id_order=order)
            out["seconds"] = time.perf_counter() - t0
        st = gt.last_stats
        out.update(words_s=st.words_s, merges_s=st.merges_s, n_words=st.n_words,
                   n_merges=st.n_merges, backend=st.backend)
        tokens = [enc.decode_single_token_bytes(c) for _, _, c in enc.trained_merges]
    elif args.worker == "gigatoken":
        import gigatoken

        if args.pattern != "gpt2":
            raise SystemExit("gigatoken trains with the GPT-2 pattern only")
        t0 = time.perf_counter()
        _vocab, merges = gigatoken.train_bpe(gigatoken.JsonlFileSource([str(docs)]),
                                             args.vocab_size, [EOT])
        out["seconds"] = time.perf_counter() - t0
        tokens = [a + b for a, b in merges]
    elif args.worker == "rustbpe":
        import rustbpe

        tok = rustbpe.Tokenizer()
        t0 = time.perf_counter()
        # (no special tokens: one id fewer for merges, as gputok's specials take one)
        tok.train_from_iterator(_lines(docs), args.vocab_size - 1, pattern=_pattern(args.pattern))
        out["seconds"] = time.perf_counter() - t0
        ranks = sorted(tok.get_mergeable_ranks(), key=lambda kv: kv[1])
        tokens = [bytes(b) for b, r in ranks if r >= 256]
    elif args.worker == "bpeasy":
        import bpeasy

        t0 = time.perf_counter()
        vocab = bpeasy.train_bpe(_lines(docs), _pattern(args.pattern), 128, args.vocab_size - 1)
        out["seconds"] = time.perf_counter() - t0
        tokens = [b for b, r in sorted(vocab.items(), key=lambda kv: kv[1]) if r >= 256]
    elif args.worker == "hf":
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

        from gputok.bytelevel import unspell
        from gputok.export import _onig_pattern

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_onig_pattern(_pattern(args.pattern))),
                                 behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                      special_tokens=[EOT], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        t0 = time.perf_counter()
        tok.train_from_iterator(_lines(docs), trainer)
        out["seconds"] = time.perf_counter() - t0
        merges = json.loads(tok.to_str())["model"]["merges"]
        tokens = [unspell(a) + unspell(b) for a, b in merges]
    elif args.worker == "spm":
        import sentencepiece as spm

        t0 = time.perf_counter()
        spm.SentencePieceTrainer.train(
            input=str(tmp / "lines.txt"), model_prefix=str(tmp / "spm"),
            vocab_size=args.vocab_size, num_threads=os.cpu_count(), minloglevel=2,
            **SPM_OPTIONS)
        out["seconds"] = time.perf_counter() - t0
    elif args.worker == "gputok-spm":  # (the same options: pieces compared with spm_train's)
        import gputok.train.native as gn
        from gputok.train import train_spm_bpe

        gn.library()
        opts = {k: v for k, v in SPM_OPTIONS.items() if k != "model_type"}
        t0 = time.perf_counter()
        trained = train_spm_bpe(tmp / "lines.txt", vocab_size=args.vocab_size, **opts)
        trained.save(tmp / "gputok-spm.model")
        out["seconds"] = time.perf_counter() - t0
    else:
        raise SystemExit(f"unknown worker {args.worker}")
    out["peak_mb"] = _peak_mb()
    if tokens is not None:
        (tmp / f"{args.worker}.tokens.json").write_text(
            json.dumps([t.hex() for t in tokens]), encoding="utf-8")
    return out


# ---------------------------------------------------------------- the parent

def _write_corpus(tmp: Path, kind: str, mb: float) -> tuple[int, int, int]:
    """Write ``mb`` MB of the ``kind`` corpus (one JSON line per document, and one paragraph a
    line for sentencepiece); returns (bytes, documents, passes). Past what the pinned corpora
    hold, further passes over them are written with every letter of the ASCII alphabet shifted
    by the pass number (``_shifted``): new words in the proportions of the old ones, so the
    word counts and the pair table grow with the corpus as a larger real corpus's do, instead
    of every count only multiplying (a repeated text trains the same merges)."""
    kinds = ("prose", "code", "multilingual") if kind == "mixed" else (kind,)
    parts = [_common.corpus(k, mb / len(kinds)) for k in kinds]
    docs = [d for group in zip(*parts) for d in group]  # interleaved, as a mixed corpus is
    docs += [d for p in parts for d in p[min(map(len, parts)):]]
    want, nbytes, n_docs, passes = int(mb * 1e6), 0, 0, 0
    with open(tmp / "docs.jsonl", "w", encoding="utf-8") as f, \
            open(tmp / "lines.txt", "w", encoding="utf-8") as g:
        while nbytes < want and docs:
            for d in docs:
                d = _shifted(d, passes)
                f.write(json.dumps({"text": d}) + "\n")
                g.writelines(line + "\n" for line in d.split("\n") if line.strip())
                nbytes += len(d.encode("utf-8"))
                n_docs += 1
                if passes and nbytes >= want:
                    break
            passes += 1
    return nbytes, n_docs, passes


def _shifted(text: str, k: int) -> str:
    """``text`` with a-z and A-Z rotated by ``k`` places (k = 0: as it is)."""
    if k % 26 == 0:
        return text
    low = "abcdefghijklmnopqrstuvwxyz"
    up = low.upper()
    r = k % 26
    return text.translate(str.maketrans(low + up, low[r:] + low[:r] + up[r:] + up[:r]))


def _same_prefix(a: list, b: list) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run(args) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="bench_train_"))
    try:  # (the corpus copies are gigabytes at --mb 1024: gone when the run is)
        return _run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args, tmp: Path) -> str:
    nbytes, n_docs, passes = _write_corpus(tmp, args.kind, args.mb)
    results: dict = {}
    times: dict = {name: [] for name in args.trainers}
    failed: dict = {}
    for _ in range(args.repeat):  # interleaved, so a noisy minute hits every trainer alike
        for name in args.trainers:
            if name in failed:
                continue
            cmd = [sys.executable, __file__, "--worker", name, "--tmp", str(tmp),
                   "--vocab-size", str(args.vocab_size), "--pattern", args.pattern,
                   "--min-frequency", str(args.min_frequency), "--backend", args.backend]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                failed[name] = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"  {LABELS[name]:<26} failed: {failed[name]}", file=sys.stderr)
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            times[name].append(res["seconds"])
            if name not in results or res["seconds"] < results[name]["seconds"]:
                results[name] = res  # the fastest run's numbers
            print(f"  {LABELS[name]:<26} {res['seconds']:7.2f} s  peak {res['peak_mb']:7.1f} MB",
                  file=sys.stderr)

    def tokens(name):
        p = tmp / f"{name}.tokens.json"
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None

    checks, bad = [], []
    for ours, theirs in (("gputok", "hf"), ("gputok-cuda", "hf"), ("gputok-cuda", "gputok"),
                         ("gputok", "gigatoken"), ("gputok-bytes", "rustbpe"),
                         ("gputok", "rustbpe"), ("gputok", "bpeasy")):
        a, b = tokens(ours), tokens(theirs)
        if a is None or b is None:
            continue
        same = _same_prefix(a, b)
        checks.append(f"{LABELS[ours]} vs {LABELS[theirs]}: {same} identical leading merges "
                      f"of {len(a)} / {len(b)}" + ("" if same == len(a) == len(b) else
                                                   f" (first difference at merge {same})"))
        if theirs in ("hf", "gputok") and not same == len(a) == len(b):
            bad.append(checks[-1])

    if (tmp / "spm.model").exists() and (tmp / "gputok-spm.model").exists():
        import sentencepiece as spm

        a, b = (spm.SentencePieceProcessor(model_file=str(tmp / f)) for f in
                ("gputok-spm.model", "spm.model"))
        pa, pb = ([(m.id_to_piece(i), m.get_score(i), m.is_control(i), m.is_unknown(i),
                    m.is_byte(i)) for i in range(m.get_piece_size())] for m in (a, b))
        same = _same_prefix(pa, pb)
        checks.append(f"{LABELS['gputok-spm']} vs {LABELS['spm']}: {same} identical leading "
                      f"pieces (text, score, type) of {len(pa)} / {len(pb)}" +
                      ("" if same == len(pa) == len(pb) else f" (first difference at id {same})"))
        if not same == len(pa) == len(pb):
            bad.append(checks[-1])
    first = next((n for n in ("gputok", "gputok-spm", *args.trainers) if n in results), None)
    base = results.get(first, {}).get("seconds")  # (the ratios' base: gputok, else the first)
    base_mb = results.get(first, {}).get("peak_mb")
    lines = [f"# BPE training, {time.strftime('%Y-%m-%d')}\n",
             f"- machine: {_common.machine()}",
             f"- command: `python bench/bench_train.py {' '.join(sys.argv[1:])}`".rstrip(),
             f"- corpus: {args.kind} (tests/testdata.py), {nbytes / 1e6:.2f} MB, {n_docs} "
             f"documents, one JSON line each" + (f" ({passes} passes over the pinned corpora, "
                                                "each further one with its letters shifted)"
                                                if passes > 1 else "") +
             f"; vocab_size {args.vocab_size}, pattern "
             f"{args.pattern}, min_frequency {args.min_frequency} (gputok, HF), special token "
             f"{EOT} (rustbpe and bpeasy: none, one id fewer)"]
    lines += [f"- merges: {c}" for c in checks]
    for name in ("gputok", "gputok-cuda"):
        if name not in results:
            continue
        g = results[name]
        lines.append(f"- {LABELS[name]} phases: word counting {g['words_s']:.2f} s ({g['n_words']} unique "
                     f"words), merges {g['merges_s']:.2f} s ({g['n_merges']} merges, "
                     f"{g['backend']} backend)")
    lines += [f"- {LABELS[n]} failed: {why}" for n, why in failed.items()]
    who = LABELS.get(first, "?")
    lines += ["", f"| trainer | time (s), best of {args.repeat} | all runs (s) | MB/s | time / "
              f"{who}'s | peak RSS (MB) | RSS / {who}'s |", "|---|---:|---|---:|---:|---:|---:|"]
    for name in args.trainers:
        r = results.get(name)
        if r is None:
            continue
        ratio = f"{r['seconds'] / base:.2f}x" if base else "-"
        mem = f"{r['peak_mb'] / base_mb:.2f}x" if base_mb else "-"
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        lines.append(f"| {LABELS[name]} | {r['seconds']:.2f} | {runs} | "
                     f"{nbytes / 1e6 / r['seconds']:.2f} | {ratio} | {r['peak_mb']:.0f} | {mem} |")
    lines += ["", f"Every trainer runs on all {os.cpu_count()} cores it finds (gputok's word "
              "counting, gigatoken, rustbpe, HF, sentencepiece; bpeasy as it does). Peak RSS is the "
              "whole process: interpreter, libraries and training."]
    report = "\n".join(lines) + "\n"
    if bad:
        print(report)
        raise SystemExit(f"gputok's result differs from its oracle's: {bad[0]}")
    if "gputok-cuda" in failed:  # (asked for by name: a GPU run that did not happen fails)
        print(report)
        raise SystemExit(f"{LABELS['gputok-cuda']} failed: {failed['gputok-cuda']}")
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", default="prose",
                   help="corpus kind from tests/testdata.py, or mixed (prose + code + "
                        "multilingual, a third each)")
    p.add_argument("--mb", type=float, default=32.0)
    p.add_argument("--vocab-size", type=int, default=32768)
    p.add_argument("--pattern", default="gpt2", help="gpt2 (default: gigatoken's only one), "
                   "cl100k, o200k")
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--backend", default="auto")
    p.add_argument("--repeat", type=int, default=3, help="runs per trainer; the best is reported")
    p.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    p.add_argument("--out", help="also write the report (markdown) here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    report = run(args)
    print(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
