"""BPE training: the rule (``cpu_ref.train``), the fast trainers, and HF ``BpeTrainer`` itself.

The chain, as everywhere in gputok: HF ``tokenizers`` (the oracle) = ``cpu_ref.train`` (the spec)
= the numpy trainer (``gputok.train.cpu``) = the device algorithm on numpy
(``gputok.backends.train_arrays``); the kernels of that algorithm are checked in test_train_kernels.py.
Then the trained vocabulary must encode held-back text to the same ids in gputok, in HF (from the
exported tokenizer.json) and in tiktoken (from the exported .tiktoken file).

Real corpora come from tests/testdata.py (``$GPUTOK_CORPUS_MB`` MB per kind, 2 by default).
"""

from __future__ import annotations

import functools
import gzip
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputok
import testdata
from conftest import fuzz_examples
from cpu_ref import train as ref_train
from cpu_ref.hf import BYTE_TO_UNICODE
from cpu_ref.patterns import resolve_pattern
from gputok.export import _onig_pattern, save_hf_json, save_tiktoken
from gputok.backends import train_arrays as arrays
from gputok.train import cpu, words
from gputok.train.vocab import Vocab

EOT = "<|endoftext|>"
WS = r"\S+|\s+"  # a simple pattern for hand-made cases


# ---------------------------------------------------------------- the oracle and the trainers

