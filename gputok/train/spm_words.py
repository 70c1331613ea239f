"""SentencePiece BPE training's words (``cpu_ref/spm_train.py`` rules 1, 2 and 4): sentences
normalised as the model will normalise them, meta pieces turned into U+001F, words cut before
each ``▁`` and counted (the common settings through the native word counter).
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice
from typing import Iterable

import numpy as np

from . import native
from .spm_options import BOUNDARY, SPACE, UNK_CHAR, SpmOptions, charsmap_blob, meta_pieces

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
                ) -> Counter:
    """Rules 1, 2 and 4 on normalised text: the words and their counts."""
    norm = _normalizer(o)
    keys = sorted({p for p, _ in meta_pieces(o).values()}, key=lambda k: (-len(k), k))
    meta_re = re.compile("|".join(map(re.escape, keys))) if keys else None
    usual = (o.add_dummy_prefix and o.remove_extra_whitespaces and
             not o.treat_whitespace_as_suffix and not o.allow_whitespace_only_pieces)
    words: Counter = Counter()
    parts = native.WordCounter(None, threads or native._threads())  # the fast path's words
    limit = o.max_sentence_length
    batch: list[str] = []

    def flush():
        rest = batch
        if usual:
            rest = _count_plain(norm, batch, meta_re, parts)
        for t in norm.normalize_many(rest):
            if meta_re is not None and meta_re.search(t):
                t = meta_re.sub(BOUNDARY, t)
            if t:
                words.update(split_into_words(t, o))
        batch.clear()

    it = iter(sentences)
    while True:  # rule 1, a chunk at a time
        chunk = list(islice(it, 8192))
        if not chunk:
            break
        batch.extend(s for s in chunk if s and UNK_CHAR not in s and
                     (len(s) * 4 <= limit or len(s.encode("utf-8")) <= limit))
        flush()
    try:
        for w, n in parts.result().items():
            words[w.decode("utf-8")] += n
    finally:
        parts.close()
    return words


def _may_rewrite(norm, cps: np.ndarray, text: str) -> np.ndarray:
    """Positions of ``text`` (code points ``cps``) where a rule may start or a user-defined
    piece starts: a superset of ``norm._candidates`` that costs two table lookups per
    character (``_rewrite_tables``), plus the user-defined pieces' own matches (one regex
    pass: a sentence holding one goes the slow way, where the piece is kept whole)."""
    if norm.charsmap is None:
        hit = np.zeros(0, np.int64)
    else:
        single, start, second = _rewrite_tables(norm.charsmap)
        mark = single[cps]
        if len(cps) > 1:
            mark[:-1] |= start[cps[:-1]] & second[cps[1:]]
        hit = np.flatnonzero(mark)
    if norm.ud_regex is not None:
        ud = np.fromiter((m.start() for m in norm.ud_regex.finditer(text)), np.int64)
        if len(ud):
            hit = np.union1d(hit, ud)
    return hit


_TABLES: dict = {}


def _rewrite_tables(cm) -> tuple:
    """Per code point: a one-character rule; the first character of a longer key; and a
    character whose first UTF-8 byte continues some key after its first character (found by
    trying every byte from every node a first character reaches: for nmt_nfkc only combining
    marks and characters of 3-4 bytes do, so a plain Latin sentence is one lookup a
    character)."""
    got = _TABLES.get(id(cm))
    if got is None or got[0] is not cm:
        from ..components.normalizers.charsmap import utf8_bytes

        node1, leaf1, _value = cm._per_cp
        nodes = np.unique(node1[node1 >= 0]).astype(np.int64)
        units = cm.units.astype(np.int64)
        b = np.arange(256, dtype=np.int64)
        nxt = nodes[:, None] ^ b[None, :]
        ok = nxt < len(units)
        unit = np.where(ok, units[np.minimum(nxt, len(units) - 1)], 0)
        first = np.flatnonzero((ok & ((unit & 0x800000FF) == b[None, :])).any(axis=0))
        lead = utf8_bytes(np.arange(0x110000, dtype=np.uint32))[0][:, 0]
        got = _TABLES[id(cm)] = (cm, (leaf1.copy(), node1 >= 0, np.isin(lead, first)))
    return got[1]


_MARK = SPACE.encode("utf-8")
_RUNS = re.compile(" {2,}")
_TRAILING = re.compile("\u2581+(?=\0|$)")


def _count_plain(norm, batch: list, meta_re, parts) -> list:
    """The usual settings' fast path: the sentences no rule or user-defined piece touches
    (most of them) normalised and cut into words all at once, over the joined batch; returns
    the others. Per sentence (U+0000 joins them; sentences holding it go the slow way): runs
    of spaces collapse, leading and trailing spaces go and so do trailing ``▁`` (an all-space
    sentence becomes empty and is dropped), spaces become ``▁``, meta pieces become U+001F.
    Each sentence then starts with the dummy ``▁``: the batch's words are its pieces that start
    with ``▁``, which the native counter ``parts`` counts (``WordCounter.add_marked``)."""
    from .._arrays import code_points

    keep = [s for s in batch if "\0" not in s]
    others = [s for s in batch if "\0" in s]
    joined = "\0".join(keep)
    cand = _may_rewrite(norm, code_points(joined), joined)
    if len(cand):  # sentences a rule may touch go the sentence-by-sentence way
        starts = np.zeros(len(keep) + 1, np.int64)
        np.cumsum([len(s) + 1 for s in keep], out=starts[1:])
        touched = np.zeros(len(keep), bool)
        touched[np.searchsorted(starts, cand, side="right") - 1] = True
        others += [s for s, t in zip(keep, touched.tolist()) if t]
        joined = "\0".join(s for s, t in zip(keep, touched.tolist()) if not t)
    if not joined:
        return others
    if "  " in joined:
        joined = _RUNS.sub(" ", joined)
    joined = joined.replace("\0 ", "\0").replace(" \0", "\0").strip(" ")
    if SPACE + "\0" in joined or joined.endswith(SPACE):
        joined = _TRAILING.sub("", joined)
    while "\0\0" in joined:  # sentences left empty
        joined = joined.replace("\0\0", "\0")
    joined = joined.strip("\0").replace(" ", SPACE)
    if meta_re is not None:
        joined = meta_re.sub(BOUNDARY, joined)
    if joined:
        parts.add_marked((SPACE + joined.replace("\0", SPACE)).encode("utf-8"), _MARK)
    return others
