"""One text on a device backend (``Backend.encode_text``: ``Encoding.encode``'s path).

Which way a text goes depends on its length and kind, and on the device's one-call forms:

* where the device has a per-document pass that takes the model (``runners/perdoc.py``): there;
* under ``FEW_MIN`` characters: the host path (a regex call and a few cache probes);
* ``SHORT_MIN`` characters and more (``SHORT_MIN_NON_ASCII`` if not all ASCII), up to the
  backend's ``one_call_max``, without active special tokens, where the device states
  ``chunk_inline`` (the native CPU): the whole sequence as one device call (``OneCall``);
* else under ``DEVICE_PATH_MIN``: the host cut, its long pieces and many misses merged by the
  device's merge stage (``OneText.merge_pieces``);
* a text of at most ``FEW_PIECES`` pieces (a run of one character class): cut on the host, or
  on the calling thread by the device's pretok (``caps.pretok_inline``, not all ASCII), and
  merged on the device (``merge_spans``);
* else the batch pipeline (``encode_list``).
"""

from __future__ import annotations

import functools

import numpy as np

from ...stages import counters
from ...stages.lists import id_list, id_list_of_parts
from ...stages.merge import LONG_PIECE
from ...stages.pack import Documents, fix_surrogates
from ...stages.text import encode_few, encode_text as host_text
from ..hostplan import GAP, NORMAL, SEG_END, SEG_START, HostChunk
from .chunk import CHUNK_LIMIT

# A text of this many characters takes the batch pipeline on a device: its fixed cost per call
# (~0.5 ms) is below the host path's for 2K+ characters, and long pieces (runs, blobs) then merge
# in compiled code, not in Python's heap (~5 us per byte)
DEVICE_PATH_MIN = 1 << 11


# A text of at most this many pieces (a run of one character class, with a few pieces around
# it) is cut by the host regex and only its long pieces go to the device's merge stage
# (``OneText.merge_pieces``): no pre-tokenization kernels, no chunk set-up (~0.3 ms)
FEW_PIECES = 16
FEW_MIN = LONG_PIECE // 4  # characters: a shorter text has no piece of LONG_PIECE bytes

# A text of these many characters whose device runs a whole chunk as one call
# (``OneCall.short``) goes there: on the native CPU device ~10 us of call and
# ~35 ns a byte of prose, against the host cut's regex and cache probes (~80 ns a character of
# prose with every piece in the cache, far more without). The host path was still ahead below
# ~192 characters of ASCII prose or code (64: 5.2 against 10.2 us, 128: 9.6 against 12.6,
# 192-256 even, cl100k and o200k); a text that is not all ASCII was slower there from 64 on
# (256 characters of multilingual text: 67-75 against 29-39 us). Past SHORT_MAX the batch
# pipeline's launches over every core take over: a single text of 24-48K characters took
# 1.3-2.3x as long there as in one call (cl100k / o200k prose 1,184 / 1,026 against 512 / 504
# us at 24K), even at 64K (0.69-0.96x the pipeline's time); at ~90K they were even.
SHORT_MIN = 192
SHORT_MIN_NON_ASCII = FEW_MIN
SHORT_MAX = 1 << 16


SEGMENT_BITS = np.array([SEG_START, SEG_END], np.uint8)  # one text: one segment
_NONE_U32 = np.zeros(0, np.uint32)
TRIM_CHARS = 1 << 17  # a text this long gives idle host workspace back (encode_list)


def one_call_model(be, model) -> bool:
    """Whether one text of ``model`` may take a device's one-call paths (``OneCall.short``,
    ``OneCall.few``) on backend ``be``: a segmenter whose device form runs there (byte-level
    BPE), no normaliser."""
    return be.planner.host_family(model) is None and model.segmenter.device.one_call \
        and not model.normalizer


