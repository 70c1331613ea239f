"""HF's ``Precompiled`` normaliser (``components/normalizers/precompiled.py``) and the grapheme
clusters it walks (``unicode/graphemes.py``, data pinned in ``graphemes.ucd``), against HF
``tokenizers`` itself; and T5-style Unigram tokenizer.json files (Precompiled + WhitespaceSplit
+ Metaspace) loaded and encoded as HF does."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import numpy as np
import pytest

import families as F
import gputok
from cpu_ref import hf_spm
from gputok.components.normalizers.charsmap import CharsMap, build_blob
from gputok.components.normalizers.precompiled import PrecompiledNormalizer
from gputok.train.spm_options import charsmap_blob
from gputok.unicode import graphemes

CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def _hf(blob: bytes):
    from tokenizers import normalizers

    return normalizers.Precompiled(blob)


def _both(blob: bytes):
    return PrecompiledNormalizer(CharsMap(blob)), _hf(blob)


def test_what_joins_a_letter_equals_hf_on_every_code_point():
    """"a" + c for every code point c, with a rule for "a" alone: HF replaces the whole cluster
    (c vanishes) exactly where c extends the letter (GB9, GB9a; never after a control)."""
    blob = build_blob({b"a": b"X"})
    ours, hf = _both(blob)
    text = "\n".join("a" + chr(c) for c in CPS)
    got, want = ours.normalize(text), hf.normalize_str(text)
    assert got == want
    assert want.count("X\n") > 2000  # (the marks: thousands of them join)


def test_prepend_characters_equal_hf():
    """c + "a" with a rule for c: the whole cluster where c is Prepend (GB9b)."""
    t = graphemes.table()
    prepend = np.flatnonzero((t & 15) == graphemes.PREPEND).tolist()
    rng = random.Random(5)
    others = rng.sample([c for c in CPS if c > 0x7F and (t[c] & 15) != graphemes.PREPEND], 3000)
    probe = prepend + others
    blob = build_blob({chr(c).encode(): b"#" for c in probe})
    ours, hf = _both(blob)
    text = "\n".join(chr(c) + "a" for c in probe)
    got, want = ours.normalize(text), hf.normalize_str(text)
    assert got == want
    assert want.split("\n")[:len(prepend)] == ["#"] * len(prepend)  # (every Prepend joins)


TRICKY = ["a", "A", "é", "e\u0301", "²", "²\u0301", "ａ", "ｱ", "ｶ\u3099", "ﾞ", "\u0301", "\u0308",
          "\r", "\n", "\r\n", "\t", " ", "  ", "\u3000", "\u00a0", "\u200d", "\ufe0f", "😀",
          "👍🏽", "🇯🇵", "①", "ﬁ", "Å", "\u212b", "\u1100\u1161", "가", "\u0915\u094d\u0937",
          "\u0600a", "\x01", "\x00", "x\u0903", "Ⅻ", "㍿", "\u2028", "ǅ", "\U0001d400",
          "\u0e33", "\u0ec8"]


def _model_charsmap(name: str) -> bytes:
    from cpu_ref.spm_proto import parse_model

    return parse_model(F.model_source(name)).normalizer_spec.precompiled_charsmap


@pytest.mark.parametrize("rule", ["nmt_nfkc", "nfkc_cf_bytes", "nmt_nfkc_cf_ws_pieces"])
def test_fuzz_equals_hf(rule):
    """The charsmaps of nmt_nfkc, nfkc_cf and nmt_nfkc_cf (models trained with them)."""
    blob = charsmap_blob(rule) if rule == "nmt_nfkc" else _model_charsmap(rule)
    assert blob
    ours, hf = _both(blob)
    rng = random.Random(rule)
    texts = ["".join(rng.choice(TRICKY) for _ in range(rng.randrange(0, 30)))
             for _ in range(3000)]
    texts += ["".join(chr(rng.choice(CPS)) for _ in range(rng.randrange(1, 20)))
              for _ in range(2000)]
    bad = [t for t in texts if ours.normalize(t) != hf.normalize_str(t)]
    assert not bad, [ascii(t) for t in bad[:5]]


def test_clusters_equal_the_rule_on_hand_cases():
    def cut(s):
        st = graphemes.cluster_starts(np.array([ord(c) for c in s], np.int64)).tolist()
        return [s[a:b] for a, b in zip(st, st[1:])]

    assert cut("e\u0301x") == ["e\u0301", "x"]
    assert cut("\r\n\n") == ["\r\n", "\n"]
    assert cut("\r\u0301") == ["\r", "\u0301"]  # GB4 before GB9
    assert cut("🇯🇵🇺") == ["🇯🇵", "🇺"]  # GB12/13
    assert cut("👨\u200d👩") == ["👨\u200d👩"]  # GB11
    assert cut("\u0915\u094d\u0937") == ["\u0915\u094d\u0937"]  # GB9c
    assert cut("\u1100\u1161\u11a8") == ["\u1100\u1161\u11a8"]  # GB6, GB7
    assert cut("\u0600a") == ["\u0600a"]  # GB9b
    assert cut("") == []


# ---- T5-style tokenizer.json files -----------------------------------------------------------

def t5_json(model: bytes, byte_fallback: bool = False) -> dict:
    """A tokenizer.json as the converters write one for a SentencePiece Unigram model (T5's
    shape): Precompiled + Replace(" {2,}"), WhitespaceSplit + Metaspace, the pieces' scores."""
    from cpu_ref.spm_proto import parse_model

    m = parse_model(model)
    vocab = [[p, score] for p, score, _ in m.pieces]
    unk = next(i for i, (_, _, t) in enumerate(m.pieces) if t == 2)
    charsmap = m.normalizer_spec.precompiled_charsmap
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": p, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, (p, _, t) in enumerate(m.pieces) if t in (2, 3)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
             "split": True}]},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                    "split": True},
        "model": {"type": "Unigram", "unk_id": unk, "vocab": vocab,
                  "byte_fallback": byte_fallback},
    }


