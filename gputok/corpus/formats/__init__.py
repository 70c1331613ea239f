"""Output formats for corpus jobs: one module per format, one small protocol.

A format turns one shard's ragged ids, ``ids`` + ``offsets`` (document ``i`` is
``ids[offsets[i]:offsets[i + 1]]``), into the files a training stack reads, and reads them back.
Everything else (shard caps, temporary names, checksums, the manifest, resume) lives in
``gputok.corpus.shards`` and is the same for every format, so a format module is only its byte layout.

=========== ===================================== ===================================================
name        files per shard                       read by
=========== ===================================== ===================================================
npy         ``.ids.npy`` + ``.offsets.npy``       ``numpy.load``
nanogpt     ``.bin`` (uint16, EOT after each doc) ``numpy.memmap(path, dtype=numpy.uint16)``
megatron    ``.bin`` + ``.idx``                   megatron-core ``IndexedDataset(path_prefix)``
datatrove   ``.ds`` + ``.ds.index``               datatrove ``DatatroveFolderDataset``
parquet     ``.parquet`` (``large_list<int32>``)  ``pyarrow.parquet``, ``datasets``, pandas
arrow       ``.arrow`` (IPC stream, same schema)  ``pyarrow.ipc``, ``datasets.Dataset.from_file``
=========== ===================================== ===================================================

>>> from gputok.corpus.formats import get_format
>>> get_format("megatron").files("shard_00000")
['shard_00000.bin', 'shard_00000.idx']
"""

from __future__ import annotations

import importlib
from typing import BinaryIO

import numpy as np

FORMATS = ("npy", "nanogpt", "megatron", "datatrove", "parquet", "arrow")


class Format:
    """The protocol every format module implements (as a subclass named ``FORMAT``)."""

    name = ""
    #: file-name suffixes of one shard, in the order ``write`` receives their handles
    suffixes: tuple = ()
    #: True when the format itself requires the end-of-text id after every document
    requires_eot = False

    def files(self, stem: str) -> list:
        return [stem + s for s in self.suffixes]

    def dtype(self, n_vocab: int) -> np.dtype:
        """The on-disk id dtype for a vocabulary of ``n_vocab`` ids (ValueError if none fits)."""
        return np.dtype(np.uint16 if n_vocab <= (1 << 16) else np.uint32)

    def nbytes(self, n_tokens, n_docs, itemsize: int):
        """Size of a shard on disk, for ``--shard-bytes`` caps (works on numpy arrays of counts).
        Exact for the binary formats; Parquet and Arrow give the uncompressed column size."""
        return n_tokens * itemsize + n_docs * 8

    def write(self, handles: list, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Write one shard; ``handles`` are binary files opened for writing, one per suffix."""
        raise NotImplementedError

    def read(self, paths: list, *, dtype=None, eot: "int | None" = None
             ) -> "tuple[np.ndarray, np.ndarray]":
        """Read one shard back as ``(ids, offsets)``: the inverse of ``write``. ``dtype`` and
        ``eot`` come from the manifest, for formats whose files do not record them."""
        raise NotImplementedError


def get_format(name: str) -> Format:
    """The format called ``name`` (one of ``FORMATS``); ``ValueError`` lists them otherwise.

    >>> get_format("nanogpt").requires_eot
    True
    """
    if name not in FORMATS:
        raise ValueError(f"unknown output format {name!r}; choose one of: {', '.join(FORMATS)}")
    return importlib.import_module(f"{__name__}.{name}").FORMAT


def write_all(f: BinaryIO, arr: np.ndarray) -> None:
    """Write an array's bytes through ``f.write`` (never ``ndarray.tofile``).

    ``tofile`` on a full disk raises ``OSError: N requested and M written`` with no errno and no
    path; ``f.write`` raises ``OSError(ENOSPC)``, which the shard writer turns into a message that
    names the file and what was kept. Chunked so that no second full-size copy is ever made."""
    mv = memoryview(np.ascontiguousarray(arr)).cast("B")
    step = 1 << 24
    for i in range(0, len(mv), step):
        f.write(mv[i:i + step])


def doc_lengths(offsets: np.ndarray) -> np.ndarray:
    return np.diff(np.asarray(offsets, dtype=np.int64))
