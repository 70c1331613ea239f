"""gputok's new families against their oracles on the real corpora (batch path; numpy and native).

    SentencePiece .model      gputok == sentencepiece       (Mistral v1/v2/v3/v7, botchan,
                                                            models trained in the tests)
    SPM-style tokenizer.json  gputok == HF tokenizers       (3 shapes x 2 models)
    WordPiece tokenizer.json  gputok == HF tokenizers       (uncased, cased, no CJK spacing)
    GGUF (written here)       gputok == the source tokenizer

Each kind of corpus is capped at ``$GPUTOK_FAMILY_GPUTOK_MB`` MB (default 0.4; 0 means the whole
``$GPUTOK_CORPUS_MB`` corpus, 2 MB per kind by default). Every test prints its document and
byte counts; the mismatch count must be 0, on the numpy backend and on the native CPU device
(when a C++ compiler exists: WordPiece and SentencePiece run their kernels there). (The cpu_ref
specs meet the same corpora in
``test_parity_families.py``.)
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

import families as F
import gputok
import testdata


def _docs(corpora, extra=()) -> list[str]:
    raw = os.environ.get("GPUTOK_FAMILY_GPUTOK_MB", "").strip()
    cap = int(float(raw or 0.4) * 1_000_000) or None
    out = list(extra)
    for kind in corpora:
        total = 0
        for d in corpora[kind]:
            if cap is not None and total >= cap:
                break
            out.append(d)
            total += len(d.encode("utf-8"))
    return out


def _backends() -> list:
    from gputok.backends import native

    return ["numpy"] + (["native"] if native.available()[0] else [])


def _check(label, enc, docs, want, **kw):
    from gputok.backends import FallbackWarning

    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    for backend in _backends():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)  # counted; asserted elsewhere
            ids, off = enc.encode_batch_arrays(docs, backend=backend, **kw)
        got = [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]
        bad = [i for i in range(len(docs)) if got[i] != want[i]]
        print(f"\n[parity] gputok {label} ({backend}): {len(docs)} docs, {nbytes / 1e6:.2f} MB, "
              f"{sum(map(len, want))} tokens, {len(bad)} mismatched")
        assert not bad, f"{label} ({backend}): first mismatched doc {docs[bad[0]][:80]!r}"


def _load(data: bytes, tmp_path, name="m.model"):
    p = tmp_path / name
    p.write_bytes(data)
    return gputok.load(p)


@pytest.mark.parametrize("name", list(testdata.SPM_MODELS) + ["user_defined", "ws_suffix",
                                                              "nfkc_cf_bytes"])
def test_spm_model_vs_sentencepiece(name, corpora, tmp_path):
    data = F.model_source(name)
    enc, sp = _load(data, tmp_path), F.spm_oracle(data)
    docs = _docs(corpora, testdata.botchan_lines()[:500])
    _check(f"spm {name}", enc, docs, [sp.encode(d) for d in docs], disallowed_special=())


@pytest.mark.parametrize("shape", F.SHAPES)
@pytest.mark.parametrize("name", ["mistral_v3", "botchan_bpe"])
def test_spm_tokenizer_json_vs_hf(name, shape, corpora, tmp_path):
    cfg = F.spm_tokenizer_json(F.model_source(name), shape=shape)
    hf = F.hf_oracle_for(cfg)
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc = gputok.load(tmp_path / "tokenizer.json")
    docs = _docs(corpora)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    _check(f"hf-spm {name} {shape}", enc, docs, want, allowed_special="all")


@pytest.mark.parametrize("variant", [{}, {"lowercase": False}, {"handle_chinese_chars": False}],
                         ids=["uncased", "cased", "no_cjk"])
def test_wordpiece_vs_hf(variant, corpora, tmp_path):
    from tokenizers import Tokenizer

    cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
    cfg["normalizer"].update(variant)
    (tmp_path / "tokenizer.json").write_text(json.dumps(cfg), "utf-8")
    enc = gputok.load(tmp_path / "tokenizer.json")
    hf = Tokenizer.from_str(json.dumps(cfg))
    hf.no_truncation()
    hf.no_padding()
    docs = _docs(corpora)
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    _check(f"wordpiece {variant}", enc, docs, want, allowed_special="all")


@pytest.mark.parametrize("name", ["qwen2", "mistral_v7", "minilm"])
def test_gguf_vs_source(name, corpora, tmp_path):
    from tokenizers import Tokenizer

    if name == "qwen2":
        cfg = json.loads(testdata.vocab_path("qwen2_tokenizer_json").read_text("utf-8"))
        path = F.gguf_from_tokenizer_json(cfg, tmp_path / "x.gguf", pre="qwen2")
        hf, kw = F.hf_oracle_for(cfg), {"allowed_special": "all"}
    elif name == "minilm":
        src = testdata.family_path("minilm_tokenizer_json")
        path = F.gguf_from_wordpiece(json.loads(src.read_text("utf-8")), tmp_path / "x.gguf")
        hf, kw = Tokenizer.from_file(str(src)), {"allowed_special": "all"}
        hf.no_truncation()
        hf.no_padding()
    else:
        path, hf = F.gguf_from_spm(F.model_source(name), tmp_path / "x.gguf"), None
        sp, kw = F.spm_oracle(F.model_source(name)), {"disallowed_special": ()}
    docs = _docs(corpora)
    want = ([e.ids for e in hf.encode_batch(docs, add_special_tokens=False)] if hf is not None
            else [sp.encode(d) for d in docs])
    _check(f"gguf {name}", gputok.load(path), docs, want, **kw)
