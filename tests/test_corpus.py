"""Inputs: every kind read, checked before any work, streamed with exact resumable positions."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from gputok.corpus import (CorpusError, iter_documents, location, read_batches, resolve_inputs,
                           total_input_bytes)

TEXTS = ["first doc", "second\nline", "", "日本語 😀", "last one"]


def _jsonl(path, texts, field="text", bom=False):
    data = "".join(json.dumps({field: t}, ensure_ascii=False) + "\n" for t in texts).encode()
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return path


def _all(sources, **kw):
    out = []
    for b in read_batches(sources, **kw):
        out += b.texts if isinstance(b.texts, list) else b.texts.to_pylist()
    return out


def _write_kinds(d):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    _jsonl(d / "a.jsonl", TEXTS)
    (d / "b.jsonl.gz").write_bytes(gzip.compress((d / "a.jsonl").read_bytes()))
    (d / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress((d / "a.jsonl").read_bytes()))
    (d / "d.txt").write_text("a text file\nis one document\n", encoding="utf-8")
    table = pa.table({"text": TEXTS, "id": list(range(5))})
    pq.write_table(table, d / "e.parquet", row_group_size=2)
    with pa.ipc.new_file(d / "f.arrow", table.schema) as w:
        w.write_table(table, max_chunksize=2)
    with pa.ipc.new_stream(d / "g.arrow", table.schema) as w:
        w.write_table(table, max_chunksize=3)
    return TEXTS * 3 + ["a text file\nis one document\n"] + TEXTS * 3


def test_every_kind_and_directory_order(tmp_path):
    pytest.importorskip("zstandard", reason="zstandard not installed: pip install 'gputok[zst]'")
    want = _write_kinds(tmp_path)
    sources = resolve_inputs([tmp_path])  # a directory: its known files, sorted
    assert [os.path.basename(s.path) for s in sources] == \
        ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.txt", "e.parquet", "f.arrow", "g.arrow"]
    assert [(s.kind, s.compression) for s in sources[:4]] == \
        [("jsonl", None), ("jsonl", "gz"), ("jsonl", "zst"), ("txt", None)]
    got = _all(sources, batch_bytes=7)
    # a blank jsonl line is skipped, but "" is a document (an empty string) and is kept
    assert got == want


def test_resume_from_every_position_gives_the_rest(tmp_path):
    pytest.importorskip("zstandard", reason="zstandard not installed")
    _write_kinds(tmp_path)
    sources = resolve_inputs([tmp_path])
    docs, ends = [], []
    for b in read_batches(sources, batch_bytes=1):
        docs += b.texts if isinstance(b.texts, list) else b.texts.to_pylist()
        ends += b.ends
    for k, end in enumerate(ends):
        assert _all(sources, batch_bytes=5, start=end) == docs[k + 1:], (k, end)


def test_globs_bom_and_locations(tmp_path):
    _jsonl(tmp_path / "x1.jsonl", ["one", "two"], bom=True)
    _jsonl(tmp_path / "x2.jsonl", ["three"])
    sources = resolve_inputs([str(tmp_path / "x*.jsonl")])
    assert _all(sources) == ["one", "two", "three"]
    b = next(read_batches(sources, batch_bytes=1 << 20))
    assert [location(sources, e) for e in b.ends] == \
        [f"{tmp_path}/x1.jsonl:1", f"{tmp_path}/x1.jsonl:2", f"{tmp_path}/x2.jsonl:1"]


def test_every_problem_found_before_work(tmp_path):
    good = _jsonl(tmp_path / "good.jsonl", ["a"])
    wrong_field = _jsonl(tmp_path / "wf.jsonl", ["a"], field="body")
    (tmp_path / "notes.csv").write_text("x")
    with pytest.raises(CorpusError) as e:
        resolve_inputs([good, tmp_path / "missing.jsonl", wrong_field, tmp_path / "notes.csv",
                        str(tmp_path / "nomatch*.jsonl")])
    msg = str(e.value)
    assert "missing.jsonl: no such file" in msg
    assert "wf.jsonl:1: no field 'text' (fields: body)" in msg
    assert "notes.csv: unknown input kind" in msg
    assert "nomatch*.jsonl: the pattern matches no file" in msg


def test_parquet_field_checked_up_front(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["a"], "n": [1]}), tmp_path / "p.parquet")
    with pytest.raises(CorpusError, match=r"p.parquet: no column 'text' \(columns: content, n\)"):
        resolve_inputs([tmp_path / "p.parquet"])
    with pytest.raises(CorpusError, match="column 'n' is int64, not a string column"):
        resolve_inputs([tmp_path / "p.parquet"], field="n")
    assert _all(resolve_inputs([tmp_path / "p.parquet"], field="content"),
                field="content") == ["a"]


def test_truncated_gzip_is_a_clear_error(tmp_path):
    raw = "".join(json.dumps({"text": f"doc {i} " * 20}) + "\n" for i in range(2000)).encode()
    gz = gzip.compress(raw)
    (tmp_path / "t.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    sources = resolve_inputs([tmp_path / "t.jsonl.gz"])  # the first line is fine
    with pytest.raises(CorpusError, match=r"t.jsonl.gz: truncated or corrupt gz data \(EOFError"):
        _all(sources)


def test_invalid_utf8_and_replace(tmp_path):
    p = tmp_path / "u.txt"
    p.write_bytes(b"ok \xff bad")
    with pytest.raises(CorpusError, match=r"u.txt: invalid UTF-8 at byte 3 .*--errors replace"):
        _all(resolve_inputs([p]))
    assert _all(resolve_inputs([p]), errors="replace") == ["ok \ufffd bad"]


def test_gz_progress_counts_compressed_bytes(tmp_path):
    raw = "".join(json.dumps({"text": f"document {i} " * 30}) + "\n" for i in range(3000)).encode()
    (tmp_path / "big.jsonl.gz").write_bytes(gzip.compress(raw))
    sources = resolve_inputs([tmp_path / "big.jsonl.gz"])
    steps = [b.progress for b in read_batches(sources, batch_bytes=20000)]
    total = total_input_bytes([tmp_path / "big.jsonl.gz"])
    assert total == os.path.getsize(tmp_path / "big.jsonl.gz") < len(raw)
    assert sum(steps) == total and len(steps) > 3 and all(s >= 0 for s in steps)


def test_trainer_reader_is_unchanged(tmp_path):
    p = _jsonl(tmp_path / "t.jsonl", ["a", "b"])
    rows = list(iter_documents([p]))
    assert [(d, w) for d, _n, w in rows] == [("a", f"{p}:1"), ("b", f"{p}:2")]
    assert sum(n for _d, n, _w in rows) == os.path.getsize(p)


def test_a_job_does_not_read_its_own_output(tmp_path):
    from gputok.jobs import encode_corpus

    _jsonl(tmp_path / "a.jsonl", ["one", "two"])
    out = tmp_path / "tokens"
    for _ in range(2):  # the second run would see tokens/*.parquet without the exclusion
        s = encode_corpus([tmp_path], out, fmt="parquet", workers=1, overwrite=True)
        assert s.docs == 2
    assert [s.path for s in resolve_inputs([tmp_path], exclude=out)] == [f"{tmp_path}/a.jsonl"]