@pytest.mark.parametrize("name", ["botchan_unigram", "kyoto_unigram"])
@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_t5_style_files_equal_hf(name, backend, corpora, tmp_path):
    from tokenizers import Tokenizer

    cfg = t5_json(F.unigram_source(name))
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg))
    enc, hf = gputok.load(path), Tokenizer.from_file(str(path))
    rng = random.Random(9)
    docs = [d[:3000] for kind in corpora for d in corpora[kind][:8]]
    docs += ["".join(rng.choice(TRICKY + [" word", "Test "]) for _ in range(rng.randrange(1, 40)))
             for _ in range(400)]
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ids, off = enc.encode_batch_arrays(docs, backend=backend, disallowed_special=())
    got = [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]
    bad = [i for i in range(len(docs)) if got[i] != want[i]]
    assert not bad, [ascii(docs[i][:80]) for i in bad[:3]]
    assert [enc.encode_ordinary(d) for d in docs[:50]] == want[:50]
    norm = cfg["normalizer"]
    assert [hf_spm.normalize(norm, d) for d in docs[-400:]] == \
        [hf.normalizer.normalize_str(d) for d in docs[-400:]]


def test_malformed_charsmap_is_refused(tmp_path):
    cfg = t5_json(F.unigram_source("botchan_unigram"))
    for bad in ("", "!!notbase64", base64.b64encode(b"\x01\x00").decode()):
        cfg["normalizer"]["normalizers"][0]["precompiled_charsmap"] = bad
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps(cfg))
        with pytest.raises(ValueError, match="Precompiled"):
            gputok.load(path)


def test_pinned_data_file_is_what_the_generator_writes(tmp_path):
    got = graphemes.generate(tmp_path / "g.ucd")
    pinned = (graphemes.store.load("graphemes")).meta
    if got["source"] != pinned["source"]:
        pytest.skip(f"another regex release ({got['source']} vs {pinned['source']})")
    assert (tmp_path / "g.ucd").read_bytes() == \
        (Path(graphemes.__file__).parent / "data" / "graphemes.ucd").read_bytes()


def test_short_emoji_zwj_sequence_is_one_cluster():
    """GB11 decides a short cluster: "©" ZWJ "©" (7 bytes) is one cluster, each character looked
    up alone (the ZWJ stays); "©" ZWJ "a" splits, and "©" ZWJ (5 bytes) is replaced whole."""
    blob = build_blob({"\u00a9".encode(): b"(c)"})
    ours, hf = _both(blob)
    for text in ("\u00a9\u200d\u00a9", "\u00a9\u200da", "x\u00a9\u200d\u00a9\u200d\u00a9"):
        assert ours.normalize(text) == hf.normalize_str(text)
    assert hf.normalize_str("\u00a9\u200d\u00a9") == "(c)\u200d(c)"
    assert hf.normalize_str("\u00a9\u200da") == "(c)a"


def test_controls_before_a_mark_equal_hf():
    """c + U+0301 with a rule for c: every Control/CR/LF code point and every default-ignorable
    one (GB4 keeps the mark out of the cluster, so it survives; an unassigned default-ignorable
    is Control) and a sample of the rest (the mark joins and vanishes with c)."""
    import regex

    t = graphemes.table()
    g = t & 15
    ctrl = np.flatnonzero((g == graphemes.CONTROL) | (g == graphemes.CR)
                          | (g == graphemes.LF)).tolist()
    ignorable = [c for c in CPS if regex.match(r"\p{Default_Ignorable_Code_Point}", chr(c))]
    rng = random.Random(6)
    others = rng.sample([c for c in CPS if c > 0x7F and (t[c] & 15) == graphemes.OTHER], 2000)
    # (U+0000 too: HF's trie walk stops at a NUL byte, so a key of U+0000 never matches)
    probe = sorted(set(ctrl) | set(ignorable) | set(others))
    kept = vanished = 0
    for k in range(0, len(probe), 400):  # (the test builder is slow on thousands of keys)
        chunk = probe[k:k + 400]
        ours, hf = _both(build_blob({chr(c).encode(): b"#" for c in chunk}))
        text = " ".join(chr(c) + "\u0301" for c in chunk)
        got, want = ours.normalize(text), hf.normalize_str(text)
        assert got == want, (hex(chunk[0]), hex(chunk[-1]))
        kept += want.count("#\u0301")
        vanished += want.count("#") - want.count("#\u0301")
    assert kept >= len(ctrl) and vanished > 50  # (a 4-byte c and the mark: 6 bytes, kept)
