"""gputok's SentencePiece BPE paths: ``.model`` files and SPM-style ``tokenizer.json`` files.

Every check is a chain: the oracle (sentencepiece, HF ``tokenizers``) == the spec (``cpu_ref``)
== gputok, on the single-text path (``encode``) and the batch path (``encode_batch_arrays``,
numpy backend). Models: Mistral v1/v2/v3/v7, botchan (nmt_nfkc), models trained here with other
options, and models crafted piece by piece (ties, -0.0, UNUSED, CONTROL, USER_DEFINED pieces).
WordPiece is ``test_wordpiece.py``, GGUF ``test_gguf_loader.py``, corpora
``test_parity_families_gputok.py``.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import families as F
import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref import spm_proto
from cpu_ref.charsmap import CharsMap as RefCharsMap
from cpu_ref.hf_spm import RefHFSpm
from cpu_ref.spm import RefSentencePiece
from gputok.components.normalizers.charsmap import CharsMap, build_blob
from gputok.components.segmenters.hf_charbpe import HFSpmFamily
from gputok.components.segmenters.spm_bpe import SpmFamily
from gputok.loaders import spm_model
from gputok.stages import counters, reset_counters
from test_cpu_ref_spm import EDGES, _crafted_model

MODELS = list(testdata.SPM_MODELS) + list(F.TRAINED)


def load_bytes(data: bytes, tmp_path, name: str = "m.model") -> gputok.Encoding:
    path = tmp_path / name
    path.write_bytes(data)
    return gputok.load(path)


_CACHE: dict = {}


def trio(name: str):
    """(gputok Encoding, cpu_ref spec, sentencepiece) of a pinned or trained model."""
    if name not in _CACHE:
        data = F.model_source(name)
        enc = gputok.Encoding.from_model(spm_model.model_from_spec(
            spm_model.parse(data), name, where=name))
        _CACHE[name] = enc, RefSentencePiece(data), F.spm_oracle(data)
    return _CACHE[name]


def batch(enc, texts, **kw) -> list:
    ids, off = enc.encode_batch_arrays(texts, backend="numpy", **kw)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


# ---- the .model reader -------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_proto_reader_equals_spec(name):
    data = F.model_source(name)
    got, want = spm_model.parse(data), spm_proto.parse_model(data)
    assert list(zip(got.pieces, got.scores, got.types)) == want.pieces
    ns, ts = want.normalizer_spec, want.trainer_spec
    assert (got.charsmap, got.add_dummy_prefix, got.remove_extra_whitespaces,
            got.escape_whitespaces, got.normalizer_name) == (
        ns.precompiled_charsmap, ns.add_dummy_prefix, ns.remove_extra_whitespaces,
        ns.escape_whitespaces, ns.name)
    assert (got.model_type, got.byte_fallback, got.treat_whitespace_as_suffix,
            got.unk_surface) == (ts.model_type, ts.byte_fallback, ts.treat_whitespace_as_suffix,
                                 ts.unk_surface)


def test_load_sniffs_the_format_by_content(tmp_path):
    data = F.model_source("mistral_v7")
    enc = load_bytes(data, tmp_path, "no_extension")
    assert isinstance(enc.model.segmenter, SpmFamily) and enc.name == "no_extension"
    assert enc.encode("Hello world") == F.spm_oracle(data).encode("Hello world")
    with pytest.raises(ValueError, match="pat_str and special_tokens come from the file"):
        gputok.load(tmp_path / "no_extension", pat_str="gpt2")


def test_reader_errors_name_file_and_problem(tmp_path):
    unk = ("<unk>", 0.0, spm_proto.UNKNOWN)
    good = F.model_bytes([unk, ("a", -1.0, 1)])
    bad = tmp_path / "broken.model"
    bad.write_bytes(good[:-3])
    with pytest.raises(ValueError, match="broken.model: not a SentencePiece model: .*"
                                         "(truncated|claims)"):
        gputok.load(bad)
    cases = [([unk], {"model_type": 3}, "model_type WORD is not supported"),
             ([unk, ("a", 0.0, 1), ("a", -1.0, 1)], {}, "'a' is defined twice"),
             ([unk, ("<0x00>", 0.0, spm_proto.BYTE)], {"byte_fallback": True},
              "byte pieces are missing"),
             ([("a", 0.0, 1)], {}, "no UNKNOWN piece and no byte fallback")]
    for pieces, trainer, msg in cases:
        with pytest.raises(ValueError, match=f"x.model: .*{msg}"):
            load_bytes(F.model_bytes(pieces, trainer=trainer), tmp_path, "x.model")
    # unknown fields are skipped, as protobuf does
    assert spm_model.parse(good + b"\xa0\x06\x01").pieces == spm_model.parse(good).pieces


def test_no_sentencepiece_protobuf_or_tokenizers_at_run_time():
    want = F.spm_oracle(F.model_source("mistral_v3")).encode("Hello world [INST]")
    code = ("import sys, gputok\n"
            f"enc = gputok.load({str(testdata.family_path('mistral_v3'))!r})\n"
            f"assert enc.encode('Hello world [INST]', disallowed_special=()) == {want!r}\n"
            f"wp = gputok.load({str(testdata.family_path('minilm_tokenizer_json'))!r})\n"
            "assert wp.encode('Hello world') == [7592, 2088]\n"
            "bad = [m for m in sys.modules if m.startswith(('sentencepiece', 'google.protobuf',"
            " 'tokenizers', 'gguf', 'cpu_ref'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=testdata.Path(__file__).parent.parent)


# ---- the charsmap and the normaliser --------------------------------------------------------------

@pytest.mark.parametrize("name", ["botchan_bpe", "nfkc_cf_bytes"])
def test_charsmap_rules_vs_spec(name):
    """Every 97th rule of the table, alone and in context: same rule, and a candidate there."""
    blob = spm_proto.parse_model(F.model_source(name)).normalizer_spec.precompiled_charsmap
    ref, ours = RefCharsMap(blob), CharsMap(blob)
    keys = sorted(ref.rules())[::97]
    assert len(keys) > 2000
    for key in keys:
        k = key.decode("utf-8")
        for text in (k, f"a{k}b", f"{k}{k}"):
            data, bpos = text.encode("utf-8"), 0
            cand = set(ours.candidates(np.frombuffer(text.encode("utf-32-le"), np.uint32))[0]
                       .tolist())
            for i, ch in enumerate(text):
                r = ref.lookup(data, bpos)
                want = None if r is None else (len(data[bpos:bpos + r[0]].decode()),
                                               r[1].decode())
                assert ours.lookup(text, i) == want, (text, i)
                assert want is None or i in cand, (text, i)
                bpos += len(ch.encode("utf-8"))


def test_charsmap_builder_round_trips():
    rules = {b"\t": b" ", "A\u0300".encode(): "\u00c0".encode(), b"ab": b"X", b"a": b"Y",
             "\u3000".encode(): b" ", b"abc": b""}
    blob = build_blob(rules)
    assert RefCharsMap(blob).rules() == rules
    cm = CharsMap(blob)
    assert cm.lookup("xabc", 1) == (3, "") and cm.lookup("xab", 1) == (2, "X")
    assert cm.lookup("a", 0) == (1, "Y") and cm.lookup("b", 0) is None


@pytest.mark.parametrize("name", MODELS)
def test_normalizer_vs_spec_and_sentencepiece(name):
    enc, ref, sp = trio(name)
    norm = enc.model.normalizer
    for text in EDGES + ["\u00a0 x \u3000", "a\tb", " \t ", "\u200b", " \u200b a"]:
        assert norm.normalize(text) == ref.normalizer.normalize(text) == sp.normalize(text), text


# ---- encoding --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_edges_vs_spec_and_sentencepiece(name):
    enc, ref, sp = trio(name)
    want = [sp.encode(t) for t in EDGES]
    assert [ref.encode_ordinary(t) for t in EDGES] == want
    assert [enc.encode_ordinary(t) for t in EDGES] == want
    assert batch(enc, EDGES, disallowed_special=()) == want


@pytest.mark.parametrize("name", MODELS)
def test_corpus_sample_vs_sentencepiece(name, corpora):
    enc, ref, sp = trio(name)
    docs = [d[:3000] for kind in corpora for d in corpora[kind][:6]]
    docs += testdata.botchan_lines()[:200]
    want = [sp.encode(d) for d in docs]
    assert batch(enc, docs, disallowed_special=()) == want
    assert [enc.encode_ordinary(d) for d in docs[:20]] == want[:20]
    assert [ref.encode_ordinary(d) for d in docs[:20]] == want[:20]


def test_hand_derived_merges_and_ties(tmp_path):
    u = ("<unk>", 0.0, spm_proto.UNKNOWN)
    pieces = [u, ("a", -5.0, 1), ("b", -5.0, 1), ("c", -5.0, 1), ("ab", -1.0, 1),
              ("bc", -2.0, 1), ("abc", -0.5, 1), ("aa", -3.0, 1)]
    enc = load_bytes(F.model_bytes(pieces, normalizer={"add_dummy_prefix": False}), tmp_path)
    assert enc.encode("abc") == [6]  # "ab" (-1) beats "bc" (-2), then "ab" + "c"
    assert enc.encode("aaa") == [7, 1]  # a tie: the leftmost pair
    assert enc.encode("xxa") == [0, 1]  # a run of unknown characters is one unk
    data = F.model_bytes(pieces, normalizer={"add_dummy_prefix": False})
    assert enc.encode("x x") == F.spm_oracle(data).encode("x x") == [0]  # "x▁x": one run
    # -0.0 ranks below +0.0; equal scores tie (leftmost); 1 = "a", 3 = "c", 4 = "ab", 5 = "bc"
    for left, right, want in [(-0.0, 0.0, [1, 5]), (0.0, -0.0, [4, 3]), (0.0, 0.0, [4, 3]),
                              (-2.0, -1.0, [1, 5]), (-1.0, -1.0, [4, 3])]:
        pieces = [u, ("a", -9.0, 1), ("b", -9.0, 1), ("c", -9.0, 1), ("ab", left, 1),
                  ("bc", right, 1)]
        data = F.model_bytes(pieces, normalizer={"add_dummy_prefix": False})
        assert load_bytes(data, tmp_path).encode("abc") == want == F.spm_oracle(data).encode("abc")


def test_crafted_models_vs_sentencepiece(tmp_path):
    rng = random.Random(20261124)
    for k in range(fuzz_examples(120)):
        data = _crafted_model(rng)
        enc, sp = load_bytes(data, tmp_path), F.spm_oracle(data)
        texts = ["".join(rng.choice("ab▁c  xé日") for _ in range(rng.randint(0, 30)))
                 for _ in range(25)]
        want = [sp.encode(t) for t in texts]
        assert [enc.encode_ordinary(t) for t in texts] == want, k
        assert batch(enc, texts, disallowed_special=()) == want, k
        assert [enc.decode(w) for w in want] == [sp.decode(w) for w in want], k


def test_unused_pieces_take_the_sentence_wide_path(tmp_path):
    """A trained model with 30% of its multi-character pieces turned UNUSED: the split-back map
    is sentence-wide, so such a model is merged a sentence at a time (and still agrees)."""
    proto = spm_proto.parse_model(F.trained_model("user_defined"))
    rng = random.Random(7)
    pieces = [(p, s, spm_proto.UNUSED if t == spm_proto.NORMAL and len(p) > 1
               and rng.random() < 0.3 else t) for p, s, t in proto.pieces]
    ns = proto.normalizer_spec
    data = F.model_bytes(pieces, normalizer=dict(
        name=ns.name, precompiled_charsmap=ns.precompiled_charsmap,
        add_dummy_prefix=ns.add_dummy_prefix, remove_extra_whitespaces=ns.remove_extra_whitespaces))
    enc, sp = load_bytes(data, tmp_path), F.spm_oracle(data)
    assert enc.model.segmenter.sentence_wide
    lines = testdata.botchan_lines()[:300]
    reset_counters()
    assert batch(enc, lines, disallowed_special=()) == [sp.encode(t) for t in lines]
    assert counters["spm.agenda"] > 250 and counters["charbpe.spans"] == 0
    assert not trio("mistral_v7")[0].model.segmenter.sentence_wide


def test_cuts_and_spans_are_exact(corpora):
    """Spans are cut only between characters no mergeable piece has side by side, and every
    user-defined match is a span: spans repeat (the piece cache works on them)."""
    enc, ref, _ = trio("user_defined")
    inner = ref.inner_pairs()
    fam = enc.model.segmenter
    ud = enc.model.normalizer.ud_regex
    n_cuts = n_ud = 0
    for text in EDGES + [d[:2000] for kind in corpora for d in corpora[kind][:3]]:
        norm = enc.model.normalizer.normalize(text)
        (spans,) = enc.model.pieces_batch([text])
        assert "".join(spans) == norm
        bounds = {b for m in ud.finditer(norm) for b in m.span()}
        pos = 0
        for s in spans[:-1]:
            pos += len(s)
            n_cuts += 1
            n_ud += pos in bounds
            assert (norm[pos - 1], norm[pos]) not in inner or pos in bounds, (text[:40], pos)
    assert n_cuts > 1000 and n_ud > 0


def test_long_inputs_merge_in_n_log_n(tmp_path):
    """One span of 200K characters (a run with no cut) takes the heap merge on the host (the
    numpy backend; ``encode`` runs on the default backend, the native device's long-span merge
    where there is one), and agrees."""
    enc, _, sp = trio("mistral_v1")
    text = "ab" * 100_000 + " " + "\u2581" * 3000
    assert enc.encode(text) == sp.encode(text)
    reset_counters()
    assert batch(enc, [text]) == [sp.encode(text)]
    assert counters["merge.long"] >= 1


def test_specials_contract():
    enc, ref, _ = trio("mistral_v3")
    with pytest.raises(ValueError, match="allowed_special"):
        enc.encode("hi [INST] there")
    ids = enc.encode("hi [INST] there", allowed_special={"[INST]"})
    assert ids == ref.encode("hi [INST] there", allowed_special={"[INST]"})
    assert ids == enc.encode_ordinary("hi ") + [3] + enc.encode_ordinary(" there")
    assert enc.encode("<s>", disallowed_special=()) == enc.encode_ordinary("<s>")
    assert "[INST]" in enc.special_tokens_set and enc.eot_token == 2  # "</s>"
    assert batch(enc, ["a [INST] b"], allowed_special="all") == [
        ref.encode("a [INST] b", allowed_special="all")]


def test_unk_runs_fuse_across_span_cuts():
    """botchan has no byte fallback: a run of unknown characters is one unk id even where the
    run is cut into several spans, and runs in separate sentences stay apart."""
    enc, ref, sp = trio("botchan_bpe")
    text = "日本語 x ЖЖ😀\u0400Ж|x"
    assert enc.encode_ordinary(text) == sp.encode(text) == ref.encode_ordinary(text)
    assert batch(enc, [text, "日本", "", "x日"], disallowed_special=()) == [
        sp.encode(text), sp.encode("日本"), [], sp.encode("x日")]
    want = enc.encode_ordinary("日") + [1] + enc.encode_ordinary("本")
    assert enc.encode("日<s>本", allowed_special="all") == want
    assert want == ref.encode("日<s>本", allowed_special="all")


@settings(max_examples=fuzz_examples(), deadline=None)
@given(st.lists(st.sampled_from(list("ab c\t\n▁éﬁ１日😀<>s/") + ["</s>", "[INST]", "  ", "[REF]"]),
                max_size=40).map("".join))
def test_fuzz_vs_sentencepiece(text):
    for name in ("mistral_v7", "botchan_bpe", "user_defined", "ws_suffix", "nfkc_cf_bytes"):
        enc, _, sp = trio(name)
        assert enc.encode_ordinary(text) == sp.encode(text), name


# ---- decoding --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_decode_vs_sentencepiece(name):
    enc, ref, sp = trio(name)
    rng = random.Random(5)
    n = sp.get_piece_size()
    byte_ids = [i for i in range(n) if sp.is_byte(i)]
    special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)][:5]
    for _ in range(300):
        pool = [rng.randrange(n) for _ in range(8)] + special
        if byte_ids:
            pool += rng.sample(byte_ids, 6)
        ids = [rng.choice(pool) for _ in range(rng.randint(0, 12))]
        assert enc.decode(ids) == sp.decode(ids) == ref.decode(ids), ids
    for text in EDGES:
        ids = sp.encode(text)
        assert enc.decode(ids) == sp.decode(ids), text
    with pytest.raises(KeyError, match="invalid token"):
        enc.decode([n])


def test_decode_bytes_stream_and_single_tokens():
    enc, _, sp = trio("mistral_v7")
    text = "  Grüße 😀 [INST] x\n"
    ids = enc.encode(text, disallowed_special=())
    assert enc.decode(ids) == sp.decode(ids)
    assert enc.decode_bytes(ids) == sp.decode(ids).encode("utf-8")
    # a lone byte piece: sentencepiece gives U+FFFD per byte that starts no character
    part = [i for i in sp.encode("\U0010fffd") if sp.is_byte(i)][1:3]
    assert enc.decode(part) == sp.decode(part) == "\ufffd\ufffd"
    assert enc.decode_bytes(part) == "\U0010fffd".encode()[1:3]
    with pytest.raises(UnicodeDecodeError):
        enc.decode(part, errors="strict")
    dec = enc.stream_decoder()
    assert "".join(dec.feed([i]) for i in ids) + dec.flush() == sp.decode(ids)
    assert enc.encode_single_token("▁the") == sp.piece_to_id("▁the")
    assert enc.decode_single_token_bytes(sp.piece_to_id("▁the")) == b" the"
    assert enc.decode_single_token_bytes(sp.piece_to_id("<0x41>")) == b"A"
    assert enc.n_vocab == sp.get_piece_size() and enc.id_dtype == np.uint16


# ---- SPM-style tokenizer.json ---------------------------------------------------------------------

HF_EDGES = ["", " ", "  ", "   a  b  ", "\t\n", "<s> </s> [INST] hi [/INST]x", "ﬁ ｆｕｌｌ ① Ⅻ",
            "日本語テキスト😀😀 x", "x▁y▁ ", "▁▁▁", "▁ ▁", "é e\u0301", "\x00\x01 a", "<s>",
            " <s>  a</s>", "<s>hello", "\U0010ffff\ue000", "[INST][INST]", "a" * 300, "x\u0400ЖЖx"]
HF_CASES = [(m, s, o) for m in ("mistral_v3", "botchan_bpe", "user_defined") for s in F.SHAPES
            for o in ((True, True), (False, True), (False, False))]


@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: f"{c[0]}-{c[1]}-bf{int(c[2][0])}"
                                                         f"-fuse{int(c[2][1])}")
def test_spm_tokenizer_json_vs_hf(case, corpora):
    name, shape, (bf, fuse) = case
    cfg = F.spm_tokenizer_json(F.model_source(name), shape=shape, byte_fallback=bf, fuse_unk=fuse)
    hf = F.hf_oracle_for(cfg)
    enc = gputok.Encoding.from_model(_hf_model(cfg))
    assert isinstance(enc.model.segmenter, HFSpmFamily)
    docs = HF_EDGES + [d[:1500] for kind in corpora for d in corpora[kind][:3]]
    want = [hf.encode(d, add_special_tokens=False).ids for d in docs]
    assert batch(enc, docs, allowed_special="all") == want
    assert [enc.encode(d, allowed_special="all") for d in HF_EDGES] == want[:len(HF_EDGES)]
    ref = RefHFSpm(cfg)
    assert [ref.encode(d, allowed_special="all") for d in HF_EDGES] == want[:len(HF_EDGES)]
    rng = random.Random(11)
    n = hf.get_vocab_size()
    for _ in range(100):
        ids = [rng.randrange(n) for _ in range(rng.randint(0, 8))]
        ids += [rng.randrange(3, 259) for _ in range(rng.randint(0, 4))]
        rng.shuffle(ids)
        assert enc.decode(ids) == hf.decode(ids), ids


def _hf_model(cfg):
    from gputok.loaders.hf_json import _model

    return _model(cfg, "spm-json", "digest")


def test_hf_unk_order_quirk_and_ignore_merges():
    """Byte tokens for some bytes only: an unknown character falls back to unk when one of its
    bytes has no token, and a pending fused unk comes out *after* byte tokens emitted while it
    waited (HF's order). With ignore_merges a word that is a token is one id."""
    cfg = F.spm_tokenizer_json(F.model_source("botchan_bpe"), shape="metaspace_split")
    vocab = cfg["model"]["vocab"]
    n = len(vocab)
    for b in (0xE6, 0x97, 0xA5, 0xD0):  # "日" = E6 97 A5 has byte tokens, "Ж" = D0 96 not all
        vocab[f"<0x{b:02X}>"] = n
        n += 1
    cfg["model"]["byte_fallback"] = True
    hf = F.hf_oracle_for(cfg)
    enc = gputok.Encoding.from_model(_hf_model(cfg))
    for text in ["ЖЖ日x", "Ж日Ж", "a ЖЖ 日日 Ж"]:
        want = hf.encode(text, add_special_tokens=False).ids
        assert enc.encode(text) == want == RefHFSpm(cfg).encode(text), text
    cfg["model"]["ignore_merges"] = True
    vocab["▁thequick"] = n
    hf = F.hf_oracle_for(cfg)
    enc = gputok.Encoding.from_model(_hf_model(cfg))
    text = "thequick thequickx the quick"
    assert enc.encode(text) == hf.encode(text, add_special_tokens=False).ids
    assert enc.encode(text)[0] == n


def test_hf_unsupported_fields_are_refused(tmp_path):
    import json

    cfg = F.spm_tokenizer_json(F.model_source("botchan_bpe"))
    cases = [("model", "dropout", 0.1, "model.dropout is not supported"),
             ("pre_tokenizer", None, {"type": "Whitespace"}, "pre_tokenizer 'Whitespace' is not"),
             ("normalizer", None, {"type": "Strip"}, "normalizer 'Strip' is not supported")]
    for where, key, value, msg in cases:
        bad = json.loads(json.dumps(cfg))
        if key is None:
            bad[where] = value
        else:
            bad[where][key] = value
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=f"tokenizer.json: {msg}"):
            gputok.load(path)
    bad = json.loads(json.dumps(cfg))
    bad["added_tokens"][0]["normalized"] = True
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="normalized: true is not supported"):
        gputok.load(path)


