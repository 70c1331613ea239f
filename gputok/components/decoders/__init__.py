"""Decoders: ids -> text as the family's library decodes them (``components.Decoder``).

    ByteDecoder    the tokens' bytes joined (byte-level BPE; tiktoken's decode)
    chains.py      sentencepiece's decoding (``SpmDecoder``) and HF decoder chains
                   (``HFDecoder``: Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece, ...)
"""

from __future__ import annotations

from typing import Mapping

from ...decode import StreamDecoder, join_bytes
from .chains import HFDecoder, SpmDecoder

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

    def stream(self, errors: str = "replace") -> StreamDecoder:
        return StreamDecoder(self.decoder, errors)
