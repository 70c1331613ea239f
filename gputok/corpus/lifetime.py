"""A job's processes live and die together: workers that exit with their parent, and an output
lock that names its owner, so a lock left by a dead job is recognised as stale.

Why both halves: an out-of-memory kill (SIGKILL) of a job's main process runs no cleanup. Its
pool workers must notice on their own (``die_with_parent``), and the next ``--resume`` must not
wait on anything the dead job left (``JobLock``). The lock is an ``flock`` on ``.gputok.lock``,
which the kernel drops when the last descriptor of it closes; forked workers would inherit that
descriptor and keep the lock after the job died, so it is closed in every forked child, and the
file records the owner's pid and start time: a lock whose owner is gone is replaced at once.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 0.5  # how often a worker checks that its parent is alive (where prctl is missing)


def die_with_parent(parent: int) -> None:
    """End this process as soon as the process ``parent`` is gone, whatever killed it.

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``, set through
    libc; it fires when the thread that started this process ends, and a job's pool lives and
    dies in one call on one thread). Everywhere, a daemon thread also watches the parent pid
    and ends the process with ``os._exit``: a worker blocked in a pipe read, or in the queue
    feeder's join at a normal exit (the pipe full, its reader dead), never reaches a Python
    check of its own.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the watch below still ends the process
            pass
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(0)

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(WATCH_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="gputok-parent-watch", daemon=True).start()


def process_start(pid: int) -> "str | None":
    """When process ``pid`` started, as a token that differs for a later process reusing the
    pid (Linux: clock ticks since boot from /proc; elsewhere ``ps``); None when there is no such
    process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # the command name (field 2) may hold spaces and parentheses: fields after its last ')'
        return stat[stat.rindex(b")") + 2:].split()[19].decode()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, ValueError, IndexError):
        pass
    import subprocess

    try:
        r = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return _alive_token(pid)
    if r.returncode not in (0, 1):
        return _alive_token(pid)
    return r.stdout.strip().replace(" ", "_") or None


def _alive_token(pid: int) -> "str | None":
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "?"


def _owner_record() -> str:
    return f"{os.getpid()} {process_start(os.getpid()) or '?'} {socket.gethostname()}\n"


def _owner_text(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def owner_state(record: str) -> "tuple[str, str]":
    """``(state, words)`` for the owner record of a lock file: ``state`` is ``"gone"`` when the
    owner process no longer exists on this host (its pid is free, or taken by a later process),
    ``"alive"`` when it runs, ``"unknown"`` when the record cannot tell (empty, another host)."""
    parts = record.split()
    if len(parts) != 3 or not parts[0].isdigit():
        return "unknown", "an unknown process"
    pid, start, host = int(parts[0]), parts[1], parts[2]
    words = f"pid {pid} on {host}"
    if host != socket.gethostname():
        return "unknown", words
    now = process_start(pid)
    if now is None or (start != "?" and now not in ("?", start)):
        return "gone", words
    return "alive", words


_HELD: set = set()  # descriptors of the locks this process holds


def _close_in_child() -> None:
    # a forked child must not keep the job's lock alive after the job died (flock belongs to
    # the open file, and every inherited descriptor holds it): the child's copies are closed,
    # never unlocked (LOCK_UN on a shared open file would drop the parent's lock too)
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class LockHeld(RuntimeError):
    """Another live job holds the lock; the message names it."""


class JobLock:
    """``flock`` on ``path`` held by this process alone, its owner recorded in the file.

    ``acquire()`` takes the lock; when another process holds it, the recorded owner decides:
    a live owner raises ``LockHeld``; an owner that is gone (its workers or another inheritor
    still hold the old file open) gets its file replaced by a fresh one, which is locked, and
    ``stale`` says whose lock was taken over."""

    def __init__(self, path):
        self.path = str(path)
        self.fd: "int | None" = None
        self.stale: "str | None" = None

    def acquire(self) -> "JobLock":
        try:
            import fcntl
        except ImportError:  # no flock on this platform: the lock is advisory anyway
            return self
        for _attempt in range(3):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                record = _owner_text(fd)
                state, words = owner_state(record)
                if state != "gone":
                    os.close(fd)
                    raise LockHeld(f"another gputok job ({words}) is writing there") from None
                # the owner died; what holds the old file is not writing here (a job's workers
                # never write the output). A new file takes the lock's place.
                self.stale = words
                if _same_file(fd, self.path):  # not already replaced by another new job
                    try:
                        os.unlink(self.path)
                    except FileNotFoundError:
                        pass
                os.close(fd)
                continue
            if not _same_file(fd, self.path):  # replaced between open and flock: again
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, _owner_record().encode())
            self.fd = fd
            _HELD.add(fd)
            return self
        raise LockHeld(f"the lock file {self.path} keeps changing under this job")

    def release(self) -> None:
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.close(self.fd)
            self.fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
