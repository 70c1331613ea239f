"""Pre-tokenization: text -> pieces (the regex stage).

A pre-tokenizer is anything with ``split(text) -> list[str]``; the pieces are what BPE runs on.
The numpy backend calls ``split`` per document; GPU backends compile the pattern into a device
state machine and are checked against ``piece_spans`` below.

Performance notes: ``regex.findall`` is the fastest way we found to get the pieces in CPython
(finditer + slicing is ~1.6x slower; splitting the document on newlines first and caching lines
did not pay on prose). ``findall`` drops unmatched characters; every named pattern matches every
character, and HF's ``Split(isolated)`` keeps the gaps (handled in ``HFPretokenizer``).
"""

from __future__ import annotations

import unicodedata

import numpy as np

from cpu_ref import hf as _hf_ref  # the HF normalizer/pre-tokenizer definitions live in the spec
from cpu_ref.patterns import compile_pattern


class RegexPretokenizer:
    """tiktoken style: the pieces are the leftmost-first matches of one pattern.

    For the named patterns the vectorised scanner (``scan.py``) produces the same pieces several
    times faster; any other pattern runs on the reference regex engine.
    """

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._findall = compile_pattern(pattern).findall
        self._scanner = "unset"

    @property
    def scanner(self):
        if self._scanner == "unset":  # lazy: building the class table costs ~0.2 s once
            from .scan import scanner_for_pattern

            self._scanner = scanner_for_pattern(self.pattern)
        return self._scanner

    def split(self, text: str) -> list[str]:
        if len(text) < _SCAN_MIN or self.scanner is None:
            return self._findall(text)
        return self.scanner.split(text)

    def split_batch(self, texts: list[str]) -> list[list[str]]:
        if self.scanner is None:
            return [self._findall(t) for t in texts]
        return self.scanner.split_batch(texts)


_SCAN_MIN = 4096  # characters; below this one regex call is as fast as the scanner

class HFPretokenizer:
    """tokenizer.json style: an optional normalizer, then Split / ByteLevel steps."""

    _NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")

    def __init__(self, normalizer: "dict | None", pre_tokenizer: "dict | None"):
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        steps = _hf_ref._flatten(pre_tokenizer)
        # fast path: the common "one Split(regex, isolated) + ByteLevel(use_regex=false)" shape
        self._single = None
        if (len(steps) == 2 and steps[0].get("type") == "Split" and "Regex" in steps[0]["pattern"]
                and steps[0].get("behavior", "Isolated") == "Isolated"
                and steps[1].get("type") == "ByteLevel" and not steps[1].get("use_regex", True)
                and not steps[1].get("add_prefix_space")):
            self._single = RegexPretokenizer(steps[0]["pattern"]["Regex"])
        elif steps:
            _hf_ref.pre_tokenize(pre_tokenizer, "")  # refuse unsupported steps now, not mid-batch
        self._nf = normalizer.get("type") if normalizer else None
        if self._nf not in (None, *self._NORMAL_FORMS):
            _hf_ref.normalize(normalizer, "")  # raises for unsupported normalizers
        self.pattern = steps[0]["pattern"].get("Regex") if self._single else None

    def split(self, text: str) -> list[str]:
        if self._nf in self._NORMAL_FORMS:
            text = unicodedata.normalize(self._nf, text)
        elif self._nf is not None:
            text = _hf_ref.normalize(self.normalizer, text)
        if self._single is not None:
            pieces = self._single.split(text)
            # isolated split keeps unmatched gaps; they only exist if the matches don't tile
            if sum(map(len, pieces)) == len(text):
                return pieces
        return _hf_ref.pre_tokenize(self.pre_tokenizer, text)

    def split_batch(self, texts: list[str]) -> list[list[str]]:
        if self._single is None or self._nf is not None:
            return [self.split(t) for t in texts]
        out = self._single.split_batch(texts)
        for i, (t, pieces) in enumerate(zip(texts, out)):
            if sum(map(len, pieces)) != len(t):  # gaps: the isolated split keeps them
                out[i] = _hf_ref.pre_tokenize(self.pre_tokenizer, t)
        return out


def piece_spans(buf: bytes, doc_offsets: np.ndarray, pretok) -> tuple[np.ndarray, np.ndarray]:
    """Array form of the stage, the contract GPU pre-tokenizers are checked against.

    ``buf``: the packed UTF-8 of all documents; ``doc_offsets``: int64, len n_docs + 1.
    Returns ``(piece_offsets, doc_piece_offsets)``: byte offsets into ``buf`` of every piece
    (start of piece k = piece_offsets[k], end = piece_offsets[k + 1] for pieces of one document;
    pieces tile each document, so they tile the buffer), and for each document the index of its
    first piece (len n_docs + 1).
    """
    starts: list[int] = []
    doc_piece = [0]
    for d in range(len(doc_offsets) - 1):
        lo, hi = int(doc_offsets[d]), int(doc_offsets[d + 1])
        pos = lo
        for piece in pretok.split(buf[lo:hi].decode("utf-8")):
            starts.append(pos)
            pos += len(piece.encode("utf-8"))
        if pos != hi:
            raise ValueError(f"pre-tokenizer does not tile document {d}; spans undefined")
        doc_piece.append(len(starts))
    offsets = np.array(starts + [int(doc_offsets[-1])], dtype=np.int64)
    return offsets, np.array(doc_piece, dtype=np.int64)
