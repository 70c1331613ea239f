"""gputok.unicode.normalize: HF's NFC/NFD/NFKC/NFKD and Lowercase, on pinned Unicode 9.0 data.

Each check compares with the installed ``tokenizers`` normalisers. Whole-set checks join the
cases with U+0000 (a starter that composes with nothing and that no mapping produces, so every
case is normalised on its own) and compare one string: every single code point under every form,
every base character of a composition pair followed by every mark, mark pairs of different
combining classes, the Hangul jamo grid, and hypothesis-generated text
(``GPUTOK_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import os
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputok import unicode as gu
from gputok.unicode import normalization as nz

FUZZ_EXAMPLES = int(os.environ.get("GPUTOK_FUZZ_EXAMPLES", "200"))
ALL_CPS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


def hf(form: str):
    try:
        from tokenizers import normalizers
    except ImportError:
        pytest.skip("tokenizers is not installed: no oracle for HF's normalisers")
    return {"NFC": normalizers.NFC, "NFD": normalizers.NFD, "NFKC": normalizers.NFKC,
            "NFKD": normalizers.NFKD, "Lowercase": normalizers.Lowercase}[form]().normalize_str


def ours(form: str):
    return gu.lowercase if form == "Lowercase" else (lambda s: gu.normalize(form, s))


def assert_cases(form: str, cases: list) -> None:
    joined = "\x00".join(cases)
    want, got = hf(form)(joined), ours(form)(joined)
    if want != got:
        bad = [(c, w, g) for c, w, g in zip(cases, want.split("\x00"), got.split("\x00"))
               if w != g]
        pytest.fail(f"{form}: {len(bad)} of {len(cases)} cases differ, e.g. "
                    + "; ".join(f"{c!r}: HF {w!r}, ours {g!r}" for c, w, g in bad[:4]))


def marks() -> list:
    """Every code point with a non-zero combining class in HF's data or in Python's (which is
    newer: the marks HF does not know must stay where they are)."""
    d = nz._data()
    py = {c for c in ALL_CPS if unicodedata.combining(chr(c))}
    return sorted(set(d.ccc) | py)


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD", "Lowercase"])
def test_every_single_code_point(form):
    assert_cases(form, [chr(c) for c in ALL_CPS])


def test_every_composition_base_with_every_mark():
    d = nz._data()
    bases = sorted({a for a, _ in d.compose} | set("aAxZ0 \u3042\u0915"))
    seconds = sorted({b for _, b in d.compose})
    ms = [chr(m) for m in marks()]
    cases = [b + m for b in bases for m in ms + seconds]
    assert len(cases) > 200_000
    assert_cases("NFC", cases)
    assert_cases("NFKC", cases[::5])
    assert_cases("NFD", cases[::7])


def test_mark_sequences_of_different_classes():
    # new since Unicode 9.0 (Python 3.11 knows them, HF does not): order is kept there
    assert gu.normalize("NFC", "\u1dd5\U00011070") == hf("NFC")("\u1dd5\U00011070")
    assert gu.normalize("NFC", "\u089a\u1cd4") == hf("NFC")("\u089a\u1cd4")
    assert gu.normalize("NFC", "\u089a\u1cd4") == "\u089a\u1cd4" != \
        unicodedata.normalize("NFC", "\u089a\u1cd4")
    d = nz._data()
    by_class: dict = {}
    for m in marks():
        by_class.setdefault(d.ccc.get(m, -unicodedata.combining(chr(m))), []).append(chr(m))
    reps = [v[0] for v in by_class.values()] + [v[-1] for v in by_class.values()]
    cases = [b + x + y for b in "ae\u1100" for x in reps for y in reps]
    cases += [b + x + y + z for b in "oU" for x in reps[::3] for y in reps[::2] for z in reps[::5]]
    assert_cases("NFC", cases)
    assert_cases("NFD", cases)
    # a long run of marks, blocked and unblocked compositions
    assert_cases("NFC", ["a" + "".join(reps) * 3, "e\u0327\u0301\u0300\u0316", "A\u030a\u0301",
                         "\u0041\u0300\u0327\u0301", "\u0f71\u0f72\u0f74", "\u212b\u2126K",
                         "\u0344\u0340\u0343", "\u0b47\u0b3e\u0b57", "\u1100\u0301\u1161"])


def test_hangul_jamo_grid():
    ls = [chr(c) for c in range(0x10FF, 0x1115)]
    vs = [chr(c) for c in range(0x1160, 0x1177)]
    ts = [chr(c) for c in range(0x11A6, 0x11C4)]
    cases = [l + v for l in ls for v in vs] + [l + v + t for l in ls for v in vs for t in ts]
    cases += [chr(s) + t for s in range(0xAC00, 0xD7A4, 7) for t in ts]
    for form in ("NFC", "NFD", "NFKC"):
        assert_cases(form, cases)


CHARS = st.sampled_from(
    [chr(c) for c in (0x61, 0x41, 0x65, 0x6F, 0x55, 0x20, 0x3A9, 0x1100, 0x1161, 0x11A8, 0xAC00,
                      0xAC01, 0x212B, 0xFB01, 0x130, 0x3A3, 0x1E9E, 0x2126, 0x0F73, 0x0B47,
                      0x0B3E, 0x0D4A, 0x1D15E, 0x2ADC, 0xFB1D, 0x3099, 0x304B, 0x30AB, 0xFF76,
                      0xFF9E, 0x1F1, 0x1E0A, 0x10FFFF, 0x11070, 0x1DD5, 0x89A, 0x1CD4)]
    + [chr(m) for m in (0x300, 0x301, 0x308, 0x316, 0x323, 0x327, 0x328, 0x345, 0x34F, 0x5B0,
                        0x93C, 0x94D, 0x1DFA, 0x302A, 0x1D165, 0x1D16D)])


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(CHARS, max_size=12), min_size=1, max_size=8))
def test_fuzz_against_hf(texts):
    for form in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase"):
        joined = "\x00".join(texts)
        assert ours(form)(joined) == hf(form)(joined), (form, texts)


def test_quick_check_is_sound_and_spans_touch_only_unsafe_text():
    t = gu.unsafe_table("NFC")
    assert t.dtype == bool and t.shape == (0x110000,)
    # a code point NFC changes on its own, or one that combines with what precedes it, is unsafe
    images = gu.normalize("NFC", "\x00".join(map(chr, ALL_CPS))).split("\x00")
    changed = [c for c, img in zip(ALL_CPS, images) if img != chr(c)]
    assert t[np.array(changed)].all() and t[0x301] and t[0x1161] and t[0x11A8]
    assert not t[ord("a")] and not t[ord("é")] and not t[0xAC00] and not t[0x4E2D]
    cps = np.array([0x61, 0x301, 0x62, 0x1100, 0x1161, 0x4E2D], np.uint32)
    assert gu.nfc_unsafe(cps).tolist() == [False, True, False, False, True, False]
    text = "Crème brûlée, cafe\u0301, \u1100\u1161\u11a8 and 中文" * 3
    assert gu.normalize_spans(text) == hf("NFC")(text)
    plain = "already NFC: é ü 中文 한국어 " * 100
    assert gu.normalize_spans(plain) is plain  # nothing unsafe: the same object back


def test_bad_form_and_lowercase_details():
    with pytest.raises(ValueError, match="unknown normalisation form 'NFX'"):
        gu.normalize("NFX", "a")
    assert gu.lowercase("ΑΣ İ ẞ") == hf("Lowercase")("ΑΣ İ ẞ") == "ασ i\u0307 ß"
    assert gu.lowercase("ABC") == "abc"
