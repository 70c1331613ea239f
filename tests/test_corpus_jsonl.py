"""The native JSON-lines reader (kernels/host_jsonl.h, gputok/corpus/jsonl.py) against the Python
reader: the same document bytes, positions and errors on fuzzed lines, block boundaries,
compressed input, byte-order marks and resumed reads; every line it leaves to Python
(THE FALLBACK RULE) is one the Python reader then decodes or rejects itself."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from gputok.corpus import jsonl as corpus_jsonl
from gputok.backends import native
from gputok.corpus import CorpusError, read_batches, resolve_inputs
from gputok.corpus.sources import decode_utf8, parse_json_text
from gputok.stages.pack import utf8_of

_ok, _why = native.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"native backend unavailable: {_why}")


@pytest.fixture(scope="module")
def parse():
    native.library()  # built if the cache does not have it yet
    p = corpus_jsonl.parser("text")
    assert p is not None
    return p


def _python(line: bytes, field="text", errors="strict"):
    """What the Python reader makes of one line: ("blank",), ("doc", bytes) or ("error", msg)."""
    if not line.strip():
        return ("blank",)
    try:
        doc = parse_json_text(decode_utf8(line, "f", 1, errors), "f", 1, field)
    except (CorpusError, ValueError, RecursionError) as e:
        return ("error", str(e))
    return ("doc", utf8_of(doc))


def _native(parse, line: bytes):
    if not line:
        return ("blank",)  # (no line at all)
    k, status, _, doc_end, out, why = parse.parse(line, 0)
    if k == 0:
        assert why == corpus_jsonl.STOP_FALLBACK
        return ("fallback",)
    assert k == 1 and int(doc_end[0]) == len(out)
    return ("blank",) if status[0] == corpus_jsonl.BLANK else ("doc", out.tobytes())


PIECES = ["plain", " ", "é", "日本語", "😀", "\u2028", "\x7f", "\\n", "\\t", "\\\"", "\\\\",
          "\\/", "\\b", "\\f", "\\r", "\\u00e9", "\\u00E9", "\\ud83d\\ude00", "\\uD83D\\uDE00",
          "\\ud83d", "\\ude00", "\\ud83d\\u0041", "\\ud83dx", "\\ude00\\ud83d", "\\u0000",
          "\\u001f", "\\ud83d\\ud83d\\ude00", "\\uFFFF", "\\uFEFF"]
BAD_PIECES = ["\x01", "\t", "\\x41", "\\u12", "\\u12g4", "\\", "\\ud83d\\u12", "\\a"]
VALUES = ["1", "-0", "0.5", "-12.5e+3", "1E5", "true", "false", "null", "[]", "{}",
          '[1, "a", {"text": 5}]', '{"text": "inner"}', '"x"', '[[[[[]]]]]', "1" * 70]
ODD_VALUES = ["NaN", "Infinity", "-Infinity", "01", "1.", ".5", "+1", "tru", "[1,]", "{,}",
              '{"a" 1}', "1e", "--1"]
WS = ["", " ", "  ", "\t", "\r", " \r"]


def _string(rng, bad=False) -> str:
    n = rng.randrange(0, 8)
    parts = [rng.choice(PIECES) for _ in range(n)]
    if bad:
        parts.insert(rng.randrange(0, n + 1), rng.choice(BAD_PIECES))
    return '"' + "".join(parts) + '"'


def _line(rng) -> str:
    """A JSON-lines line: mostly valid objects holding "text", and every way to be odd."""
    fields = []
    for _ in range(rng.randrange(0, 4)):
        key = rng.choice(['"id"', '"meta"', '"te\\u0078t"', '"tex"', '"text2"', '"\\ud800"'])
        fields.append((key, rng.choice(VALUES + [_string(rng)])))
    roll = rng.random()
    if roll < 0.75:
        fields.insert(rng.randrange(0, len(fields) + 1), ('"text"', _string(rng)))
    elif roll < 0.8:
        fields.insert(rng.randrange(0, len(fields) + 1), ('"text"', _string(rng, bad=True)))
    elif roll < 0.85:
        fields.append(('"text"', rng.choice(VALUES + ODD_VALUES)))
    elif roll < 0.9:
        fields.insert(0, ('"text"', _string(rng)))
        fields.append(('"text"', rng.choice([_string(rng), "1", "null"])))  # duplicates
    elif roll < 0.95:
        fields.insert(rng.randrange(0, len(fields) + 1), ('"text"', _string(rng)))
        fields.insert(rng.randrange(0, len(fields) + 1), ('"n"', rng.choice(ODD_VALUES)))
    body = ",".join(rng.choice(WS) + k + rng.choice(WS) + ":" + rng.choice(WS) + v +
                    rng.choice(WS) for k, v in fields)
    text = rng.choice(WS) + "{" + body + "}" + rng.choice(WS)
    r = rng.random()
    if r < 0.03:
        text = rng.choice(["[1, 2]", '"text"', "", "   ", "\x0c", " \x0b ", "{", "}",
                           '{"text": "a"} x', '{"text": "a"},', "\ufeff" + text, "\x0c" + text])
    elif r < 0.05:
        text = text[:rng.randrange(0, len(text) + 1)]  # cut anywhere
    return text


def test_fuzzed_lines_match_the_python_reader(parse):
    rng = random.Random(11)
    kinds = {"doc": 0, "blank": 0, "fallback": 0}
    for _ in range(6000):
        line = _line(rng).encode("utf-8", "surrogatepass")
        if rng.random() < 0.02:  # invalid UTF-8 somewhere
            k = rng.randrange(0, len(line) + 1)
            line = line[:k] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                          b"\xc0\xaf", b"\xe0\x80\xaf"]) + line[k:]
        line += rng.choice([b"\n", b"\r\n", b""])
        got, want = _native(parse, line), _python(line)
        kinds[got[0]] += 1
        if got[0] != "fallback":
            assert got == want, line
    # the fast path takes most lines, and leaves some to Python
    assert kinds["doc"] > 2500 and kinds["fallback"] > 300 and kinds["blank"] > 10


def test_every_plain_valid_line_is_taken(parse):
    """Objects json.dumps writes (ensure_ascii either way) never fall back."""
    rng = random.Random(3)
    chars = [chr(c) for c in (list(range(0x20, 0x7F)) + [0xE9, 0x3042, 0x1F600, 0x2028, 0xFEFF,
                                                         0x0, 0x1, 0x1F, 0x7F, 0x10FFFF])]
    for k in range(2000):
        text = "".join(rng.choice(chars) for _ in range(rng.randrange(0, 30)))
        obj = {"id": k, "meta": {"a": [1, 2.5, None, True]}, "text": text}
        if k % 3 == 0:
            obj = {"text": text, "x": "y"}
        line = json.dumps(obj, ensure_ascii=bool(k % 2)).encode() + b"\n"
        assert _native(parse, line) == ("doc", text.encode("utf-8")), line


def test_lone_surrogates_become_replacement_characters_as_when_packed(parse):
    for esc, want in [("\\ud800", "\ufffd"), ("a\\udfffb", "a\ufffdb"),
                      ("\\ud83d\\ude00", "😀"), ("\\ud83d\\ud83d\\ude00", "\ufffd😀"),
                      ("\\ude00\\ud83d", "\ufffd\ufffd"), ("\\ud83d\\u0041", "\ufffdA")]:
        line = ('{"text": "%s"}\n' % esc).encode()
        assert _native(parse, line) == ("doc", want.encode()) == _python(line)


def test_keys_are_compared_decoded_and_the_last_duplicate_counts(parse):
    assert _native(parse, b'{"te\\u0078t": "a"}') == ("doc", b"a")
    assert _native(parse, b'{"text": "a", "text": "b"}') == ("doc", b"b")
    assert _native(parse, b'{"text": 1, "text": "b"}') == ("doc", b"b")
    assert _native(parse, b'{"text": "a", "text": 1}') == ("fallback",)  # Python's error
    assert _native(parse, b'{"\\ud800": 1, "text": "a"}') == ("fallback",)
    assert _native(parse, b'{"other": "a"}') == ("fallback",)
    other = corpus_jsonl.parser("body é")
    assert _native(other, '{"body é": "x", "text": "y"}'.encode()) == ("doc", b"x")


def test_deep_nesting_and_long_numbers_are_left_to_python(parse):
    deep = b'{"a": ' + b"[" * 300 + b"]" * 300 + b', "text": "x"}'
    assert _native(parse, deep) == ("fallback",)
    ok = b'{"a": ' + b"[" * 200 + b"]" * 200 + b', "text": "x"}'
    assert _native(parse, ok) == ("doc", b"x")
    assert _native(parse, b'{"a": ' + b"1" * 65 + b', "text": "x"}') == ("fallback",)


# ---- whole files: read_batches(packed=True) against read_batches()


def _docs_and_ends(sources, **kw):
    docs, ends, nbytes, progress = [], [], 0, 0
    for b in read_batches(sources, **kw):
        if kw.get("packed"):
            off = b.texts.offsets.tolist()
            docs += [b.texts.buf[off[i]:off[i + 1]] for i in range(len(b.texts))]
            ends += [tuple(int(x) for x in e) for e in b.ends]
        else:
            docs += [utf8_of(t) for t in b.texts]
            ends += [tuple(e) for e in b.ends]
        nbytes += b.nbytes
        progress += b.progress
    return docs, ends, nbytes, progress


def _same(sources, **kw):
    want = _docs_and_ends(sources, **kw)
    got = _docs_and_ends(sources, packed=True, **kw)
    assert got[:3] == want[:3]
    assert got[3] == want[3]  # all the input is reported consumed
    return got


def _valid_lines(rng, n):
    out = []
    for _ in range(n):
        line = _line(rng)
        b = (line + "\n").encode("utf-8", "surrogatepass")
        if _python(b)[0] != "error":
            out.append(b)
    return out


@pytest.mark.parametrize("block", [corpus_jsonl.BLOCK, 64, 7])
def test_files_read_the_same_across_block_boundaries(parse, tmp_path, monkeypatch, block):
    monkeypatch.setattr(corpus_jsonl, "BLOCK", block)
    rng = random.Random(block)
    lines = _valid_lines(rng, 1500)
    lines.insert(5, b'{"text": "' + b"long " * 3000 + b'"}\n')  # longer than a block
    lines.insert(9, b"\n")
    lines.insert(10, b"   \r\n")
    raw = b"\xef\xbb\xbf" + b"".join(lines) + b'{"text": "no newline at the end"}'
    (tmp_path / "a.jsonl").write_bytes(raw)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(raw))
    sources = resolve_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl.gz")])
    docs, ends, _, _ = _same(sources, batch_bytes=3000)
    assert docs[-1] == b"no newline at the end" and ends[-1][0] == 1
    assert ends[0][1] > 3  # the byte-order mark counts as read


def test_a_resumed_read_starts_at_the_same_document(parse, tmp_path):
    rng = random.Random(5)
    lines = _valid_lines(rng, 400)
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "b.jsonl").write_bytes(b"".join(lines[:50]))
    sources = resolve_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    _, ends, _, _ = _same(sources, batch_bytes=500)
    for k in (0, 17, 200, len(ends) - 60, len(ends) - 1):
        tail = _same(sources, batch_bytes=500, start=ends[k])
        assert tail[1] == ends[k + 1:]


def test_errors_are_the_python_readers_after_the_same_documents(parse, tmp_path):
    good = b'{"text": "fine"}\n'
    for bad in [b'{"text": 5}\n', b'{"txt": "a"}\n', b'{"text": "a\x01"}\n', b"[1]\n",
                b'{"text": "\xff"}\n', b'{"text": NaN}\n', b'{"text": "x"} y\n']:
        p = tmp_path / "e.jsonl"
        p.write_bytes(good * 30 + bad + good)
        sources = resolve_inputs([str(p)])
        got = []
        for kw in ({}, {"packed": True}):
            seen = []
            try:
                for b in read_batches(sources, batch_bytes=1, **kw):
                    seen.append(len(b))
                got.append(("ok", sum(seen)))
            except CorpusError as e:
                got.append(("error", str(e), sum(seen)))
        assert got[0] == got[1], bad


def test_replace_mode_decodes_invalid_lines_as_python_does(parse, tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"text": "b\xffc\xed\xa0\x80d"}\n{"text": "e"}\n')
    docs, _, _, _ = _same(resolve_inputs([str(p)]), errors="replace")
    assert docs == [b"a", "b\ufffdc\ufffd\ufffd\ufffdd".encode(), b"e"]


def test_lines_python_accepts_but_native_leaves_keep_their_place(parse, tmp_path):
    p = tmp_path / "n.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"n": NaN, "text": "b"}\n{"text": "c"}\n'
                  b'{"n": ' + b"1" * 80 + b', "text": "d"}\n{"text": "e"}\n')
    docs, ends, _, _ = _same(resolve_inputs([str(p)]))
    assert docs == [b"a", b"b", b"c", b"d", b"e"] and [e[2] for e in ends] == [1, 2, 3, 4, 5]


def test_the_reader_is_off_without_a_built_library_or_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_NATIVE_READER", "0")
    assert corpus_jsonl.parser("text") is None
    monkeypatch.delenv("GPUTOK_NATIVE_READER")
    monkeypatch.setattr(native, "library", lambda compile=True: None)
    assert corpus_jsonl.parser("text") is None
    assert corpus_jsonl.parser("\ud800") is None
    # and read_batches(packed=True) then packs what the Python reader reads
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "x"}\n\n{"text": "\\u00e9"}\n')
    b = list(read_batches(resolve_inputs([str(p)]), packed=True))
    assert [x.texts.to_pylist() for x in b] == [["x", "é"]]
    assert np.array_equal(b[0].ends, [[0, 14, 1], [0, 34, 3]])


@pytest.mark.parametrize("filler", ["a", "é", "\u3042", "\x7f"])
def test_each_special_byte_at_every_offset_of_a_long_string(parse, filler):
    """The string scan's 16-byte steps: a quote, backslash escape, raw control byte or
    non-ASCII character at every offset of a long run, as the Python reader takes it."""
    for special in ['\\"', "\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00", "\x01", "\x1f", "é", "😀"]:
        for at in range(0, 40):
            body = filler * at + special + filler * (37 - at)
            line = ('{"text": "' + body + '", "n": 1}\n').encode("utf-8")
            got, want = _native(parse, line), _python(line)
            if got[0] != "fallback":
                assert got == want, line
            else:  # (a raw control byte: invalid JSON, the Python reader's to report)
                assert special in ("\x01", "\x1f"), line


def _batches(sources, **kw):
    """Each batch's documents (bytes), ends and progress, read with ``read_batches``."""
    out = []
    for b in read_batches(sources, packed=True, **kw):
        off = b.texts.offsets
        buf = b.texts.buf
        out.append(([buf[off[i]:off[i + 1]] for i in range(len(off) - 1)],
                    np.asarray(b.ends).tolist(), b.progress))
    return out


