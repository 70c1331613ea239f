"""gputok.ranks_cache: bundled vocabularies stored ready to map (start-up in milliseconds).

The cached table must answer exactly as the parsed dict does (lookups through the crc32 index,
then as a real dict), the decoder must fill on demand and completely on bulk use, a damaged
cache file must be ignored, and named encodings built from the cache must encode as tiktoken.
"""

from __future__ import annotations

import pickle
import random

import pytest

import gputok
from conftest import tiktoken_oracle
from gputok import ranks_cache, registry


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path))
    return tmp_path


def small_ranks() -> dict:
    rng = random.Random(3)
    ranks = {bytes([b]): b for b in range(256)}
    while len(ranks) < 3000:
        tok = bytes(rng.randrange(256) for _ in range(rng.randrange(2, 9)))
        ranks.setdefault(tok, len(ranks))
    return ranks


def test_the_table_answers_as_the_dict(cache):
    ranks = small_ranks()
    key = ranks_cache.source_key(b"test vocabulary")
    assert ranks_cache.load(key) is None
    table = ranks_cache.store(key, ranks, "d" * 32)
    assert isinstance(table, ranks_cache.RankTable) and table.digest == "d" * 32
    assert len(table) == len(ranks) and table._dict is None
    misses = [t + b"\x00\x01" for t in list(ranks)[:300]] + [b"", b"\xff" * 40]
    for tok, r in list(ranks.items())[:800]:
        assert table[tok] == r and tok in table and table.get(tok) == r
    for tok in misses:
        assert table.get(tok) is None and tok not in table and table.get(tok, -1) == -1
    with pytest.raises(KeyError):
        table[b"\xfe\xfd\xfc\xfb\xfa"]
    assert table._dict is None  # still through the index
    assert dict(table.items()) == ranks  # bulk use: a real dict
    assert table.get.__self__ is table._dict  # and lookups are the dict's own from then on
    assert pickle.loads(pickle.dumps(table)) == ranks


def test_many_lookups_build_the_dict(cache):
    ranks = small_ranks()
    table = ranks_cache.store(ranks_cache.source_key(b"x"), ranks, "e" * 32)
    toks = list(ranks)
    for k in range(ranks_cache.MATERIALIZE_AFTER + 1):
        assert table.get(toks[k % len(toks)]) == ranks[toks[k % len(toks)]]
    assert table._dict == ranks


def test_the_decoder_fills_on_demand(cache):
    ranks = small_ranks()
    table = ranks_cache.store(ranks_cache.source_key(b"y"), ranks, "f" * 32)
    dec = ranks_cache.RankDecoder(table)
    dec[5000] = b"<|special|>"
    inverse = {r: t for t, r in ranks.items()}
    assert dec[17] == inverse[17] and dec[2999] == inverse[2999] and dec[5000] == b"<|special|>"
    assert dict.__len__(dec) == 3  # only what was asked for
    assert 100 in dec and 4000 not in dec and dec.get(4000) is None
    with pytest.raises(KeyError):
        dec[4000]
    assert len(dec) == len(ranks) + 1 and dec.max_key() == 5000
    assert dict(dec.items()) == {**inverse, 5000: b"<|special|>"}
    assert pickle.loads(pickle.dumps(dec)) == {**inverse, 5000: b"<|special|>"}


