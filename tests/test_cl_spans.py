"""The cl100k / Llama 3 / Qwen2 / GPT-2 span rules that every device's pre-tokenizer runs.

1. ``gputok/stages/scan_cl.py`` (the Python statement of THE CL SPAN RULE and THE CL MATCHER in
   ``kernels/common/encode_pretok_rules.h``) against the pinned regex of each of the five
   patterns, on fuzzed text over characters that exercise every alternative, and on the
   corpora; every span start is a piece start of the regex.
2. The header in the Metal dialect (the emulator's strict shim) computes what the Python
   reference computes: the matcher's end from every character, the span threads' flags.
(``encode_pretok_spans`` itself runs on the emulator in three thread orders for every pattern
in ``test_cuda_kernels.py``, on the native device in ``test_native.py``, on Metal in
``test_metal_encode.py``.)
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import testdata
from conftest import fuzz_examples
from devicekit import EDGE, PATTERNS, one_segment
from gputok.stages.scan import scanner_for_pattern
from gputok.stages.scan_cl import cl_match, cl_span_start, encode_cl_spans
from gputok.stages.scan_rules import X

# characters that exercise every rule: letters of several scripts and cases, the long s and the
# Kelvin sign (case folding), marks, digits of several scripts, every blank and CR/LF, "'" and
# its look-alike, punctuation, emoji; contraction letters in both cases, and runs
ALPHABET = list("aAzZéßǅʰ中日\u0301012٣²'’ \t\n\r\x0b\x0c\x85\u00a0\u2028\u3000"
                ".,!?-_/\\\"#😀\u017fsStTlLvVeErRdDmMkK\u212a") + [
    "'s", "'ll", "'VE", "'Re", "'d", "'t", "'M", "'x", "\r\n", "  ", "123", "4567", "\n\n  ",
    " \n", "\n ", "   ", "x's's", "!'s", " 'll", "'\n", " 12", "!\r\n", "\t\n"]


def texts(n: int, seed: int, max_len: int = 30) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, max_len)))
            for _ in range(n)]


def _scanner(name: str):
    sc = scanner_for_pattern(PATTERNS[name])
    sc._setup()
    return sc


def _params(sc) -> tuple:
    return sc._kind == "gpt2", sc.digit_group, bool(sc.end_whole)


def _classes(sc, text: str) -> list:
    return [int(v) for v in sc._cls[np.array([ord(c) for c in text], np.int64)]] if text else []


def reference_starts(sc, text: str) -> list:
    cps = [ord(ch) for ch in text]
    return encode_cl_spans(_classes(sc, text) + [X] * 3, cps + [0] * 3, sc._letters,
                           *_params(sc))


@pytest.mark.parametrize("name", list(PATTERNS))
def test_matcher_equals_the_regex_on_fuzzed_text(name):
    sc = _scanner(name)
    rx = sc._compiled()
    bad = [t for t in texts(fuzz_examples(3000), seed=1) + EDGE
           if reference_starts(sc, t) != [m.start() for m in rx.finditer(t)]]
    assert not bad, f"{len(bad)} texts differ, first {bad[0]!r}"


@pytest.mark.parametrize("name", list(PATTERNS))
def test_matcher_equals_the_regex_on_the_corpora(name):
    sc = _scanner(name)
    rx = sc._compiled()
    docs = [d for kind in testdata.KINDS for d in testdata.corpus(kind, max_mb=0.05)]
    bad = [d for d in docs if reference_starts(sc, d) != [m.start() for m in rx.finditer(d)]]
    assert not bad and len(docs) > 20


@pytest.mark.parametrize("name", list(PATTERNS))
def test_span_starts_are_piece_starts_in_every_parse(name):
    sc = _scanner(name)
    rx = sc._compiled()
    gpt2 = _params(sc)[0]
    for t in texts(fuzz_examples(1500), seed=2):
        k = _classes(sc, t)
        spans = {i for i in range(len(t)) if cl_span_start(k[i - 1] if i else X, k[i], gpt2)}
        assert spans <= {m.start() for m in rx.finditer(t)}, t


def test_the_pattern_differences_the_matcher_keeps():
    """cl100k keeps trailing whitespace whole (``\\s++$``), Llama 3 cuts it after the last
    CR/LF; Qwen2 cuts digits one by one, GPT-2 takes a digit run with one " " before it;
    GPT-2's contractions are lower case only, and "'" after a letter may start one."""
    def pieces(name, t):
        starts = reference_starts(_scanner(name), t) + [len(t)]
        return [t[a:b] for a, b in zip(starts, starts[1:])]

    assert pieces("cl100k", "a \n \n ") == ["a", " \n \n "]
    assert pieces("llama3", "a \n \n ") == ["a", " \n \n", " "]
    assert pieces("qwen2", "x 1234") == ["x", " ", "1", "2", "3", "4"]
    assert pieces("cl100k", "x 1234") == ["x", " ", "123", "4"]
    assert pieces("gpt2", "x 1234") == ["x", " 1234"]
    assert pieces("gpt2", "it'S it's") == ["it", "'", "S", " it", "'s"]
    assert pieces("cl100k", "it'S it's") == ["it", "'S", " it", "'s"]
    assert pieces("cl100k", "!'s\r\n\n x") == ["!'", "s", "\r\n\n", " x"]


