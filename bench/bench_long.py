"""Long single pieces: time per byte vs piece length (10 KB .. 1 MB), gputok vs tiktoken.

tiktoken's merge loop is quadratic in the piece length; gputok's long-piece path is
O(n log n), so its time per byte should stay roughly flat. tiktoken sizes that would exceed
--budget seconds (extrapolated quadratically) are skipped and shown as such.

    python bench/bench_long.py
"""

from __future__ import annotations

import argparse
import base64
import random
import time

import _common

import gputok  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--encoding", default="cl100k_base")
    p.add_argument("--sizes", nargs="+", type=int, default=[10_000, 30_000, 100_000, 300_000,
                                                             1_000_000])
    p.add_argument("--budget", type=float, default=30.0, help="max seconds per tiktoken run")
    args = p.parse_args()
    enc = gputok.get_encoding(args.encoding)
    tk = _common.tiktoken_for(args.encoding)
    enc.model.merge_table  # build outside the timings
    rng = random.Random(0)
    print(f"machine: {_common.machine()}\nencoding: {args.encoding}")
    print(f"{'input':<12}{'bytes':>10}{'gputok ns/B':>14}{'tiktoken ns/B':>15}{'ratio':>8}")
    for label, make in [("repeat 'a'", lambda n: "a" * n),
                        ("base64", lambda n: base64.b64encode(rng.randbytes(n))[:n].decode())]:
        last_tk = None
        for n in args.sizes:
            text = make(n)
            t0 = time.perf_counter()
            ours = enc.encode_ordinary(text)
            t_ours = time.perf_counter() - t0
            if last_tk is not None and last_tk[1] * (n / last_tk[0]) ** 2 > args.budget:
                tk_s, ratio = "skipped", ""
            else:
                t0 = time.perf_counter()
                theirs = tk.encode_ordinary(text)
                t_tk = time.perf_counter() - t0
                assert theirs == ours, f"ids differ for {label} x {n}"
                last_tk = (n, t_tk)
                tk_s, ratio = f"{t_tk / n * 1e9:15.0f}", f"{t_tk / t_ours:7.1f}x"
            print(f"{label:<12}{n:>10}{t_ours / n * 1e9:14.0f}{tk_s:>15}{ratio:>8}")


if __name__ == "__main__":
    main()
