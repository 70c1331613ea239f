"""The manifest of an output directory: ``manifest.json`` and its journal.

``manifest.json`` (what was encoded, with what, and the finished shards) is written whole, to a
temporary name and renamed, when a job opens the directory and when it ends. In between, each
finished shard is one line appended to ``.manifest.journal`` (fsynced): a write of the new
shard only, where rewriting ``manifest.json`` re-serialised every shard so far (quadratic in a
job's shards: 4 MB rewritten and fsynced per shard at 15,000 shards).

A line is ``[k, shard]``: shard ``k`` of the job. Readers (``read_manifest``, ``--resume``)
take ``manifest.json``'s shards, then the journal's lines in order while each is whole (ends
with its newline, parses) and is the next shard; a line for a shard already listed is passed
over (a crash after ``manifest.json`` took the journal in, before the journal was removed), and
the first torn or out-of-order line ends the journal (a crash in the middle of an append). So a
job killed at any moment leaves a manifest that lists exactly the shards it finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FORMAT = "gputok-shards-v2"
MANIFEST = "manifest.json"
JOURNAL = ".manifest.journal"


def journal_shards(outdir, listed: int) -> list:
    """The shards the journal of ``outdir`` adds to a manifest listing ``listed`` shards."""
    try:
        data = (Path(outdir) / JOURNAL).read_bytes()
    except FileNotFoundError:
        return []
    out: list = []
    for line in data.split(b"\n")[:-1]:  # (the last piece has no newline: torn, or empty)
        try:
            k, shard = json.loads(line)
        except (ValueError, TypeError):
            break
        if not isinstance(k, int) or not isinstance(shard, dict):
            break
        if k < listed + len(out):
            continue
        if k > listed + len(out):
            break
        out.append(shard)
    return out


def read_manifest(outdir) -> dict:
    """The manifest of ``outdir`` with the journal's shards folded in (what ``--resume``
    continues from); ``docs`` and ``tokens`` count them.

    >>> read_manifest("out/austen")["complete"]                              # doctest: +SKIP
    True
    """
    m = json.loads((Path(outdir) / MANIFEST).read_text())
    more = journal_shards(outdir, len(m.get("shards", [])))
    if more:
        m["shards"] = m.get("shards", []) + more
        m["docs"] = sum(s["docs"] for s in m["shards"])
        m["tokens"] = sum(s["tokens"] for s in m["shards"])
    return m


def fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ManifestFile:
    """Writes one directory's manifest: ``rewrite`` (whole, atomic; the journal is then
    dropped) and ``append`` (one shard to the journal). Both raise ``OSError`` with nothing
    half-done that a reader would take: a failed append is cut off the journal again."""

    def __init__(self, outdir: Path):
        self.outdir = Path(outdir)
        self.path = self.outdir / MANIFEST
        self.journal = self.outdir / JOURNAL
        self._fd: "int | None" = None  # the journal, open for appends
        self.pending = 0  # journal lines not yet in manifest.json

    def rewrite(self, doc: dict) -> None:
        data = json.dumps(doc, indent=1).encode("utf-8")
        tmp = self.outdir / f".{MANIFEST}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        # only now is the journal redundant (a crash before this line: its lines are passed
        # over, manifest.json lists their shards already)
        self.close()
        self.journal.unlink(missing_ok=True)
        self.pending = 0

    def append(self, k: int, shard: dict) -> None:
        line = json.dumps([k, shard], separators=(",", ":")).encode("utf-8") + b"\n"
        fresh = self._fd is None
        if fresh:
            self._fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        at = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
            if fresh:
                fsync_dir(self.outdir)  # the journal's own name, durable before a shard needs it
        except OSError:
            try:
                os.ftruncate(self._fd, at)
            except OSError:
                pass
            raise
        self.pending += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
