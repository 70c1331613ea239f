"""Pattern text for pinned sets and literals, readable by any ``regex`` release in V0 or V1 mode.

Every character that is an operator somewhere (``-``, ``[``, ``&``, ``|``, ``~``, ``^``...) is
written as an escape, so a class's text means the same set in both modes.
"""

from __future__ import annotations

__all__ = ["cls_char", "ranges", "char"]


def cls_char(cp: int) -> str:
    """One code point inside a class: ASCII letters and digits as they are, the rest escaped."""
    if cp < 0x80 and chr(cp).isalnum():
        return chr(cp)
    if cp < 0x100:
        return "\\x%02x" % cp
    return "\\u%04x" % cp if cp < 0x10000 else "\\U%08x" % cp


def ranges(r) -> str:
    """A flat class for normal-form ranges (never empty: that would not compile)."""
    if len(r) == 0:
        return "[^\\x00-\\U0010ffff]"
    parts = [cls_char(a) if a == b else cls_char(a) + ("" if b == a + 1 else "-") + cls_char(b)
             for a, b in r.tolist()]
    return "[" + "".join(parts) + "]"


def char(cp: int) -> str:
    """A literal outside classes: safe in any mode of any ``regex`` release."""
    ch = chr(cp)
    if ch.isascii():
        return ch if ch.isalnum() or ch == "_" else "\\x%02x" % cp
    return ch if ch.isprintable() else cls_char(cp)
