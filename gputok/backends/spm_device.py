"""SentencePiece BPE on a device: a chunk's kernels (``kernels/encode_spm.cu``), in order.

The device form of the SentencePiece-BPE segmenter (``.model`` files, SPM-style tokenizer.json):
the host plans a chunk (``stages/spm_plan.py``: its token spans, user-defined pieces, marks),
the device rewrites it where THE SPM NORMALISER must (``rewrite``: encode_spm_norm_len, then
_write), then on the device

    marks -> encode_spm_spans (THE SPM CUT) -> entries (encode_scan.cu + encode_entries_*)
          -> encode_spm_merge (symbols, THE COMPARATOR, THE SPM EXPAND) -> [encode_spm_fuse]
          -> emit (encode_scan.cu + encode_emit.cu, the entries' ids at src[e])

``SpmStages`` knows buffers and kernels only, as ``DeviceStages`` does; the runner
(``runners/spm.py``) drives it, or, on a device whose whole chunk is one call
(``caps.spm_inline``: the native CPU, kernels/host_spm.h), that call. A model whose every stage
must stay on the host (``why_not`` gives the reason) never gets here: the caller counts that
fallback.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..stages.merge import LONG_PIECE
from ..stages.spm_plan import SpmChunk, pieces, remap
from ..stages.spm_tables import SpmTables
from .spm_tables import spm_tables
from .kernels import ENC_DONE

i64, u32 = np.int64, np.uint32


def why_not(model) -> "str | None":
    """Why no device can run ``model``'s SentencePiece segmenter (``spm_tables``), or None."""
    got = spm_tables(model)
    return got if isinstance(got, str) else None


