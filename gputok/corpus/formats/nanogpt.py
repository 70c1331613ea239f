"""``nanogpt``: the raw token stream nanoGPT's ``train.py`` memory-maps.

One ``shard_NNNNN.bin`` per shard: the ids of every document as little-endian uint16, each
document followed by the end-of-text id (nanoGPT's ``prepare.py`` appends it; there is no index,
so the EOT is the only document boundary). ``cat out/shard_*.bin > train.bin`` gives the single
file ``train.py`` expects. Vocabularies above 65,536 ids do not fit and are refused before any
work starts (use ``megatron``, ``datatrove``, ``npy`` or ``parquet``).

>>> import numpy as np
>>> data = np.memmap("out/shard_00000.bin", dtype=np.uint16, mode="r")      # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from . import Format, write_all


class NanoGPT(Format):
    name = "nanogpt"
    suffixes = (".bin",)
    requires_eot = True

    def dtype(self, n_vocab):
        if n_vocab > (1 << 16):
            raise ValueError(f"--format nanogpt stores uint16 ids, but the vocabulary has {n_vocab} "
                             "ids; use --format megatron, datatrove, npy or parquet")
        return np.dtype("<u2")

    def nbytes(self, n_tokens, n_docs, itemsize):
        return n_tokens * 2

    def write(self, handles, ids, offsets):
        write_all(handles[0], ids.astype("<u2", copy=False))

    def read(self, paths, *, dtype=None, eot: "int | None" = None):
        """Ids and offsets; documents are found by their trailing EOT when ``eot`` is given
        (a document that itself contains the EOT id, allowed as a special, splits there: the
        format cannot tell), else the whole shard is one range."""
        ids = np.fromfile(paths[0], dtype="<u2")
        if eot is None:
            return ids, np.array([0, len(ids)], dtype=np.int64)
        ends = np.flatnonzero(ids == eot) + 1
        return ids, np.concatenate([[0], ends]).astype(np.int64)


FORMAT = NanoGPT()
