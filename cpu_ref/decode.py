"""Decoding: token ids back to bytes, to text, and incrementally.

Decoding is plain concatenation of each token's bytes. Tokens are byte sequences, not characters,
so a single token may hold half of a UTF-8 character; hence three flavours:

* ``decode_bytes``: exact, always round-trips.
* ``decode(errors="replace")``: bytes decoded with Python's codec; invalid or truncated sequences
  become U+FFFD (lossy; ``errors="strict"`` raises instead).
* ``StreamDecoder``: for token streams (generation, or shards decoded piecewise). Each ``feed``
  returns the text that is complete so far and *holds back* an incomplete UTF-8 tail -- at most 3
  bytes of a character whose remaining bytes may arrive with the next tokens. ``flush`` releases
  the tail (replaced, as it can never be completed).
"""

from __future__ import annotations

import codecs
from typing import Callable, Iterable


def decode_bytes(tokens: Iterable[int], token_bytes: Callable[[int], bytes]) -> bytes:
    return b"".join(token_bytes(t) for t in tokens)


def decode(tokens: Iterable[int], token_bytes: Callable[[int], bytes], errors: str = "replace") -> str:
    return decode_bytes(tokens, token_bytes).decode("utf-8", errors=errors)


class StreamDecoder:
    """Incremental decoder: concatenating every ``feed`` result plus ``flush()`` equals
    ``decode(all_tokens, errors=errors)``."""

    def __init__(self, token_bytes: Callable[[int], bytes], errors: str = "replace"):
        self._token_bytes = token_bytes
        # Python's incremental UTF-8 decoder does exactly the holding back we need: it keeps an
        # incomplete trailing sequence and replaces sequences that can no longer become valid.
        self._dec = codecs.getincrementaldecoder("utf-8")(errors=errors)

    def feed(self, tokens: Iterable[int]) -> str:
        return self._dec.decode(b"".join(self._token_bytes(t) for t in tokens), final=False)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)

    @property
    def pending(self) -> bytes:
        """The held-back incomplete tail (0..3 bytes)."""
        return self._dec.getstate()[0]
