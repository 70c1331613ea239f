"""The Encoding API: tiktoken's contract, hand-derived cases, batch arrays, padding, errors."""

from __future__ import annotations

import numpy as np
import pytest

import gputok
from conftest import NAMED, tiktoken_oracle

TRAPS = ["aaa", "\t" * 32, " " * 1000, "a" * 100_000, "", " ", "\n\n\n", "hello world",
         "  leading", "trailing  ", "12345678", "don't DON'T", "\r\n\r\n  x",
         "\u00e9\u0301", "\U0001F469\u200d\U0001F469\u200d\U0001F467",
         "x" + "\u200b" * 50, "=" * 300, "0" * 5000, "\x00\x01\x02"]


@pytest.mark.parametrize("name", NAMED)
@pytest.mark.parametrize("text", TRAPS, ids=lambda t: repr(t[:12]) + f"x{len(t)}")
def test_traps_match_tiktoken(name, text):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    assert enc.encode_ordinary(text) == tk.encode_ordinary(text)
    assert enc.encode(text) == tk.encode(text)


def test_known_ids():
    # ids from the published encodings (hand-checked against tiktoken's documentation)
    assert gputok.get_encoding("r50k_base").encode("hello world") == [31373, 995]
    assert gputok.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert gputok.get_encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_special_token_contract(cl100k):
    text = "a<|endoftext|>b"
    with pytest.raises(ValueError, match=r"(?s)<\|endoftext\|>.*allowed_special"):
        cl100k.encode(text)
    assert cl100k.encode(text, allowed_special={"<|endoftext|>"}) == \
        cl100k.encode("a") + [100257] + cl100k.encode("b")
    assert cl100k.encode(text, allowed_special="all") == \
        cl100k.encode(text, allowed_special={"<|endoftext|>"})
    plain = cl100k.encode(text, disallowed_special=())
    assert plain == cl100k.encode_ordinary(text)
    assert 100257 not in plain
    # disallowing only some: the others encode as text
    assert cl100k.encode("<|fim_prefix|>", disallowed_special={"<|endoftext|>"}) == \
        cl100k.encode_ordinary("<|fim_prefix|>")
    tk = tiktoken_oracle("cl100k_base")
    for kw in ({}, {"allowed_special": "all"}, {"disallowed_special": ()},
               {"allowed_special": {"<|fim_middle|>"}, "disallowed_special": ()}):
        s = "x <|fim_middle|> <|endoftext|>\n<|endofprompt|>"
        try:
            expect = tk.encode(s, **kw)
        except ValueError:
            with pytest.raises(ValueError):
                cl100k.encode(s, **kw)
        else:
            assert cl100k.encode(s, **kw) == expect


