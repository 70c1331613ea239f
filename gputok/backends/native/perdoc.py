"""The native CPU device's per-document pass: byte-level BPE in the shape that is fast on a CPU.

The chunk pipeline (``calls.py``, ``kernels/host_chunk.h``) runs the GPU's kernels in order
over a chunk, each stage writing an array the next one reads. This pass (``kernels/cpu_encode.h``,
``kernels/cpu_batch.h``) takes one document at a time from its first byte to its ids on one
thread: the pattern matcher finds a piece, the piece cache (``kernels/cpu_cache.h``: piece bytes
-> ids, shared by the threads, kept from batch to batch) answers it, or the whole-token lookup
and the merge rule do and the cache keeps the answer; the ids go straight to the thread's
output. The rules are the shared ones (``kernels/common/*.h``); a batch runs on every thread
with no interpreter in the loop, the documents read where Python keeps them (str code units,
bytes, a packed buffer), long ones sliced where a piece starts in every parse.

``PerDocPass`` holds the pass's entry points in the loaded library and, per model (its uploaded
``Tables``), the words that describe the model to the pass and the model's piece cache
(``cache_slots`` slots of 64 bytes; ``$GPUTOK_PIECE_CACHE`` sets the default: 0 turns the
cache off). ``runners/perdoc.py`` decides which batches and texts take it: a model whose pieces
the native device cuts itself (``plan.mode == "device"``), with no normaliser or one normal
form (documents the quick check flags are encoded by the chunk pipeline instead, ``flagged``),
and active tokens without HF's ``lstrip``/``rstrip``.
"""

from __future__ import annotations

import ctypes
import os
import weakref

import numpy as np

from ...stages import pack
from ...specials import disallowed_error

CACHE_SLOTS = 1 << 18  # the piece cache's default size (64-byte slots: 16 MB at most, its
#                       pages taken as pieces are cached; 64K slots missed 2-7% of the pieces of
#                       a repeated 2 MB of prose for want of room, 256K 0.3-0.7%)
TAB_WORDS = 17  # ENC_CPU_TAB_WORDS (kernels/cpu_encode.h)
SLOT_IDS = 8  # ENC_CPU_SLOT_IDS: a single text's output has this much room past one id a byte


def cache_slots_default() -> int:
    """``$GPUTOK_PIECE_CACHE`` (slots; 0: no piece cache), else ``CACHE_SLOTS``."""
    env = os.environ.get("GPUTOK_PIECE_CACHE", "").strip()
    if not env:
        return CACHE_SLOTS
    try:
        n = int(env)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"$GPUTOK_PIECE_CACHE must be a number of slots >= 0, got {env!r}")
    return n


def ascii_nibbles(cls_table: np.ndarray) -> np.ndarray:
    """THE ASCII NIBBLES (kernels/cpu_text.h): for each class c, 16 bytes whose byte l has bit h
    set where the ASCII byte ``h << 4 | l`` has class c."""
    out = np.zeros((16, 16), np.uint8)
    cls = np.asarray(cls_table[:128], np.int64)
    b = np.arange(128)
    np.bitwise_or.at(out, (cls, b & 15), (1 << (b >> 4)).astype(np.uint8))
    return out.reshape(-1)


class _Model:
    """A model's words (ENC_CPU_TAB_*), the arrays they point at, and its piece cache. The words
    first point at the tables as mapped; ``in_huge_pages`` copies the big ones into 2 MB pages
    for the batches after (the words before stay valid: their arrays are kept)."""

    def __init__(self, tables, cache: "int | None", free):
        a, sc = tables.arrays, tables.scalars
        if "cls_table" not in a or "letters" not in a:
            raise ValueError("the per-document pass needs the pattern's class tables (pieces cut "
                             "on the device)")
        self.tables = [a[k] for k in ("w_slots", "w_tok_bytes", "t_slots", "byte_ids", "join",
                                      "cls_table", "letters")]
        self.nibbles = ascii_nibbles(np.asarray(a["cls_table"]))
        o200k = bool(sc.get("o200k"))
        self.scalars = (int(sc["w_bits"]), int(sc["t_bits"]), int(sc.get("n_letters", 0)),
                        int(o200k), 0 if o200k else int(sc.get("gpt2", 0)),
                        0 if o200k else int(sc.get("digit_group", 0)),
                        0 if o200k else int(sc.get("end_whole", 0)), int(sc.get("w_max_len", 0)))
        self.cache = cache
        self.huge = False
        self.keep: list = []
        self._set_words()
        self._finalizer = weakref.finalize(self, free, cache) if cache else None

    def _set_words(self) -> None:
        words = (ctypes.c_uint64 * TAB_WORDS)(*(x.ctypes.data for x in self.tables),
                                              *self.scalars, self.nibbles.ctypes.data)
        self.keep.append((words, tuple(self.tables)))  # (a call may still read the words before)
        self.words, self.address = words, ctypes.addressof(words)

    def in_huge_pages(self) -> None:
        """The tables of ``HUGE_COPY_MIN`` bytes or more copied into 2 MB pages (once)."""
        if not self.huge:
            self.huge = True
            self.tables = [_in_huge_pages(x) for x in self.tables]
            self._set_words()


