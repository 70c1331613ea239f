"""SentencePiece decoding (``gputok/components/decoders/spm.py``): ``decode`` and the streaming
decoder against sentencepiece's ``decode``, on random id sequences (byte pieces that form
characters, that do not, control pieces between them, unk, leading "▁" pieces), Mistral v7,
botchan and a trained model.

The streaming decoder returns a character as soon as its bytes are complete, and each call
costs its own ids: it never decodes the ids so far again.
"""

from __future__ import annotations

import random

import pytest

import families as F
import gputok
from conftest import fuzz_examples
from gputok.components.decoders import spm as detok

NAMES = ["mistral_v7", "botchan_bpe", "nfkc_cf_bytes"]
_ENC: dict = {}


def pair(name: str, tmp_path_factory):
    if name not in _ENC:
        p = tmp_path_factory.mktemp("m") / "m.model"
        p.write_bytes(F.model_source(name))
        _ENC[name] = gputok.load(p), F.spm_oracle(F.model_source(name))
    return _ENC[name]


def random_ids(sp, rng: random.Random, n: int) -> list:
    """Ids of every kind: text, byte pieces of real characters (whole, cut short, out of
    order), control pieces, unk, leading "▁" pieces."""
    size = sp.get_piece_size()
    bytes_of = {sp.piece_to_id(f"<0x{b:02X}>"): b for b in range(256)} if sp.is_byte(
        sp.piece_to_id("<0x41>")) else {}
    by_byte = {b: i for i, b in bytes_of.items()}
    out: list = []
    while len(out) < n:
        r = rng.random()
        if r < 0.4:
            out.append(rng.randrange(size))
        elif r < 0.6 and by_byte:
            ch = rng.choice("é€😀世\U0010fffd")
            raw = ch.encode()
            if rng.random() < 0.3:
                raw = raw[:rng.randrange(1, len(raw) + 1)]
            out += [by_byte[b] for b in raw]
        elif r < 0.7 and by_byte:
            out.append(by_byte[rng.choice([0x80, 0xC3, 0xE2, 0xF0, 0xFF, 0x41, 0x00])])
        elif r < 0.8:
            out.append(rng.choice([i for i in range(min(size, 3))]))  # unk / control
        else:
            out += sp.encode(rng.choice([" hello", "  x", "\u2581", "日本", " a b"]))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_decode_equals_sentencepiece_on_random_ids(name, tmp_path_factory):
    enc, sp = pair(name, tmp_path_factory)
    rng = random.Random(11)
    for k in range(fuzz_examples(300)):
        ids = random_ids(sp, rng, rng.randrange(0, 40))
        assert enc.decode(ids) == sp.decode(ids), (k, ids)


@pytest.mark.parametrize("name", NAMES)
def test_stream_equals_decode_whatever_the_calls(name, tmp_path_factory, monkeypatch):
    enc, sp = pair(name, tmp_path_factory)
    # never decodes the ids so far again: O(its own ids) per call
    monkeypatch.setattr(detok.SpmDecoder, "decode", None)
    monkeypatch.setattr(detok.SpmDecoder, "decode_bytes", None)
    rng = random.Random(12)
    dec = enc.stream_decoder()
    assert isinstance(dec, detok.SpmStreamDecoder)
    for k in range(fuzz_examples(300)):
        ids = random_ids(sp, rng, rng.randrange(0, 40))
        got, at = [], 0
        while at < len(ids):
            step = rng.randrange(0, 5)
            got.append(dec.feed(ids[at:at + step]))
            at += step
        got.append(dec.flush())
        assert "".join(got) == sp.decode(ids), (k, ids)


def test_a_character_comes_out_when_its_bytes_are_complete(tmp_path_factory):
    enc, sp = pair("mistral_v7", tmp_path_factory)
    b = {x: sp.piece_to_id(f"<0x{x:02X}>") for x in range(256)}
    dec = enc.stream_decoder()
    assert dec.feed(sp.encode("Hi")) == "Hi"
    assert dec.feed([b[0xF0], b[0x9F]]) == "" and dec.pending == b"\xf0\x9f"
    assert dec.feed([b[0x98]]) == ""
    assert dec.feed([b[0x80]]) == "😀"  # complete: out now, before any next piece
    assert dec.feed([b[0xC3]]) == ""
    assert dec.feed([b[0x41]]) == "\ufffdA"  # 0xC3 cannot be completed by "A"
    assert dec.feed([b[0xE2], 3]) == "\ufffd"  # a control piece ends the run (per byte)
    assert dec.flush() == ""
    # the dummy prefix's space goes, as sentencepiece drops it
    ids = sp.encode(" x y")
    assert dec.feed(ids[:1]) + dec.feed(ids[1:]) + dec.flush() == sp.decode(ids)


def test_stream_with_other_error_handlers_equals_decode(tmp_path_factory):
    enc, sp = pair("mistral_v7", tmp_path_factory)
    b = {x: sp.piece_to_id(f"<0x{x:02X}>") for x in range(256)}
    ids = sp.encode("a") + [b[0xC3], b[0x41], b[0xE2], b[0x82], b[0xAC]] + sp.encode("z")
    for errors in ("ignore", "backslashreplace"):
        dec = enc.stream_decoder(errors)
        assert "".join(dec.feed([i]) for i in ids) + dec.flush() == enc.decode(ids, errors)
    dec = enc.stream_decoder("strict")
    dec.feed(ids[:2])
    with pytest.raises(UnicodeDecodeError):
        dec.feed(ids[2:3])