def hf_train(texts, vocab_size, pattern="cl100k", specials=(), min_frequency=2):
    """HF BpeTrainer behind Split(pattern, isolated) + ByteLevel, all 256 bytes in the alphabet.
    Returns (merges as string pairs, vocab, tokenizer)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_onig_pattern(resolve_pattern(pattern))), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    return [tuple(m) for m in model["merges"]], model["vocab"], tok


def _strings(vocab: Vocab, merges):
    return [(vocab.strings[a], vocab.strings[b]) for a, b, _ in merges]


def train_ref(texts, vocab_size, pattern, specials, min_frequency):
    r = ref_train.train_bpe(texts, vocab_size=vocab_size, pattern=pattern,
                            special_tokens=specials, min_frequency=min_frequency)
    return r.merge_strings(), r.vocab


def train_numpy(texts, vocab_size, pattern, specials, min_frequency, backend="numpy"):
    enc = gputok.train_bpe(texts, vocab_size=vocab_size, pattern=pattern,
                           special_tokens=specials, min_frequency=min_frequency, backend=backend)
    to_u = lambda i: "".join(BYTE_TO_UNICODE[b] for b in enc.decode_single_token_bytes(i))  # noqa
    merges = [(to_u(a), to_u(b)) for a, b, _ in enc.trained_merges]
    vocab = {to_u(i): i for i in range(enc.n_vocab) if not enc.is_special_token(i)}
    vocab.update(enc._special_tokens)
    return merges, vocab


def train_native(texts, vocab_size, pattern, specials, min_frequency):
    return train_numpy(texts, vocab_size, pattern, specials, min_frequency, backend="native")


def train_device_numpy(texts, vocab_size, pattern, specials, min_frequency):
    wc = words.count_words(((t, 1) for t in texts), resolve_pattern(pattern))
    v = Vocab(specials)
    ids, off, counts = cpu.word_arrays(wc, v)
    merges = arrays.train_arrays(ids, off, counts, v, vocab_size=vocab_size,
                                 min_frequency=min_frequency)
    return _strings(v, merges), dict(v.ids)


NATIVE = __import__("gputok.train.native").train.native.available()[0]
TRAINERS = [pytest.param(train_ref, id="cpu_ref"), pytest.param(train_numpy, id="numpy"),
            pytest.param(train_native, id="native", marks=pytest.mark.skipif(
                not NATIVE, reason="no C++ compiler for the native trainer")),
            pytest.param(train_device_numpy, id="device-numpy")]


# ---------------------------------------------------------------- the rule, case by case

# (texts, vocab_size, pattern, specials, min_frequency, expected merges), each derived by hand
# and checked against HF below
RULE_CASES = {
    # ties go to the smallest (left_id, right_id) as ids: '{' (a byte, small id) before 'zz'
    # (a merge, large id), although "zz" < "{" as strings
    "tie_by_id": (["zz " * 10 + "zza " * 3 + "{a " * 3], 300, WS, (), 0,
                  [("z", "z"), ("{", "a"), ("zz", "a")]),
    # overlapping windows: "bbb" counts (b, b) twice, so it ties with (x, y) and wins on ids
    "overlap": (["bbb xy xy"], 300, WS, (), 0, [("b", "b"), ("x", "y"), ("bb", "b")]),
    # left to right without overlap: "aaaa" -> "aa aa", "aaa" -> "aa a"
    "runs": (["aaaa aaaa aaa"], 300, WS, (), 0, [("a", "a"), ("aa", "aa"), ("aa", "a")]),
    # min_frequency stops the merges, never the alphabet
    "min_frequency": (["bbb xy xy cd cd cd"], 300, WS, (), 3, [("c", "d")]),
    # the vocabulary size counts specials and the 256 bytes: nothing is learned below that
    "vocab_below_alphabet": (["xy xy cd cd cd"], 100, WS, ("<s>",), 0, []),
    # special tokens in training text are ordinary text; a learned token spelled like a
    # special takes the special's id
    "special_in_text": (["<s>hello<s> <s>" * 5], 300, WS, ("<s>",), 2,
                        [("<", "s"), ("<s", ">"), ("<s>", "h"), ("e", "l"), ("l", "o"),
                         ("<s>h", "el"), ("lo", "<s>"), ("<s>hel", "lo<s>"),
                         ("<s>", "<s>hello<s>")]),
    # a pattern that leaves gaps: HF's isolated split keeps them as words
    "gaps": (["ab, ab; ab"], 300, r"[a-z]+", (), 0, [("a", "b"), (",", "\u0120"), (";", "\u0120")]),
}


@pytest.mark.parametrize("case", list(RULE_CASES))
def test_rule_cases_match_hf(case):
    texts, vocab_size, pattern, specials, min_frequency, expected = RULE_CASES[case]
    merges, _, _ = hf_train(texts, vocab_size, pattern, specials, min_frequency)
    assert merges == expected


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("case", list(RULE_CASES))
def test_rule_cases(trainer, case):
    texts, vocab_size, pattern, specials, min_frequency, expected = RULE_CASES[case]
    merges, vocab = trainer(texts, vocab_size, pattern, specials, min_frequency)
    assert merges == expected
    _, hf_vocab, _ = hf_train(texts, vocab_size, pattern, specials, min_frequency)
    assert vocab == hf_vocab


def test_docstring_example():
    enc = gputok.train_bpe(["low lower lowest"] * 10, vocab_size=260, pattern="gpt2")
    assert [enc.decode_single_token_bytes(i) for i in range(256, 260)] == \
        [b"lo", b"low", b" low", b" lowe"]
    assert enc.trained_merges[0] == (enc.encode_single_token("l"), enc.encode_single_token("o"),
                                     256)


def test_ids_specials_then_alphabet_by_code_point():
    r = ref_train.train_bpe(["hello hello"], vocab_size=300, pattern="gpt2",
                            special_tokens=[EOT, "<pad>", EOT])
    names = r.id_to_str()
    assert [names[0], names[1]] == [EOT, "<pad>"]  # a repeated special is skipped
    alphabet = [names[i] for i in range(2, 258)]
    assert alphabet == sorted(BYTE_TO_UNICODE.values())
    assert alphabet[0] == "!" and names[2 + 188] == "\u0100"  # byte 0x00 after Latin-1
    _, hf_vocab, _ = hf_train(["hello hello"], 300, "gpt2", [EOT, "<pad>", EOT])
    assert r.vocab == hf_vocab


def test_hf_defaults_documented():
    """min_frequency: BpeTrainer's default 0 acts as 1; ByteLevelBPETokenizer's is 2 (ours)."""
    import inspect

    from tokenizers import trainers
    from tokenizers.implementations import ByteLevelBPETokenizer

    assert trainers.BpeTrainer().min_frequency == 0
    assert inspect.signature(ByteLevelBPETokenizer.train).parameters["min_frequency"].default == 2
    assert inspect.signature(gputok.train_bpe).parameters["min_frequency"].default == 2
    texts = ["ab ab cd"]
    assert hf_train(texts, 300, WS, (), 0)[0] == hf_train(texts, 300, WS, (), 1)[0] == \
        train_ref(texts, 300, WS, (), 0)[0] == [("a", "b"), ("c", "d")]


# ---------------------------------------------------------------- random small corpora

@settings(max_examples=fuzz_examples(60), deadline=None)
@given(alphabet=st.sampled_from(["ab", "ab ", "a  b", "xyz{ ", "aab\n", "é a"]),
       data=st.data(), vocab_extra=st.integers(0, 40), min_frequency=st.integers(0, 3),
       specials=st.sampled_from([(), ("ab",), (EOT, "a b")]))
def test_random_corpora_match_hf(alphabet, data, vocab_extra, min_frequency, specials):
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=60), min_size=1, max_size=8))
    vocab_size = 256 + len(specials) + vocab_extra
    expected, hf_vocab, _ = hf_train(texts, vocab_size, WS, specials, min_frequency)
    for trainer in (train_ref, train_numpy, train_device_numpy) + ((train_native,) if NATIVE
                                                                    else ()):
        merges, vocab = trainer(texts, vocab_size, WS, specials, min_frequency)
        assert merges == expected, trainer.__name__
        assert vocab == hf_vocab, trainer.__name__


# ---------------------------------------------------------------- real corpora

@functools.lru_cache(maxsize=None)
def _split_corpus(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training docs, held-back docs): every 10th document is held back."""
    docs = testdata.corpus(kind)
    return (tuple(d for i, d in enumerate(docs) if i % 10 != 9),
            tuple(d for i, d in enumerate(docs) if i % 10 == 9))