def test_disallowed_check_finds_every_token_in_every_string_kind():
    """``check_disallowed`` (and ``encode``'s default check) against a plain search: token
    sets with one, four and five first characters (``may_hold``'s ``in`` tests, then its class
    search), one-character tokens, a token that is a prefix of another; texts of each str
    kind (ASCII, Latin-1, two- and four-byte), the token at the start, the end, split by one
    character, and a first character with no token after it."""
    import random

    from gputok.specials import DisallowedSpecialError, check_disallowed, may_hold
    sets = [frozenset({"<|endoftext|>", "<|fim|>"}), frozenset({"<a>", "<ab>", "b"}),
            frozenset({"[CLS]", "<s>", "{x}", "|y|"}),
            frozenset({"[CLS]", "<s>", "{x}", "|y|", "\u00e9t\u00e9"}),
            frozenset({"\U0001F600!", "\u4e2d\u6587"})]
    rng = random.Random(5)
    fills = ["plain text ", "caf\u00e9 ", "\u4e2d\u6587 ", "\U0001F600 ", "<", "[", "|", "{"]
    for tokens in sets:
        firsts = {t[0] for t in tokens}
        for _ in range(300):
            parts = [rng.choice(fills) for _ in range(rng.randrange(0, 6))]
            if rng.random() < 0.5:
                tok = rng.choice(sorted(tokens))
                parts.insert(rng.randrange(len(parts) + 1),
                             tok if rng.random() < 0.7 else tok[:-1] + " " + tok[-1:])
            text = "".join(parts)
            held = [t for t in tokens if t in text]
            assert bool(may_hold(tokens)(text)) == any(c in text for c in firsts)
            if not held:
                check_disallowed(text, tokens)
                continue
            start = min(text.find(t) for t in held)  # leftmost, then longest
            want = max((t for t in held if text.startswith(t, start)), key=len)
            with pytest.raises(DisallowedSpecialError) as e:
                check_disallowed(text, tokens, 3)
            assert (e.value.token, e.value.doc) == (want, 3)
    cl100k = gputok.get_encoding("cl100k_base")
    for text in ["<", "x<|endoftext", "\u00e9<|endoftext|>", "\u4e2d<|endofprompt|>",
                 "\U0001F600 <|fim_suffix|>", "<|endoftext|" + "|>"]:
        held = any(t in text for t in cl100k.special_tokens_set)
        if held:
            with pytest.raises(ValueError):
                cl100k.encode(text)
        else:
            assert cl100k.encode(text) == cl100k.encode_ordinary(text)


def test_surrogates_like_tiktoken(cl100k):
    tk = tiktoken_oracle("cl100k_base")
    for s in ["\ud800", "a\udfffb", "\ud83d\ude00", "\ud83d", "x\ud83d\ude00\ud800y"]:
        assert cl100k.encode(s) == tk.encode(s)
        assert cl100k.encode_ordinary(s) == tk.encode_ordinary(s)
    ids, off = cl100k.encode_batch_arrays(["\ud83d\ude00", "\ud800"])
    assert ids.tolist() == tk.encode("\ud83d\ude00") + tk.encode("\ud800")


def test_decode_family(cl100k):
    ids = cl100k.encode("héllo wörld 😀")
    assert cl100k.decode(ids) == "héllo wörld 😀"
    assert cl100k.decode_bytes(ids) == "héllo wörld 😀".encode()
    assert b"".join(cl100k.decode_tokens_bytes(ids)) == "héllo wörld 😀".encode()
    assert cl100k.decode_single_token_bytes(100257) == b"<|endoftext|>"
    with pytest.raises(KeyError):
        cl100k.decode_single_token_bytes(100261)  # a hole in cl100k's id space
    with pytest.raises(KeyError):
        cl100k.decode([10**7])
    tk = tiktoken_oracle("cl100k_base")
    half = cl100k.encode("😀")[:1]
    assert cl100k.decode(half) == tk.decode(half) == "\ufffd"
    with pytest.raises(UnicodeDecodeError):
        cl100k.decode(half, errors="strict")
    assert cl100k.decode_with_offsets(ids) == tk.decode_with_offsets(ids)
    assert cl100k.decode(np.array(ids, dtype=np.uint32)) == "héllo wörld 😀"


def test_stream_decoder_holds_incomplete_tail(cl100k):
    text = "naïve 😀 日本語 ok"
    raw = text.encode()
    ids = [t for ch in raw for t in [cl100k.encode_single_token(bytes([ch]))]]  # byte tokens
    dec = cl100k.stream_decoder()
    out = []
    for t in ids:
        out.append(dec.feed([t]))
        # never emits a replacement character for a character that is still arriving
        assert "\ufffd" not in out[-1]
    out.append(dec.flush())
    assert "".join(out) == text
    dec = cl100k.stream_decoder()
    assert dec.feed(cl100k.encode("😀")[:1]) == "" and len(dec.pending) > 0
    assert dec.flush() == "\ufffd"


