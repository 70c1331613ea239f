"""Output shards: capped, written atomically, checksummed, listed in a manifest; exact resume.

Layout of an output directory (``npy`` shown; other formats differ only in the shard files)::

    manifest.json              what was encoded, with what, and every finished shard
    shard_00000.ids.npy        a shard's files, named by ``formats``
    shard_00000.offsets.npy
    .gputok.lock               held while a job writes here: two jobs never share a directory
                               (one left by a dead job is taken over: ``lifetime``)

The rules that make a job killed at any moment lose nothing and duplicate nothing:

1. A shard holds whole documents and at most ``cap_tokens`` tokens / ``cap_bytes`` bytes (a
   single document larger than the cap is a shard of its own: documents are never split, that
   would change ids).
2. Its files are written to hidden temporary names (``.shard_00000.bin.tmp``), fsynced, and
   renamed into place; only then is the shard listed in the manifest (a line appended to its
   journal, ``manifest``) with each file's size and checksum (``checksum``: xxh64, or sha256)
   and the input position just after its last document. Shards are written on a thread of
   their own while the next is encoded.
3. ``--resume`` re-hashes the listed shards (the first that fails, and all after it, are dropped
   with a warning), deletes temporary files and shard files the manifest does not list (a kill
   between rename and manifest leaves such files), and reads the input from the last listed
   position. So the shards of any number of interrupted runs are exactly one uninterrupted run's
   documents, each once, in order.
4. A failed write (disk full, quota, file-size limit, read-only) removes its temporary files and
   raises ``ShardWriteError`` naming the file and saying what the manifest still holds.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

import numpy as np

from ..backends import huge_block
from .checksum import choose, file_digest, hasher, shard_algorithm
from .formats import Format, get_format
from .lifetime import JobLock, LockHeld
from .manifest import FORMAT, JOURNAL, MANIFEST, ManifestFile, fsync_dir, journal_shards
from .manifest import read_manifest

LOCK = ".gputok.lock"  # held by the job writing here; records its pid and start time
_OURS = re.compile(r"^(shard_\d{5}\..+|\.shard_\d{5}\..+\.tmp|\.manifest\.json\.tmp|"
                   r"\.manifest\.journal)$")
# what must match for --resume to continue a job: anything that changes the ids or their layout
RESUME_KEYS = ("output_format", "encoding", "n_vocab", "inputs", "field", "input_format",
               "append_eot", "allowed_special", "special_as_text", "errors",
               "add_special_tokens")


HASH_AHEAD = 1 << 16  # pieces from this size on are hashed on the helper thread
_HASHER: list = []  # (pid, executor)


def _hash_queue():
    """The helper thread that hashes shard files while they are written (one per process: a
    fork()ed child makes its own)."""
    import concurrent.futures

    if not _HASHER or _HASHER[0][0] != os.getpid():
        _HASHER[:] = [(os.getpid(), concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="gputok-checksum"))]
    return _HASHER[0][1]


class ShardWriteError(RuntimeError):
    """Writing a shard or the manifest failed; the message names the file and what is kept."""


class _Hashing:
    """A write-only file that hashes what passes through (one pass: no re-read to checksum).

    The hashing runs on a helper thread (``_hash_queue``: one worker, so each file's pieces are
    hashed in order) while this thread writes the next piece and syncs the file: hashlib and
    file writes both release the GIL. ``hexdigest()`` waits for the last piece. A piece must not
    change after ``write`` returns: the writers pass bytes or views of arrays they own."""

    def __init__(self, f, algorithm: str):
        self.f, self.h, self.n, self.failed = f, hasher(algorithm), 0, False
        self._last = None  # the newest queued hash update

    def write(self, b) -> int:
        try:
            self.f.write(b)
        except OSError:
            self.failed = True  # so the error names this file, not the last one opened
            raise
        n = memoryview(b).nbytes
        if n >= HASH_AHEAD or self._last is not None:  # once one is queued, all are: in order
            self._last = _hash_queue().submit(self.h.update, b)
        else:
            self.h.update(b)
        self.n += n
        return n

    def hexdigest(self) -> str:
        if self._last is not None:
            self._last.result()
        return self.h.hexdigest()

    def tell(self) -> int:
        return self.n

    def flush(self) -> None:
        self.f.flush()

    closed = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:  # the shard writer closes the real file itself
        pass


class ShardWriter:
    """Collects encoded batches and writes them as capped shards (see the module docstring).

    ``describe`` turns an input position into words for messages (``file:line``).

    >>> w = ShardWriter("out", fmt="npy", meta={}, n_vocab=100277, cap_tokens=1 << 20)
    >>> w.add(ids, offsets, ends); w.close()                                 # doctest: +SKIP
    """

    def __init__(self, outdir, *, fmt="npy", meta: dict, n_vocab: int,
                 cap_tokens: "int | None" = None, cap_bytes: "int | None" = None,
                 resume: bool = False, overwrite: bool = False, describe=str, warn=None,
                 checksum: str = "auto"):
        self.outdir = Path(outdir)
        self.checksum = choose(checksum)  # new shards' (each listed shard names its own)
        self.fmt: Format = get_format(fmt) if isinstance(fmt, str) else fmt
        self.dtype = self.fmt.dtype(n_vocab)
        for name, cap in (("cap_tokens", cap_tokens), ("cap_bytes", cap_bytes)):
            if cap is not None and (not isinstance(cap, (int, np.integer)) or cap < 1):
                raise ValueError(f"{name} must be a positive int, got {cap!r}")
        self.cap_tokens, self.cap_bytes = cap_tokens, cap_bytes
        self.meta = {**meta, "output_format": self.fmt.name, "n_vocab": int(n_vocab)}
        self.describe = describe
        self.warn = warn or (lambda msg: print(f"gputok: warning: {msg}", file=sys.stderr))
        self.manifest_path = self.outdir / MANIFEST
        self._manifest = ManifestFile(self.outdir)
        self.shards: list[dict] = []
        self._counts = (0, 0, 0)  # (shards, docs, tokens) counted so far: _counted
        self.complete = False
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_tokens = self._pending_docs = 0
        self._pending_end = None
        self._lock = None
        self._io = None  # the thread that writes shards (one at a time, in order)
        self._writing = None  # the shard being written there (a Future)
        try:
            self._open_dir(resume, overwrite)
        except BaseException:
            self.release()
            raise

    # ---- setup: lock, manifest, verification, cleanup ---------------------------------------

    def _open_dir(self, resume: bool, overwrite: bool) -> None:
        self._lock = JobLock(self.outdir / LOCK)
        try:
            self.outdir.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except LockHeld as e:
            raise ShardWriteError(f"{self.outdir}: {e}") from None
        except OSError as e:
            raise ShardWriteError(f"cannot write to the output directory {self.outdir}: "
                                  f"{e.strerror or e}") from None
        if self._lock.stale:
            self.warn(f"{self.outdir}: the job that held it ({self._lock.stale}) is gone; its "
                      "lock is taken over")
        old = None
        if self.manifest_path.exists():
            try:
                old = json.loads(self.manifest_path.read_text())
            except (ValueError, OSError) as e:
                raise ShardWriteError(f"{self.manifest_path}: unreadable manifest ({e}); pass "
                                      "--overwrite to start again") from None
        ours = [p for p in self.outdir.iterdir() if _OURS.match(p.name)]
        if old is not None and resume:
            for key in RESUME_KEYS:
                if old.get(key) != self.meta.get(key):
                    raise ValueError(f"{self.manifest_path}: cannot resume, the {key} changed "
                                     f"(the job has {old.get(key)!r}, now {self.meta.get(key)!r}); "
                                     "rerun with the same options, or --overwrite")
            listed = old.get("shards", [])
            listed = listed + journal_shards(self.outdir, len(listed))
            self.shards, self._counts = self._verified(listed), (0, 0, 0)
            self.complete = bool(old.get("complete")) and len(self.shards) == len(listed)
        elif old is not None and not overwrite:
            raise ValueError(f"{self.outdir} already holds a gputok output; pass --resume to "
                             "continue it or --overwrite to replace it")
        elif old is None and ours and not (overwrite or resume):
            raise ValueError(f"{self.outdir} holds shard files but no manifest; pass --overwrite "
                             "to replace them")
        listed = {n for s in self.shards for n in s["files"]}
        if resume:
            listed.add(JOURNAL)  # (dropped once manifest.json lists its shards, just below)
        for p in ours:  # temporary files, unlisted shards, or everything (--overwrite)
            if p.name not in listed:
                p.unlink(missing_ok=True)
        self._write_manifest()  # also the probe that the directory is writable, before any work

    def _verified(self, shards: list) -> list:
        for k, s in enumerate(shards):
            algorithm = shard_algorithm(s)
            for name, size, digest in zip(s["files"], s["bytes"], s[algorithm]):
                p = self.outdir / name
                problem = (None if p.exists() and p.stat().st_size == size
                           and file_digest(p, algorithm) == digest else
                           "missing" if not p.exists() else "corrupt")
                if problem:
                    self.warn(f"{p} is {problem}; it and the {len(shards) - k - 1} shard(s) after "
                              "it are encoded again")
                    for later in shards[k:]:
                        for n in later["files"]:
                            (self.outdir / n).unlink(missing_ok=True)
                    return shards[:k]
        return shards

    # ---- state --------------------------------------------------------------------------------

    @property
    def docs_done(self) -> int:
        return self._counted()[0]

    @property
    def tokens_done(self) -> int:
        return self._counted()[1]

    def _counted(self) -> tuple:
        """(docs, tokens) of the listed shards, counted on from the last call (a sum over every
        shard for each new one was quadratic over a long job)."""
        k, docs, tokens = self._counts
        if k > len(self.shards):  # (the list was cut: count again)
            k = docs = tokens = 0
        for sh in self.shards[k:]:
            docs += sh["docs"]
            tokens += sh["tokens"]
        self._counts = (len(self.shards), docs, tokens)
        return docs, tokens

    @property
    def start(self):
        """Input position to continue from: just after the last listed shard's last document."""
        return tuple(self.shards[-1]["end"]) if self.shards else None

    def kept(self) -> str:
        """What the output directory holds, in words, for error and interrupt messages."""
        if not self.shards:
            return f"no shard was finished, so {self.outdir} holds nothing yet"
        return (f"{len(self.shards)} finished shard(s) ({self.docs_done} docs, {self.tokens_done} "
                f"tokens, input up to {self.describe(self.start)}) are kept in {self.outdir}; "
                "rerun with --resume to continue")

    # ---- writing --------------------------------------------------------------------------------

    def add(self, ids: np.ndarray, offsets: np.ndarray, ends: list) -> None:
        """Append a batch of documents; ``ends[i]`` is the input position after document ``i``.
        Shards are written whenever the next document would exceed the cap."""
        with _uninterrupted():
            self._add(ids, offsets, ends)

    def _add(self, ids: np.ndarray, offsets: np.ndarray, ends: list) -> None:
        lens = np.diff(np.asarray(offsets, dtype=np.int64))
        ids = np.asarray(ids)
        base = int(offsets[0]) if len(offsets) else 0
        pos, n = 0, len(lens)
        while pos < n:
            cum_t = self._pending_tokens + np.cumsum(lens[pos:])
            ok = np.ones(n - pos, dtype=bool)
            if self.cap_tokens is not None:
                ok &= cum_t <= self.cap_tokens
            if self.cap_bytes is not None:
                cum_d = self._pending_docs + np.arange(1, n - pos + 1)
                ok &= self.fmt.nbytes(cum_t, cum_d, self.dtype.itemsize) <= self.cap_bytes
            k = n - pos if ok.all() else int(np.argmin(ok))
            if k == 0 and self._pending_docs == 0:
                k = 1  # one document above the cap: a shard of its own
            if k:
                lo, hi = int(offsets[pos]) - base, int(offsets[pos + k]) - base
                self._pending.append((ids[lo:hi], lens[pos:pos + k]))
                self._pending_tokens += hi - lo
                self._pending_docs += k
                self._pending_end = tuple(int(x) for x in ends[pos + k - 1])
                pos += k
            if pos < n:
                self._flush()

    def flush(self) -> None:
        """Write the pending documents as a shard (nothing if none are pending) and wait until
        every shard is written and listed."""
        with _uninterrupted():
            self._flush()
            self._wait()

    def _flush(self) -> None:
        """Hand the pending documents to the writer thread as the next shard. The encoder goes
        on with the next batches while the shard's files are written, hashed and fsynced (file
        writes, fsync and hashlib release the GIL); one shard at a time is written, so the
        shards stay in order and at most one shard's ids wait beyond the pending ones.

        Performance notes: this moves work, it does not remove it: on the null device
        (bench_host.py) the host CPU per byte of the JSONL job is unchanged; what the encoder's
        thread no longer waits for is the files' writes and fsyncs, and (with the 16M-token
        default, a shard per ~64 MB of text) only the last shard is waited for, by ``close``.
        SHA-256 of the shard files (~1.6 GB/s here, already on its own thread while the file is
        written) was the largest part of the job's own host work: XXH64 (``checksum``) is the
        default where the native library is built (64 MB: ~37 -> ~5-20 ms of a core)."""
        if not self._pending_docs:
            return
        parts = [p[0] for p in self._pending]
        n_ids = sum(len(p) for p in parts)
        lens = np.concatenate([p[1] for p in self._pending])
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        write_parts = getattr(self.fmt, "write_parts", None)
        if write_parts is not None:  # the batches' ids as they are, no shard-sized copy
            def write(handles):
                write_parts(handles, parts, n_ids, self.dtype, offsets)
        else:
            def write(handles):
                ids = huge_block(n_ids * self.dtype.itemsize).view(self.dtype)  # fresh 2 MB
                np.concatenate(parts, out=ids, casting="unsafe")                 # pages
                self.fmt.write(handles, ids, offsets)
        end = self._pending_end
        self._pending, self._pending_tokens, self._pending_docs = [], 0, 0
        self._wait()  # (the previous shard: its error, if any, is raised here)
        if self._io is None:
            self._io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gputok-shards")
        self._writing = self._io.submit(self._write_shard, write, n_ids, offsets, end)

    def _wait(self) -> None:
        """Until the shard on the writer thread is written and listed (its error raised)."""
        fut, self._writing = self._writing, None
        if fut is not None:
            fut.result()

    def _write_shard(self, write, n_ids: int, offsets, end) -> None:
        k = len(self.shards)
        names = self.fmt.files(f"shard_{k:05d}")
        tmps = [self.outdir / f".{n}.tmp" for n in names]
        finals = [self.outdir / n for n in names]
        files, hashers = [], []
        current = tmps[0]
        try:
            for t in tmps:
                current = t
                files.append(open(t, "wb"))
                hashers.append(_Hashing(files[-1], self.checksum))
            write(hashers)
            for t, f in zip(tmps, files):
                current = t
                f.flush()
                os.fsync(f.fileno())
                f.close()
            for t, fin in zip(tmps, finals):
                current = fin
                os.replace(t, fin)
            fsync_dir(self.outdir)
        except OSError as e:
            current = next((t for t, h in zip(tmps, hashers) if h.failed), current)
            for f in files:
                try:
                    f.close()
                except OSError:
                    pass
            for p in tmps + finals:
                p.unlink(missing_ok=True)
            raise self._write_error(current, e) from None
        shard = {"files": names, "bytes": [h.n for h in hashers],
                 self.checksum: [h.hexdigest() for h in hashers],
                 "docs": int(len(offsets) - 1), "tokens": int(n_ids),
                 "first_doc": self.docs_done, "end": list(end)}
        try:
            self._manifest.append(k, shard)
        except OSError as e:
            for p in finals:
                p.unlink(missing_ok=True)
            raise self._write_error(self.manifest_path, e) from None
        self.shards.append(shard)

    def _write_error(self, path, e: OSError) -> ShardWriteError:
        what = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                errno.EFBIG: "the file size limit is reached", errno.EROFS: "read-only file system",
                errno.EACCES: "permission denied"}.get(e.errno, e.strerror or str(e))
        return ShardWriteError(f"cannot write {path}: {what}; its temporary files were removed. "
                               + self.kept()[0].upper() + self.kept()[1:])

    def close(self) -> None:
        """Write the last shard and the whole manifest, marked complete."""
        with _uninterrupted():
            self._flush()
            self._wait()
            self.complete = True
            try:
                self._write_manifest()
            except BaseException:
                self.complete = False
                raise
        self.release()

    def release(self) -> None:
        """Stop writing here: wait for the shard being written (an error now is not raised: the
        manifest lists what was finished either way), fold the journal into manifest.json
        where it can (readers that read the file alone see every finished shard), unlock."""
        try:
            self._wait()
        except Exception:
            pass
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None
        if self._manifest.pending and self._lock is not None:
            try:
                self._write_manifest()
            except ShardWriteError:  # (the journal still lists them)
                pass
        self._manifest.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _write_manifest(self) -> None:
        doc = {"format": FORMAT, **self.meta, "dtype": self.dtype.name,  # stored little-endian
               "complete": self.complete, "docs": self.docs_done, "tokens": self.tokens_done,
               "shards": self.shards}
        try:
            self._manifest.rewrite(doc)
        except OSError as e:
            raise self._write_error(self.manifest_path, e) from None


