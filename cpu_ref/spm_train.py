"""SentencePiece BPE training: ``spm_train --model_type=bpe`` (sentencepiece 0.2.3), as rules.

The oracle is ``sentencepiece.SentencePieceTrainer`` (its ``trainer_interface.cc`` and
``bpe_model_trainer.cc``); every rule below was checked against it (tests/test_spm_train.py).
The result is the model's pieces in id order, ``(piece, score, type)``, which a ``.model`` file
holds with the trainer's and normaliser's settings.

1. **Sentences.** Each input line is a sentence, weight 1. Empty lines are skipped, and so are
   lines longer than ``max_sentence_length`` *bytes* (4192) and lines holding U+2585 (the
   trainer's unknown-character mark).
2. **Normalisation.** ``SpmNormalizer`` (``cpu_ref.spm``: the charsmap named by
   ``normalization_rule_name``, default ``nmt_nfkc``; user-defined symbols pass unchanged; extra
   spaces removed, ``▁`` for spaces, a dummy ``▁`` prefix). Then every *meta piece* (``<unk>``,
   ``<s>``, ``</s>``, ``<pad>`` when it has an id, control and user-defined symbols, and the byte
   pieces ``<0x00>`` .. ``<0xFF>`` with ``byte_fallback``) found in the normalised text,
   longest match first, left to right, becomes U+001F (a boundary no piece may cross). A
   sentence that normalises to nothing is dropped.
3. **Required characters** (``character_coverage``, default 0.9995): characters are counted
   over the sentences (weighted), sorted by (listed in ``required_chars`` first, count
   descending, code point ascending), and taken in that order while the coverage *before*
   taking the next one, ``float32(taken_count / all_count)``, is below
   ``float32(character_coverage)``. U+001F counts toward coverage but is never required.
   Every other character in the sentences becomes U+2585.
4. **Words.** Each sentence is cut before every ``▁`` (``SplitIntoWords``; after it with
   ``treat_whitespace_as_suffix``); words are counted (sentence weights summed) and sorted by
   (count descending, bytes ascending).
5. **Symbols** are characters and, recursively, *pairs of symbols*: a pair is identified by its
   two parts, so ``aa`` + ``a`` and ``a`` + ``aa`` are two symbols spelling one piece. A pair is
   a candidate once it is *formed* (adjacent in a word at the start, or made adjacent by a
   merge, even when the same merge's next match takes it apart at once: in ``aaaa`` the merge
   of ``(a, a)`` forms ``(aa, a)`` and then ``(aa, aa)``), if its piece is valid (rule 9) and
   neither part is U+2585; it stays a candidate, even at count 0, until it is taken or
   dropped.
6. **Counts**: every adjacent occurrence in every word, weighted by the word's count
   (overlapping windows: ``aaa`` holds ``(a, a)`` twice).
7. **THE SPM COMPARATOR**: the best candidate has the highest count; on equal counts the fewest
   characters; then the smallest piece as UTF-8 bytes. (Two symbols spelling the same piece
   with the same count tie for real; sentencepiece takes the one its heap yields first, which
   no rule states. Here: the one created first.)
8. **A merge** replaces the best pair in every word, left to right without overlap (its
   occurrences in word order: an occurrence whose left part was already merged is skipped).
   If its piece is one an earlier merge made (another derivation), it is dropped instead: no
   merge, not counted, never a candidate again. Merges go on until there are
   ``vocab_size - len(meta pieces) - len(required characters)`` of them, or no candidate is
   left (then, with ``hard_vocab_limit``, the size is an error: "Vocabulary size too high").
9. **Valid pieces** (``IsValidSentencePiece``): 1 to ``max_sentencepiece_length`` (16)
   characters, no U+0000, U+001F, U+0020 or U+2585; ``▁`` only as the first character (last
   with ``treat_whitespace_as_suffix``; anywhere in an all-``▁`` piece with
   ``allow_whitespace_only_pieces``); with ``split_by_unicode_script``, one script per piece:
   Hiragana, Katakana and U+30FC count as Han, Inherited takes the script before it, and with
   ``split_by_number=False`` the digits 0-9 and U+FF10-U+FF19 match any script; with
   ``split_digits`` a digit stands alone. Scripts are sentencepiece's table (Unicode 9.0,
   ``gputok/data/spm_scripts.txt``).
10. **Pieces and ids.** The merged pieces in order, then the required characters by (count
    descending, code point ascending); the k-th has score ``-k`` (float32). Ids: ``<unk>`` 0,
    ``<s>`` 1, ``</s>`` 2 (``<pad>`` none) unless moved; control, then user-defined symbols, then
    the byte pieces take the lowest free ids in that order; the learned pieces fill the ids
    left, in order. Meta pieces score 0.

This module is the spec: it recounts every pair after every merge and is slow.
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from .spm import SPACE, SpmNormalizer, byte_piece
from .spm_proto import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, NormalizerSpec

UNK_CHAR = "\u2585"
BOUNDARY = "\u001f"
DATA = Path(__file__).resolve().parent.parent / "gputok" / "data"


class SpmTrainError(ValueError):
    """Settings or a corpus sentencepiece's trainer refuses, with its reason."""