def test_misc_properties(cl100k):
    tk = tiktoken_oracle("cl100k_base")
    assert cl100k.n_vocab == tk.n_vocab == 100277
    assert cl100k.max_token_value == tk.max_token_value
    assert cl100k.eot_token == tk.eot_token
    assert cl100k.special_tokens_set == tk.special_tokens_set
    assert cl100k.name == "cl100k_base"
    assert cl100k.encode_single_token("hello") == tk.encode_single_token("hello")
    assert cl100k.encode_single_token("<|endoftext|>") == 100257
    with pytest.raises(KeyError):
        cl100k.encode_single_token("hello world")
    assert sorted(cl100k.token_byte_values()) == sorted(tk.token_byte_values())
    assert cl100k.is_special_token(100257) and not cl100k.is_special_token(0)


def test_batch_methods(cl100k):
    tk = tiktoken_oracle("cl100k_base")
    texts = ["hello world", "", "a<|endoftext|>", "  \n x"]
    assert cl100k.encode_ordinary_batch(texts) == tk.encode_ordinary_batch(texts)
    with pytest.raises(ValueError):
        cl100k.encode_batch(texts)
    assert cl100k.encode_batch(texts, allowed_special="all") == \
        tk.encode_batch(texts, allowed_special="all")
    assert cl100k.decode_batch(tk.encode_ordinary_batch(texts)) == texts


def test_unknown_encoding_lists_known():
    with pytest.raises(ValueError) as e:
        gputok.get_encoding("cl100k")
    for name in NAMED:
        assert name in str(e.value)
    assert set(NAMED) <= set(gputok.list_encoding_names())


# ---- encode_batch_arrays --------------------------------------------------------------------

def _ragged(lists):
    offsets = np.cumsum([0] + [len(x) for x in lists])
    return [x for l in lists for x in l], offsets.tolist()


@pytest.mark.parametrize("name", ["r50k_base", "o200k_base"])
def test_arrays_dtype(name):
    enc = gputok.get_encoding(name)
    ids, off = enc.encode_batch_arrays(["hi there", ""])
    assert ids.dtype == (np.uint16 if name == "r50k_base" else np.uint32)
    assert off.dtype == np.int64 and off.tolist()[0] == 0 and off.tolist()[-1] == len(ids)


def test_arrays_inputs(cl100k):
    pa = pytest.importorskip("pyarrow")
    texts = ["hello world", "", "日本語のテキスト", "x" * 1000, "def f(x):\n    return x\n"]
    expect = _ragged([cl100k.encode(t) for t in texts])
    for form in (texts, [t.encode() for t in texts], pa.array(texts), pa.array(texts, pa.large_string()),
                 pa.chunked_array([texts[:2], texts[2:]]), pa.array([t.encode() for t in texts])):
        ids, off = cl100k.encode_batch_arrays(form)
        assert (ids.tolist(), off.tolist()) == expect, type(form)
    sliced = pa.array(["zzz"] + texts)[1:]
    ids, off = cl100k.encode_batch_arrays(sliced)
    assert (ids.tolist(), off.tolist()) == expect
    with pytest.raises(ValueError, match="null"):
        cl100k.encode_batch_arrays(pa.array(["a", None]))


def test_arrays_many_misses_take_the_vectorised_path(cl100k):
    # > 256 distinct uncached pieces in one batch: merge_rounds runs; ids must not change
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("qxzjkvwy") for _ in range(rng.randint(3, 30))) for _ in range(3000)]
    texts = [" ".join(words[i:i + 50]) for i in range(0, len(words), 50)]
    cl100k.model.piece_cache.clear()
    ids, off = cl100k.encode_batch_arrays(texts)
    tk = tiktoken_oracle("cl100k_base")
    assert (ids.tolist(), off.tolist()) == _ragged(tk.encode_ordinary_batch(texts))