def test_a_damaged_cache_file_is_ignored(cache):
    ranks = small_ranks()
    key = ranks_cache.source_key(b"z")
    ranks_cache.store(key, ranks, "a" * 32)
    path = cache / f"ranks-{key}.bin"
    blob = path.read_bytes()
    path.write_bytes(blob[:len(blob) // 2])  # truncated
    assert ranks_cache.load(key) is None
    path.write_bytes(b"not a cache file at all")
    assert ranks_cache.load(key) is None


@pytest.mark.filterwarnings("ignore::gputok.backends.FallbackWarning")  # o200k: host pretok
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_named_encodings_from_the_cache_encode_as_tiktoken(cache, name):
    stem = {"r50k_base": "r50k_base"}.get(name, name)
    parsed, digest = registry._bundled_ranks(stem)  # parses, writes the cache
    cached, digest2 = registry._bundled_ranks(stem)  # reads it back
    assert isinstance(cached, ranks_cache.RankTable) and digest2 == digest
    assert len(cached) == len(parsed)
    enc = {"cl100k_base": registry._cl100k_base, "o200k_base": registry._o200k_base,
           "r50k_base": lambda: registry._r50k("r50k_base")}[name]()
    assert isinstance(enc.model.ranks, ranks_cache.RankTable)
    tk = tiktoken_oracle(name)
    texts = ["hello world", "Grüße, 世界! 👋🏽 code: x += 1\n", "<|endoftext|> as text", ""]
    for t in texts:
        assert enc.encode_ordinary(t) == tk.encode_ordinary(t)
        assert enc.decode(enc.encode_ordinary(t)) == t
    assert enc.max_token_value == tk.max_token_value and enc.n_vocab == tk.n_vocab
    assert enc.encode("<|endoftext|>", allowed_special="all") == [tk.eot_token]
    ids, off = enc.encode_batch_arrays(texts * 50, disallowed_special=())  # the batch path
    assert ids.tolist() == [i for t in texts * 50 for i in tk.encode_ordinary(t)]
    assert gputok.get_encoding(name).encode("hello world") == tk.encode("hello world")


def test_arrays_stored_ready_to_map_round_trip_and_refuse_damage(cache):
    """``_cache.write_arrays`` / ``map_arrays``: every dtype and shape comes back equal and
    read-only; a truncated, padded or foreign file reads as absent (never as wrong arrays)."""
    import numpy as np

    from gputok._cache import map_arrays, write_arrays

    arrays = {"a": np.arange(1000, dtype=np.uint64), "b": np.frombuffer(b"xyz", np.uint8),
              "c": np.arange(12, dtype=np.int16).reshape(3, 4), "empty": np.zeros(0, np.uint32)}
    path = str(cache / "t.bin")
    assert write_arrays(path, arrays, {"bits": 7})
    got, scalars = map_arrays(path)
    assert scalars == {"bits": 7} and set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v)
        assert not got[k].flags.writeable
        assert got[k].ctypes.data % 64 == 0 or v.nbytes == 0
    blob = (cache / "t.bin").read_bytes()
    del got
    for bad in (blob[:-1], blob + b"\0", blob[:10], b"GPTKARR\0" + b"\xff" * 8, b""):
        (cache / "t.bin").unlink()
        (cache / "t.bin").write_bytes(bad)
        assert map_arrays(path) is None
    assert map_arrays(str(cache / "absent.bin")) is None


def test_device_tables_are_mapped_from_the_cache_and_rebuilt_when_damaged(cache, monkeypatch):
    """The device tables of a named encoding are built once, then mapped from the cache, equal
    to a fresh build; a damaged cache file is built again, not used."""
    import numpy as np

    from gputok._cache import write_arrays
    from gputok.backends import device_tables

    model = registry._cl100k_base().model
    built = device_tables.host_tables(model)  # builds and writes the cache
    path = device_tables._cache_path(model)
    assert path.startswith(str(cache)) and path.endswith(".bin")
    mapped = device_tables.host_tables(model)
    assert set(mapped) == set(built)
    for k, v in built.items():
        assert np.array_equal(mapped[k], v), k
    assert not mapped["slots"].flags.writeable
    # the byte blocks after the slots, flagged in the bits (device_tables.with_byte_blocks)
    w_size, t_size = mapped["bits"] & 0xFF, mapped["t_bits"] & 0xFF
    assert mapped["bits"] & device_tables.WHOLE_BYTES and len(mapped["slots"]) == (4 << w_size) + 256
    assert mapped["t_bits"] & device_tables.PAIR_BYTES
    assert len(mapped["t_slots"]) == (1 << t_size) + 32768  # (cl100k: one word a slot)
    for cut in ("slots", "t_slots"):  # a file whose block is missing is not used
        bad = dict(mapped)
        bad[cut] = bad[cut][:-8]
        scalars = {k: int(bad.pop(k)) for k in ("bits", "t_bits")}
        assert write_arrays(str(cache / "cut.bin"), bad, scalars)
        assert device_tables._mapped(str(cache / "cut.bin")) is None
    del mapped, bad
    blob = open(path, "rb").read()
    calls = []
    real = device_tables.whole_table
    monkeypatch.setattr(device_tables, "whole_table", lambda *a: calls.append(1) or real(*a))
    import os
    os.unlink(path)
    open(path, "wb").write(blob[: len(blob) // 2])
    again = device_tables.host_tables(model)
    assert calls == [1] and np.array_equal(again["slots"], built["slots"])
    assert device_tables._mapped(path) is not None  # written again, whole


def test_class_tables_are_mapped_from_the_cache_and_rebuilt_when_damaged(cache):
    """A pre-tokenizer family's code point classes (the device's class table) are derived once
    per machine, then mapped; equal to a fresh derivation; a damaged file is derived again."""
    import glob

    import numpy as np

    from gputok.stages import scan_rules

    fam = scan_rules.FAMILIES["o200k"]
    built = fam._class_table("tiktoken")
    files = glob.glob(str(cache / "**" / "classes-o200k-*.bin"), recursive=True)
    assert len(files) == 1
    mapped = fam._class_table("tiktoken")
    assert np.array_equal(mapped, built) and not mapped.flags.writeable
    assert int(mapped[ord("a")]) == fam.classify(int(scan_rules.class_flags("tiktoken")
                                                     ["table"][ord("a")]))
    other = scan_rules.FAMILIES["cl3"]._class_table("tiktoken")  # its own file
    assert len(glob.glob(str(cache / "**" / "classes-*.bin"), recursive=True)) == 2
    assert not np.array_equal(other, built)
    with open(files[0], "r+b") as f:
        f.truncate(1000)
    again = fam._class_table("tiktoken")
    assert np.array_equal(again, built)


def test_a_tokenizer_json_models_tables_are_cached_by_its_source(cache, tmp_path):
    """A merges (HF rule) model loaded from a file: its device tables are built once, then
    mapped (no merge table built), equal to a fresh build and giving the same ids; the same
    merges in a changed file are keyed apart."""
    import json

    import numpy as np

    import testdata
    from gputok.backends import device_tables

    src = testdata.vocab_path("llama3_tokenizer_json")
    path = tmp_path / "tokenizer.json"
    path.write_bytes(src.read_bytes())
    enc = gputok.load(path)
    assert enc.model.ranks is None and enc.model.digest
    built = device_tables.host_tables(enc.model)
    where = device_tables._cache_path(enc.model)
    assert where is not None and where.startswith(str(cache))
    assert "slots" in built  # (its whole-token table: device_tables.proven_whole)
    fresh = gputok.load(path)  # (the same model object while ``enc`` holds it)
    fresh.model.__dict__.pop("merge_table", None)
    mapped = device_tables.host_tables(fresh.model)
    assert "merge_table" not in fresh.model.__dict__  # mapped: nothing built
    assert set(mapped) == set(built)
    for k, v in built.items():
        assert np.array_equal(mapped[k], v), k
    text = "Hello wörld, 12345 tokens  \n\t héllo"
    assert enc.encode_batch([text], backend="native") == [enc.encode(text, backend="numpy")]
    cfg = json.loads(path.read_text("utf-8"))
    cfg["added_tokens"] = cfg["added_tokens"][:-1]  # (another file, the same merges)
    other = tmp_path / "other" / "tokenizer.json"
    other.parent.mkdir()
    other.write_text(json.dumps(cfg), "utf-8")
    assert device_tables._cache_path(gputok.load(other).model) != where
