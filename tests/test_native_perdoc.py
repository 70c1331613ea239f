"""The native CPU device's per-document pass (``gputok.backends.native.perdoc``, kernels/cpu_*.h,
and its runner, ``backends/runners/perdoc.py``).

Its ids against tiktoken and HF tokenizers: one text at a time and in batches, on 1-3 threads,
with the piece cache (big, tiny: evictions on every other piece, and none), on the edge cases,
random tricky texts and the real corpora; long documents sliced where a piece starts in every
parse; str documents of every width, bytes and packed input; active and refused special tokens;
the normaliser's quick check sending documents back.
"""

from __future__ import annotations

import base64
import gc
import random

import numpy as np
import pytest

import gputok
import testdata
from conftest import NAMED, hf_encoding, hf_oracle, tiktoken_oracle
from devicekit import EDGE, corpus_snippets, tricky_texts
from gputok.backends import get_backend, native
from gputok.backends.native.perdoc import PerDocPass, ascii_nibbles
from gputok.specials import DisallowedSpecialError
from gputok.stages.pack import Documents, Packed

_ok, _why = native.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"native backend unavailable: {_why}")


def plan_of(enc):
    plan = get_backend("native").model_plan(enc.model)
    assert plan.mode == "device", plan.why
    return plan


def cpu(threads: int = 1, cache_slots=None) -> PerDocPass:
    return PerDocPass(native.library(), threads, cache_slots)


def batch(p: PerDocPass, enc, docs, allowed=frozenset(), refused=frozenset(), nfc=None):
    plan = plan_of(enc)
    active = enc.model.active_tokens(frozenset(allowed))
    ids, off, flagged = p.encode_batch(plan.tables, enc.model, Documents(docs), active,
                                       frozenset(refused), enc.model.id_dtype, nfc)
    return [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)], flagged


def first_diff(got, want) -> str:
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"first difference at id {k}: {got[k:k + 5]} vs {want[k:k + 5]}"


def assert_docs(got, want, docs):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"document {i} ({docs[i][:60]!r}...): {first_diff(g, w)}"
    assert len(got) == len(want)


@pytest.mark.parametrize("name", NAMED)
def test_text_matches_tiktoken(name):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    tables = plan_of(enc).tables
    texts = EDGE + tricky_texts(300, seed=len(name)) + list(corpus_snippets())
    for cache_slots in (None, 64, 0):  # a big cache, one evicting all the time, none
        p = cpu(1, cache_slots)
        for _ in range(2):  # the second time from the cache
            for t in texts:
                want = tk.encode_ordinary(t)
                got = p.encode_text(tables, t.encode("utf-8")).tolist()
                assert got == want, f"{name} {t[:60]!r}: {first_diff(got, want)}"
    stats = p.cache_stats(tables)
    assert stats["slots"] == 0 and stats["lookups"] == 0


def hf_text(name: str, t: str) -> "str | None":
    """A text the pass takes as one segment for a tokenizer.json model (NFC where the model
    normalises; None for one with an added token's text, which HF always cuts out)."""
    import unicodedata

    t = unicodedata.normalize("NFC", t) if name == "qwen2" else t
    return None if "<|" in t else t


