"""``gputok parity``: sides, mismatch reports with the first differing token, throughput, chart."""

from __future__ import annotations

import json

import pytest

import gputok
from gputok.cli import main
from gputok.parity import compare_docs, first_difference, make_side

TEXTS = ["hello world", "Some prose, with punctuation!", "日本語のテキスト", "  spaces\n\tand tabs",
         "<|endoftext|> as text"]


@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return p


def test_identical_sides_pass(corpus, tmp_path, capsys):
    rc = main(["parity", "--a", "tiktoken:r50k_base", "--b", "gputok:r50k_base", str(corpus),
               "--json", str(tmp_path / "r.json")])
    assert rc == 0
    md = capsys.readouterr().out
    assert md.startswith("# gputok parity: `tiktoken:r50k_base` vs `gputok:r50k_base`")
    assert "**identical ids on every document**" in md
    rep = json.loads((tmp_path / "r.json").read_text())
    c = rep["corpora"][0]
    assert c["docs"] == 5 and c["n_mismatches"] == 0 and all(s > 0 for s in c["seconds"])
    assert c["bytes"] == sum(len(t.encode()) for t in TEXTS)


def test_mismatch_reports_first_difference(corpus, tmp_path, capsys):
    rc = main(["parity", "--a", "gputok:cl100k_base", "--b", "gputok:r50k_base", str(corpus),
               "--json", str(tmp_path / "r.json"), "--report", str(tmp_path / "r.md")])
    assert rc == 1
    rep = json.loads((tmp_path / "r.json").read_text())
    m = rep["corpora"][0]["mismatches"][0]
    assert m == {"where": f"{corpus}:1", "token": 0, "char": 0, "len_a": 2, "len_b": 2,
                 "a": [[15339, "hello"], [1917, " world"]], "b": [[31373, "hello"], [995, " world"]],
                 "from_token": 0, "text": "hello world"}
    md = (tmp_path / "r.md").read_text()
    assert f"## {corpus}:1: first difference at token 0 (character 0; 2 vs 2 tokens)" in md
    assert "| gputok:cl100k_base | 15339:'hello' 1917:' world' |" in md


def test_first_difference_and_window():
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2]) is None
    a = make_side("gputok:r50k_base")
    b = make_side("gputok:r50k_base")
    b.encode = lambda texts: [[*ids[:6], 0, *ids[6:]] for ids in a.encode(texts)]
    text = "one two three four five six seven eight nine ten"
    rep = compare_docs([a, b], [text])
    m = rep["mismatches"][0]
    ids = gputok.get_encoding("r50k_base").encode(text)
    assert (m["token"], m["from_token"]) == (6, 2)
    assert [i for i, _ in m["a"]] == ids[2:10] and [i for i, _ in m["b"]] == ids[2:6] + [0] + ids[6:9]
    assert m["char"] == len(" ".join(text.split()[:6])) and m["len_b"] == len(ids) + 1


def test_hf_and_sentencepiece_sides(tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece", reason="sentencepiece not installed")
    from gputok.export import save_hf_json

    enc = gputok.get_encoding("r50k_base")
    save_hf_json(enc, tmp_path / "tok.json")
    rep = compare_docs([make_side(f"hf:{tmp_path / 'tok.json'}"), make_side("gputok:r50k_base")],
                       TEXTS[:4])
    assert rep["n_mismatches"] == 0
    text = tmp_path / "sp.txt"
    text.write_text("\n".join(TEXTS * 50))
    sentencepiece.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "m"),
                                             vocab_size=60, model_type="bpe", minloglevel=2)
    sp = make_side(f"sp:{tmp_path / 'm.model'}")
    ref = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    assert sp.encode(TEXTS) == ref.encode(TEXTS)


def test_bad_side_spec():
    with pytest.raises(ValueError, match="a side is KIND:WHAT with KIND one of gputok, tiktoken, hf, sp"):
        make_side("cl100k_base")


@pytest.mark.full  # matplotlib: the test-full extra
def test_plot(corpus, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: pip install 'gputok[plot]'")
    png = tmp_path / "chart.png"
    assert main(["parity", "--a", "tiktoken:cl100k_base", str(corpus), str(corpus),
                 "--plot", str(png), "--report", str(tmp_path / "r.md")]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    _sizes(tmp_path, "--plot", str(png))


def test_sizes(tmp_path):
    _sizes(tmp_path)


def _sizes(tmp_path, *plot):
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n" for i in range(300)))
    assert main(["parity", "--a", "tiktoken:r50k_base", "--b", "gputok:r50k_base", str(big),
                 "--sizes", "0.01,0.05,10", *plot, "--json", str(tmp_path / "r.json"),
                 "--report", str(tmp_path / "r.md")]) == 0
    sizes = json.loads((tmp_path / "r.json").read_text())["corpora"][0]["sizes"]
    lens = [len((f"document {i} " * 40).encode()) for i in range(300)]
    total = sum(lens)
    # the smallest prefix of whole documents that reaches each size; 10 MB: the whole corpus
    first = [next(n for n in range(1, 301) if sum(lens[:n]) >= mb * 1e6) for mb in (0.01, 0.05)]
    assert [p["docs"] for p in sizes] == first + [300] and sizes[-1]["mb"] == total / 1e6
    assert all(s > 0 for p in sizes for s in p["seconds"])
    assert f"| {big} | {total / 1e6:.2f} | 300 |" in (tmp_path / "r.md").read_text()


def test_a_document_one_side_refuses_is_a_report_line(tmp_path, capsys):
    """HF ``tokenizers`` takes no str holding a lone surrogate (a JSON ``"\\ud800"``): that
    document is reported as refused, with the error, and the others are still compared."""
    import testdata

    hf = testdata.vocab_path("qwen2_tokenizer_json")
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"text": "ab\ud800cd"}) + "\n"
                 + "".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:4]))
    rc = main(["parity", "--a", f"hf:{hf}", "--b", f"gputok:{hf}", str(p),
               "--json", str(tmp_path / "r.json")])
    assert rc == 1
    md = capsys.readouterr().out
    assert f"## {p}:1: `hf:{hf}` cannot encode it (TypeError: " in md
    assert "**1 document(s) differ**" in md
    c = json.loads((tmp_path / "r.json").read_text())["corpora"][0]
    assert c["docs"] == 5 and c["n_mismatches"] == 1
    assert c["mismatches"][0]["refused"][0][0] == f"hf:{hf}"
