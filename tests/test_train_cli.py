"""``gputok train``: outputs that HF, tiktoken and gputok load, progress, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gputok
import testdata
from gputok.cli import main

ROOT = Path(__file__).resolve().parent.parent
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    docs = testdata.corpus("prose", max_mb=0.3)
    jl = d / "a.jsonl"
    jl.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[1:]), encoding="utf-8")
    txt = d / "b.txt"
    txt.write_text(docs[0], encoding="utf-8")
    return [jl, txt], docs[1:] + docs[:1]


def test_train_tokenizer_json(corpus_files, tmp_path, capsys):
    from tokenizers import Tokenizer

    paths, docs = corpus_files
    out = tmp_path / "tok.json"
    rc = main(["train", "--vocab-size", "700", "--pattern", "cl100k", "--special", EOT,
               "--special", "<pad>", *map(str, paths), "-o", str(out), "-q"])
    assert rc == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and summary[0].startswith("gputok train: 700 tokens (442 merges)")
    want = gputok.train_bpe(docs, vocab_size=700, special_tokens=[EOT, "<pad>"])
    hf = Tokenizer.from_file(str(out))
    enc = gputok.load(out)
    text = f"Some held-back text, {EOT} with a special.\n"
    ids = want.encode(text, allowed_special="all")
    assert enc.encode(text, allowed_special="all") == ids
    assert hf.encode(text, add_special_tokens=False).ids == ids
    model = json.loads(out.read_text())["model"]
    assert len(model["merges"]) == 442 and model["vocab"][EOT] == 0


def test_train_tiktoken_output(corpus_files, tmp_path, capsys):
    import tiktoken

    from gputok.loaders.tiktoken_file import read_ranks, read_sidecar

    paths, docs = corpus_files
    out = tmp_path / "mine.tiktoken"
    assert main(["train", "--vocab-size", "600", "--pattern", "gpt2", "--min-frequency", "3",
                 *map(str, paths), "-o", str(out), "-q"]) == 0
    meta = read_sidecar(out)
    assert meta["name"] == "mine" and meta["special_tokens"] == {}
    tk = tiktoken.Encoding("mine", pat_str=meta["pat_str"], mergeable_ranks=read_ranks(out),
                           special_tokens={})
    enc = gputok.load(out)
    want = gputok.train_bpe(docs, vocab_size=600, pattern="gpt2", min_frequency=3)
    for text in docs[:3]:
        ids = want.encode_ordinary(text)
        assert enc.encode_ordinary(text) == ids == tk.encode_ordinary(text)


def test_progress_bars_only_on_a_terminal(corpus_files, tmp_path):
    import pty

    paths, _ = corpus_files
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "gputok", "train", "--vocab-size", "500", *map(str, paths),
           "-o", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # a pipe or a log file gets no progress bars
    assert "merges/s" in r.stdout and str(out) in r.stdout
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()  # a terminal gets them (one with a size: tqdm fits to it)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    r = subprocess.run(cmd + ["--overwrite"], cwd=ROOT, stdout=subprocess.PIPE, stderr=follower)
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
    assert b"words" in err and b"merge/s" in err


def test_output_is_not_overwritten_silently(corpus_files, tmp_path, capsys):
    paths, _ = corpus_files
    out = tmp_path / "tok.json"
    out.write_text("precious")
    assert main(["train", "--vocab-size", "300", str(paths[1]), "-o", str(out), "-q"]) == 2
    assert capsys.readouterr().err.strip() == \
        f"gputok: error: -o {out} exists; pass --overwrite to replace it"
    assert out.read_text() == "precious"
    assert main(["train", "--vocab-size", "300", str(paths[1]), "-o", str(out), "-q",
                 "--overwrite"]) == 0
    assert gputok.load(out).n_vocab == 300


def test_vocab_size_below_the_byte_alphabet_is_an_error(corpus_files, tmp_path, capsys):
    paths, _ = corpus_files
    out = tmp_path / "t.json"
    assert main(["train", "--vocab-size", "100", "--special", EOT, str(paths[1]), "-o", str(out),
                 "-q"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gputok: error: --vocab-size 100 is below the 257 ids every byte-level vocabulary has "
        "(256 bytes + 1 special token(s)); pass --vocab-size 257 or more")
    assert not out.exists()


def test_empty_corpus_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    out = tmp_path / "t.json"
    assert main(["train", "--vocab-size", "300", str(empty), "-o", str(out), "-q"]) == 2
    assert capsys.readouterr().err.strip() == \
        f"gputok: error: the inputs hold no text ({empty}); {out} was not written"
    assert not out.exists()


def test_fewer_merges_than_asked_is_said(tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("ab ab ab")
    out = tmp_path / "t.json"
    assert main(["train", "--vocab-size", "400", str(small), "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err.strip()
    n = gputok.load(out).n_vocab
    assert n < 400 and err == (f"gputok: warning: stopped at {n} of the 400 tokens asked for: no "
                               "pair occurs --min-frequency 2 times or more")


@pytest.mark.parametrize("argv,message", [
    (["--vocab-size", "500", "{missing}", "-o", "{out}.json"], "missing.txt: no such file"),
    (["--vocab-size", "500", "{good}", "-o", "{out}.model"], "must end with .json"),
    (["--vocab-size", "500", "{good}", "-o", "{out}/nodir/x.json"], "no such directory"),
    (["--vocab-size", "0", "{good}", "-o", "{out}.json"], "--vocab-size 0 is below the 256"),
    (["--vocab-size", "500", "--pattern", "(unclosed", "{good}", "-o", "{out}.json"],
     "invalid pattern"),
    (["--vocab-size", "500", "{bad_utf8}", "-o", "{out}.json"], "invalid UTF-8"),
])
def test_bad_input_is_one_line(argv, message, corpus_files, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe")
    subs = {"{missing}": str(tmp_path / "missing.txt"), "{good}": str(corpus_files[0][1]),
            "{bad_utf8}": str(bad), "{out}": str(tmp_path / "o")}
    args = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace(k, v)
        args.append(a)
    assert main(["train", *args, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gputok: error: ") and message in err[0], err


def test_byte_layout_verbose_log_and_threads(corpus_files, tmp_path, capsys):
    from gputok.loaders.tiktoken_file import read_ranks

    paths, docs = corpus_files
    out = tmp_path / "bytes.tiktoken"
    assert main(["train", "--vocab-size", "400", "--id-order", "bytes", "--special", EOT,
                 "--threads", "1", "--max-word-memory", "64M", "--verbose", *map(str, paths),
                 "-o", str(out), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 400 - 257 and err[0].startswith("merge 1: 256 = ")
    ranks = read_ranks(out)
    assert all(ranks[bytes([b])] == b for b in range(256)) and max(ranks.values()) == 398
    enc = gputok.load(out)
    want = gputok.train_bpe(docs, vocab_size=400, special_tokens=[EOT], id_order="bytes")
    assert enc.encode_single_token(EOT) == 399 == want.encode_single_token(EOT)
    assert enc.encode(docs[0][:2000]) == want.encode(docs[0][:2000])


def test_an_interrupted_write_leaves_nothing(corpus_files, tmp_path, capsys, monkeypatch):
    import gputok.export as export

    paths, _ = corpus_files

    def half_written(enc, path):
        Path(path).write_text("{\"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "save_hf_json", half_written)
    out = tmp_path / "t.json"
    assert main(["train", "--vocab-size", "300", str(paths[1]), "-o", str(out), "-q"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value,message", [("lots", "expected bytes"), ("0", "positive")])
def test_bad_word_memory_is_one_line(value, message, corpus_files, tmp_path, capsys):
    assert main(["train", "--vocab-size", "300", str(corpus_files[0][1]), "-o",
                 str(tmp_path / "t.json"), "--max-word-memory", value, "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_train_sentencepiece_model(corpus_files, tmp_path, capsys):
    import io

    import sentencepiece as spm

    paths, docs = corpus_files
    lines = [line for d in docs for line in d.split("\n")]
    txt = tmp_path / "lines.txt"
    txt.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "m.model"
    assert main(["train", "--model-type", "spm", "--vocab-size", "1200", "--byte-fallback",
                 "--user-defined", EOT, str(txt), "-o", str(out), "-q"]) == 0
    assert capsys.readouterr().out.startswith("gputok train: 1200 pieces")
    want = io.BytesIO()
    spm.SentencePieceTrainer.train(input=str(txt), model_writer=want, model_type="bpe",
                                   vocab_size=1200, byte_fallback=True,
                                   user_defined_symbols=[EOT], minloglevel=2)
    ours = spm.SentencePieceProcessor(model_file=str(out))
    theirs = spm.SentencePieceProcessor(model_proto=want.getvalue())
    assert [ours.id_to_piece(i) for i in range(1200)] == \
        [theirs.id_to_piece(i) for i in range(1200)]
    assert ours.encode(docs[:5]) == theirs.encode(docs[:5])
    assert main(["train", "--model-type", "spm", "--vocab-size", "1200", str(txt), "-o",
                 str(tmp_path / "m.json"), "-q"]) == 2
    assert "written as a .model" in capsys.readouterr().err