@pytest.mark.parametrize("proven", [True, False], ids=["proven-whole", "no-whole"])
@pytest.mark.parametrize("name", ["llama3", "qwen2"])
def test_text_matches_hf(name, proven):
    """tokenizer.json models against HF tokenizers, with a big cache, one evicting all the time
    and none, the second time from the cache: with their proven whole-token table
    (device_tables.proven_whole: a miss that is such a token takes one probe) and with the
    table's bits cleared (no whole-token lookup: a one-byte piece is its byte's id outright,
    kernels/common/encode_merge_rules.h's enc_one_byte_id; every other miss merges)."""
    from gputok.backends.device_stages import Tables

    enc, hf = hf_encoding(name), hf_oracle(name)
    tables = plan_of(enc).tables
    assert int(tables.scalars["w_bits"]) != 0  # (a byte-level merges model has one)
    if not proven:
        tables = Tables(tables.arrays, dict(tables.scalars, w_bits=np.uint32(0), w_max_len=0))
    texts = EDGE + tricky_texts(200, seed=len(name)) + list(corpus_snippets())
    texts += ["".join(map(chr, range(1, 128))), " , . ; : ! ? " * 40 + "x,y.z;1:2"]
    texts = [x for x in (hf_text(name, t) for t in texts) if x is not None]
    for cache_slots in (None, 64, 0):
        p = cpu(1, cache_slots)
        for _ in range(2):
            for t in texts:
                want = hf.encode(t, add_special_tokens=False).ids
                got = p.encode_text(tables, t.encode("utf-8")).tolist()
                assert got == want, f"{name} {t[:60]!r}: {first_diff(got, want)}"


def many_ids_pieces(enc, k: int) -> list:
    """k words of 2-24 bytes whose ids are more than a cache slot holds (8): rare CJK letters
    of four bytes each, one piece, each letter two or three tokens."""
    rng = random.Random(k)
    out = []
    while len(out) < k:
        w = "".join(chr(rng.randrange(0x20000, 0x2A6D0)) for _ in range(6))
        if len(enc.encode_ordinary(w, backend="numpy")) > 8:
            out.append(w)
    return out


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base", "llama3"])
def test_hits_behind_misses_keep_their_order(name):
    """A looked-up piece's ids go straight to the output only while no miss waits in the window;
    behind a miss, hits (of the slots, of one byte, of the long tier through a slot that says
    so, of the long tier itself) wait with it. Text the cache has seen interleaved with new
    words, so every window mixes them; windows that end on their count of misses, of pieces,
    and on the long tier's room; a cache of 64 slots (collisions: hits turn to misses)."""
    hf = name == "llama3"
    enc = hf_encoding(name) if hf else gputok.get_encoding(name)
    tables = plan_of(enc).tables
    rng = random.Random(5)
    seen = ["the", " cat", ",", " sat", ".", "\n", " 12", "3", " x", "!", "  ", "'s"]
    seen += many_ids_pieces(enc, 3) + ["\u4e16\u754c" * 6 + "\u3002"]  # (> 24 bytes: the tier)
    seen += [" " + "y" * 300]  # (a long piece: the window first)
    def fresh():
        return " " + "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randrange(3, 9)))
    warm = "".join(rng.choice(seen) for _ in range(400))
    for slots in (1 << 14, 64):
        p = cpu(1, slots)
        p.encode_text(tables, warm.encode())
        for gap in (1, 3, 17, 300):  # a new word every gap pieces
            parts = []
            for q in range(1200):
                parts.append(fresh() if q % gap == 0 else rng.choice(seen))
            t = "".join(parts)
            want = (hf_oracle(name).encode(t, add_special_tokens=False).ids if hf
                    else tiktoken_oracle(name).encode_ordinary(t))
            got = p.encode_text(tables, t.encode()).tolist()
            assert got == want, f"{name} gap {gap} slots {slots}: {first_diff(got, want)}"
        if slots > 64:
            s = p.cache_stats(tables)
            assert 0 < s["hits"] < s["lookups"]


# the class scan's test alphabet: every class its masks and fast matchers tell apart (ASCII and
# not: letters of each case, titlecase, modifier and other letters, marks, digits, punctuation,
# apostrophes and contractions, blanks, CR/LF and other line ends), some runs long
SCAN_ALPHABET = (list("aZq9 .,'/\r\n\t-_") + ["'s", "'T", "'ll", "'RE", "\u00e9", "\u00c9", "\u01c5",
                 "\u02b0", "\u0301", "\u05d0", "\u4e16", "\u0663", "\u00a0", "\u3000", "\u0085",
                 "\u2028", "\u00bf", "\U0001f600", "\U0001f3fd", "\u017f", "\u00df", "\u0130"]
                 + ["word", "Word", "WORD", " the", "  ", "\r\n", "123456", "\u4e16\u754c" * 20])


