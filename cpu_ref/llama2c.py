"""llama2.c ``tokenizer.bin``: the file format, and the encode rule of llama2.c's ``run.c``.

The file (little-endian): ``uint32 max_token_length``, then one record per token until the end
of the file, ``float32 score, uint32 length, length bytes`` (UTF-8); the id is the record's
index. llama2.c's exporter writes a SentencePiece model's pieces with "▁" replaced by " ", the
BOS piece as "\\n<s>\\n" and the EOS piece as "\\n</s>\\n"; byte pieces stay "<0xXX>" and sit at
ids 3-258 (after <unk>, <s>, </s>), which ``run.c`` relies on.

``encode(text)`` (without the optional BOS = 1 / EOS = 2 that ``run.c`` can add):

1. a non-empty text starts with the token whose string is " " (the dummy prefix);
2. every UTF-8 character of the text becomes the token whose string it is, or, when none is,
   one token per UTF-8 byte, id = byte + 3 (byte fallback);
3. while some adjacent pair's concatenated strings are a token's string, merge the pair whose
   token has the highest score; on equal scores the leftmost pair (``run.c`` keeps the first
   strictly better score it sees, scanning left to right). Any token can be the result,
   including the special and byte tokens.

A C string ends at its first NUL, so ``run.c`` never sees past a "\\0"; here "\\0" is a character
like any other (its byte token). Lookups of a string that several tokens spell are ambiguous in
``run.c`` (a binary search); here the lowest id wins.

What gputok's fast path must compute
------------------------------------
SentencePiece BPE (``cpu_ref.spm``): the pieces with " " -> "▁", <0xXX> pieces typed BYTE,
identity normaliser with the dummy prefix. That equals the rule above whenever no merge can
produce or consume a special or byte token, which the loader checks.
"""

from __future__ import annotations

import struct
from pathlib import Path

from . import specials


def read(data: bytes, where: str = "tokenizer.bin") -> tuple[int, list[bytes], list[float]]:
    """(max_token_length, token bytes by id, scores) of a ``tokenizer.bin``.

    >>> read(struct.pack("<IfI1sfI2s", 2, 0.0, 1, b"a", -1.5, 2, b"ab"))
    (2, [b'a', b'ab'], [0.0, -1.5])
    """
    if len(data) < 4:
        raise ValueError(f"{where}: {len(data)} bytes: too short for a tokenizer.bin header")
    (max_len,) = struct.unpack_from("<I", data, 0)
    pos, tokens, scores = 4, [], []
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError(f"{where}: truncated record header at byte {pos} (token "
                             f"{len(tokens)})")
        score, n = struct.unpack_from("<fI", data, pos)
        pos += 8
        if pos + n > len(data):
            raise ValueError(f"{where}: token {len(tokens)} claims {n} bytes, "
                             f"{len(data) - pos} left")
        tokens.append(bytes(data[pos:pos + n]))
        scores.append(score)
        pos += n
    return max_len, tokens, scores


class RefLlama2c:
    """``run.c``'s ``encode``, literally (module docstring).

    >>> tok = RefLlama2c([b"<unk>", b"\\n<s>\\n", b"\\n</s>\\n"] + [b"<0x%02X>" % b for b in
    ...                  range(256)] + [b" ", b"a", b"b", b" a", b"ab"], [0.0] * 259 +
    ...                  [-1.0, -2.0, -3.0, -4.0, -5.0])
    >>> tok.encode("ab")  # " " "a" "b": " a" (-4) beats "ab" (-5)
    [262, 261]
    >>> tok.encode("é")  # no token: bytes C3 A9 -> ids 0xC3 + 3, 0xA9 + 3
    [259, 198, 172]
    """

    def __init__(self, tokens: list, scores: list):
        self.tokens = [t if isinstance(t, bytes) else t.encode("utf-8") for t in tokens]
        self.scores = [float(s) for s in scores]
        self.lookup: dict[bytes, int] = {}
        for i, t in enumerate(self.tokens):
            self.lookup.setdefault(t, i)  # (the lowest id of a duplicated string)

    @classmethod
    def load(cls, path: "str | Path") -> "RefLlama2c":
        _, tokens, scores = read(Path(path).read_bytes(), str(path))
        return cls(tokens, scores)

    def encode(self, text: str) -> list[int]:
        text = specials.fix_surrogates(text)  # (a lone surrogate has no UTF-8: U+FFFD)
        ids: list[int] = []
        if text:
            if b" " not in self.lookup:
                raise ValueError("tokenizer.bin: no token for the dummy prefix \" \"")
            ids.append(self.lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8")
            if b in self.lookup:
                ids.append(self.lookup[b])
            else:
                ids.extend(x + 3 for x in b)
        while True:
            best = None  # (score, index): THE COMPARATOR, highest score, then leftmost
            for i in range(len(ids) - 1):
                j = self.lookup.get(self.tokens[ids[i]] + self.tokens[ids[i + 1]])
                if j is not None and (best is None or self.scores[j] > best[0]):
                    best = (self.scores[j], i, j)
            if best is None:
                return ids
            _, i, j = best
            ids[i:i + 2] = [j]
