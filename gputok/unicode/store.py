"""The pinned data files: format, loading, and set algebra on sorted code point ranges.

A data file is ``MAGIC`` + a little-endian uint32 header length + a JSON header + one zlib stream
of little-endian uint32 words. The header maps each table name to ``[offset, count, coding]``
(in words): ``"ranges"`` tables hold inclusive ``(start, end)`` pairs written as the differences
of their boundaries ``start0, end0 + 1, start1, end1 + 1, ...`` (small numbers, so zlib packs them
well), ``"raw"`` tables hold plain words. Nothing else: no pickle, no numpy format, so a file
written by one numpy reads the same under any other, and the generator's output is byte-stable.

Sets of code points travel as ``int64`` arrays of shape ``(k, 2)``: sorted, disjoint, non-adjacent
inclusive ranges ("normal form"). Surrogates (U+D800..U+DFFF) never reach the oracle engines (a
Python str holding one cannot be encoded to UTF-8 for them), so no probed set contains them; the
complement of a set does (a lone surrogate in a Python str matches ``\\P{L}`` here too).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import zlib
from pathlib import Path

import numpy as np

from .._arrays import unique_sorted

__all__ = ["FAMILIES", "MAX_CP", "load", "write", "normal", "union", "intersect", "difference",
           "symmetric_difference", "complement", "from_code_points", "to_code_points",
           "member_mask", "EMPTY", "FULL"]

MAGIC = b"GPUTOK-UCD 1\n"
MAX_CP = 0x10FFFF

#: the oracle families whose Unicode data ships with gputok: "tiktoken" (the Rust ``regex`` crate
#: behind fancy-regex, tiktoken 0.14) and "hf" (Oniguruma, HF ``tokenizers`` 0.23)
FAMILIES = ("tiktoken", "hf")

EMPTY = np.zeros((0, 2), np.int64)
FULL = np.array([[0, MAX_CP]], np.int64)

_DATA_DIR = Path(__file__).resolve().parent / "data"
_lock = threading.Lock()
_files: dict = {}


# ----------------------------------------------------------------------------------------------
# file format
# ----------------------------------------------------------------------------------------------

def derived_digest(family: str, head: str, sources) -> "hashlib._Hash":
    """A sha256 over ``head``, the family's data file and the named modules of this package: the
    key of a cache entry derived from them (a change to any of them writes the entry again)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(head.encode())
    h.update((_DATA_DIR / f"{family}.ucd").read_bytes())
    for name in sources:
        h.update((here / name).read_bytes())
    return h


def write(path, meta: dict, ranges: dict, raw: dict) -> int:
    """Write one data file; returns its size in bytes. Byte-identical for identical input."""
    words, index = [], {}
    offset = 0
    for name in sorted(ranges):
        r = normal(ranges[name])
        b = np.empty(2 * len(r), np.int64)
        b[0::2], b[1::2] = r[:, 0], r[:, 1] + 1
        w = np.diff(b, prepend=0).astype(np.uint32)
        index[name] = [offset, len(w), "ranges"]
        words.append(w)
        offset += len(w)
    for name in sorted(raw):
        w = np.asarray(raw[name], dtype=np.int64)
        if w.size and (w.min() < 0 or w.max() > 0xFFFFFFFF):
            raise ValueError(f"table {name!r} does not fit in uint32")
        w = w.astype(np.uint32)
        index[name] = [offset, len(w), "raw"]
        words.append(w)
        offset += len(w)
    header = json.dumps({"meta": meta, "tables": index}, sort_keys=True,
                        separators=(",", ":")).encode()
    payload = np.concatenate(words or [np.zeros(0, np.uint32)]).astype("<u4").tobytes()
    blob = MAGIC + struct.pack("<I", len(header)) + header + zlib.compress(payload, 9)
    Path(path).write_bytes(blob)
    return len(blob)


class _File:
    """One decoded data file: ``meta`` (dict) and tables by name, decoded lazily."""

    def __init__(self, path: Path):
        blob = path.read_bytes()
        if not blob.startswith(MAGIC):
            raise ValueError(f"{path}: not a gputok Unicode data file (bad magic); "
                             "regenerate it with `python -m gputok.unicode.generate`")
        (n,) = struct.unpack_from("<I", blob, len(MAGIC))
        start = len(MAGIC) + 4
        head = json.loads(blob[start:start + n])
        self.path = path
        self.meta = head["meta"]
        self.index = head["tables"]
        self.words = np.frombuffer(zlib.decompress(blob[start + n:]), "<u4")
        self._cache: dict = {}

    def __contains__(self, name: str) -> bool:
        return name in self.index

    def get(self, name: str) -> np.ndarray:
        out = self._cache.get(name)
        if out is None:
            offset, count, coding = self.index[name]
            w = self.words[offset:offset + count].astype(np.int64)
            if coding == "ranges":
                b = np.cumsum(w)
                out = np.stack([b[0::2], b[1::2] - 1], axis=1)
            else:
                out = w
            out.setflags(write=False)
            self._cache[name] = out
        return out


