"""gputok/_arrays.py: ``unique_sorted`` is ``np.unique`` without importing ``numpy.ma``."""

import subprocess
import sys

import numpy as np

from gputok._arrays import unique_sorted


def test_unique_sorted_matches_np_unique():
    rng = np.random.default_rng(5)
    for dt in (np.int64, np.uint32, np.uint16, np.int32):
        for n in (0, 1, 2, 3, 17, 1000):
            a = rng.integers(0, 50, n).astype(dt)
            got = unique_sorted(a)
            want = np.unique(a)
            assert got.dtype == want.dtype and got.tolist() == want.tolist()
    assert unique_sorted([[3, 1], [3, 2]]).tolist() == [1, 2, 3]
    assert unique_sorted([]).tolist() == []


def test_a_fresh_process_short_encode_imports_no_numpy_ma():
    """numpy 2's ``np.unique`` imports ``numpy.ma`` on first use (6-15 ms); building the ASCII
    pattern of a first short encode (``from_code_points``) went through it."""
    code = ("import sys, gputok\n"
            "e = gputok.get_encoding('cl100k_base')\n"
            "assert e.encode_ordinary('hello world, aaaa 123') == "
            "e.encode_ordinary('hello world, aaaa 123')\n"
            "e.encode_ordinary('a' * 300000)\n"
            "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
