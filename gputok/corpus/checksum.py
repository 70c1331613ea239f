"""The shards' checksums: what ``--resume`` trusts to tell a whole shard file from a torn one.

Two algorithms, each shard in the manifest naming its own (the key of its digests):

* ``xxh64`` (the default where the native library is built): XXH64 of the file, 16 hex digits
  as xxHash prints them (``kernels/host_corpus.h``; ~10x SHA-256's rate, so checksumming is no
  longer the largest part of the job's own host work);
* ``sha256``: what every manifest held before ``xxh64``, and the choice without the native
  library (no compiler). Shards written so are verified as before.

The checksum guards against accidents (a kill mid-write, a truncated copy, a bad disk), not
against someone forging a shard: 64 bits are plenty for that, and a user who wants a
cryptographic digest of the outputs can still ask for ``sha256``.
"""

from __future__ import annotations

import hashlib

import numpy as np

ALGORITHMS = ("xxh64", "sha256")
_STATE_BYTES = 88  # host_corpus.h: struct Xxh64


def _native(build: bool = False):
    """The native library's XXH64 routines as (reset, update, digest), or None."""
    from ..backends import host_routine

    reset = host_routine("gputok_xxh64_reset", build=build)
    if reset is None:
        return None
    return reset, host_routine("gputok_xxh64_update"), host_routine("gputok_xxh64_digest")


def choose(checksum: str = "auto") -> str:
    """The algorithm a new shard gets: ``auto`` is ``xxh64`` where the native library is built,
    else ``sha256``; an algorithm by name is checked."""
    if checksum == "auto":
        return "xxh64" if _native() is not None else "sha256"
    if checksum not in ALGORITHMS:
        raise ValueError(f"checksum must be one of auto, {', '.join(ALGORITHMS)}; "
                         f"got {checksum!r}")
    return checksum


class Xxh64:
    """XXH64 with hashlib's ``update`` / ``hexdigest`` (the native routines; ``update`` runs
    without the interpreter's lock)."""

    def __init__(self, seed: int = 0):
        fns = _native()
        if fns is None:
            fns = _build_native()
        self._reset, self._update, self._digest = fns
        self._state = np.zeros(_STATE_BYTES, np.uint8)
        self._reset(self._state.ctypes.data, seed)

    def update(self, data) -> None:
        view = memoryview(data)
        if not view.nbytes:
            return
        arr = np.frombuffer(view.cast("B") if view.format != "B" or view.ndim != 1 else view,
                            np.uint8)
        self._update(self._state.ctypes.data, arr.ctypes.data, arr.nbytes)

    def intdigest(self) -> int:
        return int(self._digest(self._state.ctypes.data))

    def hexdigest(self) -> str:
        return f"{self.intdigest():016x}"


def _build_native():
    """A process that verifies ``xxh64`` shards without the library built builds it (a resume
    is a deliberate job; without a compiler it cannot verify, and says so)."""
    try:
        got = _native(build=True)
    except Exception as e:
        raise ValueError(f"the shards' xxh64 checksums need gputok's native library, which "
                         f"cannot be built here ({e}); --overwrite encodes them again") from None
    if got is None:
        raise ValueError("the shards' xxh64 checksums need gputok's native library, which "
                         "did not load; --overwrite encodes them again")
    return got


def hasher(algorithm: str):
    """A new hashlib-like object of ``algorithm``."""
    if algorithm == "xxh64":
        return Xxh64()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum {algorithm!r} (known: {', '.join(ALGORITHMS)})")


def file_digest(path, algorithm: str) -> str:
    h = hasher(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def shard_algorithm(shard: dict) -> str:
    """The algorithm of a manifest's shard entry: the key its digests are listed under."""
    for a in ALGORITHMS:
        if a in shard:
            return a
    raise ValueError(f"a shard of the manifest has no checksum (none of {', '.join(ALGORITHMS)})")


# ---- the specification's steps in Python (the native routine's reference in the tests) ----

_M = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) & _M, 31) * _P1 & _M


def xxh64_reference(data: bytes, seed: int = 0) -> int:
    """XXH64 of ``data`` by the specification's steps, one at a time (slow: tests only)."""
    n, p = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while n - p >= 32:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[p + 8 * k:p + 8 * k + 8], "little"))
            p += 32
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            acc = ((acc ^ _round(0, x)) * _P1 + _P4) & _M
    else:
        acc = (seed + _P5) & _M
    acc = (acc + n) & _M
    while n - p >= 8:
        acc = (_rotl(acc ^ _round(0, int.from_bytes(data[p:p + 8], "little")), 27) * _P1
               + _P4) & _M
        p += 8
    if n - p >= 4:
        acc = (_rotl(acc ^ (int.from_bytes(data[p:p + 4], "little") * _P1 & _M), 23) * _P2
               + _P3) & _M
        p += 4
    while p < n:
        acc = _rotl(acc ^ (data[p] * _P5 & _M), 11) * _P1 & _M
        p += 1
    acc ^= acc >> 33
    acc = acc * _P2 & _M
    acc ^= acc >> 29
    acc = acc * _P3 & _M
    return acc ^ (acc >> 32)


__all__ = ["ALGORITHMS", "Xxh64", "choose", "file_digest", "hasher", "shard_algorithm",
           "xxh64_reference"]
