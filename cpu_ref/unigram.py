"""Unigram: the best segmentation of a sentence under per-piece scores (Viterbi), two oracles.

A Unigram vocabulary gives every piece a score (a log probability); a sentence is cut into the
pieces whose scores sum highest. Two libraries run it, each with its own arithmetic and tie
rules, and gputok follows each for the files it writes:

**sentencepiece** (``.model`` files, ``trainer_spec.model_type = UNIGRAM``: T5, ALBERT, XLM-R,
mT5; ``unigram_model.cc``, the optimised encoder of 0.2.x), on the normalised sentence
(``cpu_ref.spm.SpmNormalizer``, user-defined pieces passed through unchanged):

* the lattice runs over UTF-8 *byte* positions; at every character start ``s``, in order, every
  piece that is a prefix of the text from ``s`` is a candidate edge ``s -> s + len``, shorter
  pieces first. Candidates: NORMAL, USER_DEFINED and UNUSED pieces, UNUSED ones skipped; BYTE,
  CONTROL and UNKNOWN pieces never match text;
* an edge's score: its piece's (float32); a USER_DEFINED piece scores ``0.1 * (len_bytes - 1)``
  (float32: 0 for one byte, a bonus that makes it win over ordinary pieces, whose scores are
  log probabilities);
* when no candidate from ``s`` is exactly its one character, an unknown edge over that character
  scores ``min_score - 10`` (float32; ``min_score`` the smallest NORMAL score);
* THE COMPARATOR (sentencepiece Unigram): ``best[e]`` takes a candidate ``best[s] + score`` only
  when it is strictly greater than what ``best[e]`` holds (or it is empty), so on a tie the first
  candidate in the order above wins: the smallest start, then the shortest piece, then unknown.
  Sums are float32, from the sentence start: a sum restarted elsewhere rounds differently, and
  real ties depend on it (XLM-R's three apostrophes are "'" + "''" because the two sums round
  equal). One restart is the oracle's own: when the best sum at a start passes +-100000, that
  sum is subtracted from every best sum known from this start to the furthest end reached so
  far (``SCORE_RESET``), in float32;
* the path is read back from the end; then the processor: an unknown piece becomes its bytes'
  ``<0xXX>`` pieces with byte fallback, else consecutive unknown pieces are one unk id.

**HF tokenizers** (``model.type = "Unigram"`` in tokenizer.json; ``encode_optimized``): the same
walk in float64, with three differences: every vocabulary entry is a candidate (the unk token's
text and ``<0xXX>`` entries match text too), ``min_score`` is the smallest score of the whole
vocabulary, and consecutive unknown edges are fused into one piece *before* ids are looked up
(``fuse_unk``, always on), so a fused run that spells a vocabulary entry is that entry; a fused run
that is not becomes its bytes' ``<0xXX>`` tokens with ``byte_fallback`` when all exist, else the
unk id. Normalisers and pre-tokenizers are the file's (``cpu_ref.hf_spm``: Precompiled charsmap,
Replace, Metaspace, ...); each pre-tokenized word is one sentence.

What gputok's fast path must compute: the same ``best`` array per sentence. Positions only look
back ``max piece length`` bytes, so a long sentence costs O(n * candidates).
"""

from __future__ import annotations

import struct

from . import specials
from .spm import RefSentencePiece, byte_piece
from .spm_proto import NORMAL, UNUSED, USER_DEFINED

FLT_MAX = 3.4028234663852886e38
UNK_PENALTY = 10.0
SCORE_RESET = 100000.0  # |best sum| past which sentencepiece rebases the sums (see above)


def f32(x: float) -> float:
    """``x`` rounded to float32 (round to nearest even; overflow to +-inf)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def _char_len(b: int) -> int:
    """sentencepiece's ``OneCharLen``: the length of a UTF-8 sequence from its first byte."""
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[b >> 4]


