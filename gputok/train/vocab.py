"""Token ids during training: HF ``BpeTrainer``'s layout (the rules 2 and 7 that ``cpu_ref.train``
states) or the byte layout of minbpe / tiktoken / nanochat.

``id_order="hf"``: ids go to token *strings*: special tokens verbatim, everything else in the
GPT-2 byte-level alphabet. Specials come first, then the 256 single bytes sorted by their
byte-level character's code point, then one id per merge, except that a merge spelling a string
that already has an id (a special token written the same) reuses that id.

``id_order="bytes"``: byte ``b`` is id ``b`` and merge ``k`` is id ``256 + k``; special tokens
come after the merges (``specials_at="end"``, tiktoken's and nanochat's layout) or before the
bytes (``"start"``: specials 0 .. n-1, byte ``b`` at ``n + b``, the layout of trainers that
reserve ``<unk> <bos> <eos> <pad>``). A learned token never takes a special token's id here.

THE COMPARATOR breaks ties by the smallest ``(left_id, right_id)`` in the layout's own ids, so the
layout is part of the training rule: ``"hf"`` gives HF's merges, ``"bytes"`` the merges of
trainers that number bytes by value (rustbpe, nanochat): the same counts, ties ordered by byte
value instead of by the byte-level character's code point.
"""

from __future__ import annotations

import numpy as np

from ..bytelevel import BYTE_TO_CHAR as BYTE_TO_UNICODE, unspell

ID_ORDERS = ("hf", "bytes")


class Vocab:
    def __init__(self, special_tokens=(), id_order: str = "hf", specials_at: "str | None" = None):
        if id_order not in ID_ORDERS:
            raise ValueError(f"id_order must be one of {', '.join(map(repr, ID_ORDERS))}, "
                             f"got {id_order!r}")
        if specials_at is None:
            specials_at = "start" if id_order == "hf" else "end"
        if specials_at not in ("start", "end"):
            raise ValueError(f"specials_at must be 'start' or 'end', got {specials_at!r}")
        if id_order == "hf" and specials_at != "start":
            raise ValueError("id_order='hf' puts special tokens first (HF's trainer does); "
                             "specials_at='end' needs id_order='bytes'")
        self.id_order = id_order
        self.specials_at = specials_at
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.special_tokens: dict[str, int] = {}
        self._pending: list[str] = []  # specials placed after training (specials_at="end")
        specials = []
        for s in special_tokens:
            if not isinstance(s, str) or not s:
                raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
            if s not in specials:
                specials.append(s)
        if specials_at == "start":
            for s in specials:
                self.special_tokens[s] = self._intern(s)
        else:
            self._pending = specials
        if id_order == "hf":
            for ch in sorted(BYTE_TO_UNICODE.values()):
                self._intern(ch)
            # id of every byte value (a special token spelled like a byte-level character takes
            # that character's place, as in HF; ``decoder`` refuses the cases that cannot decode)
            self.byte_ids = np.array([self.ids[BYTE_TO_UNICODE[b]] for b in range(256)],
                                     dtype=np.int32)
        else:
            base = len(self.strings)
            for b in range(256):
                self._append(BYTE_TO_UNICODE[b])
            self.byte_ids = np.arange(base, base + 256, dtype=np.int32)
        self.learned: set[int] = set(self.byte_ids.tolist())  # ids that stand for bytes

    def _intern(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def _append(self, s: str) -> int:
        """A new id for ``s`` even when the string has one (the byte layout: a learned token and
        a special token may be spelled alike)."""
        i = len(self.strings)
        self.strings.append(s)
        self.ids.setdefault(s, i)
        return i

    def copy(self) -> "Vocab":
        other = Vocab.__new__(Vocab)
        other.restore(self)
        return other

    def restore(self, other: "Vocab") -> None:
        """Become a copy of ``other`` (e.g. a snapshot taken before a failed run)."""
        self.id_order, self.specials_at = other.id_order, other.specials_at
        self.ids = dict(other.ids)
        self.strings = list(other.strings)
        self.special_tokens = dict(other.special_tokens)
        self._pending = list(other._pending)
        self.byte_ids = other.byte_ids.copy()
        self.learned = set(other.learned)

    def __len__(self) -> int:
        return len(self.strings)

    def merge_target(self, vocab_size: int) -> int:
        """The length the vocabulary may reach by merges, for ``vocab_size`` ids in the end (the
        special tokens still to come after training are kept room for)."""
        return int(vocab_size) - len(self._pending)

    def merge(self, left: int, right: int) -> int:
        """The id of the token ``left + right`` (rule 7 in the HF layout: an existing string
        keeps its id)."""
        s = self.strings[left] + self.strings[right]
        i = self._intern(s) if self.id_order == "hf" else self._append(s)
        self.learned.add(i)
        return i

    def finish(self) -> None:
        """Place the special tokens that come after the merges (``specials_at="end"``)."""
        for s in self._pending:
            self.special_tokens[s] = self._append(s)
        self._pending = []

    def reserved_spellings(self) -> dict[bytes, int]:
        """Rule 7 for a merge loop that works on bytes: the byte strings a learned token would
        have to be to take a special token's id (HF layout only; the special's characters all
        byte-level)."""
        out = {}
        if self.id_order != "hf":
            return out
        for s, i in self.special_tokens.items():
            raw = unspell(s)
            if raw is not None and len(raw) >= 2:
                out[raw] = i
        return out

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
