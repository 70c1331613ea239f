// encode_spm.cu: SentencePiece BPE (SentencePiece .model files, SPM-style HF tokenizer.json) on
// a device (driven by gputok/backends/spm_device.py; the numpy reference of each kernel, named
// after it, is in gputok/stages/spm_arrays.py).
//
// The host marks the chunk (positions + bits, scattered by encode_pretok_marks): segment starts
// (ENC_SEG_START, with ENC_SPM_DUMMY where the dummy "▁" goes), token spans and user-defined
// pieces (ENC_OUTSIDE, ENC_SPECIAL_START: one entry each, their ids from the host). Then:
//
//   encode_spm_spans   ent[i] = 1 where an entry starts (THE SPM CUT), the sentinel at n; the
//                      entries come from encode_scan.cu + encode_entries_* as for BPE pieces
//   encode_spm_merge   every entry: THE SPM SYMBOLS, merged by THE COMPARATOR (short runs in
//                      place, long ones in rounds then block heaps), THE SPM EXPAND; the ids at
//                      scratch[pstart[e] + e ...] (a span of L bytes has at most L + 1), that
//                      offset in src[e], owner[e] = ENC_DONE: encode_emit.cu reads src as the
//                      entries' starts
//   encode_spm_fuse    SentencePiece without byte fallback: THE UNK RUN across spans, into new
//                      counts and starts (launched only for such models)
//
// A normaliser the kernels cannot read as they go (a charsmap, collapsed whitespace) rewrites
// the chunk first, its pieces (segments and token spans, in order) one thread each:
//   encode_spm_norm_len    each piece's length after THE SPM NORMALISER (a span: its own)
//   encode_spm_norm_write  each piece's bytes at its place (the lengths' exclusive scan)
// These take no user-defined pieces (their trie, THE USER-DEFINED MATCH, is left empty): a model
// with some normalises on the host here, on the native CPU in host_spm.h's one call.
//
// Performance notes (to measure on a GPU): one thread per span, as for byte-level pieces; spans
// are about a word (every "▁" after another character is a cut in Mistral's vocabulary), CJK
// runs longer. The symbol table is dense (4.4 MB, one load per character); the cut set and the
// pair table are THE PAIR PROBE's hash layout. On the native CPU device a chunk's whole sequence
// is one call (kernels/host_spm.h).
#include "encode_common.cuh"
#include "common/spm_norm_rules.h"
#include "common/spm_rules.h"

extern "C" __global__ void encode_spm_spans(
    const enc_u8* __restrict__ buf, enc_i64 n, const enc_u8* __restrict__ mark,
    const enc_u32* __restrict__ sym, const enc_u64* __restrict__ c_slots, enc_u32 c_bits,
    enc_u32 flags, enc_u32* __restrict__ ent) {
  EncSpm m;
  m.sym = sym;
  m.cuts.slots = c_slots;
  m.cuts.bits = c_bits;
  m.flags = flags;
  ENC_GRID_STRIDE(i, n + 2) { ent[i] = enc_spm_entry_at(m, buf, n, mark, i); }
}

