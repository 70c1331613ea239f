"""The manifest and its journal (``gputok.corpus.manifest``): a finished shard costs one appended
line, not a rewrite of every shard listed so far, and a job stopped at any step of writing a
shard or the manifest resumes to the bytes of an uninterrupted run, in every output format."""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

from gputok.corpus import ShardWriter, read_manifest
from gputok.corpus import manifest as manifest_mod
from gputok.corpus.formats import FORMATS
from gputok.corpus.manifest import JOURNAL, MANIFEST
from gputok.corpus.shards import LOCK

N_DOCS = 120


def _batches(start: int = 0):
    """The job's documents from document ``start`` on, in batches of 1-9 documents: document
    ``i`` is ``i % 23`` ids, its end position ``(0, i + 1, i + 1)``."""
    rng = random.Random(3)
    sizes = []
    while sum(sizes) < N_DOCS:
        sizes.append(rng.randint(1, 9))
    at = 0
    for size in sizes:
        docs = [i for i in range(at, min(at + size, N_DOCS)) if i >= start]
        at += size
        if not docs:
            continue
        lens = [i % 23 for i in docs]
        ids = np.concatenate([np.full(n, i, np.uint32) for i, n in zip(docs, lens)] +
                             [np.zeros(0, np.uint32)])
        yield ids, np.concatenate([[0], np.cumsum(lens)]), [(0, i + 1, i + 1) for i in docs]


def _writer(out, fmt, cap=150, **kw):
    return ShardWriter(out, fmt=fmt, meta={"inputs": []}, n_vocab=1000, cap_tokens=cap, **kw)


def _run(out, fmt, *, resume=False, flush_each=False):
    """The job (or the rest of it); returns the writer's warnings."""
    warnings: list = []
    w = _writer(out, fmt, resume=resume, overwrite=not resume, warn=warnings.append)
    if not w.complete:
        start = w.start[1] if w.start else 0
        for ids, off, ends in _batches(start):
            w.add(ids, off, ends)
            if flush_each:
                w._wait()  # (each shard written before the next batch: one step at a time)
        w.close()
    w.release()
    return warnings


def _files(d) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != LOCK}


def test_a_shard_costs_one_journal_line_not_a_manifest_rewrite(tmp_path, monkeypatch):
    """Old shards are never serialised again while the job runs: manifest.json is written when
    the job opens the directory and once at the end, each shard in between is one line."""
    serialised = []
    real_dumps = json.dumps

    def counting_dumps(obj, **kw):
        if isinstance(obj, dict) and "shards" in obj:
            serialised.append(len(obj["shards"]))
        elif isinstance(obj, list) and len(obj) == 2 and isinstance(obj[1], dict):
            serialised.append(1)
        return real_dumps(obj, **kw)

    monkeypatch.setattr(manifest_mod.json, "dumps", counting_dumps)
    out = tmp_path / "o"
    w = _writer(out, "npy", cap=40)
    first = os.stat(out / MANIFEST)
    journal_sizes = []
    for ids, off, ends in _batches():
        w.add(ids, off, ends)
        w._wait()
        if (out / JOURNAL).exists():
            journal_sizes.append((len(w.shards), (out / JOURNAL).stat().st_size))
    now = os.stat(out / MANIFEST)
    assert (now.st_ino, now.st_mtime_ns, now.st_size) == \
        (first.st_ino, first.st_mtime_ns, first.st_size)  # untouched while shards were written
    n = len(w.shards)
    assert n >= 20
    # the journal grew by one line per shard, of about the same size whatever came before
    lines = (out / JOURNAL).read_bytes().split(b"\n")[:-1]
    assert len(lines) == n
    assert [json.loads(x) for x in lines] == [[k, s] for k, s in enumerate(w.shards)]
    assert max(map(len, lines)) < 2 * min(map(len, lines))
    assert journal_sizes[-1][1] == sum(len(x) + 1 for x in lines)
    w.close()
    n = len(w.shards)  # (with the last, written by close)
    # opening: 0 shards; each shard: itself; closing: all n once. (A rewrite per shard
    # serialised 1 + 2 + ... + n = n (n + 1) / 2 entries.)
    assert sum(serialised) == n + n and serialised[0] == 0 and serialised[-1] == n
    assert not (out / JOURNAL).exists()
    m = read_manifest(out)
    assert m["complete"] and m["docs"] == N_DOCS and len(m["shards"]) == n


def test_read_manifest_folds_the_journal_and_stops_at_a_torn_line(tmp_path):
    out = tmp_path / "o"
    w = _writer(out, "npy")
    for ids, off, ends in _batches():
        w.add(ids, off, ends)
    w._wait()
    shards = [dict(s) for s in w.shards]
    w._manifest.close()  # a kill: no release, nothing folded in
    m = read_manifest(out)
    assert m["shards"] == shards and m["docs"] == sum(s["docs"] for s in shards)
    assert not m["complete"]
    data = (out / JOURNAL).read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 10]
    for cut in sorted({0, 1, *ends, *(e - 1 for e in ends), *(e + 7 for e in ends[:-1])}):
        (out / JOURNAL).write_bytes(data[:cut])
        whole = sum(e <= cut for e in ends)
        assert read_manifest(out)["shards"] == shards[:whole], cut
    # a line for a shard listed already is passed over; one that skips a shard ends the journal
    lines = data.split(b"\n")[:-1]
    (out / JOURNAL).write_bytes(b"\n".join([lines[0], lines[0], lines[1], lines[3], lines[2]])
                                + b"\n")
    assert read_manifest(out)["shards"] == shards[:2]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stop_at_any_step_of_a_write_resumes_to_the_same_bytes(tmp_path, monkeypatch, fmt):
    """The output directory as a kill would leave it before each step of the writer (every
    write, fsync, rename and removal), and with the journal torn inside a line: resumed, each
    ends with the files (manifest included) of an uninterrupted run."""
    ref = tmp_path / "ref"
    _run(ref, fmt)
    want = _files(ref)
    assert read_manifest(ref)["docs"] == N_DOCS and JOURNAL not in want

    out = tmp_path / "o"
    states: list = []

    def snap(real):
        def step(*a, **k):
            if out.exists():
                states.append(_files(out))
            return real(*a, **k)
        return step

    with monkeypatch.context() as mp:
        for name in ("write", "fsync", "replace", "unlink", "ftruncate"):
            mp.setattr(os, name, snap(getattr(os, name)))
        _run(out, fmt, flush_each=True)
    assert _files(out) == want
    journals = [s[JOURNAL] for s in states if s.get(JOURNAL)]
    assert len(states) > 40 and journals
    longest = max(journals, key=len)
    rng = random.Random(fmt)
    for cut in rng.sample(range(1, len(longest)), min(12, len(longest) - 1)):
        states.append({**next(s for s in states if s.get(JOURNAL) == longest),
                       JOURNAL: longest[:cut]})
    for k, state in enumerate(states):
        d = tmp_path / f"s{k}"
        d.mkdir()
        for name, data in state.items():
            (d / name).write_bytes(data)
        # nothing a kill leaves is a shard to distrust (listed, yet missing or corrupt)
        assert _run(d, fmt, resume=True) == [], f"state {k}: {sorted(state)}"
        assert _files(d) == want, f"state {k}: {sorted(state)}"
        shutil.rmtree(d)
