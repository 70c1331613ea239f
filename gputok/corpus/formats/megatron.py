"""``megatron``: Megatron-LM's indexed dataset, ``shard_NNNNN.bin`` + ``shard_NNNNN.idx``,
byte-identical to what megatron-core's ``IndexedDatasetBuilder`` writes for one sequence per
document (``tools/preprocess_data.py`` without ``--split-sentences``).

``.bin``: the ids, little-endian, documents back to back. ``.idx``, all little-endian::

    b"MMIDIDX\\x00\\x00"          magic
    <Q  1                        version
    <B  dtype code               8 = uint16, 4 = int32 (the format has no uint32)
    <Q  n_sequences              = n_docs here
    <Q  n_docs + 1               length of the document index
    int32[n_sequences]           tokens per sequence
    int64[n_sequences]           byte offset of each sequence in .bin
    int64[n_docs + 1]            0, 1, ..., n_docs: sequence index where each document ends

The dtype follows megatron-core's ``DType.optimal_dtype``: uint16 when the vocabulary has fewer
than 65,500 ids (not 65,536: that is Megatron's threshold), int32 otherwise. Read it with
``megatron.core.datasets.indexed_dataset.IndexedDataset("out/shard_00000")``.
"""

from __future__ import annotations

import struct

import numpy as np

from . import Format, doc_lengths, write_all

MAGIC = b"MMIDIDX\x00\x00"
CODES = {np.dtype("<u2"): 8, np.dtype("<i4"): 4}


class Megatron(Format):
    name = "megatron"
    suffixes = (".bin", ".idx")

    def dtype(self, n_vocab):
        return np.dtype("<u2" if n_vocab < 65500 else "<i4")

    def nbytes(self, n_tokens, n_docs, itemsize):
        return n_tokens * itemsize + 42 + 20 * n_docs  # .idx: 34-byte header, 20 B/doc, 8 B

    def write(self, handles, ids, offsets):
        dt = np.dtype("<u2") if ids.dtype.itemsize == 2 else np.dtype("<i4")
        if dt.itemsize == 4 and len(ids) and int(ids.max()) >= (1 << 31):
            raise ValueError("an id does not fit Megatron's int32")
        write_all(handles[0], ids.astype(dt, copy=False))
        lens = doc_lengths(offsets)
        n = len(lens)
        idx = handles[1]
        idx.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", CODES[dt]))
        idx.write(struct.pack("<Q", n) + struct.pack("<Q", n + 1))
        write_all(idx, lens.astype("<i4"))
        write_all(idx, np.asarray(offsets[:-1], dtype="<i8") * dt.itemsize)
        write_all(idx, np.arange(n + 1, dtype="<i8"))

    def read(self, paths, *, dtype=None, eot=None):
        raw = open(paths[1], "rb").read()
        if raw[:9] != MAGIC:
            raise ValueError(f"{paths[1]}: not a Megatron .idx file (bad magic {raw[:9]!r})")
        (version,), (code,) = struct.unpack_from("<Q", raw, 9), struct.unpack_from("<B", raw, 17)
        if version != 1 or code not in (4, 8):
            raise ValueError(f"{paths[1]}: unsupported version {version} / dtype code {code}")
        n_seq, n_doc = struct.unpack_from("<QQ", raw, 18)
        lens = np.frombuffer(raw, "<i4", n_seq, 34)
        dt = np.dtype("<u2" if code == 8 else "<i4")
        ids = np.fromfile(paths[0], dtype=dt)
        offsets = np.zeros(n_seq + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return ids, offsets


FORMAT = Megatron()