class _Tokens:
    """The tokens a batch finds: UTF-8 one after another, longest first (as
    ``stages.split._bytes_regex`` orders them), their ids, and which are active."""

    def __init__(self, model, active: frozenset, refused: frozenset):
        toks = sorted(active | refused, key=lambda t: (-len(t), t))
        raw = [t.encode("utf-8") for t in toks]
        self.tokens = toks
        self.count = len(toks)
        self.bytes = np.frombuffer(b"".join(raw) or b"\0", np.uint8)
        self.off = np.zeros(len(raw) + 1, np.uint32)
        np.cumsum([len(r) for r in raw], out=self.off[1:])
        self.ids = np.array([model.token_id(t) if t in active else 0 for t in toks], np.uint32)
        self.active = np.array([t in active for t in toks], np.uint8)
        if not len(self.ids):
            self.ids, self.active = np.zeros(1, np.uint32), np.zeros(1, np.uint8)


class PerDocPass:
    """The per-document pass of one loaded native library (``library._Library``: its entry
    points, str packer and id lists; see the module docstring) on ``threads`` threads."""

    def __init__(self, library, threads: int, cache_slots: "int | None" = None):
        lib = library.lib
        vp, ll, i, u = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_uint
        lib.gputok_cpu_cache_new.argtypes = [ctypes.c_ulonglong]
        lib.gputok_cpu_cache_new.restype = vp
        lib.gputok_cpu_cache_free.argtypes = [vp]
        lib.gputok_cpu_cache_free.restype = None
        lib.gputok_cpu_cache_stats.argtypes = [vp, vp]
        lib.gputok_cpu_cache_stats.restype = None
        lib.gputok_cpu_encode_text.argtypes = [ctypes.c_char_p, ll, vp, vp, vp]
        lib.gputok_cpu_encode_text.restype = ll
        lib.gputok_cpu_pieces.argtypes = [ctypes.c_char_p, ll, vp, i, vp]
        lib.gputok_cpu_pieces.restype = ll
        lib.gputok_cpu_batch_run.argtypes = [vp, vp, vp, vp, ll, vp, vp, u, vp, vp, vp, vp, vp,
                                             i, vp, vp, vp, vp]
        lib.gputok_cpu_batch_run.restype = vp
        lib.gputok_cpu_batch_take.argtypes = [vp, vp, i, vp, i]
        lib.gputok_cpu_batch_take.restype = None
        lib.gputok_cpu_batch_free.argtypes = [vp]
        lib.gputok_cpu_batch_free.restype = None
        self.lib = lib
        self.packer = library.packer  # (None: str documents are packed by Python)
        self.utf8_check = library.utf8_check
        self._encode_str = None  # (str_layout, lists): encode_str's one call (use_python)
        if library.packer is not None and library.lister is not None:
            self.use_python(ctypes.PyDLL(library.path), library.packer, library.lister)
        self.threads = max(1, int(threads))
        self.cache_slots = cache_slots_default() if cache_slots is None else int(cache_slots)
        if self.cache_slots < 0:
            raise ValueError(f"cache_slots must be >= 0, got {cache_slots}")
        self._models: dict = {}  # id(tables) -> (weak reference, _Model)
        self._tokens: dict = {}  # (id(model), active, refused) -> _Tokens

    # -- per model
    def model(self, tables) -> _Model:
        """The words and the piece cache of a model's uploaded tables (made once)."""
        got = self._models.get(id(tables))
        if got is not None and got[0]() is tables:
            return got[1]
        cache = self.lib.gputok_cpu_cache_new(self.cache_slots) if self.cache_slots else None
        if self.cache_slots and not cache:
            raise MemoryError(f"no memory for a piece cache of {self.cache_slots} slots")
        m = _Model(tables, cache, self.lib.gputok_cpu_cache_free)
        self._models[id(tables)] = (weakref.ref(tables), m)
        return m

    def cache_stats(self, tables) -> dict:
        """The model's piece cache: {"slots", "lookups", "hits", "inserts"} (zeros: no cache)."""
        m = self.model(tables)
        out = (ctypes.c_ulonglong * 4)()
        if m.cache:
            self.lib.gputok_cpu_cache_stats(m.cache, out)
        return dict(zip(("slots", "lookups", "hits", "inserts"), map(int, out)))

    def _tokens_for(self, model, active: frozenset, refused: frozenset) -> _Tokens:
        key = (id(model), active, refused)
        got = self._tokens.get(key)
        if got is None or got[0]() is not model:
            if len(self._tokens) > 64:
                self._tokens.clear()
            got = self._tokens[key] = (weakref.ref(model), _Tokens(model, active, refused))
        return got[1]

    # -- encoding
    def encode_text(self, tables, data: bytes) -> np.ndarray:
        """One text's ids (valid UTF-8, no active token in it) on the calling thread: uint32."""
        m = self.model(tables)
        out = np.empty(len(data) + SLOT_IDS, np.uint32)
        got = self.lib.gputok_cpu_encode_text(data, len(data), m.address, m.cache,
                                              out.ctypes.data)
        if got < 0:
            raise MemoryError(f"no memory to encode a text of {len(data)} bytes")
        return out[:got]

    #: the piece finders ``pieces`` can ask for (kernels/cpu_encode.h, gputok_cpu_pieces)
    FINDERS = {"rule": 0, "scan": 1, "loop": 2}

    def pieces(self, tables, data: bytes, how: str = "scan") -> np.ndarray:
        """Where each piece of one text (valid UTF-8, one segment) ends, found by ``how``:
        ``"rule"`` the family's matcher alone (THE CL / O200K MATCHER), ``"scan"`` the class
        scan's fast matchers first (any family: kernels/cpu_scan.h), ``"loop"`` the segment
        loop's own finder (the scan or the matcher's ASCII entry, as the family measured)."""
        if how not in self.FINDERS:
            raise ValueError(f"unknown piece finder {how!r}: one of {sorted(self.FINDERS)}")
        m = self.model(tables)
        out = np.empty(max(1, len(data)), np.int64)
        got = self.lib.gputok_cpu_pieces(data, len(data), m.address, self.FINDERS[how],
                                         out.ctypes.data)
        if got < 0:
            raise MemoryError(f"no memory for a text of {len(data)} bytes")
        return out[:got]

    def use_python(self, py_lib, layout, lists) -> None:
        """Let ``encode_str`` make a str's list in one call: ``py_lib`` the library loaded with
        ``ctypes.PyDLL`` (its calls hold the interpreter's lock), ``layout`` a usable
        ``pack.StrLayout`` (the library then has the str locator of the public C API that the
        call reads a str with), ``lists`` a usable ``stages.lists.IdLists``."""
        make = py_lib.gputok_str_function  # (host_pack.h: ONE STR AS A BUILT-IN)
        make.argtypes = [ctypes.py_object, ctypes.c_void_p]
        make.restype = ctypes.py_object
        self._encode_str = (make, lists._api_at, lists.ITEMS_AT)
        self._str_ctx: dict = {}  # id(tables) -> (weak reference, words, their address)

    #: the longest text (characters) ``encode_str`` encodes holding the interpreter's lock
    STR_LOCKED_MAX = 1 << 12

    def encode_str(self, tables, text: str) -> "list | None":
        """One str's ids as a list (no active token in it): one call that reads the str where
        CPython keeps it and builds the list (``use_python``), for a text of at most
        ``STR_LOCKED_MAX`` characters. None: a longer one (its encoding is then worth releasing
        the interpreter's lock: ``encode_text``), one it does not take (a lone surrogate), or no
        ``use_python``."""
        got = self.str_encoder(tables)
        if got is None or len(text) > self.STR_LOCKED_MAX:
            return None
        return got[0](text)

    def str_encoder(self, tables) -> "tuple | None":
        """(fn, ...) where ``fn(text)`` is ``encode_str``'s one call for this model's tables, a
        built-in function (a caller that keeps it saves the lookups: ~1 us of a 100-character
        text's few), or None without ``use_python``. The tuple keeps the model alive."""
        if self._encode_str is None:
            return None
        got = self._str_ctx.get(id(tables))
        if got is None or got[0]() is not tables:
            got = self._str_ctx[id(tables)] = self._ctx_for(tables)
        return got[1:]

    def _ctx_for(self, tables) -> tuple:
        m = self.model(tables)
        make, api_at, items_at = self._encode_str
        words = (ctypes.c_uint64 * 5)(m.address, m.cache or 0, api_at, items_at, id(None))
        # (the built-in owns the words and the model they point at: it outlives any caller)
        return weakref.ref(tables), make((words, m), ctypes.addressof(words)), m

    def encode_batch(self, tables, model, docs: pack.Documents, active: frozenset,
                     refused: frozenset, out_dtype, nfc_bits=None) -> tuple:
        """(ids, int64 offsets, flagged) of a batch: ``flagged`` (None or a bool per document)
        marks the documents the normaliser's quick check sent back, which have no ids here.
        ``active``: the tokens cut out (their ids emitted); ``refused``: the disallowed ones (the
        first in document order raises ``disallowed_error``)."""
        m = self.model(tables)
        n_docs = len(docs)
        located = _located(docs, self.packer, self.utf8_check)
        addr, kind, units, nbytes = located[:4]
        total_bytes = int(nbytes.sum())
        if total_bytes >= HUGE_BATCH_MIN:
            m.in_huge_pages()
        toks = self._tokens_for(model, active, refused - active)
        total, status = ctypes.c_longlong(0), ctypes.c_int(0)
        bad = (ctypes.c_ulonglong * 3)()
        flags = np.zeros(max(n_docs, 1), np.uint8)
        threads = self.threads if total_bytes >= (1 << 16) else 1
        batch = self.lib.gputok_cpu_batch_run(
            addr.ctypes.data, kind.ctypes.data, units.ctypes.data, nbytes.ctypes.data, n_docs,
            m.address, m.cache, toks.count, toks.bytes.ctypes.data, toks.off.ctypes.data,
            toks.ids.ctypes.data, toks.active.ctypes.data,
            None if nfc_bits is None else nfc_bits.ctypes.data, threads,
            ctypes.byref(total), ctypes.byref(status), bad, flags.ctypes.data)
        del located  # (every str was read: the references may go)
        st = status.value
        if st not in (0, 4):
            self.lib.gputok_cpu_batch_free(batch)
            if st == 3:
                raise disallowed_error(toks.tokens[bad[2]], int(bad[0]))
            if st == 2:
                raise RuntimeError("native CPU pass: a piece ran past the end of a slice of a "
                                   "long document (please report this text)")
            raise MemoryError(f"native CPU pass: no memory for a batch of {n_docs} documents")
        ids = np.empty(max(total.value, 1), out_dtype)
        off = np.empty(n_docs + 1, np.int64)
        self.lib.gputok_cpu_batch_take(batch, ids.ctypes.data, int(ids.itemsize == 2),
                                       off.ctypes.data, threads)
        return ids[:total.value], off, (flags[:n_docs] != 0 if st == 4 else None)


