"""Pack: any supported batch of texts -> documents the pipeline can read.

Accepted inputs: ``list``/sequence of ``str``; of ``bytes`` (UTF-8); a pyarrow ``StringArray`` /
``LargeStringArray`` / ``BinaryArray`` or ``ChunkedArray`` of those; ``Packed`` (one UTF-8
buffer with offsets, already valid: what the native JSON-lines reader makes). A single ``bytes``
blob with explicit offsets is what ``Documents.packed()`` returns for GPU backends.

Arrow arrays are read through their buffers (offsets + data) with numpy: no per-item Python
objects are made to pack them. CPU pre-tokenization then decodes one document at a time.

Invalid UTF-8 in bytes input: ``errors="strict"`` (the default) raises ``ValueError`` naming the
document and byte offset; ``errors="replace"`` decodes invalid sequences to U+FFFD (as Python's
codec and HF ``tokenizers`` do); ids are then those of the replaced text. Lone surrogates in str
input are handled exactly as tiktoken does (``fix_surrogates``).
Null entries of an Arrow array are refused (they are not empty documents).
"""

from __future__ import annotations

import codecs
from typing import Iterator, Sequence

import numpy as np

# Checking a buffer of bytes input for valid UTF-8: from this size on with the checker the
# caller gives (the native backend's: ``gputok_utf8_valid``, several GB/s, on several threads
# from 8 MB), else by decoding (Python's codec: ~1 GB/s on ASCII, a few hundred MB/s on other
# text, and a str of the whole buffer made and dropped). Only a buffer found invalid is decoded
# document by document, to name the first bad one.
UTF8_NATIVE_MIN = 1 << 16


def valid_documents(buf: bytes, offsets: np.ndarray, check=None) -> bool:
    """Whether every document ``buf[offsets[i]:offsets[i + 1]]`` is strict UTF-8: the whole
    buffer is, and no document starts inside a character (a valid buffer cut at a
    continuation byte gives two invalid documents). ``check``: as ``valid_utf8``'s."""
    inner = offsets[1:-1]
    if len(inner):
        data = np.frombuffer(buf, np.uint8)
        starts = data[inner[inner < len(data)]]
        if ((starts & 0xC0) == 0x80).any():
            return False
    return valid_utf8(buf, check)


DECODE_SLICE = 1 << 20  # bytes decoded at a time by the codec's check


def valid_utf8(buf: bytes, check=None) -> bool:
    """Whether ``buf`` is strict UTF-8 (exactly what ``buf.decode("utf-8")`` accepts), by
    ``check(buf, nbytes) -> int`` (a native checker) from ``UTF8_NATIVE_MIN`` bytes on where
    one is given. Without it, Python's incremental decoder over ``DECODE_SLICE`` slices (a character
    cut by a slice's end carries over): decoding a 32 MB buffer at once made a 32 MB str in fresh
    pages, 4.8x slower than decoding its documents one by one (a CUDA batch of bytes ran at half
    the rate of the same text as str)."""
    n = len(buf)
    if check is not None and n >= UTF8_NATIVE_MIN:
        return bool(check(buf, n))
    try:
        if n <= DECODE_SLICE:
            buf.decode("utf-8")
        else:
            decode = codecs.getincrementaldecoder("utf-8")().decode
            view = memoryview(buf)
            for i in range(0, n, DECODE_SLICE):
                decode(view[i:i + DECODE_SLICE], i + DECODE_SLICE >= n)
    except UnicodeDecodeError:
        return False
    return True


