"""``npy``: ``shard_NNNNN.ids.npy`` (uint16 when the vocabulary fits, else uint32) and
``shard_NNNNN.offsets.npy`` (int64, documents + 1), gputok's own layout.

>>> import numpy as np
>>> ids = np.load("out/shard_00000.ids.npy"); off = np.load("out/shard_00000.offsets.npy")
>>> first_doc = ids[off[0]:off[1]]                                         # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from . import Format


class _WriteThrough:
    """Routes ``numpy.lib.format.write_array`` through ``f.write`` (see ``write_all``): numpy
    calls ``tofile`` on real files only, so this thin wrapper is enough."""

    def __init__(self, f):
        self.write = f.write


class Npy(Format):
    name = "npy"
    suffixes = (".ids.npy", ".offsets.npy")

    def nbytes(self, n_tokens, n_docs, itemsize):
        return n_tokens * itemsize + (n_docs + 1) * 8 + 2 * 128  # two 128-byte .npy headers

    def write(self, handles, ids, offsets):
        np.lib.format.write_array(_WriteThrough(handles[0]), ids, allow_pickle=False)
        np.lib.format.write_array(_WriteThrough(handles[1]), np.asarray(offsets, dtype=np.int64),
                                  allow_pickle=False)

    def read(self, paths, *, dtype=None, eot=None):
        return np.load(paths[0]), np.load(paths[1])


FORMAT = Npy()
