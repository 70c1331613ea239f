"""Pinned code point sets of each oracle family: ``ranges``, ``member_table``, ``unicode_version``.

An *atom* is what one position of a pattern matches: ``\\p{Lu}``, ``\\s``, ``[\\p{L}&&\\p{Han}]``,
``(?i:k)``, or a bare property name such as ``"Lu"`` / ``"Han"`` / ``"White_Space"``. Its set is
the oracle engine's, measured by the generator (``generate.py``) over every code point and stored
in ``data/<family>.ucd``; nothing here asks the installed ``regex`` module or ``unicodedata``.
"""

from __future__ import annotations

import functools

import numpy as np

from . import store
from .catalog import loose
from .store import FAMILIES

__all__ = ["FAMILIES", "unicode_version"]

_TABLES = ("regex", "normalize", "lowercase")


def _file(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown Unicode family {family!r}; known: {', '.join(FAMILIES)} "
                         "(tiktoken = Rust regex crate, hf = Oniguruma + HF normalisers)")
    return store.load(family)


def unicode_version(family: str, *, table: str = "regex") -> str:
    """The Unicode version of a family's pinned data, e.g. ``"16.0"``.

    ``table="regex"`` (both families): the regex engine's property tables. ``"normalize"`` and
    ``"lowercase"`` (family ``"hf"`` only): HF's NFC/NFD/NFKC/NFKD data and its ``Lowercase``
    mapping. Versions are detected by marker code points (see ``catalog.py``).

    >>> unicode_version("tiktoken")
    '16.0'
    """
    if table not in _TABLES:
        raise ValueError(f"unknown table {table!r}; known: {', '.join(_TABLES)}")
    if table == "regex":
        return _file(family).meta["unicode"]
    if family != "hf":
        _file(family)
        raise ValueError(f"family {family!r} has no {table} table (only 'hf' normalises)")
    return store.load("hf_norm").meta[f"{table}_unicode"]


# ----------------------------------------------------------------------------------------------
# atoms (used by pattern.py)
# ----------------------------------------------------------------------------------------------

def resolve_property(family: str, name: str):
    """``(atom, negated)`` for the body of ``\\p{...}`` in this family's engine, or None if the
    engine does not accept the name with the meaning we ship (caller raises)."""
    f = _file(family)
    negated = False
    body = name.strip()
    if body.startswith("^"):
        negated, body = True, body[1:]
    if "=" in body or ":" in body:
        key, _, value = body.replace(":", "=").partition("=")
        kind = f.meta["keys"].get(loose(key))
        atom = f.meta["aliases"].get(loose(value))
        if kind is None or atom is None or _kind(atom) != kind:
            return None
        return atom, negated
    atom = f.meta["aliases"].get(loose(body))
    if atom is None and f.meta["is_prefix"] and loose(body).startswith("is"):
        atom = f.meta["aliases"].get(loose(body)[2:])
    return None if atom is None else (atom, negated)


def _kind(atom: str) -> str:
    from .catalog import GENERAL_CATEGORIES, SCRIPTS

    return "gc" if atom in GENERAL_CATEGORIES else "sc" if atom in SCRIPTS else "other"


_SURROGATES = np.array([[0xD800, 0xDFFF]], np.int64)


def _has(r, cp: int) -> bool:
    j = np.searchsorted(r[:, 0], cp, side="right") - 1
    return bool(j >= 0 and r[j, 1] >= cp)


def negate(family: str, r) -> np.ndarray:
    """The engine's complement of a set (``[^...]``, ``\\P{..}``, ``\\S``).

    THE SURROGATE GAP. The Rust crate (regex-syntax) keeps a set as char ranges: ranges are
    merged only when adjacent as numbers, but a complement computes each gap with char
    arithmetic, where U+D7FF + 1 = U+E000. So when a set holds U+D7FF and U+E000 in two ranges,
    the gap between them comes out as the range U+D7FF..U+E000 and its complement holds both:
    tiktoken's ``[^\\x{D7FF}\\x{E000}]`` matches U+D7FF. (A set whose one range spans the
    surrogates, like the table of \\p{C}, or any complement, has no such gap.) Here a set
    "spans" iff it holds U+D7FF, all surrogates and U+E000; the surrogates never occur in text,
    so they serve as that marker, and set algebra keeps it right on its own."""
    out = store.complement(r)
    if family == "tiktoken" and _has(r, 0xD7FF) and _has(r, 0xE000) and not _has(r, 0xD800):
        out = store.union(out, [[0xD7FF, 0xD7FF], [0xE000, 0xE000]])
    return out


