"""What a corpus input is, and the error a bad one raises (shared by the text and Arrow readers)."""

from __future__ import annotations

from dataclasses import dataclass


class CorpusError(ValueError):
    """Bad input: the message names the file and the line."""


@dataclass(frozen=True)
class Source:
    """One input: ``path`` (``"-"`` for stdin), its ``kind`` and ``compression`` (None, "gz",
    "zst"), and ``size`` on disk (compressed bytes; 0 for stdin)."""

    path: str
    kind: str
    compression: "str | None" = None
    size: int = 0

    @property
    def seekable(self) -> bool:
        return self.path != "-"
