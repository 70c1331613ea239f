"""The native device's Unigram lattice (``kernels/host_unigram.h``): one model's trie and
scores made once in the library (``UnigramLattice``), then its calls on the calling thread
(the capability ``unigram_inline`` of ``protocol.Capabilities``; ``runners/unigram.py`` drives
them).

``items`` encodes a batch's items in order (text segments, normalised there first where the
model's normaliser is THE SPM NORMALISER, and token ids), ``units`` the units the host stages
cut (HF's words, or sentences a host normaliser wrote), ``text_call`` one text. Ids come back
from the library's per-thread buffer and are copied out at once.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np

from ...stages import counters
from ...stages.lists import NATIVE_MIN, id_list
from ...stages.pack import utf8_of

NO_ID = 0xFFFFFFFF


def _bind(lib) -> tuple:
    """The library's Unigram entry points with their argument types (bound once)."""
    got = getattr(lib, "_gputok_unigram", None)
    if got is None:
        vp, ll, i, u, d = (ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_uint,
                           ctypes.c_double)
        new, norm, free = (lib.gputok_native_unigram_new, lib.gputok_native_unigram_norm,
                           lib.gputok_native_unigram_free)
        items, text = lib.gputok_native_unigram_items, lib.gputok_native_unigram_text
        new.argtypes = [vp, vp, vp, ll, vp, ll, u, u, d, vp]
        new.restype = vp
        norm.argtypes = [vp, vp, u, vp, u, u, vp, u]
        norm.restype = i
        free.argtypes = [vp]
        free.restype = None
        items.argtypes = [vp, vp, vp, vp, vp, ll, i, vp, ctypes.POINTER(vp)]
        items.restype = ll
        text.argtypes = [vp, ctypes.c_char_p, ll, i, ctypes.POINTER(vp)]
        text.restype = ll
        lib.gputok_native_unigram_cells.argtypes = [vp]
        lib.gputok_native_unigram_cells.restype = ll
        got = lib._gputok_unigram = (new, norm, free, items, text)
    return got


