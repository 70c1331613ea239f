"""SentencePiece's precompiled character map: the ``nmt_nfkc`` family of normalisers.

A SentencePiece model does not carry "NFKC" as an algorithm: the trainer compiles the rule set
(``nmt_nfkc``, ``nfkc``, ``nmt_nfkc_cf``, ``nfkc_cf`` or a user TSV) into a table of string
rewrites, ``NormalizerSpec.precompiled_charsmap``, and the normaliser applies that table
*longest prefix first*. So the table is the spec, and a model's behaviour never depends on the
Unicode version of the machine that runs it. (This is why gputok never calls ``unicodedata`` for
SentencePiece models.)

What gputok's fast path must compute
------------------------------------
``normalize_prefix`` at every position of the UTF-8 input: the longest key of the table that is a
prefix of the remaining bytes, replaced by its value; where no key matches, one UTF-8 character
unchanged (or U+FFFD for one byte of malformed UTF-8). Almost every character of real text matches
no key (ASCII letters, most CJK), so a device can mark "positions where some key starts" with a
first-byte/first-character bitmap and rewrite only those spans on the host.

Blob layout (``normalizer.cc``, ``DecodePrecompiledCharsMap``)::

    uint32 little-endian  trie_size (bytes; a multiple of 1024)
    trie_size bytes       a darts-clone double-array trie: uint32 "units", little-endian
    the rest              the replacement strings, each NUL-terminated; a trie value is the byte
                          offset of its replacement in this block

A unit packs (darts-clone ``DoubleArrayUnit``): bit 8 ``has_leaf``; bits 0-7 and 31 the ``label``
(a leaf unit has bit 31 set, so its label never equals a key byte); ``offset`` =
``(unit >> 10) << ((unit & (1 << 9)) >> 6)`` (bit 9 scales the offset by 256); for a leaf unit,
bits 0-30 are the value. A search walks ``node ^= offset(unit)`` then ``node ^= byte`` and checks
that the unit found there carries that byte as its label.

Edge cases, from the C++ source and checked against sentencepiece:

* the normaliser keeps at most 32 prefix matches per position (``kMaxTrieResultsSize``) and takes
  the longest among them; real tables never have more than a handful of nested keys;
* a replacement is read up to its NUL, so a rule cannot produce U+0000;
* user-defined pieces are matched *before* the table (longest first) and pass through unchanged
  (``Normalizer::NormalizePrefix``): ``spm.SpmNormalizer`` does that part.
"""

from __future__ import annotations

import struct

MAX_TRIE_RESULTS = 32  # Normalizer::kMaxTrieResultsSize


class CharsMapError(ValueError):
    """A precompiled_charsmap blob is malformed."""


class CharsMap:
    """A decoded ``precompiled_charsmap``: ``lookup(data, pos)`` finds the longest rule."""

    def __init__(self, blob: bytes):
        if len(blob) <= 4:
            raise CharsMapError("precompiled_charsmap: blob shorter than its 4-byte header")
        (trie_size,) = struct.unpack_from("<I", blob, 0)
        # the same checks sentencepiece makes before trusting the blob
        if trie_size >= len(blob) - 4:
            raise CharsMapError(f"precompiled_charsmap: trie size {trie_size} exceeds the blob "
                                f"({len(blob)} bytes)")
        if trie_size < 1024 or trie_size % 1024:
            raise CharsMapError(f"precompiled_charsmap: trie size {trie_size} is not a multiple "
                                f"of 1024")
        self.units = struct.unpack_from(f"<{trie_size // 4}I", blob, 4)
        self.strings = blob[4 + trie_size:]
        if not self.strings.endswith(b"\0"):
            raise CharsMapError("precompiled_charsmap: replacement block is not NUL-terminated")

    def prefixes(self, data: bytes, pos: int) -> list[tuple[int, int]]:
        """``commonPrefixSearch``: every key that is a prefix of ``data[pos:]``, shortest first,
        as ``(length, value)``; at most MAX_TRIE_RESULTS of them."""
        units = self.units
        out: list[tuple[int, int]] = []
        unit = units[0]
        node = _offset(unit)
        for i in range(pos, len(data)):
            node ^= data[i]
            if node >= len(units):
                break  # outside the array: no key continues this way
            unit = units[node]
            if (unit & 0x800000FF) != data[i]:  # label() != byte
                break
            node ^= _offset(unit)
            if (unit >> 8) & 1:  # has_leaf: the leaf sits at node ^ 0
                if len(out) < MAX_TRIE_RESULTS:
                    out.append((i + 1 - pos, units[node] & 0x7FFFFFFF))
        return out

    def lookup(self, data: bytes, pos: int) -> tuple[int, bytes] | None:
        """The longest rule at ``data[pos:]``: ``(bytes consumed, replacement)``, or None."""
        best = None
        for length, value in self.prefixes(data, pos):
            if best is None or length > best[0]:
                best = (length, value)
        if best is None or best[1] >= len(self.strings):
            return None  # (sentencepiece also ignores a value outside the string block)
        end = self.strings.index(b"\0", best[1])
        return best[0], self.strings[best[1]:end]

    def rules(self) -> dict[bytes, bytes]:
        """Every (key, replacement) of the table, found by walking the trie. For tests and for
        building the fast path's tables; not used when normalising."""
        found: dict[bytes, bytes] = {}

        def walk(node: int, key: bytes) -> None:
            base = node ^ _offset(self.units[node])
            for b in range(1, 256):
                child = base ^ b
                if child < len(self.units) and (self.units[child] & 0x800000FF) == b:
                    k = key + bytes([b])
                    unit = self.units[child]
                    if (unit >> 8) & 1:
                        value = self.units[child ^ _offset(unit)] & 0x7FFFFFFF
                        found[k] = self.strings[value:self.strings.index(b"\0", value)]
                    walk(child, k)

        walk(0, b"")
        return found


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def valid_utf8_len(data: bytes, pos: int) -> int:
    """Length of the valid UTF-8 character at ``data[pos]``, or 0 when it is malformed.

    sentencepiece's ``IsValidDecodeUTF8``: shortest form only, no surrogates, at most U+10FFFF.
    (Python's codec agrees on which sequences are valid, so we let it decide.)

    >>> [valid_utf8_len(b, 0) for b in ("é".encode(), b"\\xc3", b"\\xed\\xa0\\x80")]
    [2, 0, 0]
    """
    b = data[pos]
    n = 1 if b < 0x80 else 2 if b >> 5 == 6 else 3 if b >> 4 == 14 else 4 if b >> 3 == 30 else 0
    if n == 0 or pos + n > len(data):
        return 0
    try:
        data[pos:pos + n].decode("utf-8")
    except UnicodeDecodeError:
        return 0
    return n
