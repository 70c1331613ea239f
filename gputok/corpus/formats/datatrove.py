"""``datatrove``: datatrove's tokenized files, ``shard_NNNNN.ds`` + ``shard_NNNNN.ds.index``,
byte-identical to ``datatrove.pipeline.tokens.tokenizer.TokenizedFile`` (datatrove 0.10).

``.ds``: the ids, little-endian uint16 (``H``) when the vocabulary has at most 65,536 ids, else
uint32 (``I``). ``.ds.index``: ``<Q`` per document, the running end of each document in tokens.
datatrove's ``DatatroveFolderDataset`` (and nanotron) read a folder of these. datatrove's own
tokenizer usually appends the EOS through a post-processor: pass ``--append-eot`` for the same.
"""

from __future__ import annotations

import numpy as np

from . import Format, write_all


class Datatrove(Format):
    name = "datatrove"
    suffixes = (".ds", ".ds.index")

    def dtype(self, n_vocab):
        return np.dtype("<u2" if n_vocab <= (1 << 16) else "<u4")

    def write(self, handles, ids, offsets):
        dt = np.dtype("<u2") if ids.dtype.itemsize == 2 else np.dtype("<u4")
        write_all(handles[0], ids.astype(dt, copy=False))
        write_all(handles[1], np.asarray(offsets[1:], dtype="<u8"))

    def read(self, paths, *, dtype="<u2", eot=None):
        ends = np.fromfile(paths[1], dtype="<u8").astype(np.int64)
        ids = np.fromfile(paths[0], dtype=dtype)
        return ids, np.concatenate([[0], ends]).astype(np.int64)


FORMAT = Datatrove()
