"""The new families on the native CPU device (skipped only when the machine has no C++ compiler).

* WordPiece: ``kernels/encode_wordpiece.cu`` compiled by the host's C++ compiler
  (``gputok/backends/native/build.py``), run by the driver against HF ``tokenizers``.
  BertNormalizer + BertPreTokenizer run in the device's own pass (``kernels/host_bert.h``),
  which also gives each word as its pieces (the whole-word lookup, then the longest match,
  memoised), so the kernel only emits: no counted host stage, no ``encode_merge_*`` launch.
* SentencePiece: no kernel; the model runs on the host, a counted fallback (and WordPiece on
  a device adapter that says it has no encode_wordpiece form; Metal has one,
  ``tests/test_metal_coverage.py``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest

import gputok
import testdata
from gputok.backends import FallbackWarning, native

HAVE, WHY = native.available()
pytestmark = pytest.mark.skipif(not HAVE, reason=f"native backend unavailable: {WHY}")

EDGES = ["", " ", "[CLS] Héllo, Wörld! [SEP] 中文 don't [MASK]", "x" * 101 + " y" + "z" * 100,
         "İstanbul ΣΑΣ ǅ \x00\ufffd\u200b a\u0301\u0316\u0300 b", "ＡＢＣ１２３ 😀👍🏽 \U0010ffff",
         "unaffable ##able ## #", "\t\n\r\x0b\x0c\x85\u2028"]


def _pair(variant: dict, tmp_path):
    from tokenizers import Tokenizer

    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    cfg["normalizer"].update(variant)
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    hf = Tokenizer.from_str(json.dumps(cfg))
    hf.no_truncation()
    hf.no_padding()
    return gputok.load(tmp_path / "tokenizer.json"), hf


def _docs(corpora, cap: "int | None") -> list:
    out = list(EDGES)
    for kind in corpora:
        total = 0
        for d in corpora[kind]:
            if cap is not None and total >= cap:
                break
            out.append(d)
            total += len(d.encode("utf-8"))
    return out


@pytest.mark.parametrize("variant,cap", [({}, None), ({"lowercase": False}, 300_000),
                                         ({"handle_chinese_chars": False}, 300_000)],
                         ids=["uncased-full", "cased", "no_cjk"])
def test_native_wordpiece_vs_hf(variant, cap, corpora, tmp_path):
    enc, hf = _pair(variant, tmp_path)
    docs = _docs(corpora, cap)
    be = native.create(threads=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    bad = [i for i in range(len(docs)) if ids[off[i]:off[i + 1]].tolist() != want[i]]
    print(f"\n[native wordpiece {variant}] {len(docs)} docs, "
          f"{sum(len(d.encode('utf-8')) for d in docs) / 1e6:.2f} MB, {len(ids)} tokens, "
          f"{len(bad)} mismatched")
    assert not bad, f"first mismatched doc {docs[bad[0]][:80]!r}"
    assert be.dev.launches["encode_wordpiece"] >= 1
    assert not any(k.startswith("encode_merge") for k in be.dev.launches)
    # no host stage: BERT's normaliser and pre-tokenizer run in the device's own pass
    # (kernels/host_bert.h), the longest match in its kernel
    assert not be.fallbacks, dict(be.fallbacks)
    assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 0
    assert all(v.startswith("device") for k, v in be.plan(enc.model).items() if k != "split")


def test_native_wordpiece_one_call_paths_have_no_host_stage(corpora, tmp_path):
    """The one-call ``encode`` (short texts inline, long ones chunked) and ``encode_batch`` give
    HF's ids with no counted host stage (the BERT pass is the device's own)."""
    enc, hf = _pair({}, tmp_path)
    be = native.create(threads=2)
    long = " ".join(d for kind in corpora for d in corpora[kind][:20])
    texts = EDGES + [long[:200], long[:5000], long] + [corpora[k][0] for k in corpora]
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert [enc.encode(t, allowed_special="all", backend=be) for t in texts] == want
        assert enc.encode_batch(texts, allowed_special="all", backend=be) == want
    assert not be.fallbacks, dict(be.fallbacks)


def test_native_wordpiece_equals_numpy_stage_on_many_chunks(corpora, tmp_path):
    """Small chunks (many in flight on two streams) give the numpy backend's arrays."""
    enc, _ = _pair({}, tmp_path)
    docs = _docs(corpora, 100_000)
    be = native.create(threads=2, chunk_bytes=4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    want_ids, want_off = enc.encode_batch_arrays(docs, allowed_special="all", backend="numpy")
    assert be.dev.launches["encode_wordpiece"] > 10
    assert ids.dtype == want_ids.dtype and np.array_equal(off, want_off)
    assert np.array_equal(ids, want_ids)


def test_auto_backend_runs_wordpiece_on_native(tmp_path):
    """With no GPU, ``backend="auto"`` is the native device, and single texts agree with it."""
    from gputok import backends

    enc, hf = _pair({}, tmp_path)
    be = backends.get_backend("auto")
    if be.name != "native":
        pytest.skip(f"auto is {be.name} here (a GPU or no compiler)")
    text = EDGES[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ids, off = enc.encode_batch_arrays([text] * 3, allowed_special="all")
    want = hf.encode(text, add_special_tokens=False).ids
    assert ids[off[0]:off[1]].tolist() == want == enc.encode(text, allowed_special="all")


# ---- SentencePiece models on the device ------------------------------------------------------

@pytest.mark.parametrize("name", ["botchan_bpe", "mistral_v7"])
def test_native_sentencepiece_runs_on_the_device(name, corpora, tmp_path):
    """The char-level merge runs on the device (kernels/encode_spm.cu, one call per chunk), the
    normaliser too (Mistral's identity read by the kernels, botchan's nmt_nfkc charsmap
    rewriting each chunk first): no fallback, no warning. The ids are sentencepiece's."""
    import families as F

    data = F.model_source(name)
    (tmp_path / "m.model").write_bytes(data)
    enc, sp = gputok.load(tmp_path / "m.model"), F.spm_oracle(data)
    docs = _docs(corpora, 50_000) + testdata.botchan_lines()[:200]
    be = native.create(threads=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == [sp.encode(d) for d in docs]
    assert be.fallbacks == {}
    assert not any(issubclass(w.category, FallbackWarning) for w in caught)
    assert be.dev.launches["encode_spm_merge"] >= 2
    assert ("encode_spm_norm_len" in be.dev.launches) == (name == "botchan_bpe")
    plan = be.plan(enc.model)
    assert plan["merge"].startswith("device") and plan["normalize"].startswith("device")


def test_wordpiece_on_a_device_without_its_kernel_is_a_counted_host_fallback(tmp_path):
    """A device adapter without an encode_wordpiece form (``caps.kernels``; the Metal backend on the
    emulator, told here that its shader is missing, as a new device's first adapter would say):
    a WordPiece model runs on the host there, warned once and counted, with HF's ids."""
    pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")
    from emulator.mlx_bridge import metal_kernel_maker

    from gputok.backends import metal

    enc, hf = _pair({}, tmp_path)
    be = metal.emulated(metal_kernel_maker(order="forward", seed=0))
    assert be.dev.has_kernel("encode_wordpiece")  # shaders/encode_wordpiece.metal
    be.dev.caps = replace(be.dev.caps, kernels=be.dev.caps.kernels - {"encode_wordpiece"})
    assert not be.dev.has_kernel("encode_wordpiece") and be.dev.has_kernel("encode_merge_short")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, off = enc.encode_batch_arrays(EDGES, allowed_special="all", backend=be)
    assert [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])] == [
        e.ids for e in hf.encode_batch(EDGES, add_special_tokens=False)]
    assert be.fallbacks == {("merge", "WordPiece"): 1} and not be.dev.launches
    assert sum(issubclass(w.category, FallbackWarning) for w in caught) == 1
    assert be.plan(enc.model)["merge"].startswith("host")


def test_whole_words_are_resolved_in_the_cut_and_respect_the_word_cap(corpora, tmp_path):
    """THE WHOLE-WORD LOOKUP (kernels/host_bert.h): a word that is a vocabulary entry comes out
    of BERT's cut as its id; a word of more characters than ``max_input_chars_per_word`` is
    unk even where it is an entry (HF's rule), and ids equal HF's either way."""
    from tokenizers import Tokenizer

    from gputok.backends.native import pattern

    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    cfg["model"]["max_input_chars_per_word"] = 6
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc = gputok.load(tmp_path / "tokenizer.json")
    hf = Tokenizer.from_str(json.dumps(cfg))
    hf.no_truncation()
    hf.no_padding()
    docs = _docs(corpora, 100_000) + ["understanding international relationships", "abcdef"]
    be = native.create(threads=2)
    ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
    assert not be.fallbacks, dict(be.fallbacks)
    # the cut itself: resolved entries with the words, none without; the same ids
    seg = enc.model.segmenter
    pre = enc.model.front[1]
    data = "international understanding of the world, naïve café".encode()
    args = (data, np.array([0, len(data)], np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.int64), np.zeros(0, np.uint32))
    _, _, spec_with, _ = pattern.cutter(pre, pre.program(), 1, seg.whole_words).cut_chunk(*args)
    _, _, spec_without, _ = pattern.cutter(pre, pre.program(), 1).cut_chunk(*args)
    normal = np.uint32(0xFFFFFFFF)
    words = spec_with[:-1]
    assert (spec_without[:-1] == normal).all()
    resolved = words[words != normal].tolist()
    assert resolved and set(resolved) <= set(seg.vocab.values())
    assert seg.vocab["the"] in resolved and seg.vocab["world"] in resolved
    # a 13-character entry is past the cap: never resolved, the word is unk as in HF
    assert seg.vocab.get("international") not in resolved
    assert enc.encode("international", backend=be) == hf.encode(
        "international", add_special_tokens=False).ids == [seg.unk_id]


def _small_wordpiece(tmp_path, prefix: str, max_chars: int):
    """A small WordPiece vocabulary (most words several pieces, some unk) as HF and gputok."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    toks = ["[UNK]", "[PAD]"] + list("abcdeéñ中") + [prefix + c for c in "abcdeé"] + [
        "ab", "abc", "bad", "cab", "dé", prefix + "ab", prefix + "bad", prefix + "cc",
        prefix + "éa", "ñab", prefix + "ñ" + "a" * 10]  # (with "##": longer than the cap)
    vocab = {t: i for i, t in enumerate(dict.fromkeys(toks))}
    hf = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=prefix,
                                    max_input_chars_per_word=max_chars))
    hf.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    (tmp_path / "wp.json").write_text(hf.to_str(), "utf-8")
    return gputok.load(tmp_path / "wp.json"), hf


@pytest.mark.parametrize("prefix", ["##", "", "a"], ids=["hashes", "empty", "a-letter"])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_cut_matches_every_word_and_memoises_it_like_hf(prefix, threads, tmp_path):
    """THE WORDPIECE MATCH in BERT's cut (``kernels/host_bert.h``): every word comes out of the
    cut resolved, one entry per piece (none left for the kernel), and the ids equal HF's on
    words of several pieces, unk words (no match; past the character cap), multi-byte pieces
    and the longest first and later pieces; over 40,000 distinct words, so the memos of matched
    words fill and start over, and again on a second batch that finds them memoised."""
    import random

    from gputok.backends.native import pattern

    enc, hf = _small_wordpiece(tmp_path, prefix, 12)
    rng = random.Random(7)
    letters = "abcdeéñ中xa"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 14)))
             for _ in range(60_000)}
    words = sorted(words) + ["bñ" + "a" * 10, "bña" + "a" * 10, "abcabc", "x"]
    rng.shuffle(words)
    docs = [" ".join(words[i:i + 150]) + "," for i in range(0, len(words), 150)]
    assert len(words) > 40_000
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    assert any(len(w) > 1 for w in want) and any(hf.token_to_id("[UNK]") in w for w in want)
    be = native.create(threads=threads)
    for _ in range(2):
        ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=be)
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
    assert not be.fallbacks, dict(be.fallbacks)
    # the cut alone: no entry is left unresolved
    pre = enc.model.front[1]
    data = "\n".join(docs[:40]).encode()
    args = (data, np.array([0, len(data)], np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.int64), np.zeros(0, np.uint32))
    _, pstart, spec, _ = pattern.cutter(pre, pre.program(), threads,
                                        enc.model.segmenter.whole_words).cut_chunk(*args)
    assert len(spec) > 1 and (spec[:-1] != np.uint32(0xFFFFFFFF)).all()
    assert spec[:-1].tolist() == [i for e in hf.encode_batch(["\n".join(docs[:40])],
                                                             add_special_tokens=False)
                                  for i in e.ids]
