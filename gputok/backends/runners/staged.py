"""A batch on a device that lends its upload staging (a GPU's pinned buffers, ``caps.staging``):
each chunk's UTF-8 written straight into its stream slot's staging (a list of str or bytes by
the native packer, ``pack.StrLayout``: one call, on the host's threads, without the
interpreter's lock; one buffer, an Arrow array's or the JSONL reader's, copied) while the chunks
before it run on the device, uploaded from there, and its ids copied from the download's own
buffer into their place in the batch's output (``emit.Placement``). The batch path instead made
the whole batch's UTF-8 first (a copy of every document, then a joined copy), copied each chunk
into staging, each chunk's ids into a fresh array and those into the output: four copies of the
text and two of the ids, on one thread.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from ...stages import counters
from ...stages.emit import Placement, offsets_of
from ...stages.pack import valid_documents
from ...stages.split import check_buffer
from ..hostplan import prepare
from .chunk import CHUNK_LIMIT, NO_SPANS, chunk_end

PLACE_MAX = 4 << 30  # bytes of output reserved for the ids (its untouched pages cost nothing)


class StagedBatch:
    """Staged batches of one backend (``be``)."""

    def __init__(self, be):
        self.be, self.dev = be, be.dev
        self.threads = max(1, os.cpu_count() or 1)  # the packer's (parts of 4 MB or more)

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset) -> "tuple | None":
        """The batch's (ids, offsets), or None where this path does not apply and the batch
        path runs: documents given as a list of str or of bytes (packed by the native packer)
        or as one buffer (a pyarrow array, the JSONL reader's ``Packed``: each chunk's bytes
        copied into staging), no special token to find (a disallowed one is refused a chunk
        at a time, the first in document order raising the batch path's error), pieces cut on
        the device with no normaliser, every document within a chunk, strict UTF-8 (an invalid
        document: the batch path names it)."""
        be, dev = self.be, self.dev
        if be.profile is not None or model.active_tokens(allowed) or model.normalizer \
                or be.planner.host_family(model) is not None:
            return None
        src = self.source(docs)
        if src is None:
            return None
        fill, doc_off, check = src
        n_docs = len(doc_off) - 1
        try:
            if be.planner.mode(model)[0] != "device":
                return None
        except ValueError:  # a mode the model cannot run: the batch path says so
            return None
        budget = be.chunk_budget()
        if n_docs < 1 or int(np.diff(doc_off).max()) > min(budget, CHUNK_LIMIT):
            return None  # a document over a chunk: the batch path cuts it at safe points
        size = max(int(doc_off[-1]), 1) * np.dtype(model.id_dtype).itemsize
        if size > PLACE_MAX:
            return None
        try:
            plan = be.model_plan(model)
        except dev.oom_errors:
            return None
        if plan.mode != "device" or plan.norm_form is not None:
            return None
        place = Placement(dev.host_block(size).view(model.id_dtype))
        parts: list = []
        utf8_check = be.tools.utf8_check

        def chunk(d0: int, d1: int):
            def make(slot: int):
                b0, b1 = int(doc_off[d0]), int(doc_off[d1])
                dst = dev.stage(slot, b1 - b0)
                fill(d0, d1, b0, b1, dst)
                off = doc_off[d0:d1 + 1] - b0
                if check and not valid_documents(dst, off, utf8_check):
                    raise _Invalid()
                if disallowed:  # (the batch path's check, a chunk at a time: the same error)
                    check_buffer(dst, off, disallowed, d0, be.tools.first_token)
                hc = prepare(plan.mode, plan.pretok, dst, off, NO_SPANS, 0, d1 - d0)
                return replace(hc, d0=d0, d1=d1)
            return make

        def chunks():
            d0 = 0
            while d0 < n_docs:
                d1 = chunk_end(doc_off, d0, budget)
                yield d0, d1, chunk(d0, d1)
                d0 = d1

        with be.lock:
            try:
                be.streams.run(model, plan, chunks(), parts, None, place)
            except (_Invalid, *dev.oom_errors):
                dev.release()
                return None  # (the batch path names the bad document, or splits the batch)
        with be.count_lock:
            counters["device.staged_batches"] += 1
        return place.ids(), offsets_of(parts, n_docs)

    def source(self, docs) -> "tuple | None":
        """(fill(d0, d1, b0, b1, dst), document byte offsets, whether to check UTF-8) of a batch
        this path takes, else None: a list of str or bytes through the native packer, or one
        buffer copied a chunk at a time."""
        got = docs.segments()
        if got is not None:
            segs, doc_off, valid = got
            if not valid and docs.errors != "strict":
                return None
            at = np.zeros(len(segs) + 1, np.int64)
            np.cumsum([len(s) for s in segs], out=at[1:])

            def copy(d0, d1, b0, b1, dst):  # the segments' bytes [b0, b1) into dst
                k = int(np.searchsorted(at, b0, "right")) - 1
                pos = 0
                while b0 + pos < b1:
                    lo = b0 + pos - int(at[k])
                    take = min(b1 - b0 - pos, len(segs[k]) - lo)
                    np.copyto(dst[pos:pos + take], segs[k][lo:lo + take])
                    pos += take
                    k += 1
            return copy, np.asarray(doc_off, np.int64), not valid
        layout = self.be.tools.packer
        raw = docs.strs() if docs.strs() is not None else docs.bytes_list()
        if raw is None or layout is None or not len(raw):
            return None
        is_bytes = docs.strs() is None
        if is_bytes and docs.errors != "strict":
            return None
        units = layout.units(raw)
        if units is None:
            return None
        doc_off = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(units[3], out=doc_off[1:])
        threads = self.threads

        def pack(d0, d1, b0, b1, dst):
            layout.pack(units, d0, d1, dst, threads)
        return pack, doc_off, is_bytes


class _Invalid(Exception):
    """A bytes document that is not strict UTF-8 (the batch path names it)."""
