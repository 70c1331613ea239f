"""cpu_ref.spm (SentencePiece BPE) against sentencepiece itself.

Models: Mistral v1/v2/v3/v7 (byte fallback, control and user-defined pieces), sentencepiece's
botchan model (nmt_nfkc charsmap, no byte fallback), models trained here with other options, and
models crafted piece by piece (ties, -0.0, UNUSED pieces, one-character control pieces), which
sentencepiece loads from the same bytes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

import families as F
import testdata
from conftest import fuzz_examples
from cpu_ref import spm_proto
from cpu_ref.charsmap import CharsMap
from cpu_ref.spm import RefSentencePiece, score_key
from cpu_ref.spm import dense_ranks as spm_dense_ranks

MODELS = list(testdata.SPM_MODELS) + list(F.TRAINED)

EDGES = ["", " ", "  ", "   a  b  ", "\t", "\n\n", "a\tb\nc  ", " \u3000x\u00a0y ",
         "<s> </s> [INST] hi [/INST]", "<unk>", "[REFERENCE_DOC_1][REFERENCE_DOC_12]x[REF]",
         "ﬁ ｆｕｌｌ ① Ⅻ ㍿ ＡＢＣ", "日本語テキスト😀😀 x", "x▁y▁ ", "▁▁▁", "▁ ▁", "é e\u0301",
         "\x00\x01\x7f a", "abc abcd bcd the cat <s>x ﬁ [X] <ctl>", "\U0010ffff\ue000\ufffd",
         "a" * 300, " " * 50 + "b", "🏳️‍🌈👩‍👩‍👧", "Ǆ ǅ ǆ İ ß ﬀ", "x" + "\u0301" * 20]


@pytest.fixture(scope="module", params=MODELS)
def pair(request):
    data = F.model_source(request.param)
    return request.param, RefSentencePiece(data), F.spm_oracle(data)


# -- the ModelProto reader -----------------------------------------------------------------------

def test_reader_matches_sentencepiece(pair):
    name, ref, sp = pair
    assert ref.n_vocab == sp.get_piece_size()
    for i in range(ref.n_vocab):
        assert ref.pieces[i] == sp.id_to_piece(i)
        assert ref.scores[i] == sp.get_score(i)  # float32 values, compared exactly
        t = ref.types[i]
        assert (t == spm_proto.CONTROL, t == spm_proto.UNKNOWN, t == spm_proto.BYTE,
                t == spm_proto.UNUSED) == (sp.is_control(i), sp.is_unknown(i), sp.is_byte(i),
                                           sp.is_unused(i))


def test_reader_fields_of_trained_models():
    specs = {n: spm_proto.parse_model(F.trained_model(n)) for n in F.TRAINED}
    assert specs["ws_suffix"].trainer_spec.treat_whitespace_as_suffix
    assert specs["nfkc_cf_bytes"].trainer_spec.byte_fallback
    assert specs["nfkc_cf_bytes"].normalizer_spec.name == "nfkc_cf"
    keep = specs["identity_keep_ws"].normalizer_spec
    assert (keep.name, keep.add_dummy_prefix, keep.remove_extra_whitespaces,
            keep.precompiled_charsmap) == ("identity", False, False, b"")
    ud = specs["user_defined"]
    assert ud.trainer_spec.user_defined_symbols == F.TRAINED["user_defined"]["user_defined_symbols"]
    assert ud.trainer_spec.control_symbols == ["<ctl>"]
    assert {p for p, _, t in ud.pieces if t == spm_proto.USER_DEFINED} == set(
        F.TRAINED["user_defined"]["user_defined_symbols"])
    for name, m in specs.items():
        assert m.trainer_spec.model_type == 2, name
        assert len(m.pieces) == F.TRAINED[name]["vocab_size"], name


def test_reader_errors_name_the_problem(tmp_path):
    good = F.model_bytes([("<unk>", 0.0, spm_proto.UNKNOWN), ("a", -1.0, spm_proto.NORMAL)])
    with pytest.raises(spm_proto.ProtoError, match="truncated|claims"):
        spm_proto.parse_model(good[:-3])
    with pytest.raises(spm_proto.ProtoError, match="wire type 3"):
        spm_proto.parse_model(b"\x0b")
    bad = tmp_path / "broken.model"
    bad.write_bytes(good[:7])
    with pytest.raises(ValueError, match="broken.model: not a SentencePiece model"):
        RefSentencePiece(bad)
    # unknown fields are skipped, as protobuf does
    with_unknown_field = spm_proto.parse_model(good + b"\xa0\x06\x01")
    assert with_unknown_field.pieces == spm_proto.parse_model(good).pieces


def test_loading_needs_neither_sentencepiece_nor_protobuf():
    import subprocess
    import sys

    want = F.spm_oracle(F.model_source("mistral_v7")).encode("Hello world")
    code = ("import sys; from cpu_ref.spm import RefSentencePiece; "
            f"sp = RefSentencePiece({str(testdata.family_path('mistral_v7'))!r}); "
            f"assert sp.encode_ordinary('Hello world') == {want!r}; "
            "bad = [m for m in sys.modules if m.startswith(('sentencepiece', 'google.protobuf'))]; "
            "assert not bad, bad")
    root = testdata.Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root,
                   env={**testdata.os.environ, "PYTHONPATH": str(root)})


def test_model_validation():
    unk = ("<unk>", 0.0, spm_proto.UNKNOWN)
    with pytest.raises(ValueError, match="model_type UNIGRAM"):
        RefSentencePiece(F.model_bytes([unk], trainer={"model_type": 1}))
    with pytest.raises(ValueError, match="'a' is defined twice"):
        RefSentencePiece(F.model_bytes([unk, ("a", 0.0, 1), ("a", -1.0, 1)]))
    with pytest.raises(ValueError, match="256 byte pieces|byte pieces are missing"):
        RefSentencePiece(F.model_bytes([unk, ("<0x00>", 0.0, spm_proto.BYTE)],
                                       trainer={"byte_fallback": True}))


# -- the normaliser and its charsmap ---------------------------------------------------------

def test_charsmap_rules_vs_sentencepiece():
    """Every 40th rule of the nmt_nfkc and nfkc_cf tables, alone and in context."""
    for data in (F.model_source("botchan_bpe"), F.model_source("nfkc_cf_bytes")):
        ref, sp = RefSentencePiece(data), F.spm_oracle(data)
        rules = CharsMap(ref.model.normalizer_spec.precompiled_charsmap).rules()
        assert len(rules) > 1000
        keys = sorted(rules)[::40]
        for key in keys:
            k = key.decode("utf-8")
            for text in (k, f"a{k}b", f" {k} {k}"):
                assert ref.normalizer.normalize(text) == sp.normalize(text), text


def test_normalizer_edge_cases(pair):
    name, ref, sp = pair
    for text in EDGES:
        assert ref.normalizer.normalize(text) == sp.normalize(text), (name, text)


def test_hand_derived_normalization():
    spec = spm_proto.NormalizerSpec()  # defaults: dummy prefix, collapse spaces, escape them
    from cpu_ref.spm import SpmNormalizer
    assert SpmNormalizer(spec).normalize("  a  b ") == "▁a▁b"
    assert SpmNormalizer(spec).normalize("a▁ ") == "▁a"  # a literal trailing "▁" goes too
    assert SpmNormalizer(spec, treat_whitespace_as_suffix=True).normalize(" a b") == "a▁b▁"
    keep = spm_proto.NormalizerSpec(remove_extra_whitespaces=False, add_dummy_prefix=False)
    assert SpmNormalizer(keep).normalize(" a  b ") == "▁a▁▁b▁"


# -- encoding ----------------------------------------------------------------------------------

def test_edges_vs_sentencepiece(pair):
    name, ref, sp = pair
    for text in EDGES:
        assert ref.encode_ordinary(text) == sp.encode(text), (name, text)


def test_corpus_sample_vs_sentencepiece(pair, corpora):
    name, ref, sp = pair
    docs = [d[:3000] for kind in corpora for d in corpora[kind][:8]]
    docs += testdata.botchan_lines()[:200]
    bad = [i for i, d in enumerate(docs) if ref.encode_ordinary(d) != sp.encode(d)]
    assert not bad, f"{name}: first mismatch {docs[bad[0]][:80]!r}"


def test_hand_derived_merges():
    u = ("<unk>", 0.0, spm_proto.UNKNOWN)
    pieces = [u, ("a", -5.0, 1), ("b", -5.0, 1), ("c", -5.0, 1), ("ab", -1.0, 1),
              ("bc", -2.0, 1), ("abc", -0.5, 1), ("aa", -3.0, 1)]
    data = F.model_bytes(pieces, normalizer={"add_dummy_prefix": False})
    ref = RefSentencePiece(data)
    # "ab" (-1) beats "bc" (-2), then "ab"+"c" = "abc"; "aaa": a tie, the leftmost pair merges
    assert ref.encode_ordinary("abc") == [6]
    assert ref.encode_ordinary("aaa") == [7, 1]
    assert ref.encode_ordinary("xxa") == [0, 1]  # a run of unknown characters is one unk
    assert ref.encode_ordinary("abc") == F.spm_oracle(data).encode("abc")


def test_score_ties_and_negative_zero():
    """-0.0 ranks below +0.0 (sentencepiece compares float bit patterns); equal scores tie."""
    assert score_key(-0.0) < score_key(0.0) and score_key(-1e9) == score_key(-1e9)
    u = ("<unk>", 0.0, spm_proto.UNKNOWN)
    # (score of "ab", score of "bc") -> ids of "abc": the higher score merges first, a tie goes
    # to the leftmost pair ("ab"); 1 = "a", 3 = "c", 4 = "ab", 5 = "bc"
    # (a list, not a dict: -0.0 == 0.0 as dict keys)
    cases = [(-0.0, 0.0, [1, 5]), (0.0, -0.0, [4, 3]), (0.0, 0.0, [4, 3]), (-0.0, -0.0, [4, 3]),
             (-2.0, -1.0, [1, 5]), (-1.0, -1.0, [4, 3])]
    for left, right, want in cases:
        pieces = [u, ("a", -9.0, 1), ("b", -9.0, 1), ("c", -9.0, 1), ("ab", left, 1),
                  ("bc", right, 1)]
        data = F.model_bytes(pieces, normalizer={"add_dummy_prefix": False})
        assert F.spm_oracle(data).encode("abc") == want
        assert RefSentencePiece(data).encode_ordinary("abc") == want


def _crafted_model(rng: random.Random) -> bytes:
    """A random small model over "ab▁c": ties, -0.0, UNUSED, USER_DEFINED, CONTROL pieces."""
    scores = [-0.0, 0.0, -1.0, -2.0, 1.0, -1e9]
    pieces = [("<unk>", 0.0, spm_proto.UNKNOWN), ("<s>", 0.0, spm_proto.CONTROL)]
    seen = {"<unk>", "<s>"}
    if rng.random() < 0.3:  # a one-character control piece: spelled in text, it is unknown
        pieces.append(("x", 0.0, spm_proto.CONTROL))
        seen.add("x")
    for c in "ab▁c":
        if rng.random() < 0.9:
            pieces.append((c, rng.choice(scores), spm_proto.NORMAL))
            seen.add(c)
    for _ in range(rng.randint(3, 25)):
        s = "".join(rng.choice("ab▁c") for _ in range(rng.randint(2, 5)))
        if s not in seen:
            seen.add(s)
            kind = rng.choices([spm_proto.NORMAL, spm_proto.UNUSED, spm_proto.USER_DEFINED,
                                spm_proto.CONTROL], [8, 3, 1, 1])[0]
            pieces.append((s, rng.choice(scores), kind))
    bf = rng.random() < 0.3
    return F.model_bytes(pieces + (F.byte_pieces() if bf else []),
                         trainer={"byte_fallback": bf,
                                  "treat_whitespace_as_suffix": rng.random() < 0.2},
                         normalizer={"add_dummy_prefix": rng.random() < 0.5,
                                     "remove_extra_whitespaces": rng.random() < 0.5})


def test_crafted_models_vs_sentencepiece():
    rng = random.Random(20261123)
    for k in range(fuzz_examples(150)):
        data = _crafted_model(rng)
        ref, sp = RefSentencePiece(data), F.spm_oracle(data)
        for _ in range(25):
            text = "".join(rng.choice("ab▁c  xé日") for _ in range(rng.randint(0, 30)))
            ids = sp.encode(text)
            assert ref.encode_ordinary(text) == ids, (k, text)
            assert ref.decode(ids) == sp.decode(ids), (k, text)


def test_unused_pieces_are_split_back():
    """A trained model with 30% of its multi-character pieces turned UNUSED."""
    proto = spm_proto.parse_model(F.trained_model("user_defined"))
    rng = random.Random(7)
    pieces = [(p, s, spm_proto.UNUSED if t == spm_proto.NORMAL and len(p) > 1
               and rng.random() < 0.3 else t) for p, s, t in proto.pieces]
    ns = proto.normalizer_spec
    data = F.model_bytes(pieces, normalizer=dict(
        name=ns.name, precompiled_charsmap=ns.precompiled_charsmap,
        add_dummy_prefix=ns.add_dummy_prefix, remove_extra_whitespaces=ns.remove_extra_whitespaces))
    ref, sp = RefSentencePiece(data), F.spm_oracle(data)
    lines = testdata.botchan_lines()[:300]
    assert sum(sp.is_unused(i) for i in range(sp.get_piece_size())) > 100
    assert [ref.encode_ordinary(t) for t in lines] == [sp.encode(t) for t in lines]


def _rescan_rule(ref: RefSentencePiece, normalized: str) -> list[str]:
    """The merge rule stated plainly: rescan every pair, merge the best (leftmost on ties)."""
    syms = ref._symbols(normalized)
    while True:
        best = None
        for i in range(len(syms) - 1):
            (a, fa), (b, fb) = syms[i], syms[i + 1]
            j = None if fa or fb else ref._mergeable(a + b)
            if j is not None and (best is None or score_key(ref.scores[j]) > best[0]):
                best = (score_key(ref.scores[j]), i)
        if best is None:
            return [s for s, _ in syms]
        i = best[1]
        syms[i:i + 2] = [(syms[i][0] + syms[i + 1][0], False)]


@pytest.mark.parametrize("name", ["mistral_v3", "botchan_bpe", "user_defined"])
def test_agenda_equals_rescan_rule(name):
    ref = RefSentencePiece(F.model_source(name))
    for text in EDGES + testdata.botchan_lines()[:60]:
        norm = ref.normalizer.normalize(text)
        assert [w for w, _ in ref.encode_normalized(norm)] == _rescan_rule(ref, norm), text


@pytest.mark.parametrize("name", ["mistral_v1", "mistral_v7", "botchan_bpe", "user_defined",
                                  "ws_suffix"])
def test_spans_cut_at_non_inner_pairs_encode_independently(name, corpora):
    """The fast path's segmentation (see the module docstring): cutting the normalised sentence
    between characters that never sit side by side inside a mergeable piece changes nothing."""
    ref = RefSentencePiece(F.model_source(name))
    inner = ref.inner_pairs()
    docs = EDGES + [d[:2000] for kind in corpora for d in corpora[kind][:4]]
    cuts_seen = 0
    for text in docs:
        norm = ref.normalizer.normalize(text)
        cuts = [i for i in range(1, len(norm)) if (norm[i - 1], norm[i]) not in inner]
        cuts_seen += len(cuts)
        spans = [norm[a:b] for a, b in zip([0] + cuts, cuts + [len(norm)])]
        pieced = [p for span in spans for p in ref.encode_normalized(span)]
        assert pieced == ref.encode_normalized(norm), text[:60]
    assert cuts_seen > 1000


def test_dense_ranks_order_like_scores():
    ref = RefSentencePiece(F.model_source("mistral_v1"))
    ranks = spm_dense_ranks(ref.scores)
    assert len(set(ranks)) == len({score_key(s) for s in ref.scores})
    order = sorted(range(ref.n_vocab), key=lambda i: (-score_key(ref.scores[i]), i))
    assert [ranks[i] for i in order] == sorted(ranks)
    # Mistral's all-"▁" pieces share one score, hence one rank: a real tie
    spaces = [i for i, p in enumerate(ref.pieces) if set(p) == {"▁"} and len(p) > 1]
    assert len(spaces) > 3 and len({ranks[i] for i in spaces}) == 1


def test_surrogates_follow_tiktoken_repair(pair):
    name, ref, sp = pair
    # sentencepiece's binding refuses lone surrogates; gputok repairs them first
    assert ref.encode_ordinary("a\ud800b") == sp.encode("a\ufffdb")
    assert ref.encode_ordinary("\ud83d\ude00") == sp.encode("😀")


def test_specials_contract():
    ref = RefSentencePiece(F.model_source("mistral_v3"))
    with pytest.raises(ValueError, match="allowed_special"):
        ref.encode("hi [INST] there")
    ids = ref.encode("hi [INST] there", allowed_special={"[INST]"})
    assert ids == ref.encode_ordinary("hi ") + [3] + ref.encode_ordinary(" there")
    assert ref.encode("<s>", disallowed_special=()) == ref.encode_ordinary("<s>")


@settings(max_examples=fuzz_examples(), deadline=None)
@given(st.lists(st.sampled_from(list("ab c\t\n▁éﬁ１日😀<>s/") + ["</s>", "[INST]", "  "]),
                max_size=40).map("".join))
def test_fuzz_vs_sentencepiece(text):
    for name in ("mistral_v7", "botchan_bpe", "user_defined", "ws_suffix"):
        ref, sp = _cached(name)
        assert ref.encode_ordinary(text) == sp.encode(text), name


_CACHE: dict = {}


def _cached(name):
    if name not in _CACHE:
        data = F.model_source(name)
        _CACHE[name] = RefSentencePiece(data), F.spm_oracle(data)
    return _CACHE[name]


# -- decoding ----------------------------------------------------------------------------------

def test_decode_vs_sentencepiece(pair):
    name, ref, sp = pair
    rng = random.Random(5)
    n = ref.n_vocab
    byte_ids = [i for i in range(n) if sp.is_byte(i)]
    special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)][:5]
    for _ in range(300):
        pool = [rng.randrange(n) for _ in range(8)] + special
        if byte_ids:
            pool += rng.sample(byte_ids, 6)
        ids = [rng.choice(pool) for _ in range(rng.randint(0, 12))]
        assert ref.decode(ids) == sp.decode(ids), (name, ids)
    for text in EDGES:
        ids = sp.encode(text)
        assert ref.decode(ids) == sp.decode(ids), (name, text)
    with pytest.raises(ValueError, match="out of range"):
        ref.decode([n])