class OneText:
    """One text on one backend (``be``); ``one_call``: the device's one-call forms (``OneCall``,
    where it states ``chunk_inline``) or None; ``one_call_max``: the longest text (characters)
    they take."""

    def __init__(self, be, one_call_max: int = SHORT_MAX):
        self.be, self.dev = be, be.dev
        self.one_call = OneCall(self) if be.dev.caps.chunk_inline else None
        self.one_call_max = int(one_call_max)

    def encode_text(self, model, text: str, allowed: frozenset) -> list:
        """The ids of one text (checked for disallowed tokens already): see the module."""
        n = len(text)
        if self.be.perdoc is not None:  # (the device's per-document pass, where it takes it)
            got = self.be.perdoc.encode_text(model, text, allowed)
            if got is not None:
                return got
        if n < FEW_MIN:
            return host_text(model, text, allowed)
        one = self.one_call
        if one is not None and (n >= SHORT_MIN or (n >= SHORT_MIN_NON_ASCII
                                                   and not text.isascii())) \
                and n <= self.one_call_max and not model.active_tokens(allowed):
            got = one.short(model, text)
            if got is not None:
                return got
        device_merge = functools.partial(self.merge_pieces, model)
        if n < DEVICE_PATH_MIN:
            return host_text(model, text, allowed, device_merge)
        few = functools.partial(one.few, model) \
            if one is not None and self.dev.caps.pretok_inline else None
        got = encode_few(model, text, allowed, device_merge, FEW_PIECES, few,
                         functools.partial(self.merge_spans, model), self.be.tools.packer)
        return got if got is not None else self.encode_list(model, text, allowed)

    def encode_list(self, model, text: str, allowed: frozenset) -> list:
        """``Backend.encode_list``; besides, a device whose workspace is
        host memory (``dev.trim_idle``: the native CPU) gives its idle workspace back first when
        the text is long (``TRIM_CHARS`` characters or more), so the list is not made beside
        it: a 1 MB base64 blob's ~20 MB of workspace stayed resident under its list (peak 2.4x
        tiktoken's); a next text that long faults its workspace in again (a few % of its time).
        The list is made from the chunks' ids in turn (``lists.id_list_of_parts``), never
        joined into one array first (a 10 MB base64 blob: 28 MB less)."""
        docs = Documents([text])
        self.be.ahead(model)
        got = self.be.batch_parts(model, docs, allowed, frozenset())
        if got is None:
            ids, _ = self.be.host.encode(model, docs, allowed, frozenset())
            return id_list(ids, self.be.tools.lister)
        parts = sorted(got[0], key=lambda p: p[0])
        if len(text) >= TRIM_CHARS:
            self.dev.trim_idle()
        return id_list_of_parts([p[1] for p in parts], self.be.tools.lister)

    def merge_pieces(self, model, pieces: list, flat: bool = False) -> "list | None":
        """The merge stage alone, for pieces the host cut (UTF-8 ``bytes``): each
        piece's ids as a tuple, as the whole pipeline gives them (a whole token first, then the
        sequential rule; a long piece cut where no merge crosses, its long runs in O(L log L)).
        ``flat``: all the pieces' ids as one list instead (a text of a few pieces: 7.5 M ids of a
        10 MB emoji run made a list, a tuple and a list again, ~170 ms; one list ~95).

        ``Encoding.encode`` sends a text's long pieces here (``dedup.ids_of_pieces``): the host
        regex cuts a text of a few pieces in microseconds, and the merge kernels (2-3 launches,
        the ids read from the merge's own scratch) cost far less than the pre-tokenization
        kernels and a chunk's set-up (~0.3 ms a call). None where the pieces cannot run as one
        chunk (over 2 GiB, out of device memory) or the model has no merge kernels here: the
        caller merges them itself."""
        k = len(pieces)
        if not k:
            return []
        lens = np.fromiter(map(len, pieces), np.int64, k)
        starts = np.zeros(k + 1, np.int64)
        np.cumsum(lens, out=starts[1:])
        n = int(starts[k])
        if n > CHUNK_LIMIT or self.be.planner.host_family(model) is not None \
                or not model.segmenter.device.one_call:
            return None
        return self.merge_joined(model, b"".join(pieces), starts, lens, flat)

    def merge_spans(self, model, data, starts: np.ndarray) -> "list | None":
        """``merge_pieces(model, pieces, flat=True)`` for pieces given as spans of one buffer:
        piece ``i`` is ``data[starts[i]:starts[i + 1]]`` (``data``: UTF-8 ``bytes`` or a uint8
        array, ``pack.utf8_data``; ``starts``: int64, the end last). ``Encoding.encode`` sends a
        text of a few pieces here, its UTF-8 uncopied (joining the pieces' ``bytes`` again made
        two more copies of a long run)."""
        k = len(starts) - 1
        if k <= 0:
            return [] if k == 0 else None
        n = int(starts[k])
        if n > CHUNK_LIMIT or self.be.planner.host_family(model) is not None \
                or not model.segmenter.device.one_call:
            return None
        return self.merge_joined(model, data, starts, np.diff(starts), True)

    def merge_joined(self, model, joined, starts: np.ndarray, lens: np.ndarray,
                      flat: bool) -> "list | None":
        """``merge_pieces`` of the pieces ``joined[starts[i]:starts[i + 1]]`` (``lens``: their
        lengths; ``joined``: ``bytes`` or a uint8 array, the pieces' bytes and nothing after)."""
        k, n = len(lens), int(starts[len(lens)])
        spec = np.full(k + 1, NORMAL, np.uint32)
        spec[k] = GAP  # the sentinel entry
        dev = self.dev
        with self.be.lock:
            try:
                plan = self.be.planner.get(model)
                has_long = bool((lens >= LONG_PIECE).any())
                whole = bool((lens <= plan.tables.scalars.get("w_max_len", 0)).any())
                if dev.caps.merge_inline:  # the stage as one call (native)
                    counts, ids = dev.merge_inline(plan.tables, joined, starts.astype(np.uint32),
                                                   spec, has_long, whole)
                    counts = counts[:k]  # (the sentinel's is the last)
                else:
                    dev.begin_chunk(n)
                    with dev.stream(0):
                        d_buf, d_start, d_spec, d_n = dev.upload(
                            [np.frombuffer(joined, np.uint8), starts.astype(np.uint32), spec,
                             np.array([k + 1], np.uint32)])
                        _, count, scratch = self.be.stages.merge(
                            plan.tables, n, d_buf, d_start, d_spec, d_n, k + 1, dedup=False,
                            has_long=has_long, whole=whole)
                        got_count = dev.download("count", count, k)
                        got_ids = dev.download("scratch", scratch, n)
                        counts, ids = got_count.result(), got_ids.result()
            except dev.oom_errors:
                dev.release()
                return None
        with self.be.count_lock:
            counters["device.merge_pieces"] += k
        # no dedup: each piece's ids are at its own start (a whole token: one id there)
        if flat:
            return id_list_of_parts([ids[a:a + c] for a, c in zip(starts.tolist(),
                                                                 counts.tolist())],
                                    self.be.tools.lister)
        return [tuple(ids[a:a + c].tolist()) for a, c in zip(starts.tolist(), counts.tolist())]



