"""GPT-2's byte-level alphabet: how byte-level BPE vocabularies spell bytes as text.

``tokenizer.json`` and ``vocab.bpe`` files are text, so byte-level BPE maps each of the 256 byte
values to a printable character: the printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``,
``®``..``ÿ``) stand for themselves, and the other 68 bytes, in increasing order, take U+0100,
U+0101, ... (so no byte is spelled as whitespace or a control character).
"""

from __future__ import annotations


def _alphabet() -> dict[int, str]:
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    shifted = iter(range(0x100, 0x200))
    return {b: chr(b) if b in keep else chr(next(shifted)) for b in range(256)}


#: byte value -> its character
BYTE_TO_CHAR: dict[int, str] = _alphabet()
#: character -> byte value
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in BYTE_TO_CHAR.items()}
_DECODE = {ord(c): b for c, b in CHAR_TO_BYTE.items()}


def spell(data: bytes) -> str:
    """Bytes as a byte-level token string.

    >>> spell(b" hi")
    'Ġhi'
    """
    return "".join([BYTE_TO_CHAR[b] for b in data])


def unspell(token: str) -> "bytes | None":
    """The bytes a byte-level token string stands for (``None`` if a character is not in the
    alphabet).

    >>> unspell("Ġhi")
    b' hi'
    """
    try:
        return bytes([_DECODE[ord(c)] for c in token])
    except KeyError:
        return None
