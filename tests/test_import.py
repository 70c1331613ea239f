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


def test_import_is_light():
    """``import gputok`` imports none of its dependencies (its names are imported on first
    use): a process that only imports it pays ~1 ms, not numpy, regex and the pinned Unicode
    data. The names still resolve, and ``from gputok import ...`` works."""
    code = ("import sys; before = set(sys.modules); import gputok\n"
            "heavy = [m for m in ('numpy', 'regex', 'hashlib', 'gputok.encoding', "
            "'gputok.unicode', 'gputok.backends') if m in sys.modules and m not in before]\n"
            "assert not heavy, heavy\n"
            "from gputok import Encoding, load, train_bpe\n"
            "assert gputok.Encoding is Encoding and gputok.export.save_hf_json\n"
            "assert gputok.train.last_stats is None or gputok.train.last_stats\n"
            "try:\n    gputok.no_such_name\nexcept AttributeError as e:\n"
            "    assert 'no_such_name' in str(e)\nelse:\n    raise SystemExit('no error')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_product_never_imports_the_spec():
    """cpu_ref is the specification, not a dependency: no module of gputok imports it (an
    allow-list, empty today), and encoding with it unimportable works on every path."""
    import ast

    allowed: set = set()
    found = set()
    for path in (ROOT / "gputok").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "cpu_ref" or n.startswith("cpu_ref.") for n in names):
                found.add(str(path.relative_to(ROOT)))
    assert found <= allowed, found
    code = ("import sys; sys.modules['cpu_ref'] = None\n"
            "import gputok\n"
            "for name in gputok.list_encoding_names():\n"
            "    enc = gputok.get_encoding(name)\n"
            "    ids = enc.encode('hi <|endoftext|> ' + 'x' * 300, allowed_special='all')\n"
            "    assert enc.decode(ids).startswith('hi')\n"
            "    enc.encode_batch_arrays(['a', 'b c'] * 200, backend='numpy')\n"
            "enc = gputok.train_bpe(['low lower lowest'] * 20, vocab_size=260, pattern='gpt2')\n"
            "assert enc.encode('lowest')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_api():
    import gputok

    for name in ("Encoding", "StreamDecoder", "get_encoding", "list_encoding_names", "load"):
        assert name in gputok.__all__ and hasattr(gputok, name)


def test_every_module_compiles_without_warnings():
    """An invalid escape in a docstring (``"\\p{N}"``) is a SyntaxWarning on every import from
    source under Python 3.12+ (an error in a later Python): every module of the product, the
    spec, the tests and the benchmarks is compiled with warnings as errors."""
    import warnings

    bad = []
    for top in ("gputok", "cpu_ref", "tests", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
                except (SyntaxError, Warning) as e:
                    bad.append(f"{path.relative_to(ROOT)}: {e}")
    assert not bad, "\n".join(bad)