class SpmStages:
    """The SentencePiece kernels on ``dev`` (a device adapter), with ``stages`` (its
    ``DeviceStages``) for the scans, the entries and the emit."""

    def __init__(self, dev, stages):
        self.dev = dev
        self.st = stages
        self._tables: dict = {}

    def tables(self, model) -> "tuple[SpmTables, dict] | str":
        """(host tables, uploaded arrays and scalars) of ``model``, built once per model; or why
        the device cannot run it."""
        key = id(model)
        got = self._tables.get(key)
        if got is not None and got[0]() is model:
            return got[1]
        for k in [k for k, (ref, _) in self._tables.items() if ref() is None]:
            del self._tables[k]
        t = spm_tables(model)
        value = t if isinstance(t, str) else self.upload(t)
        self._tables[key] = (weakref.ref(model), value)
        return value

    def upload(self, t: SpmTables) -> tuple:
        """(t, its arrays on the device and its scalars)."""
        arrays = {k: self.dev.put(v) for k, v in t.arrays().items()}
        self.dev.synchronize()
        return t, {"arrays": arrays, "scalars": t.scalars()}

    def rewrite(self, t: SpmTables, up: dict, buf: bytes, doc_off, ss, se) -> tuple:
        """THE SPM NORMALISER over a chunk's segments (encode_spm_norm_len, then _write at the
        lengths' scan, each piece one thread): (the rewritten chunk on the device, doc_off, ss,
        se moved there). The lengths come back to the host (4 bytes a piece: the marks and the
        entries need the new positions), the one wait before the merge."""
        dev, st = self.dev, self.st
        a, s = up["arrays"], up["scalars"]
        bounds, p_src, p_len, kind = pieces(len(buf), doc_off, ss, se)
        k = len(p_src)
        d_buf, d_src, d_len, d_kind = dev.upload([np.frombuffer(buf, np.uint8), p_src, p_len,
                                                  kind])
        cm = [a["cm_units"], s["n_units"], a["cm_strings"], s["n_strings"], s["nflags"]]
        out_len = dev.empty(k, np.uint32)
        st.go("encode_spm_norm_len", k, [d_buf, d_src, d_len, d_kind, i64(k), *cm, out_len])
        if st.host_memory:
            dev.fence()
            lens = np.array(out_len[:k])
        else:
            lens = dev.download("norm_len", out_len, k).result()
        doc_off, ss, se, total = remap(bounds, lens, doc_off, ss, se)
        dst = np.zeros(k, np.uint32)
        np.cumsum(lens[:-1], out=dst[1:])
        out = dev.empty(total, np.uint8)
        if total:
            (d_dst,) = dev.upload([dst])
            st.go("encode_spm_norm_write", k,
                  [d_buf, d_src, d_len, d_kind, i64(k), *cm, d_dst, out_len, out])
            if st.host_memory:
                dev.fence()
        return out, doc_off, ss, se

    def run(self, t: SpmTables, up: dict, c: SpmChunk, out_dtype) -> tuple:
        """One planned chunk on the device: (ids, document offsets) as numpy arrays."""
        if c.n == 0:
            return np.zeros(0, out_dtype), np.zeros(c.n_docs + 1, np.int64)
        dev = self.dev
        dev.begin_chunk(c.n)
        with dev.stream(0):
            rewritten = not isinstance(c.buf, np.ndarray)  # (already there: a rewritten chunk)
            d_buf, d_off, d_mpos, d_mbits, d_sp_pos, d_sp_id = dev.upload(
                [np.zeros(1, np.uint8) if rewritten else c.buf, c.doc_off.astype(np.uint32),
                 c.mpos, c.mbits, c.sp_pos, c.sp_id])
            if rewritten:
                d_buf = c.buf
            out, out_doc = self.kernels(t, up, c, d_buf, d_off, d_mpos, d_mbits, d_sp_pos,
                                        d_sp_id, out_dtype)
            doc = dev.download("doc", out_doc, c.n_docs + 1).result()
            ids = dev.download("ids", out, int(doc[-1])).result()
        return ids, doc

    def kernels(self, t: SpmTables, up: dict, c: SpmChunk, d_buf, d_off, d_mpos, d_mbits,
                d_sp_pos, d_sp_id, out_dtype) -> tuple:
        """The kernel sequence of one uploaded chunk: (ids, document offsets) on the device."""
        dev, st = self.dev, self.st
        a, s = up["arrays"], up["scalars"]
        n = c.n
        mark = dev.zeros(n + 2, np.uint8)
        if len(c.mpos):
            st.go("encode_pretok_marks", len(c.mpos), [d_mpos, d_mbits, i64(len(c.mpos)), mark])
        ent = dev.empty(n + 2, np.uint32)
        st.go("encode_spm_spans", n + 2,
              [d_buf, i64(n), mark, a["sym"], a["c_slots"], s["c_bits"], s["flags"], ent])
        pstart, spec, doc_entry, n_entries, cap = st.entries(
            n, ent, d_off, c.n_docs, d_sp_pos, d_sp_id, len(c.sp_pos))
        del ent
        room = n + cap  # a span of L bytes: at most L + 1 symbols and ids
        scratch = dev.empty(room, np.uint32)
        count = st._counts(cap)
        src = dev.empty(cap, np.uint32)
        owner = dev.empty(cap, np.uint32)
        where = dev.empty(room, np.uint32)
        if self._has_long(pstart, cap):
            units = room // LONG_PIECE + 2
            ws = [dev.empty(room, np.uint32), dev.empty(room, np.uint32),
                  dev.empty(room, np.uint64), dev.empty(2 * units, np.uint64),
                  dev.empty(units, np.uint32)]
        else:
            ws = [dev.dummy(np.uint32), dev.dummy(np.uint32), dev.dummy(np.uint64),
                  dev.dummy(np.uint64), dev.dummy(np.uint32)]
        st.go("encode_spm_merge", cap,
              [d_buf, pstart, spec, n_entries, mark, a["sym"], a["t_slots"], s["t_bits"],
               a["fin"], a["byte_ids"], s["flags"], s["unk"], s["space_id"], scratch, count, src,
               owner, where, *ws, i64(cap)])
        del ws, where
        if t.fuse:
            src2 = dev.empty(cap, np.uint32)
            count2 = st._counts(cap)
            st.go("encode_spm_fuse", cap,
                  [pstart, spec, n_entries, mark, scratch, src, count, s["unk"], src2, count2,
                   i64(cap)])
            src, count = src2, count2
        return st.emit(room, src, n_entries, cap, owner, count, scratch, doc_entry, c.n_docs,
                       out_dtype)

    def _has_long(self, pstart, cap: int) -> bool:
        """Whether a span may have LONG_PIECE symbols (L + 1 >= LONG_PIECE); a device that
        keeps the entry starts on it allocates the long workspace anyway."""
        if not self.st.host_memory:
            return True
        self.dev.fence()
        if cap < 2:
            return False
        return int(np.diff(pstart[:cap].astype(np.int64)).max()) + 1 >= LONG_PIECE


__all__ = ["SpmStages", "ENC_DONE"]
