"""A vocabulary's pieces as arrays: what a SentencePiece family validates and indexes without a
Python object per piece (a 262K-piece ``.model`` held 262K strs, a dict and a merge dict that
took seconds to build).

``PieceTable`` holds the pieces' UTF-8 bytes in one blob with offsets, their scores (float32)
and types (uint8). Derived on first use, vectorised:

* ``chars``: the code points of every piece, flattened, and each piece's character offsets;
* ``hasher(seed)``: a 64-bit polynomial hash of any run of those code points, from prefix sums
  (``h(a, b) = sum((c_t + 1) * B^(t - a))`` modulo 2^64; B odd, so ``B^-a`` exists);
* ``PieceIndex``: an open-addressing table of a set of pieces by that hash. ``find_runs`` is
  exact: every hit is compared character by character, and an index refuses two different
  pieces with one hash (``HashClash``: the caller takes another seed).

Performance notes: the lookups are vectorised probes (load <= 1/4, a few numpy passes over the
queries); ``np.searchsorted`` over the sorted hashes was 3-4x slower for a million queries
(cache misses of the binary search), sorting the queries first about even with the probe.
"""

from __future__ import annotations

import functools

import numpy as np

from ..._arrays import code_points, probe_place as place

_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing of the 64-bit keys into slots
_BASES = (0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0xFF51AFD7ED558CCD)


SPACE_UTF8 = "\u2581".encode("utf-8")


class HashClash(Exception):
    """Two different pieces of one index have the same hash under this seed."""


def _utf8_lengths(cps: np.ndarray) -> np.ndarray:
    """UTF-8 bytes of each code point."""
    return (1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)).astype(np.int64)


