"""The native pattern matcher (``kernels/host_regex.h``) as the native device's pre-tokenizer for a
spec no scanner knows: ``ProgramCut.cut_chunk`` gives what ``hostplan.entries_from_split`` gives
(the pieces' bytes, starts, specs, each document's first entry), cut in C on the device's
threads from the program ``stages.pattern_program.program_for`` compiled; ``BertCut`` the same
for BERT's normaliser and pre-tokenizer (``kernels/host_bert.h``).
"""

from __future__ import annotations

import ctypes
import weakref

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
    lib.gputok_bert_cut.argtypes = [vp] * 5 + [ll] + [vp] * 4 + [ll, i] + [vp, vp, ll] + \
        [vp] * 3 + [ll, i, vp]
    lib.gputok_bert_cut.restype = vp
    lib.gputok_bert_words_new.argtypes = [vp, vp, vp, ll, ctypes.c_char_p, ll, ctypes.c_uint32,
                                          ctypes.c_ulonglong]
    lib.gputok_bert_words_new.restype = vp
    lib.gputok_bert_words_free.argtypes = [vp]
    lib.gputok_bert_words_free.restype = None
    lib._rx_ready = True


def cutter(pre, program, threads: int, words=None):
    """The native cut of ``program`` (a pattern's or BERT's) for the pre-tokenizer ``pre``;
    ``words``: the segmenter's words (``WordPieceFamily.whole_words``: every entry and the
    match's constants), with which BERT's cut resolves every word itself, or None."""
    from ...components.bert_steps import BertProgram

    if isinstance(program, BertProgram):
        return BertCut(pre, program, threads, words)
    return ProgramCut(pre, program, threads)


def _chunk_arrays(data, doc_off, sp_start, sp_end, sp_id) -> tuple:
    buf = np.frombuffer(data, np.uint8) if len(data) else np.zeros(1, np.uint8)
    return (buf, np.ascontiguousarray(doc_off, np.int64), np.ascontiguousarray(sp_start, np.int64),
            np.ascontiguousarray(sp_end, np.int64), np.ascontiguousarray(sp_id, np.uint32))


def _take(lib, h, n_docs: int) -> tuple:
    """(buffer, pstart, spec, doc_entry) of a cut's result handle (freed)."""
    if not h:
        raise MemoryError("gputok native: out of memory cutting pieces")
    a = _address
    sizes = np.zeros(2, np.int64)
    lib.gputok_rx_sizes(h, a(sizes))
    nb, npieces = int(sizes[0]), int(sizes[1])
    raw = np.empty(max(nb, 1), np.uint8)
    pstart = np.empty(npieces + 1, np.uint32)
    spec = np.empty(npieces + 1, np.uint32)
    doc_entry = np.empty(n_docs + 1, np.uint32)
    lib.gputok_rx_take(h, a(raw), a(pstart), a(spec), a(doc_entry), GAP)
    return raw[:nb].tobytes(), pstart, spec, doc_entry


class ProgramCut:
    """A model's pre-tokenizer (``pre``, a ``stages.pretok.Pretokenizer``, whose other members
    it stands in for) with its native program; ``threads``: how many threads cut a chunk."""

    def __init__(self, pre, program, threads: int):
        self.pre, self.program, self.threads = pre, program, max(1, int(threads))
        # The library is taken once: ``library()`` checks the sources' stamp on every call
        # (~120 stats, 2-3 ms), which was half the wall time of a 1 MB WordPiece batch.
        self._lib = library().lib
        _setup(self._lib)

    def __getattr__(self, name):
        return getattr(self.pre, name)

    def cut_chunk(self, data: bytes, doc_off, sp_start, sp_end, sp_id) -> tuple:
        """(buffer, pstart, spec, doc_entry) of a chunk (``data``: its UTF-8; ``doc_off``: its
        documents' offsets; the token spans in its coordinates)."""
        lib = self._lib
        g = self.program
        buf, off, ss, se, sid = _chunk_arrays(data, doc_off, sp_start, sp_end, sp_id)
        a = _address
        h = lib.gputok_rx_cut(a(g.code), a(g.steps), len(g.steps), a(g.class_off), a(g.ranges),
                              a(g.ascii), a(buf), a(off), len(off) - 1, a(ss), a(se), a(sid),
                              len(ss), self.threads)
        return _take(lib, h, len(off) - 1)


class _BertTables:
    """The pinned BERT tables as the C pass reads them (built once per process)."""

    _got = None

    @classmethod
    def get(cls):
        if cls._got is None:
            from ...unicode import bert as bu

            t = bu.tables()
            keys = sorted(int(k) for k in t.lower_multi_arr.tolist())
            vals = [[ord(c) for c in t.lower[k]] for k in keys]
            off = np.zeros(len(keys) + 1, np.int64)
            np.cumsum([len(v) for v in vals], out=off[1:])
            flat = np.array([c for v in vals for c in v] or [0], np.uint32)
            cls._got = (np.ascontiguousarray(t.flags, np.uint8),
                        np.ascontiguousarray(t.ccc_table, np.uint8),
                        np.ascontiguousarray(t.nfd_keys, np.uint32),
                        np.ascontiguousarray(t.nfd_off, np.int64),
                        np.ascontiguousarray(t.nfd_vals, np.uint32),
                        np.ascontiguousarray(t.lower1, np.uint32),
                        np.array(keys or [0], np.uint32), off, flat, len(keys))
        return cls._got


class BertCut(ProgramCut):
    """BERT's normaliser and pre-tokenizer (``BertProgram``) in C: ``kernels/host_bert.h``;
    where the segmenter's ``whole_words`` are given, every word comes out resolved: one entry
    per WordPiece piece, its id as its spec (the words the cut matched are memoised across
    chunks, a memo per cutting thread)."""

    def __init__(self, pre, program, threads: int, words=None):
        super().__init__(pre, program, threads)
        self._words = None
        if words is not None:
            lib = self._lib
            blob, off, ids, prefix, unk, max_chars = words
            a = _address
            buf = np.frombuffer(blob, np.uint8)
            h = lib.gputok_bert_words_new(a(buf), a(off), a(ids), len(ids), prefix, len(prefix),
                                          unk, min(max(int(max_chars), 0), 2 ** 64 - 1))
            if not h:
                raise MemoryError("gputok native: out of memory indexing the vocabulary")
            self._words = h
            self._free = weakref.finalize(self, lib.gputok_bert_words_free, h)

    def cut_chunk(self, data: bytes, doc_off, sp_start, sp_end, sp_id) -> tuple:
        lib = self._lib
        flags, ccc, nk, no, nv, low, mk, mo, mv, n_multi = _BertTables.get()
        buf, off, ss, se, sid = _chunk_arrays(data, doc_off, sp_start, sp_end, sp_id)
        a = _address
        h = lib.gputok_bert_cut(a(flags), a(ccc), a(nk), a(no), a(nv), len(nk), a(low), a(mk),
                                a(mo), a(mv), n_multi, self.program.opts, a(buf), a(off),
                                len(off) - 1, a(ss), a(se), a(sid), len(ss), self.threads,
                                self._words)
        return _take(lib, h, len(off) - 1)
