"""The BPE training rule: Hugging Face ``BpeTrainer`` behind a byte-level regex pre-tokenizer.

The oracle is ``tokenizers`` with this pipeline (what ``gputok train`` exports and tests against)::

    pre_tokenizer = Sequence([Split(Regex(pattern), behavior="isolated"),
                              ByteLevel(add_prefix_space=False, use_regex=False)])
    BpeTrainer(vocab_size=..., min_frequency=..., special_tokens=[...],
               initial_alphabet=ByteLevel.alphabet())

Every detail below was checked against ``tokenizers`` 0.23 by experiment (tests/test_train.py
keeps the checks):

1. **Words.** Each text is cut into pieces by the pattern (``Split`` *isolated*: matches and the
   gaps between them are all pieces); a word is a piece, and words are counted over the corpus.
   Special tokens are *not* cut out of training text: HF's trainer sees them as ordinary text.
2. **Ids.** Special tokens first, in the order given (a repeat is skipped); then the 256-byte
   alphabet, in HF's order: sorted by the *code point of the GPT-2 byte-to-unicode character*
   (``!`` = byte 0x21 gets the first id, byte 0x00 = U+0100 comes after all printable Latin-1);
   then one id per merge, in order. ``min_frequency`` never removes alphabet characters (HF's
   ``limit_alphabet`` would, even from ``initial_alphabet``; gputok always keeps all 256).
3. **Pair counts.** Over every *overlapping* window of two adjacent symbols inside a word,
   weighted by the word's count: ``"aaa"`` counts ``(a, a)`` twice.
4. **Best pair.** Highest count; ties go to the smallest ``(left_id, right_id)``, compared as ids
   (not as strings: HF picks ``("{", "a")`` over ``("zz", "a")`` on a tie, because ``{`` has
   a small alphabet id and ``zz`` a large merge id).
5. **Stop** when the vocabulary has ``vocab_size`` entries (specials and alphabet included, so a
   ``vocab_size`` below ``len(specials) + 256`` learns nothing and still keeps all 256 bytes), or
   when the best count is below ``min_frequency`` (and always at count 0). HF's ``BpeTrainer``
   defaults to ``min_frequency=0``, which behaves as 1; ``ByteLevelBPETokenizer.train`` defaults
   to 2, and so does gputok.
6. **Merge** the best pair in every word, left to right without overlap: ``"aaaa"`` becomes
   ``"aa aa"``, ``"aaa"`` becomes ``"aa a"``.
7. **Merged id.** The merged token's string is looked up first: if it already has an id, HF
   reuses that id and the vocabulary does not grow. Only a special token can be hit: with a
   pattern that keeps e.g. ``"<s>"`` in one piece, the learned ``<s>`` gets the special's id.
   (A second merge can never spell an earlier *learned* token: where the pieces of the second
   merge cover that string, no symbol ever crossed its edges, so its bytes were segmented exactly
   as when the first merge made the token, and that merge would already have joined them.)

8. **The byte layout** (``id_order="bytes"``, minbpe / tiktoken / nanochat): byte ``b`` is id
   ``b`` (or ``n + b`` with the ``n`` special tokens first, ``specials_at="start"``), merge ``k``
   is id ``256 + k`` after them, special tokens last by default. Rule 4 is the same rule *in
   these ids*, so ties go by byte value instead of by byte-level character: that is rustbpe's
   (nanochat's) trainer, whose merges equal these (checked in tests/test_train_native.py).
   Rule 7 does not apply (a learned token never takes a special token's id) and a vocabulary's
   size still counts every id.

DESIGN.md's description (§Semantics 6) matches 1-6; 7 and 8 are additions. HF keeps counts
incrementally where this module recounts; with rule 7 limited to specials (whose ids never
occur inside words before their merge) the two always agree, and the tests check it.

This module is the spec: slow (it recounts every pair after every merge) and obvious.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from . import patterns
from .hf import BYTE_TO_UNICODE, UNICODE_TO_BYTE


@dataclass
class TrainedBPE:
    """The result of training: HF's vocabulary and merges, as ids and as strings."""

    vocab: dict[str, int]  # token string -> id (specials verbatim, others byte-level unicode)
    merges: list[tuple[int, int, int]]  # (left_id, right_id, merged_id), in merge order
    special_tokens: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # id -> string (rule 8: strings may repeat)

    def id_to_str(self) -> dict[int, str]:
        if self.names:
            return dict(enumerate(self.names))
        return {i: s for s, i in self.vocab.items()}

    def merge_strings(self) -> list[tuple[str, str]]:
        """The merges as HF writes them in tokenizer.json (``model.merges``)."""
        names = self.id_to_str()
        return [(names[a], names[b]) for a, b, _ in self.merges]

    def token_bytes(self) -> dict[int, bytes]:
        """Every non-special id's bytes."""
        out = {}
        for s, i in self.vocab.items():
            if i not in out and all(ch in UNICODE_TO_BYTE for ch in s) and \
                    s not in self.special_tokens:
                out[i] = bytes(UNICODE_TO_BYTE[ch] for ch in s)
        return out


