"""Pre-tokenizers: normalised text -> words (``components.PreTokenizer``).

    regex       ``stages.pretok.Pretokenizer``: one regex or HF's Split/ByteLevel steps; its
                device form is the pretok kernels (scanner families)
    Whole       the whole segment is one word (SentencePiece: the segmenter cuts it)
    Metaspace   HF's Metaspace: " " -> "▁", the prefix, a word starts at every "▁"
    Sequence    HF's Sequence of host pre-tokenizers: each splits the words of the previous
    bert.py     BERT's (whitespace and punctuation), with BERT's normaliser fused in its pass

HF's Whitespace (``\\w+|[^\\w\\s]+``) and WhitespaceSplit (``\\S+``) are regex steps that drop
what they do not match (``stages.pretok.Split(keep_gaps=False)``, Oniguruma's pinned classes).
"""

from __future__ import annotations

import re

from ...stages import counters

__all__ = ["Pretokenizer", "Whole", "Metaspace", "BertPreTokenizer", "Sequence"]


def __getattr__(name: str):
    """``Pretokenizer`` and ``BertPreTokenizer``, imported on first use (a SentencePiece model's
    ``Whole`` needs neither the regex stage nor BERT's Unicode tables)."""
    if name == "Pretokenizer":
        from ...stages.pretok import Pretokenizer as got
    elif name == "BertPreTokenizer":
        from .bert import BertPreTokenizer as got
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = got
    return got


class _Host:
    """The members a host-only pre-tokenizer shares: no regex, no scanner, no fused normaliser."""

    pattern = None
    scanner = None
    uses_first = False

    def fuse(self, normalizer) -> None:
        return None

    def split(self, text: str) -> list:
        return self.split_batch([text])[0]

    def segment_text(self, text: str, first: bool) -> str:
        """What the pre-tokenizer writes into a segment before it cuts it (``first``: the
        segment starts its document); the SentencePiece device's host normaliser applies it
        after the normaliser. Metaspace: its replacement and prefix; the others: nothing."""
        return text


class Whole(_Host):
    """The whole segment is one word (nothing for an empty one).

    >>> Whole().split_batch(["▁a▁b", ""])
    [['▁a▁b'], []]
    """

    name = "whole segment"

    def split_batch(self, texts: list, first=None) -> list:
        return [[t] if t else [] for t in texts]


class Metaspace(_Host):
    """HF's ``Metaspace``: " " becomes ``replacement``; ``scheme`` "always" prepends it to every
    segment that does not start with it, "first" only to a segment that starts its document,
    "never" to none; with ``split`` a word starts at every replacement character.

    >>> Metaspace("▁", "always", True).split_batch(["hi  there"])
    [['▁hi', '▁', '▁there']]
    """

    name = "Metaspace"

    def __init__(self, replacement: str = "\u2581", scheme: str = "always", split: bool = True):
        self.replacement, self.scheme, self.split_words = replacement, scheme, split
        self.uses_first = scheme == "first"
        rep = re.escape(replacement)
        self._words = re.compile(f"{rep}[^{rep}]*|[^{rep}]+")

    def replace(self, text: str, first: bool) -> str:
        rep = self.replacement
        text = text.replace(" ", rep)
        # unlike HF's Prepend normaliser, Metaspace adds nothing to a segment that already
        # starts with the replacement
        if text and not text.startswith(rep) and (self.scheme == "always" or (
                self.scheme == "first" and first)):
            text = rep + text
        return text

    segment_text = replace

    def split_batch(self, texts: list, first=None) -> list:
        if first is None:
            first = [True] * len(texts)
        counters["pretok.metaspace"] += len(texts)
        out = [self.replace(t, f) for t, f in zip(texts, first)]
        if not self.split_words:
            return [[t] if t else [] for t in out]
        return [self._words.findall(t) for t in out]

    def split_joined(self, words: list) -> list:
        """``split_batch`` of every word of each document in ``words`` (lists of words), the
        pieces of each document's words in one list, for ``scheme="always"`` and ``split``:
        each word is replaced and prefixed on its own, then the document's words are cut in one
        ``findall`` over their concatenation, which is exact because every prefixed word starts
        with the one-character replacement, where a piece starts anyway. (A ``findall`` per
        word was 60% of a T5-style tokenizer.json's batch.)"""
        rep = self.replacement
        counters["pretok.metaspace"] += sum(map(len, words))
        starts = self._starts
        out = []
        for ws in words:
            # the words joined by "\n" (when none holds one): a word's start is the text's or
            # a "\n"'s, prefixed there by one substitution, then the "\n"s go
            lined = "\n" + "\n".join(ws).replace(" ", rep)
            if lined.count("\n") == len(ws) or not ws:
                joined = starts.sub("\n" + rep, lined).replace("\n", "")
            else:
                joined = "".join(t if t.startswith(rep) or not t else rep + t
                                 for t in (w.replace(" ", rep) for w in ws))
            out.append(self._words.findall(joined))
        return out

    @property
    def _starts(self):
        """Where a word of a "\n"-joined list that does not start with the replacement starts
        (``split_joined``)."""
        got = self.__dict__.get("_starts_re")
        if got is None:
            rep = re.escape(self.replacement)
            got = self._starts_re = re.compile(f"\n(?=[^{rep}\n])")
        return got


class Sequence(_Host):
    """HF's ``Sequence``: each pre-tokenizer splits every word the previous one made.

    >>> from gputok.stages.pretok import Pretokenizer, PretokSpec, Split
    >>> ws = Pretokenizer(PretokSpec((Split(r"\\S+"),), family="hf"))
    >>> Sequence([ws, Metaspace()]).split_batch(["hi  there"])
    [['▁hi', '▁there']]
    """

    name = "Sequence"

    def __init__(self, steps: list):
        self.steps = list(steps)
        # only the first step can see whether a segment starts its document
        self.uses_first = self.steps[0].uses_first if self.steps else False
        if any(s.uses_first for s in self.steps[1:]):
            raise ValueError("pre_tokenizer Sequence: a Metaspace with prepend_scheme 'first' "
                             "after another pre-tokenizer is not supported")

    def split_batch(self, texts: list, first=None) -> list:
        if not self.steps:
            return [[t] if t else [] for t in texts]
        out = self.steps[0].split_batch(texts, first)
        for step in self.steps[1:]:
            if isinstance(step, Metaspace) and step.split_words and step.scheme == "always" \
                    and len(step.replacement) == 1:
                out = step.split_joined(out)
                continue
            flat = [w for ws in out for w in ws]
            parts = iter(step.split_batch(flat))
            out = [[p for _ in ws for p in next(parts)] for ws in out]
        return out
