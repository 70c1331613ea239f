"""SentencePiece BPE models with user-defined pieces AND a rewriting normaliser (a charsmap,
collapsed whitespace, whitespace as suffix) on the native device: no host stage.

The normaliser takes the longest user-defined piece at a position first (copied as it is, never
rewritten: THE USER-DEFINED MATCH of ``kernels/common/spm_norm_rules.h``), else the charsmap;
the BPE then takes the user-defined pieces again in the normalised sentence, each one frozen
symbol. Models are trained here with ``spm_train`` (botchan, offline) with pieces that overlap
each other, that the charsmap would rewrite (full-width letters, "ﬁ", "①"), that hold or start
or end with a space, with byte fallback on and off, whitespace collapsed or kept, whitespace as
suffix, nfkc_cf. Every path (``encode``, ``encode_ordinary``, ``encode_batch``,
``encode_batch_arrays``; special tokens allowed and not; one and two threads, several chunks)
equals sentencepiece and the numpy backend on the project's corpora and a fuzz of 2,400 texts,
and the native backend counts no fallback.
"""

from __future__ import annotations

import io
import random
import re
import warnings

import pytest

import families as F
import gputok
import testdata
from gputok.backends import FallbackWarning, get_backend
from gputok.backends.spm_tables import spm_tables

UD = ["ab", "abc", "bcd", "cd", "b", "ＡＢ", "ﬁ", "①", "ｂｃ", "the cat", "▁the", " x", "y ",
      "東京", "<s>x", "a\u0301"]
# name -> spm_train options (BPE on botchan; the default normaliser is nmt_nfkc)
MODELS = {
    "ud_nfkc": dict(vocab_size=800),
    "ud_nfkc_bytes": dict(vocab_size=800, byte_fallback=True),
    "ud_keep_ws": dict(vocab_size=800, remove_extra_whitespaces=False),
    "ud_keep_ws_bytes": dict(vocab_size=800, remove_extra_whitespaces=False,
                             byte_fallback=True),
    "ud_suffix": dict(vocab_size=700, treat_whitespace_as_suffix=True),
    "ud_nfkc_cf": dict(vocab_size=700, normalization_rule_name="nfkc_cf", byte_fallback=True),
    "ud_identity_keep": dict(vocab_size=600, normalization_rule_name="identity",
                             remove_extra_whitespaces=False, add_dummy_prefix=False),
}

EDGE = ["", " ", "  ", "ab", "abc", "abcd", "bcd", "abcbcd", "aabcd", "ＡＢ", "ＡＢＣ", "ａｂｃ",
        "ﬁ", "ﬁx ﬁ", "①②", "ｂｃ", "the cat", "the  cat", " the cat ", "▁the", "▁▁the",
        "the", " x", "x", "xx y y", "y  ", "東京都", "<s>x", "<s>", "<ctl>ab<ctl>", "a\u0301b",
        "á", "  ab  ", "\tab\n", "ab" * 200, " " * 50 + "ab", "\u3000ab\u3000", "ﬁﬁﬁ",
        "Ａb", "AB", "a b c d"]
ALPHABET = ["a", "b", "c", "d", "x", "y", " ", "  ", "\t", "\n", "\u3000", "▁", "ＡＢ", "Ａ",
            "ｂ", "ｃ", "ﬁ", "①", "東", "京", "é", "\u0301", "😀", "<s>", "<ctl>", "the", "cat",
            "\u00a0", "ab", "abc", "A"] + UD