@dataclass
class SpmOptions:
    """The trainer's settings that change pieces, scores or ids (TrainerSpec's names and
    defaults)."""

    vocab_size: int = 8000
    character_coverage: float = 0.9995
    max_sentencepiece_length: int = 16
    max_sentence_length: int = 4192
    split_by_unicode_script: bool = True
    split_by_number: bool = True
    split_by_whitespace: bool = True
    split_digits: bool = False
    treat_whitespace_as_suffix: bool = False
    allow_whitespace_only_pieces: bool = False
    byte_fallback: bool = False
    required_chars: str = ""
    control_symbols: list = field(default_factory=list)
    user_defined_symbols: list = field(default_factory=list)
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"
    hard_vocab_limit: bool = True
    normalization_rule_name: str = "nmt_nfkc"
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True


def charsmap(name: str) -> bytes:
    """The precompiled charsmap of a normalisation rule (``identity``: none)."""
    if name == "identity":
        return b""
    if name == "nmt_nfkc":
        return gzip.decompress((DATA / "spm_nmt_nfkc.charsmap.gz").read_bytes())
    raise SpmTrainError(f"normalization_rule_name {name!r}: nmt_nfkc and identity are known")


def normalizer_spec(opt: SpmOptions) -> NormalizerSpec:
    return NormalizerSpec(name=opt.normalization_rule_name,
                          precompiled_charsmap=charsmap(opt.normalization_rule_name),
                          add_dummy_prefix=opt.add_dummy_prefix,
                          remove_extra_whitespaces=opt.remove_extra_whitespaces,
                          escape_whitespaces=True)


_SCRIPTS: "tuple | None" = None
COMMON = "Common"


