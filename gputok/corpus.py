"""Reading corpora: every input resolved and checked before any work, then streamed in batches.

Inputs (``resolve_inputs``):

* ``.txt``: the whole file is one document.
* ``.jsonl`` / ``.json``: one JSON object per line, the document is ``obj[field]``; blank lines
  are skipped; a UTF-8 byte-order mark at the start of the file is skipped. A line that is not
  JSON, not an object, or lacks the field is an error naming the file and line: a corpus job must
  not silently drop documents.
* ``.parquet``, ``.arrow`` / ``.feather`` (Arrow IPC file or stream): the string column
  ``field``, read through Arrow's buffers in record batches.
* ``.gz`` and ``.zst`` on any of the text kinds (``.zst`` needs ``pip install zstandard``).
* ``-``: standard input, read as JSON lines (or as one text with ``input_format="txt"``).
* a directory: every file of a known kind below it, sorted by path; a glob (``data/*.jsonl``,
  ``data/**/*.parquet``): its matches, sorted.

Files are decoded as strict UTF-8: invalid UTF-8 is an error naming the file, line and byte,
unless ``errors="replace"``. A truncated or corrupt ``.gz``/``.zst`` is an error naming the file
and the last good line.

Positions: every document comes with the input position just after it, ``(file, offset, line)``:
the index of its source, the bytes (of decompressed text) or rows consumed in it, and the line
(or row) number. ``read_batches(..., start=position)`` continues exactly there; that is what makes
``--resume`` exact. Memory: one batch of text (and the document being read) at a time.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import gzip
import os
import zlib
from dataclasses import dataclass, field as _field
from pathlib import Path
from typing import Iterator

import numpy as np

from .corpus_arrow import _arrow_batches, _check_arrow_field, _concat
from .corpus_jsonl import _NO_RUN, _Run, packed_docs, parser
from .sources import CorpusError, Source  # re-exported: gputok.corpus.CorpusError
from .sources import _BOM, _decode, _open_text, _parse_json_line, _parse_json_text, _skip
from .stages.pack import Packed, fix_surrogates

KINDS = ("txt", "jsonl", "parquet", "arrow")
_SUFFIX_KIND = {".txt": "txt", ".text": "txt", ".md": "txt", ".jsonl": "jsonl", ".json": "jsonl",
                ".ndjson": "jsonl", ".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow",
                ".ipc": "arrow"}


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


def _kind_of(name: str) -> "tuple[str | None, str | None]":
    comp = None
    for ext in ("gz", "zst"):
        if name.endswith("." + ext):
            comp, name = ext, name[: -len(ext) - 1]
    return _SUFFIX_KIND.get(os.path.splitext(name)[1].lower()), comp


# A directory is a dataset as users have it: data files beside documentation and metadata.
# These names are never data (a dataset card, a licence, what HF ``datasets`` writes beside its
# Arrow files: dataset_info.json, state.json, dataset_dict.json, and cache-*.arrow, the results
# of ``Dataset.map`` kept in its cache, whose columns are not the dataset's).
NOT_DATA = ("readme", "readme.*", "*.md", "*.markdown", "*.rst", "licen[cs]e", "licen[cs]e.*",
            "copying", "copying.*", "notice", "notice.*", "changelog*", "citation*",
            "dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json",
            "cache-*.arrow", "*.lock", "*.py", "*.sh", "*.yaml", "*.yml", "*.cfg", "*.toml")


def _matches(rel: str, patterns) -> bool:
    """Whether a file (its path relative to the directory given, with /) matches one of the
    globs: a glob with a / is matched against that path, one without against the name."""
    name = rel.rsplit("/", 1)[-1].lower()
    return any(fnmatch.fnmatchcase(rel.lower() if "/" in g else name, g.lower())
               for g in patterns)


def dataset_files(directory: str, *, include=(), exclude=()) -> "tuple[list[str], list[str]]":
    """``(data files, skipped files)`` below ``directory``, each sorted: the files of a known
    input kind, less those whose names are never data (``NOT_DATA``) and those matching an
    ``exclude`` glob; a file matching an ``include`` glob is taken whatever its name. Hidden
    files and folders (``.git``, ``.cache``) are passed over without a word.

    >>> dataset_files("sample")[0]
    ['sample/austen.jsonl']
    """
    data, skipped = [], []
    for p in sorted(Path(directory).rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if any(part.startswith(".") for part in rel.split("/")) or not p.is_file():
            continue
        if _matches(rel, exclude):
            skipped.append(str(p))
        elif _matches(rel, include) or (_kind_of(p.name)[0] and not _matches(rel, NOT_DATA)):
            data.append(str(p))
        else:
            skipped.append(str(p))
    return data, skipped


def resolve_inputs(specs, *, field: str = "text", input_format: str = "auto", include=(),
                   exclude=(), skip_dir=None, note=None) -> "list[Source]":
    """Expand and check every input before any work starts; ``CorpusError`` lists every problem.

    A directory gives its data files (``dataset_files``: documentation and metadata such as
    README.md, licences and HF ``datasets``' dataset_info.json are skipped, and ``note`` is
    called with one line saying what was); ``include`` / ``exclude`` globs add or drop files
    of directories and globs. Directories and globs skip files under ``skip_dir`` (the job's
    output directory: a job that writes Parquet into the folder it reads must not read its own
    shards on the next run).

    >>> [s.kind for s in resolve_inputs(["sample/austen.jsonl"])]
    ['jsonl']
    """
    if input_format not in ("auto",) + KINDS:
        raise ValueError(f"input_format must be auto or one of {', '.join(KINDS)}")
    include, exclude = tuple(include or ()), tuple(exclude or ())
    out: list[Source] = []
    problems: list[str] = []
    for spec in map(str, specs):
        if spec == "-":
            kind = "jsonl" if input_format == "auto" else input_format
            if kind in ("parquet", "arrow"):
                problems.append("-: standard input can be read as jsonl or txt only")
            out.append(Source("-", kind))
            continue
        if any(c in spec for c in "*?[") and not os.path.exists(spec):
            matches = sorted(p for p in _glob.glob(spec, recursive=True) if os.path.isfile(p))
            paths = [p for p in matches if not _matches(p.replace(os.sep, "/"), exclude)]
            if not paths:
                problems.append(f"{spec}: the pattern matches no file"
                                + (" outside --exclude" if matches else ""))
        elif os.path.isdir(spec):
            paths, skipped = dataset_files(spec, include=include, exclude=exclude)
            if skip_dir is not None:
                paths, skipped = _outside(paths, skip_dir), _outside(skipped, skip_dir)
            if skipped and note is not None:
                note(_skipped_line(spec, skipped, bool(exclude)))
            if not paths:
                problems.append(f"{spec}: the directory holds no .txt/.jsonl/.parquet/.arrow "
                                "data file" + (" (--include GLOB takes others)" if skipped
                                               else ""))
        else:
            paths = [spec]
        if skip_dir is not None and paths != [spec]:
            paths = _outside(paths, skip_dir)
        for p in paths:
            problem = _check_file(p, field, input_format, out)
            if problem:
                problems.append(problem)
    if not out and not problems:
        problems.append("no input given")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise CorpusError("; ".join(problems[:5]) + more)
    if sum(s.path == "-" for s in out) > 1:
        raise CorpusError("-: standard input can be given once")
    return out


def _outside(paths: list, directory) -> list:
    skip = os.path.abspath(directory) + os.sep
    return [p for p in paths if not os.path.abspath(p).startswith(skip)]


def _skipped_line(spec: str, skipped: list, excluding: bool) -> str:
    """One line for the files of a directory that are not read."""
    names = [os.path.relpath(p, spec) for p in skipped]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    why = "that are not data or match --exclude" if excluding else "that are not data"
    return f"{spec}: skipped {len(names)} file(s) {why}: {shown} (--include GLOB reads one)"


def _check_file(p: str, field: str, input_format: str, out: list) -> "str | None":
    if not os.path.exists(p):
        return f"{p}: no such file"
    if os.path.isdir(p):
        return f"{p}: is a directory"
    kind, comp = _kind_of(os.path.basename(p))
    if input_format != "auto":
        kind = input_format
    if kind is None:
        return (f"{p}: unknown input kind (expected .txt, .jsonl, .parquet or .arrow, optionally "
                ".gz/.zst; or pass --input-format)")
    if not os.access(p, os.R_OK):
        return f"{p}: not readable (permission denied)"
    if comp == "zst":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            return f"{p}: reading .zst needs zstandard: pip install 'gputok[zst]'"
    if kind in ("parquet", "arrow"):
        if comp:
            return f"{p}: compressed {kind} files are not supported (Parquet compresses inside)"
        problem = _check_arrow_field(p, kind, field)
        if problem:
            return problem
    elif kind == "jsonl":
        problem = _check_first_line(p, comp, field)
        if problem:
            return problem
    out.append(Source(p, kind, comp, os.path.getsize(p)))
    return None


def _check_first_line(p: str, comp, field: str) -> "str | None":
    """The first non-blank line of a JSON-lines file must hold ``field``: a wrong ``--field``
    is found now, not after the files before it have been encoded."""
    try:
        with _open_text(p, comp) as (f, _raw):
            for lineno in range(1, 1001):
                # at most 1 MB: a first line that is a 200 MB document is checked when read
                line = f.readline(1 << 20)
                if not line or (len(line) == 1 << 20 and not line.endswith(b"\n")):
                    return None
                if lineno == 1 and line.startswith(_BOM):
                    line = line[3:]
                if line.strip():
                    _parse_json_line(line, p, lineno, field, "replace")
                    return None
    except CorpusError as e:
        return str(e)
    except (EOFError, OSError, zlib.error) as e:
        return f"{p}: cannot read ({type(e).__name__}: {e})"
    except Exception as e:  # zstandard's errors have no common base with the stdlib's
        return f"{p}: cannot read ({type(e).__name__}: {e})"
    return None


def _docs_from(src: Source, i: int, start, field: str, errors: str, *,
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
        with _open_text(src.path, src.compression) as (f, raw):
            data = f.read()
            text = _decode(data, src.path, None, errors)
            n = len(data)
            del data
            yield text, (i, n, 1), raw.tell() if raw else n
        return
    with _open_text(src.path, src.compression) as (f, raw):
        if offset:
            _skip(f, offset, src)
        readline = f.readline
        while True:
            # readline + del, not `for line in f`: the loop variable would keep the raw bytes
            # alive while they are parsed, 3x a giant line's size in memory instead of 2x
            data = readline()
            if not data:
                return
            line += 1
            offset += len(data)
            if line == 1 and data.startswith(_BOM):
                data = data[3:]
            disk = raw.tell() if raw else offset
            if not data.strip():
                yield None, (i, offset, line), disk
                continue
            text = _decode(data, src.path, line, errors)
            del data
            doc = _parse_json_text(text, src.path, line, field)
            if as_encoded and "\\u" in text:  # only an escape can spell a surrogate
                doc = fix_surrogates(doc)
            del text  # not kept alive in this frame while the batch is encoded
            yield doc, (i, offset, line), disk
            del doc


RAMP_FIRST = 1 << 20  # bytes of text in the first batch (read_batches)


def read_batches(sources: "list[Source]", *, field: str = "text", errors: str = "strict",
                 batch_bytes: int = 8 << 20, start=None, packed: bool = False
                 ) -> Iterator[Batch]:
    """Batches of about ``batch_bytes`` of text, in order, from position ``start`` on.

    A batch never mixes Arrow input with text input (they reach the encoder differently).
    ``packed``: text batches come as ``stages.pack.Packed`` (one UTF-8 buffer: what the encoder
    reads anyway) with their ends as an (n, 3) int64 array, and JSON lines are read by the
    native reader where it can be used (``corpus_jsonl``): the same documents and positions.

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
            else:
                runs = acc.runs(_docs_from(src, i, start, field, errors))
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
    for col, col_ends, disk in _arrow_batches(src, i, start, field, 8192):
        pending.append(col)
        pend_ends += col_ends
        pend_size += col.nbytes
        st.consumed(i, disk)
        if pend_size >= st.limit:
            yield Batch(_concat(pending), pend_ends, pend_size, st.taken())
            pending, pend_ends, pend_size = [], [], 0
            st.grow()
    if pending:
        yield Batch(_concat(pending), pend_ends, pend_size, st.taken())


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
            yield (_NO_RUN if text is None else _Run.one(text, end)), disk

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
        buf = self.bufs[0].tobytes() if len(self.bufs) == 1 else b"".join(self.bufs)
        ends = np.concatenate(self.ends) if self.ends else np.zeros((0, 3), np.int64)
        b = Batch(Packed(buf, off), ends, self.nbytes, progress)
        self.__init__()
        return b


