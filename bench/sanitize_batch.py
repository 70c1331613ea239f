"""A small batch through every CUDA encode kernel, for ``compute-sanitizer`` (``gpu_check.sh
sanitize``: memcheck, then racecheck): prose, code, CJK and emoji, a run of one character and a
CJK run long enough for the block-wide merge (``encode_merge_huge``: shared memory, barriers),
on cl100k_base and o200k_base; the ids are checked against the native CPU device's.

    compute-sanitizer --tool racecheck python3 bench/sanitize_batch.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gputok  # noqa: E402
from gputok.backends import cuda, native  # noqa: E402

DOCS = ["hello world  \n\n  def f(x):\n\treturn x**2  # \U0001F600\U0001F44D\U0001F3FD",
        "\u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0663\u00b2\u00bd ok",
        "a" * 20000, "\u5929\u5730\u7384\u9ec4\u5b87\u5b99\u6d2a\u8352" * 750,
        " " * 3000 + "x", ""] * 2


def main() -> int:
    gpu, host = cuda.create(), native.create(threads=2)
    for name in ("cl100k_base", "o200k_base"):
        enc = gputok.get_encoding(name)
        ids, off = enc.encode_batch_arrays(DOCS, disallowed_special=(), backend=gpu)
        want, want_off = enc.encode_batch_arrays(DOCS, disallowed_special=(), backend=host)
        if ids.tolist() != want.tolist() or off.tolist() != want_off.tolist():
            print(f"{name}: the ids differ from the native device's")
            return 1
    print("ids equal the native device's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
