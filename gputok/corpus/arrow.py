"""The Arrow reader: Parquet and Arrow IPC (file or stream) string columns.

Read in record batches through Arrow's buffers (no Python strings), whole row groups before a
resume position skipped without being read. Positions are rows: ``(file, row_end, row_end)``.
"""

from __future__ import annotations

from typing import Iterator

from .sources import CorpusError, Source


def arrow_batches(src: Source, i: int, start, field: str, rows: int) -> Iterator[tuple]:
    """``(string array, [(file, row_end, row_end)...], on_disk_position)`` in record batches."""
    import pyarrow as pa

    skip = start[1] if start and start[0] == i else 0
    if src.kind == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(src.path)
        md = pf.metadata
        groups, first, seen = [], 0, 0
        for g in range(md.num_row_groups):  # whole row groups before the start are not read
            n = md.row_group(g).num_rows
            if seen + n > skip:
                groups.append(g)
            elif not groups:
                first = seen + n
            seen += n
        it = pf.iter_batches(batch_size=rows, row_groups=groups, columns=[field]) if groups else []
        cols = (b.column(0) for b in it)
    else:
        try:
            reader = pa.ipc.open_file(src.path)
            cols = (reader.get_batch(k).column(field) for k in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            cols = (b.column(field) for b in pa.ipc.open_stream(src.path))
        first = 0
    row = first
    total = max(_num_rows(src), 1)
    for col in cols:
        lo = max(skip - row, 0)
        if lo < len(col):
            part = col.slice(lo)
            if part.null_count:
                k = row + lo + next(j for j, v in enumerate(part.is_null().to_pylist()) if v)
                raise CorpusError(f"{src.path}: row {k}: column {field!r} is null")
            ends = [(i, r, r) for r in range(row + lo + 1, row + len(col) + 1)]
            yield part, ends, src.size * (row + len(col)) // total
        row += len(col)


def _num_rows(src: Source) -> int:
    import pyarrow as pa

    if src.kind == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(src.path).metadata.num_rows
    try:
        r = pa.ipc.open_file(src.path)
        return sum(r.get_batch(k).num_rows for k in range(r.num_record_batches))
    except pa.ArrowInvalid:
        return sum(b.num_rows for b in pa.ipc.open_stream(src.path))


def concat_columns(cols):
    import pyarrow as pa

    return cols[0] if len(cols) == 1 else pa.concat_arrays(cols)