@functools.lru_cache(maxsize=None)
def _trained(kind: str, vocab_size: int, pattern: str):
    train_docs, _ = _split_corpus(kind)
    enc = gputok.train_bpe(list(train_docs), vocab_size=vocab_size, pattern=pattern,
                           special_tokens=[EOT], backend="auto")
    hf_merges, hf_vocab, hf_tok = hf_train(train_docs, vocab_size, pattern, [EOT], 2)
    return enc, hf_merges, hf_vocab, hf_tok


PARITY = [("prose", 1000, "cl100k"), ("prose", 8000, "cl100k"), ("code", 1000, "cl100k"),
          ("code", 8000, "cl100k"), ("multilingual", 1000, "cl100k"),
          ("multilingual", 8000, "cl100k"), ("prose", 8000, "gpt2"),
          ("multilingual", 8000, "o200k")]


@pytest.mark.parametrize("kind,vocab_size,pattern", PARITY)
def test_merges_equal_hf_on_real_text(kind, vocab_size, pattern):
    enc, hf_merges, hf_vocab, _ = _trained(kind, vocab_size, pattern)
    to_u = lambda i: "".join(BYTE_TO_UNICODE[b] for b in enc.decode_single_token_bytes(i))  # noqa
    ours = [(to_u(a), to_u(b)) for a, b, _ in enc.trained_merges]
    same = next((k for k, (x, y) in enumerate(zip(ours, hf_merges)) if x != y),
                min(len(ours), len(hf_merges)))
    nbytes = sum(len(d.encode("utf-8")) for d in _split_corpus(kind)[0])
    print(f"\n[train parity] {kind} ({nbytes / 1e6:.2f} MB) x {vocab_size} ({pattern}): "
          f"{same}/{len(hf_merges)} identical leading merges (ours: {len(ours)})")
    assert same == len(ours) == len(hf_merges), \
        f"first difference at merge {same}: ours {ours[same:same + 1]}, " \
        f"HF {hf_merges[same:same + 1]}"
    assert enc.n_vocab == len(hf_vocab) == vocab_size


