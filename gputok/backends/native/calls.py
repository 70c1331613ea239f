"""The native device's one-call forms (kernels/host_chunk.h, kernels/host_merge.h): a chunk's
whole kernel sequence, one short text, one text's pre-tokenization, or the merge of host-cut
pieces as a single call on the calling thread, with the arrays from the device's pool. These
are the capabilities ``chunk_inline``, ``text_short_max``, ``pretok_inline`` and
``merge_inline`` of ``protocol.Capabilities``: the driver's one-call runners call them.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import weakref

import numpy as np

from .library import _address
from .settings import EXACT_OUT_BYTES


class OneCalls:
    """The one-call members of ``NativeDevice`` (a part of that class: it uses the device's
    ``lib``, ``pool``, ``_bare``, ``_count`` and ``poison``)."""

    def merge_inline(self, tables, data: bytes, starts: np.ndarray, spec: np.ndarray,
                     has_long: bool, whole: bool) -> tuple:
        """The merge stage of a few host-cut pieces in one call (kernels/host_merge.h: the
        kernels of ``DeviceStages.merge`` in order on this thread, no dedup): (count per
        entry, scratch). ``data``: the pieces' bytes; ``starts``: uint32 entry starts (the
        sentinel's too); ``spec``: uint32 per entry. A 10 KB run: ~0.1 ms of Python (argument
        checks, workspace, three launches) saved, about what its merge costs. ``data`` may be
        a uint8 array instead (a long ASCII text's own characters, ``pack.utf8_data``)."""
        from ...stages.merge import LONG_PIECE

        sc = tables.scalars
        cap, n = len(spec), len(data)
        units = n // LONG_PIECE + 2
        # one uint32 block: count (cap + 1), scratch (n), then the kernels' workspace (host_merge.h)
        ws32 = self._bare(2 * cap + 1 + 2 * n + (2 * n + units if has_long else 0), np.uint32)
        ws64 = self._bare(n + 2 * units if has_long else 1, np.uint64)
        count, scratch = ws32[:cap + 1], ws32[cap + 1:cap + 1 + n]
        base32 = _address(ws32)
        addr = self._table_addresses(tables)
        self.lib.lib.gputok_native_merge_inline(
            data if isinstance(data, bytes) else _address(data), _address(starts),
            _address(spec), cap, addr[0], addr[1], sc["w_bits"] if whole else 0, addr[2],
            sc["t_bits"], addr[3], addr[4], n, has_long, base32, base32 + 4 * (cap + 1),
            base32 + 4 * (cap + 1 + n), _address(ws64))
        self._count("encode_piece_kind", "encode_merge_short",
                    *(("encode_merge_long",) if has_long else ()))
        return count[:cap], scratch

    def chunk_inline(self, tables, hc, out_dtype, dedup_slots_per_entry: float = 0.0,
                     out_for=None) -> tuple:
        """One chunk's whole kernel sequence in two calls on this thread (kernels/host_chunk.h:
        pre-tokenization, entries, merge and emit as ``ChunkRunner.kernels`` launches them,
        for a chunk cut on the device, its arrays from the same pool; a chunk over
        ``EXACT_OUT_BYTES`` emits in a third call, into an output sized by its id count):
        (ids, document offsets (int64, n_docs + 1)). A chunk worker then holds the
        interpreter's lock for two or three calls instead of ~20 launches and allocations, and
        a short text skips them too.
        ``dedup_slots_per_entry``: the dedup set's size per entry as ``DeviceStages.merge``
        sizes it (0: no dedup). ``out_for(count)``: where a big chunk emits its ``count`` ids
        (an array of that many: the batch's output, ``emit.Placement``), or None (its own)."""
        sc = tables.scalars
        data, off, mpos, mbits, ss, sid = hc.inputs
        n, n_docs = hc.n, hc.n_docs
        lib = self.lib.lib
        o200k = bool(sc.get("o200k"))
        empty = self._bare  # (the arrays meet no launch: no address cache entries)
        # the small arrays of a chunk share blocks: one block of 2 MB pages where a chunk has
        # several 1 MB arrays, whose 4 KB pages were most of a fresh process's first page faults
        # (addresses by offset from each block's start: ~0.5 us an array, ~20 arrays a call,
        # were ~10% of a 1,000-character text's one call)
        ent = empty(n + 2, np.uint32)
        at_ent, at_data = _address(ent), _address(data)
        addr = self._table_addresses(tables)
        cap = self._pretok(tables, at_data, n, mpos, mbits, hc.n_marks, at_ent)
        # one block: the dedup set (emptied by the call), then pstart, spec, owner (cap),
        # count (cap + 1), doc_entry (n_docs + 1)
        dbits = max(4, int(max(cap * dedup_slots_per_entry, 2) - 1).bit_length()) \
            if dedup_slots_per_entry else 0
        n_slots = 1 << dbits if dbits else 0
        sizes = (cap, cap, cap, cap + 1, n_docs + 1)
        block = empty(n_slots + (sum(sizes) + 1) // 2, np.uint64)
        at_block = _address(block)
        at_words = at_block + 8 * n_slots
        ends = list(itertools.accumulate(sizes, initial=0))
        at_ws = [at_words + 4 * lo for lo in ends[:-1]]  # pstart, spec, owner, count, doc_entry
        ran_long = ctypes.c_int(0)
        u16 = np.dtype(out_dtype).itemsize == 2
        out_doc = empty(n_docs + 1, np.int64)
        # a small chunk emits in the same call into an output of one id per byte; a big one
        # gets an output of its id count, from the pages it will write (a third call)
        out = empty(max(n, 1), out_dtype) if n <= EXACT_OUT_BYTES else None
        at_out_doc = _address(out_doc)
        status = lib.gputok_native_chunk_finish(
            at_data, n, _address(off), n_docs, _address(ss), _address(sid), hc.n_spans,
            addr[0], addr[1], int(sc["w_bits"]), addr[2], int(sc["t_bits"]), addr[3], addr[4],
            at_block if dbits else _address(self._no_dedup), dbits, cap, at_ent, *at_ws,
            ctypes.byref(ran_long), int(u16), None if out is None else _address(out),
            at_out_doc)
        if status != 0:
            raise MemoryError(f"native device: no memory for the long pieces of a {n}-byte "
                              "chunk")
        if out is None:
            total = int(block[n_slots:].view(np.uint32)[ends[3] + cap])  # count[cap]
            out = out_for(total) if out_for is not None else None
            if out is None:
                out = empty(max(total, 1), out_dtype)
            lib.gputok_native_chunk_emit(cap, at_ws[0], at_ws[2], at_ws[3], at_ent, at_ws[4],
                                         n_docs, int(u16), _address(out), at_out_doc)
        del block, ent
        self._count(*self._chunk_names(o200k, u16, bool(hc.n_marks), bool(ran_long.value),
                                       bool(dbits)))
        return out[:int(out_doc[n_docs])], out_doc

    def text_short(self, tables, data: bytes, seg_bits: np.ndarray, out_dtype,
                   dedup_slots_per_entry: float = 0.0) -> np.ndarray:
        """One short text's ids (one document, one segment whose mark bits are ``seg_bits``,
        no special tokens) in one call with the calling thread's own workspace
        (kernels/host_chunk.h, ``gputok_native_text_short``): what ``chunk_inline`` does for
        such a chunk, without its ~15 arrays and addresses (~20 us of a 1,000-character
        text's ~60). ``data`` at most ``TEXT_SHORT_MAX`` bytes."""
        n = len(data)
        out = self._bare(max(n, 1), out_dtype)
        u16 = out.itemsize == 2
        ran_long = ctypes.c_int(0)
        got = self.lib.lib.gputok_native_text_short(
            data, n, self._text_tab(tables), seg_bits.ctypes.data,
            float(dedup_slots_per_entry), int(u16), _address(out), ctypes.byref(ran_long))
        if got < 0:
            raise MemoryError(f"native device: no memory for the workspace of a {n}-byte text")
        self._count(*self._chunk_names(bool(tables.scalars.get("o200k")), u16, True,
                                       bool(ran_long.value), dedup_slots_per_entry > 0))
        return out[:got]

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _chunk_names(o200k: bool, u16: bool, marks: bool, ran_long: bool, dedup: bool) -> tuple:
        """The kernels one ``chunk_inline`` or ``text_short`` call ran, for the launch counts."""
        names = ["encode_o200k_classify", "encode_o200k_spans"] if o200k else [
            "encode_pretok_classify", "encode_pretok_spans"]
        names += ["encode_piece_kind", "encode_merge_short",
                  "encode_emit_u16" if u16 else "encode_emit_u32", "encode_doc_offsets",
                  "scan_add"]
        if marks:
            names.append("encode_pretok_marks")
        if ran_long:
            names.append("encode_merge_long")
        if dedup:
            names.append("encode_dup_counts")
        return tuple(names)

    def _pretok(self, tables, at_data: int, n: int, mpos, mbits, n_marks: int,
                at_ent: int) -> int:
        """Pre-tokenization of ``n`` bytes at ``at_data`` (kernels/host_chunk.h,
        ``gputok_native_chunk_pretok``): the entries' starts into ``at_ent`` (n + 2 uint32),
        the sentinel's (n) last; returns the entry count."""
        sc = tables.scalars
        o200k = bool(sc.get("o200k"))
        addr = self._table_addresses(tables)
        marks = self._bare(2 * (n + 2), np.uint8)  # mark, then cls (n + 2 each)
        at_marks = _address(marks)
        return int(self.lib.lib.gputok_native_chunk_pretok(
            at_data, n, _address(mpos), _address(mbits), n_marks, addr[5], addr[6],
            int(sc["n_letters"]), int(o200k),
            0 if o200k else int(sc["gpt2"]), 0 if o200k else int(sc["digit_group"]),
            0 if o200k else int(sc["end_whole"]), at_marks, at_marks + n + 2, at_ent))

    def pretok_inline(self, tables, data: bytes, mpos: np.ndarray, mbits: np.ndarray,
                      limit: int) -> "np.ndarray | None":
        """The piece starts of one text cut on this thread (``OneCall.few``):
        uint32, the sentinel's (``len(data)``) last, or None where it has more than ``limit``
        pieces. ``mpos``/``mbits``: its marks (the segment's ends). Its workspace is 2 bytes a
        byte (mark, class) and the starts: the host scanner's numpy passes over a 10 MB emoji
        run made ~46 MB of temporaries, whose first touch in a fresh process cost ~60 ms."""
        n = len(data)
        ent = self._bare(n + 2, np.uint32)
        cap = self._pretok(tables, _address(np.frombuffer(data, np.uint8)), n, mpos, mbits,
                           len(mpos), _address(ent))
        self._count(*(("encode_o200k_classify", "encode_o200k_spans")
                      if tables.scalars.get("o200k") else
                      ("encode_pretok_classify", "encode_pretok_spans")), "encode_pretok_marks")
        return ent[:cap].copy() if cap - 1 <= limit else None

    def _table_addresses(self, tables) -> tuple:
        """Addresses of a model's tables (w_slots, w_tok_bytes, t_slots, byte_ids, join, and
        the pre-tokenizer's cls_table and letters where it has them: else 0), kept per tables
        object."""
        return self._tables_entry(tables)[1]

    def _text_tab(self, tables) -> int:
        """The address of ``tables``' words for ``gputok_native_text_short`` (ENC_TAB_*: the
        tables' addresses, then the scalars), kept with the addresses."""
        return self._tables_entry(tables)[3]

    def _tables_entry(self, tables) -> tuple:
        """(weak reference, addresses, ENC_TAB_* words, their address) of a tables object."""
        got = self._tables_addr.get(id(tables))
        if got is None or got[0]() is not tables:
            a, sc = tables.arrays, tables.scalars
            addr = tuple(_address(a[k]) if k in a else 0
                         for k in ("w_slots", "w_tok_bytes", "t_slots", "byte_ids", "join",
                                   "cls_table", "letters"))
            o200k = bool(sc.get("o200k"))
            words = (ctypes.c_uint64 * 14)(
                *addr, int(sc["w_bits"]), int(sc["t_bits"]), int(sc.get("n_letters", 0)),
                int(o200k), 0 if o200k else int(sc.get("gpt2", 0)),
                0 if o200k else int(sc.get("digit_group", 0)),
                0 if o200k else int(sc.get("end_whole", 0)))
            got = self._tables_addr[id(tables)] = (weakref.ref(tables), addr, words,
                                                   ctypes.addressof(words))
        return got

    # -- memory (host memory: copies are views)