class UnigramLattice:
    """One model's lattice in the native library: ``tables`` is its segmenter's
    ``lattice_tables()``; ``norm`` (units, strings, flags, user-defined trie) THE SPM
    NORMALISER's tables when its segments are normalised there (None: the host normalises).
    ``where``: the model's name, for errors."""

    def __init__(self, lib, tables: tuple, norm: "tuple | None", where: str):
        new, set_norm, free, self._items, self._text = _bind(lib)
        self._cells = lib.gputok_native_unigram_cells
        arrays, scalars = tables
        keys, off = arrays["keys"], arrays["key_off"]
        ids, score = arrays["key_ids"], arrays["score"]
        byte_ids = np.ascontiguousarray(arrays["byte_ids"], np.uint32)
        flags = (1 if scalars["hf"] else 0) | (2 if scalars["byte_fallback"] else 0)
        ptr = new(keys.ctypes.data, off.ctypes.data, ids.ctypes.data, len(ids),
                  score.ctypes.data, len(score), flags, scalars["unk"], scalars["unk_score"],
                  byte_ids.ctypes.data)
        if not ptr:
            raise MemoryError(f"native device: no memory for {where}'s Unigram trie")
        self.ptr = ctypes.c_void_p(ptr)
        self._free = weakref.finalize(self, free, self.ptr)
        self.where = where
        self.normalizes = norm is not None
        if norm is not None:
            units, strings, nflags, ud = norm
            units = np.ascontiguousarray(units, np.uint32)
            strings = np.ascontiguousarray(strings, np.uint8)
            ud = np.ascontiguousarray(ud, np.uint32)
            if set_norm(self.ptr, units.ctypes.data, len(units), strings.ctypes.data,
                        len(strings), nflags, ud.ctypes.data, len(ud)) != 0:
                raise MemoryError(f"native device: no memory for {where}'s normaliser")

    @property
    def cells(self) -> int:
        """The trie's cells (12 bytes each)."""
        return int(self._cells(self.ptr))

    def _fail(self, got: int, what: str):
        if got == -1:
            raise MemoryError(f"native device: no memory for the Unigram lattice of {what}")
        raise ValueError(f"{self.where}: a character has no piece and the Unigram model has no "
                         "unk_id")

    def items(self, buf, start: np.ndarray, end: np.ndarray, tok: np.ndarray,
              out_dtype) -> tuple[np.ndarray, np.ndarray]:
        """Items in order (``buf[start:end]`` a text segment where ``tok`` is ``NO_ID``, else
        that token; ``NO_IDS``: nothing): (their ids as ``out_dtype``, each item's id count)."""
        n = len(start)
        counts = np.empty(n, np.int64)
        at = ctypes.c_void_p()
        data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        got = self._items(self.ptr, data.ctypes.data, start.ctypes.data, end.ctypes.data,
                          tok.ctypes.data, n, int(self.normalizes), counts.ctypes.data,
                          ctypes.byref(at))
        if got < 0:
            self._fail(got, f"{n} items")
        ids = (np.ctypeslib.as_array(ctypes.cast(at, ctypes.POINTER(ctypes.c_uint32)), (got,))
               .astype(out_dtype) if got else np.zeros(0, out_dtype))
        counters["unigram.native_items"] += n
        return ids, counts

    def units(self, units: list) -> list:
        """The ids (tuples) of units already normalised and cut (the ``segment`` of the
        host stages' units)."""
        raw = list(map(utf8_of, units))
        off = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, raw), np.int64, len(raw)), out=off[1:])
        buf = np.frombuffer(b"".join(raw) or b"\0", np.uint8)
        tok = np.full(len(raw), NO_ID, np.uint32)
        counts = np.empty(len(raw), np.int64)
        at = ctypes.c_void_p()
        got = self._items(self.ptr, buf.ctypes.data, off[:-1].ctypes.data, off[1:].ctypes.data,
                          tok.ctypes.data, len(raw), 0, counts.ctypes.data, ctypes.byref(at))
        if got < 0:
            self._fail(got, f"{len(raw)} units")
        flat = (np.ctypeslib.as_array(ctypes.cast(at, ctypes.POINTER(ctypes.c_uint32)), (got,))
                .tolist() if got else [])
        ends = np.cumsum(counts).tolist()
        counters["unigram.native_units"] += len(raw)
        return [tuple(flat[a:b]) for a, b in zip([0] + ends[:-1], ends)]

    def text_call(self, lister=None):
        """One text (one segment, no token in it: the caller checks) as a function of the
        text: its UTF-8, the one call, the ids as a list."""
        fn, ptr, norm = self._text, self.ptr, ctypes.c_int(int(self.normalizes))
        u32p, u32 = ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32
        fail = self._fail

        def call(text: str) -> list:
            data = utf8_of(text)
            at = ctypes.c_void_p()
            got = fn(ptr, data, len(data), norm, ctypes.byref(at))
            if got <= 0:
                if got == 0:
                    return []
                fail(got, "a text")
            if got < NATIVE_MIN:  # (a ctypes array's slice is a list: ~1 us where numpy's
                return (u32 * got).from_address(at.value)[:]  # view and tolist took ~4)
            return id_list(np.ctypeslib.as_array(ctypes.cast(at, u32p), (got,)), lister)

        return call


class UnigramCalls:
    """The Unigram and pattern-matcher members of ``NativeDevice`` (a part of that class: they
    use the device's ``lib``)."""

    def unigram_lattice(self, tables: tuple, norm: "tuple | None", where: str
                        ) -> UnigramLattice:
        """One model's lattice (``UnigramLattice``), built in the library now."""
        return UnigramLattice(self.lib.lib, tables, norm, where)

    def program_cutter(self, pre, program, words=None):
        """A pre-tokenizer's native cut (``pattern.ProgramCut`` or ``pattern.BertCut``, which
        resolves the segmenter's whole ``words``) on this device's threads."""
        from .pattern import cutter

        return cutter(pre, program, self.threads, words)
