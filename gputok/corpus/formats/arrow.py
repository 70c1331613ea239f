"""``arrow`` / ``parquet``: one table per shard with an ``input_ids: large_list<int32>`` column.

``large_list`` because its offsets are int64, exactly gputok's ``offsets``, so ``(ids, offsets)``
becomes an Arrow column by wrapping the two buffers: no per-document Python objects, no copy of
the offsets, and the ids copied only when they must be widened (uint16 vocabularies; uint32 ids
are reinterpreted as int32 in place, as every id is below 2**31). int32 because that is what
``datasets``, PyTorch and JAX loaders expect for token ids.

``to_arrow(ids, offsets)`` is the building block; ``batch_encoder(enc)`` wraps it for
``datasets.Dataset.map(batched=True)``.
"""

from __future__ import annotations

import numpy as np

from . import Format

COLUMN = "input_ids"


def _pa():
    try:
        import pyarrow as pa
    except ImportError:
        raise ImportError("the arrow and parquet formats need pyarrow: pip install "
                          "'gputok[arrow]'") from None
    return pa


def to_arrow(ids: np.ndarray, offsets: np.ndarray):
    """``(ids, offsets)`` as a ``pyarrow.LargeListArray`` of int32, wrapping the buffers.

    >>> import numpy as np
    >>> to_arrow(np.array([5, 6, 7], np.uint32), np.array([0, 2, 3])).to_pylist()
    [[5, 6], [7]]
    """
    pa = _pa()
    ids = np.asarray(ids)
    if ids.dtype == np.uint32 or ids.dtype == np.int32:
        if ids.dtype == np.uint32 and len(ids) and int(ids.max()) >= (1 << 31):
            raise ValueError("an id does not fit int32")
        values = np.ascontiguousarray(ids).view(np.int32)  # no copy
    else:
        values = ids.astype(np.int32)  # uint16 must widen: one copy
    off = np.ascontiguousarray(offsets, dtype=np.int64)
    n = len(off) - 1
    return pa.LargeListArray.from_buffers(
        pa.large_list(pa.int32()), n, [None, pa.py_buffer(off)],
        children=[pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])])


def from_arrow(column) -> "tuple[np.ndarray, np.ndarray]":
    """The inverse of ``to_arrow``: ``(ids int32, offsets int64)`` of a (chunked) list column."""
    pa = _pa()
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    column = column.cast(pa.large_list(pa.int32()))
    off = column.offsets.to_numpy().astype(np.int64)
    values = column.values.to_numpy(zero_copy_only=False)
    return values[off[0]:off[-1]], off - off[0]


def batch_encoder(enc, *, text_column: str = "text", output_column: str = COLUMN,
                  allowed_special=frozenset(), disallowed_special="all", backend: str = "auto"):
    """A function for ``datasets.Dataset.map(fn, batched=True)`` that returns Arrow.

    It accepts the batch as a ``pyarrow.Table`` (``dataset.with_format("arrow")``: the text is
    read through Arrow's buffers, no Python strings at all) or as a dict of lists, and returns a
    ``pyarrow.Table`` with one ``large_list<int32>`` column built by ``to_arrow``.

    >>> fn = batch_encoder(gputok.get_encoding("cl100k_base"))
    >>> fn({"text": ["hello world"]}).column("input_ids").to_pylist()
    [[15339, 1917]]
    """
    pa = _pa()

    def encode(batch):
        texts = (batch.column(text_column) if isinstance(batch, (pa.Table, pa.RecordBatch))
                 else batch[text_column])  # a dict or datasets' LazyBatch
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
        elif not isinstance(texts, (list, pa.Array)):
            texts = list(texts)
        ids, offsets = enc.encode_batch_arrays(texts, allowed_special=allowed_special,
                                               disallowed_special=disallowed_special,
                                               backend=backend)
        return pa.table({output_column: to_arrow(ids, offsets)})

    return encode


class _ArrowBase(Format):
    def dtype(self, n_vocab):
        if n_vocab > (1 << 31):
            raise ValueError(f"{self.name} stores int32 ids; {n_vocab} ids do not fit")
        return np.dtype(np.int32)

    def nbytes(self, n_tokens, n_docs, itemsize):
        return n_tokens * 4 + (n_docs + 1) * 8


class Parquet(_ArrowBase):
    name = "parquet"
    suffixes = (".parquet",)

    def write(self, handles, ids, offsets):
        import pyarrow.parquet as pq

        pa = _pa()
        table = pa.table({COLUMN: to_arrow(ids, offsets)})
        pq.write_table(table, pa.PythonFile(handles[0], mode="w"))

    def read(self, paths, *, dtype=None, eot=None):
        import pyarrow.parquet as pq

        return from_arrow(pq.read_table(paths[0]).column(COLUMN))


class Arrow(_ArrowBase):
    name = "arrow"
    suffixes = (".arrow",)

    def write(self, handles, ids, offsets):
        pa = _pa()
        table = pa.table({COLUMN: to_arrow(ids, offsets)})
        # the IPC *stream* format: what ``datasets`` writes and ``Dataset.from_file`` reads
        with pa.ipc.new_stream(pa.PythonFile(handles[0], mode="w"), table.schema) as w:
            w.write_table(table)

    def read(self, paths, *, dtype=None, eot=None):
        pa = _pa()
        with pa.OSFile(str(paths[0])) as src:  # read, not mapped: the arrays outlive the file
            return from_arrow(pa.ipc.open_stream(src).read_all().column(COLUMN))


FORMAT = Arrow()
