"""The native device's SentencePiece one-call forms (kernels/host_spm.h): a chunk's whole kernel
sequence, or one text's, as a single call on the calling thread (the capability ``spm_inline``
of ``protocol.Capabilities``; ``runners/spm.py`` calls them).

``spm_chunk`` runs ``gputok_native_spm_chunk``: marks, THE SPM CUT, entries, the merge, THE
UNK RUN and the emit, the ids written once into an output sized by the bound (n bytes + the
dummies). A chunk worker holds the interpreter's lock for that one call (ctypes releases it
meanwhile). ``spm_text_call`` binds ``gputok_native_spm_text`` for one model: one text, its
normaliser too where it rewrites the text, with no array made on the way. The launch-by-launch
form (``spm_device.SpmStages``) runs the same rules on the same device.
"""

from __future__ import annotations

import ctypes
import itertools
import threading

import numpy as np

from ...stages import counters
from ...stages.lists import NATIVE_MIN, id_list
from ...stages.pack import utf8_of
from ...stages.spm_plan import SpmChunk, pieces, remap
from ...stages.spm_tables import DUMMY, SpmTables

_NAMES = ("encode_pretok_marks", "encode_spm_spans", "encode_spm_merge", "scan_add")


def _bind(lib) -> tuple:
    """(gputok_native_spm_chunk, gputok_native_spm_text, gputok_native_spm_norm,
    gputok_native_spm_ud_spans) with their argument types."""
    got = getattr(lib, "_gputok_spm", None)
    if got is None:
        vp, ll, i = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int
        chunk, text = lib.gputok_native_spm_chunk, lib.gputok_native_spm_text
        norm, spans = lib.gputok_native_spm_norm, lib.gputok_native_spm_ud_spans
        chunk.argtypes = [vp, ll, vp, ll, vp, vp, ll, vp, vp, ll, vp, i, vp, vp]
        text.argtypes = [ctypes.c_char_p, ll, vp, i, i, vp, ll]
        norm.argtypes = [vp, vp, vp, vp, ll, vp, vp, vp, vp]
        spans.argtypes = [vp, vp, vp, ll, vp, vp, vp, vp, ll]
        chunk.restype = text.restype = norm.restype = spans.restype = ll
        got = lib._gputok_spm = (chunk, text, norm, spans)
    return got


class _Out(threading.local):
    """A thread's output for one text (grown to the longest met), its address and size as
    ctypes values (made once: converting Python ints on every call was 0.2 us of it)."""

    def __init__(self):
        self.arrays: dict = {}

    def get(self, n: int, dtype) -> tuple:
        got = self.arrays.get(dtype)
        if got is None or len(got[0]) < n:
            a = np.empty(max(n, 1024), dtype)
            got = self.arrays[dtype] = (a, ctypes.c_void_p(a.ctypes.data),
                                        ctypes.c_longlong(len(a)))
        return got


_out = _Out()


_serials = itertools.count(1)


def spm_tab(t: SpmTables, up: dict) -> int:
    """The address of the tables' addresses and scalars as host_spm.h reads them
    (ENC_SPM_TAB_*); the array is kept with the uploaded arrays (``up``), which it points
    into. Its last word is a serial number no other tables of this process get (an address
    may be reused by later tables): the chunk workers' memos of merged spans are per model."""
    at = up.get("tab_at")
    if at is None:
        a, s = up["arrays"], up["scalars"]
        tab = np.array([a[k].ctypes.data for k in ("sym", "c_slots", "t_slots", "fin",
                                                   "byte_ids")]
                       + [int(s[k]) for k in ("c_bits", "t_bits", "flags", "unk", "space_id")]
                       + [int(t.fuse), a["cm_units"].ctypes.data, a["cm_strings"].ctypes.data]
                       + [int(s[k]) for k in ("n_units", "n_strings", "nflags")]
                       + [int(t.normalizer == "rewrite"), a["ud"].ctypes.data, int(s["n_ud"])]
                       + [next(_serials)], np.uint64)
        up["tab"], at = tab, tab.ctypes.data
        up["tab_at"] = at
    return at