@pytest.mark.parametrize("kind,vocab_size,pattern", PARITY)
def test_trained_encodes_like_hf_and_tiktoken(kind, vocab_size, pattern, tmp_path):
    import tiktoken
    from tokenizers import Tokenizer

    from gputok.loaders.tiktoken_file import read_ranks

    enc, _, _, hf_trained = _trained(kind, vocab_size, pattern)
    held = list(_split_corpus(kind)[1])
    save_hf_json(enc, tmp_path / "tokenizer.json")
    save_tiktoken(enc, tmp_path / "vocab.tiktoken")
    hf = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tk = tiktoken.Encoding("trained", pat_str=enc.pat_str,
                           mergeable_ranks=read_ranks(tmp_path / "vocab.tiktoken"),
                           special_tokens=enc._special_tokens)
    expect = [e.ids for e in hf_trained.encode_batch(held, add_special_tokens=False)]
    ids, off = enc.encode_batch_arrays(held, disallowed_special=())
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(held))]
    loaded_json = gputok.load(tmp_path / "tokenizer.json")
    loaded_tk = gputok.load(tmp_path / "vocab.tiktoken")
    others = {
        "hf(exported json)": [e.ids for e in hf.encode_batch(held, add_special_tokens=False)],
        "tiktoken(exported)": tk.encode_ordinary_batch(held, num_threads=2),
        "gputok.load(json)": [loaded_json.encode_ordinary(d) for d in held],
        "gputok.load(tiktoken)": [loaded_tk.encode_ordinary(d) for d in held],
    }
    nbytes = sum(len(d.encode("utf-8")) for d in held)
    bad = {name: sum(a != b for a, b in zip(ids_list, expect)) for name, ids_list in
           [("gputok", got), *others.items()]}
    print(f"\n[train encode] {kind} x {vocab_size} ({pattern}): {len(held)} held-back docs, "
          f"{nbytes / 1e6:.2f} MB, {sum(map(len, expect))} tokens; mismatched docs: {bad}")
    assert not any(bad.values())
    # special tokens: HF and gputok agree on the control id
    text = f"{held[0][:40]}{EOT}end"
    assert enc.encode(text, allowed_special="all") == \
        hf.encode(text, add_special_tokens=False).ids == \
        tk.encode(text, allowed_special="all")


@pytest.mark.parametrize("kind", ["prose", "code", "multilingual", "emoji"])
def test_reference_chain_on_real_text(kind):
    """cpu_ref (slow, recounts everything) = numpy trainer = device algorithm, on real text."""
    docs = testdata.corpus(kind, max_mb=0.04)
    want = train_ref(docs, 350, "cl100k", [EOT], 2)
    assert train_numpy(docs, 350, "cl100k", [EOT], 2) == want
    if NATIVE:
        assert train_native(docs, 350, "cl100k", [EOT], 2) == want
    assert train_device_numpy(docs, 350, "cl100k", [EOT], 2) == want
    assert len(want[0]) > 50


# ---------------------------------------------------------------- inputs, outputs, errors

@pytest.fixture(scope="module")
def small_docs():
    return testdata.corpus("prose", max_mb=0.2)


def test_corpus_forms(small_docs, tmp_path):
    import pyarrow as pa

    want = gputok.train_bpe(small_docs, vocab_size=600, backend="numpy").trained_merges
    txt_paths = []
    for i, d in enumerate(small_docs[:5]):
        p = tmp_path / f"d{i}.txt"
        p.write_text(d, encoding="utf-8")
        txt_paths.append(p)
    jl = tmp_path / "rest.jsonl.gz"
    with gzip.open(jl, "wt", encoding="utf-8") as f:
        for d in small_docs[5:]:
            f.write(json.dumps({"text": d}) + "\n\n")
    forms = {
        "tuple": tuple(small_docs),
        "generator": (d for d in small_docs),
        "paths": txt_paths + [jl],
        "arrow": pa.array(small_docs, type=pa.string()),
        "arrow_large_chunked": pa.chunked_array([pa.array(small_docs[:3], pa.large_string()),
                                                 pa.array(small_docs[3:], pa.large_string())]),
    }
    for name, corpus in forms.items():
        enc = gputok.train_bpe(corpus, vocab_size=600, backend="numpy")
        assert enc.trained_merges == want, name
    one = gputok.train_bpe(txt_paths[0], vocab_size=300)  # a single Path
    assert one.n_vocab == 300


