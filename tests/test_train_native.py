"""The native CPU trainer (``gputok.train.native``): its word counter against the Python one, its
merge loop against HF's ``BpeTrainer`` and the numpy loop (ties galore), THE PRUNE RULE, the id
layouts (``id_order="bytes"`` against rustbpe, nanochat's trainer), the verbose log and Ctrl-C.

HF parity on the project corpora at several vocabulary sizes is in test_train.py (its ``auto``
backend is this one); corpora here are small (``$GPUTOK_CORPUS_MB`` sizes the big ones there).
"""

from __future__ import annotations

import io
import json
import random
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputok
import gputok.train as gt
import testdata
from conftest import fuzz_examples
from cpu_ref.patterns import resolve_pattern
from gputok.train import cpu, native, words
from gputok.train.progress import MergeLog
from gputok.train.vocab import Vocab
from gputok.train.wordset import WordCounts
from test_train import hf_train

pytestmark = pytest.mark.skipif(not native.available()[0],
                                reason="no C++ compiler for the native trainer")
EOT = "<|endoftext|>"
KINDS = ("prose", "code", "multilingual", "emoji")


def native_words(docs, pattern, threads=2, budget=0, batch_docs=None):
    params = native.pretok_params(resolve_pattern(pattern))
    assert params is not None
    batch_docs = batch_docs or len(docs) or 1
    batches = []
    for i in range(0, len(docs), batch_docs):
        buf = "".join(docs[i:i + batch_docs]).encode()
        off = np.zeros(len(docs[i:i + batch_docs]) + 1, np.int64)
        np.cumsum([len(d.encode()) for d in docs[i:i + batch_docs]], out=off[1:])
        batches.append((buf, off, 1))
    return native.count_batches(batches, params, threads=threads, budget=budget)


def as_counter(wc: WordCounts) -> Counter:
    return Counter({w.decode(): c for w, c in wc.items()})


def python_words(docs, pattern) -> Counter:
    return words.count_words(((t, 1) for t in docs), resolve_pattern(pattern))


def tokens(enc) -> list[bytes]:
    return [enc.decode_single_token_bytes(c) for _, _, c in enc.trained_merges]


# ---------------------------------------------------------------- words


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k"])
@pytest.mark.parametrize("kind", KINDS)
def test_word_counts_equal_the_python_counter(kind, pattern):
    docs = testdata.corpus(kind, max_mb=0.15)
    assert as_counter(native_words(docs, pattern)) == python_words(docs, pattern)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k"])
def test_word_counts_on_tricky_text_equal_the_python_counter(pattern):
    """The counter cuts words with the per-document encoder's finder (the class scan's masks
    over 64-byte words and regions, the family's matcher elsewhere): every class the masks tell
    apart, contractions, digit groups, whitespace runs before text and at a document's end,
    runs across the scan's words and regions, documents of 0 to 9,000 characters."""
    from devicekit import EDGE, tricky_texts
    from test_native_perdoc import scan_texts
    docs = EDGE + tricky_texts(400, seed=11) + scan_texts(300, seed=12)
    assert as_counter(native_words(docs, pattern)) == python_words(docs, pattern)
    assert as_counter(native_words(docs, pattern, threads=1, batch_docs=37)) == \
        python_words(docs, pattern)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k"])
