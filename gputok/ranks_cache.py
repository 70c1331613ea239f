"""Ranks stored ready to map: a named encoding's vocabulary loads in milliseconds, not 0.4 s.

Parsing a bundled ``.tiktoken.gz`` (gunzip, 200K base64 lines, a 200K-entry dict, its inverse)
took 0.4-0.5 s per process for o200k_base, every time. The first parse writes a cache file
(``$GPUTOK_CACHE``, default ``~/.cache/gputok``, ``ranks-<key>.bin``, key = sha256 of the
bundled file's bytes and ``FORMAT``) holding the tokens' bytes in rank order, their offsets and
ranks, and an open-addressing index on ``zlib.crc32`` (deterministic, unlike ``hash``). Later
processes read it in one call and get:

* ``RankTable``, a ``Mapping[bytes, int]`` that answers lookups through the index without
  building a dict (a short first ``encode`` needs a few dozen), and turns into a real dict after
  ``MATERIALIZE_AFTER`` lookups or on any bulk use (iteration): from then on ``table.get`` is
  that dict's own method;
* ``RankDecoder``, the id -> bytes dict filled on demand (``__missing__``), and completely on
  any bulk use (iteration, ``keys`` / ``items`` / ``values``).

A cache file is checked (magic, format, sizes, the source's digest) and ignored when damaged;
every write is atomic (temp file + rename). Performance notes: ``np.load`` of an ``.npz`` cost
~8 ms (zip); one ``read()`` and ``array.frombytes`` ~1 ms; a Python ``dict`` of 200K bytes keys
costs ~90 ms to build whichever way it is read (pickle and marshal included), hence the index.
"""

from __future__ import annotations

import array
import hashlib
import os
import struct
import zlib
from collections.abc import Mapping

import numpy as np

from ._cache import cache_dir

FORMAT = 1
MAGIC = b"GPTKRNK\0"
MATERIALIZE_AFTER = 4096  # lookups through the index before a real dict is built
EMPTY = 0xFFFFFFFF
_HEADER = struct.Struct("<8sIIII32s")  # magic, format, tokens, data bytes, index bits, digest




def _u32(values) -> array.array:
    a = array.array("I", values)
    if a.itemsize != 4:  # pragma: no cover - every supported platform has a 4-byte unsigned int
        a = array.array("L", values)
    return a


class RankTable(Mapping):
    """bytes -> rank over flat arrays, without a dict until one pays off (module docstring)."""

    def __init__(self, data: bytes, offsets, ranks, index, digest: str):
        self._data, self._off, self._ranks, self._index = data, offsets, ranks, index
        self._mask = len(index) - 1
        self.digest = digest  # sha256 (32 hex digits) of the uncompressed vocabulary file
        self._dict: "dict | None" = None
        self._lookups = 0

    # -- the index
    def _find(self, tok: bytes) -> int:
        idx, off, data = self._index, self._off, self._data
        s = zlib.crc32(tok) & self._mask
        n = len(tok)
        while True:
            k = idx[s]
            if k == EMPTY:
                return -1
            a = off[k]
            if off[k + 1] - a == n and data[a:a + n] == tok:
                return k
            s = (s + 1) & self._mask

    def get(self, tok, default=None):
        if self._dict is not None:
            return self._dict.get(tok, default)
        self._lookups += 1
        if self._lookups > MATERIALIZE_AFTER:
            return self.materialize().get(tok, default)
        k = self._find(tok) if isinstance(tok, bytes) else -1
        return default if k < 0 else self._ranks[k]

    def materialize(self) -> dict:
        """The table as a dict (built once); ``self.get`` becomes the dict's own method."""
        if self._dict is None:
            off, data = self._off.tolist(), self._data
            self._dict = dict(zip([data[a:b] for a, b in zip(off, off[1:])], self._ranks))
            self.get = self._dict.get  # callers that look ``get`` up from now on skip a layer
        return self._dict

    # -- Mapping
    def __getitem__(self, tok):
        r = self.get(tok, None)
        if r is None:
            raise KeyError(tok)
        return r

    def __contains__(self, tok) -> bool:
        return self.get(tok, None) is not None

    def __len__(self) -> int:
        return len(self._ranks)

    def __iter__(self):
        return iter(self.materialize())

    def items(self):
        return self.materialize().items()

    def values(self):
        return self.materialize().values()

    def keys(self):
        return self.materialize().keys()

    def __reduce__(self):  # pickles (and copies) as the plain dict
        return dict, (self.materialize(),)

    # -- for the decoder
    def token_of_rank(self, rank: int) -> "bytes | None":
        """The bytes of ``rank`` (ranks are stored in increasing order)."""
        ranks = self._ranks
        k = rank if 0 <= rank < len(ranks) and ranks[rank] == rank else _bisect(ranks, rank)
        if k < 0:
            return None
        a, b = self._off[k], self._off[k + 1]
        return self._data[a:b]

    def max_rank(self) -> int:
        return self._ranks[-1]

    def sample(self, rng, k: int) -> "list[bytes]":
        """``k`` tokens drawn with ``rng`` (a ``random.Random``), without building a dict."""
        off, data = self._off, self._data
        return [data[off[i]:off[i + 1]] for i in rng.sample(range(len(self._ranks)),
                                                            min(k, len(self._ranks)))]


