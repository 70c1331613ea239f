"""gputok.stages: each stage's numpy implementation, and proof of which path a batch took.

Caches are reset where the path matters (the piece cache hides merges), and ``counters`` says
which implementation did the work: merges from the ranks, on the table's dict, in vectorised
rounds, by the heap, whole-token hits.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import gputok
import testdata
from conftest import hf_oracle, tiktoken_oracle
from gputok.model import Model
from gputok.stages import counters, dedup, emit, merge, reset_counters, split
from gputok.stages.pack import Documents


@pytest.fixture(autouse=True)
def numpy_is_the_default(monkeypatch):
    """These tests prove which numpy stage did the work: "auto" (which takes the native CPU
    backend where a compiler is found) resolves to numpy here."""
    from gputok import backends

    monkeypatch.setitem(backends._instances, "auto", backends.get_backend("numpy"))


def fresh(name: str) -> gputok.Encoding:
    """A new Encoding with an empty piece cache and no merge table built yet."""
    enc = gputok.get_encoding(name)
    return gputok.Encoding.from_model(Model(**{f: getattr(enc.model, f) for f in (
        "name", "pretok", "decoder", "byte_ids", "ranks", "merges", "whole", "normalizer",
        "specials", "added", "lstrip", "rstrip", "digest")}))


def test_few_misses_merge_from_the_ranks_without_building_the_table():
    enc = fresh("o200k_base")
    reset_counters()
    assert enc.encode("hello wörld, qzxv") == tiktoken_oracle("o200k_base").encode(
        "hello wörld, qzxv")
    assert counters["merge.ranks"] > 0 and not enc.model.has_merge_table
    assert counters["merge.rounds"] == counters["merge.small"] == 0


def test_many_misses_merge_in_vectorised_rounds():
    enc, tk = fresh("cl100k_base"), tiktoken_oracle("cl100k_base")
    rng = random.Random(0)
    words = ["".join(rng.choice("qxzjkvwy") for _ in range(rng.randint(3, 12)))
             for _ in range(3000)]
    texts = [" ".join(words[i:i + 50]) for i in range(0, len(words), 50)]
    reset_counters()
    ids, off = enc.encode_batch_arrays(texts)
    assert counters["merge.rounds"] >= merge.VECTOR_MIN and enc.model.has_merge_table
    assert ids.tolist() == [t for x in texts for t in tk.encode(x)]
    reset_counters()
    enc.encode_batch_arrays(texts)  # now every piece is cached: nothing merges
    assert not any(k.startswith("merge.") for k in counters)


def test_long_pieces_take_the_heap_and_are_not_cached():
    enc, tk = fresh("r50k_base"), tiktoken_oracle("r50k_base")
    text = "x" * 3000 + " " + "ab" * 700
    reset_counters()
    assert enc.encode(text) == tk.encode(text)
    assert counters["merge.long"] == 2
    assert all(len(p) < merge.LONG_PIECE for p in enc.model.piece_cache)


def test_a_document_merges_each_new_piece_once():
    """One document repeating a new piece: merged once, not once per occurrence."""
    enc = fresh("cl100k_base")
    reset_counters()
    ids = enc.encode(" zqxjv" * 40 + " kkwq" * 40)
    assert counters["merge.ranks"] == 2
    assert ids == tiktoken_oracle("cl100k_base").encode(" zqxjv" * 40 + " kkwq" * 40)


def test_whole_token_pieces_skip_merging():
    enc = fresh("cl100k_base")
    words = [w for w in ("the of and to in is for that with as " * 30).split()]
    texts = [" ".join(words)] * 300 + [" ".join(random.Random(1).sample(words, len(words)))]
    enc.model.merge_table  # noqa: B018 (built: the batch path uses it)
    reset_counters()
    enc.encode_batch_arrays(texts)
    assert counters["merge.whole"] >= 10 and counters["merge.rounds"] == 0


def test_emit_packs_ids_and_offsets():
    ids, off = emit.emit([[(1, 2), (3,)], [], [(70000,)]], np.uint32)
    assert ids.tolist() == [1, 2, 3, 70000] and ids.dtype == np.uint32
    assert off.tolist() == [0, 3, 3, 4] and off.dtype == np.int64
    ids, off = emit.assemble([(2, np.array([9], np.uint16), np.array([1])),
                              (0, np.array([7, 8], np.uint16), np.array([2, 0]))], 3, np.uint16)
    assert ids.tolist() == [7, 8, 9] and off.tolist() == [0, 2, 2, 3]
    # into a block the caller gives (the device driver: huge pages), any id dtype cast
    blocks = []

    def block(nbytes):
        blocks.append(np.full(nbytes, 0xEE, np.uint8))
        return blocks[-1]

    ids, off = emit.assemble([(1, np.array([70000], np.uint32), np.array([1])),
                              (0, np.array([5, 6], np.int64), np.array([0, 2]))], 3, np.uint32,
                             block)
    assert ids.tolist() == [5, 6, 70000] and ids.dtype == np.uint32
    assert off.tolist() == [0, 0, 2, 3] and len(blocks) == 1 and blocks[0].nbytes == 12
    assert np.shares_memory(ids, blocks[0])
    ids, off = emit.assemble([(0, np.zeros(0, np.uint32), np.array([0]))], 1, np.uint32, block)
    assert len(ids) == 0 and off.tolist() == [0, 0]


def test_dedup_probes_once_per_batch():
    enc = fresh("cl100k_base")
    items = [["a", "b", (100257,), "a"], [], ["b"]]
    vals = dedup.ids_of_documents(enc.model, items)
    assert vals == [[(64,), (65,), (100257,), (64,)], [], [(65,)]]
    assert set(enc.model.piece_cache) == {"a", "b"}


LSTRIP_CASES = ["a  <|im_start|>  b<|im_end|> \n c", "\t<|im_start|>x <|im_end|>\u3000y",
                "x\x1c<|im_start|>", "<|im_end|>   ", "  <|im_start|><|im_end|>  z",
                "<|im_end|>\u2028 \u2029<|im_start|>", "no tokens  ", "", "<|im_start|>"]


def lstrip_qwen(tmp_path) -> gputok.Encoding:
    cfg = json.loads(testdata.vocab_path("qwen2_tokenizer_json").read_text("utf-8"))
    for t in cfg["added_tokens"]:
        if t["content"] == "<|im_start|>":
            t["lstrip"] = True
        if t["content"] == "<|im_end|>":
            t["rstrip"] = True
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg, ensure_ascii=False), "utf-8")
    return gputok.load(path), path


def test_split_forms_agree_with_lstrip_rstrip(tmp_path):
    """The buffer form (device path) cuts exactly where the text form (CPU path) does."""
    enc, path = lstrip_qwen(tmp_path)
    m = enc.model
    allowed = frozenset(m.specials)
    docs = Documents(LSTRIP_CASES)
    buf, off = docs.packed()
    starts, ends, ids = split.token_spans(m, buf, off, allowed)
    segs, layout = split.split_documents(m, list(docs.iter_str()), allowed, frozenset())
    # rebuild each document from the buffer spans and compare with the text form
    for d, parts in enumerate(layout):
        lo, hi = int(off[d]), int(off[d + 1])
        want = [segs[p] if isinstance(p, int) else p for p in parts]
        got, pos = [], lo
        for a, b, i in zip(starts.tolist(), ends.tolist(), ids.tolist()):
            if not lo <= a < hi:
                continue
            if a > pos:
                got.append(buf[pos:a].decode())
            if i != split.NO_IDS:
                got.append((i,))
            pos = b
        if pos < hi:
            got.append(buf[pos:hi].decode())
        assert got == want, (d, LSTRIP_CASES[d])
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(path))
    ids_np, off_np = enc.encode_batch_arrays(LSTRIP_CASES, allowed_special="all")
    assert ids_np.tolist() == [i for t in LSTRIP_CASES
                               for i in hf.encode(t, add_special_tokens=False).ids]


def test_normalize_stage_runs_only_for_models_with_a_normaliser():
    qwen = gputok.load(testdata.vocab_path("qwen2_tokenizer_json"))
    segs = ["e\u0301", "plain"]
    reset_counters()
    assert qwen.model.normalizer.normalize_batch(segs) == ["\u00e9", "plain"]
    assert counters["normalize.segments"] == 2
    cl = gputok.get_encoding("cl100k_base")
    assert cl.model.normalizer.normalize_batch(segs) is segs and cl.model.front[0] is None
    hf = hf_oracle("qwen2")
    assert qwen.encode("e\u0301 x") == hf.encode("e\u0301 x", add_special_tokens=False).ids


def test_pretok_spec_steps_match_hf(tmp_path):
    """A multi-step HF pre-tokenizer (ByteLevel with its own regex and a prefix space)."""
    from tokenizers import Tokenizer

    cfg = json.loads(testdata.vocab_path("llama3_tokenizer_json").read_text("utf-8"))
    cfg["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                           "use_regex": True}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg, ensure_ascii=False), "utf-8")
    enc, hf = gputok.load(path), Tokenizer.from_file(str(path))
    assert enc.model.pretok.pattern is None  # two steps
    texts = ["hello world", "  two  spaces", "x's 123456 ok\n\nnext", ""]
    for t in texts:
        assert enc.encode(t) == hf.encode(t, add_special_tokens=False).ids, repr(t)
    reset_counters()
    ids, off = enc.encode_batch_arrays(texts)
    assert counters["pretok.steps"] == len(texts)
    assert ids.tolist() == [i for t in texts for i in hf.encode(t, add_special_tokens=False).ids]


def _long_pieces(rng: random.Random) -> list[bytes]:
    emoji = "".join(chr(0x1F600 + rng.randrange(80)) for _ in range(700)).encode()
    cjk = "".join(chr(0x4E00 + rng.randrange(3000)) for _ in range(400)).encode()
    mixed = "".join(rng.choice(["😀", "👍🏽", "é", "中", "\u200d", "x", "!!", "\U0001F9D1"])
                    for _ in range(600)).encode()
    return [emoji, cjk, mixed, b"a" * 3000, b" " * 2000, bytes(rng.randrange(256)
                                                               for _ in range(3000))]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "qwen2"])
def test_long_pieces_cut_where_no_merge_crosses_equal_one_heap(name):
    from conftest import hf_encoding

    enc = hf_encoding(name) if name == "qwen2" else gputok.get_encoding(name)
    table = enc.model.merge_table
    join = merge.join_mask(enc.model, table)
    runs: dict = {}
    for piece in _long_pieces(random.Random(3)):
        bid = table.byte_id_list
        want = merge.merge_long_ids([bid[b] for b in piece], table)
        assert merge.merge_long_cut(piece, table, join, runs) == want
    # and the cut really happens: an emoji run is many independent runs
    emoji = _long_pieces(random.Random(3))[0]
    b = np.frombuffer(emoji, np.uint8)
    assert (~join[(b[:-1].astype(np.int64) << 8) | b[1:]]).sum() > 100
