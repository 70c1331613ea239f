"""llama2.c's decoding: sentencepiece's walk on pieces that hold " " where the model had "▁".

``run.c`` drops the leading space of the piece after BOS; gputok drops the dummy space the
encoder added at the start of the ids too (with or without BOS before it), so ``decode(encode(t))
== t``. A real sentencepiece model without whitespace escaping keeps that space (its decoder
only strips "▁"), hence this decoder of its own.
"""

from __future__ import annotations

import functools

from .spm import SpmDecoder


class Llama2cDecoder(SpmDecoder):
    """``SpmDecoder`` whose strippable leading space is " "."""

    @functools.cached_property
    def lead(self) -> list:
        t = self.type_codes
        return (self.table.starts_with(b" ") & (t != self.byte) & (t != self.control)
                & (t != self.unknown)).tolist()
