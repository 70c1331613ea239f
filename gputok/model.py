"""The Model: everything an encoder needs to turn text into ids, and nothing of the API.

Loaders build a ``Model`` from a vocabulary file (``.tiktoken``, ``tokenizer.json``, ...); the
``Encoding`` is tiktoken's API over a Model and a backend; stages and backends read the Model and
nothing else. It holds data only:

* ``pretok`` (``stages.pretok.PretokSpec``) and ``normalizer`` (a tuple of step names);
* the BPE rule: ``ranks`` (tiktoken rule: a pair merges into the token its bytes spell; id =
  rank) or ``merges`` (HF rule: ``(left, right, merged)`` in priority order), the id of every
  single byte (``byte_ids``) and ``whole`` (bytes -> id, when a piece that is a token is
  emitted whole before merging);
* ``specials`` (control tokens, under the allowed/disallowed contract), ``added`` (HF
  non-special added tokens: always cut out), ``lstrip`` / ``rstrip`` (HF added-token options);
* ``decoder`` (id -> bytes, every id) and ``digest`` (identifies the vocabulary: cache keys);
* ``drop_id``: an id no token has, which the merge table gives to bytes a byte-level vocabulary
  lacks and removes before merging (``loaders/bytelevel_gaps.py``); a piece made only of such
  bytes merges to it alone, and the Encoding drops it from what it returns. None: none;
* ``kind``: the family, "bytelevel-bpe" (the fields above), "spm-bpe" (SentencePiece BPE: a
  ``.model``, a SPM-style tokenizer.json, a llama GGUF) or "wordpiece" (BERT). The other
  families keep their tables in ``family`` (``stages/spm.py``, ``stages/hf_spm.py``,
  ``stages/wordpiece.py``): each gives the pretok stage (``pieces_batch``), the merge stage
  (``merge_pieces``) and a last emit step (``finish``); ``detok`` (``gputok/detok.py``) is
  their decoder where decoding is more than joining bytes.

Derived tables (the merge table, the piece cache, the pre-tokenizer) are built on first use and
kept on the model; they are functions of the data above.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .ranks_cache import RankDecoder, RankTable
from .stages.dedup import PieceCache
from .stages.normalize import check_steps
from .stages.pretok import Pretokenizer, PretokSpec
from .stages.table import MergeTable

KINDS = ("bytelevel-bpe", "spm-bpe", "wordpiece")


@dataclass(frozen=True, eq=False)
class Model:
    name: str
    pretok: PretokSpec
    decoder: Mapping[int, bytes]
    byte_ids: np.ndarray
    ranks: "Mapping[bytes, int] | None" = None
    merges: "list | None" = None
    whole: "Mapping[bytes, int] | None" = None
    normalizer: tuple = ()
    specials: Mapping[str, int] = field(default_factory=dict)
    added: Mapping[str, int] = field(default_factory=dict)
    lstrip: frozenset = frozenset()
    rstrip: frozenset = frozenset()
    digest: "str | None" = None
    kind: str = "bytelevel-bpe"
    family: object = None
    detok: object = None
    drop_id: "int | None" = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown model kind {self.kind!r} (known: "
                             f"{', '.join(KINDS)})")
        if self.kind == "bytelevel-bpe" and (self.ranks is None) == (self.merges is None):
            raise ValueError(f"{self.name}: a model needs either ranks or merges")
        if self.kind != "bytelevel-bpe" and self.family is None:
            raise ValueError(f"{self.name}: a {self.kind} model needs its family tables")
        if len(self.byte_ids) != 256:
            raise ValueError(f"{self.name}: byte_ids must give the id of each of the 256 bytes")
        check_steps(self.normalizer, f"{self.name}: normalizer")
        unknown = (self.lstrip | self.rstrip) - set(self.specials) - set(self.added)
        if unknown:
            raise ValueError(f"{self.name}: lstrip/rstrip name tokens that are not added tokens: "
                             f"{sorted(unknown)[:5]}")

    def __repr__(self) -> str:
        return f"<Model {self.name!r}: {len(self.decoder)} ids>"

    # ---- construction --------------------------------------------------------------------------

    @classmethod
    def from_ranks(cls, name: str, *, pat_str: str, ranks: dict[bytes, int],
                   specials: dict[str, int], digest: "str | None" = None) -> "Model":
        """tiktoken's parts: ids are ranks, merge priority is rank."""
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise ValueError(f"{name}: mergeable_ranks lacks {len(missing)} of the 256 single-byte "
                             f"tokens (first: {bytes([missing[0]])!r}); byte-level BPE needs all")
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

    @functools.cached_property
    def merge_table(self) -> MergeTable:
        """Built on first use (a few hundred ms for 200K vocabularies; cached on disk for the
        tiktoken rule)."""
        if self.family is not None:
            raise ValueError(f"{self.name}: a {self.kind} model has no byte-level merge table")
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

    @functools.cached_property
    def piece_cache(self) -> PieceCache:
        return PieceCache()

    @functools.cached_property
    def pretokenizer(self) -> Pretokenizer:
        if self.pretok is None:
            raise ValueError(f"{self.name}: a {self.kind} model cuts its text in its family's "
                             "stages (model.family), not with a regex pre-tokenizer")
        return Pretokenizer(self.pretok)

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
