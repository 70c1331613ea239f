"""Pinned Unicode data: the oracles' own property tables and normalisers, shipped with gputok.

gputok must give tiktoken's and HF ``tokenizers``' ids whatever ``regex`` release or Python is
installed, but ``\\p{L}`` means what the engine's Unicode tables say, and those move: tiktoken
0.14 (the Rust ``regex`` crate via fancy-regex) and tokenizers 0.23 (Oniguruma) are Unicode
16.0, ``regex`` 2026.5 is 17.0 (4,644 more letters); HF's NFC data is Unicode 9.0, Python
3.11's ``unicodedata`` 14.0. So the sets every pattern atom matches were measured through each
oracle over all code points (``python -m gputok.unicode.generate``) and ship in ``data/``:

* ``FAMILIES``: ``"tiktoken"`` and ``"hf"``; ``unicode_version(family)``.
* ``ranges(family, atom)`` / ``member_table(family, atom)``: the set of ``\\p{Lu}``, ``\\s``,
  ``[\\p{L}&&\\p{Han}]``, ``(?i:s)``...
* ``class_flags(family)``: the scanner's ``F_*`` class table.
* ``pin_pattern(pattern, family)`` / ``compile_pinned``: a pattern rewritten so any ``regex``
  release matches what the oracle's engine matches.
* ``normalize(form, text)``, ``lowercase(text)``, ``nfc_unsafe(cps)``, ``normalize_spans``: HF's
  normalisers.
* ``gputok.unicode.bert.tables()``: HF's BertNormalizer / BertPreTokenizer flags per code point
  (``data/hf_bert.ucd``) over the ``hf_norm`` mappings, for WordPiece models.

Nothing here imports tiktoken, tokenizers or ``unicodedata`` at run time.

>>> from gputok import unicode as gu
>>> gu.compile_pinned(r"\\p{L}+|\\p{N}", "tiktoken").findall("\\U0003e472ab1")
['ab', '1']
"""

import importlib

# public API: name -> the submodule that defines it, imported on first use (PEP 562): a model
# that needs FORMS does not import the pattern pinner and ``regex`` with it
_PUBLIC = {
    **dict.fromkeys(("F_L", "F_LO", "F_M", "F_N", "F_NL", "F_S", "F_UP", "FOLD_LETTERS",
                     "PROPERTIES", "class_flags"), "flags"),
    **dict.fromkeys(("FORMS", "lowercase", "nfc_unsafe", "normalize", "normalize_spans",
                     "unsafe_table"), "normalization"),
    **dict.fromkeys(("compile_ascii", "compile_pinned"), "compiled"),
    "pin_pattern": "pattern",
    **dict.fromkeys(("member_table", "ranges"), "atoms"),
    **dict.fromkeys(("FAMILIES", "unicode_version"), "sets"),
}

__all__ = [
    "FAMILIES", "unicode_version", "ranges", "member_table",
    "F_L", "F_N", "F_S", "F_NL", "F_UP", "F_LO", "F_M", "PROPERTIES", "FOLD_LETTERS",
    "class_flags", "pin_pattern", "compile_pinned", "compile_ascii",
    "FORMS", "normalize", "normalize_spans", "nfc_unsafe", "unsafe_table", "lowercase",
]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
