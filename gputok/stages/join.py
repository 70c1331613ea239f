"""A batch's token bytes joined in one native call, what ``decode_batch`` reads.

``JoinTable(parts)`` lays a decoder's bytes per id out flat (``blob`` and ``off``: id ``i`` is
``blob[off[i]:off[i + 1]]``), once per decoder. ``PieceJoin`` (``kernels/host_join.h``, which the
native backend passes as ``HostTools.joiner``) turns a list of id lists into one bytes object of
every document's piece bytes in turn, its documents' byte ranges, and the documents holding a
marked id (an id the decoder handles on its own path). A batch it does not take whole (an id out
of range, not an int, a numpy array among the lists) gives None: the caller decodes each
document as ``decode`` does, which names what is wrong.

Why: the per-document join in Python (a lookup per id, then ``bytes.join``) cost ~40 ns an id,
more than sentencepiece's whole batch decode on two threads.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class JoinTable:
    """Every id's bytes laid out flat for ``PieceJoin``; ``mark`` (uint8 per id, or None): bits
    OR-ed into the flag of each document that holds the id."""

    __slots__ = ("blob", "off", "mark", "n", "one")

    def __init__(self, parts: Sequence[bytes], mark: "np.ndarray | None" = None):
        self.n = len(parts)
        self.blob = b"".join(parts) or b"\0"  # (never an empty buffer: its address is passed)
        lens = np.fromiter(map(len, parts), np.int64, self.n)
        self.off = np.zeros(self.n + 1, np.int64)
        np.cumsum(lens, out=self.off[1:])
        self.mark = None if mark is None else np.ascontiguousarray(mark, np.uint8)
        if self.mark is not None and len(self.mark) != self.n:
            raise ValueError(f"mark has {len(self.mark)} entries for {self.n} ids")
        self.one = None  # (PieceJoin.one's built-in, once made: a process's, never pickled)

    def __getstate__(self):
        return self.blob, self.off, self.mark, self.n

    def __setstate__(self, state):
        self.blob, self.off, self.mark, self.n = state
        self.one = None


class PieceJoin:
    """The native join (``gputok_pieces_join``, called with the interpreter's lock held),
    checked once on a probe batch (``usable``: False on any disagreement, and then nothing uses
    it)."""

    def __init__(self, fn, make_one=None):
        self._fn = fn
        self._make_one = make_one
        self.usable = self._check()

    def one(self, table: JoinTable):
        """The built-in that joins one id list by ``table`` (``gputok_join_function``: bytes,
        or None for a list it does not take), made once per table; None without it."""
        if table.one is None and self._make_one is not None:
            mark = table.mark
            table.one = self._make_one(table, table.blob, table.off.ctypes.data, table.n,
                                       None if mark is None else mark.ctypes.data)
        return table.one

    def __call__(self, batch, table: JoinTable) -> "tuple[bytes, list, list] | None":
        """(the joined bytes, each document's end offset with a leading 0, the indexes of the
        documents holding a marked id) of ``batch``, or None where the batch is not a list (or
        tuple) of lists (or tuples) of ints in range."""
        n = len(batch) if isinstance(batch, (list, tuple)) else 0
        ends = np.empty(n + 1, np.int64)
        flags = np.zeros(max(n, 1), np.uint8)
        mark = table.mark
        got = self._fn(batch, table.blob, table.off.ctypes.data, table.n,
                       None if mark is None else mark.ctypes.data, ends.ctypes.data,
                       flags.ctypes.data)
        if got is None:
            return None
        return got, ends.tolist(), np.flatnonzero(flags[:n]).tolist()

    def _check(self) -> bool:
        try:
            parts = [b"a", b"", b"\xc3", b"\xa9xyz", b"\0"]
            table = JoinTable(parts, np.array([0, 0, 0, 0, 1], np.uint8))
            batch = [[0, 3, 2, 3], [], (4, 0), [1, 1]]
            got = self(batch, table)
            want = b"".join(b"".join(parts[i] for i in d) for d in batch)
            ok = (got is not None and got[0] == want and got[1] == [0, 10, 10, 12, 12]
                  and got[2] == [2] and self(batch + [[5]], table) is None
                  and self([[-1]], table) is None and self([[True]], table) is None
                  and self([[2**70]], table) is None and self([np.array([0])], table) is None)
            one = self.one(table)
            if ok and one is not None and not (
                    one([0, 3, 2, 3]) == b"a\xa9xyz\xc3\xa9xyz" and one(()) == b""
                    and one([4]) is None and one([5]) is None and one([True]) is None
                    and one(np.array([0])) is None):
                self._make_one = table.one = None  # (decode keeps its Python join)
            return ok
        except Exception:  # (anything off: not usable)
            return False


def bind(lib_path: str) -> "PieceJoin | None":
    """The library's join (None when it was built without this interpreter's header, or it does
    not check out)."""
    import ctypes

    lib = ctypes.PyDLL(lib_path)
    fn = getattr(lib, "gputok_pieces_join", None)
    if fn is None:
        return None
    vp, ll = ctypes.c_void_p, ctypes.c_longlong
    fn.argtypes = [ctypes.py_object, ctypes.c_char_p, vp, ll, vp, vp, vp]
    fn.restype = ctypes.py_object
    make_one = getattr(lib, "gputok_join_function", None)
    if make_one is not None:
        make_one.argtypes = [ctypes.py_object, ctypes.c_char_p, vp, ll, vp]
        make_one.restype = ctypes.py_object
    joiner = PieceJoin(fn, make_one)
    return joiner if joiner.usable else None
