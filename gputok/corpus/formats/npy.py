"""``npy``: ``shard_NNNNN.ids.npy`` (uint16 when the vocabulary fits, else uint32) and
``shard_NNNNN.offsets.npy`` (int64, documents + 1), gputok's own layout.

>>> import numpy as np
>>> ids = np.load("out/shard_00000.ids.npy"); off = np.load("out/shard_00000.offsets.npy")
>>> first_doc = ids[off[0]:off[1]]                                         # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from . import Format, write_all


def _write_npy(f, arr: np.ndarray) -> None:
    """The .npy file ``numpy.save`` writes (format 1.0 header, then the data), through
    ``f.write`` in views of the array (``write_all``): ``numpy.lib.format.write_array`` would
    copy the whole array with ``tobytes`` first on a file object that is not a real file."""
    arr = np.ascontiguousarray(arr)
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(arr))
    write_all(f, arr)


class Npy(Format):
    name = "npy"
    suffixes = (".ids.npy", ".offsets.npy")

    def nbytes(self, n_tokens, n_docs, itemsize):
        return n_tokens * itemsize + (n_docs + 1) * 8 + 2 * 128  # two 128-byte .npy headers

    def write(self, handles, ids, offsets):
        _write_npy(handles[0], ids)
        _write_npy(handles[1], np.asarray(offsets, dtype=np.int64))

    def write_parts(self, handles, parts, n_ids, dtype, offsets):
        """``write`` of the ids ``parts`` (arrays, in order, ``n_ids`` in all) as one array of
        ``dtype``, each part written as it is (cast only where its dtype differs): the shard
        writer then makes no shard-sized copy (12 MB of text: 15 MB of fresh pages and ~40 ms
        of a ~0.4 s ``gputok encode`` on the 2-core box)."""
        dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": (int(n_ids),)}
        np.lib.format.write_array_header_1_0(handles[0], header)
        for p in parts:
            write_all(handles[0], np.asarray(p).astype(dtype, copy=False))
        _write_npy(handles[1], np.asarray(offsets, dtype=np.int64))

    def read(self, paths, *, dtype=None, eot=None):
        return np.load(paths[0]), np.load(paths[1])


FORMAT = Npy()
