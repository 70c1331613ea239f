"""SentencePiece BPE: gputok against sentencepiece, encode (one text, a batch) and decode.

Models (pinned test data): Mistral v1, v3, v7 (``mistral-common``'s ``.model`` files: byte
fallback, control pieces, user-defined pieces in v3/v7) and botchan (nmt_nfkc charsmap, no
byte fallback). Both libraries run in this process on the same texts:

    single   one text at a time, for texts of --sizes characters cut from the corpora:
             ``enc.encode_ordinary(text)`` (what ``SentencePieceProcessor.encode(text)``
             computes: no special-token search) against ``sp.encode(text)``
    batch    the whole corpus: ``enc.encode_batch(docs, disallowed_special=())`` (lists, as
             sentencepiece returns them) and ``encode_batch_arrays`` against
             ``sp.encode(docs, num_threads=<cores>)`` and one thread
    decode   ``enc.decode(ids)`` per text against ``sp.decode(ids)``; ``decode_batch`` against
             ``sp.decode(list of id lists)``

Every contender's ids (and decoded text) are checked identical first (a difference stops the
run). Timing is interleaved: each round runs every contender of a case once, in an order that
alternates round to round, and the median of the rounds is reported with the ratio
sentencepiece time / gputok time (above 1: gputok is faster). gputok runs on the default
backend (the native CPU device when a compiler exists: its SentencePiece kernels).

    python bench/bench_spm.py --models mistral_v7 botchan_bpe --mb 1 --rounds 7
    python bench/bench_spm.py --record bench/results/spm.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import _common

import gputok  # noqa: E402  (path set up by _common)

MODELS = ("mistral_v1", "mistral_v3", "mistral_v7", "botchan_bpe")


def _interleaved(contenders: dict, rounds: int, inner: int = 1) -> dict:
    """{label: median seconds of one call} over ``rounds`` rounds; in each round every
    contender runs ``inner`` times back to back, the order reversed every other round."""
    times: dict = {k: [] for k in contenders}
    order = list(contenders)
    for r in range(rounds):
        for label in (order if r % 2 == 0 else order[::-1]):
            fn = contenders[label]
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[label].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def _texts(docs: list, size: int, count: int) -> list:
    """``count`` texts of ``size`` characters cut from the corpus (documents joined)."""
    joined = "\n".join(docs)
    step = max(1, (len(joined) - size) // max(count, 1))
    return [joined[k * step:k * step + size] for k in range(count)]


def _report(rows: list, case: str, label: str, t: dict, ours: str, peer: str, unit: float,
            what: str) -> None:
    ratio = t[peer] / t[ours]
    print(f"  {case:<28} {what:>10} {unit / t[ours]:10.2f} {unit / t[peer]:10.2f} "
          f"{ratio:8.2f}x")
    rows.append({"case": case, "what": what, "gputok_s": t[ours], "sentencepiece_s": t[peer],
                 "ratio": round(ratio, 3), "label": label})


def run(args) -> dict:
    import families as F

    threads = os.cpu_count() or 1
    tmp = Path(tempfile.mkdtemp())
    docs = [d for kind in args.kinds for d in _common.corpus(kind, args.mb)]
    mb = sum(len(d.encode()) for d in docs) / 1e6
    be = gputok.backends.get_backend("auto")
    out = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "backend": be.name, "models": {}}
    print(f"corpus: {len(docs)} documents, {mb:.2f} MB ({', '.join(args.kinds)}); gputok "
          f"backend: {be.name}")
    for name in args.models:
        data = F.model_source(name)
        path = tmp / f"{name}.model"
        path.write_bytes(data)
        enc, sp = gputok.load(path), F.spm_oracle(data)
        warnings.simplefilter("ignore")  # (a charsmap model's host normaliser: counted)
        print(f"\n== {name}  ({enc.model.segmenter.name}; plan: "
              f"{'; '.join(f'{k} {v}' for k, v in be.plan(enc.model).items())})")
        print(f"  {'case':<28} {'':>10} {'gputok':>10} {'sp':>10} {'sp/gputok':>9}")
        rows: list = []
        # ---- exactness first
        want = sp.encode(docs, num_threads=threads)
        got = enc.encode_batch(docs, disallowed_special=())
        ids, off = enc.encode_batch_arrays(docs, disallowed_special=())
        bad = sum(a != b for a, b in zip(got, want))
        bad += sum(ids[off[i]:off[i + 1]].tolist() != want[i] for i in range(len(docs)))
        texts = {n: _texts(docs, n, args.texts) for n in args.sizes}
        for n, ts in texts.items():
            bad += sum(enc.encode_ordinary(t) != sp.encode(t) for t in ts)
        bad += sum(enc.decode(w) != sp.decode(w) for w in want)
        if bad:
            raise SystemExit(f"{name}: {bad} results differ from sentencepiece; not timing")
        print(f"  ids identical on {len(docs)} documents and "
              f"{sum(len(v) for v in texts.values())} texts, decoded text identical")
        # ---- single texts
        for n, ts in texts.items():
            t = _interleaved({"gputok": lambda ts=ts: [enc.encode_ordinary(x) for x in ts],
                              "sp": lambda ts=ts: [sp.encode(x) for x in ts]}, args.rounds)
            _report(rows, f"encode one text, {n} chars", "single", t, "gputok", "sp",
                    len(ts) / 1e3, "k texts/s")
        # ---- batch
        t = _interleaved({
            "gputok lists": lambda: enc.encode_batch(docs, disallowed_special=()),
            "gputok arrays": lambda: enc.encode_batch_arrays(docs, disallowed_special=()),
            "sp": lambda: sp.encode(docs, num_threads=threads),
            "sp 1 thread": lambda: sp.encode(docs, num_threads=1)}, args.rounds)
        _report(rows, f"encode batch ({threads} threads)", "batch", t, "gputok lists", "sp",
                mb, "MB/s")
        _report(rows, "encode batch, arrays", "batch", t, "gputok arrays", "sp", mb, "MB/s")
        _report(rows, "encode batch vs sp 1 thread", "batch", t, "gputok lists",
                "sp 1 thread", mb, "MB/s")
        # ---- decode
        for n, ts in texts.items():
            idl = [sp.encode(x) for x in ts]
            t = _interleaved({"gputok": lambda idl=idl: [enc.decode(w) for w in idl],
                              "sp": lambda idl=idl: [sp.decode(w) for w in idl]}, args.rounds)
            _report(rows, f"decode one text, {n} chars", "decode", t, "gputok", "sp",
                    len(idl) / 1e3, "k texts/s")
        t = _interleaved({"gputok": lambda: enc.decode_batch(want),
                          "sp": lambda: sp.decode(want)}, args.rounds)
        _report(rows, "decode batch", "decode", t, "gputok", "sp", mb, "MB/s")
        out["models"][name] = rows
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"])
    p.add_argument("--mb", type=float, default=1.0, help="MB per corpus kind (batch case)")
    p.add_argument("--sizes", nargs="+", type=int, default=[64, 512, 4300],
                   help="characters per text (single-text cases)")
    p.add_argument("--texts", type=int, default=50, help="texts per size")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/spm.md")
    args = p.parse_args()
    _common.compile_bytecode()
    with _common.recording(args.record, "bench_spm.py", "SentencePiece BPE encode (one text, a "
                           "batch) and decode against sentencepiece", ["sentencepiece"]) as rec:
        print(f"machine: {_common.machine()}")
        res = rec["data"] = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
