"""The text reader: ``.txt`` files (a file is a document) and JSON lines read by Python, one
document at a time with its position (``sources``). The native JSON-lines reader (``jsonl``)
takes the lines it can; this one is the reference it equals, and takes the rest.
"""

from __future__ import annotations

from typing import Iterator

from ..stages.pack import fix_surrogates, valid_utf8
from .sources import BOM, Source, decode_utf8, open_text, parse_json_text, skip_to


def text_file_utf8(src: Source, i: int, start, errors: str) -> Iterator[tuple]:
    """A ``.txt`` source as the packed batches take it: ``(utf8_bytes, (file, offset, line),
    on_disk_position)``, once (nothing after a recorded position: the file is one document).
    Valid UTF-8 comes as read, never decoded to a str and encoded back: a 100 MB document is
    then 100 MB here, not 300 (the bytes, the str, the bytes again)."""
    if start and start[0] == i and start[1]:
        return
    with open_text(src.path, src.compression) as (f, raw):
        data = f.read()
        n = len(data)
        if not valid_utf8(data):  # the error names the byte; "replace" decodes it as Python does
            data = decode_utf8(data, src.path, None, errors).encode("utf-8")
        yield data, (i, n, 1), raw.tell() if raw else n


def text_docs(src: Source, i: int, start, field: str, errors: str, *,
               as_encoded: bool = False) -> Iterator[tuple]:
    """``(text, (file, offset, line), on_disk_position)`` for each document of source ``i``,
    starting after position ``start``; ``text`` is None for a skipped blank line.
    ``as_encoded``: a JSON string that spells a lone surrogate (``"\\ud800"``) comes as the
    encoder reads it, the surrogate as U+FFFD (tiktoken's rule, ``stages.pack.fix_surrogates``);
    otherwise as ``json.loads`` gives it."""
    offset, line = (start[1], start[2]) if start and start[0] == i else (0, 0)
    if src.kind == "txt":
        if offset:  # a text file is one document: a recorded offset means it is done
            return
        with open_text(src.path, src.compression) as (f, raw):
            data = f.read()
            text = decode_utf8(data, src.path, None, errors)
            n = len(data)
            del data
            yield text, (i, n, 1), raw.tell() if raw else n
        return
    with open_text(src.path, src.compression) as (f, raw):
        if offset:
            skip_to(f, offset, src)
        readline = f.readline
        while True:
            # readline + del, not `for line in f`: the loop variable would keep the raw bytes
            # alive while they are parsed, 3x a giant line's size in memory instead of 2x
            data = readline()
            if not data:
                return
            line += 1
            offset += len(data)
            if line == 1 and data.startswith(BOM):
                data = data[3:]
            disk = raw.tell() if raw else offset
            if not data.strip():
                yield None, (i, offset, line), disk
                continue
            text = decode_utf8(data, src.path, line, errors)
            del data
            doc = parse_json_text(text, src.path, line, field)
            if as_encoded and "\\u" in text:  # only an escape can spell a surrogate
                doc = fix_surrogates(doc)
            del text  # not kept alive in this frame while the batch is encoded
            yield doc, (i, offset, line), disk
            del doc
