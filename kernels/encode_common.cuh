// encode_common.cuh: the CUDA side of the encode kernels (encode_pretok.cu, encode_scan.cu,
// encode_merge.cu, encode_emit.cu), driven by gputok/backends/driver.py.
//
// What each element computes (UTF-8, classes, the pre-tokenizer's rules, hashes, the merge
// rule, ...) and every constant shared with Python live in common/encode_rules.h, written once
// for CUDA and Metal (shaders/encode_*.metal); this file adds only the CUDA launch form.
//
// Every kernel is a grid-stride loop, so any grid size is correct; the host caps grids at a few
// blocks per SM, the emulator tests run tiny grids in three thread orders.
#pragma once

#include "common/encode_rules.h"

// (a host compiler gets its own form from kernels/dialect_host.h: a block's threads as one loop)
#ifndef ENC_GRID_STRIDE
#define ENC_GRID_STRIDE(i, n)                                                    \
  for (enc_i64 i = (enc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (enc_i64)(n); \
       i += (enc_i64)gridDim.x * blockDim.x)
#endif
// (the host dialect's loop may skip elements a kernel wrote itself; a GPU thread has one)
#ifndef ENC_SKIP_TO
#define ENC_SKIP_TO(i, next) ((void)(next))
#endif

// The body of a span kernel (encode_pretok_spans, encode_o200k_spans): THE SPAN WALK
// (common/encode_pretok_rules.h) at every byte of [0, n), the sentinel entry at n, and
// flag 0 at n + 1, which ends the scan; the flags go to `out` (EncEntFlags: the ent array).
template <class T, class S>
__device__ __forceinline__ void enc_span_kernel(const T& t, enc_i64 n, S& out) {
  ENC_GRID_STRIDE(i, n + 2) {
    if (i >= n) {
      enc_ent_put(out, i, i == n ? 1u : 0u);
    } else {
      const enc_i64 next = enc_spans_into(t, i, out);
      ENC_SKIP_TO(i, next);  // a CPU loop skips the span's bytes (their threads do nothing)
    }
  }
}
