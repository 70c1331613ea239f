"""The encoder pool: batches encoded in order, by this process, by one pipeline thread per GPU
(``DeviceThreads``), or by one worker process per entry of a plan (cores), and handed on as
``(batch, ids, offsets)``.

Performance notes:
- CPU workers are processes, not threads: the numpy backend spends much of its time in Python
  (pre-tokenization, cache lookups), so threads serialise on the GIL. They are forked, so they
  share the loaded vocabulary and tables copy-on-write. Several GPUs are threads of this
  process (``DeviceThreads``): a GPU's pipeline spends its host time in native calls and
  waits that release the GIL, and a process per GPU pickled every batch and its ids through a
  pipe. (Several workers on one GPU are still spawned processes: a CUDA context does not
  survive fork.)
- Each worker keeps its own piece cache, so N workers pay the cold-cache misses N times: with
  two workers the total CPU time was ~25% above one worker's on the 36 MB test corpus.
- One encoder in this process (the native CPU backend's chunk workers already use every core)
  reads the next batch on a thread while the current one is encoded (``read_ahead``): the JSON
  parsing (~12 ms per MB) overlaps the kernels, which run without the GIL; at most two batches
  exist at once, as before (the loop drops its batch before asking for the next).
- Batches go round-robin, worker ``k`` takes batches ``k, k + N, ...``, and results are read
  back in the same order, so output order is input order with no reordering buffer. At most two
  batches per worker are in flight, which bounds memory at ``~3 N`` batches. A work-stealing
  queue would balance uneven batches better but needs a reorder buffer of unbounded size when
  one batch is slow; batches are cut to equal byte sizes, so round-robin loses little.
"""

from __future__ import annotations

import os

import numpy as np

from ..backends import device_available, device_count, get_backend, is_gpu
from ..specials import DisallowedSpecialError
from .batches import Batch
from .lifetime import die_with_parent

def append_eot(ids: np.ndarray, offsets: np.ndarray, eot: int):
    """Every document followed by ``eot``: ``(ids, offsets)`` of the longer documents.

    >>> append_eot(np.array([1, 2, 3]), np.array([0, 2, 3]), 9)[0].tolist()
    [1, 2, 9, 3, 9]
    """
    n = len(offsets) - 1
    out = np.empty(len(ids) + n, dtype=ids.dtype)
    new_off = np.asarray(offsets, dtype=np.int64) + np.arange(n + 1)
    mask = np.ones(len(out), dtype=bool)
    mask[new_off[1:] - 1] = False
    out[mask] = ids
    out[new_off[1:] - 1] = eot
    return out, new_off


AUTO_BYTES_PER_WORKER = 32 << 20  # below this a worker's start-up (~1 s) outweighs its help


