"""The corpus as documents one at a time, for training: inputs resolved (``inputs``), then read
by the text and Arrow readers; no batches, no encoder."""

from __future__ import annotations

import gzip
import zlib
from typing import Iterator

from .arrow import arrow_batches
from .inputs import resolve_inputs
from .sources import CorpusError, location
from .text import text_docs

def iter_documents(paths, *, field: str = "text", errors: str = "strict"
                   ) -> Iterator[tuple["str | None", int, str]]:
    """Yield ``(document, input_bytes_consumed, location)`` for every document, in order
    (``document`` is None for a blank line, still counted for progress). Used by the trainer:
    documents come as the encoder reads them (a lone surrogate spelled in JSON is U+FFFD, as
    ``train_bpe`` treats a str holding one), so a vocabulary is trained on the text it encodes.

    >>> next(iter_documents(["sample/austen.jsonl"]))[2]
    'sample/austen.jsonl:1'
    """
    sources = resolve_inputs(paths, field=field)
    for i, src in enumerate(sources):
        if src.kind in ("parquet", "arrow"):
            for col, ends, _disk in arrow_batches(src, i, None, field, 8192):
                for text, end in zip(col.to_pylist(), ends):
                    yield text, 0, location(sources, end)
            continue
        done = 0
        try:
            for text, end, disk in text_docs(src, i, None, field, errors, as_encoded=True):
                yield text, disk - done, location(sources, end)
                done = disk
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise CorpusError(f"{src.path}: truncated or corrupt {src.compression} data "
                              f"({type(e).__name__}: {e})") from None