def test_arrays_invalid_utf8(cl100k):
    docs = [b"ok", b"bad \xff\xfe here"]
    with pytest.raises(ValueError, match=r"document 1 is not valid UTF-8.*byte offset 4"):
        cl100k.encode_batch_arrays(docs)
    ids, off = cl100k.encode_batch_arrays(docs, errors="replace")
    assert ids[off[1]:off[2]].tolist() == cl100k.encode("bad \ufffd\ufffd here")


def test_arrays_special_contract(cl100k):
    with pytest.raises(ValueError, match="endoftext"):
        cl100k.encode_batch_arrays(["fine", "a<|endoftext|>"])
    ids, off = cl100k.encode_batch_arrays(["a<|endoftext|>"], allowed_special="all")
    assert ids.tolist() == cl100k.encode("a<|endoftext|>", allowed_special="all")
    ids, off = cl100k.encode_batch_arrays(["a<|endoftext|>"], disallowed_special=())
    assert ids.tolist() == cl100k.encode_ordinary("a<|endoftext|>")


def test_bad_batch_types(cl100k):
    with pytest.raises(TypeError, match="single str"):
        cl100k.encode_batch_arrays("hello")
    with pytest.raises(TypeError, match="document 1"):
        cl100k.encode_batch_arrays(["a", 3])
    with pytest.raises(TypeError, match="document 2 is a bytes"):
        cl100k.encode_batch_arrays(["a", "b", b"c"])
    with pytest.raises(ValueError, match="unknown backend"):
        cl100k.encode_batch_arrays(["a"], backend="tpu")


# ---- padding --------------------------------------------------------------------------------

