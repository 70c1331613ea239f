"""The Model: everything an encoder needs to turn text into ids, and nothing of the API.

Loaders build a ``Model`` from a vocabulary file (``.tiktoken``, ``tokenizer.json``, ...); the
``Encoding`` is tiktoken's API over a Model and a backend; stages and backends read the Model and
nothing else. A model is a composition of components (``gputok/components``):

* ``normalizer``, ``pretokenizer``, ``segmenter``, ``post`` (post-processor) and ``detok``
  (decoder), each a small declared protocol;
* ``specials`` (control tokens, under the allowed/disallowed contract), ``added`` (HF
  non-special added tokens: always cut out), ``lstrip`` / ``rstrip`` (HF added-token options);
* ``decoder`` (id -> bytes of every id, as ``decode_single_token_bytes`` shows it), ``byte_ids``
  (the id of each single byte, where the vocabulary has one) and ``digest`` (identifies the
  vocabulary: cache keys);
* ``drop_id``: an id no token has, which the merge table gives to bytes a byte-level vocabulary
  lacks and removes before merging (``loaders/bytelevel_gaps.py``); a piece made only of such
  bytes merges to it alone, and the Encoding drops it from what it returns. None: none.

Byte-level BPE has a shorthand: ``pretok`` (a ``PretokSpec``), ``normalizer`` as a tuple of
Unicode step names, and ``ranks`` (tiktoken rule) or ``merges`` (HF rule) with ``whole`` build
the regex pre-tokenizer, ``UnicodeSteps`` and the ``BpeSegmenter``; the byte-level data stays
readable here (``ranks``, ``merges``, ``merge_table``...) for the device tables.

Derived tables (the merge table, the piece cache) are built on first use and kept; they are
functions of the data above.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .components.postprocessors import NO_POST

# (the byte-level components are imported where a model needs them: loading a SentencePiece
# file does not import the regex pre-tokenizer, the merge table and the ranks cache)


@dataclass(frozen=True, eq=False)
class Model:
    name: str
    decoder: Mapping[int, bytes]
    byte_ids: np.ndarray
    pretok: "PretokSpec | None" = None
    ranks: "Mapping[bytes, int] | None" = None
    merges: "list | None" = None
    whole: "Mapping[bytes, int] | None" = None
    normalizer: object = ()
    specials: Mapping[str, int] = field(default_factory=dict)
    added: Mapping[str, int] = field(default_factory=dict)
    lstrip: frozenset = frozenset()
    rstrip: frozenset = frozenset()
    digest: "str | None" = None
    segmenter: "Segmenter | None" = None
    pretokenizer: object = None
    post: object = NO_POST
    detok: object = None
    drop_id: "int | None" = None

    def __post_init__(self):
        def put(name, value):  # (frozen: the components are filled in once, here)
            object.__setattr__(self, name, value)

        if isinstance(self.normalizer, tuple):
            from .components.normalizers import UnicodeSteps

            put("normalizer", UnicodeSteps(self.normalizer, f"{self.name}: normalizer"))
        if self.segmenter is None:
            from .components.segmenters.bpe import BpeSegmenter

            put("segmenter", BpeSegmenter(ranks=self.ranks, merges=self.merges,
                                          byte_ids=self.byte_ids, whole=self.whole,
                                          decoder=self.decoder, digest=self.digest,
                                          drop_id=self.drop_id, where=self.name))
        if self.pretokenizer is None:
            if self.pretok is None:
                raise ValueError(f"{self.name}: a model needs a pre-tokenizer (pretok= or "
                                 "pretokenizer=)")
            from .stages.pretok import Pretokenizer

            put("pretokenizer", Pretokenizer(self.pretok))
        if self.detok is None:
            from .components.decoders import ByteDecoder

            put("detok", ByteDecoder(self.decoder))
        if len(self.byte_ids) != 256:
            raise ValueError(f"{self.name}: byte_ids must give the id of each of the 256 bytes")
        unknown = (self.lstrip | self.rstrip) - set(self.specials) - set(self.added)
        if unknown:
            raise ValueError(f"{self.name}: lstrip/rstrip name tokens that are not added tokens: "
                             f"{sorted(unknown)[:5]}")

    def __repr__(self) -> str:
        return f"<Model {self.name!r}: {len(self.decoder)} ids>"

    # ---- the pipeline's front: normaliser -> pre-tokenizer -> the segmenter's units ----------

    @functools.cached_property
    def front(self) -> tuple:
        """(normaliser or None, pre-tokenizer): the pre-tokenizer with the normaliser fused
        into its pass where it can (BERT's), else the two in turn."""
        fused = self.pretokenizer.fuse(self.normalizer)
        if fused is not None:
            return None, fused
        return (self.normalizer if self.normalizer else None), self.pretokenizer

    def pieces_batch(self, segments: list, first=None) -> list:
        """Per segment (text between active tokens), its units for the piece cache and the
        segmenter. ``first``: per segment, whether it starts its document (only a pre-tokenizer
        with ``uses_first`` reads it; None: all do)."""
        norm, pre = self.front
        if norm is not None:
            segments = norm.normalize_batch(segments)
        words = pre.split_batch(segments, first)
        return self.segmenter.units(words) if self.segmenter.cuts else words

    def pieces(self, text: str, first: bool = True) -> list:
        """``pieces_batch`` of one segment."""
        norm, pre = self.front
        if not self.segmenter.cuts and not pre.uses_first:
            return pre.split(norm.normalize(text) if norm is not None else text)
        return self.pieces_batch([text], [first])[0]

    # ---- construction --------------------------------------------------------------------------

    @classmethod
    def from_ranks(cls, name: str, *, pat_str: str, ranks: dict[bytes, int],
                   specials: dict[str, int], digest: "str | None" = None) -> "Model":
        """tiktoken's parts: ids are ranks, merge priority is rank."""
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise ValueError(f"{name}: mergeable_ranks lacks {len(missing)} of the 256 single-byte "
                             f"tokens (first: {bytes([missing[0]])!r}); byte-level BPE needs all")
        from .ranks_cache import RankDecoder, RankTable
        from .stages.pretok import PretokSpec

        if isinstance(ranks, RankTable):  # from the ranks cache: checked when it was written
            decoder = RankDecoder(ranks)  # filled on demand (start-up: no 200K-entry dict)
        else:
            decoder = {r: b for b, r in ranks.items()}
            if len(decoder) != len(ranks):
                raise ValueError(f"{name}: mergeable_ranks maps two byte strings to the same "
                                 "rank")
        clash = [s for s, i in specials.items() if i in decoder]
        if clash:
            raise ValueError(f"{name}: special token {clash[0]!r} has id {specials[clash[0]]}, "
                             f"which is the rank of {decoder[specials[clash[0]]]!r}")
        for s, i in specials.items():
            decoder[i] = s.encode("utf-8")
        return cls(name=name, pretok=PretokSpec.regex(pat_str), decoder=decoder,
                   byte_ids=np.array([ranks[bytes([b])] for b in range(256)], np.uint32),
                   ranks=ranks, whole=ranks, specials=dict(specials), digest=digest)

    # ---- derived ---------------------------------------------------------------------------------

    def _bpe(self) -> "BpeSegmenter":
        if not self.segmenter.byte_level:
            raise ValueError(f"{self.name}: a {self.segmenter.name} model has no byte-level merge "
                             "table")
        return self.segmenter

    @property
    def merge_table(self) -> "MergeTable":
        """The byte-level merge table (built on first use: a few hundred ms for 200K
        vocabularies; cached on disk for the tiktoken rule)."""
        return self._bpe().merge_table

    @property
    def has_merge_table(self) -> bool:
        return self.segmenter.byte_level and self.segmenter.has_merge_table

    @property
    def ranks_digest(self) -> "str | None":
        """The vocabulary's identity for the merge-table cache (``BpeSegmenter``)."""
        return self.segmenter.ranks_digest if self.segmenter.byte_level else None

    @functools.cached_property
    def piece_cache(self) -> "PieceCache":
        from .stages.dedup import PieceCache

        return PieceCache()

    @functools.cached_property
    def max_token_value(self) -> int:
        top = getattr(self.decoder, "max_key", None)  # a RankDecoder knows without filling
        top = top() if top is not None else max(self.decoder)
        return top if self.drop_id is None else max(top, self.drop_id)  # (ids pass through it)

    @functools.cached_property
    def id_dtype(self) -> type:
        """uint16 when every id fits, else uint32."""
        return np.uint16 if self.max_token_value < (1 << 16) else np.uint32

    @functools.cached_property
    def token_ids_by_bytes(self) -> dict[bytes, int]:
        """bytes -> id of every mergeable (non-special, non-added) token."""
        skip = set(self.specials.values()) | set(self.added.values())
        return {b: i for i, b in self.decoder.items() if i not in skip}

    @functools.cached_property
    def special_set(self) -> frozenset:
        return frozenset(self.specials)

    def active_tokens(self, allowed: frozenset) -> frozenset:
        """The tokens cut out of the text: the allowed specials and every added token."""
        if not self.added:
            return allowed
        return allowed | self._added_set

    @functools.cached_property
    def _added_set(self) -> frozenset:
        return frozenset(self.added)

    def token_id(self, text: str) -> int:
        """The id of a special or added token's text."""
        i = self.specials.get(text)
        return self.added[text] if i is None else i
