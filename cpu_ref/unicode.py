"""The oracles' Unicode data, as the spec reads it: property sets, case folds, HF's normalisers.

Why data at all: ``\\p{L}`` means whatever the engine's Unicode tables say, and the tables move
with releases. tiktoken 0.14 (the Rust ``regex`` crate behind fancy-regex) and tokenizers 0.23
(Oniguruma) read patterns with Unicode 16.0; a recent Python ``regex`` is 17.0 (thousands more
letters); HF's NFC data is Unicode 9.0, Python 3.11's ``unicodedata`` 14.0. The rule is the
oracle's table, so the spec reads the oracle's sets rather than the installed ``regex``'s.

Where the data comes from: the pinned files in ``gputok/unicode/data/`` (``tiktoken.ucd``,
``hf.ucd``, ``hf_norm.ucd``), which were measured through tiktoken and HF ``tokenizers``
themselves at every code point. They are facts about the oracles, not gputok's logic: cpu_ref
reads them by path with the small reader below and never imports gputok. One copy of the
measurements (a second copy could drift from the first); the rules that use them (the pattern
rewrite of ``patterns.compile_pattern``, the normalisation algorithm) are written here on their
own. A wrong measurement would not hide behind the shared file: cpu_ref is tested against the
oracle libraries directly.

File format (``GPUTOK-UCD 1``): the magic line, a little-endian uint32 header length, a JSON
header ``{"meta": {...}, "tables": {name: [offset, count, coding]}}``, then one zlib stream of
little-endian uint32 words. A ``"raw"`` table is ``count`` words from ``offset``; a ``"ranges"``
table stores inclusive ranges ``(a0, b0), (a1, b1), ...`` as the differences between the
successive boundaries ``a0, b0 + 1, a1, b1 + 1, ...`` (so its running sum gives them back).
"""

from __future__ import annotations

import array
import functools
import json
import struct
import sys
import zlib
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "gputok" / "unicode" / "data"
MAGIC = b"GPUTOK-UCD 1\n"
MAX_CP = 0x10FFFF
FAMILIES = ("tiktoken", "hf")  # the Rust regex crate (tiktoken), Oniguruma (HF tokenizers)


# ------------------------------------------------------------------------------- the data files

@functools.lru_cache(maxsize=None)
def _file(name: str) -> tuple[dict, dict, array.array]:
    """(meta, table index, all words) of ``data/<name>.ucd``."""
    path = DATA_DIR / f"{name}.ucd"
    blob = path.read_bytes()
    if not blob.startswith(MAGIC):
        raise ValueError(f"{path}: not a pinned Unicode data file (magic {blob[:13]!r})")
    (head_len,) = struct.unpack_from("<I", blob, len(MAGIC))
    body = len(MAGIC) + 4
    head = json.loads(blob[body:body + head_len])
    words = array.array("I", zlib.decompress(blob[body + head_len:]))
    if sys.byteorder == "big":
        words.byteswap()
    return head["meta"], head["tables"], words


def meta(name: str) -> dict:
    return _file(name)[0]


def raw(name: str, table: str) -> list[int]:
    _, index, words = _file(name)
    offset, count, coding = index[table]
    assert coding == "raw", (name, table, coding)
    return words[offset:offset + count].tolist()


@functools.lru_cache(maxsize=None)
def ranges(name: str, table: str) -> tuple[tuple[int, int], ...]:
    """Sorted, disjoint inclusive ``(first, last)`` code point ranges of a ``"ranges"`` table."""
    _, index, words = _file(name)
    offset, count, coding = index[table]
    assert coding == "ranges", (name, table, coding)
    bounds, total = [], 0
    for w in words[offset:offset + count]:
        total += w
        bounds.append(total)
    return tuple((a, b - 1) for a, b in zip(bounds[0::2], bounds[1::2]))


# ------------------------------------------------------------------------ sets of code points
# A set is a sorted tuple of disjoint inclusive ranges; these few operations are all the
# pattern rewrite needs.

def union(*sets) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(r for s in sets for r in s):
        if out and a <= out[-1][1] + 1:  # overlapping or adjacent: one range
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def complement(s) -> tuple[tuple[int, int], ...]:
    out, nxt = [], 0
    for a, b in s:
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


def contains(s, cp: int) -> bool:
    return any(a <= cp <= b for a, b in s)