HUGE_COPY_MIN = 1 << 20  # bytes: a table this big is copied into 2 MB pages (_in_huge_pages)
HUGE_BATCH_MIN = 1 << 22  # bytes of text: a batch this big has its model's tables copied first
#                           (~20 MB for o200k, ~5-10 ms: a single text or a small batch in a
#                           fresh process would pay more for the copy than the pages save it)


def _in_huge_pages(a: np.ndarray) -> np.ndarray:
    """A table of ``HUGE_COPY_MIN`` bytes or more copied into transparent huge pages (where the
    OS has them; ``host_pool.huge_block``), else as it is: the pass probes the whole-token and
    merge tables and its piece cache, several MB each, at random, and with 4 KB pages most
    probes missed the TLB as well (o200k prose, one thread: +8-10% with the tables in 2 MB
    pages, +30-45% with the cache's slots in them, which kernels/cpu_cache.h asks for)."""
    import os as _os

    if a.nbytes < HUGE_COPY_MIN or _os.environ.get("GPUTOK_CPU_NO_HUGE"):
        return a
    from ..host_pool import huge_block

    out = huge_block(a.nbytes).view(a.dtype)
    out[...] = a.reshape(-1)
    return out


def _located(docs: pack.Documents, layout, utf8_check) -> tuple:
    """(addr, kind, units, nbytes, references) of a batch as gputok_cpu_batch_run reads it:
    str documents where CPython keeps them (``layout``: a ``pack.StrLayout``, or None), else the
    packed UTF-8."""
    strs = docs.strs()
    got = layout.units(strs) if layout is not None and strs is not None else None
    if got is not None:
        return got
    buf, off = docs.packed(utf8_check)
    off = np.asarray(off, np.int64)
    data = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(1, np.uint8)
    n = len(off) - 1
    nbytes = np.diff(off)
    return (data.ctypes.data + off[:-1], np.zeros(n, np.int8), nbytes.copy(), nbytes,
            (buf, data))