@contextlib.contextmanager
def _uninterrupted():
    """Hold SIGINT and SIGTERM until the block is done (in the main thread; elsewhere they
    never raise), then act on the first one as its handler would have. The writer's pending
    documents, their input end and the shards listed move together: a Ctrl-C between two of
    those updates once wrote a batch's documents with the previous batch's end, and the resumed
    run encoded that batch again (13 documents twice, found by tests/test_resume.py)."""
    kinds = (signal.SIGINT, signal.SIGTERM)
    before = {k: signal.getsignal(k) for k in kinds}
    if threading.current_thread() is not threading.main_thread() or None in before.values():
        yield  # (None: a handler not set from Python, which it cannot put back)
        return
    held: list = []
    for k in kinds:
        signal.signal(k, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        for k, h in before.items():
            signal.signal(k, h)
        if held:
            signum, frame = held[0]
            h = before[signum]
            if callable(h):
                h(signum, frame)  # Python's SIGINT handler raises KeyboardInterrupt, so does cli's
            elif h == signal.SIG_DFL:
                os.kill(os.getpid(), signum)  # the default action, now that it is back


def read_shards(outdir):
    """Yield ``(ids, offsets)`` for every shard listed in ``outdir``'s manifest, in order.

    >>> for ids, offsets in read_shards("out/austen"):                       # doctest: +SKIP
    ...     first_doc = ids[offsets[0]:offsets[1]]
    """
    outdir = Path(outdir)
    m = read_manifest(outdir)
    fmt = get_format(m.get("output_format", "npy"))
    eot = m.get("eot")
    for s in m["shards"]:
        yield fmt.read([outdir / n for n in s["files"]], dtype=np.dtype(m["dtype"]), eot=eot)
