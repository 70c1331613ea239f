"""Encode throughput: gputok backends vs tiktoken (1 thread, all threads) and HF tokenizers.

All peers run in the same process on the same corpus, after checking that every peer returns
identical ids; then each is timed (best of --repeat) and the ratios are printed.

gputok is timed three ways: "cold cache" (one batch, empty piece cache: every distinct piece is
merged), "1 MB batches" (what `gputok encode` does on a corpus: consecutive batches sharing the
cache, starting empty) and "warm cache" (the steady state of a long job: pieces already known).

    python bench/bench_encode.py --encoding cl100k_base --kinds prose code --mb 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import _common

import gputok  # noqa: E402  (path set up by _common)
from gputok.export import save_hf_json  # noqa: E402


def run(args) -> dict:
    enc = gputok.get_encoding(args.encoding)
    tk = _common.tiktoken_for(args.encoding)
    from tokenizers import Tokenizer

    tmp = Path(tempfile.mkdtemp()) / "tokenizer.json"
    save_hf_json(enc, tmp)
    hf = Tokenizer.from_file(str(tmp))
    threads = os.cpu_count() or 1
    results = {"encoding": args.encoding, "machine": _common.machine(), "kinds": {},
               "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}
    for kind in args.kinds:
        docs = _common.corpus(kind, args.mb)
        nbytes = sum(len(d.encode()) for d in docs)
        mb = nbytes / 1e6

        def ours_cold():
            enc.model.piece_cache.clear()
            return enc.encode_batch_arrays(docs, disallowed_special=(), backend=args.backend)

        def ours_warm():
            return enc.encode_batch_arrays(docs, disallowed_special=(), backend=args.backend)

        # what `gputok encode` does: consecutive ~1 MB batches, the piece cache starting empty
        batches, cur, size = [], [], 0
        for d in docs:
            cur.append(d)
            size += len(d)
            if size >= 1 << 20:
                batches.append(cur)
                cur, size = [], 0
        batches += [cur] if cur else []

        def ours_stream():
            enc.model.piece_cache.clear()
            for b in batches:
                enc.encode_batch_arrays(b, disallowed_special=(), backend=args.backend)

        peers = {
            "tiktoken 1 thread": lambda: [tk.encode_ordinary(d) for d in docs],
            f"tiktoken batch {threads} threads": lambda: tk.encode_ordinary_batch(
                docs, num_threads=threads),
            "HF tokenizers batch": lambda: hf.encode_batch_fast(docs, add_special_tokens=False)
            if hasattr(hf, "encode_batch_fast") else hf.encode_batch(docs, add_special_tokens=False),
        }
        # correctness first: identical ids from everyone
        ids, off = ours_cold()
        ours = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
        expect = peers["tiktoken 1 thread"]()
        hf_ids = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        bad_tk = sum(a != b for a, b in zip(ours, expect))
        bad_hf = sum(a != b for a, b in zip(hf_ids, expect))
        if bad_tk or bad_hf:
            raise SystemExit(f"{kind}: ids differ (gputok vs tiktoken: {bad_tk} docs, "
                             f"HF vs tiktoken: {bad_hf} docs); not timing")
        row = {"docs": len(docs), "MB": round(mb, 2), "MB/s": {}}
        timings = {f"gputok {args.backend} (cold cache)": ours_cold,
                   f"gputok {args.backend} (1 MB batches)": ours_stream,
                   f"gputok {args.backend} (warm cache)": ours_warm, **peers}
        for label, fn in timings.items():
            fn()  # warm-up
            row["MB/s"][label] = mb / _common.best_of(fn, args.repeat)
        results["kinds"][kind] = row
        print(f"\n{kind}: {len(docs)} docs, {mb:.2f} MB, ids identical across all peers")
        cold = row["MB/s"][f"gputok {args.backend} (cold cache)"]
        warm = row["MB/s"][f"gputok {args.backend} (warm cache)"]
        print(f"  {'':<34} {'MB/s':>8}   {'cold/this':>9}  {'warm/this':>9}")
        for label, v in row["MB/s"].items():
            print(f"  {label:<34} {v:8.2f}   {cold / v:8.2f}x  {warm / v:8.2f}x")
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--kinds", nargs="+", default=["prose", "code"],
                   help="corpus kinds from tests/testdata.py, or 'sample' (bundled Austen)")
    p.add_argument("--mb", type=float, default=4.0, help="MB per corpus kind")
    p.add_argument("--backend", default="numpy")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    print(f"machine: {_common.machine()}")
    res = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
