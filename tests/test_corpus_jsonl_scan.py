"""The JSON-lines reader's string scan (kernels/host_jsonl.h: Line::plain, which also checks the
UTF-8 of every string) in each of its builds: SSSE3 (16 bytes a step, non-ASCII checked by
vector lookups: the library's on x86-64 CPUs that have it), SSE2 (16 bytes of ASCII a step) and
SWAR (8 bytes: other CPUs). Each build alone, compiled from the header, must give what the
Python reader gives: invalid UTF-8 at any offset of a vector falls back to Python (which raises
or replaces), valid characters at any offset are kept whole. And a whole job's shards are the
same with the native reader on and off."""

from __future__ import annotations

import ctypes
import json
import platform
import random
import subprocess

import pytest

from gputok.backends.native import build
from gputok.corpus import CorpusError
from gputok.corpus import jsonl as corpus_jsonl

from test_corpus_jsonl import _line, _native, _python

CXX, _why = build.find_compiler()
pytestmark = pytest.mark.skipif(CXX is None, reason=f"no C++ compiler: {_why}")

BAD = [b"\xff", b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xc3", b"\xc3(", b"\xe0\x80\xaf",
       b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe2\x82", b"\xf0\x8f\xbf\xbf",
       b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82\xac\x80",
       b"\xc3\xa9\xa9"]
GOOD = ["é", "\u07ff", "\u0800", "日", "\ud7ff", "\ue000", "\uffff", "😀", "\U00010000",
        "\U0010ffff", "é日😀"]


BUILDS = {"ssse3": ["-mssse3"], "sse2": ["-DGPUTOK_JSONL_SSE2"], "swar": ["-DGPUTOK_JSONL_SWAR"]}


@pytest.fixture(scope="module", params=list(BUILDS))
def scan(request, tmp_path_factory):
    """gputok_jsonl_parse of the header alone, in one of its builds."""
    so = tmp_path_factory.mktemp("scan") / f"jsonl_{request.param}.so"
    if request.param != "swar" and platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("an x86-64 build")
    flags = BUILDS[request.param]
    src = build.kernels.kernel_dir() / "host_jsonl.h"
    subprocess.run([CXX, "-O2", "-std=c++17", "-fPIC", "-shared", "-pthread", "-x", "c++",
                    '-DENC_HOST_EXPORT=extern "C"', *flags, str(src), "-o", str(so)], check=True)
    fn = ctypes.CDLL(str(so)).gputok_jsonl_parse
    vp, ll = ctypes.c_void_p, ctypes.c_longlong
    fn.argtypes = [vp, ll, vp, ll, vp, vp, vp, vp, ll, vp]
    fn.restype = None
    return corpus_jsonl.Parser(fn, b"text")


def _lines_around(piece: bytes):
    """Lines with ``piece`` at every offset 0..40 of a string (so at every offset of a 16- and
    an 8-byte load, after and before runs of ASCII), in the field and in another field."""
    for k in range(41):
        for tail in (0, 1, 7, 15, 16, 33):
            s = b"a" * k + piece + b"b" * tail
            yield b'{"text": "' + s + b'"}\n'
            yield b'{"id": "' + s + b'", "text": "x"}\n'
            yield b'{"text": "' + s + b'\\n' + s + b'"}'
            # and inside runs of other non-ASCII characters
            m = "é".encode() * (k // 2) + "日".encode() * (k % 3) + piece + "😀".encode() * tail
            yield b'{"text": "' + m + b'"}\n'
            yield b'{"text": "' + m[:len(m) - 4 * tail] + b"b" * tail + b'"}\n'


def test_invalid_utf8_at_any_offset_falls_back(scan):
    for bad in BAD:
        for line in _lines_around(bad):
            assert _python(line)[0] == "error", line  # (the case is invalid)
            assert _native(scan, line) == ("fallback",), line
        # outside a string too, and cut at the end of the line
        for line in (b'{"text": "a"}' + bad, bad + b'{"text": "a"}', b'{"text": "a", ' + bad +
                     b': 1}', b'{"text": "' + b"a" * 20 + bad):
            assert _native(scan, line) == ("fallback",), line


def test_valid_characters_at_any_offset_are_kept(scan):
    for good in GOOD:
        for line in _lines_around(good.encode()):
            got = _native(scan, line)
            assert got[0] == "doc" and got == _python(line), line


def test_fuzzed_lines_match_the_python_reader_and_the_library(scan):
    lib = corpus_jsonl.parser("text")
    rng = random.Random(5)
    for _ in range(3000):
        line = _line(rng).encode("utf-8", "surrogatepass")
        if rng.random() < 0.1:
            k = rng.randrange(0, len(line) + 1)
            line = line[:k] + rng.choice(BAD) + line[k:]
        line += rng.choice([b"\n", b"\r\n", b""])
        got = _native(scan, line)
        if got[0] != "fallback":
            assert got == _python(line), line
        if lib is not None:  # the library's build (whichever the cache holds) agrees
            assert _native(lib, line) == got, line


def _mixed_corpus(tmp_path) -> list:
    """Files of every kind of line the reader meets: plain and escaped text, surrogate escapes
    (paired and lone), CRLF, blank lines, a byte-order mark, invalid UTF-8 (read with
    errors="replace"), lines only the Python reader takes (NaN, long numbers), duplicate keys,
    long lines, and a last line without a newline."""
    rng = random.Random(7)
    lines = []
    for k in range(3000):
        text = "".join(rng.choice(GOOD + ["plain ", "x" * 40, "\n", '"', "\\", "\t", "\x00"])
                       for _ in range(rng.randrange(0, 12)))
        line = json.dumps({"id": k, "text": text}, ensure_ascii=bool(k % 2)).encode()
        roll = k % 25
        if roll == 1:
            line = b'{"text": "pair \\ud83d\\ude00 lone \\ud83d end \\udc00"}'
        elif roll == 2:
            line = b'{"text": "bad ' + rng.choice(BAD) + b' utf8"}'
        elif roll == 3:
            line = b'{"n": NaN, "text": "nan"}'
        elif roll == 4:
            line = b'{"n": ' + b"7" * 80 + b', "text": "long number"}'
        elif roll == 5:
            line = b'{"text": "first", "text": "second"}'
        elif roll == 6:
            line = b"  \t "
        elif roll == 7:
            line = b'{"text": "' + "長い".encode() * 40000 + b'"}'
        lines.append(line + (b"\r\n" if k % 7 == 0 else b"\n"))
    files = []
    for j, part in enumerate((lines[:1200], lines[1200:])):
        p = tmp_path / f"mixed{j}.jsonl"
        p.write_bytes((b"\xef\xbb\xbf" if j == 0 else b"") + b"".join(part).rstrip(b"\r\n"))
        files.append(str(p))
    return files


def _job_files(out) -> dict:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


def test_the_jobs_shards_and_manifest_are_the_same_with_the_native_reader_off(tmp_path,
                                                                                monkeypatch):
    from gputok.backends import native
    from gputok.corpus import encode_corpus

    if not native.available()[0]:
        pytest.skip("native backend unavailable")
    native.library()
    files = _mixed_corpus(tmp_path)
    got = {}
    for reader in ("1", "0"):
        monkeypatch.setenv("GPUTOK_NATIVE_READER", reader)
        assert (corpus_jsonl.parser("text") is None) == (reader == "0")
        out = tmp_path / f"out{reader}"
        encode_corpus(files, str(out), encoding="r50k_base", backend="native", errors="replace",
                      batch_bytes=100_000, shard_tokens=50_000, workers=1, overwrite=True)
        got[reader] = _job_files(out)
    assert len(got["1"]) > 4 and got["1"] == got["0"]
    # an error (a field that is not a string) names the same line either way
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n' * 50 + b'{"text": null}\n')
    msgs = []
    for reader in ("1", "0"):
        monkeypatch.setenv("GPUTOK_NATIVE_READER", reader)
        with pytest.raises(CorpusError) as e:
            encode_corpus([str(bad)], str(tmp_path / "bad"), encoding="r50k_base",
                          backend="native", workers=1, overwrite=True)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and ":51:" in msgs[0]
