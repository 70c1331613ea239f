// encode_scan.cu: prefix sums over uint32 arrays (modulo 2^32), reduce-then-scan.
//
// Used by the encode pipeline (gputok/backends/device_stages.py) for: entry indices (exclusive
// sum of the piece-start flags), output offsets (exclusive sum of the token counts), and the
// normaliser's flagged positions.
//
// A tile is ENC_SCAN_BLOCK threads x ENC_SCAN_ITEMS elements. For n elements in T tiles:
//   encode_scan_reduce_add(in, n, tile_out)       one block per tile: tile_out[b] = sum of tile b
//   (the host scans tile_out recursively, exclusively: the carry into each tile)
//   encode_scan_apply_add(in, out, n, carry, use_carry, exclusive)
//                                                 one block per tile: the tile's scan, combined
//                                                 with carry[b]; out may be in (in place).
// n <= one tile needs only the apply kernel with use_carry = 0. Each block reads its whole tile
// into shared memory before writing any of it, and tiles are disjoint, so in-place is safe.
#include "encode_common.cuh"

#ifndef ENC_SCAN_BLOCK
#define ENC_SCAN_BLOCK 256  // threads per block (a power of two)
#endif
#ifndef ENC_SCAN_ITEMS
#define ENC_SCAN_ITEMS 8  // elements per thread
#endif
#define ENC_SCAN_TILE (ENC_SCAN_BLOCK * ENC_SCAN_ITEMS)

__device__ __forceinline__ void enc_scan_reduce(const enc_u32* __restrict__ in, enc_i64 n,
                                                enc_u32* __restrict__ tile_out) {
  __shared__ enc_u32 s_acc[ENC_SCAN_BLOCK];
  const enc_i64 base = (enc_i64)blockIdx.x * ENC_SCAN_TILE;
  enc_u32 acc = 0;
  for (int k = 0; k < ENC_SCAN_ITEMS; ++k) {
    const enc_i64 idx = base + (enc_i64)k * ENC_SCAN_BLOCK + threadIdx.x;  // coalesced
    if (idx < n) acc += in[idx];
  }
  s_acc[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned stride = ENC_SCAN_BLOCK / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride)
      s_acc[threadIdx.x] += s_acc[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) tile_out[blockIdx.x] = s_acc[0];
}

__device__ __forceinline__ void enc_scan_apply(const enc_u32* in, enc_u32* out, enc_i64 n,
                                               const enc_u32* carry, int use_carry,
                                               int exclusive) {
  __shared__ enc_u32 s_tile[ENC_SCAN_TILE];
  __shared__ enc_u32 s_sum[ENC_SCAN_BLOCK];
  const enc_i64 base = (enc_i64)blockIdx.x * ENC_SCAN_TILE;
  const unsigned t = threadIdx.x;
  for (int k = 0; k < ENC_SCAN_ITEMS; ++k) {
    const enc_i64 idx = base + (enc_i64)k * ENC_SCAN_BLOCK + t;
    s_tile[k * ENC_SCAN_BLOCK + t] = idx < n ? in[idx] : 0u;
  }
  __syncthreads();
  // each thread scans its ENC_SCAN_ITEMS consecutive elements
  enc_u32 v[ENC_SCAN_ITEMS];
  enc_u32 run = 0;
  for (int k = 0; k < ENC_SCAN_ITEMS; ++k) {
    v[k] = s_tile[t * ENC_SCAN_ITEMS + k];
    run += v[k];
  }
  s_sum[t] = run;
  __syncthreads();
  // inclusive scan of the thread totals (Hillis-Steele; ENC_SCAN_BLOCK is small)
  for (unsigned off = 1; off < ENC_SCAN_BLOCK; off <<= 1) {
    const enc_u32 add = t >= off ? s_sum[t - off] : 0u;
    __syncthreads();
    s_sum[t] += add;
    __syncthreads();
  }
  enc_u32 prefix = t > 0 ? s_sum[t - 1] : 0u;
  if (use_carry) prefix += carry[blockIdx.x];
  for (int k = 0; k < ENC_SCAN_ITEMS; ++k) {
    const enc_u32 incl = prefix + v[k];
    s_tile[t * ENC_SCAN_ITEMS + k] = exclusive ? prefix : incl;
    prefix = incl;
  }
  __syncthreads();
  for (int k = 0; k < ENC_SCAN_ITEMS; ++k) {
    const enc_i64 idx = base + (enc_i64)k * ENC_SCAN_BLOCK + t;
    if (idx < n) out[idx] = s_tile[k * ENC_SCAN_BLOCK + t];
  }
}

extern "C" __global__ void encode_scan_reduce_add(const enc_u32* __restrict__ in, enc_i64 n,
                                                  enc_u32* __restrict__ tile_out) {
  enc_scan_reduce(in, n, tile_out);
}

extern "C" __global__ void encode_scan_apply_add(const enc_u32* in, enc_u32* out, enc_i64 n,
                                                 const enc_u32* carry, int use_carry,
                                                 int exclusive) {
  enc_scan_apply(in, out, n, carry, use_carry, exclusive);
}