class StrLayout:
    """Python str documents as UTF-8 in the native library, without the interpreter's lock
    (kernels/host_pack.h): where CPython keeps each str's characters (PEP 393: the state word's
    kind, compact and ascii bits, the length, the characters after an ASCII str's header or a
    compact str's), found from ``sys.getsizeof`` and checked on probe strings of every kind by
    reading them back (``usable``: False on any other layout, and then nothing uses it).
    ``units(strs)`` locates a batch (documents the packer does not take - a surrogate, a str
    subclass's or legacy string's characters kept elsewhere - are encoded here, ``utf8_of``);
    ``pack(units, d0, d1, dst)`` writes documents d0..d1-1 into ``dst``. Encoding each
    document with ``str.encode`` and joining them held the interpreter's lock for the whole
    batch's bytes, twice copied: chunk workers returning from a native call then waited for the
    packing thread to reach a switch point (up to 5 ms each time)."""

    STATE_OFF, LEN_OFF = 32, 16  # (CPython's PyASCIIObject on 64-bit builds; checked below)

    def __init__(self, layout_fn, pack_fn):
        import sys

        self._layout, self._pack = layout_fn, pack_fn
        self.ascii_head = sys.getsizeof("") - 1  # header, then len + 1 bytes
        probe = "\xe9" * 3  # (made here: no cached UTF-8 counted by getsizeof)
        self.compact_head = sys.getsizeof(probe) - 4
        self.bytes_head = sys.getsizeof(b"") - 1
        self.usable = sys.implementation.name == "cpython" and self._check()

    def _check(self) -> bool:
        import ctypes

        probes = ["ascii text", "caf\xe9 \xff" * 2, "\u0100\u4e2d\u6587 x", "\U0001F600 \u4e2d",
                  "", "a" * 300, "\ud83d lone"]
        try:
            b = bytes(bytearray(b"xyz"))
            if ctypes.string_at(id(b) + self.bytes_head, 3) != b"xyz":
                return False
            for p in probes[:4]:  # the characters where the offsets say
                if p.isascii():
                    want, at = p.encode("ascii"), self.ascii_head
                else:
                    top = max(map(ord, p))
                    width = 4 if top > 0xFFFF else (2 if top > 0xFF else 1)
                    want = p.encode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[width])
                    at = self.compact_head
                if ctypes.string_at(id(p) + at, len(want)) != want:
                    return False
            u = self._locate(probes)
            want_len = [len(p.encode()) if i != len(probes) - 1 else -1
                        for i, p in enumerate(probes)]
            if u[3].tolist() != want_len:
                return False
            k = len(probes) - 1  # all but the surrogate
            out = np.empty(sum(want_len[:k]) + 1, np.uint8)
            got = self.pack(u, 0, k, out)
            return out[:got].tobytes() == "".join(probes[:k]).encode()
        except Exception:  # (anything off: not this layout)
            return False

    def _locate(self, strs) -> tuple:
        n = len(strs)
        obj = np.fromiter(map(id, strs), np.int64, n)
        addr, units, nbytes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        kind = np.empty(n, np.int8)
        self._layout(obj.ctypes.data, n, self.STATE_OFF, self.LEN_OFF, self.ascii_head,
                     self.compact_head, addr.ctypes.data, kind.ctypes.data, units.ctypes.data,
                     nbytes.ctypes.data)
        return addr, kind, units, nbytes

    def units(self, strs: Sequence[str]) -> "tuple | None":
        """(addr, kind, units, UTF-8 lengths, references) of a batch of str (None: not all
        exactly str). The references (the strs, and the bytes encoded here) must outlive every
        ``pack`` of these units."""
        keep = list(strs)  # (a list the caller changes meanwhile cannot free a str we read)
        if not keep or set(map(type, keep)) != {str}:
            return None
        addr, kind, units, nbytes = self._locate(keep)
        for i in np.flatnonzero(nbytes < 0).tolist():  # surrogates, legacy strings: here
            b = utf8_of(keep[i])
            keep.append(b)
            addr[i], kind[i], units[i], nbytes[i] = id(b) + self.bytes_head, 0, len(b), len(b)
        return addr, kind, units, nbytes, keep

    def ascii_view(self, text: str) -> "np.ndarray | None":
        """An ASCII str's characters where the str keeps them, as a read-only uint8 array (its
        UTF-8, not copied; the array holds a reference to the str), or None for any other text
        (not all ASCII, a str subclass, a legacy string). ``text.encode()`` of a 10 MB run wrote
        10 MB of fresh pages, whose first touch in a fresh process cost up to a third of the
        run's merge on the 2-core box."""
        import ctypes

        if type(text) is not str or not text or not text.isascii():
            return None
        # the state word as gputok_str_layout reads it (checked on the probes): one-byte
        # kind, compact and ASCII bits set; else the characters live elsewhere (a legacy string)
        state = ctypes.c_uint32.from_address(id(text) + self.STATE_OFF).value
        if (state >> 2) & 7 != 1 or not (state >> 5) & 1 or not (state >> 6) & 1:
            return None
        return np.asarray(_StrChars(text, id(text) + self.ascii_head))

    def pack(self, units: tuple, d0: int, d1: int, dst: np.ndarray) -> int:
        """Documents d0..d1-1 of ``units`` as UTF-8 into ``dst`` (uint8, their length at
        least); returns the bytes written."""
        addr, kind, count = units[0], units[1], units[2]
        return int(self._pack(addr[d0:].ctypes.data, kind[d0:].ctypes.data,
                              count[d0:].ctypes.data, d1 - d0, dst.ctypes.data))


