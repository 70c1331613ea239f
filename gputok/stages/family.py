"""What the emit stage asks of a non-byte-level model's tables (``Model.family``).

A family turns pieces into ids (``merge_pieces``); then ``finish`` post-processes a batch's ids
(SentencePiece fuses runs of unknowns there) and ``token_id`` looks a piece's text up. The
defaults here are the plain ones: ids unchanged, the vocabulary's id.
"""

from __future__ import annotations

__all__ = ["Family"]


class Family:
    """Defaults of the family protocol; a family sets ``vocab`` (text -> id)."""

    vocab: dict

    def finish(self, ids, offsets):
        """The batch's ids and offsets after the family's last rule (here: unchanged)."""
        return ids, offsets

    def finish_list(self, ids: list) -> list:
        """``finish`` for one document's ids as a list."""
        return ids

    def token_id(self, text: str) -> "int | None":
        """The id of one piece's text, or None."""
        return self.vocab.get(text)
