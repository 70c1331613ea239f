"""Batches: the documents the readers give, cut into batches of about ``batch_bytes`` of text
for the encoder, with the input position after each document.

``read_batches(..., start=position)`` continues exactly after a recorded position; that is what
makes ``--resume`` exact. Memory: one batch of text (and the document being read) at a time.
Files are decoded as strict UTF-8: invalid UTF-8 is an error naming the file, line and byte,
unless ``errors="replace"``; a truncated or corrupt ``.gz``/``.zst`` is an error naming the file.
"""

from __future__ import annotations

import gzip
import os
import queue
import threading
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

    def runs_of(i: int, src):
        if parse is not None and src.kind == "jsonl":
            return packed_docs(src, i, start, field, errors, parse)
        if packed and src.kind == "txt":
            return ((Run.of_utf8(data, end), disk)
                    for data, end, disk in text_file_utf8(src, i, start, errors))
        return acc.runs(text_docs(src, i, start, field, errors))

    todo = [i for i, src in enumerate(sources) if not (start and i < start[0])]
    st.progress += sum(src.size for src in sources[:todo[0] if todo else len(sources)])
    ahead = _Readers(todo, sources, runs_of, lambda src: parse is not None and
                     src.kind == "jsonl" and src.seekable, readers())
    try:
        yield from _cut(sources, todo, ahead, acc, st, start, field)
    finally:
        ahead.close()


def readers() -> int:
    """Sources read at once (``$GPUTOK_READERS``; default: one per core, at most 4, at least 1):
    the next files are parsed on threads of their own while the current one is cut into
    batches, so the reading keeps up with an encoder on many cores (the native JSON-lines
    reader releases the interpreter's lock)."""
    got = os.environ.get("GPUTOK_READERS")
    if got:
        try:
            n = int(got)
        except ValueError:
            raise ValueError(f"GPUTOK_READERS must be a positive int, got {got!r}") from None
        if n < 1:
            raise ValueError(f"GPUTOK_READERS must be a positive int, got {got!r}")
        return n
    return max(1, min(4, os.cpu_count() or 1))


def _cut(sources, todo, ahead, acc, st, start, field) -> Iterator[Batch]:
    """``read_batches``' loop: each source's runs (``ahead``) cut into batches, in order."""
    for i in todo:
        src = sources[i]
        with _read_errors(src):
            if src.kind in ("parquet", "arrow"):
                if len(acc):
                    yield acc.take(st.taken())
                yield from _arrow_source(src, i, start, field, st)
                continue
            for run, disk in ahead.runs(i):
                st.consumed(i, disk)
                at = 0
                while at < len(run):  # the run's documents, cut where a batch reaches its limit
                    at = acc.add(run, at, st.limit)
                    if acc.nbytes >= st.limit:
                        yield acc.take(st.taken())
                        st.grow()
    if len(acc) or st.progress:
        yield acc.take(st.taken())


class _Readers:
    """The runs of each source, in input order. JSON-lines files that the native reader takes
    are read ahead, each on a thread of its own into a bounded queue (``RUNS_AHEAD`` runs of
    about 1 MB), at most ``n`` at a time (the current one and those after it): the native reader
    releases the interpreter's lock, so on many cores the reading keeps up with the encoder.
    Other sources (text files, which are one document each; standard input, whose read cannot
    be called off) are read where their runs are taken, as before. A source's error is raised
    where its runs are taken: in input order, after every document before it."""

    RUNS_AHEAD = 4

    def __init__(self, todo, sources, runs_of, threaded, n: int):
        self.ahead = [i for i in todo if threaded(sources[i])] if n > 1 else []
        self.sources, self.runs_of, self.n = sources, runs_of, n
        self.started: dict = {}  # source index -> (queue, thread)
        self.stop = threading.Event()

    def _start_more(self) -> None:
        while self.ahead and len(self.started) < self.n:
            i = self.ahead.pop(0)
            q: queue.Queue = queue.Queue(self.RUNS_AHEAD)
            t = threading.Thread(target=self._read, args=(i, q), daemon=True,
                                 name=f"gputok-reader-{i}")
            self.started[i] = (q, t)
            t.start()

    def _read(self, i: int, q: queue.Queue) -> None:
        def put(item) -> bool:
            while not self.stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False
        try:
            it = iter(self.runs_of(i, self.sources[i]))
            try:
                for item in it:
                    if not put(("run", item)):
                        return
                    item = None
            finally:
                it.close()  # (its file, now, on this thread)
            put(("end", None))
        except BaseException as e:  # to the consumer, where this source's runs are taken
            put(("error", e))

    def runs(self, i: int):
        self._start_more()
        if i not in self.started:
            yield from self.runs_of(i, self.sources[i])
            return
        q, _t = self.started[i]
        while True:
            kind, item = q.get()
            if kind == "end":
                break
            if kind == "error":
                raise item
            yield item
            item = None
        del self.started[i]
        self._start_more()

    def close(self) -> None:
        self.stop.set()
        for _q, t in list(self.started.values()):
            t.join()
        self.started.clear()


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
        # the runs stay as they are, even one (a device that stages chunks copies from them;
        # the first consumer that wants one buffer joins them: ``PackedRuns``)
        whole = _whole_bytes(self.bufs[0]) if len(self.bufs) == 1 else None
        texts = Packed(whole, off) if whole is not None else PackedRuns(self.bufs, off)
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