class RefUnigram(RefSentencePiece):
    """A sentencepiece Unigram ``.model``: normaliser, specials, processor and decoder as
    ``RefSentencePiece``; ``encode_normalized`` is the Viterbi walk of the module docstring.

    >>> from cpu_ref.spm_proto import ModelProto
    >>> m = ModelProto(pieces=[("<unk>", 0.0, 2), ("▁a", -1.0, 1), ("b", -2.0, 1),
    ...                        ("▁ab", -2.5, 1)])
    >>> m.trainer_spec.model_type = 1
    >>> RefUnigram(m).encode_ordinary("ab c")
    [3, 0]
    """

    MODEL_TYPE = 1

    def __init__(self, source):
        super().__init__(source)
        if any(s != s or s in (float("inf"), float("-inf")) for s in self.scores):
            raise ValueError("a Unigram model's scores must be finite (sentencepiece refuses "
                             "NaN and Inf)")
        normal = [f32(s) for s, t in zip(self.scores, self.types) if t == NORMAL]
        self.min_score = f32(min(normal, default=FLT_MAX))
        self.unk_score = f32(self.min_score - UNK_PENALTY)
        # the trie: NORMAL, USER_DEFINED and UNUSED pieces by their UTF-8 bytes
        self.trie = {p.encode("utf-8"): i for p, i in self.piece_to_id.items()
                     if self.types[i] in (NORMAL, USER_DEFINED, UNUSED)}
        self.max_len = max(map(len, self.trie), default=0)

    def encode_normalized(self, normalized: str) -> list[tuple[str, int]]:
        data = normalized.encode("utf-8")
        size = len(data)
        # best[e] = (score of the best path ending at e, its last edge's start, its piece id)
        best: list = [None] * (size + 1)
        best[0] = (0.0, -1, -1)
        s = frontier = 0
        while s < size:
            base = best[s][0]
            if not -SCORE_RESET <= base <= SCORE_RESET:  # rebase the sums known so far
                for k in range(s, frontier + 1):
                    if best[k] is not None and (k == s or best[k][1] >= 0):
                        best[k] = (f32(best[k][0] - base),) + best[k][1:]
                base = 0.0
            mblen = min(_char_len(data[s]), size - s)
            single = False
            for e in range(s + 1, min(size, s + self.max_len) + 1):
                i = self.trie.get(data[s:e])
                if i is None or self.types[i] == UNUSED:
                    continue
                frontier = max(frontier, e)
                score = (f32(0.1 * (e - s - 1)) if self.types[i] == USER_DEFINED
                         else f32(self.scores[i]))
                cand = f32(score + base)
                if best[e] is None or cand > best[e][0]:
                    best[e] = (cand, s, i)
                single |= e - s == mblen
            if not single:
                cand = f32(self.unk_score + base)
                e = s + mblen
                frontier = max(frontier, e)
                if best[e] is None or cand > best[e][0]:
                    best[e] = (cand, s, self.unk_id)
            s += mblen
        out: list = []
        e = size
        while e > 0:
            _, s, i = best[e]
            out.append((data[s:e].decode("utf-8"), i))
            e = s
        return out[::-1]


class UnigramHF:
    """HF ``tokenizers``' Unigram model alone (``encode_word``: one pre-tokenized word -> ids).

    ``vocab``: [(token, score)] in id order; ``unk_id`` (None: none); ``byte_fallback``.

    >>> u = UnigramHF([("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -1.5)], 0, False)
    >>> u.encode_word("abxyb")
    [3, 0, 2]
    """

    def __init__(self, vocab: list, unk_id: "int | None", byte_fallback: bool):
        self.vocab = [(t, float(s)) for t, s in vocab]
        self.token_to_id: dict = {}
        for i, (t, _) in enumerate(self.vocab):
            self.token_to_id[t] = i  # (a repeated token: its last id, as HF's map)
        self.trie = {t.encode("utf-8"): i for t, i in self.token_to_id.items()}
        self.max_len = max(map(len, self.trie), default=0)
        self.min_score = min((s for _, s in self.vocab), default=float("inf"))
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback

    def pieces(self, word: str) -> list[str]:
        """The best path's pieces, consecutive unknown edges fused (HF's ``encode``)."""
        data = word.encode("utf-8")
        size = len(data)
        unk_score = self.min_score - UNK_PENALTY
        best: list = [None] * (size + 1)
        best[0] = (0.0, -1, -1)
        s = 0
        while s < size:
            base = best[s][0]
            mblen = _char_len(data[s])
            single = False
            for e in range(s + 1, min(size, s + self.max_len) + 1):
                i = self.trie.get(data[s:e])
                if i is None:
                    continue
                cand = self.vocab[i][1] + base
                if best[e] is None or cand > best[e][0]:  # THE COMPARATOR: strictly greater
                    best[e] = (cand, s, i)
                single |= e - s == mblen
            if not single:
                if self.unk_id is None:
                    raise ValueError("Unigram: a character has no piece and the model has no "
                                     "unk_id")
                e = s + mblen
                cand = unk_score + base
                if best[e] is None or cand > best[e][0]:
                    best[e] = (cand, s, self.unk_id)
            s += mblen
        out, run = [], []
        e = size
        while e > 0:
            _, s, i = best[e]
            if i == self.unk_id:
                run.append(data[s:e])
            else:
                if run:
                    out.append(b"".join(run[::-1]).decode("utf-8"))
                    run = []
                out.append(data[s:e].decode("utf-8"))
            e = s
        if run:
            out.append(b"".join(run[::-1]).decode("utf-8"))
        return out[::-1]

    def encode_word(self, word: str) -> list[int]:
        """Ids of one word: each piece's id; a piece outside the vocabulary (a fused unknown
        run) is its bytes' ``<0xXX>`` tokens with byte fallback when all exist, else unk."""
        out: list = []
        for p in self.pieces(word):
            i = self.token_to_id.get(p)
            if i is not None:
                out.append(i)
                continue
            if self.byte_fallback:
                ids = [self.token_to_id.get(byte_piece(b)) for b in p.encode("utf-8")]
                if None not in ids:
                    out.extend(ids)
                    continue
            out.append(self.unk_id)
        return out


def encode_text(unigram: UnigramHF, words: list) -> list[int]:
    """Ids of pre-tokenized words (lone surrogates replaced first, as the oracles see text)."""
    return [i for w in words for i in unigram.encode_word(specials.fix_surrogates(w))]