def plan_workers(backend: str = "auto", *, devices=None, workers: "int | str" = "auto",
                 total_bytes: "int | None" = None, cpu_count: "int | None" = None) -> list:
    """The backend name of each worker (a process; a thread per GPU: ``DeviceThreads``).

    ``devices`` (``"all"``, ``"0,1"`` or a list of ints) gives one worker per GPU,
    ``cuda:<index>``; otherwise ``workers`` CPU workers all use ``backend`` (``"auto"``: one per
    core, but one per 32 MB of input at most, as starting a worker takes about a second).

    >>> plan_workers("numpy", workers=3)
    ['numpy', 'numpy', 'numpy']
    >>> plan_workers(devices="0,2")
    ['cuda:0', 'cuda:2']
    """
    if devices is not None:
        if devices == "all":
            try:
                idx = list(range(device_count("cuda")))
            except RuntimeError as e:
                raise RuntimeError(f"--devices all: no CUDA device ({e})") from None
        elif isinstance(devices, str):
            try:
                idx = [int(x) for x in devices.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"--devices {devices!r}: expected 'all' or GPU indices like "
                                 "0,1,2") from None
        else:
            idx = [int(x) for x in devices]
        if not idx or len(set(idx)) != len(idx) or min(idx) < 0:
            raise ValueError(f"--devices {devices!r}: expected distinct GPU indices like 0,1")
        return [f"cuda:{i}" for i in idx]
    if workers == "auto":
        n = cpu_count or os.cpu_count() or 1
        if is_gpu(backend):
            n = 1  # one process drives a GPU; more would only contend for it
        if total_bytes is not None:
            n = max(1, min(n, total_bytes // AUTO_BYTES_PER_WORKER))
    else:
        n = int(workers)
        if n < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
    return [backend] * n


def check_backends(backends) -> None:
    """Unknown or unavailable backends fail here, before any work, not on the first batch.
    ``cuda:<index>`` is checked by its worker (opening every GPU here would cost each one a
    context in this process)."""
    for name in dict.fromkeys(backends):
        if ":" not in name:
            get_backend(name)
            continue
        ok, why = device_available(name)
        if not ok:
            raise RuntimeError(f"--devices / {name}: the device is not available ({why})")


def _load_encoding(spec):
    import gputok

    kind, value = spec
    if kind == "path":
        return gputok.load(value)
    if kind == "name":
        return gputok.get_encoding(value)
    return value


def _encode(enc, texts, backend, opts):
    ids, offsets = enc.encode_batch_arrays(texts, allowed_special=opts["allowed"],
                                           disallowed_special=opts["disallowed"],
                                           backend=backend, errors=opts["errors"],
                                           add_special_tokens=opts["add_special_tokens"])
    if opts["eot"] is not None:
        ids, offsets = append_eot(ids, offsets, opts["eot"])
    return ids, offsets


def _worker_main(spec, backend, opts, inq, outq, parent):
    """A pool process: load the vocabulary once, then encode batches until told to stop (or
    until the parent is gone, however it died: a SIGKILLed job must not leave workers behind,
    ``lifetime.die_with_parent``)."""
    import queue
    import signal

    # Ctrl-C is the driver's to handle (it keeps the finished documents, then stops the
    # workers); SIGTERM ends a worker at once (a forked worker inherits the CLI's handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent)
    try:
        enc = _load_encoding(spec)
    except Exception as e:  # reported on the first batch
        enc, load_error = None, e
    while True:
        try:
            item = inq.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                os._exit(0)  # not a normal exit: it would join a queue feeder that cannot drain
            continue
        if item is None:
            return
        try:
            if enc is None:
                raise load_error
            outq.put(("ok", _encode(enc, item, backend, opts)))
        except DisallowedSpecialError as e:
            outq.put(("special", getattr(e, "doc", 0), e.token))
        except Exception as e:
            outq.put(("error", type(e).__name__, str(e)))


def read_ahead(batches, depth: int = 1):
    """Yield the items of ``batches``, the next ``depth`` read on a background thread while the
    caller works on the current one (a single encoder spends most of its time in native code
    without the GIL: reading and parsing the next batch costs its wall time almost nothing).
    At most ``depth + 1`` batches exist at once: the caller's and those read ahead. An error
    while reading is raised here, at the batch where it happened; stopping early (an error or
    Ctrl-C in the caller) stops the reader before its next batch."""
    import queue
    import threading

    handoff: queue.Queue = queue.Queue(maxsize=depth)
    want = threading.Semaphore(depth)  # the caller's permission to read more batches
    stop = threading.Event()

    def reader():
        it = iter(batches)
        try:
            while True:
                want.acquire()  # the previous batch was taken: read the next
                if stop.is_set():
                    return
                b = next(it, None)
                if b is None:
                    handoff.put(("end", None))
                    return
                handoff.put(("batch", b))
                b = None
        except BaseException as e:  # to the caller, at the failed batch
            handoff.put(("error", e))

    t = threading.Thread(target=reader, name="gputok-read", daemon=True)
    t.start()
    try:
        while True:
            kind, item = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            want.release()  # read the next one while the caller works on this one
            yield item
            item = None
    finally:
        stop.set()
        want.release()


class DeviceThreads:
    """One encoding pipeline per GPU, in this process (``gputok encode --devices``): a thread
    per device, each with its own backend (``cuda:<i>``: its own CUDA context, memory pools,
    budget and staging; the adapter enters its GPU for everything it does), batch k on device
    k mod N, at most two batches a device in flight, results handed on in input order (so the
    shards, and ``--resume``, are what one encoder makes). Batches are read ahead on a host
    thread (``read_ahead``), each device packs its chunks into its own pinned staging on the
    host's cores, and the shard writer gets each batch's ids as they arrive. Each device keeps
    its memory for the whole job (``Backend.holding``).

    Threads rather than a process per GPU: no batch or ids pickled through a pipe (two copies
    of every byte), one vocabulary in memory, and the encoding need not be sent by name."""

    def __init__(self, enc, backends: list, opts: dict):
        import concurrent.futures
        import contextlib

        self.enc, self.backends, self.opts = enc, backends, opts
        self.encoders = [get_backend(b) for b in backends]
        self.held = contextlib.ExitStack()
        for be in self.encoders:
            self.held.enter_context(be.holding())
        self.threads = [concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"gputok-{b}")
                        for b in backends]

    def map(self, batches):
        from collections import deque

        n = len(self.encoders)
        inflight: deque = deque()
        it = read_ahead(batches, depth=2 * n)
        sent = 0
        exhausted = False
        try:
            while True:
                while not exhausted and len(inflight) < 2 * n:
                    b = next(it, None)
                    if b is None:
                        exhausted = True
                        break
                    if len(b):
                        k = sent % n
                        inflight.append((self.threads[k].submit(
                            _encode, self.enc, b.texts, self.encoders[k], self.opts), b))
                        sent += 1
                    else:
                        inflight.append((None, b))
                if not inflight:
                    return
                fut, b = inflight.popleft()
                if fut is None:
                    yield b, np.zeros(0, np.uint32), np.zeros(1, np.int64)
                    continue
                try:
                    ids, offsets = fut.result()
                except DisallowedSpecialError as e:
                    raise SpecialInBatch(e.token, getattr(e, "doc", 0)) from None
                yield b, ids, offsets
        except SpecialInBatch as e:
            e.batch = b
            raise
        finally:
            for fut, _ in inflight:  # (an error or Ctrl-C: queued batches are dropped)
                if fut is not None:
                    fut.cancel()

    def close(self) -> None:
        for t in self.threads:
            t.shutdown(wait=True, cancel_futures=True)
        self.held.close()


class Pool:
    """Encodes batches in order with one process per entry of ``backends`` (see module notes),
    or, for several distinct GPUs, one thread per GPU (``DeviceThreads``). With a single
    worker it runs in this process, with no pool at all."""

    @staticmethod
    def device_threads(backends: list) -> bool:
        """Whether ``backends`` run as ``DeviceThreads``: several GPUs, each named once."""
        return len(backends) > 1 and all(map(is_gpu, backends)) and \
            len(set(backends)) == len(backends)

    def __init__(self, enc, spec, backends: list, opts: dict):
        self.enc, self.spec, self.backends, self.opts = enc, spec, backends, opts
        self.procs = []
        self.devices = DeviceThreads(enc, backends, opts) if self.device_threads(backends) \
            else None
        if len(backends) > 1 and self.devices is None:
            import multiprocessing as mp

            # fork shares the loaded vocabulary and merge tables copy-on-write (no per-worker
            # start-up); a CUDA context does not survive fork, so GPU workers are spawned
            gpu = any(map(is_gpu, backends))
            ctx = mp.get_context("spawn" if gpu or os.name != "posix" else "fork")
            for b in backends:
                inq, outq = ctx.Queue(), ctx.Queue()
                p = ctx.Process(target=_worker_main, daemon=True,
                                args=(spec, b, opts, inq, outq, os.getpid()))
                p.start()
                self.procs.append((p, inq, outq))

    def map(self, batches):
        """Yield ``(batch, ids, offsets)`` in input order."""
        if self.devices is not None:
            yield from self.devices.map(batches)
            return
        if not self.procs:
            with get_backend(self.backends[0]).holding():  # (a GPU keeps its memory: the job)
                for b in read_ahead(batches):
                    try:
                        ids, offsets = self._run_local(b)
                    except SpecialInBatch as e:
                        e.batch = b
                        raise
                    yield b, ids, offsets
            return
        from collections import deque

        n = len(self.procs)
        inflight: deque = deque()
        sent = 0
        it = iter(batches)
        exhausted = False
        while True:
            while not exhausted and len(inflight) < 2 * n:
                b = next(it, None)
                if b is None:
                    exhausted = True
                    break
                if len(b):
                    self.procs[sent % n][1].put(b.texts)
                    inflight.append((sent % n, b))
                    sent += 1
                else:
                    inflight.append((None, b))
            if not inflight:
                return
            k, b = inflight.popleft()
            if k is None:
                yield b, np.zeros(0, np.uint32), np.zeros(1, np.int64)
                continue
            try:
                ids, offsets = self._result(k, b)
            except SpecialInBatch as e:
                e.batch = b
                raise
            yield b, ids, offsets

    def _run_local(self, b: Batch):
        if not len(b):
            return np.zeros(0, np.uint32), np.zeros(1, np.int64)
        try:
            return _encode(self.enc, b.texts, self.backends[0], self.opts)
        except DisallowedSpecialError as e:
            raise SpecialInBatch(e.token, getattr(e, "doc", 0)) from None

    def _result(self, k, b):
        import queue

        p, _inq, outq = self.procs[k]
        while True:
            try:
                msg = outq.get(timeout=1.0)
                break
            except queue.Empty:
                if not p.is_alive():
                    raise RuntimeError(f"encoder worker {k} ({self.backends[k]}) died with exit "
                                       f"code {p.exitcode}") from None
        if msg[0] == "ok":
            return msg[1]
        if msg[0] == "special":
            raise SpecialInBatch(msg[2], msg[1])
        raise RuntimeError(f"encoder worker {k} ({self.backends[k]}): {msg[1]}: {msg[2]}")

    def close(self, *, now: bool = False):
        """Stop the workers: let them finish (``now=False``) or terminate them at once."""
        if self.devices is not None:
            self.devices.close()
            self.devices = None
        if now:
            for p, inq, outq in self.procs:
                p.terminate()
                # a batch still in a pipe nobody will read would block the queue's feeder
                # thread, and the interpreter joins that thread at exit: the job would hang
                # after Ctrl-C instead of exiting. What is abandoned here is re-read on --resume.
                inq.cancel_join_thread()
                outq.cancel_join_thread()
        for p, inq, _ in self.procs:
            if p.is_alive() and not now:
                try:
                    inq.put(None)
                except (OSError, ValueError):
                    pass
        for p, _, _ in self.procs:
            p.join(timeout=5)
            if p.is_alive():  # deaf to SIGTERM (stopped, or stuck in native code): SIGKILL
                p.kill()
                p.join(timeout=5)
        self.procs = []


class SpecialInBatch(ValueError):
    """A disallowed special token in document ``doc`` of a batch (``batch`` is set on the way
    out of ``Pool.map``, so the message can name the file and line)."""

    def __init__(self, token, doc):
        super().__init__(token)
        self.token, self.doc = token, doc
