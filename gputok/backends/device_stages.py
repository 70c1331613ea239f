"""The encode stages on a device: each takes and returns device arrays (kernels/encode_*.cu).

``DeviceStages`` knows kernels and buffers, nothing of tokenizers: the driver (``driver.py``)
hands it the model's uploaded ``tables`` and a chunk's arrays. The stages, in order:

    nfc      encode_nfc.cu: the normaliser's quick check (flags, count, flagged positions);
             the driver normalises the rare flagged spans on the host
    pretok   encode_pretok.cu: UTF-8 decode + the scanner's class table, span starts + one
             sequential matcher of the pattern per span, in byte coordinates -> one flag per
             entry start (o200k: encode_o200k.cu, the same with its own rules)
    entries  encode_scan.cu (exclusive scan of the flags) + compaction -> piece starts, token
             spans and a sentinel as one entry list, plus each document's first entry
    wordpiece  encode_wordpiece.cu (WordPiece models, instead of merge): greedy longest match
             of every word on the vocabulary's byte trie
    merge    encode_merge.cu: whole-token lookup (hash of the bytes, hits confirmed by comparing
             bytes), pieces < LONG_PIECE bytes one thread each (the sequential rule), longer
             pieces one thread each in O(L log L) (linked list + indexed heap); on a GPU,
             encode_merge_huge.cu first: pieces of HUGE_PIECE bytes or more, a block each
    emit     encode_scan.cu + encode_emit.cu: counts -> exclusive scan -> ids scattered into one
             output (uint16 when the vocabulary fits) + per-document offsets
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..stages.merge import HUGE_SEG, LONG_PIECE

i32, i64, u32, u64 = np.int32, np.int64, np.uint32, np.uint64
EMPTY64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass
class Tables:
    """A model's tables on one device (``device_tables.upload_tables``)."""

    arrays: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)


