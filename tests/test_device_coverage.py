"""Complete device coverage: o200k pre-tokenization and the normaliser's quick check as kernels.

1. The o200k rules (``gputok/stages/scan_o200k.py``, the Python statement of
   ``kernels/common/o200k_rules.h``): span starts and the sequential matcher against the
   reference regex on fuzzed text with marks, apostrophes, case changes, CR/LF and "/"
   everywhere, and on the test corpora.
2. ``kernels/encode_o200k.cu`` on the emulator, forward / reverse / shuffled: piece starts as
   ``piece_spans`` (the regex) gives them, with and without special tokens; the whole pipeline
   against tiktoken (o200k_base, o200k_harmony) with zero fallbacks (warnings as errors).
3. ``kernels/encode_nfc.cu`` on the emulator: flagged positions as ``nfc_unsafe`` gives them;
   the host spans and the splice against HF's normaliser; Qwen2 with NFD input against HF,
   counting the host-normalised spans and bytes; clean text never leaves the device.
4. The fallback count: every named encoding and every supported tokenizer.json, already-NFC and
   NFC-changing text, encoded by the emulated device with no host stage at all; SentencePiece
   ``.model`` files and SPM-style tokenizer.json the same (``kernels/encode_spm.cu``, a
   charsmap normaliser too; more in ``test_spm_device.py``).
The native CPU device runs the same sources (``test_native.py``).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import gputok
import testdata
from conftest import HF_FILES, fuzz_examples, hf_encoding, hf_oracle, tiktoken_oracle
from gputok.backends import FallbackWarning, device_tables, hostplan
from gputok.backends.driver import DeviceBackend
from gputok.patterns import O200K
from gputok.stages.pack import Documents
from gputok.stages.scan import scanner_for_pattern
from gputok.stages.scan_o200k import encode_o200k_spans, o200k_span_start
from gputok.stages.scan_rules import X
from gputok.unicode import nfc_unsafe, normalize
from devicekit import (EDGE, ORDER_IDS, ORDERS, assert_pieces_like_regex, assert_same,
                       corpus_snippets, device_entries, e2e_docs, emu_device, pack, specials_of,
                       one_segment, tiny_encoding, tricky_texts)

# characters that exercise every o200k rule: cases (Lu, Ll, Lt, Lm, Lo), marks after letters
# and after non-letters, contraction letters in both cases (and the long s that folds to s),
# apostrophes, "/", CR/LF, digits of several scripts, blanks
O200K_ALPHABET = list("aAzZéÉßǅʰ中日ﾟ\u0301\u0300\u093f\u0915\u0903012٣²'’ \t\n\r\x0b\x85"
                      "\u00a0\u3000.,!?-_/\\\"#*+<=>@[]^`{|}~😀👍🏽\u200d\ufe0f\u017f"
                      "sStTlLvVeErRdDmM") + [
    "'s", "'ll", "'VE", "'Re", "\r\n", "  ", "123", "4567", "\n\n  ", "\u0301\u0301", "x's's",
    "A\u0301B", "ǅA", "ʰA", "/\n/", "!\r\n/x", "'S'T", "aB\u0301C", " \u0301", "\n\u0301x"]


def o200k_texts(n: int, seed: int, max_len: int = 30) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(O200K_ALPHABET) for _ in range(rng.randrange(0, max_len)))
            for _ in range(n)]


def reference_starts(text: str) -> list[int]:
    sc = scanner_for_pattern(O200K)
    sc._setup()
    cps = [ord(ch) for ch in text]
    k = [int(v) for v in sc._cls[np.array(cps, np.int64)]] if cps else []
    return encode_o200k_spans(k + [X] * 3, cps + [0] * 3, sc._letters)


# ---------------------------------------------------------------- 1. the rules in Python

def test_matcher_equals_the_regex_on_fuzzed_text():
    rx = scanner_for_pattern(O200K)._compiled()
    texts = o200k_texts(fuzz_examples(4000), seed=1) + EDGE
    bad = [t for t in texts if reference_starts(t) != [m.start() for m in rx.finditer(t)]]
    assert not bad, f"{len(bad)} texts differ, first {bad[0]!r}"


def test_matcher_equals_the_regex_on_the_corpora():
    rx = scanner_for_pattern(O200K)._compiled()
    docs = [d for kind in testdata.KINDS for d in testdata.corpus(kind, max_mb=0.1)]
    bad = [d for d in docs if reference_starts(d) != [m.start() for m in rx.finditer(d)]]
    assert not bad and len(docs) > 20


def test_span_starts_are_piece_starts_in_every_parse():
    """Every span start is a piece start of the regex, and the irregular configurations of the
    vectorised scanner (a mark after a non-letter, chained contractions) hold none."""
    rx = scanner_for_pattern(O200K)._compiled()
    sc = scanner_for_pattern(O200K)
    sc._setup()
    for t in o200k_texts(fuzz_examples(1500), seed=2):
        k = [int(v) for v in sc._cls[np.array([ord(c) for c in t], np.int64)]] if t else []
        spans = [i for i in range(len(t)) if o200k_span_start(k[i - 1] if i else X, k[i])]
        assert set(spans) <= {m.start() for m in rx.finditer(t)}, t
    assert reference_starts("x's's") == [0, 3]  # the second "'s" is a word with a prefix
    assert reference_starts("!\u0301a") == [0]  # the mark is punctuation, "a" its word
    assert reference_starts("ab\u0301C") == [0, 3]  # the mark ends the word


# ---------------------------------------------------------------- 2. encode_o200k.cu

def o200k_docs() -> list[str]:
    return list(corpus_snippets()) + EDGE + tricky_texts(120, seed=11) + o200k_texts(300, 5)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_device_o200k_pretok_matches_regex(order, seed):
    enc = tiny_encoding(O200K)
    be = DeviceBackend(emu_device(order, seed))
    assert be.model_plan(enc.model).mode == "device"
    docs = o200k_docs()
    buf, off = pack(docs)
    pstart, spec, doc_entry = got = device_entries(be, enc, buf, off)
    assert_pieces_like_regex(docs, buf, off, got, O200K, 'device_coverage')
    assert be.dev.launches["encode_o200k_spans"] == 1 and "encode_pretok_spans" not in \
        be.dev.launches


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_device_o200k_with_special_tokens_matches_host_paths(order, seed):
    enc = gputok.get_encoding("o200k_harmony")
    tokens = sorted(enc.special_tokens_set)[:3]
    rng = random.Random(seed)
    docs = [a + rng.choice(tokens) + b for a, b in zip(o200k_texts(80, 7), o200k_texts(80, 8))]
    docs += [tokens[0] * 2, f"x's{tokens[1]}'s", f"\u0301{tokens[0]}\u0301", ""]
    buf, off = pack(docs)
    sp = specials_of(enc, buf, off, tokens)
    dev = device_entries(DeviceBackend(emu_device(order, seed)), enc, buf, off, sp)
    split = device_entries(DeviceBackend(emu_device(order, seed), pretok="split"), enc, buf,
                           off, sp)
    for a, b in zip(dev, split):
        np.testing.assert_array_equal(a, b)
    assert len(sp[0]) >= 80


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
@pytest.mark.parametrize("name", ["o200k_base", "o200k_harmony"])
def test_emulated_o200k_pipeline_matches_tiktoken_without_fallbacks(name, order, seed):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = e2e_docs()[::2] + o200k_texts(60, 9, 60)
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=6000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, [tk.encode_ordinary(d) for d in docs])
    assert not be.fallbacks and be.dev.launches["encode_o200k_spans"] > 2


# ---------------------------------------------------------------- 3. encode_nfc.cu

NFD_DOCS = ["e\u0301t\u00e9 caf\u0065\u0301 ", "\u1100\u1161\u11a8 한국어", "x\u0301\u0302\u0323y",
            "\u0301start", "end\u0301", "Å\u030a ﬁ \u2126 \u212b", "plain", ""]


def nfd(texts):
    return [normalize("NFD", t) for t in texts]


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_quick_check_kernel_flags_what_nfc_unsafe_flags(order, seed):
    enc = hf_encoding("qwen2")
    be = DeviceBackend(emu_device(order, seed))
    plan = be.model_plan(enc.model)
    assert plan.norm_form == "NFC"
    docs = NFD_DOCS + nfd(corpus_snippets()[::4]) + list(corpus_snippets()[1::4])
    buf, _ = pack(docs)
    got = be.stages.nfc_check(plan.tables, len(buf), be.dev.upload([np.frombuffer(buf,
                                                                                   np.uint8)])[0])
    text = buf.decode()
    cps = np.array([ord(c) for c in text], np.uint32)
    first_byte = np.cumsum([0] + [len(c.encode()) for c in text[:-1]])
    np.testing.assert_array_equal(got, first_byte[nfc_unsafe(cps)])
    assert len(got) > 20


SPAN_TOKEN = "<|endoftext|>"
SPAN_DOCS = [f"a\u0301{SPAN_TOKEN}\u0301b", "\u0301\u0301", f"e\u0301{SPAN_TOKEN}", "ok"]


@pytest.mark.parametrize("extra", [[], ["x\uffff\u0301"]], ids=["joined", "one-by-one"])
def test_host_spans_normalise_like_the_whole_segment(extra):
    """``normal_spans`` + the splice give HF's NFC of every segment; token spans are kept.
    (A U+FFFF in a span: the spans cannot be joined for one normaliser call, each is done on
    its own.)"""
    tok = SPAN_TOKEN
    docs = SPAN_DOCS + nfd(NFD_DOCS) + extra
    buf, off = pack(docs)
    ss = np.array([buf.index(tok.encode()), buf.index(tok.encode(), 10)], np.int64)
    se, sid = ss + len(tok), np.array([7, 7], np.uint32)
    hc = hostplan.prepare("device", None, buf, off, (ss, se, sid), 0, len(docs))
    data = np.frombuffer(buf, np.uint8)
    cps = np.array([ord(c) for c in buf.decode()], np.uint32)
    first = np.flatnonzero((data & 0xC0) != 0x80)
    new, spans, nbytes = hostplan.splice_normalized(hc, first[nfc_unsafe(cps)], "NFC")
    chunk, noff, nss, nse, _ = new.raw
    got = [chunk[a:b].decode() for a, b in zip(noff[:-1], noff[1:])]
    assert got == [tok.join(normalize("NFC", p) for p in d.split(tok)) for d in docs]
    assert [chunk[a:b].decode() for a, b in zip(nss, nse)] == [tok, tok]
    # the spans, counted plainly: per segment, each run of unsafe characters and the
    # character before it (when the segment has one)
    want_spans = want_bytes = 0
    for d in docs:
        for seg in d.split(tok):
            unsafe = nfc_unsafe(np.array([ord(c) for c in seg], np.uint32)).tolist()
            for i, u in enumerate(unsafe):
                if u and (i == 0 or not unsafe[i - 1]):
                    want_spans += 1
                    want_bytes += len(seg[i - 1].encode()) if i else 0
                want_bytes += len(seg[i].encode()) if u else 0
    assert (spans, nbytes) == (want_spans, want_bytes) and want_spans > 10
    assert new.n == len(chunk) < len(buf)


@pytest.mark.parametrize("order,seed", ORDERS, ids=ORDER_IDS)
def test_qwen2_nfd_input_matches_hf_with_only_the_flagged_spans_on_the_host(order, seed):
    enc, hf = hf_encoding("qwen2"), hf_oracle("qwen2")
    clean = list(corpus_snippets()[::3])
    docs = nfd(NFD_DOCS) + nfd(corpus_snippets()[1::6]) + clean
    sp = sorted(enc.special_tokens_set)[0]
    docs.append(f"e\u0301{sp}\u0301x")
    be = DeviceBackend(emu_device(order, seed), chunk_bytes=5000)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be, docs, want, allowed=frozenset([sp]))
    assert not be.fallbacks
    # the host normalised exactly the spans normal_spans gives for the flagged characters
    buf, off = pack(docs)
    data = np.frombuffer(buf, np.uint8)
    cps = np.array([ord(c) for c in buf.decode()], np.uint32)
    first = np.flatnonzero((data & 0xC0) != 0x80)
    a = buf.index(sp.encode())
    bounds = np.unique(np.concatenate([off, [a, a + len(sp)]]))
    starts, ends = hostplan.normal_spans(data, first[nfc_unsafe(cps)], bounds)
    assert be.host_normalized == {"spans": len(starts), "bytes": int((ends - starts).sum())}
    # already-NFC text: the check runs, nothing comes back to the host
    be2 = DeviceBackend(emu_device(order, seed), chunk_bytes=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert_same(enc, be2, clean, [e.ids for e in hf.encode_batch(clean,
                                                                     add_special_tokens=False)])
    assert not be2.host_normalized and not be2.fallbacks
    assert be2.dev.launches["encode_nfc_flags"] >= 2 and "encode_nfc_compact" not in \
        be2.dev.launches


def test_unsafe_bitmap_is_the_pinned_table():
    from gputok.unicode import unsafe_table

    for form in ("NFC", "NFKC"):
        bits = device_tables.unsafe_bits(form)
        cps = np.arange(0x110000)
        np.testing.assert_array_equal(((bits[cps >> 5] >> (cps & 31)) & 1).astype(bool),
                                      unsafe_table(form))


# ---------------------------------------------------------------- 4. the fallback count

COVERAGE = [pytest.param(n, id=n) for n in gputok.list_encoding_names()] + [
    pytest.param(k, id=k) for k in sorted(HF_FILES)]


@pytest.mark.parametrize("name", [p.values[0] for p in COVERAGE], ids=[p.id for p in COVERAGE])
def test_every_encoding_and_tokenizer_json_runs_with_zero_fallbacks(name):
    enc = hf_encoding(name) if name in HF_FILES else gputok.get_encoding(name)
    be = DeviceBackend(emu_device("shuffle", 3), chunk_bytes=4000)
    docs = nfd(NFD_DOCS) + NFD_DOCS + list(corpus_snippets()[::5]) + o200k_texts(20, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), frozenset(), frozenset())
    assert dict(be.fallbacks) == {}
    plan = be.plan(enc.model)
    assert plan["pretok"].startswith("device") and plan["normalize"] != "host"
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == \
        [enc.encode(d, disallowed_special=()) for d in docs]


# ---------------------------------------------------------------- 5. dialect-neutral headers

METAL_HEADER = """// gpuemu: header
#include <metal_stdlib>
using namespace metal;
#include "common/o200k_rules.h"
#include "common/nfc_check.h"
"""
METAL_BODY = """// gpuemu: name=o2check inputs=buf:uint8,mark:uint8,cls:uint8,letters:uint8,bits:uint32 \
outputs=out:int64,unsafe:uint32,ent:uint32 header=hdr.metal
uint i = thread_position_in_grid.x;
long n = (long)buf_shape[0] - 1;
if ((long)i < n) {
  O2Text t;
  enc_span_text(t, buf, mark, cls, letters, (uint)letters_shape[0], n);
  out[i] = cls[i] == ENC_O_CONT ? -1 : o200k_match(t, (long)i);
  unsafe[i] = nfc_unsafe_at(buf, n, bits, (long)i) ? 1u : 0u;
  enc_spans_at(t, (long)i, ent);
}
"""


def test_common_headers_run_in_the_metal_dialect(tmp_path):
    """kernels/common/o200k_rules.h and nfc_check.h compile as Metal (the emulator's strict
    shim) and compute there what the Python reference computes: the matcher's end from every
    character of one segment, the piece starts of the span threads, the quick-check flags."""
    from emulator import check_metal_file
    from gputok.stages.scan_o200k import o200k_match

    (tmp_path / "hdr.metal").write_text(METAL_HEADER)
    (tmp_path / "body.metal").write_text(METAL_BODY)
    kern = check_metal_file(tmp_path / "body.metal")
    sc = scanner_for_pattern(O200K)
    sc._setup()
    text = "".join(o200k_texts(30, 21)) + "e\u0301\u1100\u1161"
    data, mark, cls, first, cps = one_segment(text, sc._cls, 15)  # 15: ENC_O_CONT
    n = len(data) - 1
    out, unsafe, ent = kern(inputs=[data, mark, cls, np.asarray(sc._letters, np.uint8),
                                    device_tables.unsafe_bits("NFC")],
                            output_shapes=[(n,), (n,), (n,)],
                            output_dtypes=[np.int64, np.uint32, np.uint32],
                            grid=(n, 1, 1), threadgroup=(32, 1, 1))
    k = [int(v) for v in sc._cls[cps]] + [X] * 3
    ends = np.append(first, n)
    want = [int(ends[o200k_match(k, cps.tolist() + [0] * 3, sc._letters, c)])
            for c in range(len(cps))]
    assert out[first].tolist() == want
    starts = encode_o200k_spans(k, cps.tolist() + [0] * 3, sc._letters)  # enc_spans_at
    np.testing.assert_array_equal(np.flatnonzero(ent), first[starts])
    np.testing.assert_array_equal(np.flatnonzero(unsafe), first[nfc_unsafe(cps)])


# ---------------------------------------------------------------- 6. SentencePiece BPE

SPM_DOCS = ["Hello [INST] world </s>", "  two  spaces ", "日本語 😀", "", "\u2581x", "a" * 300]


@pytest.mark.parametrize("name", ["mistral_v1", "mistral_v7", "mistral_v3:legacy",
                                  "mistral_v3:metaspace_split", "botchan_bpe"])
def test_sentencepiece_runs_on_the_device_with_no_host_stage(name, tmp_path):
    """SentencePiece ``.model`` files and SPM-style tokenizer.json on the emulated device: the
    merge, the cuts and the normaliser on the device (encode_spm.cu: the identity normaliser
    read as the kernels go, botchan's charsmap rewriting the chunk), no fallback at all. The
    ids are the host stages' (sentencepiece's and HF's: test_families.py)."""
    import json

    import families as F

    base, _, shape = name.partition(":")
    if shape:
        (tmp_path / "t.json").write_text(json.dumps(F.spm_tokenizer_json(F.model_source(base),
                                                                         shape=shape)))
        enc = gputok.load(tmp_path / "t.json")
    else:
        (tmp_path / "m.model").write_bytes(F.model_source(base))
        enc = gputok.load(tmp_path / "m.model")
    be = DeviceBackend(emu_device("shuffle", 3), chunk_bytes=4000)
    docs = SPM_DOCS + list(corpus_snippets()[::5])
    allowed = frozenset(enc.special_tokens_set)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ids, off = be.encode(enc.model, Documents(docs), allowed, frozenset())
    assert dict(be.fallbacks) == {}
    plan = be.plan(enc.model)
    assert all(plan[k].startswith("device") for k in ("normalize", "pretok", "merge", "emit"))
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == [
        enc.encode(d, allowed_special="all") for d in docs]
    assert be.dev.launches["encode_spm_merge"] >= 2
