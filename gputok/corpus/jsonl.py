"""The native JSON-lines reader behind ``read_batches(..., packed=True)`` (``gputok encode``).

The Python reader takes a line at a time: ``readline``, UTF-8 decode, ``json.loads``, the field,
then (when the batch is packed for the encoder) UTF-8 encode again and join. For 12 MB of JSONL
that is ~60 ms of a core holding the GIL, on a 2-core box beside two encoding threads. The
native reader (``kernels/host_jsonl.h``, in the native CPU device's library) reads blocks of
whole lines and writes each line's field straight into one UTF-8 buffer, with the per-line
positions the shard writer records for ``--resume``.

Exactness: the buffer is byte for byte what the Python reader packs (``json.loads`` then
``utf8_of``). A line the native reader cannot take on exactly (THE FALLBACK RULE in
host_jsonl.h: invalid UTF-8, anything that is not a plain object holding the string field, ...)
goes to the Python reader's own code for one line, which decodes it or raises its error, and the
native reader goes on after it. Tests compare both readers on fuzzed lines.

It is used when the native library is already in the cache (a process that encodes on the
native CPU device has built it; a corpus read never starts a compile), the field name is valid
UTF-8, and ``$GPUTOK_NATIVE_READER`` is not ``0``.
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from ..backends import host_routine, huge_block
from .sources import BOM, open_text, parse_json_line, skip_to
from ..stages.pack import utf8_of

BLOCK = 1 << 20  # bytes read at a time (a longer line is read whole)
# Tried and dropped: 4 MB blocks, and the output buffers of earlier blocks reused once no run
# views them (perf put the fresh pages' faults and zeroing at ~10% of the reader's profile): on
# bench_host's JSONL job (null device, 3 interleaved rounds of main / 4 MB / 4 MB + reuse / 1 MB)
# no difference beyond the noise, and 4 MB runs hold four times the memory in flight.
DOC, BLANK = 0, 1
STOP_END, STOP_FALLBACK, STOP_FULL = 0, 1, 2


class Parser:
    """``kernels/host_jsonl.h`` for one field name."""

    def __init__(self, fn, key: bytes):
        self.fn, self.key = fn, key

    def parse(self, block, pos: int, end: "int | None" = None) -> tuple:
        """Lines of ``block[pos:end]`` (whole lines; bytes or a bytearray) up to the first one
        the Python reader must take: (lines, status, line ends, document ends, out, why); line
        ends are counted from ``pos``, ``out`` is the documents' bytes (a uint8 array)."""
        n = (len(block) if end is None else end) - pos
        lines = min(n // 32 + 64, n + 1)  # more lines than that: the next call goes on
        status = np.empty(lines, np.uint8)
        line_end = np.empty(lines, np.int64)
        doc_end = np.empty(lines, np.int64)
        out = huge_block(max(n, 1))  # (2 MB pages for a block of 2 MB or more: long lines)
        res = np.zeros(3, np.int64)
        self.fn(np.frombuffer(block, np.uint8).ctypes.data + pos, n, self.key, len(self.key),
                out.ctypes.data,
                status.ctypes.data, line_end.ctypes.data, doc_end.ctypes.data, lines,
                res.ctypes.data)
        k = int(res[0])
        return k, status[:k], line_end[:k], doc_end[:k], out[:int(res[1])], int(res[2])


def parser(field: str) -> "Parser | None":
    """The native reader for ``field``, or None where it is not to be used (see the module
    docstring)."""
    if os.environ.get("GPUTOK_NATIVE_READER", "1") == "0":
        return None
    try:
        key = field.encode("utf-8")
    except UnicodeEncodeError:
        return None
    fn = host_routine("gputok_jsonl_parse")  # None: no compiler, not built yet, a broken cache
    return None if fn is None else Parser(fn, key)


def _lines(f, first: bool) -> Iterator[tuple]:
    """Blocks of whole lines from ``f``: (buffer, end, bytes skipped at its start: a BOM at the
    start of the file); the block is ``buffer[:end]``, valid until the next one is asked for
    (one buffer, read into again: a fresh 1 MB of pages a block, and a copy of them to cut the
    lines, were most of the reader's time where page faults are dear). A line longer than the
    buffer is read on until its newline (the buffer grows)."""
    # read1 semantics (readinto1): what a compressed stream decoded before it turns out
    # truncated is still returned (read(BLOCK) would raise with it), so the lines before the
    # damage are kept, as readline
    readinto = getattr(f, "readinto1", None) or getattr(f, "readinto")
    buf = bytearray(2 * BLOCK)
    fill = 0  # bytes in buf
    while True:
        if len(buf) - fill < BLOCK:
            buf.extend(bytes(len(buf)))  # (a line longer than what is free)
        with memoryview(buf) as view:
            got = readinto(view[fill:fill + BLOCK])
        if got:
            fill += got
            cut = buf.rfind(b"\n", 0, fill) + 1
            if cut == 0:
                continue
        else:
            cut = fill
        if cut:
            skip = 3 if first and buf.startswith(BOM) else 0
            first = False
            yield buf, cut, skip
            buf[:fill - cut] = buf[cut:fill]  # the part of a line after the last newline
            fill -= cut
        if not got:
            return


def packed_docs(src, i: int, start, field: str, errors: str, parse: Parser) -> Iterator[tuple]:
    """The documents of JSON-lines source ``i`` from position ``start`` on, in runs:
    ``(run, disk)``: a ``Run`` (UTF-8 bytes, each document's byte count, its end position
    ``(file, offset, line)`` per row of an int64 array) and the on-disk position reached."""

    offset, line = (start[1], start[2]) if start and start[0] == i else (0, 0)
    with open_text(src.path, src.compression) as (f, raw):
        if offset:
            skip_to(f, offset, src)
        for block, size, skip in _lines(f, offset == 0):
            pos = skip
            base = offset  # the block's first byte (a skipped BOM counts as consumed input)
            while pos < size:
                k, status, line_end, doc_end, out, why = parse.parse(block, pos, size)
                if k:
                    docs = status == DOC
                    ends = np.empty((int(docs.sum()), 3), np.int64)
                    ends[:, 0] = i
                    ends[:, 1] = base + pos + line_end[docs]
                    ends[:, 2] = line + 1 + np.flatnonzero(docs)
                    lengths = np.diff(doc_end, prepend=0)[docs]
                    offset = base + pos + int(line_end[-1])
                    line += k
                    pos += int(line_end[-1])
                    yield Run(out, lengths, ends), raw.tell() if raw else offset
                if why != STOP_FALLBACK:
                    continue
                # THE FALLBACK RULE: this line is the Python reader's (decoded or its error)
                # (never a blank line: those the native reader takes itself)
                stop = block.find(b"\n", pos, size) + 1 or size
                line += 1
                offset = base + stop
                doc = parse_json_line(bytes(block[pos:stop]), src.path, line, field, errors)
                pos = stop
                yield Run.one(doc, (i, offset, line)), raw.tell() if raw else offset
            offset = base + size


class Run:
    """Documents back to back: ``buf`` (uint8), ``lengths``, ``ends`` (n x 3 positions)."""

    __slots__ = ("buf", "lengths", "ends", "starts")

    def __init__(self, buf: np.ndarray, lengths: np.ndarray, ends: np.ndarray):
        self.buf, self.lengths, self.ends = buf, lengths, ends
        self.starts = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=self.starts[1:])

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def of_utf8(cls, data: bytes, end) -> "Run":
        """A run of one document already in UTF-8 (kept as it is, no copy)."""
        return cls(np.frombuffer(data, np.uint8), np.array([len(data)], np.int64),
                   np.array([end], np.int64))

    @classmethod
    def one(cls, text: str, end) -> "Run":
        """A run of one document (a str the Python reader read), packed as ``utf8_of`` packs."""
        raw = utf8_of(text)
        return cls(np.frombuffer(raw, np.uint8), np.array([len(raw)], np.int64),
                   np.array([end], np.int64))


NO_RUN = Run(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros((0, 3), np.int64))
