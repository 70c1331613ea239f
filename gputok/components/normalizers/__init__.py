"""Normalisers: segment text -> text (``components.Normalizer``).

    UnicodeSteps   HF's NFC / NFD / NFKC / NFKD / Lowercase steps (``stages.normalize``); one
                   normal form has a device form (the quick check of kernels/encode_nfc.cu)
    spm.py         SentencePiece's (``normalizer.cc``): charsmap rules (charsmap.py), user-defined
                   pieces, whitespace, the dummy prefix
    HFSteps        the steps of SPM-style HF files: Prepend, Replace (string or regex), Unicode,
                   Precompiled (precompiled.py: a charsmap, HF's grapheme-cluster walk)
    BertNormalizer HF's BertNormalizer; BERT's pre-tokenizer runs it in its own pass
"""

from __future__ import annotations

from ...stages import counters
from ...stages.normalize import check_steps, normalize_text
from .spm import SpmNormalizer

__all__ = ["UnicodeSteps", "SpmNormalizer", "HFSteps", "BertNormalizer"]

_FORMS: list = []


def _forms() -> tuple:
    """``unicode.FORMS``, imported on first use (with the pinned normalisation data)."""
    if not _FORMS:
        from ...unicode.normalization import FORMS

        _FORMS.append(FORMS)
    return _FORMS[0]


class UnicodeSteps(tuple):
    """A tuple of Unicode step names applied in order (empty: the identity).

    >>> UnicodeSteps(("NFC",)).normalize("e\\u0301")
    'é'
    """

    def __new__(cls, steps=(), where: str = "normalizer"):
        return super().__new__(cls, check_steps(tuple(steps), where))

    @property
    def steps(self) -> tuple:
        return tuple(self)

    @property
    def device_form(self) -> "str | None":
        return self[0] if len(self) == 1 and self[0] in _forms() else None

    def normalize(self, text: str) -> str:
        return normalize_text(self, text) if self else text

    def normalize_batch(self, texts: list) -> list:
        if not self:
            return texts
        counters["normalize.segments"] += len(texts)
        return [normalize_text(self, t) for t in texts]


class HFSteps:
    """SPM-style HF normaliser steps: ``("prepend", s)``, ``("replace", a, b)``,
    ``("replace_regex", compiled, b)``, ``("precompiled", PrecompiledNormalizer)`` or
    ``(unicode step name,)``.

    >>> HFSteps((("prepend", "▁"), ("replace", " ", "▁"))).normalize("a b")
    '▁a▁b'
    """

    steps = None
    device_form = None

    def __init__(self, steps: tuple):
        self.items = tuple(steps)

    def __bool__(self) -> bool:
        return bool(self.items)

    def normalize(self, text: str) -> str:
        for step in self.items:
            kind = step[0]
            if kind == "prepend":
                text = step[1] + text if text else text  # nothing is prepended to ""
            elif kind == "replace":
                text = text.replace(step[1], step[2]) if step[1] else text
            elif kind == "replace_regex":
                text = step[1].sub(lambda _m, c=step[2]: c, text)
            elif kind == "precompiled":
                text = step[1].normalize(text)
            else:
                text = normalize_text((kind,), text)
        return text

    def normalize_batch(self, texts: list) -> list:
        if not self.items:
            return texts
        counters["normalize.segments"] += len(texts)
        return [self.normalize(t) for t in texts]


class BertNormalizer:
    """HF's ``BertNormalizer`` (see ``components/bert_steps.py``): alone it runs the per-character
    map over a whole batch's code points; with BERT's pre-tokenizer it runs in that pass.

    >>> BertNormalizer().normalize("Héllo 中")
    'hello  中 '
    """

    steps = None
    device_form = None

    def __init__(self, *, clean_text: bool = True, handle_chinese_chars: bool = True,
                 strip_accents: "bool | None" = None, lowercase: bool = True):
        from ..bert_steps import BertSteps

        self.steps_on = BertSteps(clean_text=clean_text, handle_chinese_chars=handle_chinese_chars,
                                  strip_accents=strip_accents, lowercase=lowercase)

    def normalize(self, text: str) -> str:
        return self.normalize_batch([text])[0]

    def normalize_batch(self, texts: list) -> list:
        import numpy as np

        from ..._arrays import code_points

        joined = "".join(texts)
        if not joined:
            return list(texts)
        lens = np.fromiter(map(len, texts), np.int64, len(texts))
        seg = np.repeat(np.arange(len(texts), dtype=np.int64), lens)
        cps, seg = self.steps_on.normalize_array(code_points(joined), seg)
        counters["normalize.segments"] += len(texts)
        bounds = np.searchsorted(seg, np.arange(len(texts) + 1), "left").tolist()
        text = cps.astype(np.uint32).tobytes().decode("utf-32-le")
        return [text[a:b] for a, b in zip(bounds, bounds[1:])]
