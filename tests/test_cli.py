"""The ``gputok`` command line: encode to shards (incl. resume), show, info, bad input, and one
test per rough edge a new user hit (the issue's bug list)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gputok
from gputok.cli import main
from gputok.corpus import read_shards

ROOT = Path(__file__).resolve().parent.parent


def _jsonl(path: Path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def _all_docs(outdir):
    docs = []
    for ids, off in read_shards(outdir):
        docs += [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    return docs


def test_encode_jsonl_and_txt(tmp_path, capsys):
    enc = gputok.get_encoding("r50k_base")
    texts = ["hello world", "", "second doc\nwith lines", "日本語"] * 5
    a = _jsonl(tmp_path / "a.jsonl", texts)
    b = tmp_path / "b.txt"
    b.write_text("a whole file is one document\n")
    out = tmp_path / "out"
    assert main(["encode", "-e", "r50k_base", str(a), str(b), "-o", str(out), "-q",
                 "--shard-tokens", "20", "--batch-bytes", "30"]) == 0
    summary = capsys.readouterr().out
    assert "21 docs" in summary and "MB/s" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["dtype"] == "uint16" and len(manifest["shards"]) > 1
    assert _all_docs(out) == [enc.encode(t) for t in texts] + [enc.encode(b.read_text())]
    assert np.load(out / manifest["shards"][0]["files"][0]).dtype == np.uint16


def test_encode_resume_loses_nothing(tmp_path):
    texts = [f"document number {i} " * (i % 7 + 1) for i in range(200)]
    src = _jsonl(tmp_path / "c.jsonl", texts)
    out = tmp_path / "out"
    args = ["encode", "-e", "cl100k_base", str(src), "-o", str(out), "-q", "--shard-tokens", "100",
            "--batch-bytes", "200"]
    assert main(args) == 0
    full = _all_docs(out)
    # simulate a job killed after 3 shards: drop the later shards from the manifest
    m = json.loads((out / "manifest.json").read_text())
    m["shards"], m["complete"] = m["shards"][:3], False
    (out / "manifest.json").write_text(json.dumps(m))
    assert main(args) == 2  # refuses to clobber without --resume/--overwrite
    assert main(args + ["--resume"]) == 0
    assert _all_docs(out) == full
    assert json.loads((out / "manifest.json").read_text())["docs"] == 200


def test_append_eot(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", ["a", "b c"])
    out = tmp_path / "o"
    assert main(["encode", str(src), "-o", str(out), "-q", "--append-eot"]) == 0
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode("a") + [enc.eot_token], enc.encode("b c") + [enc.eot_token]]


@pytest.mark.parametrize("content,needle", [
    (b'{"text": "ok"}\n{not json}\n', "bad.jsonl:2: invalid JSON"),
    (b'{"body": "x"}\n', "bad.jsonl:1: no field 'text'"),
    (b'{"text": 3}\n', "bad.jsonl:1: field 'text' is a number, not a string"),
    (b'{"text": null}\n', "bad.jsonl:1: field 'text' is null, not a string"),
    (b'["text"]\n', "bad.jsonl:1: expected a JSON object"),
    (b'{"text": "\xff"}\n', "bad.jsonl:1: invalid UTF-8"),
    (b'{"text": "a <|endoftext|>"}\n', "--special-as-text"),
])
def test_bad_input_is_one_clear_line(tmp_path, content, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "gputok", "encode", str(bad), "-o",
                        str(tmp_path / "o"), "-q"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_missing_file_and_unknown_encoding(tmp_path, capsys):
    assert main(["encode", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    f = _jsonl(tmp_path / "x.jsonl", ["a"])
    assert main(["encode", "-e", "nope", str(f), "-o", str(tmp_path / "o")]) == 2
    assert "cl100k_base" in capsys.readouterr().err


def test_special_as_text(tmp_path):
    src = _jsonl(tmp_path / "s.jsonl", ["a <|endoftext|>"])
    out = tmp_path / "o"
    assert main(["encode", str(src), "-o", str(out), "-q", "--special-as-text"]) == 0
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode_ordinary("a <|endoftext|>")]


def test_info_and_show(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "available" in out and "cuda" in out
    assert "regex classes tiktoken 16.0, hf 16.0; hf normalizers 9.0" in out
    assert main(["show", "-e", "cl100k_base", "hello", "world"]) == 0
    assert "15339" in capsys.readouterr().out


def _run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "gputok", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, input=stdin if stdin is not None else "",
                          timeout=300)


# ---- the bug list, one test each ----------------------------------------------------

def test_allowed_special_does_not_swallow_the_text():
    r = _run("show", "--allowed-special", "all", "hi <|endoftext|>", stdin="not this")
    assert r.returncode == 0, r.stderr
    enc = gputok.get_encoding("cl100k_base")
    want = enc.encode("hi <|endoftext|>", allowed_special="all")
    assert r.stdout.splitlines()[0] == f"{len(want)} tokens (cl100k_base)"
    assert [int(line.split()[0]) for line in r.stdout.splitlines()[1:]] == want


def test_allowed_special_does_not_swallow_the_inputs(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", ["a <|endoftext|> b"])
    out = tmp_path / "out"
    r = _run("encode", "--allowed-special", "<|endoftext|>", src, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode("a <|endoftext|> b", allowed_special="all")]


def test_special_token_error_names_file_line_and_a_shell_safe_fix(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", ["fine", "also fine", "bad <|endoftext|> here"])
    r = _run("encode", src, "-o", tmp_path / "o", "-q")
    assert r.returncode == 2
    assert r.stderr.startswith(f"gputok: error: {src}:3: the text contains the special token "
                               "'<|endoftext|>'; pass --special-as-text")
    assert "--allowed-special '<|endoftext|>' to encode it" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_second_input_fails_before_any_work(tmp_path):
    first = _jsonl(tmp_path / "first.jsonl", ["doc"] * 1000)
    out = tmp_path / "out"
    r = _run("encode", first, tmp_path / "second.jsonl", "-o", out, "-q")
    assert r.returncode == 2
    assert r.stderr.strip() == f"gputok: error: {tmp_path}/second.jsonl: no such file"
    assert not out.exists()  # nothing was encoded, nothing written


def test_unwritable_output_fails_before_any_work(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", ["doc"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _run("encode", src, "-o", blocker / "out", "-q")
    assert r.returncode == 2
    assert r.stderr.startswith(f"gputok: error: cannot write to the output directory {blocker}/out")


@pytest.mark.parametrize("batch", ["20000", "8M"])
def test_truncated_gzip_is_one_line_and_says_what_is_kept(tmp_path, batch):
    """Small batches: the shards before the damage are kept and the message counts them; one
    batch larger than the file: nothing was written, and the message says so (it once said
    "the documents before it are kept" with 0 docs and 0 shards)."""
    import gzip

    raw = "".join(json.dumps({"text": f"doc {i} " * 20}) + "\n" for i in range(3000)).encode()
    gz = gzip.compress(raw)
    (tmp_path / "t.jsonl.gz").write_bytes(gz[: len(gz) * 3 // 4])
    out = tmp_path / "out"
    r = _run("encode", "-e", "r50k_base", tmp_path / "t.jsonl.gz", "-o", out, "-q",
             "--shard-tokens", "5000", "--batch-bytes", batch)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gputok: error: {tmp_path}/t.jsonl.gz: truncated "
                                               "or corrupt gz data (EOFError"), r.stderr
    m = json.loads((out / "manifest.json").read_text())
    if batch == "8M":
        assert m["docs"] == 0 and not m["shards"]
        assert err[0].endswith(f". No shard was finished, so {out} holds nothing yet")
        assert "kept" not in err[0]
        return
    enc = gputok.get_encoding("r50k_base")
    assert m["docs"] > 1000 and _all_docs(out) == [enc.encode(f"doc {i} " * 20)
                                                   for i in range(m["docs"])]
    assert err[0].endswith(f". {len(m['shards'])} finished shard(s) ({m['docs']} docs, "
                           f"{m['tokens']} tokens, input up to {tmp_path}/t.jsonl.gz:{m['docs']}) "
                           f"are kept in {out}; rerun with --resume to continue")


def test_shard_cap_is_a_cap_and_small_jobs_keep_shards(tmp_path):
    from gputok.corpus import Interrupted, encode_corpus

    src = _jsonl(tmp_path / "in.jsonl", [f"doc {i} " * 5 for i in range(100)])
    out = tmp_path / "out"
    calls = []

    def interrupt(nbytes, docs, tokens):
        calls.append(docs)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        encode_corpus([src], out, batch_bytes=300, workers=1, progress=interrupt)
    m = json.loads((out / "manifest.json").read_text())
    assert m["docs"] == calls[1] > 0 and len(m["shards"]) == 1  # the default cap is not a floor
    assert str(e.value).startswith(f"1 finished shard(s) ({calls[1]} docs")
    s = encode_corpus([src], out, resume=True, workers=1)
    assert s.resumed_docs == calls[1] and s.docs == 100 - calls[1]
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode(f"doc {i} " * 5) for i in range(100)]


def test_interrupt_before_any_shard_says_nothing_is_kept(tmp_path):
    from gputok.corpus import ShardWriter

    w = ShardWriter(tmp_path / "o", meta={}, n_vocab=100)
    assert w.kept() == f"no shard was finished, so {tmp_path}/o holds nothing yet"
    w.release()


@pytest.mark.parametrize("where", ["end", "flush"])
def test_ctrl_c_inside_the_writer_keeps_documents_and_positions_together(tmp_path, where,
                                                                        python_sigint):
    """A Ctrl-C that lands inside ``ShardWriter.add`` (between taking a batch's documents and
    recording their input end, or while a shard is written) is held until the writer's state
    is whole again: the shards then hold exactly the documents their recorded end covers, so a
    resumed job neither repeats nor skips any."""
    import os
    import signal

    from gputok.corpus import ShardWriter, read_manifest

    class Ends(list):  # the batch's input positions; reading one sends the Ctrl-C
        def __getitem__(self, i):
            if where == "end":
                os.kill(os.getpid(), signal.SIGINT)
            return list.__getitem__(self, i)

    out = tmp_path / "o"
    w = ShardWriter(out, meta={}, n_vocab=100, cap_tokens=10)
    w.add(np.arange(6, dtype=np.uint32), np.array([0, 3, 6]), [(0, 10), (0, 20)])
    if where == "flush":
        real = w._flush

        def shard_then_ctrl_c():  # (the shard handed to the writer thread, its state reset)
            real()
            os.kill(os.getpid(), signal.SIGINT)
        w._flush = shard_then_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        w.add(np.arange(6, dtype=np.uint32), np.array([0, 3, 6]), Ends([(0, 30), (0, 40)]))
    w._flush = type(w)._flush.__get__(w)
    w.flush()  # what the job does on an interrupt
    w.release()
    m = read_manifest(out)
    docs = [d for ids, off in read_shards(out) for d in np.split(ids, off[1:-1])]
    assert m["docs"] == len(docs) == sum(s["docs"] for s in m["shards"])
    assert tuple(m["shards"][-1]["end"]) == (0, 10 * len(docs))  # the end of the last doc kept


def test_version_and_python_m():
    r = _run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gputok {gputok.__version__}"


def test_stdin_dash_for_encode_and_show(tmp_path):
    out = tmp_path / "out"
    r = _run("encode", "-", "-o", out, "-q", stdin='{"text": "from stdin"}\n{"text": "two"}\n')
    assert r.returncode == 0, r.stderr
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode("from stdin"), enc.encode("two")]
    r = _run("show", "-", stdin="hello world")
    assert r.stdout.splitlines()[1].split()[0] == "15339"
    r = _run("encode", "-", "-o", out, "-q", "--resume", stdin="")
    assert r.returncode == 2 and "standard input cannot be resumed" in r.stderr


def test_utf8_bom_in_jsonl(tmp_path):
    src = tmp_path / "bom.jsonl"
    src.write_bytes(b'\xef\xbb\xbf{"text": "first"}\n{"text": "second"}\n')
    out = tmp_path / "out"
    assert main(["encode", str(src), "-o", str(out), "-q"]) == 0
    enc = gputok.get_encoding("cl100k_base")
    assert _all_docs(out) == [enc.encode("first"), enc.encode("second")]


def test_gputok_export_is_an_attribute():
    r = subprocess.run([sys.executable, "-c", "import gputok; print(gputok.export.save_hf_json."
                        "__name__)"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "save_hf_json", r.stderr


def test_unknown_allowed_special_is_named(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", ["a"])
    r = _run("encode", "--allowed-special", "<|im_start|>", src, "-o", tmp_path / "o")
    assert r.returncode == 2
    assert "--allowed-special '<|im_start|>': cl100k_base has no such special token" in r.stderr


def test_show_colours_tokens():
    r = _run("show", "--color", "always", "hello world")
    assert r.stdout.splitlines()[1] == ("\x1b[48;5;153mhello\x1b[0m\x1b[48;5;223m world\x1b[0m")
    r = _run("show", "hello world")  # not a terminal: no escape codes
    assert "\x1b[" not in r.stdout


def test_workers_and_formats_from_the_cli(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", [f"document {i} " * (i % 9) for i in range(400)])
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["-e", "r50k_base", "--format", "megatron", "--batch-bytes", "2k", "-q"]
    assert _run("encode", src, "-o", one, "--workers", "1", *common).returncode == 0
    r = _run("encode", src, "-o", two, "--workers", "2", "--backend", "numpy", *common)
    assert r.returncode == 0 and "(r50k_base, numpy x2)" in r.stdout, r.stderr
    for a, b in zip(sorted(one.glob("shard_*")), sorted(two.glob("shard_*"))):
        assert a.read_bytes() == b.read_bytes()
    assert len(list(one.glob("shard_*"))) == 2


def test_show_special_token_error_gives_cli_fixes():
    r = _run("show", "a <|endoftext|>")
    assert r.returncode == 2 and r.stderr.strip() == (
        "gputok: error: the text contains the special token '<|endoftext|>'; pass "
        "--allowed-special '<|endoftext|>' to show it as the control token, or "
        "--special-as-text to show it as plain text")
    r = _run("show", "--special-as-text", "a <|endoftext|>")
    enc = gputok.get_encoding("cl100k_base")
    assert [int(x.split()[0]) for x in r.stdout.splitlines()[1:]] == \
        enc.encode_ordinary("a <|endoftext|>")


def test_gz_progress_bar_reaches_the_compressed_total(tmp_path):
    import fcntl
    import gzip
    import os
    import pty
    import struct
    import termios

    raw = "".join(json.dumps({"text": f"doc {i} " * 30}) + "\n" for i in range(4000)).encode()
    src = tmp_path / "c.jsonl.gz"
    src.write_bytes(gzip.compress(raw))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 150, 0, 0))
    r = subprocess.run([sys.executable, "-m", "gputok", "encode", str(src), "-o",
                        str(tmp_path / "o"), "--batch-bytes", "64k"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    err = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(leader)
    assert r.returncode == 0
    final = err.decode().replace("\r\n", "\r").split("\r")
    last = [line for line in final if "encode:" in line][-1]
    size = os.path.getsize(src)
    # tqdm's own rendering of the total (unit_divisor 1024): done == total == compressed size
    from tqdm import tqdm

    total = tqdm.format_sizeof(size, divisor=1024)
    assert "100%" in last and f"{total}/{total}" in last, last
    assert len(raw) > 5 * size  # the uncompressed size would be a very different number


def test_a_closed_stdout_pipe_is_a_quiet_exit():
    # `gputok show ... | head -1`: the reader leaves early; no traceback, status 0
    text = "hello world " * 20000  # ~40,000 lines of output, far beyond a pipe buffer
    proc = subprocess.Popen([sys.executable, "-m", "gputok", "show", "-e", "cl100k_base", "-"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdin.write(text.encode())
    proc.stdin.close()
    assert proc.stdout.readline().endswith(b" tokens (cl100k_base)\n")
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err


def test_another_broken_pipe_is_an_error(monkeypatch, capsys):
    # a broken pipe that is not our stdout (a worker's, a FIFO) must not pass for success
    from gputok import cli

    def boom(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_info", boom)
    monkeypatch.setattr(cli, "_stdout_is_closed", lambda: False)
    assert cli.main(["info"]) == 2
    assert "broken pipe" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["1", "2"])
def test_encode_on_the_native_backend(tmp_path, capsys, workers):
    from gputok.backends import native

    ok, why = native.available()
    if not ok:
        pytest.skip(f"native backend unavailable: {why}")
    enc = gputok.get_encoding("o200k_base")
    texts = ["Hello wörld, it's 2026!", "", "日本語のテキスト " * 40, "x = f(a, b)  # 😀\n" * 30,
             " " * 3000, "abc" * 2000] * 7
    src = _jsonl(tmp_path / "in.jsonl", texts)
    out = tmp_path / "out"
    assert main(["encode", "-e", "o200k_base", str(src), "-o", str(out), "-q", "--backend",
                 "native", "--workers", workers, "--shard-tokens", "5000"]) == 0
    assert f"(o200k_base, native{' x2' if workers == '2' else ''})" in capsys.readouterr().out
    assert _all_docs(out) == [enc.encode_ordinary(t) for t in texts]


@pytest.mark.parametrize("checksum", ["xxh64", "sha256"])
@pytest.mark.parametrize("fmt", ["npy", "megatron", "parquet"])
def test_shard_checksums_match_the_files_whatever_the_piece_sizes(tmp_path, fmt, checksum):
    """Shard files are hashed while they are written (big pieces on a helper thread, small
    ones inline, in order): the manifest's checksum is the file's, for shards of mixed sizes."""
    import hashlib

    import numpy as np

    from gputok.corpus import shards
    from gputok.corpus import ShardWriter, read_manifest
    from gputok.corpus.checksum import xxh64_reference

    digest_of = {"sha256": lambda raw: hashlib.sha256(raw).hexdigest(),
                 "xxh64": lambda raw: f"{xxh64_reference(raw):016x}"}[checksum]
    out = tmp_path / "o"
    w = ShardWriter(out, fmt=fmt, meta={}, n_vocab=70000, cap_tokens=300_000, checksum=checksum)
    rng = np.random.default_rng(5)
    for k, n_docs in enumerate([1, 40, 3, 900]):
        lens = rng.integers(0, 2000, n_docs)
        lens[0] = 250_000 if k == 0 else lens[0]  # a shard with pieces over HASH_AHEAD
        ids = rng.integers(0, 70000, int(lens.sum())).astype(np.uint32)
        off = np.concatenate([[0], np.cumsum(lens)])
        w.add(ids, off, [(0, k, i) for i in range(n_docs)])
    writes = []
    real = shards.ShardWriter._write_manifest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shards.ShardWriter, "_write_manifest",
                   lambda self: writes.append(self.complete) or real(self))
        w.close()
    assert writes == [True]  # the last shard's manifest says the job is complete: one write
    m = read_manifest(out)
    assert m["complete"] and len(m["shards"]) >= 3 and m["docs"] == 944
    for s in m["shards"]:
        assert [k for k in ("xxh64", "sha256") if k in s] == [checksum]
        for name, size, digest in zip(s["files"], s["bytes"], s[checksum]):
            raw = (out / name).read_bytes()
            assert len(raw) == size and digest_of(raw) == digest, name
    assert ShardWriter(out, fmt=fmt, meta={}, n_vocab=70000, resume=True).complete


def test_a_failed_last_shard_leaves_the_job_incomplete(tmp_path, monkeypatch):
    import numpy as np

    from gputok.corpus import ShardWriteError, ShardWriter, read_manifest

    w = ShardWriter(tmp_path / "o", meta={}, n_vocab=100)
    w.add(np.arange(10, dtype=np.uint32), np.array([0, 4, 10]), [(0, 1), (0, 2)])

    def full(*a):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("gputok.corpus.formats.npy.Npy.write", full)
    monkeypatch.setattr("gputok.corpus.formats.npy.Npy.write_parts", full)  # (the writer's own path)
    with pytest.raises(ShardWriteError, match="the disk is full"):
        w.close()
    assert not w.complete and not read_manifest(tmp_path / "o")["complete"]
    w.release()


def test_train_reads_a_lone_surrogate_escape_as_the_api_does(tmp_path, capsys):
    """A JSON line spelling ``"\\ud800"`` (a lone surrogate: no UTF-8 form) trains as
    ``train_bpe`` on the same str does, the surrogate as U+FFFD (tiktoken's rule, which
    ``gputok encode`` follows too), instead of a bare codec error."""
    texts = ["ab\ud800cd ab\ud800cd", "pair \ud83d\ude00 \ud83d\ude00 ok", "ab\udfffcd"] * 3
    src = _jsonl(tmp_path / "s.jsonl", texts)
    assert "\\ud800" in src.read_text()
    out = tmp_path / "tok.json"
    assert main(["train", str(src), "-o", str(out), "--vocab-size", "270", "-q"]) == 0
    capsys.readouterr()
    want = gputok.train_bpe(texts, vocab_size=270)
    got = gputok.load(out)
    assert got.n_vocab == want.n_vocab == 270
    assert [got.decode_single_token_bytes(i) for i in range(270)] == \
        [want.decode_single_token_bytes(i) for i in range(270)]
    assert "\N{REPLACEMENT CHARACTER}cd".encode() in {got.decode_single_token_bytes(i)
                                                      for i in range(256, 270)}
    enc_out = tmp_path / "enc"
    assert main(["encode", str(src), "-o", str(enc_out), "--tokenizer", str(out), "-q"]) == 0
    assert _all_docs(enc_out) == [want.encode(t) for t in texts]


def test_resume_and_overwrite_together_are_refused(tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", ["a", "b"])
    out = tmp_path / "o"
    assert _run("encode", src, "-o", out, "-q").returncode == 0
    before = (out / "manifest.json").read_bytes()
    r = _run("encode", src, "-o", out, "-q", "--resume", "--overwrite")
    assert r.returncode == 2 and r.stderr == ("gputok: error: --resume continues the job in the "
                                              "output directory and --overwrite deletes it: pass "
                                              "one of them\n")
    assert (out / "manifest.json").read_bytes() == before


def test_invalid_json_on_stdin_hints_the_text_input_format(tmp_path):
    r = _run("encode", "-", "-o", tmp_path / "o", "-q", stdin="just some text\n")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("gputok: error: -:1: invalid JSON (Expecting value at column 1); "
                               "standard input is read as JSON lines: pass --input-format txt to "
                               "read it as one text."), r.stderr
    r = _run("encode", "-", "-o", tmp_path / "o2", "-q", "--input-format", "txt",
             stdin="just some text\n")
    assert r.returncode == 0, r.stderr
    assert _all_docs(tmp_path / "o2") == [gputok.get_encoding("cl100k_base").encode("just some text\n")]


def test_resume_with_other_inputs_says_what_changed(tmp_path):
    a, b = _jsonl(tmp_path / "a.jsonl", ["a"]), _jsonl(tmp_path / "b.jsonl", ["b"])
    out = tmp_path / "o"
    assert _run("encode", a, "-o", out, "-q").returncode == 0
    r = _run("encode", a, b, "-o", out, "-q", "--resume")
    assert r.returncode == 2
    assert f"{out}/manifest.json: cannot resume, the inputs changed (the job has " in r.stderr


def test_a_tiktoken_file_without_sidecar_asks_for_pattern_on_the_command_line(tmp_path):
    import shutil

    import testdata

    ranks = tmp_path / "g.tiktoken"
    shutil.copy(testdata.vocab_path("r50k_base"), ranks)
    r = _run("show", "--tokenizer", ranks, "hello")
    assert r.returncode == 2 and r.stderr.startswith(
        f"gputok: error: {ranks}: a .tiktoken file holds no pre-tokenizer pattern; pass "
        "--pattern NAME (gpt2, ")
    assert "pat_str=" not in r.stderr and "g.tiktoken.json sidecar" in r.stderr
    src = _jsonl(tmp_path / "d.jsonl", ["hello world", "it's 2024"])
    r = _run("encode", "--tokenizer", ranks, src, "-o", tmp_path / "o", "-q")
    assert r.returncode == 2 and "--pattern NAME" in r.stderr
    r = _run("encode", "--tokenizer", ranks, "--pattern", "gpt2", src, "-o", tmp_path / "o", "-q")
    assert r.returncode == 0, r.stderr
    r50k = gputok.get_encoding("r50k_base")
    assert _all_docs(tmp_path / "o") == [r50k.encode("hello world"), r50k.encode("it's 2024")]
    r = _run("show", "--tokenizer", ranks, "--pattern", "gpt2", "hello world")
    assert r.returncode == 0 and "31373" in r.stdout
    r = _run("show", "--pattern", "gpt2", "hello")
    assert r.returncode == 2 and "--pattern goes with --tokenizer" in r.stderr


def test_the_first_job_says_it_builds_the_cpu_kernels_and_reports_the_time(tmp_path):
    """A fresh cache: the native library's one-time build is announced on stderr before any
    progress, and its time is in the summary beside the job's own (it was once a silent 15 s
    behind a progress bar frozen at 0). The compiler here is a stand-in that takes 0.3 s and
    hands over the real library (a real build is ~15 s on two cores)."""
    import os
    import stat

    from gputok.backends.native import build as native_build

    real = native_build.build()
    cxx = tmp_path / "c++"
    cxx.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'stand-in c++ 1.0'; exit 0; fi\n"
                   "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=\"$2\"; shift; done\n"
                   f"sleep 0.3\ncp '{real}' \"$out\"\n")
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "GPUTOK_CACHE": str(tmp_path / "cache"), "GPUTOK_CXX": str(cxx),
           "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "gputok", "encode", "sample/austen.jsonl", "-o",
           str(tmp_path / "o"), "-e", "r50k_base", "--backend", "native", "--workers", "1",
           "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == ("gputok: building the CPU kernels (one time, ~15 s) into "
                        f"{tmp_path}/cache/native")
    took = float(lines[1].removeprefix("gputok: built the CPU kernels in ").removesuffix(" s"))
    assert 0.3 <= took < 30 and len(lines) == 2
    assert f", after {took:.1f} s building the CPU kernels (once); 1 npy shard(s)" in r.stdout
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0 and r.stderr == "" and "building" not in r.stdout, r.stderr
