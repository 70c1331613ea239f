"""Pre-tokenize: segments -> pieces (the regex stage).

A model's pre-tokenizer is data, a ``PretokSpec``: a tuple of steps plus the Unicode *family*
whose tables its patterns use (``"tiktoken"``: Rust's regex crate; ``"hf"``: Oniguruma), and
``Pretokenizer`` runs it:

* ``Split(pattern)``: the pieces are the leftmost-first matches (tiktoken drops unmatched text;
  every named pattern matches every character anyway); ``Split(pattern, keep_gaps=True)`` is HF's
  ``Split(behavior="isolated")``, where unmatched stretches are pieces too;
* ``PrefixSpace()``: HF ``ByteLevel(add_prefix_space=true)``: a word without a leading space gets one.

Each step applies to every piece of the previous one. Patterns are compiled with the family's
pinned tables (``gputok.unicode.compile_pinned``), never the installed ``regex``'s. A spec that is
one ``Split`` of a pattern the vectorised scanner knows (``scan.py``) runs on the scanner.

Performance notes: ``regex.findall`` is the fastest regex route to the pieces in CPython
(finditer + slicing is ~1.6x slower; splitting documents on newlines and caching lines did not
pay on prose); below ``_SCAN_MIN`` characters of ASCII text (``_SCAN_MIN_WIDE`` of text with
non-ASCII characters) one findall beats the scanner's numpy passes.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

import numpy as np

from . import counters
from .. import unicode as _unicode

_FEW_PROBE = 256  # characters (split_few)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CUT_LOOKBACK = 64  # spaces tried backwards for a safe cut before a non-ASCII character
# THE SAFE CUT: a position where every pattern family with a scanner (GPT-2, cl100k, Llama 3,
# Qwen2, o200k) starts a new piece, and where the text before it tokenizes exactly as it does
# with the rest present: an ASCII letter, then a space, then an ASCII letter (the cut is at the
# space). The letter run (or the contraction) before the space ends at the space whatever
# follows; the next piece is " x..."; no rule of those patterns looks past a letter run, so a
# text cut there splits into the concatenation of its parts' pieces. Normalisers are per
# character there (a space composes with nothing). ``hostplan.find_safe_cut`` finds the same
# cuts in UTF-8 bytes, and where an ASCII letter meets an ASCII digit (a boundary of those
# patterns too: a base64 blob has no space).
_SAFE_CUT = re.compile(r"[A-Za-z] [A-Za-z]")


def _cut_before(text: str, lo: int, hi: int) -> int:
    """The last safe cut ``p`` with ``lo < p`` and ``text[p + 1]`` before ``hi``, or ``lo``."""
    p = hi - 1
    for _ in range(_CUT_LOOKBACK):
        if p <= lo + 1:
            return lo
        p = text.rfind(" ", lo + 1, p)
        if p < 0:
            return lo
        if _ascii_letter(text[p - 1]) and _ascii_letter(text[p + 1]):
            return p
    return lo


def _ascii_letter(c: str) -> bool:
    return c.isascii() and c.isalpha()


_SCAN_MIN = 4096  # characters; below this one regex call is as fast as the scanner
# ... on ASCII text. With non-ASCII characters the regex is slower (the pinned classes: ~150 ns
# a character against ~10 for the ASCII form) and the scanner (~30 us a call, then 10-40 ns a
# character) wins from a few hundred characters: measured on 300-3500 character slices of the
# test corpora, the scanner was faster on 94-100% of the slices of 600+ characters, except
# where under one character in 64 was non-ASCII (mostly English with a few accents or quotes:
# the regex's ASCII form runs between them).
_SCAN_MIN_WIDE = 512


@dataclass(frozen=True)
class Split:
    pattern: str
    keep_gaps: bool = False


@dataclass(frozen=True)
class PrefixSpace:
    pass


@dataclass(frozen=True)
class PretokSpec:
    """What cuts text into pieces; see the module docstring."""

    steps: tuple
    family: str = "tiktoken"

    @classmethod
    def regex(cls, pattern: str, family: str = "tiktoken") -> "PretokSpec":
        """tiktoken style: the matches of one pattern."""
        return cls((Split(pattern),), family)

    @property
    def pattern(self) -> "str | None":
        """The pattern when the spec is one regex step (what scanners and kernels run)."""
        if len(self.steps) == 1 and isinstance(self.steps[0], Split):
            return self.steps[0].pattern
        return None


class Pretokenizer:
    """Runs a ``PretokSpec``: ``split(text)`` and ``split_batch(texts)``. The regex
    pre-tokenizer component (``components.PreTokenizer``): its device form is the pretok
    kernels, for a pattern whose ``scanner`` family they implement."""

    name = "regex"
    uses_first = False

    def fuse(self, normalizer) -> None:
        return None

    def __init__(self, spec: PretokSpec):
        self.spec = spec
        self.pattern = spec.pattern
        self._keep_gaps = bool(self.pattern is not None and spec.steps[0].keep_gaps)
        self._scanner = "unset"

    @functools.cached_property
    def _compiled(self) -> list:
        """Each step's compiled pattern (None for PrefixSpace), compiled on first use: a device
        that cuts pieces itself never needs them (o200k's pattern costs ~25 ms to compile)."""
        return [(_unicode.compile_pinned(s.pattern, self.spec.family), s.keep_gaps)
                if isinstance(s, Split) else None for s in self.spec.steps]

    @functools.cached_property
    def _ascii(self):
        """The one pattern for ASCII text (``compile_ascii``: the pinned pattern with its classes
        cut to ASCII, on Python's ``re``): a 200-character English text in ~8 us instead of
        ~35 with the pinned big classes, and no pinned compile at all for ASCII-only use."""
        return _unicode.compile_ascii(self.pattern, self.spec.family)

    def _regex_for(self, text: str):
        """The compiled one-step pattern for ``text`` (ASCII: the ASCII form)."""
        return self._ascii if text.isascii() else self._compiled[0][0]

    @functools.cached_property
    def _safe_cuts(self) -> bool:
        """Whether THE SAFE CUT holds for this pattern: for every pattern with a scanner."""
        from .scan import is_supported

        return not self._keep_gaps and is_supported(self.pattern)

    def _findall_short(self, text: str) -> list:
        """The regex pieces of a short text: the ASCII form on ASCII text; on a text with some
        non-ASCII characters (English with a few accents or quotes), where cuts are safe, the
        ASCII form on the ASCII stretches between safe cuts and the pinned pattern only
        around the others (the pinned classes cost ~180 ns a character, the ASCII form ~12)."""
        if text.isascii():
            return self._ascii.findall(text)
        pinned = self._compiled[0][0].findall
        if not self._safe_cuts:
            return pinned(text)
        fast = self._ascii.findall
        out: list = []
        pos, n = 0, len(text)
        while pos < n:
            m = _NON_ASCII.search(text, pos)
            if m is None:
                out += fast(text[pos:])
                break
            a = _cut_before(text, pos, m.start())
            if a > pos:
                out += fast(text[pos:a])
            b = _SAFE_CUT.search(text, m.end())
            b = b.start() + 1 if b is not None else n
            out += pinned(text[a:b])
            pos = b
        return out

    def program(self):
        """This spec's native program (``pattern_program.program_for``), or None."""
        from .pattern_program import program_for

        steps = tuple(("split", s.pattern, s.keep_gaps) if isinstance(s, Split) else
                      ("prefix",) if isinstance(s, PrefixSpace) else ("?",)
                      for s in self.spec.steps)
        return program_for(steps, self.spec.family)

    @property
    def scanner(self):
        """The vectorised scanner for this spec's pattern, or None (built lazily: ~0.1 s)."""
        if self._scanner == "unset":
            from .scan import scanner_for_pattern

            self._scanner = (scanner_for_pattern(self.pattern, self.spec.family)
                             if self.pattern is not None else None)
        return self._scanner

    def split(self, text: str) -> list:
        if self.pattern is None:
            return self._steps(text)
        if self._use_scanner(text):
            pieces = self.scanner.split(text, min_chars=0)
        else:
            pieces = self._findall_short(text)
        if self._keep_gaps and sum(map(len, pieces)) != len(text):
            return self._steps(text)  # isolated split keeps unmatched gaps; they are rare
        return pieces

    def _use_scanner(self, text: str) -> bool:
        """Whether the scanner cuts ``text`` faster than one regex call (see ``_SCAN_MIN``)."""
        n = len(text)
        if n < _SCAN_MIN_WIDE or (n < _SCAN_MIN and text.isascii()) or self.scanner is None:
            return False
        # bytes past one per character: at least one per non-ASCII character
        return n >= _SCAN_MIN or (len(text.encode("utf-8", "surrogatepass")) - n) * 64 >= n

    def split_few(self, text: str, limit: int) -> "list | None":
        """``split(text)`` when it has at most ``limit`` pieces, else None: a run of one
        character class (``"a" * n``, emoji, whitespace) with a few pieces around it. An ASCII
        text: the ASCII form's first ``limit + 1`` matches (``_split_few_ascii``). Otherwise
        prose is told apart by its first ``_FEW_PROBE`` characters' pieces (the scanner, ~30
        us; the regex where the pattern has no scanner) before the whole text is cut (the
        scanner: the pinned regex takes ~80 ns per letter of a letter run, and its first
        compile in a process ~12 ms). None also where there is no single pattern or it keeps
        gaps."""
        if self.pattern is None or self._keep_gaps:
            return None
        if text.isascii():
            return self._split_few_ascii(text, limit)
        if not self.few_head(text, limit):
            return None
        pieces = self.split(text)
        return pieces if len(pieces) <= limit else None

    def few_head(self, text: str, limit: int) -> bool:
        """``split_few``'s probe of a text that is not all ASCII: whether its first
        ``_FEW_PROBE`` characters make at most ``limit`` pieces (prose does not). False where
        ``split_few`` takes no text (no single pattern, or one that keeps gaps)."""
        if self.pattern is None or self._keep_gaps:
            return False
        sc = self.scanner
        if sc is not None:  # (the pinned regex's first compile costs ~12 ms; the scanner cuts
            head = sc.split(text[:_FEW_PROBE], min_chars=0)  # the whole text next anyway)
        else:
            head = itertools.islice(self._regex_for(text).finditer(text, 0, _FEW_PROBE),
                                    limit + 1)
        return sum(1 for _ in head) <= limit

    def _split_few_ascii(self, text: str, limit: int) -> "list | None":
        """``split_few`` of an ASCII text: the ASCII form's matches, at most ``limit + 1`` of
        them (so prose stops after a few pieces), the pieces when they are at most ``limit``
        and cover the text (else None: the general path decides). A run is one match at C
        speed, where the scanner's numpy passes made ~9 bytes of fresh temporaries per byte
        (`"a" * 10**6`, first call: ~2,300 page faults, 9 -> 1 ms of cutting)."""
        spans = [m.span() for m in itertools.islice(self._ascii.finditer(text), limit + 1)]
        if len(spans) > limit or sum(b - a for a, b in spans) != len(text) or \
                any(a == b for a, b in spans):  # (a pattern that matches empty text)
            return None
        return [text[a:b] for a, b in spans]

    def split_batch(self, texts: list, first=None) -> list:
        if self.pattern is None:
            counters["pretok.steps"] += len(texts)
            return [self._steps(t) for t in texts]
        sc = self.scanner
        if sc is None:
            counters["pretok.regex"] += len(texts)
            out = [self._regex_for(t).findall(t) for t in texts]
        else:
            counters["pretok.scanner"] += len(texts)
            out = sc.split_batch(texts)
        if self._keep_gaps:
            for i, (t, pieces) in enumerate(zip(texts, out)):
                if sum(map(len, pieces)) != len(t):
                    out[i] = self._steps(t)
        return out

    def _steps(self, text: str) -> list:
        words = [text] if text else []  # empty text has no words (no prefix space either)
        for step, comp in zip(self.spec.steps, self._compiled):
            if comp is None:  # PrefixSpace
                words = [w if w.startswith(" ") else " " + w for w in words]
                continue
            pat, keep_gaps = comp
            if not keep_gaps:
                words = [p for w in words for p in pat.findall(w)]
                continue
            out = []
            for w in words:
                pos = 0
                for m in pat.finditer(w):
                    if m.start() > pos:
                        out.append(w[pos:m.start()])
                    if m.end() > m.start():
                        out.append(m.group())
                    pos = m.end()
                if pos < len(w):
                    out.append(w[pos:])
            words = out
        return words


def piece_spans(buf: bytes, doc_offsets: np.ndarray, pretok: Pretokenizer
                ) -> tuple[np.ndarray, np.ndarray]:
    """The stage in array form, the contract device pre-tokenizers are checked against.

    ``buf``: the packed UTF-8 of all documents; ``doc_offsets``: int64, len n_docs + 1.
    Returns ``(piece_offsets, doc_piece_offsets)``: the byte offset in ``buf`` where every piece
    starts (pieces tile each document, so they tile the buffer; one final entry = the end), and
    for each document the index of its first piece (len n_docs + 1).
    """
    starts: list = []
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