def location(sources: "list[Source]", end) -> str:
    """``file:line`` (or ``file row N``, or ``file``) of the document that ends at ``end``."""
    src = sources[end[0]]
    if src.kind == "txt":
        return src.path
    if src.kind in ("parquet", "arrow"):
        return f"{src.path} row {end[2] - 1}"
    return f"{src.path}:{end[2]}"


def iter_documents(paths, *, field: str = "text", errors: str = "strict"
                   ) -> Iterator[tuple["str | None", int, str]]:
    """Yield ``(document, input_bytes_consumed, location)`` for every document, in order
    (``document`` is None for a blank line, still counted for progress). Used by the trainer:
    documents come as the encoder reads them (a lone surrogate spelled in JSON is U+FFFD, as
    ``train_bpe`` treats a str holding one), so a vocabulary is trained on the text it encodes.

    >>> next(iter_documents(["sample/austen.jsonl"]))[2]
    'sample/austen.jsonl:1'
    """
    sources = resolve_inputs(paths, field=field)
    for i, src in enumerate(sources):
        if src.kind in ("parquet", "arrow"):
            for col, ends, _disk in _arrow_batches(src, i, None, field, 8192):
                for text, end in zip(col.to_pylist(), ends):
                    yield text, 0, location(sources, end)
            continue
        done = 0
        try:
            for text, end, disk in _docs_from(src, i, None, field, errors, as_encoded=True):
                yield text, disk - done, location(sources, end)
                done = disk
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise CorpusError(f"{src.path}: truncated or corrupt {src.compression} data "
                              f"({type(e).__name__}: {e})") from None


def total_input_bytes(paths) -> int:
    """Bytes on disk of the inputs (compressed size for .gz/.zst: progress counts the same)."""
    return sum(Path(p).stat().st_size for p in paths if str(p) != "-" and Path(p).is_file())


# at the bottom: corpus_arrow imports CorpusError and Source from this module
