"""The wheel: builds, installs in a fresh venv, carries the vocabularies and kernel sources,
and encodes a string there (offline: no network is needed at runtime)."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.full  # build + hatchling: the test-full extra
def test_wheel_installs_and_encodes(tmp_path):
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(dist), str(ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("gputok-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("gputok/data/cl100k_base.tiktoken.gz", "gputok/data/SHA256SUMS",
                   "gputok/_kernels/README.md", "gputok/_kernels/encode_common.cuh",
                   "gputok/_shaders/README.md"):
        assert needed in names
    assert not [n for n in names if n.startswith("cpu_ref/")]  # the spec is not shipped
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--force-reinstall", str(wheel)], check=True, capture_output=True)
    code = ("import sys; sys.modules['cpu_ref'] = None; "  # importing the spec would fail
            "import gputok, gputok._resources as r; "
            "assert gputok.get_encoding('cl100k_base').encode('hello world') == [15339, 1917]; "
            "assert (r.source_dir('kernels') / 'README.md').exists(); "
            "assert gputok.get_encoding('o200k_base').encode_batch_arrays(['a b', 'x'])[1]"
            ".tolist() == [0, 2, 3]; "
            "print(gputok.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not the checkout
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True,
                         cwd=tmp_path, env=env).stdout
    assert str(env_dir) in out  # the installed copy, not the checkout
