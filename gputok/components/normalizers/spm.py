"""SentencePiece's normaliser (``normalizer.cc``), the product version.

``cpu_ref/spm.py: SpmNormalizer`` is the spec: at each position, a user-defined piece (longest)
passes unchanged, else the longest charsmap rule rewrites, else one character is copied; then
whitespace: spaces collapse (a rewrite's leading spaces are dropped after a space), leading and
trailing spaces go, " " becomes "▁", and a dummy "▁" goes in front (or at the end with
``treat_whitespace_as_suffix``).

What the fast path computes: the positions where anything but "copy one character" can happen
are found vectorised (``CharsMap.candidates`` plus the first characters of user-defined
pieces); the text between them is a *plain run*, whose whitespace handling is a regex (runs of
" " collapse to one, a leading " " goes after a space). Only the candidates run Python code.
A model without charsmap or user-defined pieces (Mistral's identity normaliser) is a
``str.replace`` and a prefix.

Why units and not one big string: a rewrite's value is handled as one piece, like
sentencepiece does -- only its *leading* spaces collapse into a previous space, its inner
spaces stay -- so a plain run and a rewrite cannot be merged before the whitespace pass.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ..._arrays import code_points
from ...stages import counters
from .charsmap import CharsMap

SPACE = "\u2581"  # "▁"
_SPACES = re.compile(" {2,}")


class SpmNormalizer:
    """One model's normaliser.

    >>> SpmNormalizer().normalize("  Hello   world ")
    '▁Hello▁world'
    >>> SpmNormalizer(remove_extra_whitespaces=False).normalize(" a  b")
    '▁▁a▁▁b'
    """

    steps = None  # (not Unicode steps: no device form)
    device_form = None

    def __init__(self, *, charsmap: "CharsMap | None" = None, add_dummy_prefix: bool = True,
                 remove_extra_whitespaces: bool = True, escape_whitespaces: bool = True,
                 treat_whitespace_as_suffix: bool = False, user_defined=()):
        self.charsmap = charsmap
        self.dummy = add_dummy_prefix
        self.collapse = remove_extra_whitespaces
        self.space = SPACE if escape_whitespaces else " "
        self.suffix = treat_whitespace_as_suffix
        self._ud = sorted(set(user_defined), key=lambda u: (-len(u), u))  # longest first
        self.ud_first = (np.array(sorted({ord(u[0]) for u in self._ud}), np.uint32)
                         if self._ud else None)

    @property
    def user_defined(self) -> tuple:
        """The user-defined pieces, longest first (the device normaliser's trie)."""
        return tuple(self._ud)

    @functools.cached_property
    def ud_regex(self):
        """The user-defined pieces, longest first, as one regex (None: none); compiled on
        first use (a load does not pay for it)."""
        ud = self._ud
        return re.compile("|".join(map(re.escape, ud))) if ud else None

    def _units(self, text: str) -> list:
        """[(string, is_rewrite)]: plain runs copied as they are, and each rule's output
        (a user-defined piece is a "rewrite" to itself: it is one unit, never rewritten)."""
        if self.charsmap is None and self.ud_regex is None:
            return [(text, False)]
        cand, value = self._candidates(code_points(text))
        return self._units_at(text, cand.tolist(), value.tolist())

    def _candidates(self, cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions where a rule or a user-defined piece may start, and the one-character
        rule's value there (-1: search)."""
        cm = self.charsmap
        if cm is not None:
            cand, value = cm.candidates(cps)
        else:
            cand = value = np.zeros(0, np.int64)
        if self.ud_first is not None:
            at = np.searchsorted(self.ud_first, cps)
            at[at == len(self.ud_first)] = 0
            ud = np.flatnonzero(self.ud_first[at] == cps)
            if len(ud):  # a user-defined piece may start here: search there too
                value = np.concatenate([value, np.full(len(ud), -1, np.int64)])
                cand = np.concatenate([cand, ud])
                order = np.argsort(cand, kind="stable")
                cand, value = cand[order], value[order]
        return cand, value

    def _units_at(self, text: str, cand: list, value: list) -> list:
        if not cand:
            return [(text, False)]
        cm = self.charsmap
        units: list = []
        pos = 0
        ud_regex = self.ud_regex
        for c, v in zip(cand, value):
            if c < pos:
                continue  # inside the previous rule's match (or a duplicate candidate)
            m = ud_regex.match(text, c) if ud_regex is not None else None
            if m is not None:
                n, rep = m.end() - c, m.group()
            elif v >= 0:  # a one-character key and nothing longer can start here
                rep = cm.value_text(v)
                if rep is None:
                    continue
                n = 1
            else:
                rule = cm.lookup(text, c) if cm is not None else None
                if rule is None:
                    continue
                n, rep = rule
            if c > pos:
                units.append((text[pos:c], False))
            units.append((rep, True))
            pos = c + n
        if pos < len(text):
            units.append((text[pos:], False))
        return units

    def normalize_batch(self, texts: list) -> list:
        counters["normalize.segments"] += len(texts)
        return [self.normalize(t) for t in texts]

    def normalize_many(self, texts: list) -> list:
        """``[normalize(t) for t in texts]``, the rule candidates found in one vectorised pass
        over all of them (training normalises hundreds of thousands of short sentences, where
        a pass per sentence costs more than the sentence). Texts are joined with U+0000, which
        no rule key holds (keys are NUL-terminated), so no match crosses from one to the next;
        a text holding U+0000 itself is normalised alone."""
        if self.charsmap is None and self.ud_regex is None:
            return [self._finish([(t, False)]) if t else "" for t in texts]
        plain = [t for t in texts if "\0" not in t]
        joined = "\0".join(plain)
        cand, value = self._candidates(code_points(joined))
        starts = np.zeros(len(plain) + 1, np.int64)
        np.cumsum([len(t) + 1 for t in plain], out=starts[1:])
        cut = np.searchsorted(cand, starts).tolist()
        cand_l, value_l = cand.tolist(), value.tolist()
        out, k = [], 0
        for t in texts:
            if "\0" in t:
                out.append(self.normalize(t))
                continue
            a, b, base = cut[k], cut[k + 1], int(starts[k])
            k += 1
            if not t:
                out.append("")
            elif a == b:
                out.append(self._finish([(t, False)]))
            else:
                out.append(self._finish(self._units_at(
                    t, [c - base for c in cand_l[a:b]], value_l[a:b])))
        return out

    def normalize(self, text: str) -> str:
        """The normalised sentence (see the module docstring)."""
        if not text:
            return ""
        return self._finish(self._units(text))

    def _finish(self, units: list) -> str:
        """The whitespace pass over a sentence's units."""
        if self.collapse:
            # sentencepiece first skips leading characters that normalise to exactly " "; if
            # that is all of them, the sentence is empty (no dummy prefix either)
            if all((u == " ") if rw else not u.strip(" ") for u, rw in units):
                return ""
            parts = []
            prev_space = True
            for u, rw in units:
                if not rw:
                    u = _SPACES.sub(" ", u)
                if prev_space:
                    u = u.lstrip(" ")
                if u:
                    parts.append(u)
                    prev_space = u.endswith(" ")
            body = "".join(parts)
        else:
            body = "".join(u for u, _ in units)
        space = self.space
        if space != " ":
            body = body.replace(" ", space)
        out = space + body if self.dummy and not self.suffix else body
        if self.collapse:
            out = out.rstrip(space)  # trailing space symbols go, literal "▁" ones too
        if self.dummy and self.suffix:
            out += space
        return out
