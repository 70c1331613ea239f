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

    def run(self, model, plan, chunks, parts: list, oversized) -> None:
        """Run ``chunks`` ((d0, d1, host chunk) in order, ``BatchRunner.chunks``), at most
        ``caps.in_flight`` queued; finished chunks go to ``parts`` in order. ``oversized(d0,
        d1)``: the part of a document too big for a chunk (a host chunk of None)."""
        run = self.be.chunk
        caps = self.dev.caps
        flight: collections.deque = collections.deque()
        k = 0
        for d0, d1, hc in chunks:
            if hc is None or hc.n == 0:  # oversized, or nothing to encode
                while flight:
                    run.finish(flight.popleft(), parts)
                parts.append(oversized(d0, d1) if hc is None else empty_part(model, d0, d1))
                continue
            # a short chunk alone (or a one-thread device): its whole sequence in one call
            if not flight and hc.n <= caps.inline_max_bytes:
                got = run.inline(plan, hc, model.id_dtype)
                if got is not None:
                    parts.append(got)
                    continue
            depth = caps.in_flight
            if len(flight) == depth:
                run.finish(flight.popleft(), parts)  # frees its slot
            slot = k % depth
            k += 1
            self.dev.begin_chunk(hc.n)
            with self.dev.stream(slot):
                flight.append(run.enqueue(plan, hc, slot, model.id_dtype))
            if len(flight) == depth:
                run.advance(flight[0])  # start the older chunk's ids download
        while flight:
            run.finish(flight.popleft(), parts)