class OneCall:
    """A device's one-call forms for one text (``caps.chunk_inline``, ``text_short_max``,
    ``pretok_inline``: the native CPU), for ``OneText``."""

    def __init__(self, text: OneText):
        self.text, self.be, self.dev = text, text.be, text.dev

    def short(self, model, text: str) -> "list | None":
        """One text with no special tokens in it, its whole sequence as one device call where
        the device has that form (``chunk_inline``) and the model cuts its pieces on the
        device, with no normaliser: a list of ids; else None. Skips packing, chunk planning
        and assembly (~50 us): ``Encoding.encode`` takes it for texts of ``SHORT_MIN``
        characters and more that the host cut would spend longer on than the call."""
        if not self.dev.caps.chunk_inline or not one_call_model(self.be, model):
            return None  # (a family's own stages: SentencePiece, WordPiece, ...)
        plan = self.be.planner.get(model)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # surrogates: tiktoken's repair first
            data = fix_surrogates(text).encode("utf-8")
        n = len(data)
        if not n or n > CHUNK_LIMIT or not self.be.chunk.one_call(plan, plan.mode):
            return None  # (pieces cut on the host: the caller's host cut and device merge)
        if n <= self.dev.caps.text_short_max:
            st = self.be.stages  # (the whole sequence in one call, the workspace the device's)
            ids = self.dev.text_short(plan.tables, data, SEGMENT_BITS, model.id_dtype,
                        st.dedup_slots_per_entry if st.dedup else 0.0)
            with self.be.count_lock:
                counters["device.chunks"] += 1
                counters["device.short_texts"] += 1
            return id_list(ids, self.be.tools.lister)
        ends = np.array([0, n], np.uint32)  # one document, one segment, no token spans
        hc = HostChunk(0, 1, n, "device", [np.frombuffer(data, np.uint8), ends, ends,
                                            SEGMENT_BITS, _NONE_U32, _NONE_U32], 1, n_marks=2)
        # (no backend lock: the call touches only this thread's arrays and the read-only
        # tables, as each chunk worker's does, so threads' short texts run side by side)
        got = self.be.chunk.inline(plan, hc, model.id_dtype)
        if got is None:  # (pieces cut on the host, a normaliser check, a profile)
            return None
        with self.be.count_lock:
            counters["device.short_texts"] += 1
        return id_list(got[1], self.be.tools.lister)

    def few(self, model, data: bytes, limit: int) -> "list | None":
        """The ids of one text (its UTF-8 ``data``; no special tokens) cut on the device where
        the device cuts one text on the calling thread (``pretok_inline``: the native CPU
        device) and the model's pieces are cut there, when it has at most ``limit`` pieces: its
        pieces then merge as ``merge_pieces`` merges them; else None. ``Encoding.encode`` takes
        it for a long non-ASCII text of a few pieces (an emoji run), whose cut by the host
        scanner made ~4.6 bytes of numpy temporaries per byte."""
        n = len(data)
        if not self.dev.caps.pretok_inline or not n or n > CHUNK_LIMIT \
                or not one_call_model(self.be, model):
            return None
        plan = self.be.planner.get(model)
        if plan.mode != "device" or plan.norm_form is not None or not plan.seg.one_call:
            return None
        got = self.dev.pretok_inline(plan.tables, data, np.array([0, n], np.uint32), SEGMENT_BITS,
                                     limit)
        if got is None:
            return None
        starts = got.astype(np.int64)
        with self.be.count_lock:
            counters["device.few_texts"] += 1
        return self.text.merge_joined(model, data, starts, np.diff(starts), True)