def test_word_counts_on_every_code_point_equal_the_python_counter(pattern):
    """Every code point (surrogates aside) between letters, digits, spaces, an apostrophe and
    a combining mark, two contexts each, 256 code points a document: the counter's finder with
    HF's pinned class tables against the Python counter's (the same tables, numpy's scanner)."""
    contexts = [("a", "b"), (" ", "x"), ("1", "'s"), ("\n ", "  "), ("'", "\u0301"), ("x", "9")]
    docs = []
    for block in range(0, 0x110000, 256):
        parts = []
        for c in range(block, block + 256):
            if 0xD800 <= c < 0xE000:
                continue
            ch = chr(c)
            for pre, post in (contexts[c % 6], contexts[(c // 6) % 6]):
                parts.append(pre + ch + ch + post)
        docs.append("".join(parts))
    assert as_counter(native_words(docs, pattern)) == python_words(docs, pattern)


def test_words_never_cross_documents():
    got = as_counter(native_words(["ab", "cd", "", "ef gh", " x", "x "], "gpt2"))
    assert got == Counter({"ab": 1, "cd": 1, "ef": 1, " gh": 1, " x": 1, "x": 1, " ": 1})


def test_threads_and_batches_do_not_change_the_counts():
    docs = testdata.corpus("multilingual", max_mb=0.8)  # several 256 KB ranges per batch
    want = python_words(docs, "cl100k")
    for threads, batch_docs in ((1, None), (3, None), (2, 7), (5, 1)):
        assert as_counter(native_words(docs, "cl100k", threads, batch_docs=batch_docs)) == want


def test_the_prune_rule():
    """Over budget, words counted at most floor = 1, 2, 4, ... times are dropped; the floor and
    what was dropped are reported; below the budget nothing changes."""
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(4000)]
    docs = [" ".join(rng.choice(vocab[:k]) for _ in range(50)) for k in (30, 300, 4000) * 20]
    full = native_words(docs, "gpt2", budget=0)
    assert full.exact and as_counter(full) == python_words(docs, "gpt2")
    got = native_words(docs, "gpt2", budget=96 << 10, batch_docs=len(docs))  # one batch
    assert not got.exact and got.prune_floor >= 1
    want = {w: c for w, c in as_counter(full).items() if c > got.prune_floor}
    assert as_counter(got) == want
    dropped = {w: c for w, c in as_counter(full).items() if c <= got.prune_floor}
    assert (got.pruned_words, got.pruned_count) == (len(dropped), sum(dropped.values()))


def test_pruning_is_warned_about_and_recorded():
    docs = [" ".join(f"x{i}y{j}" for j in range(200)) for i in range(200)]
    with pytest.warns(RuntimeWarning, match="may differ from HF"):
        gputok.train_bpe(docs, vocab_size=300, max_word_memory=1 << 16)
    assert not gt.last_stats.exact and gt.last_stats.pruned_words > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gputok.train_bpe(docs, vocab_size=300)
    assert gt.last_stats.exact and gt.last_stats.words_backend == "native"


# ---------------------------------------------------------------- merges


def ties_corpus(rng: random.Random, n_words: int, alphabet: str) -> list[str]:
    """Words that all occur the same number of times: nearly every pair count ties."""
    out = set()
    while len(out) < n_words:
        out.add("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 10))))
    return [" ".join(sorted(out))] * 3


@pytest.mark.parametrize("vocab_size", [300, 600, 1200])
@pytest.mark.parametrize("seed,alphabet", [(1, "ab"), (2, "abcd"), (3, "xyz{é\u0100 "),
                                           (4, "aaab\n")])
def test_ties_galore_match_hf(seed, alphabet, vocab_size):
    texts = ties_corpus(random.Random(seed), 400, alphabet)
    want, hf_vocab, _ = hf_train(texts, vocab_size, r"\S+|\s+", [EOT], 0)
    enc = gputok.train_bpe(texts, vocab_size=vocab_size, pattern=r"\S+|\s+", backend="native",
                           special_tokens=[EOT], min_frequency=0)
    to_u = {i: gputok.bytelevel.spell(enc.decode_single_token_bytes(i))
            for i in range(enc.n_vocab) if not enc.is_special_token(i)}
    assert [(to_u[a], to_u[b]) for a, b, _ in enc.trained_merges] == want
    assert enc.n_vocab == len(hf_vocab)


@settings(max_examples=fuzz_examples(40), deadline=None)
@given(data=st.data(), alphabet=st.sampled_from(["ab", "abc", "ab ", "aé€😀"]),
       vocab_extra=st.integers(0, 60), min_frequency=st.integers(0, 3))
def test_native_loop_equals_the_numpy_loop(data, alphabet, vocab_extra, min_frequency):
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=80), min_size=1, max_size=10))
    wc = words.count_words(((t, 1) for t in texts), r"\S+|\s+")
    logs = []
    for loop in (cpu.train_words, native.train_words):
        v = Vocab(["ab"])
        log: list = []
        merges = loop(WordCounts.from_counter(wc), v, vocab_size=257 + vocab_extra,
                      min_frequency=min_frequency,
                      on_log=lambda a, b, c, n: log.append((a, b, c, n)))
        assert [m for m in merges] == [x[:3] for x in log]
        logs.append((log, v.strings))
    assert logs[0] == logs[1]