def test_pad_right_left_truncate(cl100k):
    ids = np.array([1, 2, 3, 4, 5, 6], dtype=np.uint32)
    off = np.array([0, 4, 4, 6])
    out, mask = cl100k.pad(ids, off, pad_id=0)
    assert out.tolist() == [[1, 2, 3, 4], [0, 0, 0, 0], [5, 6, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    out, mask = cl100k.pad(ids, off, pad_id=9, padding_side="left")
    assert out.tolist() == [[1, 2, 3, 4], [9, 9, 9, 9], [9, 9, 5, 6]]
    out, _ = cl100k.pad(ids, off, pad_id=0, max_length=3)
    assert out.tolist() == [[1, 2, 3], [0, 0, 0], [5, 6, 0]]
    out, _ = cl100k.pad(ids, off, pad_id=0, max_length=3, truncation_side="left")
    assert out.tolist() == [[2, 3, 4], [0, 0, 0], [5, 6, 0]]
    out, _ = cl100k.pad(ids, off, pad_id=0, pad_to_multiple_of=8)
    assert out.shape == (3, 8)
    out, _ = cl100k.pad(ids, off)  # default pad id: end of text
    assert out[1, 0] == cl100k.eot_token and out.dtype == np.uint32
    with pytest.raises(ValueError):
        cl100k.pad(ids, off, padding_side="middle")


def test_encode_batch_padded(cl100k):
    texts = ["hello world", "a much longer sentence than the first one", ""]
    ids, mask = cl100k.encode_batch_padded(texts, pad_id=0, padding_side="left", max_length=6)
    for row, m, t in zip(ids, mask, texts):
        expect = cl100k.encode(t)[:6]
        assert row[m.astype(bool)].tolist() == expect
        assert m.tolist() == [0] * (6 - len(expect)) + [1] * len(expect)


def test_large_single_text_takes_batch_path_exactly(cl100k):
    # >= 64K characters: encode/encode_ordinary route through the batch pipeline
    tk = tiktoken_oracle("cl100k_base")
    text = ("x <|endoftext|> héllo 123456 \ud800 \t\t  \n" * 3000)
    assert len(text) >= 1 << 16
    assert cl100k.encode(text, allowed_special="all") == tk.encode(text, allowed_special="all")
    assert cl100k.encode_ordinary(text) == tk.encode_ordinary(text)
    with pytest.raises(ValueError):
        cl100k.encode(text)


def test_utf8_check_is_pythons_decoder():
    """``pack.valid_utf8``: the native checker (with the library built) and Python's codec
    agree on edge cases and fuzzed bytes, at every size (one part, and several parts side by
    side from 8 MB, cut inside characters and next to a bad byte)."""
    import random

    from gputok.backends import native
    from gputok.stages import pack

    ok, _ = native.available()
    check = native.library().lib.gputok_utf8_valid if ok else None
    cases = [b"", b"a", b"\x7f", b"\x80", b"\xc2\x80", b"\xc1\xbf", b"\xe0\x9f\xbf",
             b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xef\xbf\xbf", b"\xf0\x8f\xbf\xbf",
             b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
             b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", "é€😀".encode(), b"ab\xc3\xa9cd"]
    rng = random.Random(7)
    alphabet = [b"a", b"\x80", b"\xbf", b"\xc2", b"\xdf", b"\xe0", b"\xed", b"\xf0", b"\xf4",
                b"\xff", "é".encode(), "€".encode(), "😀".encode()]
    cases += [b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
              for _ in range(3000)]
    for b in cases:
        want = _decodes(b)
        assert pack.valid_utf8(b) == want, b
        if check is not None:
            assert bool(check(b, len(b), 3)) == want, b
    if check is None:
        return
    big = ("x" * 1000 + "😀é€" * 500).encode() * 3000  # ~10 MB: three parts on three threads
    assert _decodes(big) and check(big, len(big), 3) == 1 and check(big, len(big), 1) == 1
    for at in (len(big) // 3, len(big) // 3 + 1, 2 * (len(big) // 3) - 1, len(big) - 1, 5):
        for bad in (b"\xff", b"\x80", b"\xc3"):
            b = big[:at] + bad + big[at + 1:]
            assert bool(check(b, len(b), 3)) == _decodes(b), (at, bad)
    run = big[:len(big) // 3] + b"\x80" * 4 + big[len(big) // 3 + 4:]  # 4 continuation bytes
    assert check(run, len(run), 3) == 0


def test_utf8_codec_check_by_slices(monkeypatch):
    """Without the native checker, a buffer over ``pack.DECODE_SLICE`` is checked by Python's
    incremental decoder a slice at a time: a character cut by a slice's end carries over, and a
    bad byte anywhere (before, at, after a cut; a truncated character at the very end) is found,
    as ``bytes.decode`` finds it."""
    from gputok.stages import pack

    monkeypatch.setattr(pack, "DECODE_SLICE", 64)  # (no checker given: the codec's check)
    unit = "ab😀é€c".encode()  # 12 bytes: 64-byte slices cut inside characters
    big = unit * 40
    assert pack.valid_utf8(big) and _decodes(big)
    for at in range(0, len(big), 7):
        for bad in (b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80"):
            b = big[:at] + bad + big[at + len(bad):]
            assert pack.valid_utf8(b) == _decodes(b), (at, bad)
    for cut in range(1, 4):  # the buffer ends inside a character
        b = big + "😀".encode()[:cut]
        assert not pack.valid_utf8(b)
    docs = [("😀" * 30).encode(), b"ok", ("é" * 40).encode()[:-1], b"x"]  # the third is cut
    with pytest.raises(ValueError, match="document 2"):
        gputok.get_encoding("cl100k_base").encode_batch_arrays(docs, backend="numpy")


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("size", [10, 100_000])  # under and over the native checker's size
def test_bytes_documents_split_inside_a_character_are_invalid(cl100k, size):
    """Each document of bytes (or Arrow binary) input must be UTF-8 by itself: a valid buffer
    cut inside a character is two invalid documents, not one valid text."""
    import pyarrow as pa

    head = b"a" * size + "é".encode()[:1]
    docs = [head, "é".encode()[1:] + b" tail"]
    assert _decodes(b"".join(docs))
    with pytest.raises(ValueError, match="document 0 is not valid UTF-8"):
        cl100k.encode_batch_arrays(docs)
    with pytest.raises(ValueError, match="document 0 is not valid UTF-8"):
        cl100k.encode_batch_arrays(pa.array(docs, pa.binary()))
    ids, off = cl100k.encode_batch_arrays(docs, errors="replace")
    assert ids[off[1]:off[2]].tolist() == cl100k.encode_ordinary("\ufffd tail")
    good = [b"a" * size + "é".encode(), "é tail".encode()]
    ids, off = cl100k.encode_batch_arrays(good)
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(2)] == \
        [cl100k.encode_ordinary(d.decode()) for d in good]


@pytest.mark.skipif(not hasattr(__import__("os"), "posix_fadvise") or
                    not __import__("os").path.isdir("/proc/self/fd"),
                    reason="posix_fadvise and /proc/self/fd are Linux's (elsewhere no hint is given)")
def test_an_encoding_asks_for_its_cached_device_tables_to_be_read_ahead(monkeypatch):
    """Building an Encoding hints the OS to read the model's cached device tables
    (``posix_fadvise(WILLNEED)`` on exactly that file); no file, no hint; no error either way."""
    import os

    from gputok.backends import device_tables

    enc = gputok.get_encoding("cl100k_base")
    device_tables.host_tables(enc.model)  # the cache file exists from here on
    path = device_tables._cache_path(enc.model)
    assert path is not None and os.path.exists(path)
    seen = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: (
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), advice)), real(fd, off, n, advice)))
    gputok.Encoding.from_model(enc.model)
    assert seen == [(os.path.realpath(path), os.POSIX_FADV_WILLNEED)]
    seen.clear()
    monkeypatch.setattr(device_tables, "_cache_path", lambda model: path + ".absent")
    gputok.Encoding.from_model(enc.model)
    assert seen == []


def test_an_encoding_pickles_after_its_bound_text_calls(tmp_path):
    """``encode`` keeps its backend's one-text call and special search per encoding; they are
    this process's, not pickled (a corpus job's spawned worker gets the encoding pickled)."""
    import pickle

    import families as F

    path = tmp_path / "m.model"
    path.write_bytes(F.model_source("mistral_v7"))
    tiny = gputok.Encoding("tiny", pat_str=r"\S+|\s+", special_tokens={"</s>": 258},
                           mergeable_ranks={bytes([b]): b for b in range(256)} | {b"hi": 256,
                                                                                  b"<s": 257})
    for enc in (tiny, gputok.load(path)):
        want = enc.encode("hello world"), enc.encode_ordinary("hi <s>")
        again = pickle.loads(pickle.dumps(enc))
        assert (again.encode("hello world"), again.encode_ordinary("hi <s>")) == want
        with pytest.raises(ValueError, match="special token"):
            again.encode("a </s>")


def _encode_in_child(enc, texts):
    return [enc.encode(t) for t in texts]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "gpt2", "qwen2"])
def test_an_encoding_pickles_after_use(name):
    """A corpus job hands its encoding to spawned workers: an encoding pickles, and encodes the
    same in a fresh process, after its scanner, tables and one-text calls were made here (the
    scanner's families hold lambdas: they pickle by name)."""
    import multiprocessing
    import pickle

    from conftest import hf_encoding

    enc = hf_encoding(name) if name == "qwen2" else gputok.get_encoding(name)
    texts = ["hello wörld 123 " * 200, "x" * 5000, "日本語 😀 " * 300, "a b c"]
    want = [enc.encode(t) for t in texts]
    enc.encode_batch(texts * 50)
    enc.encode_ordinary_batch(texts, backend="numpy")
    assert [pickle.loads(pickle.dumps(enc)).encode(t) for t in texts] == want
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_encode_in_child, (enc, texts)) == want
