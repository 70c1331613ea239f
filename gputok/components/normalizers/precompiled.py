"""HF's ``Precompiled`` normaliser (T5, ALBERT, XLM-R, mT5... tokenizer.json files converted from
SentencePiece): a ``precompiled_charsmap`` applied HF's way, which is not sentencepiece's.

The rule (the ``spm_precompiled`` crate behind tokenizers 0.23; ``cpu_ref/hf_spm.py`` states it
too): the text is walked one extended grapheme cluster at a time (``unicode.graphemes``). A
cluster of fewer than 6 bytes is first looked up whole: if some key is a prefix of its bytes, the
*shortest* such key's replacement stands for the *whole* cluster (a combining mark after a
mapped character vanishes with it: "²" + U+0301 gives "2"). Otherwise each character is looked
up alone (a key equal to it: its replacement; else the character). sentencepiece itself takes the
longest key at every byte position instead (``spm.SpmNormalizer``).

Only clusters whose first character starts some key, or that hold a character that is a key, can
change: those are found vectorised (the table's per-code-point walk), the rest of the text is
copied.
"""

from __future__ import annotations

import numpy as np

from ..._arrays import code_points
from ...stages import counters
from .charsmap import CharsMap


class PrecompiledNormalizer:
    """HF ``Precompiled`` over a ``CharsMap`` (the decoded blob).

    >>> n = PrecompiledNormalizer(CharsMap.from_rules({"\\u00b2": "2", "\\uff21": "A"}))
    >>> n.normalize("x\\u00b2\\u0301 \\uff21")
    'x2 A'
    """

    steps = None
    device_form = None

    def __init__(self, charsmap: CharsMap):
        self.cm = charsmap

    def _first(self, data: bytes) -> "str | None":
        """The replacement of the shortest key that is a prefix of ``data`` (None: no key). HF's
        trie walk stops at a NUL byte: a key holding U+0000 never matches there."""
        found, _ = self.cm._prefixes(data.split(b"\0", 1)[0])
        if not found:
            return None
        return self.cm.value_text(found[0][1])

    def normalize(self, text: str) -> str:
        if not text:
            return text
        from ...unicode.graphemes import cluster_starts

        cps = code_points(text)
        node1, leaf1, _ = self.cm._per_cp
        starts_key = node1[cps] >= 0  # some key starts with this character
        if not starts_key.any():
            return text
        starts = cluster_starts(cps)
        first = starts[:-1]
        # a cluster of one character changes only where that character is a key (ASCII letters
        # start keys of composing sequences, but are none: prose's clusters mostly stay); a
        # longer one where a key starts at its first character or one of its characters is one
        single = np.diff(starts) == 1
        own = leaf1[cps] & (cps != 0)  # (a NUL key never matches: HF's walk stops there)
        touched = np.where(single, own[first],
                           starts_key[first] | np.logical_or.reduceat(own, first))
        if not touched.any():
            return text
        out, pos = [], 0
        for k in np.flatnonzero(touched).tolist():
            a, b = int(starts[k]), int(starts[k + 1])
            if a > pos:
                out.append(text[pos:a])
            g = text[a:b]
            whole = None
            data = g.encode("utf-8")
            if len(data) < 6:
                whole = self._first(data)
            if whole is not None:
                out.append(whole)
            else:
                for ch in g:
                    rep = self._first(ch.encode("utf-8")) if leaf1[ord(ch)] else None
                    out.append(ch if rep is None else rep)
            pos = b
        out.append(text[pos:])
        return "".join(out)

    def normalize_batch(self, texts: list) -> list:
        counters["normalize.segments"] += len(texts)
        return [self.normalize(t) for t in texts]
