"""Import hygiene: ``import gputok`` is cheap and never pulls in GPU stacks."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_does_not_load_gpu_modules():
    code = ("import sys, gputok; enc = gputok.get_encoding('r50k_base'); enc.encode('hi'); "
            "bad = [m for m in ('cupy', 'mlx', 'tiktoken', 'tokenizers', 'pyarrow', 'tqdm') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_api():
    import gputok

    for name in ("Encoding", "StreamDecoder", "get_encoding", "list_encoding_names", "load"):
        assert name in gputok.__all__ and hasattr(gputok, name)
