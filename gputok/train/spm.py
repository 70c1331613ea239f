"""SentencePiece BPE training: the pieces, scores and ids of ``spm_train --model_type=bpe``
(sentencepiece 0.2.3), written as a ``.model`` sentencepiece loads. The rules are
``cpu_ref/spm_train.py`` (numbered there); this is the fast path:

* **Words** (rules 1-4, ``spm_words.py``): on every core in native code
  (``kernels/host_train_spm_words.h``), sentences are normalised by the encoder's normaliser
  (the charsmap named by ``normalization_rule_name``), meta pieces become U+001F, the words
  (SplitIntoWords) are counted; a .txt file reaches the counter as bytes, never as str. The
  words stay arrays (UTF-8, then code points, then symbol ids) up to the merge loop: the
  characters are counted from them, the required ones chosen by coverage, and every other one
  takes U+2585's id (words that become equal stay apart: no pair's count changes).
* **Merges** (rules 5-9): the native merge loop (``kernels/host_train_merge.h``) in its
  SentencePiece mode (``kernels/host_train_spm.h``: THE SPM PIECE RULE, THE SPM COMPARATOR,
  candidates kept at count 0, a piece made twice dropped), with work proportional to the
  merged pair's words, as for HF's rule.
* **Pieces and ids** (rule 10), and the ``.model`` (``spm_model.py``).

Corpus: an iterable of str (each one sentence, as ``SentencePieceTrainer``'s
``sentence_iterator`` takes them) or paths (.txt: one sentence per line, as ``spm_train``
reads its input; .jsonl / .parquet: each document's lines).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import islice
from importlib import resources
from typing import Iterator

import numpy as np

from . import native
from .spm_model import MODEL_TYPE_BPE, model_bytes
from .spm_options import (BOUNDARY, NORMAL, UNK_CHAR, SpmOptions, SpmTrainError, charsmap_blob,
                          meta_pieces)
from .spm_words import BATCH, count_batches, word_chars


@dataclass
class SpmTrained:
    """A trained model: ``pieces`` as ``(piece, score, type)`` in id order."""

    pieces: list
    options: SpmOptions
    n_words: int = 0
    n_merges: int = 0

    def model_bytes(self) -> bytes:
        o = self.options
        trainer = {k: v for k, v in asdict(o).items() if k not in (
            "normalization_rule_name", "add_dummy_prefix", "remove_extra_whitespaces")}
        trainer.update(model_type=MODEL_TYPE_BPE, vocab_size=len(self.pieces))
        if not trainer["required_chars"]:
            del trainer["required_chars"]
        normalizer = dict(name=o.normalization_rule_name,
                          precompiled_charsmap=charsmap_blob(o.normalization_rule_name),
                          add_dummy_prefix=o.add_dummy_prefix,
                          remove_extra_whitespaces=o.remove_extra_whitespaces,
                          escape_whitespaces=True)
        return model_bytes(self.pieces, trainer, normalizer)

    def save(self, path) -> None:
        """Write the ``.model`` file (under a temporary name, then renamed)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(self.model_bytes())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


# ---------------------------------------------------------------- tables


@lru_cache(maxsize=None)
def _scripts() -> tuple:
    rows = [line.split() for line in (resources.files("gputok") / "data" / "spm_scripts.txt")
            .read_text().splitlines() if line.strip() and not line.startswith("#")]
    names = sorted({r[2] for r in rows} | {"Common", "Han"})
    index = {n: i for i, n in enumerate(names)}
    return (np.array([int(a, 16) for a, _, _ in rows], np.int64),
            np.array([int(b, 16) for _, b, _ in rows], np.int64),
            np.array([index[r[2]] for r in rows], np.int32), index)