class _StrChars:
    """An ASCII str's characters for ``np.asarray`` (``StrLayout.ascii_view``): numpy keeps this
    holder as the array's base, so the str lives as long as the array and its views."""

    __slots__ = ("__array_interface__", "text")

    def __init__(self, text: str, addr: int):
        self.text = text
        self.__array_interface__ = {"data": (addr, True), "shape": (len(text),),
                                    "typestr": "|u1", "version": 3}


class Packed:
    """Documents as one UTF-8 buffer: document ``i`` is ``buf[offsets[i]:offsets[i + 1]]``.
    The maker vouches that ``buf`` is valid UTF-8 (it is not checked again).

    >>> p = Packed("abé".encode(), np.array([0, 2, 4]))
    >>> len(p), p.to_pylist()
    (2, ['ab', 'é'])
    """

    __slots__ = ("buf", "offsets")

    def __init__(self, buf: bytes, offsets):
        self.buf = buf
        self.offsets = np.asarray(offsets, np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def to_pylist(self) -> list:
        off = self.offsets.tolist()
        return [self.buf[off[i]:off[i + 1]].decode("utf-8") for i in range(len(off) - 1)]

    def __reduce__(self):  # (no __dict__ with slots: pickled for a pool's worker processes)
        return Packed, (self.buf, self.offsets)


VIEW_MIN = 1 << 16  # characters: a shorter text is copied (a view costs ~2 us, the copy less)


def utf8_data(text: str, layout: "StrLayout | None" = None) -> "bytes | np.ndarray":
    """``text.encode("utf-8")`` (``UnicodeEncodeError`` on a surrogate), or for an ASCII str of
    ``VIEW_MIN`` characters or more, given a native str packer (``layout``), its own characters
    in place (``StrLayout.ascii_view``: a read-only uint8 array, no copy)."""
    if layout is not None and len(text) >= VIEW_MIN:
        view = layout.ascii_view(text)
        if view is not None:
            return view
    return text.encode("utf-8")


def fix_surrogates(text: str) -> str:
    r"""tiktoken's handling of a str that is not a sequence of Unicode scalar values.

    A Python str may hold surrogate code points, which have no UTF-8 form. tiktoken round-trips
    such text through UTF-16 with ``surrogatepass`` (so a *pair* of surrogates becomes the
    character it encodes), replacing each remaining lone surrogate with U+FFFD.

    >>> fix_surrogates("a\ud83d\ude00 \ud800")
    'a😀 �'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def utf8_of(text: str) -> bytes:
    """``fix_surrogates(text).encode("utf-8")``, encoding a valid text once."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return fix_surrogates(text).encode("utf-8")


class Documents:
    """A batch of documents with a uniform view: iterate as str, or get packed UTF-8 bytes."""

    def __init__(self, texts, errors: str = "strict"):
        if errors not in ("strict", "replace"):
            raise ValueError("errors must be 'strict' or 'replace'")
        self.errors = errors
        self._strs: "Sequence[str] | None" = None
        self._buf: "bytes | None" = None
        self._offsets: "np.ndarray | None" = None
        self._bytes_list: "Sequence[bytes] | None" = None
        self._valid = False  # the buffer is known to be valid UTF-8
        if isinstance(texts, Packed):
            self._buf, self._offsets, self._valid = texts.buf, texts.offsets, True
        elif _is_arrow(texts):
            self._buf, self._offsets = _arrow_buffers(texts)
        elif isinstance(texts, (str, bytes)):
            raise TypeError("expected a batch (list of str/bytes or a pyarrow array), got a single "
                            f"{type(texts).__name__}; wrap it in a list")
        else:
            texts = texts if isinstance(texts, (list, tuple)) else list(texts)
            if all(isinstance(t, str) for t in texts):
                self._strs = texts
            elif all(isinstance(t, (bytes, bytearray, memoryview)) for t in texts):
                self._bytes_list = [bytes(t) for t in texts]
            else:
                kind = str if isinstance(texts[0], str) else bytes
                bad = next(i for i, t in enumerate(texts) if not isinstance(t, kind))
                raise TypeError(f"document {bad} is a {type(texts[bad]).__name__}, document 0 a "
                                f"{type(texts[0]).__name__}; expected all str or all bytes")

    def __len__(self) -> int:
        if self._strs is not None:
            return len(self._strs)
        if self._bytes_list is not None:
            return len(self._bytes_list)
        return len(self._offsets) - 1

    def _decode(self, raw: bytes, index: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.errors == "replace":
                return raw.decode("utf-8", "replace")
            raise ValueError(
                f"document {index} is not valid UTF-8 (byte offset {e.start}: "
                f"{e.reason}); pass errors='replace' to decode invalid bytes as U+FFFD") from None

    def strs(self) -> "Sequence[str] | None":
        """The documents as given, when they were given as str (else None)."""
        return self._strs

    def iter_str(self) -> Iterator[str]:
        """Documents as valid Python str (surrogates already repaired the tiktoken way)."""
        if self._strs is not None:
            for t in self._strs:
                yield fix_surrogates(t)
        elif self._bytes_list is not None:
            for i, b in enumerate(self._bytes_list):
                yield self._decode(b, i)
        else:
            buf, off = self._buf, self._offsets.tolist()
            for i in range(len(off) - 1):
                yield self._decode(buf[off[i]:off[i + 1]], i)

    def packed(self, utf8_check=None) -> tuple[bytes, np.ndarray]:
        """(UTF-8 buffer, int64 offsets of len n+1), validated per ``errors`` (``utf8_check``:
        a native checker, ``valid_utf8``'s ``check``)."""
        if self._buf is not None and (self.errors == "strict" or self._valid):
            if not self._valid:
                self._validate_buffer(utf8_check)
            return self._buf, self._offsets
        checked = self._bytes_list is not None and self.errors == "strict"
        if checked:
            parts = self._bytes_list
        elif self._strs is not None:
            parts = list(map(utf8_of, self._strs))
        else:
            parts = [s.encode("utf-8") for s in self.iter_str()]
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        buf = parts[0] if len(parts) == 1 else b"".join(parts)
        if checked and not valid_documents(buf, offsets, utf8_check):
            for i, b in enumerate(parts):
                self._decode(b, i)  # raises, naming the first invalid document
        return buf, offsets

    def _validate_buffer(self, check=None) -> None:
        if not valid_documents(self._buf, self._offsets, check):
            for _ in self.iter_str():  # raises, naming the first invalid document
                pass
        self._valid = True


def _is_arrow(obj) -> bool:
    mod = type(obj).__module__
    return mod.startswith("pyarrow")


def _arrow_buffers(arr) -> tuple[bytes, np.ndarray]:
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    if arr.null_count:
        first = arr.is_null().index(True).as_py() if hasattr(arr.is_null(), "index") else "?"
        raise ValueError(f"the arrow array has {arr.null_count} null entries (first at {first}); "
                         "fill them (e.g. with '') before encoding")
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        odt = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        odt = np.int64
    elif hasattr(pa.types, "is_string_view") and (pa.types.is_string_view(t)):
        return _arrow_buffers(arr.cast(pa.large_string()))
    else:
        raise TypeError(f"expected a pyarrow string or binary array, got {t}")
    _validity, off_buf, data_buf = arr.buffers()[:3]
    offsets = np.frombuffer(off_buf, dtype=odt, count=len(arr) + 1 + arr.offset)[arr.offset:]
    offsets = offsets.astype(np.int64)
    data = data_buf.to_pybytes() if data_buf is not None else b""
    base = int(offsets[0])
    if base:
        data = data[base:int(offsets[-1])]
        offsets = offsets - base
    else:
        data = data[:int(offsets[-1])]
    return data, offsets
