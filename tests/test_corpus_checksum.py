"""The shards' checksums (gputok/corpus/checksum.py): XXH64 against its specification's
published values and a step-by-step Python statement of it, streamed in any pieces; manifests
that list sha256 shards (every manifest before xxh64) still verified on --resume."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest

from gputok.corpus import ShardWriter, read_manifest
from gputok.corpus import checksum

# the specification's sample values (xxHash's documentation and test suite)
PUBLISHED = [(b"", 0, 0xEF46DB3751D8E999), (b"a", 0, 0xD24EC4F1A98C6E5B),
             (b"abc", 0, 0x44BC2CF5AD770999)]


@pytest.fixture(scope="module")
def native():
    from gputok.backends import native as nat

    nat.library(compile=True)  # (the checksum never compiles on its own for a new job)
    assert checksum.choose() == "xxh64"
    return checksum.Xxh64


@pytest.mark.parametrize("data,seed,want", PUBLISHED)
def test_published_values(native, data, seed, want):
    assert checksum.xxh64_reference(data, seed) == want
    h = native(seed)
    h.update(data)
    assert h.intdigest() == want and h.hexdigest() == f"{want:016x}"


def test_native_streaming_equals_the_reference_in_any_pieces(native):
    rng = random.Random(3)
    for n in [1, 3, 4, 7, 8, 9, 31, 32, 33, 63, 64, 65, 95, 96, 97, 200, 1000, 4099]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        seed = rng.choice([0, 1, 2**64 - 1, rng.getrandbits(64)])
        want = checksum.xxh64_reference(data, seed)
        for _ in range(4):
            h, at = native(seed), 0
            while at < n:  # pieces of 0 to 40 bytes: every split of a stripe
                k = rng.randint(0, 40)
                h.update(data[at:at + k])
                at += k
            assert h.intdigest() == want, (n, seed)
    # arrays and memoryviews of other formats are hashed as their bytes
    arr = np.arange(1000, dtype=np.uint32)
    h = native()
    h.update(arr)
    assert h.intdigest() == checksum.xxh64_reference(arr.tobytes())


def test_the_installed_xxhash_agrees_where_there_is_one(native):
    xxhash = pytest.importorskip("xxhash")  # (a second oracle; the published values above are
    rng = np.random.default_rng(0)           # the one every run checks)
    data = rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    h = native()
    h.update(data[:12345])
    h.update(data[12345:])
    assert h.hexdigest() == xxhash.xxh64(data).hexdigest()


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="checksum must be one of auto, xxh64, sha256"):
        checksum.choose("md5")
    with pytest.raises(ValueError, match="unknown checksum"):
        checksum.hasher("crc32")
    with pytest.raises(ValueError, match="has no checksum"):
        checksum.shard_algorithm({"files": []})


def _writer(out, **kw):
    return ShardWriter(out, fmt="npy", meta={"job": 1}, n_vocab=70000, cap_tokens=2000, **kw)


def _write(w, k0, n):
    rng = np.random.default_rng(k0)
    for k in range(k0, k0 + n):
        lens = rng.integers(0, 900, 5)
        ids = rng.integers(0, 70000, int(lens.sum())).astype(np.uint32)
        w.add(ids, np.concatenate([[0], np.cumsum(lens)]), [(0, k, i) for i in range(5)])
    return w


def test_resume_verifies_sha256_shards_and_lists_new_ones_with_xxh64(native, tmp_path):
    out = tmp_path / "o"
    w = _write(_writer(out, checksum="sha256"), 0, 6)
    w.close()
    m = read_manifest(out)
    old = m["shards"]
    assert len(old) >= 3 and all("sha256" in s and "xxh64" not in s for s in old)
    for s in old:  # (the files' real sha256: what older versions wrote)
        for name, digest in zip(s["files"], s["sha256"]):
            assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # an interrupted job of an older version: its last shards not yet listed, one listed
    # shard damaged
    m["shards"], m["complete"] = old[:-1], False
    (out / "manifest.json").write_text(json.dumps(m))
    warned = []
    w = _writer(out, resume=True, warn=warned.append)
    assert w.checksum == "xxh64" and len(w.shards) == len(old) - 1 and not warned
    w.release()
    bad = out / old[1]["files"][0]
    raw = bytearray(bad.read_bytes())
    raw[-1] ^= 1
    bad.write_bytes(bytes(raw))
    w = _writer(out, resume=True, warn=warned.append)
    assert len(w.shards) == 1 and warned and f"{bad} is corrupt" in warned[0]
    _write(w, 100, 4)
    w.close()
    got = read_manifest(out)["shards"]
    assert got[0] == old[0] and len(got) >= 3
    assert all("xxh64" in s and "sha256" not in s for s in got[1:])
    for s in got[1:]:
        for name, digest in zip(s["files"], s["xxh64"]):
            assert f"{checksum.xxh64_reference((out / name).read_bytes()):016x}" == digest
    # and an xxh64 shard that rots is found as well
    bad = out / got[2]["files"][1]
    raw = bytearray(bad.read_bytes())
    raw[0] ^= 0x40
    bad.write_bytes(bytes(raw))
    m = read_manifest(out)
    m["complete"] = False
    (out / "manifest.json").write_text(json.dumps(m))
    warned.clear()
    w = _writer(out, resume=True, warn=warned.append)
    assert len(w.shards) == 2 and f"{bad} is corrupt" in warned[0]
    w.release()


@pytest.mark.parametrize("flag", [None, "sha256", "xxh64"])
def test_the_command_line_writes_the_checksum_asked_for(native, tmp_path, flag):
    from gputok.cli import main

    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n"
                           for i in range(200)))
    out = tmp_path / "o"
    extra = [] if flag is None else ["--checksum", flag]
    assert main(["encode", "-e", "r50k_base", str(src), "-o", str(out), "-q", "--backend",
                 "numpy", "--shard-tokens", "2000", *extra]) == 0
    shards = read_manifest(out)["shards"]
    want = flag or "xxh64"  # (auto: the native library is built here)
    assert len(shards) > 1 and all(checksum.shard_algorithm(s) == want for s in shards)
    for s in shards:
        for name, digest in zip(s["files"], s[want]):
            assert checksum.file_digest(out / name, want) == digest


def test_xxh64_without_a_buildable_library_says_what_to_do(monkeypatch):
    import gputok.backends as backends

    def no_library(symbol, *, build=False):
        if build:
            raise RuntimeError("no C++ compiler found")
        return None
    monkeypatch.setattr(backends, "host_routine", no_library)
    assert checksum.choose() == "sha256"  # a new job: sha256 then
    with pytest.raises(ValueError, match="need gputok's native library.*no C.. compiler found"
                       ".*--overwrite"):
        checksum.Xxh64()  # (resuming a job of xxh64 shards)
