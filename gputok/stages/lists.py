"""Token ids as Python lists of int, what ``encode``, ``encode_ordinary`` and ``encode_batch`` give.

``id_list(ids, builder)`` is ``ids.tolist()``, except that given the native builder
(``kernels/host_lists.h``: ``IdLists``, which the native backend passes) an id seen recently
shares its int object instead of getting a new one. The values are the same; only ``is`` between equal ids
tells them apart, as with CPython's own small ints.

Why: ``tolist`` makes a 32-byte int per id besides the list's 8-byte slot. A 10 MB run of
``"a"`` is 1.25 M ids of one token: 40 MB of equal ints, whose first touch in a fresh process
cost as much as the merge (bench/bench_long.py). Shared, that list is 10 MB. On prose most ids
recur within a few thousand tokens: a 4 MB prose batch's list took 3.9 ns an id and 9 MB,
``tolist`` 21.9 ns and 31 MB (no allocation per recurring id).
"""

from __future__ import annotations

import numpy as np

#: below this many ids ``tolist`` is as fast (one ctypes call costs ~1 us)
NATIVE_MIN = 64


class IdLists:
    """The native list builder (``gputok_id_list``, called with the interpreter's lock held),
    kept only where CPython's list layout is what it writes into: a list object's item pointer
    right after its variable-size header (``ITEMS_AT`` bytes in), checked on a probe list before
    anything is dereferenced, then the builder's result compared with ``tolist`` on probe ids
    (``usable``: False on any other layout or interpreter, and then nothing uses it)."""

    ITEMS_AT = 24  # (ob_refcnt, ob_type, ob_size, then ob_item: 64-bit CPython with the GIL)

    def __init__(self, fn, fn_parts=None):
        import ctypes
        import sys

        self._fn, self._fn_parts = fn, fn_parts
        self.joins = fn_parts is not None  # (``parts`` builds one list of several arrays)
        self._api = None
        self.usable = False
        if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
            return
        api = ctypes.pythonapi
        names = ("PyList_New", "PyLong_FromUnsignedLong", "Py_IncRef", "Py_DecRef")
        try:
            self._api = (ctypes.c_void_p * 4)(*[ctypes.cast(getattr(api, f), ctypes.c_void_p).value
                                                for f in names])
        except AttributeError:
            return
        self._api_at = ctypes.addressof(self._api)
        self.usable = self._check()

    def _check(self) -> bool:
        import ctypes

        try:
            a, b, c = object(), object(), object()
            probe = [a, b, c]
            base = id(probe)
            word = ctypes.c_ssize_t.from_address
            if (word(base + 8).value != id(list) or word(base + 16).value != 3
                    or list.__basicsize__ < self.ITEMS_AT + 8):
                return False  # (not the header this offset assumes: nothing dereferenced)
            items = word(base + self.ITEMS_AT).value
            if [word(items + 8 * k).value for k in range(3)] != [id(a), id(b), id(c)]:
                return False
            for dtype in (np.uint16, np.uint32):
                ids = np.array([0, 300, 300, 4464, 5, 300, 2**16 - 1, 1 << 12, 64, 0] * 20, dtype)
                if dtype is np.uint32:
                    ids[::7] = [2**32 - 1, 100000, 2**31, 7] * 7 + [9]
                got = self(ids)
                if type(got) is not list or got != ids.tolist() or \
                        any(type(x) is not int for x in got):
                    return False
                if self._fn_parts is not None:
                    parts = [ids[:3], ids[3:3], ids[3:150], ids[150:]]
                    if self.parts(parts) != ids.tolist():
                        return False
            return True
        except Exception:  # (anything off: not this layout)
            return False

    def __call__(self, ids: np.ndarray) -> list:
        """The list of ``ids`` (uint16 or uint32, contiguous)."""
        return self._fn(ids.ctypes.data, ids.itemsize, len(ids), self._api_at, self.ITEMS_AT)

    def parts(self, arrays: list) -> list:
        """The list of the ids of ``arrays`` in turn (all uint16 or all uint32, contiguous)."""
        import ctypes

        k = len(arrays)
        at = (ctypes.c_void_p * k)(*[a.ctypes.data for a in arrays])
        ns = (ctypes.c_longlong * k)(*[len(a) for a in arrays])
        return self._fn_parts(at, ns, k, arrays[0].itemsize, self._api_at, self.ITEMS_AT)


def id_list(ids: np.ndarray, builder: "IdLists | None" = None) -> list:
    """``ids.tolist()`` (ids: a 1-D integer array), its recurring ids sharing one int object
    where a native ``builder`` is given (uint16 and uint32 arrays)."""
    b = builder
    if (b is None or len(ids) < NATIVE_MIN or ids.dtype not in _WIDTHS or ids.ndim != 1
            or not ids.flags.c_contiguous):
        return ids.tolist()
    return b(ids)


def id_list_of_parts(arrays: list, builder: "IdLists | None" = None) -> list:
    """``id_list(np.concatenate(arrays), builder)`` without the joined copy where a native
    ``builder`` is given (1-D uint16 or uint32 arrays of one dtype, contiguous): a long text's
    ids come from a batch's chunks, and a 10 MB base64 blob's 7 M ids joined were 28 MB of
    fresh memory written once and read once."""
    b = builder
    if (b is None or not b.joins or not arrays
            or len({a.dtype for a in arrays}) != 1 or arrays[0].dtype not in _WIDTHS
            or any(a.ndim != 1 or not a.flags.c_contiguous for a in arrays)
            or sum(map(len, arrays)) < NATIVE_MIN):
        return id_list(np.concatenate(arrays), b) if arrays else []
    return b.parts(arrays)


_WIDTHS = (np.dtype(np.uint16), np.dtype(np.uint32))