def test_export_refuses_other_families(tmp_path):
    from gputok.export import save_hf_json, save_tiktoken

    enc = trio("botchan_bpe")[0]
    for save in (save_hf_json, save_tiktoken):
        with pytest.raises(ValueError, match="botchan_bpe is a SentencePiece BPE model: only byte-level"):
            save(enc, tmp_path / "x")


def test_family_docstring_examples_run():
    import doctest
    import importlib

    for name in ("gputok.components.normalizers.charsmap", "gputok.components.segmenters.charbpe",
                 "gputok.components.segmenters.spm_bpe", "gputok.components.normalizers.spm",
                 "gputok.components.pretokenizers.bert", "gputok.components.bert_steps",
                 "gputok.components.segmenters.wordpiece",
                 "gputok.loaders.spm_model", "gputok.loaders.gguf", "gputok.loaders.gguf_pre",
                 "gputok.components.segmenters.unigram", "gputok.components.segmenters.trie",
                 "gputok.components.segmenters.wordlevel", "gputok.components.pretokenizers",
                 "gputok.components.normalizers", "gputok.components.decoders",
                 "gputok.components.postprocessors",
                 "gputok.components.decoders.chains", "gputok.components.decoders.spm",
                 "gputok.components.segmenters.pieces"):
        mod = importlib.import_module(name)
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted > 0, name