def load(name: str) -> _File:
    """The data file ``data/<name>.ucd``, read once per process."""
    f = _files.get(name)
    if f is None:
        with _lock:
            f = _files.get(name)
            if f is None:
                path = _DATA_DIR / f"{name}.ucd"
                if not path.is_file():
                    raise FileNotFoundError(
                        f"{path} is missing (broken install?); regenerate it with "
                        "`python -m gputok.unicode.generate` (needs tiktoken and tokenizers)")
                f = _files[name] = _File(path)
    return f


# ----------------------------------------------------------------------------------------------
# range-set algebra (all inputs and outputs in normal form unless stated)
# ----------------------------------------------------------------------------------------------

def normal(r) -> np.ndarray:
    """Sort, merge overlapping and adjacent ranges: any (k, 2) inclusive ranges -> normal form."""
    r = np.asarray(r, dtype=np.int64).reshape(-1, 2)
    if len(r) == 0:
        return EMPTY.copy()
    if (r[:, 0] > r[:, 1]).any():
        raise ValueError("a range ends before it starts")
    r = r[np.argsort(r[:, 0], kind="stable")]
    # running maximum of ends: a new range starts where start > every end before it + 1
    ends = np.maximum.accumulate(r[:, 1])
    new = np.ones(len(r), bool)
    new[1:] = r[1:, 0] > ends[:-1] + 1
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(r) - 1)
    return np.stack([r[first, 0], ends[last]], axis=1)


def union(a, b) -> np.ndarray:
    return normal(np.concatenate([np.reshape(a, (-1, 2)), np.reshape(b, (-1, 2))]))


def complement(a) -> np.ndarray:
    """Everything in U+0000..U+10FFFF outside ``a`` (normal form in, normal form out)."""
    a = np.asarray(a, dtype=np.int64).reshape(-1, 2)
    starts = np.concatenate([[0], a[:, 1] + 1])
    ends = np.concatenate([a[:, 0] - 1, [MAX_CP]])
    keep = starts <= ends
    return np.stack([starts[keep], ends[keep]], axis=1)


def intersect(a, b) -> np.ndarray:
    return complement(union(complement(a), complement(b)))


def difference(a, b) -> np.ndarray:
    return intersect(a, complement(b))


def symmetric_difference(a, b) -> np.ndarray:
    return union(difference(a, b), difference(b, a))


def from_code_points(cps) -> np.ndarray:
    """Normal-form ranges of a collection of code points (duplicates allowed)."""
    cps = unique_sorted(np.asarray(cps, dtype=np.int64))
    if len(cps) == 0:
        return EMPTY.copy()
    brk = np.flatnonzero(np.diff(cps) != 1)
    starts = np.append(cps[0], cps[brk + 1])
    ends = np.append(cps[brk], cps[-1])
    return np.stack([starts, ends], axis=1)


def to_code_points(r) -> np.ndarray:
    """uint32 code points of normal-form ranges, ascending."""
    r = np.asarray(r, dtype=np.int64).reshape(-1, 2)
    if len(r) == 0:
        return np.zeros(0, np.uint32)
    lens = r[:, 1] - r[:, 0] + 1
    base = np.repeat(r[:, 0] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return (base + np.arange(lens.sum())).astype(np.uint32)


def member_mask(r) -> np.ndarray:
    """bool[0x110000]: True on the members of normal-form ranges ``r``.

    Built with one ``np.repeat`` over the alternating outside/inside segment lengths (~1 ms),
    not with per-range slice assignment (a Python loop over hundreds of ranges).
    """
    r = np.asarray(r, dtype=np.int64).reshape(-1, 2)
    b = np.empty(2 * len(r) + 2, np.int64)
    b[0], b[-1] = 0, MAX_CP + 1
    b[1:-1:2], b[2:-1:2] = r[:, 0], r[:, 1] + 1
    lens = np.diff(b)
    vals = np.zeros(len(lens), bool)
    vals[1::2] = True
    return np.repeat(vals, lens)
