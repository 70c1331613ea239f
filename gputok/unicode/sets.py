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

__all__ = ["FAMILIES", "unicode_version", "ranges", "member_table"]

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


def atom_set(family: str, atom: str, *, negated: bool = False, folded: bool = False):
    """The set of a stored atom (``"L"``, ``"\\\\s"``...), optionally as the engine reads it
    under ``(?i)`` outside a bracket class (``folded``) and/or negated (``\\P{..}``, ``\\S``)."""
    f = _file(family)
    if atom not in f:
        raise KeyError(atom)
    if not folded:
        base = f.get(atom)
        return store.complement(base) if negated else base
    pos = f.get("(?i)" + atom) if "(?i)" + atom in f else f.get(atom)
    if negated:
        return f.get("(?i)^" + atom) if "(?i)^" + atom in f else store.complement(pos)
    return pos


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


# ----------------------------------------------------------------------------------------------
# public
# ----------------------------------------------------------------------------------------------

def ranges(family: str, atom: str) -> np.ndarray:
    """Sorted inclusive code point ranges, shape ``(k, 2)``, that ``atom`` matches in ``family``.

    ``atom`` is a property name (``"L"``, ``"Lu"``, ``"Han"``, ``"White_Space"``, any alias the
    engine accepts) or a one-character pattern: ``\\p{..}``, ``\\P{..}``, ``\\s``, ``\\W``, a
    bracket class such as ``[\\p{L}&&\\p{Han}]``, ``(?i:s)``. Surrogates are in no probed set (the
    engines never see them) and in every complement.

    >>> ranges("tiktoken", "(?i:k)").tolist()
    [[75, 75], [107, 107], [8490, 8490]]
    """
    if not any(ch in atom for ch in "\\[(") and len(atom) > 1 or atom.isalpha():
        hit = resolve_property(family, atom)
        if hit is None:
            raise ValueError(f"unknown property {atom!r} for family {family!r}")
        name, negated = hit
        return atom_set(family, name, negated=negated).copy()
    from .pattern import single_set

    return single_set(atom, family)


@functools.lru_cache(maxsize=64)
def _member_table(family: str, atom: str) -> np.ndarray:
    t = store.member_mask(ranges(family, atom))
    t.setflags(write=False)
    return t


def member_table(family: str, atom: str) -> np.ndarray:
    """``bool[0x110000]``: True where ``atom`` matches (read-only, cached per family and atom).

    >>> bool(member_table("hf", r"\\p{L}")[ord("a")])
    True
    """
    return _member_table(family, atom)