@pytest.fixture(scope="module", params=list(MODELS))
def model(request, tmp_path_factory):
    """(name, Encoding, sentencepiece processor) of one trained model."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(testdata.botchan_lines()), model_writer=buf, model_type="bpe",
        num_threads=1, shuffle_input_sentence=False, minloglevel=2, user_defined_symbols=UD,
        control_symbols=["<ctl>"], **MODELS[request.param])
    data = buf.getvalue()
    path = tmp_path_factory.mktemp("spmud") / f"{request.param}.model"
    path.write_bytes(data)
    return request.param, gputok.load(path), F.spm_oracle(data)


def fuzz(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 30)))
            for _ in range(n)]


@pytest.fixture(scope="module")
def docs() -> list[str]:
    out = list(EDGE) + fuzz(2400, 11)
    for kind in testdata.KINDS:
        out += [d[:3000] for d in testdata.corpus(kind, max_mb=0.05)[:15]]
    return out + testdata.botchan_lines()[:200]


def oracle(enc, sp, text: str, allowed: bool) -> list:
    """sentencepiece's ids; with special tokens allowed, each segment between them is a
    sentence of its own (gputok's contract, cpu_ref.spm)."""
    if not allowed:
        return sp.encode(text)
    specials = sorted(enc.special_tokens_set, key=lambda s: (-len(s), s))
    out: list = []
    for k, part in enumerate(re.split("(" + "|".join(map(re.escape, specials)) + ")", text)):
        out += [enc.encode_single_token(part)] if k % 2 else sp.encode(part)
    return out


def native(threads: int):
    from gputok.backends import native as nat

    if not nat.available()[0]:
        pytest.skip("no C++ compiler: the native device is unavailable")
    return nat.create(threads=threads, chunk_bytes=8192)  # (several chunks a batch)


def batch(enc, docs, be, allowed: bool) -> list:
    kw = dict(allowed_special="all") if allowed else dict(disallowed_special=())
    ids, off = enc.encode_batch_arrays(docs, backend=be, **kw)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


def test_the_native_device_takes_the_normaliser(model):
    _, enc, _ = model
    t = spm_tables(enc.model)
    assert t.normalizer in ("rewrite", "device") and len(t.ud_trie)
    assert get_backend("native").plan(enc.model)["normalize"].startswith("device")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("allowed", [False, True], ids=["ordinary", "specials"])
def test_batches_equal_sentencepiece_with_no_fallback(model, docs, threads, allowed):
    _, enc, sp = model
    want = [oracle(enc, sp, d, allowed) for d in docs]
    be = native(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = batch(enc, docs, be, allowed)
        lists = (enc.encode_batch(docs, backend=be, allowed_special="all") if allowed else
                 enc.encode_batch(docs, backend=be, disallowed_special=()))
    bad = [(d, g, w) for d, g, w in zip(docs, got, want) if g != w]
    assert not bad, bad[:3]
    assert lists == want
    assert not be.fallbacks
    assert be.dev.launches["encode_spm_merge"] >= 2  # (several chunks, on the device)


def test_the_numpy_backend_agrees(model, docs):
    _, enc, sp = model
    for allowed in (False, True):
        assert batch(enc, docs, "numpy", allowed) == [oracle(enc, sp, d, allowed) for d in docs]


@pytest.mark.parametrize("threads", [1, 2])
def test_single_texts_equal_sentencepiece_with_no_fallback(model, docs, threads):
    """``encode`` / ``encode_ordinary`` of one text: the native text call, which finds the
    user-defined pieces in the normalised text itself (and the general path with specials)."""
    _, enc, sp = model
    be = native(threads)
    texts = docs[:600]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ordinary = [enc.encode_ordinary(d, backend=be) for d in texts]
        plain = [enc.encode(d, backend=be, disallowed_special=()) for d in texts]
        special = [enc.encode(d, backend=be, allowed_special="all") for d in texts]
    want = [sp.encode(d) for d in texts]
    assert ordinary == want and plain == want
    assert special == [oracle(enc, sp, d, True) for d in texts]
    assert not be.fallbacks


def test_cpu_devices_without_the_one_call_count_the_host_normaliser(model):
    """The emulated CUDA device (the kernels take no trie): the same ids, the normaliser on
    the host, counted."""
    from devicekit import emu_device
    from gputok.backends.driver import DeviceBackend

    _, enc, sp = model
    be = DeviceBackend(emu_device())
    texts = EDGE[:20]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert batch(enc, texts, be, False) == [sp.encode(d) for d in texts]
    t = spm_tables(enc.model)
    assert be.fallbacks == ({("normalize", "host"): 1} if t.normalizer == "rewrite" else {})
