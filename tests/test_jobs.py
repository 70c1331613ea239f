"""The job layer: worker plans, EOT appending, a process pool giving the same bytes as one process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gputok
from gputok.corpus import append_eot, encode_corpus, plan_workers, read_shards


def test_plan_workers():
    assert plan_workers("numpy", workers=3) == ["numpy"] * 3
    assert plan_workers("numpy", workers="auto", cpu_count=8, total_bytes=100 << 20) == ["numpy"] * 3
    assert plan_workers("numpy", workers="auto", cpu_count=8, total_bytes=1000) == ["numpy"]
    assert plan_workers("numpy", workers="auto", cpu_count=2, total_bytes=None) == ["numpy"] * 2
    assert plan_workers("cuda", workers="auto", cpu_count=8) == ["cuda"]
    assert plan_workers(devices="0,1") == ["cuda:0", "cuda:1"]
    assert plan_workers(devices=[3]) == ["cuda:3"]
    for bad in ("0,0", "x", ""):
        with pytest.raises(ValueError, match="--devices"):
            plan_workers(devices=bad)
    with pytest.raises(ValueError, match="--workers must be >= 1"):
        plan_workers("numpy", workers=0)


def test_append_eot():
    ids, off = append_eot(np.array([1, 2, 3], np.uint16), np.array([0, 2, 2, 3]), 7)
    assert ids.tolist() == [1, 2, 7, 7, 3, 7] and off.tolist() == [0, 3, 4, 6]
    assert ids.dtype == np.uint16


def test_pool_of_two_processes_equals_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"row {i}: " + "lorem ipsum dolor " * (i % 17) for i in range(3000)]
    pq.write_table(pa.table({"body": texts}), tmp_path / "in.parquet", row_group_size=500)
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        s = encode_corpus([tmp_path / "in.parquet"], out, encoding="cl100k_base", field="body",
                          backend="numpy", workers=workers, batch_bytes=20000,
                          shard_tokens=7000, fmt="datatrove")
        assert s.workers == workers and s.docs == 3000
        outs.append(sorted(p.read_bytes() for p in out.glob("shard_*")))
    assert outs[0] == outs[1]
    enc = gputok.get_encoding("cl100k_base")
    docs = []
    for ids, off in read_shards(tmp_path / "w2"):
        docs += [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    assert docs == [enc.encode(t) for t in texts]


def test_special_token_in_a_worker_names_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["fine"] * 50 + ["oops <|endoftext|>"] + ["fine"] * 10
    pq.write_table(pa.table({"text": texts}), tmp_path / "in.parquet")
    with pytest.raises(ValueError, match=r"in.parquet row 50: the text contains the special token "
                                         r"'<\|endoftext\|>'"):
        encode_corpus([tmp_path / "in.parquet"], tmp_path / "o", backend="numpy", workers=2,
                      batch_bytes=64)


def test_unavailable_devices_fail_before_work(tmp_path):
    from gputok.backends import device_available

    if device_available("cuda")[0]:
        pytest.skip("a CUDA device is present: nothing to refuse")
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a"}\n')
    with pytest.raises(RuntimeError, match=r"--devices / cuda:0: the device is not available \("):
        encode_corpus([src], tmp_path / "o", devices="0,1")
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        encode_corpus([src], tmp_path / "o2", backend="tpu", workers=1)


def test_an_encoding_object_with_a_pool(tmp_path):
    enc = gputok.train_bpe(["low lower lowest newest widest"] * 20, vocab_size=270, pattern="gpt2",
                           special_tokens=["<|endoftext|>"])
    src = tmp_path / "in.jsonl"
    texts = [f"lowest {i} newer widest" for i in range(500)]
    src.write_text("".join('{"text": "%s"}\n' % t for t in texts))
    s = encode_corpus([src], tmp_path / "o", encoding=enc, backend="numpy", workers=2,
                      batch_bytes=500, append_eot=True)
    assert s.workers == 2 and s.docs == 500
    docs = []
    for ids, off in read_shards(tmp_path / "o"):
        docs += [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    assert docs == [enc.encode(t) + [enc.eot_token] for t in texts]


def test_stopping_the_pool_at_once_never_hangs_the_exit(tmp_path):
    # Ctrl-C with a batch still in a worker's pipe: the queue's feeder thread is blocked on the
    # full pipe, and a worker may not even die on SIGTERM; the process must still exit
    script = tmp_path / "stop.py"
    script.write_text(
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "import gputok\n"
        "from gputok.corpus.pool import Pool\n"
        "pool = Pool(gputok.get_encoding('r50k_base'), ('name', 'r50k_base'), ['numpy'] * 2, {})\n"
        "p, inq, _ = pool.procs[0]\n"
        "os.kill(p.pid, signal.SIGSTOP)  # reads nothing more, ignores SIGTERM\n"
        "inq.put(['x' * (1 << 20)] * 4)  # far more than a pipe holds\n"
        "time.sleep(0.5)\n"
        "pool.close(now=True)\n"
        "print('closed', p.exitcode)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["closed", str(-signal.SIGKILL)]


def test_read_ahead_keeps_order_errors_and_at_most_one_batch_ahead():
    """``jobs.read_ahead``: the items in order; the reader is never more than one item ahead of
    the caller (two batches in memory at most); an error while reading reaches the caller at
    that item; a caller that stops early stops the reader."""
    import threading
    import time as _time

    from gputok.corpus.pool import read_ahead

    produced, lock = [], threading.Lock()

    def source(n, fail_at=None):
        for i in range(n):
            if i == fail_at:
                raise ValueError(f"bad line in batch {i}")
            with lock:
                produced.append(i)
            yield i

    got = []
    for x in read_ahead(source(6)):
        _time.sleep(0.02)  # the reader has time to run ahead, if it would
        with lock:
            assert len(produced) <= x + 2  # this one and at most the next
        got.append(x)
    assert got == list(range(6))

    produced.clear()
    seen = []
    with pytest.raises(ValueError, match="bad line in batch 3"):
        for x in read_ahead(source(6, fail_at=3)):
            seen.append(x)
    assert seen == [0, 1, 2]

    produced.clear()
    gen = read_ahead(source(100))
    assert next(gen) == 0
    gen.close()  # the caller stops: the reader stops before reading much more
    _time.sleep(0.1)
    assert len(produced) <= 3
