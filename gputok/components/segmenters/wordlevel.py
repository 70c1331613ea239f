"""WordLevel (HF ``model.type = "WordLevel"``): each pre-tokenized word is one id.

HF's rule: a word in ``vocab`` is its id; any other word is the id of ``unk_token`` (an error
when the vocabulary has no such token, at encode time, as HF raises then). No cuts, no device
form (a dict probe per distinct word, behind the piece cache, is the whole stage).
"""

from __future__ import annotations

from . import Base


class WordLevel(Base):
    """``vocab``: word -> id; ``unk_token``: the word of unknown words.

    >>> WordLevel({"[UNK]": 0, "hello": 1}, "[UNK]").segment(["hello", "world"])
    [(1,), (0,)]
    """

    name = "WordLevel"

    def __init__(self, vocab: dict, unk_token: str, where: str = "tokenizer.json"):
        self.vocab = vocab
        self.unk_token = unk_token
        self.unk_id = vocab.get(unk_token)
        self.where = where

    def segment(self, units: list) -> list:
        get, unk = self.vocab.get, self.unk_id
        out = []
        for w in units:
            i = get(w, unk)
            if i is None:
                raise ValueError(f"{self.where}: the word {w[:40]!r} is not in the vocabulary "
                                 f"and the unk_token {self.unk_token!r} is not either")
            out.append((i,))
        return out
