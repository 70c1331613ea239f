"""Inputs: every kind read, checked before any work, streamed with exact resumable positions."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from gputok.corpus import (CorpusError, iter_documents, location, read_batches, resolve_inputs,
                           total_input_bytes)

ROOT = Path(__file__).resolve().parent.parent
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
    from gputok.corpus import encode_corpus

    _jsonl(tmp_path / "a.jsonl", ["one", "two"])
    out = tmp_path / "tokens"
    for _ in range(2):  # the second run would see tokens/*.parquet without the exclusion
        s = encode_corpus([tmp_path], out, fmt="parquet", workers=1, overwrite=True)
        assert s.docs == 2
    assert [s.path for s in resolve_inputs([tmp_path], skip_dir=out)] == [f"{tmp_path}/a.jsonl"]


# ---- dataset folders as users have them -----------------------------------------------------

def _parquet(path, texts):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts}), path)


def _arrow_stream(path, texts):
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"text": texts})
    with pa.ipc.new_stream(path, table.schema) as w:
        w.write_table(table)


def _texts(sources):
    return _all(sources, batch_bytes=1 << 20)


def test_a_hub_snapshot_reads_its_data_and_skips_the_card(tmp_path):
    """A dataset repository as downloaded: a card, .gitattributes and data/<split>-*.parquet."""
    pytest.importorskip("pyarrow")
    d = tmp_path / "ds"
    _parquet(d / "data" / "train-00000-of-00002.parquet", ["t0", "t1"])
    _parquet(d / "data" / "train-00001-of-00002.parquet", ["t2"])
    _parquet(d / "data" / "test-00000-of-00001.parquet", ["x0"])
    (d / "README.md").write_text("---\nlicense: mit\n---\n# A dataset card\n")
    (d / ".gitattributes").write_text("*.parquet filter=lfs\n")
    (d / "LICENSE").write_text("MIT\n")
    notes = []
    sources = resolve_inputs([d], note=notes.append)
    assert [os.path.relpath(s.path, d) for s in sources] == [
        "data/test-00000-of-00001.parquet", "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet"]
    assert notes == [f"{d}: skipped 2 file(s) that are not data: LICENSE, README.md "
                     "(--include GLOB reads one)"]
    assert _texts(sources) == ["x0", "t0", "t1", "t2"]
    train = resolve_inputs([d / "data" / "train-*.parquet"])  # a split by its glob, as is
    assert _texts(train) == ["t0", "t1", "t2"]
    notes.clear()
    only_train = resolve_inputs([d], exclude=["test-*"], note=notes.append)
    assert _texts(only_train) == ["t0", "t1", "t2"]
    assert notes[0].startswith(f"{d}: skipped 3 file(s) that are not data or match --exclude: "
                               "LICENSE, README.md, data/test-00000-of-00001.parquet")
    with_card = resolve_inputs([d], include=["README.md"], exclude=["data/*"],
                               note=notes.append)
    assert [s.kind for s in with_card] == ["txt"] and _texts(with_card)[0].startswith("---")


def test_datasets_save_to_disk_and_cache_layouts_read_as_is(tmp_path):
    """What HF ``datasets`` writes, by name: ``save_to_disk`` (dataset_dict.json, <split>/
    data-*.arrow with dataset_info.json and state.json beside) and its cache (<builder>-<split>
    .arrow, dataset_info.json, cache-*.arrow results of ``map``, .lock files)."""
    pytest.importorskip("pyarrow")
    saved = tmp_path / "saved"
    _arrow_stream(saved / "train" / "data-00000-of-00001.arrow", ["a", "b"])
    _arrow_stream(saved / "validation" / "data-00000-of-00001.arrow", ["c"])
    (saved / "dataset_dict.json").write_text('{"splits": ["train", "validation"]}')
    for split in ("train", "validation"):
        (saved / split / "dataset_info.json").write_text('{"features": {}}')
        (saved / split / "state.json").write_text('{"_data_files": []}')
    notes = []
    assert _texts(resolve_inputs([saved], note=notes.append)) == ["a", "b", "c"]
    assert notes == [f"{saved}: skipped 5 file(s) that are not data: dataset_dict.json, "
                     "train/dataset_info.json, train/state.json, validation/dataset_info.json, "
                     "validation/state.json (--include GLOB reads one)"]
    cache = tmp_path / "cache"
    root = cache / "json" / "default-1a2b" / "0.0.0" / "3c4d"
    _arrow_stream(root / "json-train.arrow", ["p", "q"])
    _arrow_stream(root / "cache-5e6f.arrow", ["a map() result"])
    (root / "dataset_info.json").write_text('{"builder_name": "json"}')
    (cache / "_tmp_cache_json_default-1a2b_0.0.0_3c4d.lock").write_text("")
    notes.clear()
    assert _texts(resolve_inputs([cache], note=notes.append)) == ["p", "q"]
    assert "cache-5e6f.arrow" in notes[0] and "dataset_info.json" in notes[0]


@pytest.mark.full  # HF datasets: the test-full extra (the layouts by name are checked above)
def test_real_datasets_layouts(tmp_path):
    """The same, written by the installed ``datasets`` itself."""
    datasets = pytest.importorskip("datasets", reason="datasets not installed")
    ds = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a", "b"],
                                                                     "n": [1, 2]}),
                               "test": datasets.Dataset.from_dict({"text": ["c"], "n": [3]})})
    ds.save_to_disk(str(tmp_path / "saved"))
    assert sorted(_texts(resolve_inputs([tmp_path / "saved"]))) == ["a", "b", "c"]
    src = tmp_path / "src.jsonl"
    src.write_text('{"text": "x"}\n{"text": "y"}\n')
    loaded = datasets.load_dataset("json", data_files=str(src), cache_dir=str(tmp_path / "hf"))
    loaded["train"].map(lambda r: {"text": r["text"] * 2})  # leaves a cache-*.arrow behind
    assert _texts(resolve_inputs([tmp_path / "hf"])) == ["x", "y"]


def test_encode_a_dataset_folder_skips_its_card_in_one_line(tmp_path):
    import subprocess
    import sys

    d = tmp_path / "d"
    d.mkdir()
    _jsonl(d / "part-0.jsonl", ["alpha", "beta"])
    (d / "README.md").write_text("# not a training document\n")
    (d / "dataset_info.json").write_text('{"description": "not JSON lines of text"}\n')
    r = subprocess.run([sys.executable, "-m", "gputok", "encode", str(d), "-o",
                        str(tmp_path / "o"), "-q", "-e", "r50k_base"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"gputok: {d}: skipped 2 file(s) that are not data: README.md, "
                        "dataset_info.json (--include GLOB reads one)\n")
    assert r.stdout.startswith("gputok encode: 2 docs,")


# ---- the package's shape ----------------------------------------------------------------------

STEPS = ["sources", "inputs", "text", "jsonl", "arrow", "batches", "documents", "lifetime",
         "pool", "formats", "manifest", "checksum", "shards", "job"]


def _imports(path):
    import ast

    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name, []


def test_the_corpus_job_flows_one_way_and_through_the_public_backend_interface():
    """gputok/corpus: each step imports only the steps before it (``sources``, the shared
    vocabulary, below them all), so a document's way through ``gputok encode`` or training
    enters each module once; the engine is reached only through ``gputok.backends``' package
    interface (no device module, no cupy, no kind strings)."""
    pkg = ROOT / "gputok" / "corpus"
    files = sorted(pkg.glob("*.py")) + sorted((pkg / "formats").glob("*.py"))
    assert {p.stem for p in pkg.glob("*.py")} - {"__init__"} == set(STEPS) - {"formats"}
    for path in files:
        step = "formats" if path.parent.name == "formats" else path.stem
        if step == "__init__":
            continue
        for level, module, names in _imports(path):
            assert not module.startswith(("cupy", "mlx")), (path, module)
            if level == 0:  # gputok itself: its public API (Encoding, load), nothing inside
                assert module == "gputok" or not module.startswith("gputok"), (path, module)
                continue
            if step == "formats" and level == 1:
                continue  # the formats' own package
            here = "gputok.corpus" if step != "formats" else "gputok.corpus.formats"
            parent = here.rsplit(".", level - 1)[0] if level > 1 else here
            target = f"{parent}.{module}" if module else parent
            if target.startswith("gputok.backends"):
                assert target == "gputok.backends", f"{path.name} reaches into {target}"
                continue
            if not target.startswith("gputok.corpus."):
                continue  # the rest of gputok (stages, specials)
            used = target.split(".")[2]
            assert STEPS.index(used) < STEPS.index(step), f"{path.name} imports the later {used}"
        text = path.read_text("utf-8")
        assert 'startswith("cuda' not in text and "startswith((\"cuda" not in text, path
