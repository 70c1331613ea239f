"""The chunk loop of a device with streams (a GPU; the CPU for a batch of one chunk): two
chunks in flight, each on its own stream slot with its own staging buffers. While chunk k's
kernels run, chunk k+1 is prepared on the host and uploaded, and chunk k-1's ids come down.
A lone chunk of at most ``caps.inline_max_bytes`` runs as one call where the device has that
form (``caps.chunk_inline``).
"""

from __future__ import annotations

import collections

from .workers import empty_part


class StreamLoop:
    """The streamed chunks of one backend (``be``)."""

    def __init__(self, be):
        self.be, self.dev = be, be.dev

    def run(self, model, plan, chunks, parts: list, oversized, place=None) -> None:
        """Run ``chunks`` ((d0, d1, host chunk) in order, ``BatchRunner.chunks``), at most
        ``caps.in_flight`` queued; finished chunks go to ``parts`` in order. ``oversized(d0,
        d1)``: the part of a document too big for a chunk (a host chunk of None). A host chunk
        may be given as ``make(slot)``, which writes it into that stream slot's staging
        (``runners/staged.py``). ``place``: where the chunks' ids go as they finish
        (``emit.Placement``, from the download's own buffer; their parts then carry None)."""
        run = self.be.chunk
        caps = self.dev.caps
        depth = caps.in_flight
        flight: collections.deque = collections.deque()
        k = 0
        for index, (d0, d1, hc) in enumerate(chunks):
            if callable(hc):
                hc = hc(k % depth)
            if hc is None or hc.n == 0:  # oversized, or nothing to encode
                while flight:
                    run.finish(flight.popleft(), parts, place)
                part = oversized(d0, d1) if hc is None else empty_part(model, d0, d1)
                if place is not None:
                    place.place(index, part[1])
                    part = (part[0], None, part[2])
                parts.append(part)
                continue
            # a short chunk alone (or a one-thread device): its whole sequence in one call
            if not flight and hc.n <= caps.inline_max_bytes:
                got = run.inline(plan, hc, model.id_dtype)
                if got is not None:
                    parts.append(got)
                    continue
            if len(flight) == depth:
                run.finish(flight.popleft(), parts, place)  # frees its slot
            slot = k % depth
            k += 1
            self.dev.begin_chunk(hc.n)
            with self.dev.stream(slot):
                st = run.enqueue(plan, hc, slot, model.id_dtype)
                st.index = index
                flight.append(st)
            if len(flight) == depth:
                run.advance(flight[0])  # start the older chunk's ids download
        while flight:
            run.finish(flight.popleft(), parts, place)
