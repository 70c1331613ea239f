"""SentencePiece BPE training's words (``cpu_ref/spm_train.py`` rules 1, 2 and 4): sentences
normalised as the model will normalise them, meta pieces turned into U+001F, words cut by
SplitIntoWords and counted. The native word counter does all of it on every core
(``kernels/host_train_spm_words.h``, with the encoder's normaliser); a sentence holding a
user-defined piece (which the normaliser keeps whole) goes the Python way, sentence by sentence.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice
from typing import Iterable

import numpy as np

from . import native
from .spm_options import BOUNDARY, SPACE, UNK_CHAR, SpmOptions, charsmap_blob, meta_pieces
from .wordset import WordCounts

#: sentences per call into the native counter (~6 MB of prose: the joined batch and its bytes
#: are the Python side's memory; the library's workers take ranges of it in turn)
BATCH = 1 << 16
_DECODE_AT_ONCE = 1 << 20  # bytes of words decoded at once (``word_chars``)
# the normaliser's flags (kernels/common/spm_norm_rules.h) and the split settings
# (kernels/host_train_spm_words.h)
_DUMMY, _COLLAPSE, _ESCAPE, _SUFFIX = 1, 2, 4, 8
_SPLIT_SUFFIX, _SPLIT_WS_ONLY = 1, 2

def _normalizer(o: SpmOptions):
    from ..components.normalizers.charsmap import CharsMap
    from ..components.normalizers.spm import SpmNormalizer

    blob = charsmap_blob(o.normalization_rule_name)
    return SpmNormalizer(charsmap=CharsMap(blob) if blob else None,
                         add_dummy_prefix=o.add_dummy_prefix,
                         remove_extra_whitespaces=o.remove_extra_whitespaces,
                         treat_whitespace_as_suffix=o.treat_whitespace_as_suffix,
                         user_defined=o.user_defined_symbols)


def split_into_words(text: str, o: SpmOptions) -> list[str]:
    """Rule 4 (``SplitIntoWords``); the default settings take ``str.split``."""
    if not o.treat_whitespace_as_suffix and not o.allow_whitespace_only_pieces:
        parts = text.split(SPACE)
        head = [parts[0]] if parts[0] else []
        return head + [SPACE + p for p in parts[1:]]
    words: list[str] = []
    in_ws = False
    if o.treat_whitespace_as_suffix:
        if text:
            words.append("")
        for i, c in enumerate(text):
            is_ws = c == SPACE
            if is_ws:
                in_ws = True
            elif in_ws:
                if o.allow_whitespace_only_pieces:
                    words.append("")
                in_ws = False
            words[-1] += c
            if i + 1 < len(text) and is_ws and not o.allow_whitespace_only_pieces:
                words.append("")
        return words
    for i, c in enumerate(text):
        is_ws = c == SPACE
        if i == 0 or (is_ws and (not in_ws or not o.allow_whitespace_only_pieces)):
            words.append("")
            in_ws = True
        if in_ws and not is_ws:
            in_ws = False
        words[-1] += c
    return words


def count_words(sentences: Iterable[str], o: SpmOptions, threads: "int | None" = None
                ) -> WordCounts:
    """Rules 1, 2 and 4 on normalised text: the words of str sentences and their counts."""
    it = iter(sentences)
    return count_batches(iter(lambda: list(islice(it, BATCH)), []), o, threads)


def count_batches(batches: Iterable, o: SpmOptions, threads: "int | None" = None
                  ) -> WordCounts:
    """``count_words`` over batches: lists of str sentences, or ``bytes`` blocks of whole
    lines, each ending in "\\n" (a text file read as bytes, never decoded into str). A word
    may be listed twice (once from the native counter, once from the sentences holding a
    user-defined piece): ``as_counter`` adds the counts up, and the merge loop takes the two
    as they are (the pairs' counts are the same)."""
    keys = sorted({p for p, _ in meta_pieces(o).values()}, key=lambda k: (-len(k), k))
    rules = native.SpmWordRules(
        charsmap_blob(o.normalization_rule_name),
        (_DUMMY * o.add_dummy_prefix | _COLLAPSE * o.remove_extra_whitespaces | _ESCAPE |
         _SUFFIX * o.treat_whitespace_as_suffix), keys, o.max_sentence_length,
        _SPLIT_SUFFIX * o.treat_whitespace_as_suffix |
        _SPLIT_WS_ONLY * o.allow_whitespace_only_pieces)
    norm = _normalizer(o) if o.user_defined_symbols else None
    ud = norm.ud_regex if norm is not None else None
    # (a line never holds a "\n": a piece holding one matches no line)
    ud_bytes = [u.encode("utf-8") for u in o.user_defined_symbols if u and "\n" not in u]
    ud_b = re.compile(b"|".join(map(re.escape, ud_bytes))) if ud_bytes else None
    words: Counter = Counter()
    counter = native.WordCounter(None, threads or native._threads())
    try:
        for batch in batches:
            if isinstance(batch, bytes):
                held = _count_block(counter, batch, rules, ud_b)
                if held:
                    _count_slow(held, o, norm, keys, words)
                continue
            if ud is not None:
                held = [ud.search(s) is not None for s in batch]
                if any(held):
                    _count_slow([s for s, h in zip(batch, held) if h], o, norm, keys, words)
                    batch = [s for s, h in zip(batch, held) if not h]
            _count_native(counter, batch, rules)
        got = counter.result()
    finally:
        counter.close()
        native._trim()  # (the counter's tables, freed: gone before the merge loop's)
    if words:
        slow = WordCounts.from_counter(words)
        got = WordCounts(np.concatenate([got.data, slow.data]),
                         np.concatenate([got.offsets, slow.offsets[1:] + got.offsets[-1]]),
                         np.concatenate([got.counts, slow.counts]))
    return got


def as_counter(words: WordCounts) -> Counter:
    """The words as a Counter of str (repeats added up): the bytes decoded once and cut at the
    words' offsets in characters (tests and small corpora)."""
    cps, cut = word_chars(words)
    text = words.data.tobytes().decode("utf-8")
    out: Counter = Counter()
    cl = cut.tolist()
    for w, n in zip([text[a:b] for a, b in zip(cl, cl[1:])], words.counts.tolist()):
        out[w] += n
    return out


def word_chars(words: WordCounts) -> tuple[np.ndarray, np.ndarray]:
    """The words' code points (uint32, back to back; a writable array of its own) and each
    word's offsets in them, a run of whole words (about ``_DECODE_AT_ONCE`` bytes) at a time
    (a whole corpus's words at once held their str, bytes and running sums beside the result):
    a run's code points by one decode and one UTF-32 encode (a numpy UTF-8 decoder took
    longer), its words' offsets by a running count of lead bytes (``np.add.reduceat`` per word
    took 0.4 s of 1.3M words)."""
    data = np.asarray(words.data, np.uint8)
    offsets = np.asarray(words.offsets, np.int64)
    cuts = np.unique(np.searchsorted(offsets, np.arange(0, len(data), _DECODE_AT_ONCE)))
    runs = list(zip(cuts.tolist(), cuts[1:].tolist() + [len(offsets) - 1]))
    n_chars = sum(int(np.count_nonzero((data[offsets[w0]:offsets[w1]] & 0xC0) != 0x80))
                  for w0, w1 in runs)
    cps = np.empty(n_chars, np.uint32)
    char_off = np.zeros(len(offsets), np.int64)
    at = 0
    for w0, w1 in runs:
        run = data[offsets[w0]:offsets[w1]]
        ends = np.cumsum(((run & 0xC0) != 0x80).view(np.uint8), dtype=np.int64)
        char_off[w0 + 1:w1 + 1] = at + ends[offsets[w0 + 1:w1 + 1] - offsets[w0] - 1]
        got = np.frombuffer(run.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32)
        cps[at:at + len(got)] = got
        at += len(got)
    return cps, char_off


def _count_native(counter, batch: list, rules) -> None:
    """The sentences joined by "\n" (each followed by one), to the library in one call."""
    if not batch:
        return
    buf = ("\n".join(batch) + "\n").encode("utf-8")
    nl = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
    if len(nl) == len(batch):
        offsets = np.zeros(len(batch) + 1, np.int64)
        offsets[1:] = nl + 1
    else:  # a sentence holds a "\n" itself: the ends from the sentences' own lengths
        offsets = np.zeros(len(batch) + 1, np.int64)
        np.cumsum([len(s.encode("utf-8")) + 1 for s in batch], out=offsets[1:])
    counter.add_spm(buf, offsets, 1, rules)


def _count_block(counter, block: bytes, rules, ud) -> list:
    """A block of whole lines (UTF-8, each ending in "\\n") to the library as it is; the lines
    holding a user-defined piece (``ud``, a bytes regex) are left out and returned as str."""
    if not block:
        return []
    nl = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
    offsets = np.zeros(len(nl) + 1, np.int64)
    offsets[1:] = nl + 1
    hits = [m.start() for m in ud.finditer(block)] if ud is not None else []
    if not hits:
        counter.add_spm(block, offsets, 1, rules)
        return []
    lines = np.unique(np.searchsorted(nl, np.array(hits, np.int64)))
    held = [block[offsets[k]:nl[k]].decode("utf-8") for k in lines.tolist()]
    keep = np.ones(len(nl), bool)
    keep[lines] = False
    arr = np.frombuffer(block, np.uint8)
    rest = arr[np.repeat(keep, np.diff(offsets))]
    if len(rest):
        nl = np.flatnonzero(rest == 10)
        offsets = np.zeros(len(nl) + 1, np.int64)
        offsets[1:] = nl + 1
        counter.add_spm(rest.tobytes(), offsets, 1, rules)
    return held


def _count_slow(batch: list, o: SpmOptions, norm, keys: list, words: Counter) -> None:
    """Rules 1, 2 and 4 sentence by sentence in Python (sentences holding a user-defined
    piece)."""
    meta_re = re.compile("|".join(map(re.escape, keys))) if keys else None
    limit = o.max_sentence_length
    keep = [s for s in batch if s and UNK_CHAR not in s and
            (len(s) * 4 <= limit or len(s.encode("utf-8")) <= limit)]
    for t in norm.normalize_many(keep):
        if meta_re is not None and meta_re.search(t):
            t = meta_re.sub(BOUNDARY, t)
        if t:
            words.update(split_into_words(t, o))
