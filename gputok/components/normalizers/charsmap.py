"""SentencePiece's precompiled character map (``nmt_nfkc``, ``nfkc_cf``, ...): gputok's reader.

A SentencePiece model carries its normaliser as a table of string rewrites compiled into a
darts-clone double-array trie (``NormalizerSpec.precompiled_charsmap``); the normaliser replaces
the *longest* key that is a prefix of the remaining text by its value, and copies one character
where no key matches. The table is the whole spec: no Unicode database is consulted, so ids never
depend on the Python that runs them. (``cpu_ref/charsmap.py`` states the format; this is the
product's own reader, checked against it and against sentencepiece in the tests.)

Blob layout: ``uint32 trie_size`` (little-endian), ``trie_size`` bytes of uint32 units, then the
NUL-terminated replacement strings (a trie value is a byte offset into them). A unit packs
``has_leaf`` (bit 8), the ``label`` (bits 0-7 and 31) and the ``offset``
(``(unit >> 10) << ((unit & 512) >> 6)``); a leaf unit's bits 0-30 are the value.

What the fast path computes: real tables have ~225K keys, 220K of them two characters or longer
(a base letter + combining marks, Hangul jamo sequences), so "the first character starts a key"
is true of almost every Latin letter. ``candidates`` therefore walks the trie for every position
*and its next character* at once (numpy, one step per UTF-8 byte): a position is a candidate when
its character is a key, or when the two characters there are a path of the trie. Only
candidates get the exact longest-prefix search (``lookup``, a Python walk); in English text they
are the control characters (tab, newline), so normalising costs a few vectorised passes.

Performance notes: decoding the whole table into a dict (walking 256 labels per node) takes
~7 s for nmt_nfkc: dropped. The per-code-point table (node after each character, and its value
when the character alone is a key) is one vectorised walk over the 1.1M code points (~0.1 s),
built on first use.
"""

from __future__ import annotations

import functools
import struct

import numpy as np

MAX_TRIE_RESULTS = 32  # sentencepiece keeps at most 32 prefix matches per position


class CharsMapError(ValueError):
    """A precompiled_charsmap blob is malformed."""


