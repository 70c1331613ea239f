"""Segmenters: words -> ids, one module per vocabulary rule (``components.Segmenter``).

    bpe.py          byte-level BPE (tiktoken's ranks, HF's merges): the merge table
    spm_bpe.py      SentencePiece BPE (``.model``, GGUF "llama"): characters, piece scores
    hf_charbpe.py   character BPE of SPM-style HF tokenizer.json files (Llama 2, Mistral)
    charbpe.py      the engine of both: character symbols, exact cuts, the merge table
    wordpiece.py    WordPiece (BERT): greedy longest match
    unigram.py      Unigram (T5, ALBERT, XLM-R, HF files): Viterbi over piece scores
    trie.py         the byte trie Unigram walks for every start at once
    wordlevel.py    WordLevel: one word, one id

``Base`` holds the protocol's plain defaults.
"""

from __future__ import annotations

__all__ = ["Base"]


class Base:
    """Defaults of the ``Segmenter`` protocol: no device form, no cuts, ids unchanged by
    ``finish``, ``token_id`` from ``vocab`` (text -> id)."""

    name = "segmenter"
    device = None
    byte_level = False
    cuts = False
    vocab: dict

    def units(self, words: list) -> list:
        """Per segment, its units: the words themselves."""
        return words

    def finish(self, ids, offsets):
        """The batch's ids and offsets after the segmenter's last rule (here: unchanged)."""
        return ids, offsets

    def finish_list(self, ids: list) -> list:
        """``finish`` for one document's ids as a list."""
        return ids

    def token_id(self, text: str) -> "int | None":
        """The id of one unit's text, or None."""
        return self.vocab.get(text)
