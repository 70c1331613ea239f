"""Placeholder until the pinned Unicode tables land: Python's unicodedata (not pinned)."""

from __future__ import annotations

import unicodedata


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def normalize(form: str, text: str) -> str:
    return unicodedata.normalize(form, text)


def lowercase(text: str) -> str:
    return text.lower()


import functools
import os
import threading

import numpy as np
import regex


def _dollar(pat: str) -> str:
    out, i, in_class = [], 0, False
    while i < len(pat):
        c = pat[i]
        if c == "\\":
            out.append(pat[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=64)
def compile_pinned(pattern: str, family: str):
    return regex.compile(_dollar(pattern))


F_L = 0x01  # \p{L}
F_N = 0x02  # \p{N}
F_S = 0x04  # \s
F_NL = 0x08  # [\r\n]
F_UP = 0x10  # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]   (o200k's first letter class)
F_LO = 0x20  # [\p{Ll}\p{Lm}\p{Lo}\p{M}]          (o200k's second letter class)
F_M = 0x40  # \p{M}

#: flag bit -> the class, spelled as in the patterns, whose members carry it
PROPERTIES = {
    F_L: r"\p{L}",
    F_N: r"\p{N}",
    F_S: r"\s",
    F_NL: r"[\r\n]",
    F_UP: r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
    F_LO: r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
    F_M: r"\p{M}",
}

#: letters of the contraction suffixes; ``unicode_tables()["fold_" + c]`` lists the code points
#: that ``(?i:c)`` matches (e.g. "s" also matches U+017F LATIN SMALL LETTER LONG S)
FOLD_LETTERS = "sdmtlver"

_TABLE_FORMAT = 1
_lock = threading.RLock()
_tables: dict = {}


def _all_code_points() -> np.ndarray:
    cps = np.arange(0x110000, dtype=np.uint32)
    return cps[(cps < 0xD800) | (cps > 0xDFFF)]  # surrogates cannot occur in valid text


def build_unicode_tables() -> dict:
    """Derive the tables from the ``regex`` module (~0.3 s): one ``finditer`` per property over
    a string holding every code point once."""
    cps = _all_code_points()
    text = cps.tobytes().decode("utf-32-le")
    table = np.zeros(0x110000, np.uint8)
    for bit, prop in PROPERTIES.items():
        spans = np.array([m.span() for m in regex.finditer(prop + "+", text)], np.int64)
        mark = np.zeros(len(cps) + 1, np.int32)
        if len(spans):
            np.add.at(mark, spans[:, 0], 1)
            np.add.at(mark, spans[:, 1], -1)
        table[cps[np.cumsum(mark[:-1]) > 0]] |= bit
    out = {"table": table}
    for ch in FOLD_LETTERS:
        found = regex.findall("(?i:%s)" % ch, text)
        out["fold_" + ch] = np.array(sorted(map(ord, found)), np.uint32)
    return out


def _cache_path() -> str:
    root = os.environ.get("GPUTOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "gputok")
    return os.path.join(root, f"unicode_classes-regex{regex.__version__}-f{_TABLE_FORMAT}.npz")


def _unicode_tables() -> dict:
    """``{"table": uint8[0x110000] of F_* bits, "fold_<c>": uint32 code points}``.

    Built once per process, lazily, and cached in ``~/.cache/gputok`` (or ``$GPUTOK_CACHE``)
    under a name that includes the ``regex`` version.
    """
    if "table" in _tables:
        return _tables
    with _lock:
        if "table" in _tables:
            return _tables
        path = _cache_path()
        data = None
        try:
            with np.load(path) as z:
                data = {k: z[k] for k in z.files}
            if (data["table"].shape != (0x110000,) or data["table"].dtype != np.uint8
                    or any("fold_" + ch not in data for ch in FOLD_LETTERS)):
                data = None
        except Exception:  # missing, truncated or foreign file: rebuild
            data = None
        if data is None:
            data = build_unicode_tables()
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp.npz"
                np.savez(tmp, **data)
                os.replace(tmp, path)
            except OSError:
                pass
        _tables.update(data)
    return _tables


def class_flags(family: str) -> dict:
    return _unicode_tables()
