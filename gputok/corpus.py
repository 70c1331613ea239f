"""Reading corpora: .txt / .jsonl files (optionally .gz), as batches of documents.

* ``.txt``: the whole file is one document.
* ``.jsonl``: one JSON object per line; the document is ``obj[field]`` (a string). Blank lines
  are skipped. A line that is not JSON, not an object, or lacks the field is an error naming the
  file and line: a corpus job must not silently drop documents.

Files are read as bytes and decoded as UTF-8 (strict): invalid UTF-8 is an error naming the file
and byte offset, unless ``errors="replace"``.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


class CorpusError(ValueError):
    """Bad input file: the message names the file and the line."""


@dataclass
class Batch:
    texts: list[str]
    nbytes: int  # bytes of the input consumed by this batch (for progress)


def _open(path: Path):
    raw = open(path, "rb")
    if path.suffix == ".gz":
        return gzip.open(raw)
    return raw


def _kind(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl") or name.endswith(".json"):
        return "jsonl"
    return "txt"


def iter_documents(paths: "list[str | os.PathLike]", *, field: str = "text",
                   errors: str = "strict") -> Iterator[tuple["str | None", int, str]]:
    """Yield ``(document, input_bytes_consumed, location)`` for every document, in order.

    ``location`` is ``file`` or ``file:line``; ``document`` is None for skipped blank lines
    (they still count as consumed bytes, for progress)."""
    for p in map(Path, paths):
        if not p.exists():
            raise CorpusError(f"{p}: no such file")
        if p.is_dir():
            raise CorpusError(f"{p}: is a directory (pass the files, e.g. {p}/*.jsonl)")
        if _kind(p) == "txt":
            with _open(p) as f:
                data = f.read()
            yield _decode(data, p, None, errors), p.stat().st_size, str(p)
            continue
        with _open(p) as f:
            for lineno, line in enumerate(f, 1):
                n = len(line)
                if not line.strip():
                    yield None, n, f"{p}:{lineno}"
                    continue
                text = _decode(line, p, lineno, errors)
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    raise CorpusError(f"{p}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(obj, dict):
                    raise CorpusError(f"{p}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                if field not in obj:
                    keys = ", ".join(list(obj)[:6])
                    raise CorpusError(f"{p}:{lineno}: no field {field!r} (fields: {keys}); "
                                      f"choose one with --field")
                doc = obj[field]
                if not isinstance(doc, str):
                    raise CorpusError(f"{p}:{lineno}: field {field!r} is a {type(doc).__name__}, "
                                      "not a string")
                yield doc, n, f"{p}:{lineno}"


def _decode(data: bytes, path: Path, lineno, errors: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if errors == "replace":
            return data.decode("utf-8", "replace")
        where = f"{path}:{lineno}" if lineno else str(path)
        raise CorpusError(f"{where}: invalid UTF-8 at byte {e.start} ({e.reason}); "
                          "use --errors replace to decode it as U+FFFD") from None


def iter_batches(paths, *, field: str = "text", errors: str = "strict",
                 batch_bytes: int = 8 << 20) -> Iterator[Batch]:
    """Documents grouped into batches of roughly ``batch_bytes`` of text."""
    texts: list[str] = []
    size = consumed = 0
    for doc, n, _where in iter_documents(paths, field=field, errors=errors):
        consumed += n
        if doc is None:
            continue
        texts.append(doc)
        size += len(doc)
        if size >= batch_bytes:
            yield Batch(texts, consumed)
            texts, size, consumed = [], 0, 0
    if texts or consumed:
        yield Batch(texts, consumed)


def total_input_bytes(paths) -> int:
    return sum(Path(p).stat().st_size for p in paths if Path(p).is_file())