def negate(family: str, s) -> tuple[tuple[int, int], ...]:
    """What ``[^...]``, ``\\P{..}`` and ``\\S`` match: the complement, as the engine computes it.

    One quirk, measured on tiktoken: the Rust crate computes a complement's gaps with ``char``
    arithmetic, where U+D7FF + 1 is U+E000. A set holding U+D7FF and U+E000 in two ranges (no
    surrogates between them) therefore leaves no gap there, and its complement holds both.

    >>> contains(negate("tiktoken", ((0xD7FF, 0xD7FF), (0xE000, 0xE000))), 0xD7FF)
    True
    """
    out = complement(s)
    if family == "tiktoken" and contains(s, 0xD7FF) and contains(s, 0xE000) \
            and not contains(s, 0xD800):
        out = union(out, ((0xD7FF, 0xD7FF), (0xE000, 0xE000)))
    return out


# ----------------------------------------------------------------------------- regex properties

def _loose(name: str) -> str:
    """Property names match loosely in both engines (UAX #44 LM3): case, spaces, '_' and '-'
    are ignored, so ``Uppercase_Letter`` and ``uppercaseletter`` both name ``Lu``."""
    return "".join(ch for ch in name.lower() if ch not in " _-\t")


def property_set(family: str, name: str) -> tuple[tuple[int, int], ...]:
    """The code points ``\\p{name}`` matches in ``family``'s engine (outside brackets, no
    ``(?i)``): a general category (``L``, ``Lu``, ``N``...), a script (``Han``...) or
    ``White_Space`` / ``Alphabetic``, by any alias the engine accepts.

    >>> (0x41, 0x5A) in property_set("tiktoken", "Uppercase_Letter")
    True
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown Unicode family {family!r}; known: {', '.join(FAMILIES)}")
    table = meta(family)["aliases"].get(_loose(name))
    if table is None:
        raise ValueError(f"\\p{{{name}}}: not a property the spec knows for {family!r}")
    return ranges(family, table)


def escape_set(family: str, letter: str, in_class: bool) -> tuple[tuple[int, int], ...]:
    """``\\s``, ``\\d`` or ``\\w`` (lower case; the upper-case forms negate). Measured: inside
    brackets Oniguruma's ``\\w`` is not its ``\\w`` outside (U+00B2 differs), so that context
    has a table of its own."""
    table = "\\" + letter
    if in_class and "[]" + table in _file(family)[1]:
        table = "[]" + table
    return ranges(family, table)


@functools.lru_cache(maxsize=None)
def _fold_next(family: str) -> dict[int, int]:
    """code point -> the next member of its case-fold orbit (only orbits of two or more)."""
    return dict(zip(raw(family, "fold_keys"), raw(family, "fold_next")))


def fold_orbit(family: str, cp: int) -> list[int]:
    """Every code point ``(?i:<cp>)`` matches, single characters only (the members of an orbit
    form a cycle in the data).

    >>> [hex(c) for c in fold_orbit("tiktoken", ord("k"))]
    ['0x4b', '0x6b', '0x212a']
    """
    nxt = _fold_next(family)
    out, c = [cp], nxt.get(cp, cp)
    while c != cp:
        out.append(c)
        c = nxt[c]
    return sorted(out)


def multi_fold_chars(family: str) -> tuple[tuple[int, int], ...]:
    """The characters that ``(?i)`` lets match a string of several (Oniguruma: U+00DF)."""
    return ranges(family, "(?i)multi") if "(?i)multi" in _file(family)[1] else ()


def multi_folds(family: str) -> list[str]:
    """Strings that ``(?i)`` lets one character match in ``family`` (Oniguruma's full case
    folding: "ss" matches "ß"); none for the Rust crate."""
    return list(meta(family).get("multifold", []))


# ------------------------------------------------------------------------ HF's normalisers
# HF ``tokenizers`` normalises with tables of Unicode 9.0, probed from HF one code point at a
# time (``hf_norm.ucd``); the algorithm is the standard one (UAX #15).

# Hangul syllables decompose and compose by arithmetic (UAX #15, section 3.12)
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def _mapping(prefix: str) -> dict[str, str]:
    keys = raw("hf_norm", prefix + "_keys")
    offsets = raw("hf_norm", prefix + "_offsets")
    chars = "".join(map(chr, raw("hf_norm", prefix + "_values")))
    return {chr(k): chars[offsets[i]:offsets[i + 1]] for i, k in enumerate(keys)}


@functools.lru_cache(maxsize=None)
def _norm_tables() -> tuple[dict, dict, dict, dict]:
    """(full canonical decompositions, full compatibility decompositions, combining class of
    every non-starter, (first, second) -> composite)."""
    ccc = {}
    words = raw("hf_norm", "ccc")  # (first, last, class) runs
    for first, last, cls in zip(words[0::3], words[1::3], words[2::3]):
        for cp in range(first, last + 1):
            ccc[chr(cp)] = cls
    w = raw("hf_norm", "compose")  # (first, second, composite) triples
    compose = {(chr(a), chr(b)): chr(c) for a, b, c in zip(w[0::3], w[1::3], w[2::3])}
    return _mapping("nfd"), _mapping("nfkd"), ccc, compose


def _decompose(text: str, compat: bool) -> list[str]:
    nfd, nfkd, ccc, _ = _norm_tables()
    table = nfkd if compat else nfd
    out: list[str] = []
    for ch in text:
        s = ord(ch) - S_BASE
        if 0 <= s < S_COUNT:
            out += [chr(L_BASE + s // (V_COUNT * T_COUNT)),
                    chr(V_BASE + s % (V_COUNT * T_COUNT) // T_COUNT)]
            if s % T_COUNT:
                out.append(chr(T_BASE + s % T_COUNT))
        else:
            out += table.get(ch, ch)
    # canonical ordering: each run of non-starters is sorted by class (stable, so equal classes
    # keep their order)
    i = 0
    while i < len(out):
        j = i
        while j < len(out) and ccc.get(out[j], 0):
            j += 1
        if j - i > 1:
            out[i:j] = sorted(out[i:j], key=lambda c: ccc[c])
        i = max(j, i + 1)
    return out


def _hangul_pair(a: str, b: str) -> "str | None":
    la, vb = ord(a) - L_BASE, ord(b) - V_BASE
    if 0 <= la < L_COUNT and 0 <= vb < V_COUNT:  # L + V -> LV
        return chr(S_BASE + (la * V_COUNT + vb) * T_COUNT)
    s, tb = ord(a) - S_BASE, ord(b) - T_BASE
    if 0 <= s < S_COUNT and s % T_COUNT == 0 and 0 < tb < T_COUNT:  # LV + T -> LVT
        return chr(ord(a) + tb)
    return None


def _compose(chars: list[str]) -> str:
    """Canonical composition: a character joins the last starter when nothing between them
    blocks it (a character in between blocks when its class is 0 or not below its own; a
    starter in between is the last starter itself)."""
    _, _, ccc, pairs = _norm_tables()
    out: list[str] = []
    starter = -1  # index in out of the last starter
    for ch in chars:
        cls = ccc.get(ch, 0)
        if starter >= 0:
            # after canonical ordering, the last character kept since the starter has the
            # highest class between them: it alone decides whether ch is blocked
            prev = ccc.get(out[-1], 0) if len(out) - 1 > starter else None
            blocked = prev is not None and prev >= cls
            joined = None if blocked else (pairs.get((out[starter], ch))
                                           or _hangul_pair(out[starter], ch))
            if joined is not None:
                out[starter] = joined
                continue
        if cls == 0:
            starter = len(out)
        out.append(ch)
    return "".join(out)


def normalize(form: str, text: str) -> str:
    """HF's ``normalizers.<form>()`` (``NFC``, ``NFD``, ``NFKC``, ``NFKD``) on pinned tables.

    >>> normalize("NFC", "e\\u0301"), normalize("NFKD", "\\ufb01")
    ('é', 'fi')
    >>> normalize("NFC", "\\u1100\\u1161")
    '가'
    """
    if form not in ("NFC", "NFD", "NFKC", "NFKD"):
        raise ValueError(f"unknown normal form {form!r}; known: NFC, NFD, NFKC, NFKD")
    if _touchable(form).isdisjoint(text):  # the quick check (see _touchable)
        return text
    chars = _decompose(text, compat=form.startswith("NFK"))
    return _compose(chars) if form.endswith("C") else "".join(chars)


@functools.lru_cache(maxsize=None)
def _touchable(form: str) -> frozenset:
    """Every character that ``form`` may change or that may change a neighbour: those with a
    decomposition (Hangul syllables included), a combining class, or a place as the second
    half of a composition (Hangul vowel and trailing jamo included). A text with none of
    them is already normalised; most text is, so it is returned as it is."""
    nfd, nfkd, ccc, pairs = _norm_tables()
    out = set(nfkd if form.startswith("NFK") else nfd) | set(ccc)
    out |= {second for _, second in pairs}
    out |= {chr(c) for c in range(S_BASE, S_BASE + S_COUNT)}
    out |= {chr(c) for c in range(V_BASE, V_BASE + V_COUNT)}
    out |= {chr(c) for c in range(T_BASE + 1, T_BASE + T_COUNT)}
    return frozenset(out)


@functools.lru_cache(maxsize=None)
def _lower_table() -> dict[int, str]:
    return {ord(k): v for k, v in _mapping("lower").items()}


def lowercase(text: str) -> str:
    """HF's ``normalizers.Lowercase()``: Rust's ``char::to_lowercase`` on each character (full
    mappings such as U+0130 -> "i\\u0307"; no final-sigma rule).

    >>> lowercase("ÀÉ İ ΣΑΣ")
    'àé i̇ σασ'
    """
    return text.translate(_lower_table())
