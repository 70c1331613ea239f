"""The first step of a corpus job: every input expanded and checked before any work.

``resolve_inputs`` turns what the user named into ``Source``s, or one ``CorpusError`` listing
every problem, so that a missing second file or a wrong ``--field`` fails in a second, not after
an hour:

* ``.txt``: the whole file is one document.
* ``.jsonl`` / ``.json``: one JSON object per line, the document is ``obj[field]``; blank lines
  are skipped; a UTF-8 byte-order mark at the start of the file is skipped. The first line is
  read now: a wrong field is found before the files ahead of it are encoded.
* ``.parquet``, ``.arrow`` / ``.feather`` (Arrow IPC file or stream): the string column
  ``field``, checked in the schema now.
* ``.gz`` and ``.zst`` on any of the text kinds (``.zst`` needs ``pip install zstandard``).
* ``-``: standard input, read as JSON lines (or as one text with ``input_format="txt"``).
* a directory: a dataset as users have it (``dataset_files``): its data files, sorted by path,
  not its documentation and metadata; a glob (``data/*.jsonl``, ``data/**/*.parquet``): its
  matches, sorted.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import os
import zlib
from pathlib import Path

from .sources import BOM, CorpusError, Source, open_text, parse_json_line

KINDS = ("txt", "jsonl", "parquet", "arrow")
_SUFFIX_KIND = {".txt": "txt", ".text": "txt", ".md": "txt", ".jsonl": "jsonl", ".json": "jsonl",
                ".ndjson": "jsonl", ".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow",
                ".ipc": "arrow"}


def kind_of(name: str) -> "tuple[str | None, str | None]":
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
        elif _matches(rel, include) or (kind_of(p.name)[0] and not _matches(rel, NOT_DATA)):
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
    for spec in specs:
        if isinstance(spec, Source):  # checked already (by the caller's own resolve_inputs)
            out.append(spec)
            continue
        spec = str(spec)
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
    kind, comp = kind_of(os.path.basename(p))
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
        problem = check_arrow_field(p, kind, field)
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
        with open_text(p, comp) as (f, _raw):
            for lineno in range(1, 1001):
                # at most 1 MB: a first line that is a 200 MB document is checked when read
                line = f.readline(1 << 20)
                if not line or (len(line) == 1 << 20 and not line.endswith(b"\n")):
                    return None
                if lineno == 1 and line.startswith(BOM):
                    line = line[3:]
                if line.strip():
                    parse_json_line(line, p, lineno, field, "replace")
                    return None
    except CorpusError as e:
        return str(e)
    except (EOFError, OSError, zlib.error) as e:
        return f"{p}: cannot read ({type(e).__name__}: {e})"
    except Exception as e:  # zstandard's errors have no common base with the stdlib's
        return f"{p}: cannot read ({type(e).__name__}: {e})"
    return None


def check_arrow_field(p: str, kind: str, field: str) -> "str | None":
    try:
        import pyarrow as pa
    except ImportError:
        return f"{p}: reading {kind} needs pyarrow: pip install 'gputok[arrow]'"
    try:
        schema = _arrow_schema(p, kind)
    except Exception as e:
        return f"{p}: not a readable {kind} file ({type(e).__name__}: {e})"
    if field not in schema.names:
        return f"{p}: no column {field!r} (columns: {', '.join(schema.names[:8])}); choose --field"
    t = schema.field(field).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return f"{p}: column {field!r} is {t}, not a string column"
    return None


def _arrow_schema(p: str, kind: str):
    import pyarrow as pa

    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(p).schema_arrow
    try:
        return pa.ipc.open_file(p).schema
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(p).schema


def total_input_bytes(paths) -> int:
    """Bytes on disk of the inputs (compressed size for .gz/.zst: progress counts the same)."""
    return sum(Path(p).stat().st_size for p in paths if str(p) != "-" and Path(p).is_file())
