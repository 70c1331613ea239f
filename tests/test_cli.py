"""The ``gputok`` command line: encode to shards (incl. resume), show, info, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gputok
from gputok.cli import main
from gputok.shards import read_shards

ROOT = Path(__file__).resolve().parent.parent


def _jsonl(path: Path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def _all_docs(outdir):
    docs = []
    for ids, off in read_shards(outdir):
        docs += [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    return docs


def test_encode_jsonl_and_txt(tmp_path, capsys):
    enc = gputok.get_encoding("r50k_base")
    texts = ["hello world", "", "second doc\nwith lines", "日本語"] * 5
    a = _jsonl(tmp_path / "a.jsonl", texts)
    b = tmp_path / "b.txt"
    b.write_text("a whole file is one document\n")
    out = tmp_path / "out"
    assert main(["encode", "-e", "r50k_base", str(a), str(b), "-o", str(out), "-q",
                 "--shard-tokens", "20", "--batch-bytes", "30"]) == 0
    summary = capsys.readouterr().out
    assert "21 docs" in summary and "MB/s" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["dtype"] == "uint16" and len(manifest["shards"]) > 1
    assert _all_docs(out) == [enc.encode(t) for t in texts] + [enc.encode(b.read_text())]
    assert np.load(out / manifest["shards"][0]["files"][0]).dtype == np.uint16


def test_encode_resume_loses_nothing(tmp_path):
    texts = [f"document number {i} " * (i % 7 + 1) for i in range(200)]
    src = _jsonl(tmp_path / "c.jsonl", texts)
    out = tmp_path / "out"
    args = ["encode", "-e", "cl100k_base", str(src), "-o", str(out), "-q", "--shard-tokens", "100",
            "--batch-bytes", "200"]
    assert main(args) == 0
    full = _all_docs(out)
    # simulate a job killed after 3 shards: drop the later shards from the manifest
    m = json.loads((out / "manifest.json").read_text())
    m["shards"], m["complete"] = m["shards"][:3], False
    (out / "manifest.json").write_text(json.dumps(m))
    assert main(args) == 2  # refuses to clobber without --resume/--overwrite
    assert main(args + ["--resume"]) == 0
    assert _all_docs(out) == full
    assert json.loads((out / "manifest.json").read_text())["docs"] == 200


def test_append_eot(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", ["a", "b c"])
    out = tmp_path / "o"
    assert main(["encode", str(src), "-o", str(out), "-q", "--append-eot"]) == 0
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode("a") + [enc.eot_token], enc.encode("b c") + [enc.eot_token]]


@pytest.mark.parametrize("content,needle", [
    (b'{"text": "ok"}\n{not json}\n', "bad.jsonl:2: invalid JSON"),
    (b'{"body": "x"}\n', "bad.jsonl:1: no field 'text'"),
    (b'{"text": 3}\n', "bad.jsonl:1: field 'text' is a int"),
    (b'["text"]\n', "bad.jsonl:1: expected a JSON object"),
    (b'{"text": "\xff"}\n', "bad.jsonl:1: invalid UTF-8"),
    (b'{"text": "a <|endoftext|>"}\n', "--special-as-text"),
])
def test_bad_input_is_one_clear_line(tmp_path, content, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "gputok.cli", "encode", str(bad), "-o",
                        str(tmp_path / "o"), "-q"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_missing_file_and_unknown_encoding(tmp_path, capsys):
    assert main(["encode", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    f = _jsonl(tmp_path / "x.jsonl", ["a"])
    assert main(["encode", "-e", "nope", str(f), "-o", str(tmp_path / "o")]) == 2
    assert "cl100k_base" in capsys.readouterr().err


def test_special_as_text(tmp_path):
    src = _jsonl(tmp_path / "s.jsonl", ["a <|endoftext|>"])
    out = tmp_path / "o"
    assert main(["encode", str(src), "-o", str(out), "-q", "--special-as-text"]) == 0
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode_ordinary("a <|endoftext|>")]


def test_info_and_show(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "available" in out and "cuda" in out
    assert main(["show", "-e", "cl100k_base", "hello", "world"]) == 0
    assert "15339" in capsys.readouterr().out
