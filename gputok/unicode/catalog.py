"""Which atoms the data files hold, the names the generator tries for them, and version markers.

The generator probes every atom below through each oracle engine over all code points; the
runtime reads the results from the data files and never consults this catalogue for sets. It
does use ``loose`` (the name-matching rule both engines apply) and the markers' documentation.
"""

from __future__ import annotations

__all__ = ["GENERAL_CATEGORIES", "SCRIPTS", "BINARY", "ESCAPES", "ATOMS", "ALIASES", "loose",
           "REGEX_MARKERS", "CCC_MARKERS", "LOWERCASE_MARKERS", "version_key"]

#: general categories, major and minor ("LC" = Lu | Ll | Lt)
GENERAL_CATEGORIES = (
    "L", "LC", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
    "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
    "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn",
)

#: scripts named by real pre-tokenizer patterns (Kimi K2's tiktoken pattern uses ``\\p{Han}``;
#: CJK-aware HF pre-tokenizers use Han/Hiragana/Katakana/Hangul/Latin) plus the other large
#: scripts a user pattern is likely to name
SCRIPTS = (
    "Han", "Hiragana", "Katakana", "Hangul", "Latin", "Greek", "Cyrillic", "Arabic", "Hebrew",
    "Thai", "Devanagari", "Common", "Inherited",
)

#: binary properties seen in tokenizer.json pre-tokenizers
BINARY = ("White_Space", "Alphabetic")

#: escape classes; ``\\h`` is a hex digit in both engines (fancy-regex and Oniguruma)
ESCAPES = ("\\s", "\\d", "\\w", "\\h")

ATOMS = GENERAL_CATEGORIES + SCRIPTS + BINARY + ESCAPES

#: other spellings the generator tries for each property atom; a spelling is recorded for a
#: family only if that engine accepts it and it matches exactly the atom's set there
ALIASES = {
    "L": ("Letter",), "LC": ("Cased_Letter",), "Lu": ("Uppercase_Letter",),
    "Ll": ("Lowercase_Letter",), "Lt": ("Titlecase_Letter",), "Lm": ("Modifier_Letter",),
    "Lo": ("Other_Letter",), "M": ("Mark", "Combining_Mark"), "Mn": ("Nonspacing_Mark",),
    "Mc": ("Spacing_Mark",), "Me": ("Enclosing_Mark",), "N": ("Number",),
    "Nd": ("Decimal_Number", "digit"), "Nl": ("Letter_Number",), "No": ("Other_Number",),
    "P": ("Punctuation", "punct"), "Pc": ("Connector_Punctuation",), "Pd": ("Dash_Punctuation",),
    "Ps": ("Open_Punctuation",), "Pe": ("Close_Punctuation",), "Pi": ("Initial_Punctuation",),
    "Pf": ("Final_Punctuation",), "Po": ("Other_Punctuation",), "S": ("Symbol",),
    "Sm": ("Math_Symbol",), "Sc": ("Currency_Symbol",), "Sk": ("Modifier_Symbol",),
    "So": ("Other_Symbol",), "Z": ("Separator",), "Zs": ("Space_Separator",),
    "Zl": ("Line_Separator",), "Zp": ("Paragraph_Separator",), "C": ("Other",),
    "Cc": ("Control", "cntrl"), "Cf": ("Format",), "Cs": ("Surrogate",), "Co": ("Private_Use",),
    "Cn": ("Unassigned",),
    "Han": ("Hani",), "Hiragana": ("Hira",), "Katakana": ("Kana",), "Hangul": ("Hang",),
    "Latin": ("Latn",), "Greek": ("Grek",), "Cyrillic": ("Cyrl",), "Arabic": ("Arab",),
    "Hebrew": ("Hebr",), "Thai": (), "Devanagari": ("Deva",), "Common": ("Zyyy",),
    "Inherited": ("Zinh", "Qaai"), "White_Space": ("WSpace", "space"),
    "Alphabetic": ("Alpha",),
}


def loose(name: str) -> str:
    """Property-name matching as both engines do it (UAX #44 LM3): case, spaces, ``_`` and ``-``
    are ignored, so ``\\p{Upper_case-Letter}`` names ``Lu`` in both."""
    return "".join(ch for ch in name.lower() if ch not in " _-\t")


def version_key(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


# Version markers. A family's Unicode version is the newest version V whose marker code point the
# engine knows; the markers are checked in order and must be known without gaps up to V (the
# generator raises otherwise). Each marker was first assigned in its version (DerivedAge.txt).

#: regex engines: a code point first assigned in V; "known" = not matched by \p{Cn}
REGEX_MARKERS = (
    ("6.0", 0x0620), ("6.1", 0x058F), ("6.2", 0x20BA), ("6.3", 0x061C), ("7.0", 0x037F),
    ("8.0", 0x08B3), ("9.0", 0x1C80), ("10.0", 0x0860), ("11.0", 0x0560), ("12.0", 0x0C77),
    ("12.1", 0x32FF), ("13.0", 0x08BE), ("14.0", 0x061D), ("15.0", 0x0CF3), ("15.1", 0x2FFC),
    ("16.0", 0x1C89), ("17.0", 0x323B0),
)

#: normaliser: a combining mark (canonical combining class > 0) first assigned in V; "known" =
#: the normaliser reorders it after U+0345 (class 240). 6.2, 6.3, 12.1 and 15.1 added no marks.
CCC_MARKERS = (
    ("5.0", 0x07EB), ("5.1", 0x0487), ("5.2", 0x0816), ("6.0", 0x0859), ("6.1", 0x08E4),
    ("7.0", 0x1AB0), ("8.0", 0xA69E), ("9.0", 0x08D4), ("10.0", 0x0D3B), ("11.0", 0x07FD),
    ("12.0", 0x0EBA), ("13.0", 0x1ABF), ("14.0", 0x0898), ("15.0", 0x10EFD), ("16.0", 0x0897),
)

#: lower-casing: an upper-case letter first assigned in V and its lower-case mapping
#: (10.0, 15.0 and 15.1 added no case pairs)
LOWERCASE_MARKERS = (
    ("5.0", 0x0243, 0x0180), ("5.1", 0x0370, 0x0371), ("5.2", 0x0524, 0x0525),
    ("6.0", 0x0526, 0x0527), ("6.1", 0x10C7, 0x2D27), ("7.0", 0x037F, 0x03F3),
    ("8.0", 0x13F5, 0x13FD), ("9.0", 0x104B0, 0x104D8), ("11.0", 0x1C90, 0x10D0),
    ("12.0", 0xA7BA, 0xA7BB), ("13.0", 0xA7C7, 0xA7C8), ("14.0", 0x2C2F, 0x2C5F),
    ("16.0", 0x1C89, 0x1C8A), ("17.0", 0x16EA0, 0x16EBB),
)
