"""What a corpus input is: a ``Source``, the error a bad one raises, a position in it in words,
and how its bytes are opened and its JSON lines parsed.

This is the corpus job's vocabulary, below every step of it (checking the inputs, reading them);
it holds no step of its own.

Positions: every document comes with the input position just after it, ``(file, offset, line)``:
the index of its source, the bytes (of decompressed text) or rows consumed in it, and the line
(or row) number; ``location`` says it in words.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from dataclasses import dataclass

BOM = b"\xef\xbb\xbf"


class CorpusError(ValueError):
    """Bad input: the message names the file and the line."""


@dataclass(frozen=True)
class Source:
    """One input: ``path`` (``"-"`` for stdin), its ``kind`` and ``compression`` (None, "gz",
    "zst"), and ``size`` on disk (compressed bytes; 0 for stdin)."""

    path: str
    kind: str
    compression: "str | None" = None
    size: int = 0

    @property
    def seekable(self) -> bool:
        return self.path != "-"

    def __fspath__(self) -> str:
        # a checked input stays one where a path is expected: ``resolve_inputs`` takes it as
        # it is (training is handed the sources the command line checked, not their paths)
        return self.path


def location(sources: "list[Source]", end) -> str:
    """``file:line`` (or ``file row N``, or ``file``) of the document that ends at ``end``."""
    src = sources[end[0]]
    if src.kind == "txt":
        return src.path
    if src.kind in ("parquet", "arrow"):
        return f"{src.path} row {end[2] - 1}"
    return f"{src.path}:{end[2]}"


class open_text:
    """Context manager: ``(line-iterable binary stream, raw file)`` for a path and compression;
    the raw file's ``tell()`` is the on-disk (compressed) progress."""

    def __init__(self, path: str, comp):
        self.path, self.comp = path, comp

    def __enter__(self):
        if self.path == "-":
            self.raw = sys.stdin.buffer
            self._closers = []
            return self.raw, None
        self.raw = open(self.path, "rb")
        self._closers = [self.raw]
        if self.comp == "gz":
            f = gzip.GzipFile(fileobj=self.raw)
        elif self.comp == "zst":
            import zstandard

            f = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(self.raw),
                                  buffer_size=1 << 20)
        else:
            return self.raw, self.raw
        self._closers.insert(0, f)
        return f, self.raw

    def __exit__(self, *exc):
        for c in self._closers:
            c.close()
        return False


def parse_json_line(line: bytes, path: str, lineno: int, field: str, errors: str) -> str:
    return parse_json_text(decode_utf8(line, path, lineno, errors), path, lineno, field)


def parse_json_text(text: str, path: str, lineno: int, field: str) -> str:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        hint = ("; standard input is read as JSON lines: pass --input-format txt to read it as "
                "one text" if path == "-" else "")
        raise CorpusError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno}){hint}"
                          ) from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    if field not in obj:
        keys = ", ".join(list(obj)[:6])
        raise CorpusError(f"{path}:{lineno}: no field {field!r} (fields: {keys}); "
                          "choose one with --field")
    doc = obj[field]
    if not isinstance(doc, str):
        kind = {dict: "an object", list: "a list", int: "a number", float: "a number",
                bool: "a boolean", type(None): "null"}.get(type(doc), type(doc).__name__)
        raise CorpusError(f"{path}:{lineno}: field {field!r} is {kind}, not a string")
    return doc


def decode_utf8(data: bytes, path, lineno, errors: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if errors == "replace":
            return data.decode("utf-8", "replace")
        where = f"{path}:{lineno}" if lineno else str(path)
        raise CorpusError(f"{where}: invalid UTF-8 at byte {e.start} ({e.reason}); "
                          "use --errors replace to decode it as U+FFFD") from None


def skip_to(f, offset: int, src: Source) -> None:
    """Move a stream forward to a recorded offset: a seek for plain files; for compressed ones
    the data is decompressed and dropped (gzip and zstd have no random access)."""
    if src.compression is None:
        f.seek(offset)
        return
    left = offset
    while left:
        got = len(f.read(min(left, 1 << 22)))
        if not got:
            raise CorpusError(f"{src.path}: shorter than the {offset} bytes already encoded; "
                              "the input changed since the job started")
        left -= got
