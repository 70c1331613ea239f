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
            codecs.utf_8_decode(buf, "strict", True)  # (bytes, or any buffer: a chunk's array)
        else:
            decode = codecs.getincrementaldecoder("utf-8")().decode
            view = memoryview(buf)
            for i in range(0, n, DECODE_SLICE):
                decode(view[i:i + DECODE_SLICE], i + DECODE_SLICE >= n)
    except UnicodeDecodeError:
        return False
    return True


class StrLayout:
    """Python str (or bytes) documents as UTF-8 in the native library, without the interpreter's
    lock (kernels/host_pack.h): each document's characters found in place through the
    interpreter's public C API (``PyUnicode_DATA`` / ``PyUnicode_KIND`` / ...: the library is
    built against this interpreter's ``Python.h``), checked once on probe strings of every
    kind by packing them back (``usable``: False on any disagreement, and then nothing uses it).
    ``units(docs)`` locates a batch (a document the packer does not take - a surrogate, a legacy
    string of the old C API - is encoded here, ``utf8_of``); ``pack(units, d0, d1, dst)``
    writes documents d0..d1-1 into ``dst`` (``threads``: side by side in parts of 4 MB or
    more). Encoding each document with ``str.encode`` and joining them held the interpreter's
    lock for the whole batch's bytes, twice copied: chunk workers returning from a native call
    then waited for the packing thread to reach a switch point (up to 5 ms each time)."""

    def __init__(self, locate_fn, pack_fn, parts_fn):
        self._locate_fn, self._pack, self._parts = locate_fn, pack_fn, parts_fn
        self.usable = self._check()

    def _check(self) -> bool:
        probes = ["ascii text", "caf\xe9 \xff" * 2, "\u0100\u4e2d\u6587 x", "\U0001F600 \u4e2d",
                  "", "a" * 300, "\ud83d lone"]
        try:
            u = self._locate(probes, False)
            want_len = [len(p.encode()) if i != len(probes) - 1 else -1
                        for i, p in enumerate(probes)]
            if u[3].tolist() != want_len:
                return False
            k = len(probes) - 1  # all but the surrogate
            out = np.empty(sum(want_len[:k]) + 1, np.uint8)
            got = self.pack(u, 0, k, out)
            b = self._locate([b"xyz", b""], True)
            out2 = np.empty(4, np.uint8)
            return out[:got].tobytes() == "".join(probes[:k]).encode() and \
                self.pack(b, 0, 2, out2) == 3 and out2[:3].tobytes() == b"xyz"
        except Exception:  # (anything off: not usable)
            return False

    def _locate(self, docs, is_bytes: bool) -> tuple:
        n = len(docs)
        obj = np.fromiter(map(id, docs), np.int64, n)
        addr, units, nbytes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        kind = np.empty(n, np.int8)
        self._locate_fn(obj.ctypes.data, n, int(is_bytes), addr.ctypes.data, kind.ctypes.data,
                        units.ctypes.data, nbytes.ctypes.data)
        return addr, kind, units, nbytes

    def units(self, docs: Sequence) -> "tuple | None":
        """(addr, kind, units, UTF-8 lengths, references) of a batch of str, or of bytes (None:
        not all exactly str, nor all exactly bytes). The references (the documents, and the
        bytes encoded here) must outlive every ``pack`` of these units."""
        keep = list(docs)  # (a list the caller changes meanwhile cannot free a str we read)
        types = set(map(type, keep))
        if not keep or types not in ({str}, {bytes}):
            return None
        addr, kind, units, nbytes = self._locate(keep, types == {bytes})
        bad = np.flatnonzero(nbytes < 0).tolist()  # surrogates, legacy strings: here
        if bad:
            fixed = [utf8_of(keep[i]) for i in bad]
            keep += fixed
            fa, fk, fu, fn = self._locate(fixed, True)
            addr[bad], kind[bad], units[bad], nbytes[bad] = fa, fk, fu, fn
        return addr, kind, units, nbytes, keep

    def ascii_view(self, text: str) -> "np.ndarray | None":
        """An ASCII str's characters where the str keeps them, as a read-only uint8 array (its
        UTF-8, not copied; the array holds a reference to the str), or None for any other text
        (not all ASCII, a str subclass, a legacy string). ``text.encode()`` of a 10 MB run wrote
        10 MB of fresh pages, whose first touch in a fresh process cost up to a third of the
        run's merge on the 2-core box."""
        if type(text) is not str or not text or not text.isascii():
            return None
        addr, kind, _units, nbytes = self._locate([text], False)
        if kind[0] != 0 or nbytes[0] != len(text):
            return None
        return np.asarray(_StrChars(text, int(addr[0])))

    def pack(self, units: tuple, d0: int, d1: int, dst: np.ndarray, threads: int = 1) -> int:
        """Documents d0..d1-1 of ``units`` as UTF-8 into ``dst`` (uint8, their length at
        least), on up to ``threads`` threads (parts of 4 MB or more); returns the bytes
        written."""
        addr, kind, count = units[0], units[1], units[2]
        if threads <= 1:
            return int(self._pack(addr[d0:].ctypes.data, kind[d0:].ctypes.data,
                                  count[d0:].ctypes.data, d1 - d0, dst.ctypes.data))
        at = np.zeros(d1 - d0 + 1, np.int64)
        np.cumsum(units[3][d0:d1], out=at[1:])
        return int(self._parts(addr[d0:].ctypes.data, kind[d0:].ctypes.data,
                               count[d0:].ctypes.data, at.ctypes.data, d1 - d0, dst.ctypes.data,
                               int(threads)))


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


