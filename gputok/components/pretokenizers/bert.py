"""HF's ``BertPreTokenizer``: cuts at whitespace (dropped) and makes every punctuation
character a word, in the one pass of ``components/bert_steps.py`` (which also runs a fused
``normalizers.BertNormalizer``); the native device runs the same pass in C (``program``).
"""

from __future__ import annotations

from ..bert_steps import BertSteps  # noqa: F401  (the pass; re-exported)


class BertPreTokenizer:
    """HF's ``BertPreTokenizer`` (``components.PreTokenizer``); with ``steps`` of a fused
    ``BertNormalizer`` it normalises in the same pass. Host only: the device backends upload its
    words (``words_bytes_batch``).

    >>> BertPreTokenizer().split("Hi, there")
    ['Hi', ',', 'there']
    """

    name = "BERT"
    pattern = None
    scanner = None
    uses_first = False

    def __init__(self, steps: "BertSteps | None" = None):
        self.steps = steps if steps is not None else BertSteps(normalize=False)
        self.words_bytes_batch = self.steps.words_bytes_batch

    def fuse(self, normalizer) -> "BertPreTokenizer | None":
        """This pre-tokenizer with BERT's normaliser in its pass (None for another one)."""
        from ..normalizers import BertNormalizer

        return BertPreTokenizer(normalizer.steps_on) if isinstance(normalizer, BertNormalizer) \
            else None

    def program(self):
        """Its pass as a device runs it (``BertProgram``; the native device's C pass)."""
        return self.steps.program()

    def split(self, text: str) -> list:
        return self.steps.words_batch([text])[0]

    def split_batch(self, texts: list, first=None) -> list:
        return self.steps.words_batch(texts)