def test_steps_on_several_workers_equal_one(monkeypatch):
    """A step's words split over workers (each with its own change table, merged after) give
    the merges and counts one thread gives; the tests force the split on every step."""
    docs = testdata.corpus("multilingual", max_mb=0.1) + testdata.corpus("code", max_mb=0.1)
    wc = native_words(docs, "cl100k")
    runs = []
    for threads, par_min in ((1, 0), (3, 1), (2, 5)):
        monkeypatch.setattr(native, "_par_min", par_min)
        log: list = []
        native.train_words(wc, Vocab(), vocab_size=3000, min_frequency=2, threads=threads,
                           on_log=lambda *m: log.append(m))
        runs.append(log)
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 3000 - 256


def test_a_merge_spelled_like_a_special_takes_its_id():
    enc = gputok.train_bpe(["<s>hello<s> <s>" * 5], vocab_size=300, pattern=r"\S+|\s+",
                           special_tokens=["<s>"], backend="native")
    s_id = enc.encode_single_token("<s>")
    assert (enc.encode_single_token("<"), enc.encode_single_token("s"), 257) in \
        enc.trained_merges
    assert any(c == s_id for _, _, c in enc.trained_merges)


# ---------------------------------------------------------------- id layouts


@pytest.mark.parametrize("kind", ["prose", "code", "multilingual"])
@pytest.mark.parametrize("pattern", ["cl100k", "gpt2"])
def test_bytes_order_is_rustbpe(kind, pattern, tmp_path):
    """id_order="bytes": byte b = id b, merges from 256, ties by byte value: rustbpe's (and so
    nanochat's) merges; the exported .tiktoken ranks are rustbpe's mergeable ranks."""
    import rustbpe

    from gputok.export import save_tiktoken
    from gputok.loaders.tiktoken_file import read_ranks

    docs = testdata.corpus(kind, max_mb=0.3)
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), 2000, pattern=resolve_pattern(pattern))
    enc = gputok.train_bpe(docs, vocab_size=2000, pattern=pattern, id_order="bytes",
                           min_frequency=1, backend="native")
    assert enc.n_vocab == 2000
    save_tiktoken(enc, tmp_path / "v.tiktoken")
    assert read_ranks(tmp_path / "v.tiktoken") == {bytes(b): r for b, r in
                                                    tok.get_mergeable_ranks()}


@pytest.mark.parametrize("specials_at", ["start", "end"])
def test_bytes_order_follows_the_reference(specials_at):
    """cpu_ref's rule 8 = the native and numpy trainers, merge by merge (ids included)."""
    from cpu_ref import train as ref_train

    docs = testdata.corpus("multilingual", max_mb=0.03)
    specials = ["<unk>", "<s>", "</s>"]
    want = ref_train.train_bpe(docs, vocab_size=420, pattern="cl100k", special_tokens=specials,
                               id_order="bytes", specials_at=specials_at, min_frequency=2)
    for backend in ("native", "numpy"):
        enc = gputok.train_bpe(docs, vocab_size=420, special_tokens=specials, id_order="bytes",
                               specials_at=specials_at, backend=backend)
        assert enc.trained_merges == want.merges, backend
        assert {s: enc.encode_single_token(s) for s in specials} == want.special_tokens