def scan_texts(n: int, seed: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice((8, 60, 400, 3000))  # within a word, across words, across regions
        run = rng.random() < 0.3  # long runs of one piece of the alphabet
        out.append("".join(rng.choice(SCAN_ALPHABET) * (rng.randrange(1, 300) if run and
                                                         rng.random() < 0.05 else 1)
                           for _ in range(rng.randrange(0, k))))
    return out


def assert_finders_agree(p, tables, name: str, data: bytes, finders=("scan", "loop")) -> None:
    """Each finder's piece ends equal the family's matcher's (the rule) on data."""
    rule = p.pieces(tables, data, "rule")
    assert len(rule) == 0 or rule[-1] == len(data)
    for how in finders:
        fast = p.pieces(tables, data, how)
        if not np.array_equal(fast, rule):
            k = int(np.argmax(fast[:len(rule)] != rule[:len(fast)])) if len(fast) and len(
                rule) else 0
            if k == 0 and len(fast) and len(rule) and fast[0] == rule[0]:
                k = min(len(fast), len(rule))  # (one is a prefix of the other)
            at = int(rule[k - 1]) if k else 0
            raise AssertionError(f"{name} ({how}): piece {k} at byte {at} "
                                 f"({data[at:at + 40]!r}): ends {fast[k:k + 3]} vs the "
                                 f"matcher's {rule[k:k + 3]}")


@pytest.mark.parametrize("name", NAMED + ["llama3", "qwen2"])
def test_class_scan_finds_the_matchers_pieces(name):
    """The class scan's pieces (kernels/cpu_scan.h's fast matchers, the family's matcher where
    they pass; every family, whether or not its pass takes the scan) and the segment loop's own
    finder's (the scan, or cpu_text.h's ASCII entry to the matcher) are the matcher's own, on
    edge cases, random text of every class the masks tell apart (shifted across the 64-byte
    words and the regions) and the real corpora."""
    enc = hf_encoding(name) if name in ("llama3", "qwen2") else gputok.get_encoding(name)
    tables, p = plan_of(enc).tables, cpu()
    texts = EDGE + tricky_texts(200, seed=7) + scan_texts(300, seed=len(name))
    texts += ["\n".join(testdata.corpus(kind, max_mb=0.2)) for kind in testdata.KINDS]
    for t in texts:
        for shift in ("", "x", " " * 37):
            assert_finders_agree(p, tables, name, (shift + t).encode("utf-8"))


# the hand-off points of the segment loop's ASCII entries (cpu_text.h's enc_cpu_match, the
# scan's fast matchers): a piece's first characters ASCII and then not, or the other way; an
# apostrophe before letters (a contraction, or a prefix); digit runs of 1-5; blanks before
# line ends and at the end; every ASCII byte before and after a letter
HANDOFF_PIECES = (["a\u00e9", "\u00e9a", " a\u00e9b", " \u00e9a", "a\u0301", " a\u0301",
                   "\u0301a", "x\u4e16", "\u4e16x", ".\u00e9", "\u00a0a", "a\u00a0",
                   "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "'x", "'\u00e9",
                   "'ab", " 's", "x's", "x'", "'", "''s", "1", "12", "123", "1234", "12345",
                   " 1", " 12a", "a1", "1a", " \n", "  \n", "\t\n", " \r\n", "\r\n", "\r\n\r\n",
                   "\n ", "  ", " ", "\t", "a ", "a  ", ". ", " .", " ..a", "\u017f", "\u0130i",
                   "\n    ", "\n    x", "\n   \n", "\n  \t", "\n \u00a0", "\r    x", "\n\n  x",
                   "    x", "   \u00a0x", "  \r", "   \t", "  \u3000", " " * 40 + "x",
                   "\n" + " " * 33]
                  + [chr(b) + "a" for b in range(1, 128)] + ["a" + chr(b) for b in range(1, 128)]
                  + [" " + chr(b) + "b" for b in range(1, 128)]
                  + ["  " + chr(b) for b in range(1, 128)]
                  + ["\n " + chr(b) for b in range(1, 128)])


def handoff_texts(n: int, seed: int) -> list:
    rng = random.Random(seed)
    words = HANDOFF_PIECES + ["word", " word", "Word", " the", "\u00e9t\u00e9", " caf\u00e9"]
    out = list(HANDOFF_PIECES)
    for _ in range(n):
        out.append("".join(rng.choice(words) for _ in range(rng.randrange(1, 12))))
    return out


@pytest.mark.parametrize("name", NAMED + ["llama3", "qwen2"])
def test_ascii_entries_hand_off_to_the_matcher(name):
    """The segment loop's finder at its hand-off points: piece ends equal the matcher's, and
    the ids (a warm second pass, from the cache) the oracle library's."""
    hf = name in ("llama3", "qwen2")
    enc = hf_encoding(name) if hf else gputok.get_encoding(name)
    oracle = hf_oracle(name) if hf else tiktoken_oracle(name)
    tables, p = plan_of(enc).tables, cpu()
    texts = handoff_texts(400, seed=len(name))
    if hf:
        texts = [x for x in (hf_text(name, t) for t in texts) if x is not None]
    for t in texts:
        for end in ("", " ", "\n"):  # at the segment's end, and not
            data = (t + end).encode("utf-8")
            assert_finders_agree(p, tables, name, data, ("loop",))
    for _ in range(2):
        for t in texts:
            want = (oracle.encode(t, add_special_tokens=False).ids if hf
                    else oracle.encode_ordinary(t))
            got = p.encode_text(tables, t.encode("utf-8")).tolist()
            assert got == want, f"{name} {t[:60]!r}: {first_diff(got, want)}"


def test_cache_is_used_and_bounded():
    enc = gputok.get_encoding("cl100k_base")
    tables = plan_of(enc).tables
    p = cpu(1, 64)
    docs = testdata.corpus("prose", max_mb=0.2)
    for d in docs:
        p.encode_text(tables, d.encode())
    s = p.cache_stats(tables)
    assert s["slots"] == 64 and s["lookups"] > 10_000
    assert 0 < s["hits"] < s["lookups"] and s["inserts"] > s["slots"]  # evicted over and over
    big = cpu(1, 1 << 16)
    for d in docs:
        big.encode_text(tables, d.encode())
    a = big.cache_stats(tables)
    for d in docs:  # the same text again: (almost) every piece from the cache
        big.encode_text(tables, d.encode())
    b = big.cache_stats(tables)
    assert b["slots"] == 1 << 16
    assert (b["hits"] - a["hits"]) / (b["lookups"] - a["lookups"]) > 0.95


def test_long_tier_answers_long_pieces():
    """Pieces of 25..1024 bytes (a CJK clause, a long word) and short ones of more ids than a
    slot holds come from the long tier the second time; with no room left, nothing is kept
    and the ids stay exact."""
    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    tables = plan_of(enc).tables
    texts = ["\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8" * 7 + "\u3002",
             " " + "supercalifragilistic" * 3, "\U0001F600\U0001F44D\U0001F3FD" * 3,
             "\u0928\u092e\u0938\u094d\u0924\u0947 " * 20, "x" * 1000 + " y", "z" * 1100]
    for slots in (1 << 12, 64):  # room, and a tier that fills at once
        p = cpu(1, slots)
        for rep in range(3):
            a = p.cache_stats(tables)
            for t in texts:
                assert p.encode_text(tables, t.encode()).tolist() == tk.encode_ordinary(t)
            b = p.cache_stats(tables)
            if rep and slots > 64:
                assert b["hits"] - a["hits"] == b["lookups"] - a["lookups"] > 0


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_batch_matches_tiktoken(name, threads, corpora):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    p = cpu(threads, 1 << 12)
    for kind, docs in corpora.items():
        docs = docs[:120]
        want = tk.encode_ordinary_batch(docs, num_threads=1)
        for _ in range(2):
            got, flagged = batch(p, enc, docs)
            assert flagged is None
            assert_docs(got, want, docs)


@pytest.mark.parametrize("name", ["r50k_base", "p50k_base"])
def test_batch_small_vocab_uint16(name):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    assert enc.model.id_dtype == np.uint16
    docs = EDGE + tricky_texts(200, seed=7) + list(corpus_snippets())
    got, _ = batch(cpu(2), enc, docs)
    assert_docs(got, [tk.encode_ordinary(d) for d in docs], docs)


def long_texts() -> list:
    rng = random.Random(5)
    prose = " ".join(testdata.corpus("prose", max_mb=0.6))
    multi = "".join(testdata.corpus("multilingual", max_mb=0.4))
    code = "\n".join(testdata.corpus("code", max_mb=0.4))
    blob = base64.b64encode(rng.randbytes(300_000)).decode()
    mixed = "".join(rng.choice(["a", "Z", " ", "  ", "\n", "1", "22", "'s", "\xe9", "\u4e2d",
                                "\U0001F600", "\t"]) for _ in range(400_000))
    return [prose, multi, code, blob, "a" * 300_001, " " * 200_003 + "x", "\n" * 150_000,
            "x" * 140_000 + " " + "y" * 140_000, mixed]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_long_documents_are_sliced_exactly(name):
    enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
    docs = long_texts()
    want = [tk.encode_ordinary(d) for d in docs]
    for threads in (1, 3):
        got, _ = batch(cpu(threads), enc, docs)
        assert_docs(got, want, docs)
    # the same as bytes (UTF-8 read in place) and as one packed buffer
    raw = [d.encode() for d in docs]
    got, _ = batch(cpu(2), enc, raw)
    assert_docs(got, want, docs)


def test_big_batch_tables_in_huge_pages():
    """A batch of HUGE_BATCH_MIN bytes or more has its model's big tables copied into 2 MB
    pages first; the ids stay tiktoken's, before and after."""
    from gputok.backends.native import perdoc

    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    docs = testdata.corpus("prose", max_mb=1.2)
    want = [tk.encode_ordinary(d) for d in docs]
    p = cpu(2)
    m = p.model(plan_of(enc).tables)
    got, _ = batch(p, enc, docs[:20])
    assert not m.huge and got == want[:20]
    big = docs * (perdoc.HUGE_BATCH_MIN // sum(len(d.encode()) for d in docs) + 1)
    got, _ = batch(p, enc, big)
    assert m.huge and got == want * (len(big) // len(docs))


def test_every_str_width_and_input_form():
    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    docs = ["plain ascii text", "caf\xe9 na\xefve \xff" * 50, "\u0100\u4e2d\u6587 x" * 30,
            "\U0001F600 \u4e2d emoji" * 40, "", "x", "\xe9" * 200_000, "\u4e2d" * 150_000,
            "\U0001F600" * 70_000 + " tail"]
    want = [tk.encode_ordinary(d) for d in docs]
    p = cpu(2)
    for form in ("str", "bytes", "packed"):
        if form == "str":
            batch_docs = docs
        elif form == "bytes":
            batch_docs = [d.encode() for d in docs]
        else:
            raw = [d.encode() for d in docs]
            off = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
            batch_docs = Packed(b"".join(raw), off)
        plan = plan_of(enc)
        ids, off, _ = p.encode_batch(plan.tables, enc.model, Documents(batch_docs), frozenset(),
                                     frozenset(), np.uint32)
        got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
        assert_docs(got, want, docs)


def test_surrogates_as_tiktoken():
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = ["lone \ud83d surrogate", "ok", "\udc00 start", "pair \ud83d\ude00 joined by us"]
    got, _ = batch(cpu(1), enc, docs)
    assert got == [tk.encode_ordinary(d) for d in docs]


def test_special_tokens_active_and_refused():
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    docs = ["a <|endoftext|> b", "<|endoftext|><|fim_prefix|>x<|endoftext|>", "none here",
            "<|endoftext|", "tail <|fim_middle|>", "x" * 200_000 + "<|endoftext|>y"]
    allowed = {"<|endoftext|>", "<|fim_prefix|>"}
    got, _ = batch(cpu(2), enc, docs, allowed=allowed,
                   refused=frozenset(enc.special_tokens_set) - allowed - {"<|fim_middle|>"})
    assert got == [tk.encode(d, allowed_special=allowed, disallowed_special=()) for d in docs]
    # the first refused token in document order, its document named, as split.py does
    with pytest.raises(DisallowedSpecialError) as e:
        batch(cpu(3), enc, ["clean"] * 50 + ["x <|fim_middle|> <|endoftext|>"] + ["<|endoftext|>"],
              refused=frozenset(enc.special_tokens_set))
    assert e.value.args[1:] == ("<|fim_middle|>", 50) or "document 50" in str(e.value)
    assert "'<|fim_middle|>'" in str(e.value)


def test_refused_tokens_are_found_apart_from_active_ones():
    """A refused token whose occurrence overlaps an active one's is refused all the same (the
    disallowed check runs on the text as given, as split.py's does)."""
    ranks = {bytes([b]): b for b in range(256)}
    enc = gputok.Encoding("tiny:overlap", pat_str=tiktoken_oracle("cl100k_base")._pat_str,
                          mergeable_ranks=ranks, special_tokens={"<a>": 256, "a><b": 257})
    p = cpu(1)
    text = "x<a><b>y"
    with pytest.raises(DisallowedSpecialError, match="'a><b'"):
        enc.encode(text, allowed_special={"<a>"}, backend="numpy")
    with pytest.raises(DisallowedSpecialError, match="'a><b'"):
        batch(p, enc, ["fine", text], allowed={"<a>"}, refused=frozenset({"a><b"}))
    got, _ = batch(p, enc, [text], allowed={"<a>"})
    assert got == [enc.encode(text, allowed_special={"<a>"}, disallowed_special=(),
                              backend="numpy")]


def test_hf_added_tokens_llama3():
    enc, hf = hf_encoding("llama3"), hf_oracle("llama3")
    assert not enc.model.normalizer
    docs = EDGE + list(corpus_snippets()) + ["<|begin_of_text|>hi<|eot_id|> there",
                                            "x<|start_header_id|>user<|end_header_id|>\n\ny"]
    got, _ = batch(cpu(2), enc, docs, allowed=enc.special_tokens_set)  # (HF cuts them all)
    want = [hf.encode(d, add_special_tokens=False).ids for d in docs]
    assert_docs(got, want, docs)


def test_normaliser_quick_check_sends_documents_back():
    enc = hf_encoding("qwen2")
    plan = plan_of(enc)
    assert plan.norm_form == "NFC"
    nfc = plan.tables.arrays["nfc_bits"]
    docs = ["ascii only", "e\u0301 combining", "caf\xe9 composed", "\u1100\u1161 hangul", "x"]
    got, flagged = batch(cpu(1), enc, docs, nfc=nfc)
    assert flagged.tolist() == [False, True, False, True, False]
    hf = hf_oracle("qwen2")
    for i in (0, 2, 4):
        assert got[i] == hf.encode(docs[i], add_special_tokens=False).ids
    assert got[1] == [] and got[3] == []


def test_ascii_nibbles():
    cls = np.arange(256, dtype=np.uint8) % 13
    nib = ascii_nibbles(cls).reshape(16, 16)
    for b in range(128):
        for c in range(16):
            assert bool(nib[c, b & 15] >> (b >> 4) & 1) == (cls[b] == c)


def test_encode_str_one_call():
    """A short str straight to its list (read where CPython keeps it, listed natively); a
    lone surrogate or a long text is left to the caller (None)."""
    enc, tk = gputok.get_encoding("cl100k_base"), tiktoken_oracle("cl100k_base")
    tables = plan_of(enc).tables
    p = cpu(1)
    assert p._encode_str is not None  # (the library's str layout and list builder check out)
    texts = EDGE + tricky_texts(200, seed=3) + ["caf\xe9", "\u4e2d\u6587 x", "\U0001F600!"]
    for t in texts:
        if len(t) > p.STR_LOCKED_MAX:
            assert p.encode_str(tables, t) is None
            continue
        got = p.encode_str(tables, t)
        if any(0xD800 <= ord(ch) < 0xE000 for ch in t):
            assert got is None
        else:
            assert type(got) is list and got == tk.encode_ordinary(t), t
    assert p.encode_str(tables, "x \ud83d y") is None
    assert p.encode_str(tables, "a" * (p.STR_LOCKED_MAX + 1)) is None
    # the call is a built-in of one argument that owns what it reads: it outlives the pass
    fn = p.str_encoder(tables)[0]
    with pytest.raises(TypeError, match="expected a str"):
        fn(b"hello")
    del p
    gc.collect()
    assert fn("hello world") == tk.encode_ordinary("hello world")


# ---------------------------------------------------------------- through the backend

@pytest.fixture
def backend():
    return native.create(2, cache_slots=1 << 12)


def test_backend_batches_take_the_pass(backend, corpora):
    from gputok.stages import counters

    for name in ("cl100k_base", "o200k_base"):
        enc, tk = gputok.get_encoding(name), tiktoken_oracle(name)
        for kind, docs in corpora.items():
            docs = docs[:60]
            before = counters["device.per_doc_batches"]
            ids, off = enc.encode_batch_arrays(docs, disallowed_special=(), backend=backend)
            assert counters["device.per_doc_batches"] == before + 1
            assert_docs([ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))],
                        tk.encode_ordinary_batch(docs), docs)
            assert enc.encode_ordinary_batch(docs, backend=backend) == \
                tk.encode_ordinary_batch(docs)
    # the default contract: a special token's text is refused, naming the document
    enc = gputok.get_encoding("cl100k_base")
    with pytest.raises(DisallowedSpecialError, match="document 1"):
        enc.encode_batch(["fine", "not <|endoftext|> fine"], backend=backend)


def test_backend_texts_take_the_pass(backend):
    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    texts = EDGE + tricky_texts(100, seed=11) + list(corpus_snippets()) + long_texts()[:2]
    for t in texts:
        assert enc.encode_ordinary(t, backend=backend) == tk.encode_ordinary(t)
        assert enc.encode(t, disallowed_special=(), backend=backend) == \
            tk.encode(t, disallowed_special=())
    t = "hi <|endoftext|> there " * 3
    assert enc.encode(t, allowed_special="all", backend=backend) == \
        tk.encode(t, allowed_special="all")


def test_backend_flagged_documents_take_the_pipeline(backend):
    from gputok.stages import counters

    enc, hf = hf_encoding("qwen2"), hf_oracle("qwen2")
    docs = list(corpus_snippets()) + ["e\u0301 combining", "\u1100\u1161 hangul", "plain"]
    before = counters["device.per_doc_flagged"]
    ids, off = enc.encode_batch_arrays(docs, allowed_special="all", backend=backend)
    assert counters["device.per_doc_flagged"] > before
    got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
    assert_docs(got, [hf.encode(d, add_special_tokens=False).ids for d in docs], docs)


def test_backend_text_call(backend):
    """``Backend.text_call`` of a byte-level model: the pass's str encoder bound once (what
    ``Encoding.encode`` keeps); a long text, a lone surrogate and a profiled backend take the
    backend's ``encode_text``."""
    enc, tk = gputok.get_encoding("o200k_base"), tiktoken_oracle("o200k_base")
    call = backend.text_call(enc.model)
    assert call is not None
    texts = EDGE + tricky_texts(50, seed=5) + ["x \ud83d y", "ab " * 3000]
    assert [call(t) for t in texts] == [tk.encode_ordinary(t) for t in texts]
    seen = []
    real = backend.encode_text
    backend.encode_text = lambda m, t, a: seen.append(t) or real(m, t, a)
    assert call("hello") == tk.encode_ordinary("hello") and not seen
    call("ab " * 3000)
    backend.profile = []
    call("hello")
    assert seen == ["ab " * 3000, "hello"]
    backend.profile = None
    assert backend.text_call(gputok.load(testdata.family_path("minilm_tokenizer_json")).model) \
        is None  # (WordPiece: not the pass's)


def _qwen2_with_added(tmp_path, added: list):
    """Qwen2's tokenizer.json with more added tokens (non-special, normalized false)."""
    import json

    cfg = json.loads(testdata.vocab_path(conftest_hf_file("qwen2")).read_text("utf-8"))
    top = max(t["id"] for t in cfg["added_tokens"])
    for k, content in enumerate(added):
        cfg["added_tokens"].append({"id": top + 1 + k, "content": content, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": False})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg), "utf-8")
    from tokenizers import Tokenizer

    return gputok.load(path), Tokenizer.from_file(str(path))


def conftest_hf_file(key: str) -> str:
    from conftest import HF_FILES

    return HF_FILES[key]


def test_flagged_documents_normalised_segment_by_segment(tmp_path, monkeypatch):
    """Documents the NFC quick check flags are normalised here, each segment between active
    tokens on its own (a mark after a token does not compose with it), and encoded by the pass
    again; where the normalised text would make a token's text HF never saw (U+212A KELVIN
    SIGN -> "K" next to "O": the added token "OK"), the batch pipeline takes them. Ids equal
    HF's either way."""
    from gputok.backends.runners import perdoc as runner

    enc, hf = _qwen2_with_added(tmp_path, ["OK", "<tag>"])
    calls = []
    real = runner.PerDocRunner._normalized_pass

    def spy(self, *a):
        got = real(self, *a)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(runner.PerDocRunner, "_normalized_pass", spy)
    docs = ["e\u0301 combining and caf\xe9", "\u1100\u1161\u11a8 hangul jamo",
            "a\u0316\u0301 marks to reorder <tag>\u0301 after a token",
            "<|im_start|>\u0338 e\u0301<|im_end|>e\u0301", ">\u0338<tag>\u0338 x\u0301",
            "plain ascii", "\u212b angstrom \u2126 ohm <tag>"] + \
        [d + " e\u0301" for d in corpus_snippets()][:40]
    be = native.create(threads=2)
    for allowed in ("all", set()):
        ids, off = enc.encode_batch_arrays(docs, allowed_special=allowed,
                                           disallowed_special=(), backend=be)
        want = [hf.encode(d, add_special_tokens=allowed == "all").ids for d in docs]
        if allowed != "all":  # (HF cuts the specials out always: compare without them)
            want = [hf.encode(d, add_special_tokens=False).ids for d in docs]
            keep = [i for i, d in enumerate(docs) if "<|im_" not in d]
            docs_k = [docs[i] for i in keep]
            got = [ids[off[i]:off[i + 1]].tolist() for i in keep]
            assert got == [want[i] for i in keep], docs_k
        else:
            got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))]
            assert got == [hf.encode(d, add_special_tokens=False).ids for d in docs]
    assert calls and all(calls)
    # the normalised text makes "OK" (an added token HF never saw there): the pipeline's ids
    calls.clear()
    odd = ["O\u212a e\u0301", "xO\u212ay <tag>e\u0301"]
    ids, off = enc.encode_batch_arrays(odd, allowed_special="all", disallowed_special=(),
                                       backend=be)
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(2)] == \
        [hf.encode(d, add_special_tokens=False).ids for d in odd]
    assert calls == [False]
