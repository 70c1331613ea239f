"""``gputok train``: outputs that HF, tiktoken and gputok load, progress, and one-line errors."""

from __future__ import annotations

import json
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


def test_progress_bar_and_summary(corpus_files, tmp_path):
    paths, _ = corpus_files
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "gputok.cli", "train", "--vocab-size", "500",
                        *map(str, paths), "-o", str(out)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "words" in r.stderr and "merges" in r.stderr and "merge/s" in r.stderr
    assert "merges/s" in r.stdout and str(out) in r.stdout


@pytest.mark.parametrize("argv,message", [
    (["--vocab-size", "500", "{missing}", "-o", "{out}.json"], "missing.txt: no such file"),
    (["--vocab-size", "500", "{good}", "-o", "{out}.model"], "must end with .json"),
    (["--vocab-size", "500", "{good}", "-o", "{out}/nodir/x.json"], "no such directory"),
    (["--vocab-size", "0", "{good}", "-o", "{out}.json"], "vocab_size must be a positive"),
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
