"""The native module loaded: its kernels' entry points and parameter specs, its runtime (the
worker pool, streams, host scans), built on first use by ``build.py``.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ...stages import join, lists, pack
from . import build as native_build
from .settings import threads_default


class _KernelEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("call", ctypes.c_void_p),
                ("signature", ctypes.CFUNCTYPE(ctypes.c_char_p))]


class _Library:
    """The loaded module: {kernel name: (call address, parameter specs)} and the runtime."""

    def __init__(self, path):
        self.path = str(path)
        lib = ctypes.CDLL(self.path)  # CDLL calls release the GIL
        if lib.gputok_native_abi() != native_build.ABI:
            raise native_build.NativeBuildError(f"{path}: runtime ABI mismatch")
        vp, u, ll, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_longlong, ctypes.c_int
        lib.gputok_native_launch.argtypes = [vp, u, u, vp, i]
        lib.gputok_native_scan_u32.argtypes = [vp, ll, i, i]
        lib.gputok_native_stream_new.argtypes = [i]
        lib.gputok_native_stream_new.restype = vp
        lib.gputok_native_stream_launch.argtypes = [vp, vp, u, u, vp, i]
        lib.gputok_native_stream_scan_u32.argtypes = [vp, vp, ll, i]
        lib.gputok_native_stream_time.argtypes = [vp, vp]
        lib.gputok_native_stream_sync.argtypes = [vp]
        lib.gputok_jsonl_parse.argtypes = [vp, ll, vp, ll, vp, vp, vp, vp, ll, vp]
        lib.gputok_jsonl_parse.restype = None
        lib.gputok_utf8_valid.argtypes = [ctypes.c_char_p, ll, i]
        lib.gputok_utf8_valid.restype = i
        lib.gputok_xxh64_reset.argtypes = [vp, ctypes.c_ulonglong]
        lib.gputok_xxh64_reset.restype = None
        lib.gputok_xxh64_update.argtypes = [vp, vp, ll]
        lib.gputok_xxh64_update.restype = None
        lib.gputok_xxh64_digest.argtypes = [vp]
        lib.gputok_xxh64_digest.restype = ctypes.c_ulonglong
        lib.gputok_first_token.argtypes = [vp, vp, ll, vp, vp, ll]
        lib.gputok_first_token.restype = ll
        lib.gputok_native_merge_inline.argtypes = [vp, vp, vp, u, vp, vp, u, vp, u,
                                                   vp, vp, u, i, vp, vp, vp, vp]
        lib.gputok_native_merge_inline.restype = i
        lib.gputok_native_chunk_pretok.argtypes = [vp, ll, vp, vp, ll, vp, vp, u, i, i, i, i,
                                                   vp, vp, vp]
        lib.gputok_native_chunk_pretok.restype = ll
        lib.gputok_native_chunk_finish.argtypes = [vp, ll, vp, ll, vp, vp, ll, vp, vp, u, vp, u,
                                                   vp, vp, vp, u, u, vp, vp, vp, vp, vp, vp, vp,
                                                   i, vp, vp]
        lib.gputok_native_chunk_finish.restype = i
        lib.gputok_native_chunk_emit.argtypes = [u, vp, vp, vp, vp, vp, ll, i, vp, vp]
        lib.gputok_native_chunk_emit.restype = None
        lib.gputok_native_text_short.argtypes = [ctypes.c_char_p, ll, vp, vp, ctypes.c_double,
                                                 i, vp, vp]
        lib.gputok_native_text_short.restype = ll
        try:
            threads = threads_default()
        except ValueError:  # a bad $GPUTOK_NUM_THREADS is reported where the device is made
            threads = 1
        # the host helpers the native backend gives the stages (``HostTools``): the UTF-8
        # check of bytes input, the str packer, the id lists (each kept only where it checks out)
        def utf8_check(buf, n: int) -> int:  # (bytes, or an array such as a staging buffer)
            if isinstance(buf, np.ndarray):
                buf = ctypes.cast(buf.ctypes.data, ctypes.c_char_p)
            return lib.gputok_utf8_valid(buf, n, threads)

        self.utf8_check = utf8_check
        self.first_token = _FirstToken(lib.gputok_first_token)
        lib.gputok_pack_utf8.argtypes = [vp, vp, vp, ll, vp]
        lib.gputok_pack_utf8.restype = ll
        lib.gputok_pack_utf8_parts.argtypes = [vp, vp, vp, vp, ll, vp, i]
        lib.gputok_pack_utf8_parts.restype = ll
        self.packer = None
        locate = getattr(lib, "gputok_str_locate", None)  # (built with this Python's header)
        if locate is not None:
            locate.argtypes = [vp, ll, i, vp, vp, vp, vp]
            locate.restype = None
            layout = pack.StrLayout(locate, lib.gputok_pack_utf8, lib.gputok_pack_utf8_parts)
            self.packer = layout if layout.usable else None
        py_lib = ctypes.PyDLL(self.path)  # (its list builders make Python objects: GIL held)
        id_list, id_list_parts = py_lib.gputok_id_list, py_lib.gputok_id_list_parts
        id_list.argtypes = [vp, i, ll, vp, ll]
        id_list.restype = ctypes.py_object
        id_list_parts.argtypes = [vp, vp, i, i, vp, ll]
        id_list_parts.restype = ctypes.py_object
        lister = lists.IdLists(id_list, id_list_parts)
        self.lister = lister if lister.usable else None
        self.joiner = join.bind(str(self.path)) if self.packer is not None else None
        self.max_args = lib.gputok_native_max_args()
        self.lib = lib
        self.kernels: dict = {}
        for f in native_build.HOST_FILES:
            fn = getattr(lib, "gputok_native_table_" + f.rsplit(".", 1)[0])
            fn.restype = ctypes.POINTER(_KernelEntry)
            count = ctypes.c_int(0)
            table = fn(ctypes.byref(count))
            for k in range(count.value):
                e = table[k]
                self.kernels[e.name.decode()] = (e.call, _parse_signature(e.signature().decode()))


class _FirstToken:
    """``gputok_first_token`` (kernels/host_corpus.h) for a buffer of packed documents and a
    set of special tokens: the first offset where one lies inside a document, or -1."""

    def __init__(self, fn):
        self.fn, self.tables = fn, {}

    def __call__(self, buf, doc_off, tokens: frozenset) -> int:
        if not isinstance(tokens, frozenset):  # (a caller's set or list: a key all the same)
            tokens = frozenset(tokens)
        got = self.tables.get(tokens)
        if got is None:
            raw = [t.encode("utf-8") for t in sorted(tokens)]
            off = np.zeros(len(raw) + 1, np.int64)
            np.cumsum([len(r) for r in raw], out=off[1:])
            got = (np.frombuffer(b"".join(raw) or b"\0", np.uint8), off)
            if len(self.tables) > 64:
                self.tables.clear()
            self.tables[tokens] = got
        data = np.frombuffer(buf, np.uint8)
        doc_off = np.ascontiguousarray(doc_off, np.int64)
        if len(doc_off) < 2 or int(doc_off[-1]) > data.nbytes:
            raise ValueError(f"document offsets up to {int(doc_off[-1])} over a buffer of "
                             f"{data.nbytes} bytes")
        return int(self.fn(data.ctypes.data, doc_off.ctypes.data, len(doc_off) - 1,
                           got[0].ctypes.data, got[1].ctypes.data, len(got[1]) - 1))


def _parse_signature(sig: str) -> tuple:
    """``"cu1 u8 mu4"`` -> ((is pointer, writable, numpy dtype), ...)."""
    out = []
    for tok in sig.split():
        ptr = tok[0] in "cm"
        code = tok[1:] if ptr else tok
        out.append((ptr, tok[0] == "m", np.dtype(f"{code[0]}{code[1:]}")))
    return tuple(out)


_libraries: dict = {}
_build_lock = threading.Lock()


def library(compile: bool = True) -> "_Library | None":
    """The module for the current sources (built or loaded once per process); with
    ``compile=False`` None when the cache does not have it yet."""
    with _build_lock:
        path = native_build.build(compile)
        if path is None:
            return None
        got = _libraries.get(str(path))
        if got is None:
            got = _libraries[str(path)] = _Library(path)
        return got


_stream_handles: dict = {}


def _shared_stream(lib: _Library, threads: int, slot: int):
    """Stream threads are per process, not per device (devices come and go; a stream's thread
    lives as long as the process): one per (library, threads per launch, slot)."""
    key = (os.getpid(), lib.path, threads, slot)
    with _build_lock:
        h = _stream_handles.get(key)
        if h is None:
            h = _stream_handles[key] = lib.lib.gputok_native_stream_new(threads)
        return h


def _address(a: np.ndarray) -> int:
    if a.flags.writeable:
        try:  # a writable contiguous buffer: ~0.5 us (``__array_interface__`` builds a dict: 1.5)
            return ctypes.addressof(ctypes.c_char.from_buffer(a))
        except (TypeError, ValueError, BufferError):  # empty or strided
            pass
    return a.__array_interface__["data"][0]  # (read-only: no exception to raise and catch, 3.5)


