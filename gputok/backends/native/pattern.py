"""The native pattern matcher (``kernels/host_regex.h``) as the native device's pre-tokenizer for a
spec no scanner knows: ``ProgramCut.cut_chunk`` gives what ``hostplan.entries_from_split`` gives
(the pieces' bytes, starts, specs, each document's first entry), cut in C on the device's
threads from the program ``stages.pattern_program.program_for`` compiled.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...stages.marks import GAP
from .library import _address, library


def _setup(lib) -> None:
    if getattr(lib, "_rx_ready", False):
        return
    vp, ll, i = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int
    lib.gputok_rx_cut.argtypes = [vp, vp, i, vp, vp, vp, vp, vp, ll, vp, vp, vp, ll, i]
    lib.gputok_rx_cut.restype = vp
    lib.gputok_rx_sizes.argtypes = [vp, vp]
    lib.gputok_rx_sizes.restype = None
    lib.gputok_rx_take.argtypes = [vp, vp, vp, vp, vp, ctypes.c_uint32]
    lib.gputok_rx_take.restype = None
    lib._rx_ready = True


class ProgramCut:
    """A model's pre-tokenizer (``pre``, a ``stages.pretok.Pretokenizer``, whose other members
    it stands in for) with its native program; ``threads``: how many threads cut a chunk."""

    def __init__(self, pre, program, threads: int):
        self.pre, self.program, self.threads = pre, program, max(1, int(threads))

    def __getattr__(self, name):
        return getattr(self.pre, name)

    def cut_chunk(self, data: bytes, doc_off, sp_start, sp_end, sp_id) -> tuple:
        """(buffer, pstart, spec, doc_entry) of a chunk (``data``: its UTF-8; ``doc_off``: its
        documents' offsets; the token spans in its coordinates)."""
        lib = library().lib
        _setup(lib)
        g = self.program
        buf = np.frombuffer(data, np.uint8) if len(data) else np.zeros(1, np.uint8)
        off = np.ascontiguousarray(doc_off, np.int64)
        ss = np.ascontiguousarray(sp_start, np.int64)
        se = np.ascontiguousarray(sp_end, np.int64)
        sid = np.ascontiguousarray(sp_id, np.uint32)
        n_docs = len(off) - 1
        a = _address
        h = lib.gputok_rx_cut(a(g.code), a(g.steps), len(g.steps), a(g.class_off), a(g.ranges),
                              a(g.ascii), a(buf), a(off), n_docs, a(ss), a(se), a(sid), len(ss),
                              self.threads)
        if not h:
            raise MemoryError("gputok native: out of memory cutting pieces")
        sizes = np.zeros(2, np.int64)
        lib.gputok_rx_sizes(h, a(sizes))
        nb, npieces = int(sizes[0]), int(sizes[1])
        raw = np.empty(max(nb, 1), np.uint8)
        pstart = np.empty(npieces + 1, np.uint32)
        spec = np.empty(npieces + 1, np.uint32)
        doc_entry = np.empty(n_docs + 1, np.uint32)
        lib.gputok_rx_take(h, a(raw), a(pstart), a(spec), a(doc_entry), GAP)
        return raw[:nb].tobytes(), pstart, spec, doc_entry
