"""The native device's sizes and thread count: every tuned constant in one place, with why.
"""

from __future__ import annotations

import os

CHUNK_BYTES = 1 << 20  # text per chunk at most (device.py: performance notes)
CHUNK_PER_WORKER = 1 << 17  # the chunk cap grows by this per chunk worker (chunk_bytes_for)
CHUNK_MIN = 1 << 18  # and starts here
EXACT_OUT_BYTES = 1 << 16  # chunks above this get an output of their id count (chunk_inline)
TEXT_SHORT_MAX = EXACT_OUT_BYTES  # bytes: a longer text's chunk takes chunk_inline
SLAB_PER_THREAD = 8 << 20  # the workspace pool's slab budget per thread (host_pool.py)
STREAM_MIN = 256 << 10  # smaller chunks run on the calling thread: a stream hand-off per launch
#                       (~50 us on the shared box) is not worth it for a few ms of work
# threads of a launch's block, which one host thread runs in turn: the elements of a work item
HOST_BLOCK = 1 << 14
# A launch spread over the threads (a batch of one chunk) cuts the heavy kernels into blocks of
# at least this many elements (about 25 us of work each), four per thread, from four blocks'
# worth on: with 16K-element blocks a 10 KB text's ~2,500 entries were one block on one core
# (the short merges of base64 cost ~100 ns an entry). The cheap kernels (~1 ns a byte) keep
# HOST_BLOCK: waking a helper (~10-30 us) costs more than they would save.
SPLIT_MIN = {"encode_merge_short": 256, "encode_merge_long": 1, "encode_piece_kind": 512,
             "encode_pretok_spans": 2048, "encode_o200k_spans": 2048,
             "encode_wordpiece": 256}
MAX_BLOCKS = 1 << 20  # a grid always covers its range in one stride
# a batch of one chunk this short runs as one call where the device has that form
# (``chunk_inline``, ~0.1 ms of launches saved); longer ones launch stage by stage, their heavy
# kernels cut over every core (``launch_shape``): on the 2-core box 4 KB of prose took 0.26 ->
# 0.18 ms, 10 KB 0.44 -> 0.30, and from ~30 KB (base64) or ~100 KB (prose) the two cores won
INLINE_MAX_BYTES = 16 << 10
INLINE_ANY = 1 << 62  # a one-thread device: every lone chunk in one call




def threads_default() -> int:
    """``$GPUTOK_NUM_THREADS``, else the cores this process may run on."""
    env = os.environ.get("GPUTOK_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"$GPUTOK_NUM_THREADS must be a positive integer, got {env!r}")
        if n < 1:
            raise ValueError(f"$GPUTOK_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def chunk_bytes_for(workers: int) -> int:
    """The most text in one chunk for ``workers`` chunk workers: ``CHUNK_PER_WORKER`` each,
    from ``CHUNK_MIN`` up to ``CHUNK_BYTES`` (2 workers: 256 KB; 8 and more: 1 MB). Each
    worker's chunk touches ~12 bytes of workspace per byte of text, new memory in a fresh
    process; a chunk's Python glue holds the interpreter's lock for ~0.2 ms, which many workers
    queue on (device.py: performance notes)."""
    return int(min(CHUNK_BYTES, max(CHUNK_MIN, int(workers) * CHUNK_PER_WORKER)))
