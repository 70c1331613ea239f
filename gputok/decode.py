"""Decoding: ids to bytes and text, including a streaming decoder for token streams.

Decoding is plain concatenation of each token's bytes. A token may hold part of a UTF-8
character, so text decoding is lossy at the edges (``errors="replace"``, the default, as
tiktoken) and the streaming decoder holds back an incomplete tail between calls.
"""

from __future__ import annotations

import codecs
from typing import Iterable, Mapping

import numpy as np


def as_int_list(tokens) -> list:
    """Token ids as a list of Python ints (numpy arrays are converted in one call)."""
    if isinstance(tokens, np.ndarray):
        return tokens.tolist()
    return tokens


def join_bytes(decoder: Mapping[int, bytes], tokens) -> bytes:
    """The bytes of ``tokens`` concatenated; an unknown id raises ``KeyError`` naming it."""
    try:
        return b"".join([decoder[t] for t in as_int_list(tokens)])
    except KeyError as e:
        raise KeyError(f"invalid token for decoding: {e.args[0]}") from None
    except TypeError:
        raise TypeError("tokens must be ints (a list or a numpy array of ids)") from None


class StreamDecoder:
    """Incremental decoding: every ``feed`` returns the text complete so far and holds back the
    bytes of a character whose remaining bytes may still arrive; ``flush`` releases them.
    The concatenation of all results equals ``decode(all_tokens, errors=errors)``.

    >>> dec = gputok.get_encoding("cl100k_base").stream_decoder()
    >>> dec.feed([9468]) + dec.feed([248, 222]) + dec.flush()
    '😀'
    """

    def __init__(self, encoding, errors: str = "replace"):
        # an Encoding, a Model, or a plain {id: bytes} mapping
        model = getattr(encoding, "model", encoding)
        self._decoder: Mapping[int, bytes] = getattr(model, "decoder", model)
        # Python's incremental UTF-8 codec keeps a trailing sequence only while it can still
        # become valid, and replaces (or rejects) a sequence as soon as it cannot
        self._codec = codecs.getincrementaldecoder("utf-8")(errors=errors)

    def feed(self, tokens: Iterable[int]) -> str:
        return self._codec.decode(join_bytes(self._decoder, list(tokens)), final=False)

    def flush(self) -> str:
        """The held-back bytes (replaced: they can no longer be completed), and a reset."""
        return self._codec.decode(b"", final=True)

    @property
    def pending(self) -> bytes:
        """The held-back incomplete tail (0 to 3 bytes)."""
        return self._codec.getstate()[0]
