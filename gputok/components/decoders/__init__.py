"""Decoders: ids -> text as the family's library decodes them (``components.Decoder``).

    ByteDecoder    the tokens' bytes joined (byte-level BPE; tiktoken's decode)
    spm.py         sentencepiece's decoding (``SpmDecoder``)
    chains.py      HF decoder chains
                   (``HFDecoder``: Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece, ...)
"""

from __future__ import annotations

import functools
from typing import Mapping

import numpy as np

from ...decode import StreamDecoder, join_bytes
from ...stages.join import JoinTable
from .chains import HFDecoder
from .spm import SpmDecoder

__all__ = ["ByteDecoder", "SpmDecoder", "HFDecoder"]


class ByteDecoder:
    """Joins each token's bytes; text is their UTF-8 decoding (``errors`` as ``bytes.decode``).

    >>> ByteDecoder({0: b"h", 1: b"\\xc3", 2: b"\\xa9"}).decode([0, 1, 2])
    'hé'
    """

    def __init__(self, decoder: Mapping[int, bytes]):
        self.decoder = decoder

    def decode_bytes(self, tokens) -> bytes:
        return join_bytes(self.decoder, tokens)

    def decode(self, tokens, errors: str = "replace") -> str:
        return join_bytes(self.decoder, tokens).decode("utf-8", errors=errors)

    @functools.cached_property
    def joined(self) -> "JoinTable | None":
        """Every id's bytes laid out for the native batch join, an id with no bytes marked
        (``decode`` names it); None when the ids are too sparse for a flat table."""
        items = list(self.decoder.items())
        n = max((i for i, _ in items), default=-1) + 1
        if n > 4 * len(items) + 4096 or any(type(i) is not int or i < 0 for i, _ in items):
            return None
        parts, mark = [b""] * n, np.ones(n, np.uint8)
        for i, tok in items:
            parts[i] = tok
            mark[i] = 0
        return JoinTable(parts, mark)

    def _join_batch(self, batch, joiner) -> "tuple | None":
        table = self.joined if joiner is not None else None
        return None if table is None else joiner(batch, table)

    def decode_batch(self, batch, errors: str = "replace", joiner=None) -> list:
        """``[decode(ids) for ids in batch]``, the batch's bytes joined in one native call with
        ``joiner`` (``stages.join.PieceJoin``)."""
        got = self._join_batch(batch, joiner)
        if got is None:
            return [self.decode(t, errors) for t in batch]
        buf, ends, bad = got
        if bad:  # (an id with no bytes: decode raises, naming it)
            self.decode(batch[bad[0]], errors)
        return [buf[a:b].decode("utf-8", errors) for a, b in zip(ends, ends[1:])]

    def decode_bytes_batch(self, batch, joiner=None) -> list:
        got = self._join_batch(batch, joiner)
        if got is None:
            return [self.decode_bytes(t) for t in batch]
        buf, ends, bad = got
        if bad:
            self.decode_bytes(batch[bad[0]])
        return [buf[a:b] for a, b in zip(ends, ends[1:])]

    def stream(self, errors: str = "replace") -> StreamDecoder:
        return StreamDecoder(self.decoder, errors)
