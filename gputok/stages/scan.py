"""Vectorized pre-tokenizer: the pieces of the named patterns without running a regex.

``scanner_for_pattern(pat)`` returns a :class:`Scanner` for the exact pattern strings listed in
``SUPPORTED_PATTERNS`` (anything else: ``None``, and callers keep ``compile_pattern(pat).findall``).
``Scanner.split(text)`` returns exactly ``compile_pattern(pat).findall(text)``; ``split_batch``
handles a whole batch in one vectorized pass; ``boundaries(cps, doc_offsets)`` is the array form
that a GPU kernel reproduces.

Method
------
1. Classify every code point with one table lookup, ``k = CLASS[cp]``: a handful of classes per
   pattern family (letter, digit, apostrophe, space, CR/LF, ...), derived from the flag table of
   ``gputok.unicode.class_flags`` (the oracle's pinned Unicode data; ``scan_rules.py``). Documents are laid end to end with
   separators of class X between them (two at each end), so "previous / next character" never
   crosses a document and a document's end behaves as the end of the text.
2. Local rule: a piece starts at i (i not a document start) iff
   ``PAIR[k[i-1], k[i]] & (B_PAIR | NEXT(k[i+1]) | PREV2(k[i-2])) != 0``: a 256-entry pair table
   built from the rule functions below (``_cl_rules``, ``_gpt2_rules``, ``_o200k_rules``, whose
   docstrings derive them from the alternatives) and two class-range tests.
3. Sparse corrections where the window cannot decide; the pair table flags them (B_SPECIAL)
   and one ``flatnonzero`` finds them: contractions, digit runs longer than 3 (cut every 3 from
   the run start), whitespace right after CR/LF (decided by the class before the CR/LF run and by
   what ends the whitespace run), and for o200k the letter-case rules whose evidence lies beyond
   the window. These need the end of a run: a bounded vectorized walk (``_scan``) with a
   binary-search fallback, i.e. a segmented scan.
4. o200k only: two rare configurations have unbounded sequential dependencies: a combining mark
   right after a non-letter (the pattern counts marks as letters *and* as punctuation, so which
   alternative takes it depends on where the previous piece started), and chained contractions
   (``x's's``: whether the second apostrophe is a suffix depends on the first). Their spans,
   between two positions that start a piece in every parse (the first char of a whitespace run,
   CR/LF after a letter or digit, document ends), are re-scanned with the reference regex from
   the first of them (``_rescan``), so the result stays exact. Everything else in o200k (case
   splits, contraction suffixes, ``[\\r\\n/]*``) is vectorized. The device kernels do not port
   this method: for every pattern they cut the text at positions that start a piece in every
   parse and run one sequential matcher of the pattern per span (``scan_cl.py`` and
   ``kernels/encode_pretok.cu``, ``scan_o200k.py`` and ``kernels/encode_o200k.cu``).
5. Pieces: insert a separator character absent from the text before every piece start, decode
   once and ``str.split`` (C speed; creating the piece strings is the floor of any method).

Performance notes
-----------------
Measured on a 2-core x86 VM shared with other jobs (CPython 3.11, numpy 2.4, regex 2026.5; CPU
time, best of 5; single runs vary by +-25%), on the test corpora of tests/testdata.py (~2 MB per
kind, documents of 4-14 kB) and 2 MB of CPython's stdlib sources; MB = UTF-8 megabytes:

    cl100k          regex findall    split (per doc)    split_batch
    English prose   4.2-4.6 MB/s     16-18 MB/s (3.6-4x)   22-23 MB/s (4.9-5.3x)
    Python source   2.9-3.5 MB/s     16-17 MB/s (4.9-5.4x) 21-22 MB/s (6.2-7.1x)
    multilingual    4.7 MB/s         12 MB/s   (2.6x)      28 MB/s   (5.9x)
    o200k: prose 6-6.5x, Python source 7.3-7.5x, emoji 4.5x (batch); the others are like cl100k.

Per-document ``split`` pays ~70 us of numpy call overhead per call (hence ``min_chars``); the
batch amortizes it. In ms per million characters, a pass is roughly: class lookup 1.5, rules
5-8, separator insertion 5-7, ``str.split`` 13-16 (creating the piece strings; the floor).

* A first version computed ~45 boolean array passes per position (~12 ms/Mchar); the pair table
  (``bytes.translate`` on 6-bit pair codes) plus ~10 elementwise uint8 ops is ~4-5 ms. Folding
  NEXT/PREV2 into an 8-bit code for a single translate was slower (more shifts).
* Class lookup: ``bytes.translate`` for latin-1 documents (~1 ms); ``np.take(table, cps)`` on
  UTF-16/UTF-32 code units otherwise (~2 ms; fancy indexing ``table[cps]`` is ~1.7x slower).
* ``flatnonzero`` on a uint8 array is several times slower than on a bool array: compare first.
* Output dominates: slicing the text in a Python loop is 60-100 ms/Mchar (str object creation
  plus a maxchar scan each); separator insertion + ``str.split`` is ~6 + ~15 ms. Insertion via
  ``mask.nonzero()`` + integer assignment beats boolean-mask assignment (2x), ``np.insert``,
  ``np.repeat`` (of chars or of ranks), cumsum-scatter and an interleave + ``bytes.translate``
  delete.
* Decoding a UCS-4 string and splitting it is ~1.5x slower than UCS-1/UCS-2, so ``split_batch``
  groups documents by the code-unit width they need (latin-1 / BMP / other) and runs one
  vectorized pass per group (at most three).
* Run ends: probing small 2-D windows (4, then 32 positions) beats one-step-at-a-time walks
  (Python overhead per step) and whole-array run-end tables (a dense ``flatnonzero``). Walking
  every indentation run after a newline (source code) cost ~10 ms/Mchar; deciding "does this
  whitespace run end at CR/LF" from the (rare) whitespace-before-CR/LF positions instead is ~1 ms.
* Run-level processing (one entry per class run, with gathers) was slower than the per-position
  window: gathers cost ~1-2 ns per element, elementwise uint8 ops ~0.1-0.2 ns.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import regex

from .. import unicode as _unicode
from .scan_cuts import PAD, Cuts
from .scan_rules import FAMILIES, SUPPORTED_PATTERNS, X

__all__ = ["Scanner", "scanner_for_pattern", "is_supported", "SUPPORTED_PATTERNS"]

_lock = threading.RLock()

# pieces this long on average (characters) are cut by slicing the texts, not by rebuilding the
# buffer with separators and splitting it (that costs per character, slicing per piece)
SLICE_MIN_AVG = 16
_WIDTHS = {1: (np.uint8, "latin-1"), 2: (np.uint16, "utf-16-le"), 4: (np.uint32, "utf-32-le")}
_SEP_CANDIDATES = ([chr(c) for c in range(0, 9)] + [chr(c) for c in range(0x0E, 0x20)]
                   + ["\x7f", "\ufdd0", "\ufdd1", "\ufffe", "\uffff", "\U0010fffe", "\U0010ffff"])


class Scanner(Cuts):
    """Vectorized ``findall`` of one supported pattern (exactly the oracle's pieces).

    ``min_chars``: ``split`` (and ``split_batch`` for a group of documents) hands inputs shorter
    than this to the reference regex instead, whose result is the same by definition: below a
    couple of thousand characters the ~100 numpy calls of a pass cost more than the regex.
    Set it to 0 to vectorize everything (the tests do).
    """

    min_chars = 2500

    def __init__(self, name: str, pattern: str, family: str, digit_group: int = 0,
                 end_whole: bool = False, fold: bool = True, unicode_family: str = "tiktoken"):
        self.name = name
        self.pattern = pattern
        self.family = FAMILIES[family]
        self.unicode_family = unicode_family  # whose Unicode tables (gputok.unicode)
        self.digit_group = digit_group  # 3: \p{N}{1,3}; 1: \p{N}; 0: \p{N}+ (GPT-2)
        self.end_whole = end_whole  # trailing whitespace kept whole (\s++$)
        self.fold = fold  # contractions case-insensitive
        self._ready = False
        self._regex = None

    def __repr__(self) -> str:
        return f"Scanner({self.name!r})"

    def _setup(self) -> None:
        if self._ready:
            return
        with _lock:
            tabs = _unicode.class_flags(self.unicode_family)
            self._cls = self.family.tables(self.unicode_family)
            self._cls256 = self.family.cls256(self.unicode_family)
            if self.fold:
                f = {ch: tabs["fold_" + ch] for ch in _unicode.FOLD_LETTERS}
            else:
                f = {ch: np.array([ord(ch)], np.uint32) for ch in _unicode.FOLD_LETTERS}
            # contraction letters by code point: 1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e; the last
            # entry (0) stands for every larger code point
            lt = np.zeros(max(int(v.max()) for v in f.values()) + 2, np.uint8)
            for ch, bit in (("s", 1), ("d", 1), ("m", 1), ("t", 1), ("l", 2), ("v", 4),
                            ("r", 4), ("e", 8)):
                lt[f[ch]] |= bit
            self._letters = lt
            self._kind = "o200k" if self.family.name == "o200k" else (
                "gpt2" if self.family.name == "gpt2" else "cl")
            self._ready = True

    def _compiled(self):
        """The regex engine on this pattern, with the family's pinned Unicode tables."""
        if self._regex is None:
            self._regex = _unicode.compile_pinned(self.pattern, self.unicode_family)
        return self._regex

    # ---- input / output ------------------------------------------------------------------------
    def _run(self, encs: list, width: int, sep: "str | None", texts: list):
        """One vectorized pass over documents needing one code-unit width.

        ``encs``: the documents encoded (latin-1, UTF-16-LE without surrogates, or UTF-32-LE);
        ``sep``: a character no document contains (``None``: slice the texts instead).
        Returns (flat list of pieces, number of pieces per document).
        """
        dtype, codec = _WIDTHS[width]
        sepcode = ord(sep) if sep is not None else 0
        sepb = sepcode.to_bytes(width, "little")
        data = b"".join([sepb * PAD, sepb.join(encs), sepb * PAD])
        c = np.frombuffer(data, dtype)
        lens = np.fromiter((len(e) // width for e in encs), np.int64, len(encs))
        starts = PAD + np.cumsum(lens + 1) - (lens + 1)
        if width == 1:
            k = np.frombuffer(data.translate(self._cls256), np.uint8).copy()
        else:
            k = np.take(self._cls, c)
        k[:PAD] = X
        k[-PAD:] = X
        k[starts[1:] - 1] = X
        cut = self._cuts(k, c, starts, lens, texts.__getitem__)
        cutpos = cut.nonzero()[0]  # body coordinates (ext - PAD)
        if len(encs) == 1:
            counts = [len(cutpos) + 1]
        else:
            bounds = np.append(starts - PAD, len(cut))
            counts = (np.diff(np.searchsorted(cutpos, bounds)) + 1).tolist()
        # long pieces (a run of one character, blobs): slicing the texts beats rebuilding the
        # whole buffer with separators (10 MB of "a": 115 -> 1 ms)
        if sep is None or len(cutpos) * SLICE_MIN_AVG < len(cut):
            flat: list = []
            pos = 0
            bl = cutpos.tolist()
            for t, s0 in zip(texts, (starts - PAD).tolist()):
                bs = [0]
                while pos < len(bl) and bl[pos] < s0 + len(t):
                    bs.append(bl[pos] - s0)
                    pos += 1
                bs.append(len(t))
                flat.extend(t[a:b] for a, b in zip(bs[:-1], bs[1:]))
            return flat, counts
        body = c[PAD:len(c) - PAD]
        npc = len(cutpos)
        ins = cutpos + np.arange(npc)
        mask = np.ones(len(body) + npc, bool)
        mask[ins] = False
        out = np.empty(len(body) + npc, dtype)
        out[mask.nonzero()[0]] = body
        out[ins] = sepcode
        return out.tobytes().decode(codec).split(sep), counts

    @staticmethod
    def _encode_one(t: str):
        if t.isascii():
            return 1, t.encode("ascii")
        try:
            return 1, t.encode("latin-1")
        except UnicodeEncodeError:
            pass
        b = t.encode("utf-16-le")
        if len(b) == 2 * len(t):
            return 2, b
        return 4, t.encode("utf-32-le")

    @staticmethod
    def _pick_sep(texts: list, width: int) -> "str | None":
        if not any("\x00" in t for t in texts):
            return "\x00"
        for ch in _SEP_CANDIDATES:
            if ord(ch) < (1 << (8 * width)) and not any(ch in t for t in texts):
                return ch
        return None

    def split(self, text: str, min_chars: "int | None" = None) -> list:
        """Exactly ``compile_pattern(self.pattern).findall(text)`` (by the regex itself under
        ``min_chars`` characters, default ``self.min_chars``)."""
        if not text:
            return []
        if len(text) < (self.min_chars if min_chars is None else min_chars):
            return self._compiled().findall(text)
        self._setup()
        width, enc = self._encode_one(text)
        return self._run([enc], width, self._pick_sep([text], width), [text])[0]

    def split_batch(self, texts: list) -> list:
        """``[self.split(t) for t in texts]``, vectorized over the batch.

        Documents are grouped by the code-unit width their characters need (latin-1 / BMP /
        other), one pass per group present, so that mostly-ASCII documents are not decoded
        and split as 4-byte-per-char strings.
        """
        self._setup()
        texts = list(texts)
        groups: dict = {}
        for i, t in enumerate(texts):
            if t:
                width, enc = self._encode_one(t)
                g = groups.setdefault(width, ([], [], []))
                g[0].append(i)
                g[1].append(enc)
                g[2].append(t)
        res: list = [[] for _ in texts]
        for width, (idx, encs, docs) in groups.items():
            if sum(map(len, docs)) < self.min_chars:
                findall = self._compiled().findall
                for i, t in zip(idx, docs):
                    res[i] = findall(t)
                continue
            flat, counts = self._run(encs, width, self._pick_sep(docs, width), docs)
            pos = 0
            for i, cnt in zip(idx, counts):
                res[i] = flat[pos:pos + cnt]
                pos += cnt
        return res

    def boundaries(self, cps: np.ndarray, doc_offsets: np.ndarray) -> np.ndarray:
        """Piece starts of all documents in code-point coordinates, plus ``len(cps)``.

        ``cps``: uint32 code points of the documents end to end (valid text: no surrogates);
        ``doc_offsets``: int64, ``n_docs + 1`` entries. Returns a sorted int64 array that
        includes every non-empty document's start.
        """
        self._setup()
        cps = np.ascontiguousarray(cps, np.uint32)
        doc_offsets = np.asarray(doc_offsets, np.int64)
        n = len(cps)
        lens = np.diff(doc_offsets)
        nd = len(lens)
        starts = PAD + doc_offsets[:-1] + np.arange(nd)  # document d at starts[d] (ext)
        m = n + max(nd - 1, 0) + 2 * PAD
        c = np.zeros(m, np.uint32)
        k = np.zeros(m, np.uint8)  # X everywhere but on the documents
        if n:
            pos = np.arange(n) + np.repeat(starts - doc_offsets[:-1], lens)
            c[pos] = cps
            k[pos] = np.take(self._cls, cps)

        def doc_text(d):
            return cps[doc_offsets[d]:doc_offsets[d + 1]].tobytes().decode("utf-32-le")

        cut = self._cuts(k, c, starts, lens, doc_text)
        cutpos = cut.nonzero()[0] + PAD
        b = np.zeros(n + 1, bool)
        if len(cutpos):
            d = np.searchsorted(starts, cutpos, "right") - 1
            b[cutpos - starts[d] + doc_offsets[:-1][d]] = True
        b[doc_offsets[:-1][lens > 0]] = True
        b[n] = True
        return b.nonzero()[0].astype(np.int64)


_scanners: dict = {}


# Spellings that match exactly what the supported patterns' own spellings match, in both
# engines: gputok's Oniguruma export writes them (``export._onig_pattern``), so a tokenizer.json
# trained and saved by gputok must find its scanner again. ``(?>X{1,3})`` is the possessive
# ``X{1,3}+``; ``\s++`` eats every newline, so after it ``\z`` (end of text) and ``$`` (end of
# text for tiktoken, end of line for Oniguruma) can only succeed at the end of the text.
# (Compiled on first use: ~2 ms that every first batch of a supported pattern waited for.)
_SAME_MATCHES = ((r"(?<!\\)\(\?>\\p\{N\}\{1,3\}\)", r"\\p{N}{1,3}+"),
                 (r"(?<!\\)\\s\+\+\\z", r"\\s++$"))


@functools.lru_cache(maxsize=None)
def _same_matches() -> tuple:
    return tuple((regex.compile(rx), usual) for rx, usual in _SAME_MATCHES)


def _usual_spelling(pattern: str) -> str:
    for rx, usual in _same_matches():
        pattern = rx.sub(usual, pattern)
    return pattern


def is_supported(pattern: str) -> bool:
    """Whether ``pattern`` is one of ``SUPPORTED_PATTERNS`` (up to the spellings of
    ``_SAME_MATCHES``), without building its scanner."""
    return pattern in SUPPORTED_PATTERNS or _usual_spelling(pattern) in SUPPORTED_PATTERNS


def scanner_for_pattern(pattern: str, unicode_family: str = "tiktoken") -> "Scanner | None":
    """The scanner for one of ``SUPPORTED_PATTERNS`` (exact string match, up to the spellings of
    ``_SAME_MATCHES``), else ``None``."""
    key = (pattern, unicode_family)
    sc = _scanners.get(key)
    if sc is None and pattern not in SUPPORTED_PATTERNS:
        pattern = _usual_spelling(pattern)
    if sc is None and pattern in SUPPORTED_PATTERNS:
        with _lock:
            sc = _scanners.get(key)
            if sc is None:
                name, fam, g, endw, fold = SUPPORTED_PATTERNS[pattern]
                sc = _scanners[key] = Scanner(name, pattern, fam, g, endw, fold, unicode_family)
    return sc
