"""Normalize: HF ``normalizer`` steps applied to every segment before pre-tokenization.

The Unicode normaliser (``components.normalizers.UnicodeSteps``) is a tuple of step names,
applied in order:
``"NFC" | "NFD" | "NFKC" | "NFKD"`` (Unicode normal forms) and ``"Lowercase"``. tiktoken models
have none. The data (combining classes, decompositions, compositions, lowercase mappings) is
the one HF's normaliser uses, pinned in ``gputok.unicode``: the installed Python's
``unicodedata`` is a different Unicode version and gives other ids.

Most text is already in NFC: a vectorised quick check finds the few code points that might
change, and only the spans around them are normalised.
"""

from __future__ import annotations


STEPS = ("NFC", "NFD", "NFKC", "NFKD", "Lowercase")


def check_steps(steps: tuple, where: str = "normalizer") -> tuple:
    """Refuse what is not implemented, naming it (at load time, not mid-batch)."""
    for s in steps:
        if s not in STEPS:
            raise ValueError(f"{where}: normaliser {s!r} is not supported (supported: "
                             f"{', '.join(STEPS)})")
    return tuple(steps)


def normalize_text(steps: tuple, text: str) -> str:
    """``text`` through every step of ``steps``.

    >>> normalize_text(("NFC",), "e\\u0301")
    'é'
    """
    from .. import unicode as uni

    for s in steps:
        if s == "Lowercase":
            text = uni.lowercase(text)
        else:
            text = uni.normalize(s, text)
    return text
