"""The benchmarks' shared parts: the record format (bench/README.md) and the peers' id check."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import _common  # noqa: E402
import peers  # noqa: E402


def test_a_record_states_commit_machine_date_command_versions_output_and_data(tmp_path):
    path = tmp_path / "results" / "x.md"
    with _common.recording(str(path), "bench_x.py", "what it measures", ["tiktoken"]) as rec:
        print("the table")
        rec["data"] = {"rows": [1, 2]}
    text = path.read_text()
    assert text.startswith("# bench_x.py: what it measures\n")
    for field in ("commit", "date", "machine", "command", "versions"):
        assert re.search(rf"^- {field}: \S", text, re.M), field
    assert re.search(r"^- commit: [0-9a-f]{7,}", text, re.M)
    assert "tiktoken " in text and "numpy " in text
    assert "```text\nthe table\n```" in text
    data = re.search(r"```json\n(.*?)\n```", text, re.S).group(1)
    assert json.loads(data) == {"rows": [1, 2]}


def test_no_record_without_a_path(tmp_path, capsys):
    with _common.recording(None, "bench_x.py", "what", []) as rec:
        print("shown")
        rec["data"] = {}
    assert capsys.readouterr().out == "shown\n"
    assert not list(tmp_path.iterdir())


def test_inexact_names_the_documents_that_differ():
    reference = [[1, 2], [3], [], [4, 5]]
    ids, off = np.array([1, 2, 3, 4, 5], np.uint32), np.array([0, 2, 3, 3, 5])
    assert peers.inexact((ids, off), reference) is None
    assert peers.inexact([[1, 2], [3], [], [4, 5]], reference) is None
    why = peers.inexact([[1, 2], [9], [], [4]], reference, ["a b", "c", "", "d e"])
    assert "on 2 of 4 documents" in why and "document 1 'c'" in why
    assert "3 results for 4 documents" in peers.inexact([[1, 2], [3], []], reference)


def test_checked_leaves_out_an_inexact_or_missing_peer(monkeypatch, capsys):
    good = peers.Peer("good", "tiktoken", lambda docs: [[1] for _ in docs], None)
    bad = peers.Peer("bad", "tiktoken", lambda docs: [[2] for _ in docs], None)

    def build(name, encoding, **kw):
        if name == "absent":
            raise peers.Unavailable("not installed (pip install absent)")
        return {"good": good, "bad": bad}[name]
    monkeypatch.setattr(peers, "build", build)
    got = peers.checked(["good", "bad", "absent"], "cl100k_base", ["x", "y"], [[1], [1]])
    assert list(got) == ["good"]
    out = capsys.readouterr().out
    assert "bad: NOT EXACT" in out and "absent: skipped: not installed" in out


def test_a_peer_without_the_encoding_says_so():
    pytest.importorskip("toktok")
    with pytest.raises(peers.Unavailable, match="r50k_base"):
        peers.build("toktok-rs", "r50k_base")


@pytest.mark.parametrize("name", peers.FASTEST)
def test_the_fastest_peers_give_tiktokens_ids(name):
    """Each peer, as the benchmarks build it, on a few texts (a peer missing here skips)."""
    try:
        peer = peers.build(name, "cl100k_base")
    except peers.Unavailable as e:
        pytest.skip(str(e))
    tk = _common.tiktoken_for("cl100k_base")
    docs = ["hello world", "  def f(x):\n\treturn x", "中文 😀 don't", "a" * 3000]
    assert peers.inexact(peer.batch(docs), [tk.encode_ordinary(d) for d in docs], docs) is None
    assert [int(i) for i in peer.one(docs[2])] == tk.encode_ordinary(docs[2])


def test_rounds_take_every_runner_in_turn_each_starting_with_the_next():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    best = _common.best_interleaved(fns, 3)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")  # warm-up, 3 rounds
    assert set(best) == set("abc") and all(t >= 0 for t in best.values())