def utf8_bytes(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of code points, vectorised: ``(bytes uint8[n, 4], lengths int64[n])``.

    >>> b, n = utf8_bytes(np.array([0x41, 0xE9, 0x20AC], np.uint32))
    >>> [bytes(row[:k]) for row, k in zip(b, n)]
    [b'A', b'\\xc3\\xa9', b'\\xe2\\x82\\xac']
    """
    cps = np.asarray(cps, np.uint32)
    n = 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)
    out = np.zeros((len(cps), 4), np.uint8)
    one, two, three, four = n == 1, n == 2, n == 3, n == 4
    out[one, 0] = cps[one]
    c = cps[two]
    out[two, 0], out[two, 1] = 0xC0 | (c >> 6), 0x80 | (c & 0x3F)
    c = cps[three]
    out[three, 0], out[three, 1], out[three, 2] = (0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F),
                                                  0x80 | (c & 0x3F))
    c = cps[four]
    out[four, 0], out[four, 1] = 0xF0 | (c >> 18), 0x80 | ((c >> 12) & 0x3F)
    out[four, 2], out[four, 3] = 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
    return out, n.astype(np.int64)


class CharsMap:
    """A decoded ``precompiled_charsmap``.

    >>> cm = CharsMap.from_rules({"\\t": " ", "A\\u0300": "\\u00c0"})
    >>> cm.lookup("xA\\u0300y", 1), cm.lookup("xy", 0)
    ((2, 'À'), None)
    """

    def __init__(self, blob: bytes, *, where: str = "precompiled_charsmap"):
        if len(blob) <= 4:
            raise CharsMapError(f"{where}: blob shorter than its 4-byte header")
        (size,) = struct.unpack_from("<I", blob, 0)
        if size >= len(blob) - 4 or size < 1024 or size % 1024:
            raise CharsMapError(f"{where}: trie size {size} does not fit a {len(blob)}-byte blob "
                                "(expected a multiple of 1024 below the blob size)")
        self.units = np.frombuffer(blob, "<u4", size // 4, 4).astype(np.uint32)
        self._units = self.units.tolist()  # Python ints for the per-position walk
        self.strings = bytes(blob[4 + size:])
        if not self.strings.endswith(b"\0"):
            raise CharsMapError(f"{where}: replacement block is not NUL-terminated")
        self.where = where

    @classmethod
    def from_rules(cls, rules: "dict[str, str]") -> "CharsMap":
        """A table built from ``{key: value}`` (for tests and docs): a plain (unpacked) trie."""
        return cls(build_blob({k.encode(): v.encode() for k, v in rules.items()}))

    # ---- the exact rule at one position --------------------------------------------------------

    def _prefixes(self, data: bytes) -> tuple[list, bool]:
        """``commonPrefixSearch`` from the start of ``data``: every key that is a prefix, as
        (bytes, value), shortest first (at most MAX_TRIE_RESULTS); and whether the walk was
        still inside the trie when ``data`` ran out."""
        units = self._units
        n_units = len(units)
        node = _off(units[0])
        out = []
        for i, b in enumerate(data):
            node ^= b
            if node >= n_units:
                return out, False
            unit = units[node]
            if unit & 0x800000FF != b:
                return out, False
            node ^= _off(unit)
            if unit & 0x100 and len(out) < MAX_TRIE_RESULTS:
                out.append((i + 1, units[node] & 0x7FFFFFFF))
        return out, True

    def lookup(self, text: str, pos: int) -> "tuple[int, str] | None":
        """The longest rule at ``text[pos:]``: (characters consumed, replacement), or None."""
        width = 16
        while True:
            head = text[pos:pos + width].encode("utf-8")
            found, alive = self._prefixes(head)
            if not alive or pos + width >= len(text):
                break
            width *= 4  # a key longer than the window: look further
        if not found:
            return None
        length, value = max(found)  # the longest (each length occurs once)
        if value >= len(self.strings):
            return None  # (sentencepiece ignores a value outside the string block too)
        if length < len(head) and 0x80 <= head[length] < 0xC0:
            raise CharsMapError(f"{self.where}: a key ends inside a UTF-8 character; such "
                                "tables are not supported")
        end = self.strings.index(b"\0", value)
        return len(head[:length].decode("utf-8")), self.strings[value:end].decode("utf-8")

    # ---- vectorised candidate positions --------------------------------------------------------

    def walk(self, nodes: np.ndarray, cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The trie node after walking each code point's UTF-8 bytes from ``nodes`` (-1: no
        path; a -1 node stays -1), and whether a key ends there (``has_leaf`` of the last unit
        walked)."""
        units = self.units
        n_units = len(units)
        node = np.asarray(nodes, np.int64).copy()
        leaf = np.zeros(len(node), bool)
        b, n = utf8_bytes(cps)
        for k in range(4):
            live = (node >= 0) & (n > k)
            if not live.any():
                break
            idx = np.flatnonzero(live)
            byte = b[idx, k].astype(np.int64)
            nxt = node[idx] ^ byte
            ok = nxt < n_units
            unit = np.zeros(len(idx), np.int64)
            unit[ok] = units[nxt[ok]]
            ok &= (unit & 0x800000FF) == byte
            node[idx[~ok]] = -1
            good = idx[ok]
            u = unit[ok]
            node[good] = nxt[ok] ^ _off_np(u)
            leaf[good] = (u & 0x100) != 0
        leaf &= node >= 0
        return node, leaf

    @functools.cached_property
    def _per_cp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node after each code point from the root, -1 if none; True where the code point
        alone is a key; that key's value, -1 elsewhere)."""
        cps = np.arange(0x110000, dtype=np.uint32)
        root = np.full(len(cps), _off(self._units[0]), np.int64)
        node, leaf = self.walk(root, cps)
        value = np.full(len(cps), -1, np.int64)
        value[leaf] = self.units[node[leaf]] & 0x7FFFFFFF  # the leaf unit sits at node ^ 0
        return node.astype(np.int32), leaf, value

    def candidates(self, cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``cps`` where some key may start (the character is a key, or the
        character and the next one are a path of the trie), and for each the value of the
        one-character key when no longer key can start there (-1: search with ``lookup``)."""
        node1, leaf1, value1 = self._per_cp
        n1 = node1[cps]
        cand = leaf1[cps]
        longer = np.zeros(len(cps), bool)
        if len(cps) > 1:
            pair = np.flatnonzero(n1[:-1] >= 0)
            if len(pair):
                longer[pair] = self.walk(n1[pair], cps[pair + 1])[0] >= 0
        pos = np.flatnonzero(cand | longer)
        value = np.where(longer[pos], -1, value1[cps[pos]])
        return pos, value

    def value_text(self, value: int) -> "str | None":
        """The replacement string at a value offset (None outside the block)."""
        got = self._values.get(value)
        if got is None and value not in self._values:
            if 0 <= value < len(self.strings):
                end = self.strings.index(b"\0", value)
                got = self.strings[value:end].decode("utf-8")
            self._values[value] = got
        return got

    @functools.cached_property
    def _values(self) -> dict:
        return {}

    def check_utf8(self) -> None:
        """Refuse a table whose replacements are not UTF-8 (sentencepiece would produce invalid
        text from them); keys are checked where they match."""
        try:
            self.strings.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CharsMapError(f"{self.where}: a replacement string is not UTF-8 ({e})") from None


def _off(unit: int) -> int:
    return (unit >> 10) << ((unit & 512) >> 6)


def _off_np(unit: np.ndarray) -> np.ndarray:
    return (unit >> 10) << ((unit & 512) >> 6)


def build_blob(rules: "dict[bytes, bytes]") -> bytes:
    """A ``precompiled_charsmap`` for ``rules`` (a simple, unpacked double array: every node's
    children sit at ``base ^ byte`` for a base found by linear search). For tests: the real
    tables come from sentencepiece's trainer."""
    strings = bytearray()
    value_of = {}
    for k, v in sorted(rules.items()):
        value_of[k] = len(strings)
        strings += v + b"\0"
    trie: dict = {}
    for k in rules:
        t = trie
        for b in k:
            t = t.setdefault(b, {})
        t[None] = value_of[k]
    units: dict[int, int] = {}
    used = {0}
    bases: set = set()  # a base belongs to one node: a label check then identifies the parent

    def unit_of(label: int, offset: int, has_leaf: bool) -> int:
        if offset >= 1 << 21:
            raise ValueError("charsmap too large for this simple builder")
        return label | (int(has_leaf) << 8) | (offset << 10)

    def place(node_index: int, t: dict) -> None:
        labels = [b for b in t if b is not None]
        need = labels + ([0] if None in t else [])
        base = 1
        while (base in bases or any((base ^ b) in used for b in need)
               or base ^ node_index >= 1 << 21):
            base += 1
        bases.add(base)
        offset = base ^ node_index
        label = units.get(node_index, 0) & 0x800000FF if node_index else 0
        units[node_index] = unit_of(label, offset, None in t)
        for b in need:
            used.add(base ^ b)
        if None in t:
            units[base] = 0x80000000 | t[None]  # the leaf: bit 31 set, the value
        for b in labels:
            units[base ^ b] = b
        for b in labels:
            place(base ^ b, t[b])

    place(0, trie)
    size = max(units) + 1
    size = -(-size * 4 // 1024) * 1024
    arr = np.zeros(size // 4, np.uint32)
    for i, u in units.items():
        arr[i] = u
    return struct.pack("<I", size) + arr.astype("<u4").tobytes() + bytes(strings)
