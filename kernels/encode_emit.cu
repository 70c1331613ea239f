// encode_emit.cu: the ragged output of a chunk (driven by gputok/backends/driver.py).
//
// After encode_merge.cu every entry e has count[e] ids in scratch at pstart[owner] (its own
// pstart unless it duplicates another entry). The host scans count exclusively in place
// (encode_scan.cu), so out_off[e] is where entry e's ids go and out_off[e + 1] - out_off[e] how
// many there are (count has one slot past the last entry, zero, so out_off[n_entries] is the
// total). Then:
//   encode_emit_u16 / encode_emit_u32   copy each entry's ids to out[out_off[e] ...] in the
//                                       output dtype (uint16 when the vocabulary fits)
//   encode_doc_offsets                  out_doc[d] = out_off[doc_entry[d]] (int64)
// The copy itself is common/encode_rules.h's enc_emit_ids (shared with the Metal shaders).
#include "encode_common.cuh"

template <class T>
__device__ __forceinline__ void enc_emit(const enc_u32* __restrict__ n_entries,
                                         const enc_u32* __restrict__ pstart,
                                         const enc_u32* __restrict__ owner,
                                         const enc_u32* __restrict__ out_off,
                                         const enc_u32* __restrict__ scratch, T* __restrict__ out,
                                         enc_i64 cap) {
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 dst = out_off[e];
    const enc_u32 c = out_off[e + 1] - dst;
    if (c == 0) continue;
    const enc_u32 o = owner[e];
    const enc_u32 src = pstart[(o == ENC_DONE) ? (enc_u32)e : o];
    enc_emit_ids<T>(scratch, src, c, out, dst);
  }
}

extern "C" __global__ void encode_emit_u16(const enc_u32* __restrict__ n_entries,
                                           const enc_u32* __restrict__ pstart,
                                           const enc_u32* __restrict__ owner,
                                           const enc_u32* __restrict__ out_off,
                                           const enc_u32* __restrict__ scratch,
                                           enc_u16* __restrict__ out, enc_i64 cap) {
  enc_emit<enc_u16>(n_entries, pstart, owner, out_off, scratch, out, cap);
}

extern "C" __global__ void encode_emit_u32(const enc_u32* __restrict__ n_entries,
                                           const enc_u32* __restrict__ pstart,
                                           const enc_u32* __restrict__ owner,
                                           const enc_u32* __restrict__ out_off,
                                           const enc_u32* __restrict__ scratch,
                                           enc_u32* __restrict__ out, enc_i64 cap) {
  enc_emit<enc_u32>(n_entries, pstart, owner, out_off, scratch, out, cap);
}

extern "C" __global__ void encode_doc_offsets(const enc_u32* __restrict__ doc_entry,
                                              const enc_u32* __restrict__ out_off,
                                              enc_i64 n_docs1, enc_i64* __restrict__ out_doc) {
  ENC_GRID_STRIDE(d, n_docs1) { out_doc[d] = (enc_i64)out_off[doc_entry[d]]; }
}