class DeviceStages:
    """The encode stages on ``dev``; ``dedup`` merges each distinct piece of a chunk once."""

    #: dedup table slots per entry (a power of two at least this many in all): only the pieces
    #: that are not tokens go in (10-50% of the entries); a piece that finds no slot in
    #: ENC_DEDUP_PROBES (encode_merge.cu) merges itself, so any size is correct
    dedup_slots_per_entry = 1.0

    def __init__(self, dev, *, dedup: bool = False):
        self.dev = dev
        self.dedup = dedup
        # A device whose memory the host reads directly (the native CPU device: ``fence()``
        # waits for the chunk's stream) sizes per-entry arrays, grids, the dedup set and the
        # count scan by the real entry count; a GPU sizes them by the bound (n + 2 entries) so
        # the host never waits mid-chunk.
        self.host_memory = dev.caps.host_memory
        # a device with the block-wide merge of huge pieces (a GPU; a host thread merges one
        # alone: the native CPU device has no form of it)
        self.huge = dev.has_kernel("encode_merge_huge")

    def go(self, name: str, count: int, args: list) -> None:
        """Launch a grid-stride kernel over ``count`` elements: ``dev.block``-thread blocks, or
        the device's own shape for it (``launch_shape``: the native CPU)."""
        grid, block = self.dev.launch_shape(name, count)
        self.dev.launch(name, grid, block, args)

    def scan(self, arr, n: int, exclusive: bool) -> None:
        """In-place prefix sum of ``arr[:n]`` (modulo 2^32), reduce-then-scan. A device
        with its own ``scan`` runs that instead (the native CPU device: block scans need
        shared memory and barriers, which a plain loop over a block's threads does not have)."""
        dev = self.dev
        if dev.caps.own_scan:
            dev.scan(arr, n, exclusive)
            return
        tile = dev.scan_block * dev.scan_items
        blk = (dev.scan_block,)
        if n <= tile:
            dev.launch("encode_scan_apply_add", (1,), blk,
                       [arr, arr, i64(n), dev.dummy(np.uint32), i32(0), i32(exclusive)])
            return
        tiles = -(-n // tile)
        sums = dev.empty(tiles, np.uint32)
        dev.launch("encode_scan_reduce_add", (tiles,), blk, [arr, i64(n), sums])
        self.scan(sums, tiles, True)
        dev.launch("encode_scan_apply_add", (tiles,), blk,
                   [arr, arr, i64(n), sums, i32(1), i32(exclusive)])

    def stage(self, name: str):
        """The segmenting stage a segmenter's device form names (``SegmenterDevice.stage``)."""
        try:
            return {"merge": self.merge, "wordpiece": self.wordpiece}[name]
        except KeyError:
            raise KeyError(f"no device stage {name!r} (merge, wordpiece)") from None

    # The stages below take and return device arrays; the tests drive them one by one.

    def pretok(self, tables, n: int, d_buf, d_mpos, d_mbits, n_marks: int):
        """encode_pretok.cu (encode_o200k.cu for o200k): returns ``ent`` (uint32, n + 2): 1
        where an entry starts."""
        dev = self.dev
        a, s = tables.arrays, tables.scalars
        m = n + 2
        mark = dev.zeros(m, np.uint8)
        if n_marks:
            self.go("encode_pretok_marks", n_marks, [d_mpos, d_mbits, i64(n_marks), mark])
        cls = dev.empty(m, np.uint8)
        if s.get("o200k"):
            self.go("encode_o200k_classify", n + 1, [d_buf, i64(n), mark, a["cls_table"], cls])
            ent = dev.empty(m, np.uint32)
            self.go("encode_o200k_spans", n + 2,
                    [d_buf, i64(n), mark, cls, a["letters"], s["n_letters"], ent])
            return ent
        self.go("encode_pretok_classify", n + 1, [d_buf, i64(n), mark, a["cls_table"], cls])
        ent = dev.empty(m, np.uint32)
        self.go("encode_pretok_spans", n + 2,
                [d_buf, i64(n), mark, cls, a["letters"], s["n_letters"], s["gpt2"],
                 s["digit_group"], s["end_whole"], ent])
        return ent

    def nfc_check(self, tables, n: int, d_buf):
        """encode_nfc.cu: the byte positions (uint32, on the host) of the characters the
        model's normal form may change; none for a chunk that is already normalised."""
        dev = self.dev
        flag = dev.empty(n + 1, np.uint32)
        self.go("encode_nfc_flags", n + 1, [d_buf, i64(n), tables.arrays["nfc_bits"], flag])
        self.scan(flag, n + 1, True)
        if self.host_memory:
            dev.fence()
            count = int(flag[n])
        else:
            count = int(dev.download("nfc_count", flag[n:n + 1], 1).result()[0])
        if not count:
            return np.zeros(0, np.uint32)
        pos = dev.empty(count, np.uint32)
        self.go("encode_nfc_compact", n, [flag, i64(n), pos])
        if self.host_memory:
            dev.fence()
            return np.array(pos[:count])
        return np.array(dev.download("nfc_pos", pos, count).result())

    def entries(self, n: int, ent, d_off, n_docs: int, d_sp_pos, d_sp_id,
                n_spans: int):
        """Flags -> entries: (pstart, spec, doc_entry, n_entries (a 1-element device view),
        capacity). ``ent`` is scanned in place."""
        dev = self.dev
        m = n + 2
        self.scan(ent, m, True)  # entry index of every flagged byte
        if self.host_memory:
            dev.fence()  # the entry count is read on the host: wait for this chunk's stream
            cap = int(ent[n + 1])
        else:
            cap = m
        pstart = dev.empty(cap, np.uint32)
        spec = dev.empty(cap, np.uint32)
        self.go("encode_entries_compact", n + 1, [ent, i64(n), pstart, spec])
        if n_spans:
            self.go("encode_entries_specials", n_spans,
                     [ent, d_sp_pos, d_sp_id, i64(n_spans), spec])
        doc_entry = dev.empty(n_docs + 1, np.uint32)
        self.go("encode_doc_entries", n_docs + 1, [ent, d_off, i64(n_docs + 1), doc_entry])
        # the count as its own array when the host knows it: ent (4 bytes per byte) is then
        # freed before the merge workspace is allocated
        n_entries = dev.put(np.array([cap], np.uint32)) if self.host_memory else ent[n + 1:n + 2]
        return pstart, spec, doc_entry, n_entries, cap

    def merge(self, tables, n: int, d_buf, pstart, spec, n_entries, cap: int, *,
              dedup: "bool | None" = None, has_long: "bool | None" = None,
              whole: bool = True):
        """encode_merge.cu: (owner, count, scratch); entry e's ids are count[e] values in
        scratch at pstart[e] (pstart[owner[e]] for a duplicate). ``dedup``: this call's
        choice (default the stages'); ``has_long``: whether an entry has LONG_PIECE bytes or
        more, when the caller knows (else read from ``pstart`` on host memory); ``whole``:
        False when the caller knows no piece can be a token (all longer than the longest):
        no whole-token lookup, so a long piece is not hashed for nothing."""
        dev = self.dev
        a, s = tables.arrays, tables.scalars
        dedup = self.dedup if dedup is None else dedup
        owner = dev.empty(cap, np.uint32)
        count = self._counts(cap)
        scratch = dev.empty(n, np.uint32)
        if dedup:
            dbits = max(4, int(max(cap * self.dedup_slots_per_entry, 2) - 1).bit_length())
            slots = dev.full(1 << dbits, EMPTY64, np.uint64)
        else:
            dbits, slots = 0, dev.dummy(np.uint64)
        self.go("encode_piece_kind", cap,
                 [d_buf, pstart, spec, n_entries, a["w_slots"], a["w_tok_bytes"],
                  s["w_bits"] if whole else u32(0),
                  slots, u32(dbits), owner, count, scratch, i64(cap)])
        del slots
        table = [a["t_slots"], s["t_bits"], a["byte_ids"]]
        prio_ws = dev.empty(n, np.uint32)
        ws = None
        if self.huge and has_long is not False:
            # a GPU: pieces of HUGE_PIECE bytes or more first, a block of threads each, in the
            # long pieces' workspace and seg_ws (three words per ENC_HUGE_SEG bytes); they are
            # final after it (owner ENC_DONE), so the kernels below pass them by
            ws = self._long_ws(n)
            seg_ws = dev.empty(6 * (n // HUGE_SEG + 2), np.uint32)
            self.go("encode_merge_huge", cap,
                    [d_buf, pstart, n_entries, owner, *table, scratch, prio_ws, *ws[:3], seg_ws,
                     count, i64(cap)])
            del seg_ws
        self.go("encode_merge_short", cap,
                 [d_buf, pstart, n_entries, owner, *table, scratch, prio_ws, count, i64(cap)])
        # on host memory a chunk without a piece of LONG_PIECE bytes or more gets no long-piece
        # workspace (16 bytes per byte of text, which a pool would keep resident) and no launch
        if has_long is None:
            has_long = not self.host_memory or self._has_long(pstart, cap)
        if has_long:
            ws = ws or self._long_ws(n)
            self.go("encode_merge_long", cap,
                     [d_buf, pstart, n_entries, owner, *table, a["join"], scratch, prio_ws, *ws,
                      count, i64(cap)])
        del ws, prio_ws
        if dedup:
            self.go("encode_dup_counts", cap, [n_entries, owner, count, i64(cap)])
        return owner, count, scratch

    def _long_ws(self, n: int) -> list:
        """The long pieces' workspace besides prio_ws (which serves as where[]): next, prev
        (uint32), heap keys (uint64), and per LONG_PIECE bytes two tree slots (uint64) and a
        block size (uint32)."""
        dev = self.dev
        units = n // LONG_PIECE + 2
        return [dev.empty(n, np.uint32), dev.empty(n, np.uint32), dev.empty(n, np.uint64),
                dev.empty(2 * units, np.uint64), dev.empty(units, np.uint32)]

    def _counts(self, cap: int):
        """count[0 .. cap]: every entry's id count is written by the merge stage; the spare
        slot (where the scan's total lands) starts at 0, and so does every slot past the real
        entry count when ``cap`` is only a bound (a device whose entry count stays on it)."""
        if not self.host_memory:
            return self.dev.zeros(cap + 1, np.uint32)
        count = self.dev.empty(cap + 1, np.uint32)  # on host memory cap is the entry count
        count[cap] = 0
        return count

    def _has_long(self, pstart, cap: int) -> bool:
        """Whether an entry of the chunk spans LONG_PIECE bytes or more (host memory: the
        entry starts are read after the chunk's work so far is done)."""
        self.dev.fence()
        if cap < 2:
            return False
        gaps = self.dev.empty(cap - 1, np.uint32)  # workspace from the device's pool
        np.subtract(pstart[1:cap], pstart[:cap - 1], out=gaps)
        return int(gaps.max()) >= LONG_PIECE

    def wordpiece(self, tables, n: int, d_buf, pstart, spec, n_entries, cap: int):
        """encode_wordpiece.cu: (owner, count, scratch) as ``merge`` returns them; every word's
        ids are final in scratch at its own pstart."""
        dev = self.dev
        a, s = tables.arrays, tables.scalars
        owner = dev.empty(cap, np.uint32)
        count = dev.zeros(cap + 1, np.uint32)  # one spare zero: the scan's total lands there
        scratch = dev.empty(n, np.uint32)
        self.go("encode_wordpiece", cap,
                [d_buf, pstart, spec, n_entries, a["t_slots"], s["t_bits"],
                 s["cont"], s["unk"], s["max_chars"], owner, count, scratch, i64(cap)])
        return owner, count, scratch

    def emit(self, n: int, pstart, n_entries, cap: int, owner, count, scratch,
                    doc_entry, n_docs: int, out_dtype):
        """encode_scan.cu + encode_emit.cu: (ids (n slots, the first total used), document
        offsets (int64, n_docs + 1)). ``count`` is scanned in place into output offsets."""
        dev = self.dev
        self.scan(count, cap + 1, True)
        out = dev.empty(n, out_dtype)  # (on the host, pages past the last id are never touched)
        kern = "encode_emit_u16" if np.dtype(out_dtype).itemsize == 2 else "encode_emit_u32"
        self.go(kern, cap, [n_entries, pstart, owner, count, scratch, out, i64(cap)])
        out_doc = dev.empty(n_docs + 1, np.int64)
        self.go("encode_doc_offsets", n_docs + 1, [doc_entry, count, i64(n_docs + 1), out_doc])
        return out, out_doc


