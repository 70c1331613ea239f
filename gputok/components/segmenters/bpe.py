"""Byte-level BPE: tiktoken's rule (ranks) and HF's (merges), one merge table.

The rules are ``cpu_ref/bpe.py``; the stage is ``stages/merge.py`` (rounds, heap, scalar), the
table ``stages/table.py``. Its device form is the merge kernels (kernels/encode_merge.cu; the
tables ``backends/device_tables.py`` uploads, cached on disk for the tiktoken rule), which every
device runs, in its one-call forms too.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Mapping

import numpy as np

from .. import SegmenterDevice
from ...stages.merge import merge_pieces
from ...stages.table import MergeTable
from . import Base

DEVICE = SegmenterDevice(stage="merge", kernel="encode_merge_short", one_call=True)


class BpeSegmenter(Base):
    """``ranks`` (tiktoken: a pair merges into the token its bytes spell; id = rank) or
    ``merges`` (HF: ``(left, right, merged)`` ids in priority order); ``byte_ids``: the id of
    each single byte; ``whole``: bytes -> id when a unit that is a token is emitted whole first;
    ``decoder``: id -> bytes; ``digest``: the vocabulary's identity (the table caches);
    ``drop_id``: the id of bytes the vocabulary lacks (``Model.drop_id``)."""

    name = "byte-level BPE"
    device = DEVICE
    byte_level = True

    def __init__(self, *, ranks: "Mapping[bytes, int] | None", merges: "list | None",
                 byte_ids: np.ndarray, whole: "Mapping[bytes, int] | None",
                 decoder: Mapping[int, bytes], digest: "str | None", where: str,
                 drop_id: "int | None" = None):
        if (ranks is None) == (merges is None):
            raise ValueError(f"{where}: a model needs either ranks or merges")
        self.ranks, self.merges, self.byte_ids, self.whole = ranks, merges, byte_ids, whole
        self.decoder, self.digest, self.drop_id = decoder, digest, drop_id

    def segment(self, units: list) -> list:
        return merge_pieces(self, units)

    def token_id(self, text: str) -> None:
        return None  # a byte-level token is looked up by its bytes (Model.token_ids_by_bytes)

    @functools.cached_property
    def merge_table(self) -> MergeTable:
        """Built on first use (a few hundred ms for 200K vocabularies; cached on disk for the
        tiktoken rule)."""
        if self.ranks is not None:
            return MergeTable.from_ranks(self.ranks, digest=self.ranks_digest,
                                         decoder=self.decoder)
        return MergeTable.from_merges(self.merges, self.byte_ids, self.whole)

    @property
    def has_merge_table(self) -> bool:
        return "merge_table" in self.__dict__

    @functools.cached_property
    def ranks_digest(self) -> "str | None":
        """The vocabulary's identity for the merge-table cache: the loader's digest of its
        source file when it gave one, else a digest of the ranks (~0.1 s for 200K tokens)."""
        if self.digest is not None:
            return self.digest
        if self.ranks is None:
            return None
        h = hashlib.sha256()
        for tok, rank in sorted(self.ranks.items(), key=lambda kv: kv[1]):
            h.update(b"%d %d " % (rank, len(tok)) + tok)
        return h.hexdigest()[:32]

