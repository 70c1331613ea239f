"""Token ids during training, HF ``BpeTrainer``'s way (the rules 2 and 7 that ``cpu_ref.train`` states).

Ids are handed out to token *strings*: special tokens verbatim, everything else in the GPT-2
byte-level alphabet. Specials come first, then the 256 single bytes sorted by their byte-level
character's code point, then one id per merge, except that a merge spelling a string that already
has an id (a special token written the same, or an earlier token) reuses that id.
"""

from __future__ import annotations

import numpy as np

from ..bytelevel import BYTE_TO_CHAR as BYTE_TO_UNICODE, unspell


class Vocab:
    def __init__(self, special_tokens=()):
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.special_tokens: dict[str, int] = {}
        for s in special_tokens:
            if not isinstance(s, str) or not s:
                raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
            self.special_tokens[s] = self._intern(s)
        for ch in sorted(BYTE_TO_UNICODE.values()):
            self._intern(ch)
        # id of every byte value (a special token spelled like a byte-level character takes that
        # character's place, as in HF; ``check_specials`` refuses the cases that cannot decode)
        self.byte_ids = np.array([self.ids[BYTE_TO_UNICODE[b]] for b in range(256)],
                                 dtype=np.int32)
        self.learned: set[int] = set(self.byte_ids.tolist())  # ids that stand for bytes

    def _intern(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def copy(self) -> "Vocab":
        other = Vocab.__new__(Vocab)
        other.restore(self)
        return other

    def restore(self, other: "Vocab") -> None:
        """Become a copy of ``other`` (e.g. a snapshot taken before a failed run)."""
        self.ids = dict(other.ids)
        self.strings = list(other.strings)
        self.special_tokens = dict(other.special_tokens)
        self.byte_ids = other.byte_ids.copy()
        self.learned = set(other.learned)

    def __len__(self) -> int:
        return len(self.strings)

    def merge(self, left: int, right: int) -> int:
        """The id of the token ``left + right`` (rule 7: an existing string keeps its id)."""
        i = self._intern(self.strings[left] + self.strings[right])
        self.learned.add(i)
        return i

    def token_bytes(self, i: int) -> bytes:
        """The bytes of a learned (non-special) token."""
        return unspell(self.strings[i])

    def decoder(self) -> dict[int, bytes]:
        """id -> bytes for every id. Raises ``ValueError`` when a special token shares its id with
        a learned token of different bytes (HF allows it; such a vocabulary cannot decode)."""
        out: dict[int, bytes] = {}
        special_ids = {i: s for s, i in self.special_tokens.items()}
        for i, s in enumerate(self.strings):
            if i in special_ids:
                continue
            out[i] = self.token_bytes(i)
        for s, i in self.special_tokens.items():
            raw = s.encode("utf-8")
            learned = self.token_bytes(i) if i in self.learned else None
            if learned is not None and learned != raw:
                raise ValueError(
                    f"special token {s!r} is spelled like the byte-level token for {learned!r}, so "
                    f"HF would give both the same id; rename the special token")
            out[i] = raw
        return out