class SpmCalls:
    """The SentencePiece one-call members of ``NativeDevice`` (a part of that class: it uses
    the device's ``lib``, ``host_block``, ``host_tools`` and ``_count``)."""

    def spm_chunk(self, t: SpmTables, up: dict, c: SpmChunk, out_dtype) -> tuple:
        """One planned chunk in one call: (ids, document offsets)."""
        fn = _bind(self.lib.lib)[0]
        n = c.n
        dummies = int(np.count_nonzero(c.mbits & DUMMY)) if len(c.mbits) else 0
        out = self.host_block(max(n + dummies, 1) * np.dtype(out_dtype).itemsize)
        out = out.view(out_dtype)
        out_doc = np.empty(c.n_docs + 1, np.int64)
        off = np.ascontiguousarray(c.doc_off, np.uint32)
        buf = np.ascontiguousarray(c.buf)
        total = fn(buf.ctypes.data, n, off.ctypes.data, c.n_docs, c.mpos.ctypes.data,
                   c.mbits.ctypes.data, len(c.mpos), c.sp_pos.ctypes.data, c.sp_id.ctypes.data,
                   len(c.sp_pos), spm_tab(t, up), int(out.itemsize == 2), out.ctypes.data,
                   out_doc.ctypes.data)
        if total < 0:
            raise MemoryError(f"native device: no memory for the workspace of a {n}-byte chunk")
        self._count(*_NAMES, *(("encode_spm_fuse",) if t.fuse else ()))
        return out[:total], out_doc

    def spm_rewrite(self, t: SpmTables, up: dict, buf: bytes, doc_off, ss, se) -> tuple:
        """THE SPM NORMALISER over a chunk's pieces, user-defined pieces included
        (``gputok_native_spm_norm``: a pass to measure, one to write): (the rewritten chunk,
        doc_off, ss, se moved there), as ``SpmStages.rewrite`` gives them."""
        fn = _bind(self.lib.lib)[2]
        tab = spm_tab(t, up)
        bounds, p_src, p_len, kind = pieces(len(buf), doc_off, ss, se)
        k = len(p_src)
        src = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(1, np.uint8)
        lens = np.empty(k, np.uint32)
        fn(src.ctypes.data, p_src.ctypes.data, p_len.ctypes.data, kind.ctypes.data, k, tab,
           None, lens.ctypes.data, None)
        doc_off, ss, se, total = remap(bounds, lens, doc_off, ss, se)
        dst = np.zeros(k, np.uint32)
        np.cumsum(lens[:-1], out=dst[1:])
        out = np.empty(max(total, 1), np.uint8)
        fn(src.ctypes.data, p_src.ctypes.data, p_len.ctypes.data, kind.ctypes.data, k, tab,
           dst.ctypes.data, lens.ctypes.data, out.ctypes.data)
        self._count("encode_spm_norm_len", "encode_spm_norm_write")
        return out[:total], doc_off, ss, se

    def spm_ud_spans(self, t: SpmTables, up: dict, buf, lo: np.ndarray, hi: np.ndarray
                     ) -> tuple:
        """The user-defined pieces of the segments ``[lo, hi)`` of a (normalised) chunk
        (``gputok_native_spm_ud_spans``): (starts, ends, ids), as
        ``spm_plan.user_defined_spans`` finds them."""
        fn = _bind(self.lib.lib)[3]
        data = np.frombuffer(buf, np.uint8) if isinstance(buf, (bytes, bytearray)) else buf
        lo = np.ascontiguousarray(lo, np.uint32)
        hi = np.ascontiguousarray(hi, np.uint32)
        cap = len(data) // 16 + 64  # (found more: called again with room for all)
        while True:
            out = np.empty((3, cap), np.uint32)
            got = fn(data.ctypes.data, lo.ctypes.data, hi.ctypes.data, len(lo), spm_tab(t, up),
                     out[0].ctypes.data, out[1].ctypes.data, out[2].ctypes.data, cap)
            if got <= cap:
                return out[0, :got].astype(np.int64), out[1, :got].astype(np.int64), out[2, :got]
            cap = got

    def spm_text_call(self, t: SpmTables, up: dict, out_dtype):
        """One text of one segment (no token span: the caller checks; its user-defined pieces
        are found in the call)
        as a function of the text alone, everything it looks up bound once, its normaliser too
        where it rewrites the text (``SpmTables.normalizer == "rewrite"``; the single-text
        API's per-call cost is Python's: a 64-character text is ~3 us of C; through
        ``spm_chunk`` ~100 us of Python around the call, mostly numpy's ``.ctypes``). Its
        calls count as launches of its kernels, added in when ``launches`` is read
        (``call_counter``)."""
        fn = _bind(self.lib.lib)[1]
        tab, bits, u16 = spm_tab(t, up), t.text_bits, int(np.dtype(out_dtype).itemsize == 2)
        unless_blank = t.dummy_unless_blank
        calls = self.call_counter(_NAMES + (("encode_spm_fuse",) if t.fuse else ()))
        get, lister = _out.get, self.host_tools().lister

        # the arguments that do not change, as ctypes values (ctypes converts an int argument
        # on every call otherwise: 0.4 us of a short text's 2 us)
        tab, u16 = ctypes.c_void_p(tab), ctypes.c_int(u16)
        bits, blank = ctypes.c_int(bits), ctypes.c_int(bits & ~DUMMY)

        def call(text: str) -> list:
            data = utf8_of(text)
            b = blank if unless_blank and text[:1] in (" ", "\u2581") else bits
            out, at, cap = get(len(data) + 1, out_dtype)
            got = fn(data, len(data), tab, b, u16, at, cap)
            if got < -1:  # a rewritten text longer than the output has room for
                out, at, cap = get(-got - 2, out_dtype)
                got = fn(data, len(data), tab, b, u16, at, cap)
            if got < 0:
                raise MemoryError(f"native device: no memory for a {len(data)}-byte text")
            calls[0] += 1
            ids = out[:got]
            return ids.tolist() if got < NATIVE_MIN else id_list(ids, lister)

        return call
