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

    __slots__ = ("blob", "off", "mark", "n")

    def __init__(self, parts: Sequence[bytes], mark: "np.ndarray | None" = None):
        self.n = len(parts)
        self.blob = b"".join(parts) or b"\0"  # (never an empty buffer: its address is passed)
        lens = np.fromiter(map(len, parts), np.int64, self.n)
        self.off = np.zeros(self.n + 1, np.int64)
        np.cumsum(lens, out=self.off[1:])
        self.mark = None if mark is None else np.ascontiguousarray(mark, np.uint8)
        if self.mark is not None and len(self.mark) != self.n:
            raise ValueError(f"mark has {len(self.mark)} entries for {self.n} ids")


class PieceJoin:
    """The native join (``gputok_pieces_join``, called with the interpreter's lock held),
    checked once on a probe batch (``usable``: False on any disagreement, and then nothing uses
    it)."""

    def __init__(self, fn):
        self._fn = fn
        self.usable = self._check()

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
            return (got is not None and got[0] == want and got[1] == [0, 10, 10, 12, 12]
                    and got[2] == [2] and self(batch + [[5]], table) is None
                    and self([[-1]], table) is None and self([[True]], table) is None
                    and self([[2**70]], table) is None and self([np.array([0])], table) is None)
        except Exception:  # (anything off: not usable)
            return False


def bind(lib_path: str) -> "PieceJoin | None":
    """The library's join (None when it was built without this interpreter's header, or it does
    not check out)."""
    import ctypes

    fn = getattr(ctypes.PyDLL(lib_path), "gputok_pieces_join", None)
    if fn is None:
        return None
    vp, ll = ctypes.c_void_p, ctypes.c_longlong
    fn.argtypes = [ctypes.py_object, ctypes.c_char_p, vp, ll, vp, vp, vp]
    fn.restype = ctypes.py_object
    joiner = PieceJoin(fn)
    return joiner if joiner.usable else None
