"""The chunk loop of a host-memory device with chunk workers (the native CPU): each chunk of a
batch runs start to end on one worker thread (the device's ``solo``: every launch at once, on
that thread alone, or its whole sequence as one call), as many side by side as the device has
workers, one more prepared ahead. No chunk waits for another's fences, as the chunks of one
Python thread feeding two streams do (that loop measured 1.6x one thread on 2 cores; the
workers +10-58% over it). Chunks are guided (``guided_ends``): the last ones small, so the
workers finish together whatever each chunk costs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading

import numpy as np

from ...stages.emit import Placement
from ..hostplan import HostChunk
from ..protocol import Ready
from .chunk import chunk_end
from .plan import ModelPlan

# Chunk workers' chunks are guided (guided_target): each takes the bytes left over
# GUIDED_SHARE times the workers, at most the budget and at least GUIDED_MIN bytes
GUIDED_SHARE = 1
GUIDED_MIN = 128 << 10


def guided_target(left: int, budget: int, workers: int) -> int:
    """A chunk worker's next chunk size in bytes: the bytes ``left`` over ``GUIDED_SHARE`` x
    ``workers``, at most ``budget``, at least ``GUIDED_MIN`` (or the budget, if smaller)."""
    return int(max(min(budget, left // (GUIDED_SHARE * workers)), min(GUIDED_MIN, budget)))


def guided_ends(doc_off, start: int, budget: int, workers: int) -> np.ndarray:
        """Chunk ends (document indices) for chunk workers from document ``start`` on: each
        chunk takes about the bytes left over ``GUIDED_SHARE`` x ``workers`` (at most
        ``budget``, at least ``GUIDED_MIN``; ``guided_target``), cut at the document boundary
        nearest that without passing the budget, so the last chunks are small and the workers
        finish together whatever each chunk costs. Chunks of one size (4.02 MB of prose in four
        1 MB chunks on two workers) left a worker idle for 4-13 ms of a 40-60 ms batch: a chunk's
        cost follows its text, not only its bytes. (A document is at most ``budget`` here:
        ``cut_long_documents`` cut the longer ones.)"""
        n_docs = len(doc_off) - 1
        last = int(doc_off[-1])
        ends = []
        d = start
        while d < n_docs:
            at = int(doc_off[d])
            want = at + guided_target(last - at, budget, workers)
            d1 = int(np.searchsorted(doc_off, want, "left"))  # first boundary at or after
            if d1 > n_docs:
                d1 = n_docs  # the batch ends before the target
            elif d1 > d + 1 and (want - int(doc_off[d1 - 1]) <= int(doc_off[d1]) - want
                                 or int(doc_off[d1]) - at > budget):
                d1 -= 1  # the boundary before is nearer, or the one after passes the budget
            d = max(d1, d + 1)
            ends.append(d)
        return np.array(ends, np.int64)


def document_ranges(doc_off, budget: int, workers: int) -> list:
    """(d0, d1) ranges of whole documents, one call each: guided over ``workers`` chunk workers
    for a batch over a quarter of ``budget`` (``guided_ends``), else as many documents as fit
    ``budget`` each (``chunk.chunk_end``)."""
    n_docs = len(doc_off) - 1
    if workers > 1 and int(doc_off[-1]) > budget // 4:
        ends = guided_ends(doc_off, 0, budget, workers).tolist()
    else:
        ends, d0 = [], 0
        while d0 < n_docs:
            d0 = chunk_end(doc_off, d0, budget)
            ends.append(d0)
    return list(zip([0] + ends[:-1], ends))

def empty_part(model, d0: int, d1: int) -> tuple:
    """Documents with nothing to encode (empty, or only token spans that emit nothing)."""
    return d0, np.zeros(0, model.id_dtype), np.zeros(d1 - d0, np.int64)


class WorkerPool:
    """The chunk workers of one backend (``be``): ``caps.chunk_workers`` threads."""

    def __init__(self, be):
        self.be, self.dev = be, be.dev
        self.workers = be.dev.caps.chunk_workers
        self._workers = None  # (pid, count, executor) of the chunk workers (``pool``)

    def pool(self):
        """The chunk workers' threads (one pool per backend and process: a fork()ed child
        makes its own, its parent's threads do not exist there)."""
        got = self._workers
        workers = self.workers
        if got is None or got[0] != os.getpid() or got[1] != workers:
            got = self._workers = (os.getpid(), workers, concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="gputok-chunk"))
        return got[2]

    def start(self) -> None:
        """Start the chunk workers' threads now (a device with ``chunk_workers``), not at the
        first batch: a thread's start waits until the OS runs it, a few ms on a busy machine
        when the first chunk already keeps the other cores busy."""
        workers = self.workers
        if workers > 1:
            pool = self.pool()
            meet = threading.Barrier(workers)  # every task waits for the others: one thread each
            for _ in range(workers):
                pool.submit(meet.wait)

    def ahead(self, model) -> None:
        """On a model's first batch, a chunk worker builds its plan (maps the tables, a few
        ms) while the calling thread packs the documents; the batch's ``Planner.get`` then
        waits for it (the planner's lock only: the batch holds the backend's lock meanwhile,
        and a worker waiting for that would sit out the whole batch). An error there is
        dropped: the batch builds the plan again and handles it."""
        planner = self.be.planner
        if self.workers > 1 and not planner.known(model):
            self.pool().submit(planner.get, model)

    def run(self, model, plan, chunks, parts, oversized,
                     place: "Placement | None" = None) -> None:
        """The chunks of a batch on a host-memory device with chunk workers: each chunk of ``chunks`` ((d0, d1, host chunk) in order, ``BatchRunner.chunks``)
        runs start to end on one worker thread (``dev.solo()``: every launch at once, on that
        thread alone), ``caps.chunk_workers`` chunks side by side, one more prepared ahead. No chunk waits
        for another's fences, as the chunks of one Python thread feeding two streams do.
        ``parts`` are kept in document order, so an error (out of memory) leaves a prefix of
        the batch done, as ``_run`` does. ``oversized(d0, d1)``: the part of a document too big
        for a chunk (a host chunk of None). ``place``: where the chunks' ids go as they finish
        (``emit.Placement``; their parts then carry None for ids)."""
        workers = self.workers
        pool = self.pool()
        pending: collections.deque = collections.deque()
        try:
            for k, (d0, d1, hc) in enumerate(chunks):
                if hc is None:  # oversized: after the chunks before it, on the host
                    while pending:
                        parts.append(pending.popleft().result())
                    parts.append(self.placed(place, k, oversized(d0, d1)))
                elif hc.n == 0:
                    pending.append(Ready(self.placed(place, k,
                                                      empty_part(model, d0, d1))))
                else:
                    if len(pending) > workers:
                        parts.append(pending.popleft().result())
                    if place is None:
                        pending.append(pool.submit(self.be.chunk.whole, plan, hc, model.id_dtype))
                    else:
                        pending.append(pool.submit(self.placed_chunk, plan, hc,
                                                   model.id_dtype, place, k))
            while pending:
                parts.append(pending.popleft().result())
        finally:  # on an error: chunks not started are dropped, running ones finish first
            running = [f for f in pending if not isinstance(f, Ready) and not f.cancel()]
            concurrent.futures.wait(running)

    @staticmethod
    def placed(place: "Placement | None", k: int, part: tuple) -> tuple:
        """Chunk ``k``'s part with its ids given to ``place`` (None: kept in the part)."""
        if place is None:
            return part
        place.place(k, part[1])
        return part[0], None, part[2]

    def placed_chunk(self, plan: ModelPlan, hc: HostChunk, out_dtype, place: Placement,
                      k: int) -> tuple:
        """``ChunkRunner.whole`` for chunk ``k`` of a batch whose ids go to ``place``: emitted in
        their place where the chunk's id count is known first and every earlier chunk has its
        place, else copied in. (first document, None, lengths)."""
        reserved = []

        def out_for(count: int) -> "np.ndarray | None":
            got = place.reserve(k, count)
            reserved.append(got is not None)
            return got

        d0, ids, lengths = self.be.chunk.whole(plan, hc, out_dtype, out_for)
        if not any(reserved):
            place.place(k, ids)
        return d0, None, lengths