extern "C" __global__ void encode_spm_merge(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ spec, const enc_u32* __restrict__ n_entries,
    const enc_u8* __restrict__ mark, const enc_u32* __restrict__ sym,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ fin,
    const enc_u32* __restrict__ byte_ids, enc_u32 flags, enc_u32 unk, enc_u32 space_id,
    enc_u32* __restrict__ scratch, enc_u32* __restrict__ count, enc_u32* __restrict__ src,
    enc_u32* __restrict__ owner, enc_u32* __restrict__ where_ws, enc_u32* __restrict__ nxt_ws,
    enc_u32* __restrict__ prv_ws, enc_u64* __restrict__ heap_ws, enc_u64* __restrict__ tree_ws,
    enc_u32* __restrict__ size_ws, enc_i64 cap) {
  EncSpm m;
  m.sym = sym;
  m.pairs.slots = t_slots;
  m.pairs.bits = t_bits;
  m.fin = fin;
  m.byte_ids = byte_ids;
  m.flags = flags;
  m.unk = unk;
  m.space_id = space_id;
  const EncLongWork ws{where_ws, nxt_ws, prv_ws, heap_ws, tree_ws, size_ws};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 s = pstart[e];
    const enc_u32 sp = spec[e];
    const enc_u32 o = s + (enc_u32)e;
    // a span is never the last entry; the sentinel reads no end (and its mark is never DUMMY)
    const enc_u32 end = sp == ENC_NORMAL ? pstart[e + 1] : s;
    const bool dummy = sp != ENC_GAP && (mark[s] & ENC_SPM_DUMMY) != 0;
    count[e] = enc_spm_entry(m, buf, s, end, sp, dummy, scratch + o, ws, o);
    src[e] = o;
    owner[e] = ENC_DONE;
  }
}

extern "C" __global__ void encode_spm_fuse(
    const enc_u32* __restrict__ pstart, const enc_u32* __restrict__ spec,
    const enc_u32* __restrict__ n_entries, const enc_u8* __restrict__ mark,
    const enc_u32* __restrict__ scratch, const enc_u32* __restrict__ src_in,
    const enc_u32* __restrict__ count_in, enc_u32 unk, enc_u32* __restrict__ src,
    enc_u32* __restrict__ count, enc_i64 cap) {
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 c = count_in[e];
    enc_u32 drop = 0;
    if (e > 0 && c > 0) {
      const enc_u32 pc = count_in[e - 1];
      drop = enc_spm_fuse_drop(unk, spec[e], spec[e - 1], (mark[pstart[e]] & ENC_SEG_START) != 0,
                               scratch[src_in[e]], c, pc ? scratch[src_in[e - 1] + pc - 1] : 0u,
                               pc);
    }
    src[e] = src_in[e] + drop;
    count[e] = c - drop;
  }
}

extern "C" __global__ void encode_spm_norm_len(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ p_src,
    const enc_u32* __restrict__ p_len, const enc_u8* __restrict__ p_kind, enc_i64 n_pieces,
    const enc_u32* __restrict__ units, enc_u32 n_units, const enc_u8* __restrict__ strings,
    enc_u32 n_strings, enc_u32 nflags, enc_u32* __restrict__ out_len) {
  const EncCharsMap cm{units, n_units, strings, n_strings, nflags};
  ENC_GRID_STRIDE(k, n_pieces) {
    if (p_kind[k]) {  // a token span: its bytes as they are
      out_len[k] = p_len[k];
    } else {
      EncNormOut o{nullptr, false, 0, 0, 0};
      out_len[k] = enc_spm_normalize(cm, buf, p_src[k], p_src[k] + p_len[k], o);
    }
  }
}

extern "C" __global__ void encode_spm_norm_write(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ p_src,
    const enc_u32* __restrict__ p_len, const enc_u8* __restrict__ p_kind, enc_i64 n_pieces,
    const enc_u32* __restrict__ units, enc_u32 n_units, const enc_u8* __restrict__ strings,
    enc_u32 n_strings, enc_u32 nflags, const enc_u32* __restrict__ p_dst,
    const enc_u32* __restrict__ out_len, enc_u8* __restrict__ out) {
  const EncCharsMap cm{units, n_units, strings, n_strings, nflags};
  ENC_GRID_STRIDE(k, n_pieces) {
    if (p_kind[k]) {
      for (enc_u32 q = 0; q < p_len[k]; ++q) out[p_dst[k] + q] = buf[p_src[k] + q];
    } else {
      EncNormOut o{out + p_dst[k], true, out_len[k], 0, 0};
      enc_spm_normalize(cm, buf, p_src[k], p_src[k] + p_len[k], o);
    }
  }
}