def script(c: str) -> str:
    """sentencepiece's script of a character (rule 9's table; Common where it has none)."""
    global _SCRIPTS
    if _SCRIPTS is None:
        rows = [line.split() for line in (DATA / "spm_scripts.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
        _SCRIPTS = (np.array([int(a, 16) for a, _, _ in rows]),
                    np.array([int(b, 16) for _, b, _ in rows]), [r[2] for r in rows])
    firsts, lasts, names = _SCRIPTS
    cp = ord(c)
    k = int(np.searchsorted(firsts, cp, side="right")) - 1
    return names[k] if k >= 0 and cp <= lasts[k] else COMMON


def _is_decimal(c: str) -> bool:
    return "0" <= c <= "9" or "\uff10" <= c <= "\uff19"


ANY = None  # kAnyType: matches every script


def is_valid_piece(piece: str, opt: SpmOptions) -> bool:
    """Rule 9."""
    if not piece or len(piece) > opt.max_sentencepiece_length:
        return False
    all_ws = all(c == SPACE for c in piece)
    prev = ANY
    for pos, c in enumerate(piece):
        if c in (UNK_CHAR, "\x00", BOUNDARY, " ") or 0xD800 <= ord(c) <= 0xDFFF:
            return False
        if c == SPACE:
            if not opt.allow_whitespace_only_pieces or not all_ws:
                last = pos == len(piece) - 1
                if opt.treat_whitespace_as_suffix:
                    if (opt.split_by_whitespace and not last) or \
                            (not opt.split_by_whitespace and not last and pos == 0):
                        return False
                elif (opt.split_by_whitespace and pos > 0) or \
                        (not opt.split_by_whitespace and pos > 0 and last):
                    return False
            continue
        s = script(c)
        if s in ("Hiragana", "Katakana") or c == "\u30fc":
            s = "Han"
        elif s == "Inherited":
            s = prev
        if not opt.split_by_number and _is_decimal(c):
            s = ANY
        if opt.split_digits and _is_decimal(c) and len(piece) > 1:
            return False
        if opt.split_by_unicode_script and s is not ANY and prev is not ANY and prev != s:
            return False
        prev = s
    return True


def meta_pieces(opt: SpmOptions) -> dict[int, tuple[str, int]]:
    """Rule 10's ids of the meta pieces: ``{id: (piece, type)}``."""
    meta: dict[int, tuple[str, int]] = {}
    for i, p in ((opt.unk_id, opt.unk_piece), (opt.bos_id, opt.bos_piece),
                 (opt.eos_id, opt.eos_piece), (opt.pad_id, opt.pad_piece)):
        if i < 0:
            continue
        if i >= opt.vocab_size or i in meta:
            raise SpmTrainError(f"id {i} of {p!r} is taken or outside the vocabulary")
        meta[i] = (p, UNKNOWN if p == opt.unk_piece else CONTROL)
    if opt.unk_id < 0 and not opt.byte_fallback:
        raise SpmTrainError(f"{opt.unk_piece} must be defined")
    seen: set[str] = set()
    nxt = 0

    def add(w: str, kind: int) -> None:
        nonlocal nxt
        if w in seen:
            raise SpmTrainError(f"{w} is already defined. duplicated symbols are not allowed.")
        seen.add(w)
        if w == opt.unk_piece:
            raise SpmTrainError(f"{opt.unk_piece} must not be defined with --control_symbols "
                                "and --user_defined_symbols.")
        for i, p in ((opt.bos_id, opt.bos_piece), (opt.eos_id, opt.eos_piece),
                     (opt.pad_id, opt.pad_piece)):
            if w == p and i >= 0:
                meta[i] = (p, kind)
                return
        while nxt in meta:
            nxt += 1
        meta[nxt] = (w, kind)

    for w in opt.control_symbols:
        add(w, CONTROL)
    for w in opt.user_defined_symbols:
        add(w, USER_DEFINED)
    if opt.byte_fallback:
        for b in range(256):
            add(byte_piece(b), BYTE)
    return meta


def _global_replace(text: str, keys: set[str], longest: int) -> str:
    """Rule 2's meta-piece replacement: longest key match first, left to right."""
    if not keys:
        return text
    out, i = [], 0
    while i < len(text):
        for n in range(min(longest, len(text) - i), 0, -1):
            if text[i:i + n] in keys:
                out.append(BOUNDARY)
                i += n
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def split_into_words(text: str, opt: SpmOptions) -> list[str]:
    """Rule 4 (``SplitIntoWords``)."""
    words: list[str] = []
    if opt.treat_whitespace_as_suffix:
        in_ws = False
        if text:
            words.append("")
        for i, c in enumerate(text):
            is_ws = c == SPACE
            if is_ws:
                in_ws = True
            elif in_ws:
                if opt.allow_whitespace_only_pieces:
                    words.append("")
                in_ws = False
            words[-1] += c
            if i + 1 < len(text) and is_ws and not opt.allow_whitespace_only_pieces:
                words.append("")
        return words
    in_ws = False
    for i, c in enumerate(text):
        is_ws = c == SPACE
        if i == 0 or (is_ws and (not in_ws or not opt.allow_whitespace_only_pieces)):
            words.append("")
            in_ws = True
        if in_ws and not is_ws:
            in_ws = False
        words[-1] += c
    return words


def prepare_words(sentences: Iterable[str], opt: SpmOptions
                  ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Rules 1-4: ``(words with counts in rule 4's order, required characters with counts in
    rule 10's order)``."""
    meta = meta_pieces(opt)
    norm = SpmNormalizer(normalizer_spec(opt),
                         treat_whitespace_as_suffix=opt.treat_whitespace_as_suffix,
                         user_defined=frozenset(opt.user_defined_symbols))
    keys = {p for p, _ in meta.values()}
    longest = max(map(len, keys), default=0)
    normalized: list[str] = []
    for s in sentences:  # rule 1
        if not s or len(s.encode("utf-8")) > opt.max_sentence_length or UNK_CHAR in s:
            continue
        t = _global_replace(norm.normalize(s), keys, longest)  # rule 2
        if t:
            normalized.append(t)
    if not normalized:
        raise SpmTrainError("no sentence left to train on")
    # rule 3
    counts: Counter = Counter()
    for t in normalized:
        counts.update(t.replace("\x00", ""))
    listed = set(opt.required_chars) - {"\x00"}
    for c in listed:
        counts.setdefault(c, 0)
    total = sum(counts.values())
    required: dict[str, int] = {}
    taken = 0
    target = np.float32(opt.character_coverage)
    for c, n in sorted(counts.items(), key=lambda kv: (kv[0] not in listed, -kv[1], kv[0])):
        if np.float32(taken / total) >= target:
            break
        taken += n
        if c != BOUNDARY:
            required[c] = n
    if len(required) + len(meta) > opt.vocab_size:
        raise SpmTrainError(f"Vocabulary size is smaller than required_chars. {opt.vocab_size} "
                            f"vs {len(required) + len(meta)}. Increase vocab_size or decrease "
                            "character_coverage with --character_coverage option.")
    words: Counter = Counter()
    for t in normalized:
        t = "".join(c if c in required else UNK_CHAR for c in t)
        words.update(split_into_words(t, opt))  # rule 4
    order = sorted(words.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))
    chars = sorted(required.items(), key=lambda kv: (-kv[1], kv[0]))
    return order, chars


def train_spm_bpe(sentences: Iterable[str], opt: SpmOptions) -> list[tuple[str, float, int]]:
    """The model's pieces ``(piece, score, type)`` in id order (rules 1-10)."""
    words, chars = prepare_words(sentences, opt)
    meta = meta_pieces(opt)
    n_merges = opt.vocab_size - len(meta) - len(chars)
    # symbols: id -> piece; pairs by their parts (rule 5)
    piece: list[str] = []
    char_id: dict[str, int] = {}

    def char_sym(c: str) -> int:
        if c not in char_id:
            char_id[c] = len(piece)
            piece.append(c)
        return char_id[c]

    seqs = [([char_sym(c) for c in w], n) for w, n in words]
    unk = char_id.get(UNK_CHAR)
    candidates: dict[tuple[int, int], int] = {}  # pair -> creation order (rule 7's last tie)
    gone: set[tuple[int, int]] = set()  # taken or dropped

    def form(pair: tuple[int, int]) -> None:  # rule 5: a pair is formed
        if pair not in candidates and pair not in gone and unk not in pair and \
                is_valid_piece(piece[pair[0]] + piece[pair[1]], opt):
            candidates[pair] = len(candidates)

    for syms, _n in seqs:
        for pair in zip(syms, syms[1:]):
            form(pair)
    merged: list[tuple[str, int]] = []
    made: set[str] = set()
    while len(merged) < n_merges:
        counts: Counter = Counter()
        for syms, n in seqs:  # rule 6
            for pair in zip(syms, syms[1:]):
                if pair in candidates:
                    counts[pair] += n
        live = [p for p in candidates if p not in gone]
        if not live:
            break
        # rule 7, THE SPM COMPARATOR
        best = min(live, key=lambda p: (-counts[p], len(piece[p[0]]) + len(piece[p[1]]),
                                        (piece[p[0]] + piece[p[1]]).encode("utf-8"),
                                        candidates[p]))
        gone.add(best)
        text = piece[best[0]] + piece[best[1]]
        if text in made:  # rule 8: another derivation of a piece already made
            continue
        made.add(text)
        merged.append((text, counts[best]))
        new = len(piece)
        piece.append(text)
        a, b = best
        for syms, _n in seqs:  # rule 8: left to right, without overlap
            i = 0
            while i < len(syms) - 1:
                if syms[i] == a and syms[i + 1] == b:
                    syms[i:i + 2] = [new]
                    # the pairs this match forms, with the symbol written before it and the
                    # one still unread after it (the next match may take that one at once)
                    if i > 0:
                        form((syms[i - 1], new))
                    if i + 1 < len(syms):
                        form((new, syms[i + 1]))
                i += 1
    if len(merged) < n_merges and opt.hard_vocab_limit:
        have = len(meta) + len(chars) + len(merged)
        raise SpmTrainError(f"Vocabulary size too high ({opt.vocab_size}). Please set it to a "
                            f"value <= {have}.")
    finals = [p for p, _ in merged] + [c for c, _ in chars]
    pieces: list[tuple[str, float, int]] = []
    k = 0
    for i in range(max(opt.vocab_size, len(meta))):  # rule 10
        if i in meta:
            pieces.append((meta[i][0], 0.0, meta[i][1]))
        elif k < len(finals):
            pieces.append((finals[k], -float(np.float32(k)), NORMAL))
            k += 1
    return pieces
