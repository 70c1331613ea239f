"""The built-model cache (``gputok/loaders/model_cache.py``): a second load reads the entry and
gives the same ids; entries are keyed by the file's content, the load's name and gputok's code;
damaged, foreign or torn entries are ignored and rewritten; concurrent loads agree; it can be
turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gputok
from gputok.loaders import model_cache as MC

TEXTS = ["Hello world", "a b  c\n", "Grüße 世界 😀", ""]


def _tokenizer_json(path: Path, extra: str = "") -> Path:
    """A small SPM-style tokenizer.json (characters, byte fallback, a few merges)."""
    chars = sorted(set("Helo wrdabc\n" + extra)) + ["\u2581"]
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": b + 1 for b in range(256)}}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    merges = [["l", "l"], ["\u2581", "w"], ["o", "r"], ["ll", "o"]]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    cfg = {"model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": True,
                     "unk_token": "<unk>", "fuse_unk": True},
           "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
           "pre_tokenizer": None, "added_tokens": [], "decoder": None}
    path.write_text(json.dumps(cfg), "utf-8")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUTOK_MODEL_CACHE", raising=False)
    monkeypatch.setattr(MC, "MIN_BUILD_S", 0.0)  # (these small files build in milliseconds)
    monkeypatch.setattr(MC, "_live", _NotKept())  # (every load goes to the entries)
    return tmp_path / "cache" / "models"


class _NotKept(dict):
    def __setitem__(self, key, value):
        pass


def _entries(cache: Path) -> list:
    return sorted(cache.glob("*.pkl")) if cache.exists() else []


def test_second_load_reads_the_entry(cache, tmp_path, monkeypatch):
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    first = gputok.load(path)
    (entry,) = _entries(cache)
    calls = []
    monkeypatch.setattr(MC, "write", lambda *a: calls.append(a) or True)
    second = gputok.load(path)
    assert not calls  # read, not rebuilt
    assert second.model is not first.model and second.model.name == first.model.name
    for t in TEXTS:
        assert second.encode_ordinary(t) == first.encode_ordinary(t)
        assert second.decode(second.encode_ordinary(t)) == first.decode(first.encode_ordinary(t))
    assert entry.read_bytes()[:8] == MC.MAGIC


def test_a_process_loads_a_file_again_as_the_same_model(tmp_path, monkeypatch):
    """While an encoding holds a model, loading its file again is a lookup: the same model
    (its tables built once), no entry read; once no encoding holds it, it is read again."""
    import gc
    import weakref

    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUTOK_MODEL_CACHE", raising=False)
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    first = gputok.load(path)
    reads = []
    real = MC.read
    monkeypatch.setattr(MC, "read", lambda key: reads.append(key) or real(key))
    again = gputok.load(path)
    assert again is not first and again.model is first.model and not reads
    assert again.encode_ordinary("Hello world") == first.encode_ordinary("Hello world")
    gone = weakref.ref(first.model)
    del first, again
    gc.collect()
    assert gone() is None
    gputok.load(path)
    assert len(reads) == 1


def test_keyed_by_content_name_and_code(cache, tmp_path, monkeypatch):
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    before = gputok.load(path).encode_ordinary("xyz")
    _tokenizer_json(path, extra="xyz")  # same path, new content: never the stale entry
    after = gputok.load(path)
    assert after.encode_ordinary("xyz") != before
    assert len(_entries(cache)) == 2
    gputok.load(path, name="other")
    assert len(_entries(cache)) == 3
    monkeypatch.setattr(MC, "code_digest", lambda: b"another gputok")
    gputok.load(path)
    assert len(_entries(cache)) == 4


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "garbage"])
def test_damaged_entries_are_rebuilt(cache, tmp_path, damage):
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    want = [gputok.load(path).encode_ordinary(t) for t in TEXTS]
    (entry,) = _entries(cache)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        entry.write_bytes(data[:-10] + bytes([data[-10] ^ 0x40]) + data[-9:])
    elif damage == "foreign":  # a whole, valid entry of another key under this name
        other = _tokenizer_json(tmp_path / "other.json", extra="q")
        gputok.load(other)
        (theirs,) = [e for e in _entries(cache) if e != entry]
        entry.write_bytes(theirs.read_bytes())
    else:
        entry.write_bytes(b"not a cache entry at all")
    got = gputok.load(path)
    assert [got.encode_ordinary(t) for t in TEXTS] == want
    assert MC.read(MC.make_key("hf_json", __import__("hashlib").sha256(
        path.read_bytes()).hexdigest(), None, path.stem, path.parent.name)) is not None


def test_concurrent_loads_agree(cache, tmp_path):
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    code = ("import sys, gputok; from gputok.loaders import model_cache; "
            "model_cache.MIN_BUILD_S = 0; e = gputok.load(sys.argv[1]); "
            "print([e.encode_ordinary(t) for t in ('Hello world', 'Grüße 世界')])")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and outs[0].strip()
    (entry,) = _entries(cache)  # one entry, whole (no temporary files left)
    assert not list(cache.glob("*.tmp"))
    assert gputok.load(path).encode_ordinary("Hello world") == json.loads(outs[0])[0]


def test_turned_off(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_MODEL_CACHE", "0")
    gputok.load(_tokenizer_json(tmp_path / "tokenizer.json"))
    assert not _entries(cache)


def test_cached_properties_are_left_out_and_recomputed(cache, tmp_path):
    """A merge table's pair dict (a cached_property) is not stored; it comes back on use."""
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    first = gputok.load(path)
    table = first.model.segmenter.bpe.table
    assert "pairs" in table.__dict__
    (entry,) = _entries(cache)
    assert b"pairs" not in entry.read_bytes()
    again = gputok.load(path)
    table2 = again.model.segmenter.bpe.table
    assert "pairs" not in table2.__dict__ and table2.pairs == table.pairs
    assert again.encode_ordinary("Hello world") == first.encode_ordinary("Hello world")


def test_small_builds_are_not_stored_and_the_folder_is_trimmed(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(MC, "MIN_BUILD_S", 60.0)
    gputok.load(_tokenizer_json(tmp_path / "a.json"))
    assert not _entries(cache)
    monkeypatch.setattr(MC, "MIN_BUILD_S", 0.0)
    gputok.load(tmp_path / "a.json")
    (first,) = _entries(cache)
    os.utime(first, (1, 1))  # the least recently used
    budget = first.stat().st_size * 1.5 / 1e6  # room for one entry, not two
    monkeypatch.setenv("GPUTOK_MODEL_CACHE_MB", str(budget))
    gputok.load(_tokenizer_json(tmp_path / "b.json", extra="z"))
    (kept,) = _entries(cache)
    assert kept != first
