"""Extended grapheme clusters (UAX #29, Unicode 15.1 and later rules), as the spec states them.

HF's ``Precompiled`` normaliser walks text one cluster at a time (the Rust ``unicode-segmentation``
crate's ``graphemes(true)``). The properties are read from the pinned file
``gputok/unicode/data/graphemes.ucd`` (by path, with ``cpu_ref.unicode``'s reader; its header
names the release it was measured from); the rules are written here, rule by rule, one boundary
at a time, the way UAX #29 lists them:

    GB3  CR x LF                     GB4  (Control | CR | LF) /      GB5  / (Control | CR | LF)
    GB6  L x (L | V | LV | LVT)      GB7  (LV | V) x (V | T)         GB8  (LVT | T) x T
    GB9  x (Extend | ZWJ)            GB9a x SpacingMark              GB9b Prepend x
    GB9c InCB=Consonant [InCB=Extend InCB=Linker]* InCB=Linker [InCB=Extend InCB=Linker]*
         x InCB=Consonant
    GB11 ExtPict Extend* ZWJ x ExtPict
    GB12/13 an odd number of Regional_Indicator before x Regional_Indicator
    GB999 / everywhere else

>>> clusters("e\\u0301x\\r\\n")
['é', 'x', '\\r\\n']
"""

from __future__ import annotations

import functools

from . import unicode as ucd

_GCB = ("CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend", "SpacingMark",
        "L", "V", "T", "LV", "LVT")


@functools.lru_cache(maxsize=None)
def _sets() -> dict:
    out = {name: ucd.ranges("graphemes", f"gcb_{name}") for name in _GCB}
    for name in ("extpict", "incb_linker", "incb_consonant", "incb_extend"):
        out[name] = ucd.ranges("graphemes", name)
    return out


@functools.lru_cache(maxsize=65536)
def _props(cp: int) -> tuple[str, frozenset]:
    """(Grapheme_Cluster_Break value, {extpict, incb_*} flags) of one code point."""
    s = _sets()
    gcb = next((name for name in _GCB if ucd.contains(s[name], cp)), "Other")
    flags = frozenset(f for f in ("extpict", "incb_linker", "incb_consonant", "incb_extend")
                      if ucd.contains(s[f], cp))
    return gcb, flags


def _joins(props: list, j: int) -> bool:
    """Whether there is no boundary before code point ``j`` (0 < j)."""
    a, fa = props[j - 1]
    b, fb = props[j]
    if a == "CR" and b == "LF":
        return True  # GB3
    if a in ("Control", "CR", "LF") or b in ("Control", "CR", "LF"):
        return False  # GB4, GB5
    if a == "L" and b in ("L", "V", "LV", "LVT"):
        return True  # GB6
    if a in ("LV", "V") and b in ("V", "T"):
        return True  # GB7
    if a in ("LVT", "T") and b == "T":
        return True  # GB8
    if b in ("Extend", "ZWJ", "SpacingMark") or a == "Prepend":
        return True  # GB9, GB9a, GB9b
    if "incb_consonant" in fb:  # GB9c
        k, linker = j - 1, False
        while k >= 0 and props[k][1] & {"incb_extend", "incb_linker"}:
            linker = linker or "incb_linker" in props[k][1]
            k -= 1
        if linker and k >= 0 and "incb_consonant" in props[k][1]:
            return True
    if "extpict" in fb and a == "ZWJ":  # GB11
        k = j - 2
        while k >= 0 and props[k][0] == "Extend":
            k -= 1
        if k >= 0 and "extpict" in props[k][1]:
            return True
    if a == "Regional_Indicator" and b == "Regional_Indicator":  # GB12, GB13
        k = j - 1
        while k >= 0 and props[k][0] == "Regional_Indicator":
            k -= 1
        return (j - 1 - k) % 2 == 1
    return False  # GB999


def clusters(text: str) -> list[str]:
    """The extended grapheme clusters of ``text``, in order."""
    props = [_props(ord(c)) for c in text]
    out, start = [], 0
    for j in range(1, len(text)):
        if not _joins(props, j):
            out.append(text[start:j])
            start = j
    if text:
        out.append(text[start:])
    return out
