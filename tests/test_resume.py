"""Long jobs lose nothing: real ``gputok encode`` processes killed at random moments, resumed,
and the shards compared with one uninterrupted run; disk full; Ctrl-C; corrupt shards."""

from __future__ import annotations

import gzip
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import sigint_as_default
from gputok.corpus import read_manifest, read_shards
from gputok.corpus.checksum import shard_algorithm

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("GPUTOK_KILL_ROUNDS", "10"))


def _docs(out):
    docs = []
    for ids, off in read_shards(out):
        docs += [tuple(ids[off[i]:off[i + 1]].tolist()) for i in range(len(off) - 1)]
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill")
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "délta", "ε", "東京", "0123", "x" * 12, "\n", "  "]

    def doc(i):
        return f"#{i} " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 120)))

    a = d / "a.jsonl"
    a.write_text("".join(json.dumps({"text": doc(i)}) + "\n" for i in range(2500)))
    b = d / "b.jsonl.gz"
    b.write_bytes(gzip.compress("".join(json.dumps({"text": doc(i)}) + "\n"
                                        for i in range(2500, 4000)).encode()))
    c = d / "c.txt"
    c.write_text(doc(4000) * 50)
    return [a, b, c]


def _cmd(inputs, out, fmt, *extra, workers=1):
    return [sys.executable, "-m", "gputok", "encode", "-e", "r50k_base", *map(str, inputs),
            "-o", str(out), "-q", "--format", fmt, "--shard-tokens", "3000", "--batch-bytes",
            "4000", "--workers", str(workers), "--backend", "numpy", *extra]


class _Lazy(dict):
    """An uninterrupted run's result per key, made on first use (a test run that needs only
    one format pays for one run)."""

    def __init__(self, make):
        super().__init__()
        self.make, self.dirs = make, {}

    def __missing__(self, key):
        self[key], self.dirs[key] = self.make(key)
        return self[key]


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """Each format's documents from one uninterrupted run (its output directory in ``.dirs``,
    not to be changed: copy it)."""
    def run(fmt):
        out = tmp_path_factory.mktemp("ref") / fmt
        subprocess.run(_cmd(corpus, out, fmt), check=True, cwd=ROOT, capture_output=True)
        return _docs(out), out
    return _Lazy(run)


@pytest.fixture(scope="module")
def job_seconds(corpus, tmp_path_factory):
    """How long one uninterrupted job takes here, per worker count (a loaded machine is slower:
    the kills are timed as fractions of this, not in fixed seconds)."""
    seen = {}

    def measure(fmt, workers):
        if (fmt, workers) not in seen:
            out = tmp_path_factory.mktemp("timed") / fmt
            t0 = time.monotonic()
            subprocess.run(_cmd(corpus, out, fmt, workers=workers), check=True, cwd=ROOT,
                           capture_output=True)
            seen[fmt, workers] = time.monotonic() - t0
        return seen[fmt, workers]
    return measure


