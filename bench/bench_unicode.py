"""Pinned Unicode data: load time, pinned-pattern and normaliser throughput vs the unpinned peers.

Checks every result first (pinned pieces == tiktoken / HF pieces on the corpus, normalised text
== HF's), then times, best of --repeat:

* ``class_flags(family)``: first call in a fresh process (data file read + table build);
* pre-tokenizer regex on real text: ``regex`` with the unpinned pattern (the installed
  release's own tables, the cost floor), ``compile_pinned`` (installed classes + corrections)
  and ``pin_pattern``'s plain ranges, in MB/s, with the ratio to the unpinned pattern;
* ``normalize("NFC")`` / ``lowercase`` vs HF's ``normalizers.NFC()`` / ``Lowercase()`` (the
  peer here: the oracle's own normaliser).

    python bench/bench_unicode.py [--mb 1] [--repeat 3]
    python bench/bench_unicode.py --record bench/results/unicode.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import _common

import regex  # noqa: E402

from cpu_ref.patterns import CL100K_PATTERN, O200K_PATTERN  # noqa: E402
from gputok import unicode as gu  # noqa: E402


def fresh_class_flags(family: str, repeat: int) -> float:
    code = ("import time, gputok.unicode as u; t = time.perf_counter(); u.class_flags(%r); "
            "print(time.perf_counter() - t)" % family)
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True, cwd=_common.ROOT).stdout)
               for _ in range(repeat))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=1.0, help="MB of each corpus kind")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/unicode.md")
    args = p.parse_args()
    with _common.recording(args.record, "bench_unicode.py", "pinned Unicode data: load time, "
                           "pinned patterns and normalisers against the unpinned ones and HF",
                           ["tokenizers", "tiktoken"]):
        measure(args)


def measure(args) -> None:
    print(f"machine: {_common.machine()}; regex {regex.__version__}")
    for family in gu.FAMILIES:
        ms = 1000 * fresh_class_flags(family, args.repeat)
        print(f"class_flags({family!r}) first call, fresh process: {ms:.1f} ms")

    from tokenizers import normalizers

    tk = {"cl100k": _common.tiktoken_for("cl100k_base"), "o200k": _common.tiktoken_for(
        "o200k_base")}
    pats = {"cl100k": CL100K_PATTERN, "o200k": O200K_PATTERN}
    print(f"\n{'corpus':<14}{'pattern':<8}{'unpinned':>10}{'compile_pinned':>16}"
          f"{'plain ranges':>14}{'ratio':>7}   (MB/s)")
    for kind in ("prose", "code", "multilingual"):
        docs = _common.corpus(kind, args.mb)
        text = "\n".join(docs)
        nbytes = len(text.encode())
        for name, pat in pats.items():
            unpinned = regex.compile(pat)
            fast = gu.compile_pinned(pat, "tiktoken")
            plain = regex.compile(gu.pin_pattern(pat, "tiktoken"))
            for d in docs[:200]:  # tiktoken encodes piece by piece: the same pieces, same ids
                ids = [i for piece in fast.findall(d) for i in tk[name].encode_ordinary(piece)]
                assert ids == tk[name].encode_ordinary(d), (kind, name)
            assert fast.findall(text) == plain.findall(text)
            rates = [nbytes / 1e6 / _common.best_of(lambda rx=rx: rx.findall(text), args.repeat)
                     for rx in (unpinned, fast, plain)]
            print(f"{kind:<14}{name:<8}{rates[0]:>10.2f}{rates[1]:>16.2f}{rates[2]:>14.2f}"
                  f"{rates[1] / rates[0]:>7.2f}")

    print(f"\n{'corpus':<22}{'form':<10}{'gputok':>9}{'HF':>9}{'ratio':>7}   (MB/s)")
    hf = {"NFC": normalizers.NFC().normalize_str, "Lowercase": normalizers.Lowercase()
          .normalize_str}
    ours = {"NFC": lambda s: gu.normalize("NFC", s), "Lowercase": gu.lowercase}
    for kind in ("prose", "multilingual"):
        text = "\n".join(_common.corpus(kind, args.mb))
        decomposed = gu.normalize("NFD", text)
        for label, t in ((kind, text), (kind + ", as NFD", decomposed)):
            nbytes = len(t.encode())
            for form in ("NFC", "Lowercase"):
                assert ours[form](t) == hf[form](t)
                a = nbytes / 1e6 / _common.best_of(lambda: ours[form](t), args.repeat)
                b = nbytes / 1e6 / _common.best_of(lambda: hf[form](t), args.repeat)
                print(f"{label:<22}{form:<10}{a:>9.1f}{b:>9.1f}{a / b:>7.2f}")


if __name__ == "__main__":
    main()