def count_words(texts: Iterable[str], pattern: str) -> Counter:
    """Rule 1: the pieces of every text (HF ``Split`` isolated: gaps are pieces too), counted."""
    words: Counter = Counter()
    for text in texts:
        words.update(patterns.split_isolated(pattern, text))
    return words


def train_bpe(texts: Iterable[str], *, vocab_size: int, pattern: str = "cl100k",
              special_tokens: Iterable[str] = (), min_frequency: int = 2,
              id_order: str = "hf", specials_at: "str | None" = None) -> TrainedBPE:
    """Train byte-level BPE the way HF's ``BpeTrainer`` does (see the module docstring).

    ``pattern`` is a regex or a short name (``gpt2``, ``cl100k``, ``o200k``). ``id_order`` and
    ``specials_at``: rule 8.
    """
    pat = patterns.resolve_pattern(pattern)
    if specials_at is None:
        specials_at = "start" if id_order == "hf" else "end"

    # rule 2: ids. ``vocab`` maps HF token strings to ids; a string already present keeps its id.
    vocab: dict[str, int] = {}
    names: list[str] = []  # id -> string

    def intern(s: str) -> int:
        if s not in vocab:
            vocab[s] = len(names)
            names.append(s)
        return vocab[s]

    def append(s: str) -> int:  # rule 8: a new id even for a known string
        names.append(s)
        vocab.setdefault(s, len(names) - 1)
        return len(names) - 1

    specials: dict[str, int] = {}
    unique_specials = list(dict.fromkeys(special_tokens))  # a repeat is skipped
    if specials_at == "start":
        specials = {s: (intern(s) if id_order == "hf" else append(s)) for s in unique_specials}
    if id_order == "hf":
        for ch in sorted(BYTE_TO_UNICODE.values()):  # the alphabet, by mapped code point
            intern(ch)
        byte_id = {b: vocab[BYTE_TO_UNICODE[b]] for b in range(256)}
    else:  # rule 8: by byte value
        byte_id = {b: append(BYTE_TO_UNICODE[b]) for b in range(256)}
    n_last = len(unique_specials) if specials_at == "end" else 0

    # rule 1: words, as lists of alphabet ids, with their counts
    words = [([byte_id[b] for b in w.encode("utf-8")], n)
             for w, n in count_words(texts, pat).items()]

    merges: list[tuple[int, int, int]] = []
    while len(names) + n_last < vocab_size:  # rule 5: the size counts every id
        # rule 3: overlapping windows, weighted by word count
        counts: Counter = Counter()
        for syms, n in words:
            for pair in zip(syms, syms[1:]):
                counts[pair] += n
        if not counts:
            break
        # rule 4, THE COMPARATOR: highest count; on a tie the smallest (left_id, right_id).
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        if counts[best] < max(min_frequency, 1):  # rule 5
            break
        a, b = best
        if id_order == "hf":
            new_id = intern(names[a] + names[b])  # rule 7: an existing string keeps its id
        else:
            new_id = append(names[a] + names[b])
        merges.append((a, b, new_id))
        # rule 6: left to right, without overlap
        for syms, _n in words:
            i = 0
            while i < len(syms) - 1:
                if syms[i] == a and syms[i + 1] == b:
                    syms[i:i + 2] = [new_id]
                i += 1
    if specials_at == "end":
        specials = {s: append(s) for s in unique_specials}
    return TrainedBPE(vocab=vocab, merges=merges, special_tokens=specials, names=names)