def _bisect(ranks, rank: int) -> int:
    import bisect

    k = bisect.bisect_left(ranks, rank)
    return k if k < len(ranks) and ranks[k] == rank else -1


class RankDecoder(dict):
    """id -> bytes for a ``RankTable`` plus explicitly set ids (specials), filled on demand."""

    def __init__(self, table: RankTable):
        super().__init__()
        self._table = table
        self._extra: set = set()  # ids set explicitly (not ranks)
        self._full = False

    def __missing__(self, i):
        if not self._full and isinstance(i, int):
            tok = self._table.token_of_rank(i)
            if tok is not None:
                dict.__setitem__(self, i, tok)
                return tok
        raise KeyError(i)

    def __setitem__(self, i, tok) -> None:
        self._extra.add(i)
        dict.__setitem__(self, i, tok)

    def fill(self) -> "RankDecoder":
        if not self._full:
            t = self._table
            off, data = t._off.tolist(), t._data
            for i, tok in zip(t._ranks, [data[a:b] for a, b in zip(off, off[1:])]):
                if i not in self._extra:
                    dict.__setitem__(self, i, tok)
            self._full = True
        return self

    def __contains__(self, i) -> bool:
        return dict.__contains__(self, i) or (not self._full and isinstance(i, int)
                                              and self._table.token_of_rank(i) is not None)

    def get(self, i, default=None):
        try:
            return self[i]
        except KeyError:
            return default

    def __len__(self) -> int:
        t = self._table
        return len(t) + sum(1 for i in self._extra if t.token_of_rank(i) is None)

    def __iter__(self):
        return dict.__iter__(self.fill())

    def keys(self):
        return dict.keys(self.fill())

    def items(self):
        return dict.items(self.fill())

    def values(self):
        return dict.values(self.fill())

    def __reduce__(self):  # pickles (and copies) as a plain dict
        return dict, (dict(self.items()),)

    def max_key(self) -> int:
        return max(self._table.max_rank(), max(self._extra, default=-1))


def _path(key: str) -> str:
    return os.path.join(cache_dir(), f"ranks-{key}.bin")


def source_key(raw_file: bytes) -> str:
    return hashlib.sha256(MAGIC + str(FORMAT).encode() + raw_file).hexdigest()[:32]


def load(key: str) -> "RankTable | None":
    """The cached table for ``key``, or None (absent, or damaged: rebuilt by the caller)."""
    try:
        with open(_path(key), "rb") as f:
            blob = f.read()
        magic, fmt, n, nbytes, bits, digest = _HEADER.unpack_from(blob)
        if magic != MAGIC or fmt != FORMAT:
            return None
        pos = _HEADER.size
        parts = []
        for count in (n + 1, n, 1 << bits):
            a = _u32(b"")
            a.frombytes(blob[pos:pos + 4 * count])
            parts.append(a)
            pos += 4 * count
        data = blob[pos:pos + nbytes]
        if len(data) != nbytes or pos + nbytes != len(blob) or parts[0][-1] != nbytes:
            return None
        return RankTable(data, parts[0], parts[1], parts[2], digest.decode("ascii"))
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return None


def store(key: str, ranks: "dict[bytes, int]", digest: str) -> "RankTable | None":
    """Write ``ranks`` to the cache (atomically) and return the table read back, or None when
    the cache cannot be written (a read-only home only costs the parse next time)."""
    items = sorted(ranks.items(), key=lambda kv: kv[1])
    toks = [t for t, _ in items]
    off = np.zeros(len(toks) + 1, np.int64)
    np.cumsum([len(t) for t in toks], out=off[1:])
    bits = max(4, int(2 * len(toks) - 1).bit_length())
    index = np.full(1 << bits, EMPTY, np.uint32)
    slot = np.array([zlib.crc32(t) for t in toks], np.int64) & ((1 << bits) - 1)
    pending = np.arange(len(toks))
    while len(pending):  # linear probing, placed in order of rank (any order probes the same)
        s = slot[pending]
        free = index[s] == EMPTY
        cand = pending[free]
        _, first = np.unique(s[free], return_index=True)
        win = cand[first]
        index[slot[win]] = win
        placed = np.zeros(len(toks), bool)
        placed[win] = True
        pending = pending[~placed[pending]]
        slot[pending] = (slot[pending] + 1) & ((1 << bits) - 1)
    data = b"".join(toks)
    blob = b"".join([_HEADER.pack(MAGIC, FORMAT, len(toks), len(data), bits, digest.encode()),
                     off.astype("<u4").tobytes(),
                     np.array([r for _, r in items], "<u4").tobytes(), index.astype("<u4").tobytes(),
                     data])
    path = _path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError:
        return None
    return load(key)