@pytest.mark.parametrize("fmt,rounds,workers", [("npy", ROUNDS, 1),
                                                ("nanogpt", max(2, ROUNDS // 2), 1),
                                                ("npy", max(2, ROUNDS // 3), 2)])
def test_sigkill_at_random_moments_then_resume(corpus, reference, tmp_path, job_seconds, fmt,
                                               rounds, workers):
    out = tmp_path / "out"
    rng = random.Random(1234 + rounds)
    whole = job_seconds(fmt, workers)  # start-up included
    kills = mid_job = 0
    for r in range(rounds * 5):  # a run may end before its kill: more tries than kills
        if kills >= rounds:
            break
        p = subprocess.Popen(_cmd(corpus, out, fmt, "--resume", workers=workers), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.2, 1.0) * whole)  # start-up is ~1/3 of the whole job
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        if (out / "manifest.json").exists() and 0 < read_manifest(out)["docs"] < 4001:
            mid_job += 1
        if (out / "manifest.json").exists() and read_manifest(out)["complete"]:
            # finished before its kill: start over, the point is to interrupt it
            subprocess.run(["rm", "-rf", str(out)], check=True)
    assert kills >= rounds, f"only {kills} of the runs were still working when killed"
    assert mid_job >= rounds // 2, f"only {mid_job} kills landed after some shards were written"
    if workers > 1:  # pool workers end with their parent (gputok.corpus.lifetime)
        for _ in range(50):
            left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
            if not left.stdout.strip():
                break
            time.sleep(0.1)
        assert not left.stdout.strip(), "orphaned encoder workers: " + left.stdout
    r = subprocess.run(_cmd(corpus, out, fmt, "--resume", workers=workers), cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = read_manifest(out)
    assert m["complete"] and m["docs"] == 4001
    assert _docs(out) == reference[fmt]  # every document exactly once, in order
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


def test_stray_files_and_corrupt_shard_are_handled_on_resume(corpus, reference, tmp_path):
    import shutil

    out = tmp_path / "out"
    reference["npy"]  # noqa: B018  (one uninterrupted run, copied: the job's finished output)
    shutil.copytree(reference.dirs["npy"], out)
    m = read_manifest(out)
    n = len(m["shards"])
    # a kill between rename and manifest: shards on disk the manifest does not list yet
    m["shards"], m["complete"] = m["shards"][:n // 2], False
    (out / "manifest.json").write_text(json.dumps(m))
    (out / ".shard_00099.ids.npy.tmp").write_bytes(b"partial")
    # and bit rot in a listed shard
    bad = out / m["shards"][2]["files"][0]
    data = bytearray(bad.read_bytes())
    data[-1] ^= 1
    bad.write_bytes(bytes(data))
    r = subprocess.run(_cmd(corpus, out, "npy", "--resume"), cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert f"{bad} is corrupt; it and the {n // 2 - 3} shard(s) after it are encoded again" in r.stderr
    assert _docs(out) == reference["npy"]
    assert not (out / ".shard_00099.ids.npy.tmp").exists()


@pytest.mark.parametrize("how,workers", [("SIGTERM", 1), ("Ctrl-C", 2)])
def test_interrupt_keeps_the_encoded_documents(corpus, reference, tmp_path, how, workers):
    out = tmp_path / "out"
    inputs = corpus * 32  # ~8 s of work, all in one 20M-token shard unless interrupted
    p = subprocess.Popen(_cmd(inputs, out, "npy", "--shard-tokens", "20M", workers=workers),
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=sigint_as_default)
    for _ in range(200):  # the manifest is written before the first batch
        time.sleep(0.05)
        if (out / "manifest.json").exists():
            break
    time.sleep(2.5)
    if how == "SIGTERM":
        p.send_signal(signal.SIGTERM)
    else:  # a terminal's Ctrl-C reaches the whole process group, pool workers included
        os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate()
    assert p.returncode == 130, err
    m = read_manifest(out)
    assert not m["complete"] and len(m["shards"]) <= 1
    if m["docs"]:  # the usual case: the batches encoded so far became the one shard
        assert err.startswith(f"gputok: interrupted; 1 finished shard(s) ({m['docs']} docs")
        assert "rerun with --resume" in err
    else:  # a machine so loaded that no batch was done in 2.5 s
        assert err.strip() == f"gputok: interrupted; no shard was finished, so {out} holds nothing yet"
    r = subprocess.run(_cmd(inputs, out, "npy", "--shard-tokens", "20M", "--resume",
                            workers=workers), cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"resumed after {m['docs']} docs" in r.stdout if m["docs"] else "resumed" not in r.stdout
    assert _docs(out) == reference["npy"] * 32


def _limit_file_size(limit):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def test_disk_full_names_the_file_and_what_is_kept(corpus, tmp_path):
    big = tmp_path / "big.txt"  # one ~30k-token document: a shard of its own, over the limit
    big.write_text("the quick brown fox jumps over the lazy dog. " * 3000)
    inputs = corpus + [big]
    ref = tmp_path / "ref"
    subprocess.run(_cmd(inputs, ref, "npy"), check=True, cwd=ROOT, capture_output=True)
    out = tmp_path / "out"
    r = subprocess.run(_cmd(inputs, out, "npy", "--shard-tokens", "20000"), cwd=ROOT,
                       capture_output=True, text=True, preexec_fn=_limit_file_size(50_000))
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    m = read_manifest(out)
    kept = len(m["shards"])
    assert kept == 29 and m["docs"] == 4001  # every shard before the big document
    assert err[0] == (f"gputok: error: cannot write {out}/.shard_{kept:05d}.ids.npy.tmp: the file "
                      "size limit is reached; its temporary files were removed. 29 finished "
                      f"shard(s) (4001 docs, {m['tokens']} tokens, input up to {corpus[2]}) are "
                      f"kept in {out}; rerun with --resume to continue")
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
    r = subprocess.run(_cmd(inputs, out, "npy", "--shard-tokens", "20000", "--resume"), cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _docs(out) == _docs(ref)


def _job_processes(out) -> list:
    """Processes whose command line names ``out``: the job and its pool workers."""
    r = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    return r.stdout.split()


KILL_INPUTS = 2  # copies of the corpus: 8002 documents
KILL_EXTRA = ("--batch-bytes", "128k")  # larger than a pipe holds: sends are in flight


@pytest.fixture(scope="module")
def kill_reference(corpus, tmp_path_factory):
    """The manifest of one uninterrupted run of the kill test's job."""
    out = tmp_path_factory.mktemp("kill-ref") / "out"
    subprocess.run(_cmd(corpus * KILL_INPUTS, out, "npy", *KILL_EXTRA, workers=2), check=True,
                   cwd=ROOT, capture_output=True)
    return read_manifest(out)


@pytest.mark.parametrize("kill_at", ["start", "first shard", "half"])
def test_sigkill_of_the_main_process_alone_ends_its_workers_and_frees_the_lock(
        corpus, reference, kill_reference, tmp_path, kill_at):
    """What an out-of-memory kill does: SIGKILL of the job's main process only, never of its
    workers. The workers exit on their own at once (``lifetime.die_with_parent``: they may be
    blocked in a pipe read of a half-sent batch), the output's lock is not theirs to keep, and
    ``--resume`` right after finishes byte for byte as one uninterrupted run."""
    inputs = corpus * KILL_INPUTS
    out, extra = tmp_path / "out", KILL_EXTRA
    p = subprocess.Popen(_cmd(inputs, out, "npy", *extra, workers=2), cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    want = {"start": 0, "first shard": 1, "half": 4001}[kill_at]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        try:
            m = read_manifest(out)
        except (OSError, ValueError):
            m = None
        if m is not None and (m["docs"] >= want if want > 1 else len(m["shards"]) >= want):
            break
        time.sleep(0.01)
    assert p.poll() is None, "the job ended before its kill point: " + p.stderr.read().decode()
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stderr.close()
    for _ in range(60):
        left = _job_processes(out)
        if not left:
            break
        time.sleep(0.05)
    for pid in left:  # not left running if this test fails
        os.kill(int(pid), signal.SIGKILL)
    assert not left, f"orphaned encoder workers after the main process died: {left}"
    r = subprocess.run(_cmd(inputs, out, "npy", *extra, "--resume", workers=2), cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "another gputok job" not in r.stderr
    got, want_m = read_manifest(out), kill_reference
    assert got["complete"] and got["docs"] == want_m["docs"] == 4001 * KILL_INPUTS
    assert [s[shard_algorithm(s)] for s in got["shards"]] == \
        [s[shard_algorithm(s)] for s in want_m["shards"]]
    assert _docs(out) == reference["npy"] * KILL_INPUTS