def char_classes(chars: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(code points, script class, flags)`` of ``chars`` for ``host_train_spm.h``."""
    firsts, lasts, ids, index = _scripts()
    cps = np.array([ord(c) for c in chars], np.int64)
    k = np.searchsorted(firsts, cps, side="right") - 1
    inside = (k >= 0) & (cps <= lasts[np.maximum(k, 0)])
    script = np.where(inside, ids[np.maximum(k, 0)], index["Common"]).astype(np.int32)
    for name in ("Hiragana", "Katakana"):  # THE SPM PIECE RULE: kana count as Han
        script[script == index.get(name, -9)] = index["Han"]
    script[cps == 0x30FC] = index["Han"]
    script[script == index.get("Inherited", -9)] = -2
    flags = np.zeros(len(cps), np.uint8)
    flags[((cps >= 0x30) & (cps <= 0x39)) | ((cps >= 0xFF10) & (cps <= 0xFF19))] |= 1
    flags[cps == 0x2581] |= 2
    flags[np.isin(cps, [0, 0x1F, 0x20, 0x2585]) | ((cps >= 0xD800) & (cps <= 0xDFFF))] |= 4
    return cps.astype(np.uint32), script, flags


_CHARS_AT_ONCE = 1 << 20  # characters weighed at once (``required_chars``)


def required_chars(cps: np.ndarray, char_off: np.ndarray, counts: np.ndarray,
                   o: SpmOptions) -> list[tuple[str, int]]:
    """Rule 3: the required characters with their counts, in rule 10's order, from the words'
    code points (``spm_words.word_chars``) and counts."""
    per_cp = np.zeros(int(cps.max()) + 1 if len(cps) else 1)
    counts = np.asarray(counts, np.int64)
    # (in pieces of about _CHARS_AT_ONCE characters: a weight per character is 16 bytes)
    cuts = np.unique(np.searchsorted(char_off, np.arange(0, int(char_off[-1]), _CHARS_AT_ONCE)))
    for w0, w1 in zip(cuts.tolist(), cuts[1:].tolist() + [len(counts)]):
        a, b = int(char_off[w0]), int(char_off[w1])
        weight = np.repeat(counts[w0:w1], np.diff(char_off[w0:w1 + 1]))
        per_cp += np.bincount(cps[a:b], weights=weight, minlength=len(per_cp))
    uniq = np.flatnonzero(per_cp)
    table = {chr(c): int(n) for c, n in zip(uniq.tolist(), per_cp[uniq].astype(np.int64).tolist())
             if c != 0}
    listed = set(o.required_chars) - {"\x00"}
    for c in listed:
        table.setdefault(c, 0)
    total = sum(table.values())
    if total == 0:
        raise SpmTrainError("no sentence left to train on")
    target = np.float32(o.character_coverage)
    out: list[tuple[str, int]] = []
    taken = 0
    for c, n in sorted(table.items(), key=lambda kv: (kv[0] not in listed, -kv[1], kv[0])):
        if np.float32(taken / total) >= target:
            break
        taken += n
        if c != BOUNDARY:
            out.append((c, n))
    return sorted(out, key=lambda kv: (-kv[1], kv[0]))


def symbol_ids(cps: np.ndarray, chars: list[str]) -> np.ndarray:
    """Each code point's symbol id, written over ``cps``: the k-th required character k, every
    other character (the rare ones, U+001F, U+0000) the id after them, U+2585's (rule 3: they
    become U+2585; words that become equal stay apart, which changes no pair's count)."""
    alphabet = chars + [UNK_CHAR]
    top = max(int(cps.max()) if len(cps) else 0, max(map(ord, alphabet)))
    lut = np.full(top + 1, len(chars), np.uint32)
    lut[[ord(c) for c in alphabet]] = np.arange(len(alphabet), dtype=np.uint32)
    for a in range(0, len(cps), _CHARS_AT_ONCE):  # (in place, a piece at a time)
        cps[a:a + _CHARS_AT_ONCE] = lut[cps[a:a + _CHARS_AT_ONCE]]
    return cps


# ---------------------------------------------------------------- training


_BLOCK = 8 << 20  # bytes of a .txt file read at once (``_txt_blocks``)


def _txt_blocks(path, errors: str) -> Iterator[bytes]:
    """A text file as blocks of whole lines (lines end at "\\n" only; the last one is given
    its "\\n"), each valid UTF-8 and never decoded into str for the native word counter
    (per-line reads and decodes took a tenth of a 32 MB training, the str round trip of whole
    blocks another tenth). A block that is not UTF-8 is read again line by line, for the
    error's line number or the per-line replacement. A line longer than a block is gathered
    from its parts (joined once)."""
    line_no = 0
    parts: list = []  # the start of a line whose end is not read yet

    def checked(head: bytes) -> bytes:
        nonlocal line_no
        try:
            head.decode("utf-8")
        except UnicodeDecodeError:
            out = []
            for k, line in enumerate(head.split(b"\n")[:-1], line_no + 1):
                try:
                    line.decode("utf-8")
                    out.append(line)
                except UnicodeDecodeError as e:
                    if errors != "replace":
                        raise ValueError(f"{path}:{k}: invalid UTF-8 ({e.reason} at byte "
                                         f"{e.start}); pass errors='replace'") from None
                    out.append(line.decode("utf-8", "replace").encode("utf-8"))
            head = b"\n".join(out) + b"\n"
        line_no += head.count(b"\n")
        return head

    with open(path, "rb") as f:
        while True:
            block = f.read(_BLOCK)
            if not block:
                if parts:
                    yield checked(b"".join(parts) + b"\n")
                return
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                parts.append(block)
                continue
            head = b"".join(parts + [block[:cut]]) if parts else block[:cut]
            parts = [block[cut:]] if cut < len(block) else []
            yield checked(head)


def _txt_lines(path, errors: str) -> Iterator[str]:
    """A text file's lines (``_txt_blocks`` decoded)."""
    for block in _txt_blocks(path, errors):
        yield from block.decode("utf-8").split("\n")[:-1]


def _paths(corpus) -> "list | None":
    """The corpus as a checked list of files when it names files (one, or a list of them),
    else None (texts)."""
    from .words import _check_paths, _is_pathlike

    if _is_pathlike(corpus):
        corpus = [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(map(_is_pathlike, corpus)):
        _check_paths(corpus)
        return list(corpus)
    return None


def sentences_of(corpus, *, field: str = "text", errors: str = "strict") -> Iterator[str]:
    """The corpus as sentences: str items as they are; a .txt file line by line (streamed, as
    ``spm_train`` reads it: lines end at "\\n" only); other files' documents split into lines."""
    from .words import corpus_texts

    paths = _paths(corpus)
    if paths is not None:
        for p in paths:
            if str(p).endswith(".txt"):
                yield from _txt_lines(p, errors)
            else:
                texts, _total, _unit = corpus_texts([p], field=field, errors=errors)
                for doc, _n in texts:
                    yield from doc.split("\n")
        return
    texts, _total, _unit = corpus_texts(corpus, field=field, errors=errors)
    for t, _n in texts:
        yield t


def sentence_batches(corpus, *, field: str = "text", errors: str = "strict") -> Iterator:
    """The corpus as ``spm_words.count_batches`` takes it: a .txt file as blocks of whole lines
    (bytes: ``_txt_blocks``), every other sentence (``sentences_of``) in lists."""
    paths = _paths(corpus)
    if paths is not None:
        for p in paths:
            if str(p).endswith(".txt"):
                yield from _txt_blocks(p, errors)
            else:
                yield from _lists(sentences_of([p], field=field, errors=errors))
        return
    yield from _lists(sentences_of(corpus, field=field, errors=errors))


def _lists(sentences: Iterator[str]) -> Iterator[list]:
    it = iter(sentences)
    return iter(lambda: list(islice(it, BATCH)), [])


def train_spm_bpe(corpus, *, vocab_size: int = 8000, threads: "int | None" = None,
                  field: str = "text", errors: str = "strict", **options) -> SpmTrained:
    """Train a SentencePiece BPE model as ``spm_train --model_type=bpe`` does: the same pieces,
    scores and ids. ``options``: ``SpmOptions``' fields (``character_coverage``,
    ``byte_fallback``, ``user_defined_symbols``, ``control_symbols``, ...).

    >>> m = train_spm_bpe(["low lower lowest"] * 5, vocab_size=24)
    >>> [p for p, _s, _t in m.pieces[3:8]]
    ['lo', 'low', '▁low', '▁lowe', 'st']
    """
    unknown = set(options) - set(SpmOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"train_spm_bpe: unknown option(s) {', '.join(sorted(unknown))}")
    o = SpmOptions(vocab_size=vocab_size, **options)
    if not 0.98 <= o.character_coverage <= 1.0:
        raise SpmTrainError("character_coverage must be in [0.98, 1.0]")
    if not 1 <= o.max_sentencepiece_length <= 512:
        raise SpmTrainError("max_sentencepiece_length must be in [1, 512]")
    meta = meta_pieces(o)
    words = count_batches(sentence_batches(corpus, field=field, errors=errors), o, threads)
    if not len(words):
        raise SpmTrainError("no sentence left to train on")
    n_words, counts = len(words), words.counts
    cps, char_off = word_chars(words)
    del words
    chars = required_chars(cps, char_off, counts, o)
    if len(chars) + len(meta) > o.vocab_size:
        raise SpmTrainError(f"Vocabulary size is smaller than required_chars. {o.vocab_size} vs "
                            f"{len(chars) + len(meta)}. Increase vocab_size or decrease "
                            "character_coverage with --character_coverage option.")
    arrays = [symbol_ids(cps, [c for c, _ in chars]), char_off, counts]  # (ids over cps)
    del cps, char_off, counts  # (_merge lets them go once the loop has its copy)
    n_merges = o.vocab_size - len(meta) - len(chars)
    merged = _merge(arrays, [c for c, _ in chars], n_merges, o, threads)
    if len(merged) < n_merges and o.hard_vocab_limit:
        have = len(meta) + len(chars) + len(merged)
        raise SpmTrainError(f"Vocabulary size too high ({o.vocab_size}). Please set it to a value "
                            f"<= {have}.")
    finals = merged + [c for c, _ in chars]
    pieces, k = [], 0
    for i in range(max(o.vocab_size, len(meta))):  # rule 10
        if i in meta:
            pieces.append((meta[i][0], 0.0, meta[i][1]))
        elif k < len(finals):
            pieces.append((finals[k], -float(np.float32(k)), NORMAL))
            k += 1
    return SpmTrained(pieces, o, n_words=n_words, n_merges=len(merged))


def _merge(arrays: list, chars: list[str], n_merges: int, o: SpmOptions,
           threads: "int | None") -> list[str]:
    """Rules 5-9 in the native loop over the words as symbol ids: ``arrays`` = [ids
    (``symbol_ids``), their words' offsets, the words' counts], emptied once the loop has its
    own copy. Returns the merged pieces in order."""
    alphabet = chars + [UNK_CHAR]
    ids = np.ascontiguousarray(arrays[0], np.uint32)
    offsets = np.ascontiguousarray(arrays[1], np.int64)
    counts = np.ascontiguousarray(arrays[2], np.int64)
    arrays.clear()
    encoded = [c.encode("utf-8") for c in alphabet]
    tok = np.frombuffer(b"".join(encoded), np.uint8)
    tok_off = np.zeros(len(alphabet) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=tok_off[1:])
    c_cps, c_script, c_flags = char_classes(alphabet)
    rule_flags = (o.split_by_unicode_script * 1 | o.split_by_number * 2 |
                  o.split_by_whitespace * 4 | o.split_digits * 8 |
                  o.treat_whitespace_as_suffix * 16 | o.allow_whitespace_only_pieces * 32)
    lib = native.library()
    a = native._addr
    ctx = lib.gputok_train_spm_new(a(ids), a(offsets), a(counts), len(counts), a(tok),
                                   a(tok_off), len(alphabet), a(c_cps), a(c_script), a(c_flags),
                                   len(alphabet), int(o.max_sentencepiece_length), rule_flags,
                                   int(threads or native._threads()), int(native._par_min))
    del ids, offsets, counts
    if not ctx:
        raise MemoryError("gputok train: out of memory building the pair counts")
    piece = list(alphabet)
    out = np.empty(4 * native.BLOCK_MERGES, np.int64)
    merged: list[str] = []
    try:
        while len(merged) < n_merges:
            step = min(native.BLOCK_MERGES, n_merges - len(merged))
            done = lib.gputok_train_merge_run(ctx, step, len(alphabet) + n_merges, 0, a(out))
            if done < 0:
                raise MemoryError("gputok train: out of memory in the merge loop")
            for left, right, c, _n in out[:4 * done].reshape(-1, 4).tolist():
                if c != len(piece):
                    raise RuntimeError(f"merge {len(merged)}: id {c}, expected {len(piece)}")
                piece.append(piece[left] + piece[right])
                merged.append(piece[-1])
            if done < step:
                break
    finally:
        lib.gputok_train_merge_free(ctx)
    return merged
