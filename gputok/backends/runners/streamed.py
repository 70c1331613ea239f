"""A batch of str documents streamed to the chunk workers: each chunk's UTF-8 made just before a
worker takes it, not the whole batch's first, and each chunk's ids placed in the batch's output
as it finishes (``emit.Placement``). Taken where the device has chunk workers and one-call
chunks (``caps.chunk_workers``, ``caps.chunk_inline``: the native CPU).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from ...stages import counters
from ...stages.emit import Placement, assemble, offsets_of
from ...stages.pack import utf8_of
from ...stages.split import check_buffer
from ..hostplan import prepare
from .chunk import CHUNK_LIMIT, NO_SPANS
from .workers import guided_ends, guided_target

PLACE_MAX = 1 << 30  # bytes of output a streamed batch places its chunks' ids in (placement)


class StreamedBatch:
    """Streamed str batches of one backend (``be``)."""

    def __init__(self, be):
        self.be, self.dev = be, be.dev

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset) -> "tuple | None":
        """A batch of str documents on a device with chunk workers, each chunk's UTF-8 made
        just before a worker takes it rather than the whole batch's first (``packed``, on this
        thread alone while the workers wait): the workers run the chunks before while this
        thread encodes the next, and the first chunk starts once its own documents are encoded
        (while a worker maps the model's tables on a model's first batch), where encoding every
        non-ASCII document up front to place the cuts kept both workers idle for the first
        5-11 ms of a fresh process's 4 MB batch. The native str packer (``pack.StrLayout``, where
        the native library is loaded on CPython) measures every document's UTF-8 first and
        writes each chunk's without holding the interpreter's lock; else Python encodes each
        chunk's documents (``streamed_pieces``). Chunks are guided (``workers.guided_ends``). Only
        where nothing needs the whole batch's bytes: no special token to find (a disallowed one
        is refused a chunk at a time, the first in document order raising the batch path's
        error), every document within the chunk budget in characters, pieces cut on the device
        (one-call chunks), no normaliser. None: not such a batch (or out of memory: the batch
        path starts over)."""
        strs = docs.strs()
        be, workers = self.be, self.dev.caps.chunk_workers
        if strs is None or len(strs) < 2 or be.profile is not None \
                or model.active_tokens(allowed) or be.planner.host_family(model) is not None \
                or model.normalizer or not model.segmenter.device.one_call:
            return None
        try:
            if be.planner.mode(model)[0] != "device":
                return None
        except ValueError:  # a pre-tokenization mode the model cannot run: the batch path says so
            return None
        budget = be.chunk_budget()
        chars = [len(s) for s in strs]  # (UTF-8 has 1 to 4 bytes a character)
        total = sum(chars)
        if 4 * total <= budget or max(chars) > budget or 4 * max(chars) > CHUNK_LIMIT:
            return None  # surely one chunk, or a document over one: before any UTF-8 is made
        layout = be.tools.packer
        units = layout.units(strs) if layout is not None else None
        if units is not None:  # the native str packer: no interpreter lock held while packing
            pieces = self.native_pieces(layout, units, budget, workers)
        else:
            pieces = streamed_pieces(strs, chars, total, budget, workers)
        # the first chunk's bytes, then the plan on this thread (on a model's first batch: the
        # tables mapped, ~3-5 ms). Built by a worker meanwhile (``WorkerPool.ahead``, as the batch
        # path does) it took the interpreter's lock from this thread's packing: a fresh process's
        # first chunk started 6-28 ms into a 4 MB batch that way, 7-12 ms this way
        first = next(pieces)
        try:
            plan = be.model_plan(model)
        except self.dev.oom_errors:
            return None

        def chunks():
            for d0, d1, data, off in itertools.chain((first,), pieces):
                if disallowed:  # (the batch path's check, a chunk at a time: the same error)
                    check_buffer(data, off, disallowed, d0, be.tools.first_token)
                hc = prepare(plan.mode, plan.pretok, data, off, NO_SPANS, 0, d1 - d0)
                yield d0, d1, replace(hc, d0=d0, d1=d1)

        parts: list = []
        place = None
        with be.lock:
            try:
                if first[1] == len(strs):  # one chunk after all: on this thread, no hand-off
                    _, _, hc = next(chunks())
                    parts.append(be.chunk.inline(plan, hc, model.id_dtype)
                                 or be.chunk.whole(plan, hc, model.id_dtype))
                else:
                    place = self.placement(model, units[3] if units is not None else None,
                                            total)
                    be.workers.run(model, plan, chunks(), parts, None, place)
            except self.dev.oom_errors:
                self.dev.release()
                return None
        with be.count_lock:
            counters["device.streamed_batches"] += 1
        if place is None and len(parts) != 1:
            return assemble(parts, len(strs), model.id_dtype,
                            self.dev.host_block)
        # the ids placed as the chunks finished, or one chunk's ids as they are
        return (place.ids() if place is not None else parts[0][1]), offsets_of(parts, len(strs))

    def placement(self, model, nbytes, chars: int) -> "Placement | None":
        """Where a streamed batch's chunks put their ids as they finish (``emit.Placement``):
        an output of one id per byte of UTF-8 (``nbytes``: each document's; else 4 per
        character), the most a BPE model's ids can be, of which only what the ids fill is
        touched. None (the chunks' ids joined at the end) past ``PLACE_MAX`` bytes of it."""
        upper = int(nbytes.sum()) if nbytes is not None else 4 * chars
        size = max(upper, 1) * np.dtype(model.id_dtype).itemsize
        if size > PLACE_MAX:
            return None
        block = self.dev.host_block(size)
        return Placement(block.view(model.id_dtype))

    def native_pieces(self, layout, units: tuple, budget: int, workers: int):
        """``streamed_pieces`` with the native str packer (``pack.StrLayout``): the UTF-8
        lengths of every document first (one call, no copy), so the cuts are ``guided_ends``'
        on exact sizes; each chunk's bytes written into a workspace block by one call that does
        not hold the interpreter's lock (the chunk workers' calls return to it meanwhile)."""
        nbytes = units[3]
        doc_off = np.zeros(len(nbytes) + 1, np.int64)
        np.cumsum(nbytes, out=doc_off[1:])
        block = self.dev.work_block
        d0 = 0
        for d1 in guided_ends(doc_off, 0, budget, workers).tolist():
            size = int(doc_off[d1] - doc_off[d0])
            dst = block(max(size, 1))
            layout.pack(units, d0, d1, dst)
            yield d0, d1, dst[:size], doc_off[d0:d1 + 1] - doc_off[d0]
            d0 = d1


def streamed_pieces(strs, chars: list, total: int, budget: int, workers: int):
    """The str batch's chunks as they are encoded: (d0, d1, UTF-8 bytes, int64 offsets of
    the chunk's documents from 0). Guided sizes (``guided_target``) from the characters
    left times the bytes per character encoded so far; a chunk stops before a document that
    would take it past ``budget`` (a document over the budget in bytes, at most 4 times it
    in characters, is a chunk alone)."""
    n = len(strs)
    done_chars = done_bytes = 0
    d = 0
    carry = None  # a document encoded for a chunk it did not fit
    while d < n:
        ratio = done_bytes / done_chars if done_chars else 1.0
        target = guided_target(int((total - done_chars) * ratio), budget, workers)
        d0, parts, size = d, [], 0
        while d < n:
            b = carry if carry is not None else utf8_of(strs[d])
            carry = None
            if parts and size + len(b) > budget:
                carry = b
                break
            parts.append(b)
            size += len(b)
            done_chars += chars[d]
            d += 1
            if size >= target:
                break
        done_bytes += size
        off = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=off[1:])
        yield d0, d, b"".join(parts), off
