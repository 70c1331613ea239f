"""Padding: ragged ``(ids, offsets)`` -> a rectangle plus an attention mask."""

from __future__ import annotations

import numpy as np


def pad(ids: np.ndarray, offsets: np.ndarray, *, pad_id: int, max_length: "int | None" = None,
        padding_side: str = "right", truncation_side: str = "right",
        pad_to_multiple_of: "int | None" = None, id_dtype=np.uint32
        ) -> tuple[np.ndarray, np.ndarray]:
    """See ``Encoding.pad``.

    >>> pad(np.array([1, 2, 3]), np.array([0, 2, 3]), pad_id=0)[0].tolist()
    [[1, 2], [3, 0]]
    """
    if padding_side not in ("left", "right") or truncation_side not in ("left", "right"):
        raise ValueError("padding_side and truncation_side must be 'left' or 'right'")
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be >= 0")
    if pad_to_multiple_of is not None and pad_to_multiple_of <= 0:
        raise ValueError("pad_to_multiple_of must be a positive int")
    ids = np.asarray(ids)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    width = int(lengths.max(initial=0))
    if max_length is not None:
        width = min(width, max_length)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        if max_length is not None and width > max_length:
            width -= pad_to_multiple_of  # stay within the cap the caller gave
    keep = np.minimum(lengths, width)
    # first source token per row: truncating on the left skips the head of long documents
    src0 = offsets[:-1] + (lengths - keep if truncation_side == "left" else 0)
    col = np.arange(width, dtype=np.int64)[None, :]
    shift = (width - keep)[:, None] if padding_side == "left" else 0
    j = col - shift  # position inside the kept tokens
    mask = (j >= 0) & (j < keep[:, None])
    out = np.full((len(lengths), width), pad_id, dtype=ids.dtype if len(ids) else id_dtype)
    out[mask] = ids[(src0[:, None] + j)[mask]]
    return out, mask.astype(np.uint8)