def test_bad_input(small_docs, tmp_path):
    with pytest.raises(ValueError, match="single str"):
        gputok.train_bpe("some text", vocab_size=300)
    with pytest.raises(TypeError, match="item 1"):
        gputok.train_bpe(["ok", b"bytes"], vocab_size=300)
    with pytest.raises(ValueError, match="vocab_size"):
        gputok.train_bpe(["ok"], vocab_size=0)
    with pytest.raises(ValueError, match="min_frequency"):
        gputok.train_bpe(["ok"], vocab_size=300, min_frequency=-1)
    with pytest.raises(ValueError, match="errors must be"):
        gputok.train_bpe(["ok"], vocab_size=300, errors="ignore")
    with pytest.raises(ValueError, match="unknown backend"):
        gputok.train_bpe(["ok"], vocab_size=300, backend="tpu")
    with pytest.raises(ValueError, match="invalid pattern"):
        gputok.train_bpe(["ok"], vocab_size=300, pattern="(unclosed")
    with pytest.raises(ValueError, match="non-empty"):
        gputok.train_bpe(["ok"], vocab_size=300, special_tokens=[""])
    with pytest.raises(ValueError, match="spelled like"):  # 'Ġ' is the byte-level space
        gputok.train_bpe(["a b"], vocab_size=300, special_tokens=["\u0120"])
    with pytest.raises(ValueError, match="no such file"):
        gputok.train_bpe([tmp_path / "missing.txt"], vocab_size=300)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok \xff")
    with pytest.raises(ValueError, match="bad.txt.*invalid UTF-8"):
        gputok.train_bpe([bad], vocab_size=300)
    assert gputok.train_bpe([bad], vocab_size=300, errors="replace").n_vocab == 256
    jl = tmp_path / "x.jsonl"
    jl.write_text('{"content": "hi"}\n')
    with pytest.raises(ValueError, match="x.jsonl:1.*no field 'text'"):
        gputok.train_bpe([jl], vocab_size=300)
    assert gputok.train_bpe([jl], vocab_size=300, field="content").n_vocab == 256


def test_cuda_backend_without_gpu_says_why():
    from gputok.backends.cuda import train as cuda

    ok, why = cuda.available()
    if ok:
        pytest.skip("a GPU is present (the GPU tests cover this backend)")
    with pytest.raises(RuntimeError, match="cuda training backend is not available"):
        gputok.train_bpe(["hello"], vocab_size=300, backend="cuda")
    # auto falls back to the native CPU trainer (numpy without a compiler)
    gputok.train_bpe(["hello hello"], vocab_size=300, backend="auto")
    assert gputok.train.last_stats.backend == ("native" if NATIVE else "numpy")


def test_empty_and_tiny_corpora():
    for corpus in ([], [""], ["a"], ["ab"]):
        enc = gputok.train_bpe(corpus, vocab_size=1000, min_frequency=0)
        assert enc.n_vocab == 256 + (corpus == ["ab"])
        assert enc.decode(enc.encode("abc")) == "abc"


def test_progress_and_name(small_docs, capsys):
    enc = gputok.train_bpe(small_docs, vocab_size=400, progress=True, name="mine")
    err = capsys.readouterr().err
    assert "words" in err and "merges" in err and "merge/s" in err
    assert enc.name == "mine" and enc.n_vocab == 400
    assert gputok.train.last_stats.n_merges == 144


def test_word_counting_memory_is_bounded_by_vocabulary(small_docs):
    """Streaming: the corpus is never held; 4x more text (same words) costs no more memory."""
    def peak(repeat):
        gen = (d for _ in range(repeat) for d in small_docs)
        tracemalloc.start()
        wc = words.count_words(((t, 1) for t in gen), resolve_pattern("cl100k"),
                               batch_chars=1 << 16)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top, wc

    p2, w2 = peak(2)  # both runs take several batches of text
    p8, w8 = peak(8)
    assert w8 == {w: 4 * n for w, n in w2.items()}
    assert p8 < 1.2 * p2 + (1 << 20), (p2, p8)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k"])
def test_an_exported_tokenizer_json_keeps_the_fast_pre_tokenizer(pattern, tmp_path):
    # the Oniguruma spelling of the export (\s++\z, (?>\p{N}{1,3})) must still find the
    # vectorised scanner and the device kernels: no host regex, no fallback, HF's ids
    import warnings

    import tokenizers

    from gputok.backends import FallbackWarning, native

    docs = testdata.corpus("prose", max_mb=0.1) + ["a  \n\n b $ 1234567 x  ", " \n", "end  "]
    enc = gputok.train_bpe(docs, vocab_size=400, pattern=pattern)
    save_hf_json(enc, tmp_path / "tokenizer.json")
    loaded = gputok.load(tmp_path / "tokenizer.json")
    assert loaded.model.pretokenizer.scanner is not None
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    backends = ["numpy"] + (["native"] if native.available()[0] else [])
    for backend in backends:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            ids, off = loaded.encode_batch_arrays(docs, backend=backend)
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want, backend
