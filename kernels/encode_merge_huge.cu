// encode_merge_huge.cu: every piece of ENC_HUGE_PIECE bytes or more merged by a whole block of
// threads (common/encode_merge_huge.h: THE COMPARATOR in rounds over all the piece's pairs),
// before encode_merge_short / encode_merge_long (kernels/encode_merge.cu), which then skip it:
// its ids are final in scratch at its start, count[e] of them, owner[e] = ENC_DONE (what
// encode_piece_kind leaves for a whole token, so emit needs nothing new).
//
// GPUs only (the native CPU device merges every long piece on one thread, where that is fast:
// kernels/dialect_host.h has no barriers). A block looks at blockDim entries at a time (a grid
// stride), queues the huge ones in shared memory and merges them one after another, all its
// threads on each; a chunk with no huge piece costs one pass over its entries.
//
// Workspace (gputok/backends/device_stages.py): the long pieces' per-byte arrays (prio_ws,
// nxt_ws, prv_ws: uint32; heap_ws: uint64), each piece using its own byte range, and seg_ws
// (uint32, 6 * (n / ENC_HUGE_SEG + 2)): three words per segment (enc_huge_seg_base).
#include "encode_common.cuh"
#include "common/encode_merge_huge.h"

extern "C" __global__ void __launch_bounds__(ENC_HUGE_BLOCK) encode_merge_huge(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ n_entries, enc_u32* __restrict__ owner,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ byte_ids,
    enc_u32* __restrict__ scratch, enc_u32* __restrict__ prio_ws, enc_u32* __restrict__ nxt_ws,
    enc_u32* __restrict__ prv_ws, enc_u64* __restrict__ heap_ws, enc_u32* __restrict__ seg_ws,
    enc_u32* __restrict__ count, enc_i64 cap) {
  __shared__ enc_u32 s_min[4];
  __shared__ enc_u32 s_fk[ENC_HUGE_BLOCK];
  __shared__ enc_u32 s_dirty[ENC_HUGE_BLOCK];
  __shared__ enc_u32 s_queue[ENC_HUGE_BLOCK];
  __shared__ enc_u32 s_queued;
  const EncMergeTable t{t_slots, t_bits};
  const enc_u32 tid = threadIdx.x, nt = blockDim.x;
  const enc_i64 n_ent = (enc_i64)*n_entries < cap ? (enc_i64)*n_entries : cap;
  for (enc_i64 base = (enc_i64)blockIdx.x * nt; base < n_ent; base += (enc_i64)gridDim.x * nt) {
    if (tid == 0) s_queued = 0;
    __syncthreads();
    const enc_i64 e = base + tid;
    if (e < n_ent && owner[e] == (enc_u32)e && pstart[e + 1] - pstart[e] >= ENC_HUGE_PIECE)
      s_queue[atomicAdd(&s_queued, 1u)] = (enc_u32)e;
    __syncthreads();
    const enc_u32 queued = s_queued;
    for (enc_u32 k = 0; k < queued; ++k) {
      const enc_u32 q = s_queue[k], s = pstart[q];
      EncHuge h;
      h.ids = scratch + s;
      h.pr = prio_ws + s;
      h.nxt = nxt_ws + s;
      h.prv = prv_ws + s;
      h.lr = heap_ws + s;
      h.seg = seg_ws + enc_huge_seg_base(s);
      h.len = pstart[q + 1] - s;
      h.nseg = (h.len + ENC_HUGE_SEG - 1) / ENC_HUGE_SEG;
      h.per = (h.nseg + nt - 1) / nt;
      const enc_u32 c = enc_merge_huge_piece(t, buf + s, byte_ids, h, tid, nt, s_min, s_fk,
                                             s_dirty);
      if (tid == 0) {
        count[q] = c;
        owner[q] = ENC_DONE;
      }
    }
    __syncthreads();  // (s_queue is read to the end before the next stride refills it)
  }
}
