"""Batches: the documents the readers give, cut into batches of about ``batch_bytes`` of text
for the encoder, with the input position after each document.

``read_batches(..., start=position)`` continues exactly after a recorded position; that is what
makes ``--resume`` exact. Memory: one batch of text (and the document being read) at a time.
Files are decoded as strict UTF-8: invalid UTF-8 is an error naming the file, line and byte,
unless ``errors="replace"``; a truncated or corrupt ``.gz``/``.zst`` is an error naming the file.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field as _field
from typing import Iterator

import numpy as np

from ..stages.pack import Packed, PackedRuns
from .arrow import arrow_batches, concat_columns
from .jsonl import NO_RUN, Run, packed_docs, parser
from .sources import CorpusError, Source
from .text import text_docs, text_file_utf8

@dataclass
class Batch:
    """Documents in input order. ``texts`` is a list of str or a pyarrow string array;
    ``ends[i]`` is the position ``(file, offset, line)`` just after document ``i``;
    ``nbytes`` is about the UTF-8 size of the text; ``progress`` the input bytes (as stored on
    disk, so compressed for .gz) consumed since the previous batch."""

    texts: object
    ends: list = _field(default_factory=list)
    nbytes: int = 0
    progress: int = 0

    def __len__(self) -> int:
        return len(self.ends)


RAMP_FIRST = 1 << 20  # bytes of text in the first batch (read_batches)


def read_batches(sources: "list[Source]", *, field: str = "text", errors: str = "strict",
                 batch_bytes: int = 8 << 20, start=None, packed: bool = False
                 ) -> Iterator[Batch]:
    """Batches of about ``batch_bytes`` of text, in order, from position ``start`` on.

    A batch never mixes Arrow input with text input (they reach the encoder differently).
    ``packed``: text batches come as ``stages.pack.Packed`` (one UTF-8 buffer: what the encoder
    reads anyway) with their ends as an (n, 3) int64 array, and JSON lines are read by the
    native reader where it can be used (``jsonl``): the same documents and positions.

    >>> srcs = resolve_inputs(["sample/austen.jsonl"])
    >>> len(next(read_batches(srcs, batch_bytes=1)))
    1
    """
    st = _Ramp(len(sources), batch_bytes)
    acc = _PackedBatch() if packed else _ListBatch()
    parse = parser(field) if packed and any(s.kind == "jsonl" for s in sources) else None
    for i, src in enumerate(sources):
        if start and i < start[0]:
            st.progress += src.size
            continue
        with _read_errors(src):
            if src.kind in ("parquet", "arrow"):
                if len(acc):
                    yield acc.take(st.taken())
                yield from _arrow_source(src, i, start, field, st)
                continue
            if parse is not None and src.kind == "jsonl":
                runs = packed_docs(src, i, start, field, errors, parse)
            elif packed and src.kind == "txt":
                runs = ((Run.of_utf8(data, end), disk)
                        for data, end, disk in text_file_utf8(src, i, start, errors))
            else:
                runs = acc.runs(text_docs(src, i, start, field, errors))
            for run, disk in runs:
                st.consumed(i, disk)
                at = 0
                while at < len(run):  # the run's documents, cut where a batch reaches its limit
                    at = acc.add(run, at, st.limit)
                    if acc.nbytes >= st.limit:
                        yield acc.take(st.taken())
                        st.grow()
    if len(acc) or st.progress:
        yield acc.take(st.taken())


class _Ramp:
    """The batches' size limit (1, 2, 4 MB, ... up to ``batch_bytes``: the encoder starts while
    the reader parses the next batch, instead of waiting for a whole first batch; 8 MB of JSONL
    is ~50 ms of parsing) and the input consumed since the last batch (``progress``)."""

    def __init__(self, n_sources: int, batch_bytes: int):
        self.batch_bytes = batch_bytes
        self.limit = min(batch_bytes, RAMP_FIRST)
        self.progress = 0
        self.done = [0] * n_sources  # on-disk bytes already reported, per source

    def consumed(self, i: int, disk: int) -> None:
        self.progress += disk - self.done[i]
        self.done[i] = disk

    def taken(self) -> int:
        p, self.progress = self.progress, 0
        return p

    def grow(self) -> None:
        self.limit = min(self.batch_bytes, 2 * self.limit)


class _read_errors:
    """A truncated or corrupt compressed input as a ``CorpusError`` naming the file."""

    def __init__(self, src):
        self.src = src

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        src = self.src
        if kind is None or issubclass(kind, CorpusError):
            return False
        if issubclass(kind, (EOFError, zlib.error, gzip.BadGzipFile)):
            # what is kept is the job's to say (its shards), not the reader's
            raise CorpusError(f"{src.path}: truncated or corrupt {src.compression or ''} data "
                              f"({kind.__name__}: {e})") from None
        if kind.__module__.startswith("zstandard"):
            raise CorpusError(f"{src.path}: truncated or corrupt zst data ({e})") from None
        return False


def _arrow_source(src, i: int, start, field: str, st: _Ramp) -> Iterator[Batch]:
    pending, pend_ends, pend_size = [], [], 0
    for col, col_ends, disk in arrow_batches(src, i, start, field, 8192):
        pending.append(col)
        pend_ends += col_ends
        pend_size += col.nbytes
        st.consumed(i, disk)
        if pend_size >= st.limit:
            yield Batch(concat_columns(pending), pend_ends, pend_size, st.taken())
            pending, pend_ends, pend_size = [], [], 0
            st.grow()
    if pending:
        yield Batch(concat_columns(pending), pend_ends, pend_size, st.taken())


class _ListBatch:
    """A batch being filled, as a list of str (``read_batches``); a run is one document."""

    def __init__(self):
        self.texts, self.ends, self.nbytes = [], [], 0

    def __len__(self) -> int:
        return len(self.texts)

    @staticmethod
    def runs(docs) -> Iterator[tuple]:
        for text, end, disk in docs:
            yield (() if text is None else ((text, end),)), disk

    def add(self, run, at: int, limit: int) -> int:
        text, end = run[at]
        self.texts.append(text)
        self.ends.append(end)
        # UTF-8 size without encoding: isascii() is a flag check on CPython strings
        self.nbytes += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        return at + 1

    def take(self, progress: int) -> Batch:
        b = Batch(self.texts, self.ends, self.nbytes, progress)
        self.__init__()
        return b


class _PackedBatch:
    """A batch being filled as packed UTF-8 (``read_batches(packed=True)``); a run is
    ``(buf, lengths, ends)``: documents' bytes back to back, their byte counts and their end
    positions (rows of an int64 array)."""

    def __init__(self):
        self.bufs, self.lens, self.ends, self.nbytes, self.n = [], [], [], 0, 0

    def __len__(self) -> int:
        return self.n

    @staticmethod
    def runs(docs) -> Iterator[tuple]:
        for text, end, disk in docs:
            yield (NO_RUN if text is None else Run.one(text, end)), disk

    def add(self, run, at: int, limit: int) -> int:
        """Documents of ``run`` from ``at`` on, up to the first that brings the batch to
        ``limit``; returns where the next batch goes on."""
        lens = run.lengths
        cum = self.nbytes + np.cumsum(lens[at:])
        stop = at + min(int(np.searchsorted(cum, limit, "left")) + 1, len(lens) - at)
        a, b = int(run.starts[at]), int(run.starts[stop])
        self.bufs.append(run.buf[a:b])
        self.lens.append(lens[at:stop])
        self.ends.append(run.ends[at:stop])
        self.nbytes = int(cum[stop - at - 1])
        self.n += stop - at
        return stop

    def take(self, progress: int) -> Batch:
        off = np.zeros(self.n + 1, np.int64)
        if self.n:
            np.cumsum(np.concatenate(self.lens), out=off[1:])
        # several runs stay as they are (a device that stages chunks copies from them; the
        # first consumer that wants one buffer joins them: ``PackedRuns``)
        texts = (Packed(_whole_bytes(self.bufs[0]) or self.bufs[0].tobytes(), off)
                 if len(self.bufs) == 1 else PackedRuns(self.bufs, off))
        ends = np.concatenate(self.ends) if self.ends else np.zeros((0, 3), np.int64)
        b = Batch(texts, ends, self.nbytes, progress)
        self.__init__()
        return b


def _whole_bytes(view: np.ndarray) -> "bytes | None":
    """The bytes object a uint8 array views from its first byte to its last, or None: a
    batch of one document read as bytes (a .txt file) is handed on without a copy."""
    base = view.base
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, bytes) or len(base) != view.nbytes:
        return None
    return base if np.frombuffer(base, np.uint8).ctypes.data == view.ctypes.data else None