class PackedRuns(Packed):
    """``Packed`` documents kept as the runs a reader wrote them in (uint8 arrays, back to
    back): joined into one buffer only for a consumer that asks for ``buf``. A device that
    stages its chunks copies them from the runs (``Documents.segments``): the JSONL reader's
    batches are not copied once more to be joined first."""

    __slots__ = ("runs", "_joined")

    def __init__(self, runs, offsets):
        self.runs = [np.asarray(r, np.uint8).reshape(-1) for r in runs]
        self.offsets = np.asarray(offsets, np.int64)
        self._joined = None

    @property
    def buf(self) -> bytes:
        if self._joined is None:
            self._joined = b"".join(self.runs)
        return self._joined


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
        self._segments: "list | None" = None  # a buffer's bytes, as uint8 arrays back to back
        self._valid = False  # the buffer is known to be valid UTF-8
        if isinstance(texts, PackedRuns):
            self._segments, self._offsets, self._valid = texts.runs, texts.offsets, True
            self._packed = texts  # (joins its runs once, should one buffer be wanted)
        elif isinstance(texts, Packed):
            self._buf, self._offsets, self._valid = texts.buf, texts.offsets, True
        elif _is_arrow(texts):
            view, self._offsets = _arrow_view(texts)
            self._segments = [view]
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

    def segments(self) -> "tuple | None":
        """(uint8 arrays holding the documents' bytes back to back, int64 offsets, known
        valid) when the documents were given as a buffer (a pyarrow array, ``Packed``, the
        JSONL reader's runs), not copied; else None. Not checked here."""
        if self._segments is None and self._buf is None:
            return None
        segs = self._segments if self._segments is not None else \
            [np.frombuffer(self._buf, np.uint8)]
        return segs, self._offsets, self._valid

    def _buffer(self) -> bytes:
        """The buffer's bytes as one ``bytes`` (made once, from segments where they are)."""
        if self._buf is None:
            packed = getattr(self, "_packed", None)
            self._buf = packed.buf if packed is not None else b"".join(self._segments)
        return self._buf

    def bytes_list(self) -> "Sequence[bytes] | None":
        """The documents as bytes objects, when they were given as a list of bytes-like objects
        (else None; not yet checked for UTF-8)."""
        return self._bytes_list

    def iter_str(self) -> Iterator[str]:
        """Documents as valid Python str (surrogates already repaired the tiktoken way)."""
        if self._strs is not None:
            for t in self._strs:
                yield fix_surrogates(t)
        elif self._bytes_list is not None:
            for i, b in enumerate(self._bytes_list):
                yield self._decode(b, i)
        else:
            buf, off = self._buffer(), self._offsets.tolist()
            for i in range(len(off) - 1):
                yield self._decode(buf[off[i]:off[i + 1]], i)

    def packed(self, utf8_check=None) -> tuple[bytes, np.ndarray]:
        """(UTF-8 buffer, int64 offsets of len n+1), validated per ``errors`` (``utf8_check``:
        a native checker, ``valid_utf8``'s ``check``)."""
        if self._offsets is not None and (self.errors == "strict" or self._valid):
            if not self._valid:
                self._validate_buffer(utf8_check)
            return self._buffer(), self._offsets
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
        if not valid_documents(self._buffer(), self._offsets, check):
            for _ in self.iter_str():  # raises, naming the first invalid document
                pass
        self._valid = True


def _is_arrow(obj) -> bool:
    mod = type(obj).__module__
    return mod.startswith("pyarrow")


def _arrow_view(arr) -> tuple[np.ndarray, np.ndarray]:
    """(the documents' bytes as a uint8 array over the Arrow data buffer, not copied; int64
    offsets from 0)."""
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
        return _arrow_view(arr.cast(pa.large_string()))
    else:
        raise TypeError(f"expected a pyarrow string or binary array, got {t}")
    _validity, off_buf, data_buf = arr.buffers()[:3]
    offsets = np.frombuffer(off_buf, dtype=odt, count=len(arr) + 1 + arr.offset)[arr.offset:]
    offsets = offsets.astype(np.int64)
    base, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data[base:end], offsets - base