def variant_key(atom: str, *, negated: bool = False, folded: bool = False,
                in_class: bool = False) -> str:
    """Table name of an atom read in a context: ``"(?i)[]^L"`` is ``\\P{L}`` inside a bracket
    class under (?i)."""
    return "(?i)" * folded + "[]" * in_class + "^" * negated + atom


def variant(tables, family: str, atom: str, *, negated: bool = False, folded: bool = False,
            in_class: bool = False) -> np.ndarray:
    """An atom's set in a context, from ``tables`` (a data file, or the generator's tables so
    far). Engines read some atoms differently by context, as measured: Oniguruma's ``\\w``
    matches U+00B2 outside brackets but not inside; the Rust crate folds ``\\p{Lu}`` under
    (?i), Oniguruma does not. A context's set is stored only where it differs from its
    fallback: a negation falls back to the complement of the same context's positive set, a
    folded or bracketed positive set to the plain one."""
    key = variant_key(atom, negated=negated, folded=folded, in_class=in_class)
    if key != atom and key in tables:
        return tables.get(key)
    if negated:
        return negate(family, variant(tables, family, atom, folded=folded, in_class=in_class))
    if folded:
        return variant(tables, family, atom, in_class=in_class)
    if in_class:
        return variant(tables, family, atom)
    base = tables.get(atom)
    if family == "tiktoken" and atom == "C":
        base = store.union(base, _SURROGATES)  # the crate's table range spans the surrogates
    return base


def atom_set(family: str, atom: str, *, negated: bool = False, folded: bool = False,
             in_class: bool = False) -> np.ndarray:
    """The set of a stored atom (``"L"``, ``"\\\\s"``...) as the family's engine reads it:
    negated (``\\P{..}``, ``\\S``), under (?i) (``folded``), inside brackets (``in_class``)."""
    f = _file(family)
    if atom not in f:
        raise KeyError(atom)
    return variant(f, family, atom, negated=negated, folded=folded, in_class=in_class)


@functools.lru_cache(maxsize=None)
def _orbits(family: str) -> dict:
    """code point -> the next member of its (?i) orbit, for the code points whose orbit has more
    than one member (the members form a cycle)."""
    f = _file(family)
    return dict(zip(f.get("fold_keys").tolist(), f.get("fold_next").tolist()))


def orbit(family: str, cp: int) -> list:
    """Every code point that ``(?i:<cp>)`` matches in this family (single characters only)."""
    nxt = _orbits(family)
    out = [cp]
    c = nxt.get(cp, cp)
    while c != cp:
        out.append(c)
        c = nxt[c]
    return sorted(out)


def fold(family: str, r) -> np.ndarray:
    """Close a set under the family's single-character case folding."""
    nxt = _orbits(family)
    r = np.asarray(r, np.int64).reshape(-1, 2)
    if not nxt or len(r) == 0:
        return r
    keys = _orbit_keys(family)
    j = np.searchsorted(r[:, 0], keys, side="right") - 1
    inside = (j >= 0) & (keys <= r[np.maximum(j, 0), 1])
    add = set()
    for cp in keys[inside].tolist():
        add.update(orbit(family, cp))
    return store.union(r, store.from_code_points(sorted(add))) if add else r


@functools.lru_cache(maxsize=None)
def _orbit_keys(family: str) -> np.ndarray:
    return np.array(sorted(_orbits(family)), np.int64)


def multi_fold(family: str):
    """Ranges of the characters that ``(?i)`` lets match a *string* of several characters in
    this family (Oniguruma: U+00DF matches "ss"); empty for the Rust crate (simple folding)."""
    f = _file(family)
    return f.get("(?i)multi") if "(?i)multi" in f else store.EMPTY


def multi_targets(family: str) -> list:
    """The strings those characters fold to (``"ss"``, ``"st"``, ...)."""
    return list(_file(family).meta.get("multifold", []))
