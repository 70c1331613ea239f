"""The Metal forms of the SentencePiece kernels (``kernels/encode_spm.cu``), for ``MetalDevice``
(``device.py``).

Each ``_k_<kernel>`` takes the CUDA kernel's arguments (``backends/spm_device.py`` launches
them) and runs ``shaders/<kernel>.metal``: outputs are fresh buffers there, so the merge's
workspaces are outputs too, and the fuse writes new starts and counts from the merge's.
"""

from __future__ import annotations

SPM_SHADERS = ("encode_spm_spans", "encode_spm_merge", "encode_spm_fuse", "encode_spm_norm_len",
               "encode_spm_norm_write")


class SpmMetalSteps:
    """A base of ``MetalDevice`` (its ``_run`` runs a shader; its step table takes these
    ``_k_`` members as its own)."""

    def _k_encode_spm_spans(self, g, b, args) -> None:
        buf, n, mark, sym, c_slots, c_bits, flags, ent = args
        (ent.a,) = self._run("encode_spm_spans", g, b, [buf, mark, sym, c_slots, n, c_bits, flags],
                             [ent.size])

    def _k_encode_spm_merge(self, g, b, args) -> None:
        (buf, pstart, spec, n_entries, mark, sym, t_slots, t_bits, fin, byte_ids, flags, unk,
         space_id, scratch, count, src, owner, where, nxt, prv, heap, tree, size, cap) = args
        outs = self._run(
            "encode_spm_merge", g, b,
            [buf, pstart, spec, mark, sym, t_slots, fin, byte_ids, n_entries, t_bits, flags, unk,
             space_id, cap],
            [h.size for h in (scratch, count, src, owner, where, nxt, prv, heap, tree, size)],
            init_value=0)
        for h, o in zip((scratch, count, src, owner, where, nxt, prv, heap, tree, size), outs):
            h.a = o

    def _k_encode_spm_fuse(self, g, b, args) -> None:
        pstart, spec, n_entries, mark, scratch, src_in, count_in, unk, src, count, cap = args
        src.a, count.a = self._run(
            "encode_spm_fuse", g, b,
            [pstart, spec, mark, scratch, src_in, count_in, n_entries, unk, cap],
            [src.size, count.size], init_value=0)

    def _k_encode_spm_norm_len(self, g, b, args) -> None:
        buf, src, ln, kind, n_pieces, units, n_units, strings, n_strings, nflags, out_len = args
        (out_len.a,) = self._run(
            "encode_spm_norm_len", g, b,
            [buf, src, ln, kind, units, strings, n_pieces, n_units, n_strings, nflags],
            [out_len.size])

    def _k_encode_spm_norm_write(self, g, b, args) -> None:
        (buf, src, ln, kind, n_pieces, units, n_units, strings, n_strings, nflags, dst, out_len,
         out) = args
        (out.a,) = self._run(
            "encode_spm_norm_write", g, b,
            [buf, src, ln, kind, units, strings, dst, out_len, n_pieces, n_units, n_strings,
             nflags], [out.size])