# ---------------------------------------------------------------- 2. the Metal dialect

METAL_HEADER = """// gpuemu: header
#include <metal_stdlib>
using namespace metal;
#include "common/encode_rules.h"
"""
METAL_BODY = """// gpuemu: name=clcheck inputs=buf:uint8,mark:uint8,cls:uint8,letters:uint8,\
par:int32 outputs=out:int64,ent:uint32 header=hdr.metal
uint i = thread_position_in_grid.x;
long n = (long)buf_shape[0] - 1;
if ((long)i < n) {
  EncClText t;
  enc_span_text(t, buf, mark, cls, letters, (uint)letters_shape[0], n);
  t.gpt2 = par[0]; t.digit_group = par[1]; t.end_whole = par[2];
  out[i] = cls[i] == ENC_CONT ? -1 : enc_cl_match(t, (long)i);
  enc_spans_at(t, (long)i, ent);
}
"""


@pytest.mark.parametrize("name", ["cl100k", "llama3", "qwen2", "gpt2"])
def test_header_runs_in_the_metal_dialect(name, tmp_path):
    """kernels/common/encode_pretok_rules.h compiles as Metal and computes there, from every
    character of one segment, the Python reference's match end and span flags."""
    from emulator import check_metal_file
    from gputok.backends.kernels import ENC_CONT

    (tmp_path / "hdr.metal").write_text(METAL_HEADER)
    (tmp_path / "body.metal").write_text(METAL_BODY)
    kern = check_metal_file(tmp_path / "body.metal")
    sc = _scanner(name)
    text = "".join(texts(40, 21)) + "don't 12345\r\n\n  x  "
    data, mark, cls, first, cps = one_segment(text, sc._cls, ENC_CONT)
    n = len(data) - 1
    par = np.array(_params(sc), np.int32)
    out, ent = kern(inputs=[data, mark, cls, np.asarray(sc._letters, np.uint8), par],
                    output_shapes=[(n,), (n,)], output_dtypes=[np.int64, np.uint32],
                    grid=(n, 1, 1), threadgroup=(32, 1, 1))
    k = _classes(sc, text) + [X] * 3
    ends = np.append(first, n)
    want = [int(ends[cl_match(k, cps.tolist() + [0] * 3, sc._letters, c, *_params(sc))])
            for c in range(len(cps))]
    assert out[first].tolist() == want
    np.testing.assert_array_equal(np.flatnonzero(ent), first[reference_starts(sc, text)])
