"""A job's processes live and die together (``gputok.corpus.lifetime``): workers end with their parent
however it died, and an output lock names its owner so a dead job's lock is taken over at once.
The end-to-end case (SIGKILL of a real job's main process, then ``--resume``) is in
tests/test_resume.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gputok.corpus.lifetime import JobLock, LockHeld, owner_state, process_start

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_start(pid) is None:
            return True
        time.sleep(0.02)
    return False


def _holder(lock: Path, record: str) -> subprocess.Popen:
    """A process that holds ``lock`` with ``record`` written in it as the owner (as a job's
    leftover worker would hold a dead job's lock)."""
    p = _python(f"""
        import fcntl, os, sys, time
        fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, {record!r}.encode())
        print("held", flush=True)
        time.sleep(120)
    """)
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    return p


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("owner", ["gone", "pid reused"])
def test_a_lock_whose_owner_is_gone_is_taken_over(tmp_path, owner):
    import socket

    lock = tmp_path / ".gputok.lock"
    if owner == "gone":
        record = f"{_dead_pid()} 12345 {socket.gethostname()}\n"
    else:  # a live process has the pid now, but it started later than the owner did
        record = f"{os.getpid()} 1 {socket.gethostname()}\n"
    holder = _holder(lock, record)
    try:
        assert owner_state(record)[0] == "gone"
        mine = JobLock(lock).acquire()
        assert mine.stale == f"pid {record.split()[0]} on {socket.gethostname()}"
        assert lock.read_text().split()[0] == str(os.getpid())
        with pytest.raises(LockHeld, match=f"another gputok job \\(pid {os.getpid()} on "):
            JobLock(lock).acquire()  # and the new lock is a lock
        mine.release()
    finally:
        holder.kill()
        holder.wait()


def test_a_live_owner_keeps_its_lock_and_is_named(tmp_path):
    import socket

    lock = tmp_path / ".gputok.lock"
    holder = _python(f"""
        from gputok.corpus.lifetime import JobLock
        import time
        JobLock({str(lock)!r}).acquire()
        print("held", flush=True)
        time.sleep(120)
    """)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(LockHeld, match=f"another gputok job \\(pid {holder.pid} on "
                                           f"{socket.gethostname()}\\) is writing there"):
            JobLock(lock).acquire()
    finally:
        holder.kill()
        holder.wait()
    mine = JobLock(lock).acquire()  # the kernel dropped the dead holder's lock
    assert mine.stale is None
    mine.release()


def test_an_unknown_owner_is_never_taken_over(tmp_path):
    lock = tmp_path / ".gputok.lock"
    holder = _holder(lock, "")  # an older gputok's lock: no owner recorded
    try:
        with pytest.raises(LockHeld, match="an unknown process"):
            JobLock(lock).acquire()
        other = f"{_dead_pid()} 1 another-host.example\n"
        assert owner_state(other) == ("unknown", f"pid {other.split()[0]} on another-host.example")
    finally:
        holder.kill()
        holder.wait()


def test_a_forked_child_does_not_keep_the_lock_of_a_dead_parent(tmp_path):
    lock = tmp_path / ".gputok.lock"
    job = _python(f"""
        import os, time
        from gputok.corpus.lifetime import JobLock
        JobLock({str(lock)!r}).acquire()
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(w, b"x")  # after the fork handlers ran (a killed parent must not race them)
            time.sleep(120)
            os._exit(0)
        os.read(r, 1)
        print(child, flush=True)
        os.kill(os.getpid(), 9)
    """)
    child = int(job.stdout.readline())
    job.wait()
    try:
        mine = JobLock(lock).acquire()  # at once, and not as a takeover: the child never held it
        assert mine.stale is None
        mine.release()
    finally:
        os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("how", ["prctl", "watch"])
def test_a_worker_blocked_in_a_read_ends_with_its_parent(how):
    """The worker reads a pipe whose write end it holds itself (as a forked pool worker does):
    no Python code of its own would run again. ``watch``: without prctl, the parent-pid watch
    thread ends it."""
    no_prctl = "sys.platform = 'darwin'" if how == "watch" else ""
    job = _python(f"""
        import os, sys
        import multiprocessing as mp
        from gputok.corpus import lifetime

        def worker(parent):
            {no_prctl}
            lifetime.die_with_parent(parent)
            r, w = os.pipe()
            os.read(r, 1)  # never returns

        ctx = mp.get_context("fork")
        p = ctx.Process(target=worker, args=(os.getpid(),))
        p.start()
        print(p.pid, flush=True)
        import time
        time.sleep(0.5)
        os.kill(os.getpid(), 9)
    """)
    worker = int(job.stdout.readline())
    job.wait()
    try:
        assert _gone(worker), f"the worker {worker} outlived its SIGKILLed parent"
    finally:
        if process_start(worker) is not None:
            os.kill(worker, signal.SIGKILL)