class PieceTable:
    """Pieces (UTF-8 in ``blob``, piece i is ``blob[offsets[i]:offsets[i + 1]]``), scores and
    types, all arrays. ``blob`` must be valid UTF-8 piece by piece (loaders check it).

    >>> t = PieceTable.from_lists(["<unk>", "a", "▁ab"], [0.0, -1.0, -2.0], [2, 1, 1])
    >>> len(t), t.text(2), t.char_lengths.tolist()
    (3, '▁ab', [5, 1, 3])
    """

    def __init__(self, blob: bytes, offsets, scores, types):
        self.blob = bytes(blob)
        self.offsets = np.asarray(offsets, np.int64)
        self.scores = np.asarray(scores, np.float32)
        self.types = np.asarray(types, np.uint8)
        n = len(self.offsets) - 1
        if n < 0 or len(self.scores) != n or len(self.types) != n \
                or (n and int(self.offsets[-1]) != len(self.blob)):
            raise ValueError("PieceTable: offsets, scores and types disagree")

    @classmethod
    def from_lists(cls, pieces, scores, types) -> "PieceTable":
        """From one str per piece (a GGUF's tokens, a test's list)."""
        pieces = list(pieces)
        joined = "".join(pieces)
        try:
            blob = joined.encode("utf-8")
        except UnicodeEncodeError:
            bad = next(i for i, p in enumerate(pieces) if not _encodes(p))
            raise ValueError(f"piece {bad} ({pieces[bad][:20]!r}) is not valid Unicode "
                             "(a lone surrogate)") from None
        lens = np.fromiter(map(len, pieces), np.int64, len(pieces))
        char_off = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum(lens, out=char_off[1:])
        if len(blob) == len(joined):  # all ASCII
            offsets = char_off
        else:
            ends = np.zeros(len(joined) + 1, np.int64)
            np.cumsum(_utf8_lengths(code_points(joined)), out=ends[1:])
            offsets = ends[char_off]
        return cls(blob, offsets, scores, types)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def text(self, i: int) -> str:
        return self.blob[self.offsets[i]:self.offsets[i + 1]].decode("utf-8")

    @functools.cached_property
    def texts(self) -> list:
        """Every piece as a str (a list of n strs: built only where one is needed)."""
        cps, coff = self.chars
        s = self.joined
        cl = coff.tolist()
        return [s[a:b] for a, b in zip(cl, cl[1:])]

    @functools.cached_property
    def joined(self) -> str:
        return self.blob.decode("utf-8")

    @functools.cached_property
    def chars(self) -> tuple[np.ndarray, np.ndarray]:
        """(code points of every piece, flattened; each piece's character offsets)."""
        cps = code_points(self.joined)
        if len(cps) == len(self.blob):
            return cps, self.offsets
        b = np.frombuffer(self.blob, np.uint8)
        starts = np.zeros(len(b) + 1, np.int64)  # characters that start before each byte
        np.cumsum(((b & 0xC0) != 0x80).view(np.uint8), out=starts[1:])
        return cps, starts[self.offsets]

    @functools.cached_property
    def spaced(self) -> tuple[bytes, np.ndarray]:
        """``spaced_pieces`` of this table (kept)."""
        return spaced_pieces(self)

    @functools.cached_property
    def char_lengths(self) -> np.ndarray:
        return np.diff(self.chars[1])

    def single_chars(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, code points) of the pieces that are one character, read from their bytes (no
        decoding of the whole table)."""
        off, blen = self.offsets[:-1], np.diff(self.offsets)
        b = np.frombuffer(self.blob + bytes(4), np.uint8)
        lead = b[off].astype(np.uint32)
        width = 1 + (lead >= 0xC0) + (lead >= 0xE0) + (lead >= 0xF0)
        ids = np.flatnonzero((blen == width) & (blen > 0))
        at, w, cp = off[ids], width[ids], lead[ids]
        cp = np.where(w == 1, cp, np.where(w == 2, cp & 0x1F, np.where(w == 3, cp & 0x0F,
                                                                      cp & 0x07)))
        for k in (1, 2, 3):
            more = w > k
            cp[more] = (cp[more] << 6) | (b[at[more] + k].astype(np.uint32) & 0x3F)
        return ids, cp

    def starts_with(self, prefix: bytes) -> np.ndarray:
        """Per piece: does its UTF-8 start with ``prefix``."""
        b = np.frombuffer(self.blob + b"\0" * len(prefix), np.uint8)
        off = self.offsets[:-1]
        ok = (self.offsets[1:] - off) >= len(prefix)
        for k, c in enumerate(prefix):
            ok &= b[off + k] == c
        return ok

    def byte_hashes(self) -> np.ndarray:
        """A 64-bit hash of each piece's bytes, read 8 bytes at a time (unaligned words of the
        blob: no decoding, no index per byte)."""
        off = self.offsets[:-1]
        lens = np.diff(self.offsets)
        buf = self.blob + bytes(8)
        words = np.ndarray((len(self.blob) + 1,), "<u8", buf, strides=(1,))
        one = np.uint64(1)
        # the first word of every piece (all at once), then the longer pieces' next words
        w = words[off]
        short = lens < 8
        w[short] &= (one << (lens[short] * 8).astype(np.uint64)) - one
        h = (lens.astype(np.uint64) * _MUL ^ w) * _MUL
        h ^= h >> np.uint64(29)
        top = int(lens.max()) if len(lens) else 0
        for j in range(8, top, 8):
            act = np.flatnonzero(lens > j)
            w = words[off[act] + j]
            rem = lens[act] - j
            short = rem < 8
            w[short] &= (one << (rem[short] * 8).astype(np.uint64)) - one
            x = (h[act] ^ w) * _MUL
            h[act] = x ^ (x >> np.uint64(29))
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        return h ^ (h >> np.uint64(33))

    def hasher(self, seed: int = 0) -> "RunHasher":
        got = self._hashers
        if seed not in got:
            got[seed] = RunHasher(self.chars[0],
                                  _BASES[seed % len(_BASES)] + 2 * (seed // len(_BASES)))
        return got[seed]

    @functools.cached_property
    def _hashers(self) -> dict:  # (a cached property: never pickled)
        return {}

    def digest(self, types: "np.ndarray | None" = None) -> bytes:
        """sha256 of the pieces, scores and types (``types``: in place of the table's), what
        every table built from them depends on."""
        import hashlib

        h = hashlib.sha256(b"gputok pieces 1\0")
        for part in (self.offsets, self.scores, self.types if types is None else types):
            h.update(np.ascontiguousarray(part).tobytes())
        h.update(self.blob)
        return h.digest()


def _encodes(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class RunHasher:
    """Hashes of runs ``cps[a:b]`` of one flat code-point array (module docstring)."""

    def __init__(self, cps: np.ndarray, base: int):
        n = len(cps)
        self.base = base
        b = np.uint64(base)
        pw = np.empty(n + 1, np.uint64)
        pw[0] = 1
        if n:
            pw[1:] = np.cumprod(np.full(n, b, np.uint64))
        ipw = np.empty(n + 1, np.uint64)
        ipw[0] = 1
        if n:
            ipw[1:] = np.cumprod(np.full(n, np.uint64(pow(base, -1, 1 << 64)), np.uint64))
        self.ipw = ipw
        self.prefix = np.zeros(n + 1, np.uint64)
        if n:
            np.cumsum((cps.astype(np.uint64) + np.uint64(1)) * pw[:n], out=self.prefix[1:])

    def runs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Hash of each run ``[a[k], b[k])``."""
        return (self.prefix[b] - self.prefix[a]) * self.ipw[a]


class PieceIndex:
    """Pieces ``ids`` of ``table`` (of distinct texts) found by their text (module docstring);
    ``HashClash`` where two of them have one hash under ``seed``."""

    def __init__(self, table: PieceTable, ids: np.ndarray, seed: int = 0):
        self.table = table
        self.hasher = table.hasher(seed)
        cps, coff = table.chars
        ids = np.asarray(ids, np.int64)
        keys = self.hasher.runs(coff[ids], coff[ids + 1])
        if _any_equal(keys):
            raise HashClash(f"seed {seed}")
        bits = max(4, int(len(ids) * 4 - 1).bit_length())
        self.bits = bits
        owner = place(self._home(keys), 1 << bits)
        used = owner >= 0
        self.keys = np.zeros(len(owner), np.uint64)
        self.keys[used] = keys[owner[used]]
        self.ids = np.full(len(owner), -1, np.int32)
        self.ids[used] = ids[owner[used]]

    def _home(self, q: np.ndarray) -> np.ndarray:
        return ((q * _MUL) >> np.uint64(64 - self.bits)).astype(np.intp)

    def probe(self, q: np.ndarray) -> np.ndarray:
        """The piece whose hash is ``q`` (each), -1 where none (not yet checked by text)."""
        slot = self._home(q)
        k = self.ids[slot]
        hit = self.keys[slot] == q
        hit &= k >= 0
        out = np.where(hit, k, -1).astype(np.int64)
        todo = np.flatnonzero(~hit & (k >= 0))  # (the first probe of all at once; the rest)
        slot = slot[todo]
        mask = len(self.ids) - 1
        while len(todo):
            slot = (slot + 1) & mask
            k = self.ids[slot]
            hit = (k >= 0) & (self.keys[slot] == q[todo])
            out[todo[hit]] = k[hit]
            go = ~hit & (k >= 0)  # an empty slot ends a probe: absent
            todo, slot = todo[go], slot[go]
        return out

    def find_runs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The indexed piece spelled by each run ``cps[a:b]`` of the table's own code points,
        -1 where none."""
        return self.find(self.hasher.runs(a, b), a, b - a)

    def find(self, q: np.ndarray, a: np.ndarray, n) -> np.ndarray:
        """``find_runs`` of the runs ``cps[a:a + n]`` (``n``: an array or one length) whose
        hashes ``q`` the caller has."""
        got = self.probe(q)
        cps, coff = self.table.chars
        hit = np.flatnonzero(got >= 0)
        n = np.broadcast_to(np.asarray(n, np.int64), a.shape)[hit]
        start = coff[got[hit]]
        bad = (coff[got[hit] + 1] - start) != n  # exact: the same length, the same characters
        live = np.flatnonzero(~bad)
        at = a[hit]
        j = 0
        while len(live):
            diff = cps[at[live] + j] != cps[start[live] + j]
            bad[live[diff]] = True
            j += 1
            live = live[~diff & (n[live] > j)]
        got[hit[bad]] = -1
        return got


def duplicates(table: PieceTable, ids: np.ndarray) -> np.ndarray:
    """Per piece, the first of ``ids`` (ascending) with the same text when that is an earlier
    piece, else -1: pieces are compared by hash (one sort), the few equal hashes by text."""
    out = np.full(len(table), -1, np.int64)
    ids = np.asarray(ids, np.int64)
    keys = table.byte_hashes()[ids]
    if not _any_equal(keys):
        return out  # (a file's usual case: no sort at all)
    order = np.argsort(keys, kind="stable")  # (ids ascending within one hash)
    ks, io = keys[order], ids[order]
    same = np.flatnonzero(ks[1:] == ks[:-1])
    first: dict = {}
    for k in sorted(set(same.tolist()) | set((same + 1).tolist())):
        i = int(io[k])
        f = first.setdefault((int(ks[k]), table.text(i)), i)
        if f != i:
            out[i] = f
    return out


def _any_equal(keys: np.ndarray) -> bool:
    """Whether two of ``keys`` are equal, by scatter rounds instead of a sort (~4x less time
    for 262K keys): each round writes every pending key's index into its slot (load 1/2), one
    per slot wins; a loser equal to its slot's winner answers yes, the others (a different key
    in their slot) go on to the next round, hashed anew. Equal keys always meet in one slot."""
    pending = np.asarray(keys, np.uint64)
    for r in range(6):
        if len(pending) < 2:
            return False
        bits = max(4, int(2 * len(pending) - 1).bit_length())
        mixed = (pending ^ np.uint64(_BASES[r % len(_BASES)])) * _MUL
        slot = (mixed >> np.uint64(64 - bits)).astype(np.intp)
        owner = np.empty(1 << bits, np.int32)  # (only the slots written are read)
        idx = np.arange(len(pending), dtype=np.int32)
        owner[slot] = idx
        win = owner[slot]
        lost = np.flatnonzero(win != idx)
        if (pending[win[lost]] == pending[lost]).any():
            return True
        pending = pending[lost]
    return bool((np.diff(np.sort(pending)) == 0).any())


def spaced_pieces(table: PieceTable) -> tuple[bytes, np.ndarray]:
    """(blob, offsets) of every piece with "▁" written as a space (decoders' text), made with
    one ``bytes.replace`` and the offsets moved by the replaced runs."""
    blob, off = table.blob, table.offsets
    if SPACE_UTF8 in blob:
        b = np.frombuffer(blob, np.uint8)
        at = np.flatnonzero((b[:-2] == 0xE2) & (b[1:-1] == 0x96) & (b[2:] == 0x81))
        off = off - 2 * np.searchsorted(at, off)  # (a "▁" never straddles two pieces)
        blob = blob.replace(SPACE_UTF8, b" ")
    return blob, off


def distinct(keys: np.ndarray) -> np.ndarray:
    """Some of each distinct value of ``keys`` (uint64): one of them, in no order; scatter
    rounds as ``_any_equal``'s, so that a sort after sees the distinct values only (a million
    character pairs, 30K distinct: 70 -> 15 ms)."""
    pending = np.asarray(keys, np.uint64)
    kept = []
    for r in range(6):
        if len(pending) < 2:
            break
        bits = max(4, int(2 * len(pending) - 1).bit_length())
        mixed = (pending ^ np.uint64(_BASES[r % len(_BASES)])) * _MUL
        slot = (mixed >> np.uint64(64 - bits)).astype(np.intp)
        owner = np.empty(1 << bits, np.int32)
        idx = np.arange(len(pending), dtype=np.int32)
        owner[slot] = idx
        win = owner[slot]
        won = win == idx
        kept.append(pending[won])
        lost = np.flatnonzero(~won)
        pending = pending[lost[pending[win[lost]] != pending[lost]]]  # (equal ones: dropped)
    kept.append(pending)
    return np.concatenate(kept)