def test_bytes_order_with_specials_first_or_last():
    docs = testdata.corpus("prose", max_mb=0.1)
    specials = ["<unk>", "<bos>", "<eos>", "<pad>"]
    last = gputok.train_bpe(docs, vocab_size=600, special_tokens=specials, id_order="bytes")
    first = gputok.train_bpe(docs, vocab_size=600, special_tokens=specials, id_order="bytes",
                             specials_at="start")
    assert last.n_vocab == first.n_vocab == 600
    assert [last.encode_single_token(s) for s in specials] == [596, 597, 598, 599]
    assert [first.encode_single_token(s) for s in specials] == [0, 1, 2, 3]
    assert [last.decode_single_token_bytes(b) for b in range(256)] == \
        [first.decode_single_token_bytes(4 + b) for b in range(256)] == \
        [bytes([b]) for b in range(256)]
    assert tokens(last) == tokens(first)  # the same ties: byte order either way
    assert [c for _, _, c in last.trained_merges] == list(range(256, 596))
    text = docs[0][:500] + "<eos>"
    assert last.decode(last.encode(text, allowed_special="all")) == text
    assert first.encode(text, allowed_special="all")[-1] == 2
    with pytest.raises(ValueError, match="specials_at='end' needs id_order='bytes'"):
        gputok.train_bpe(docs, vocab_size=600, specials_at="end")
    with pytest.raises(ValueError, match="id_order must be"):
        gputok.train_bpe(docs, vocab_size=600, id_order="tiktoken")


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_bytes_order_on_every_cpu_backend(backend):
    docs = testdata.corpus("code", max_mb=0.05)
    want = gputok.train_bpe(docs, vocab_size=500, id_order="bytes", backend="native")
    got = gputok.train_bpe(docs, vocab_size=500, id_order="bytes", backend=backend)
    assert got.trained_merges == want.trained_merges


# ---------------------------------------------------------------- corpus forms, log, Ctrl-C


def test_corpus_forms_on_the_native_path(tmp_path):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = testdata.corpus("prose", max_mb=0.2)
    assert len(docs) >= 4
    want = gputok.train_bpe(docs, vocab_size=700, backend="numpy").trained_merges
    (tmp_path / "a.txt").write_text(docs[0], encoding="utf-8")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        for d in docs[1:len(docs) // 2]:
            f.write(json.dumps({"text": d}) + "\n\n")
    pq.write_table(pa.table({"text": docs[len(docs) // 2:]}), tmp_path / "c.parquet")
    forms = {"list": docs, "generator": (d for d in docs),
             "files": [tmp_path / "a.txt", tmp_path / "b.jsonl.gz", tmp_path / "c.parquet"],
             "arrow": pa.array(docs, pa.large_string())}
    for name, corpus in forms.items():
        assert gputok.train_bpe(corpus, vocab_size=700).trained_merges == want, name
        assert gt.last_stats.words_backend == "native", name


def test_verbose_log_names_every_merge(capsys):
    enc = gputok.train_bpe(["low lower lowest"] * 10, vocab_size=260, pattern="gpt2",
                           verbose=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["merge 1: 256 = 'l' + 'o' (b'lo'), 30 times",
                     "merge 2: 257 = 'lo' + 'w' (b'low'), 30 times",
                     "merge 3: 258 = 'Ġ' + 'low' (b' low'), 20 times",
                     "merge 4: 259 = 'Ġlow' + 'e' (b' lowe'), 20 times"]
    assert len(enc.trained_merges) == 4
    out = io.StringIO()
    MergeLog(Vocab(), out)(0, 1, 2, -1)
    assert out.getvalue() == "merge 1: 2 = '!' + '\"' (b'#'), \n".replace(", \n", "\n")


def test_ctrl_c_between_merge_blocks_stops_cleanly():
    docs = testdata.corpus("prose", max_mb=0.2)
    calls = []

    def interrupt(done):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    v = Vocab()
    wc = native_words(docs, "cl100k")
    with pytest.raises(KeyboardInterrupt):
        native.train_words(wc, v, vocab_size=5000, min_frequency=2, on_merge=interrupt)
    assert calls == [native.BLOCK_MERGES, 2 * native.BLOCK_MERGES]
    # the library let go of its state: training again from scratch gives the full result
    want = native.train_words(wc, Vocab(), vocab_size=5000, min_frequency=2)
    assert len(want) == 5000 - 256
