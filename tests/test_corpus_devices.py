"""``gputok encode --devices``: one pipeline per GPU in the job's process (``pool.DeviceThreads``),
on emulated CUDA GPUs (CuPy's stand-in, ``fakecupy.py``: each GPU its own context, the kernels
on the emulator). The shards equal one encoder's, every GPU sizes, allocates and frees its
memory in its own context from its own pool, a list of GPUs uses those alone, and a job killed
at random moments and resumed writes the same shards byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import full_tier
from fakecupy import fake_cupy
from gputok.corpus import encode_corpus, read_manifest, read_shards

ROOT = Path(__file__).resolve().parent.parent
KILLS = 4 if full_tier() else 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpus")
    rng = random.Random(3)
    words = ["alpha", "beta", "délta", "ε", "東京", "0123", "x" * 12, "\n", "  ", "a" * 40]

    def doc(i):
        return f"#{i} " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))

    a, b = d / "a.jsonl", d / "b.jsonl"
    a.write_text("".join(json.dumps({"text": doc(i)}) + "\n" for i in range(300)))
    b.write_text("".join(json.dumps({"text": doc(i)}) + "\n" for i in range(300, 500)))
    return [str(a), str(b)]


def _docs(out):
    docs = []
    for ids, off in read_shards(out):
        docs += [tuple(ids[off[i]:off[i + 1]].tolist()) for i in range(len(off) - 1)]
    return docs


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "out"
    encode_corpus(corpus, str(out), encoding="r50k_base", backend="numpy", batch_bytes=3000,
                  shard_tokens=2000, workers=1)
    return _docs(out)


@pytest.fixture
def gpus(monkeypatch):
    """Install ``n`` emulated GPUs in this process; returns their log of memory calls."""
    from gputok import backends
    from gputok.backends import cuda
    from gputok.backends.cuda import build as cuda_build

    log: list = []

    def make(n: int):
        monkeypatch.setitem(sys.modules, "cupy", fake_cupy([], devices=n, log=log))
        monkeypatch.setattr(cuda, "_no_driver", lambda: False)
        monkeypatch.setattr(backends, "_instances", {})  # (backends made here, for these GPUs)
        return log

    cuda_build._cupy_module.cache_clear()
    yield make
    cuda_build._cupy_module.cache_clear()


def _small():
    from gputok.backends import get_backend

    for name in list(get_backend.__globals__["_instances"]):
        if name.startswith("cuda"):
            be = get_backend(name)
            be.dev.block, be.dev.max_blocks = 64, 2  # (emulated grids kept small)


def test_one_pipeline_per_gpu_writes_one_encoders_shards(corpus, reference, tmp_path, gpus):
    log = gpus(3)
    from gputok.backends import get_backend

    for i in range(3):  # made first, so the emulated grids are small
        get_backend(f"cuda:{i}")
    _small()
    out = tmp_path / "out"
    s = encode_corpus(corpus, str(out), encoding="r50k_base", backend="cuda", devices="all",
                      batch_bytes=3000, shard_tokens=2000)
    assert s.workers == 3 and s.backends == ("cuda:0", "cuda:1", "cuda:2")
    assert _docs(out) == reference
    # every GPU allocated from its own pool, in its own context, and sized itself there
    pools = {}
    for kind, dev, *rest in (e for e in log if e[0] == "alloc"):
        pools.setdefault(dev, set()).add(rest[0])
    assert set(pools) == {0, 1, 2}
    for i in range(3):
        be = get_backend(f"cuda:{i}")
        assert pools[i] == {be.dev._pool.malloc}
    assert {e[1] for e in log if e[0] == "memGetInfo"} == {0, 1, 2}
    # held for the job, given back at its end
    assert {e[1] for e in log if e[0] == "pool.free_all_blocks"} == {0, 1, 2}


def test_a_list_of_gpus_uses_those_alone(corpus, reference, tmp_path, gpus):
    log = gpus(3)
    from gputok.backends import get_backend

    for i in (0, 2):
        get_backend(f"cuda:{i}")
    _small()
    out = tmp_path / "out"
    s = encode_corpus(corpus, str(out), encoding="r50k_base", backend="cuda", devices="0,2",
                      batch_bytes=3000, shard_tokens=2000)
    assert s.backends == ("cuda:0", "cuda:2") and _docs(out) == reference
    assert {e[1] for e in log if e[0] == "alloc"} == {0, 2}


def _cmd(inputs, out, *extra):
    return [sys.executable, str(ROOT / "tests" / "emulated_gpus.py"), "encode", "-e",
            "r50k_base", *inputs, "-o", str(out), "-q", "--backend", "cuda", "--devices", "all",
            "--batch-bytes", "3000", "--shard-tokens", "2000", *extra]


def test_a_multi_gpu_job_killed_and_resumed_writes_the_same_shards(corpus, reference,
                                                                     tmp_path):
    """SIGKILL at random moments of a three-GPU job, ``--resume`` until it completes: every
    document once, in order, the same ids as one encoder's (and no temporary file left)."""
    out = tmp_path / "out"
    env = dict(os.environ, GPUTOK_EMULATED_GPUS="3", PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    subprocess.run(_cmd(corpus, tmp_path / "timed"), check=True, env=env, cwd=ROOT,
                   capture_output=True)
    whole = time.monotonic() - t0
    assert _docs(tmp_path / "timed") == reference
    rng = random.Random(7)
    kills = mid = 0
    for _ in range(KILLS * 5):
        if kills >= KILLS:
            break
        p = subprocess.Popen(_cmd(corpus, out, "--resume"), env=env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 0.9) * whole)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        m = read_manifest(out) if (out / "manifest.json").exists() else None
        if m is not None and 0 < m["docs"] < 500:
            mid += 1
        if m is not None and m["complete"]:
            subprocess.run(["rm", "-rf", str(out)], check=True)
    assert kills >= KILLS and mid >= 1, (kills, mid)
    r = subprocess.run(_cmd(corpus, out, "--resume"), env=env, cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert read_manifest(out)["complete"] and _docs(out) == reference
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