def test_files_read_ahead_on_threads_give_the_same_batches_and_errors(parse, tmp_path,
                                                                      monkeypatch):
    """JSON-lines files parsed ahead on reader threads (``GPUTOK_READERS``): the batches, their
    positions and progress are those of one reader, an error in a later file comes after every
    document before it, and a read stopped early leaves no reader thread behind."""
    import threading

    rng = random.Random(11)
    names = []
    for k in range(6):
        lines = _valid_lines(rng, rng.randrange(0, 300))
        p = tmp_path / f"f{k}.jsonl" if k != 3 else tmp_path / "f3.jsonl.gz"
        raw = b"".join(lines)
        p.write_bytes(gzip.compress(raw) if k == 3 else raw)
        names.append(str(p))
    (tmp_path / "t.txt").write_text("a text file between them")
    names.insert(2, str(tmp_path / "t.txt"))
    sources = resolve_inputs(names)
    got = {}
    for n in ("1", "2", "4"):
        monkeypatch.setenv("GPUTOK_READERS", n)
        got[n] = _batches(sources, batch_bytes=300)
        docs = [d for b in got[n] for d in b[0]]
        ends = [tuple(e) for b in got[n] for e in b[1]]
        for k in (0, len(ends) // 3, len(ends) - 2):  # resumed there: the rest, from a reader
            tail = _batches(sources, batch_bytes=300, start=ends[k])
            assert [d for b in tail for d in b[0]] == docs[k + 1:]
    assert got["2"] == got["1"] and got["4"] == got["1"] and len(got["1"]) > 10
    bad = tmp_path / "f4.jsonl"
    bad.write_bytes(bad.read_bytes() + b'{"text": 5}\n' + b'{"text": "after"}\n')
    seen = {}
    for n in ("1", "4"):
        monkeypatch.setenv("GPUTOK_READERS", n)
        docs = []
        with pytest.raises(CorpusError, match="f4.jsonl"):
            for b in read_batches(sources, packed=True, batch_bytes=300):
                docs.append(len(b))
        seen[n] = sum(docs)
    assert seen["4"] == seen["1"] > 0
    it = read_batches(sources, packed=True, batch_bytes=300)  # (GPUTOK_READERS=4)
    next(it)
    assert [t for t in threading.enumerate() if t.name.startswith("gputok-reader")]
    it.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gputok-reader")]
