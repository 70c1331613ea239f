// encode_o200k.cu: o200k / o200k_harmony pre-tokenization on the device, in byte coordinates
// (driven by gputok/backends/device_stages.py: DeviceStages.pretok for an o200k model).
//
// The o200k pattern has spans only a sequential matcher resolves (a mark after a non-letter,
// chained contractions; gputok/stages/scan_o200k.py's docstring). So instead of the window rule
// and sparse corrections of encode_pretok.cu, the text is cut at positions where a piece starts
// in every parse (THE O200K SPAN RULE), and the thread at each such position runs the pattern
// (THE O200K MATCHER) up to the next one: no regex, no host re-scan, exact by construction.
// Both rules live in common/o200k_rules.h (dialect-neutral); gputok/stages/scan_o200k.py is their
// Python reference.
//
// Kernels, in launch order (encode_pretok_marks first writes the host's segment marks):
//   encode_o200k_classify   cls[i] = o200k class of the character starting at byte i
//                           (ENC_O_CONT on continuation bytes, ENC_X outside segments and at n)
//   encode_o200k_spans      ent[i] = 1 where an entry starts: every byte is written by exactly
//                           one thread (the span that holds it, or itself outside segments), so
//                           thread order cannot matter
// then the entries kernels of encode_pretok.cu, as for every other pattern.
//
// Performance notes (to measure on a GPU): spans are words in prose and code; in CJK text a
// span runs from punctuation after a letter to the next such, a clause (tens of characters), so
// a warp's threads do unequal work there. The thread of a byte that starts no span returns after
// two class loads. Not tried yet: a warp-cooperative matcher for long spans.
#include "encode_common.cuh"
#include "common/o200k_rules.h"

extern "C" __global__ void encode_o200k_classify(const enc_u8* __restrict__ buf, enc_i64 n,
                                                 const enc_u8* __restrict__ mark,
                                                 const enc_u8* __restrict__ cls_table,
                                                 enc_u8* __restrict__ cls) {
  ENC_GRID_STRIDE(i, n + 1) { cls[i] = o200k_classify_at(buf, n, mark, cls_table, i); }
}

// The spans kernel's body, its flags to `out` (the kernel: EncEntFlags over ent; the native CPU
// device's one-call chunk: the list of starts, kernels/host_chunk.h).
template <class S>
__device__ __forceinline__ void enc_o200k_spans_into(const enc_u8* __restrict__ buf, enc_i64 n,
                                                     const enc_u8* __restrict__ mark,
                                                     const enc_u8* __restrict__ cls,
                                                     const enc_u8* __restrict__ letters,
                                                     enc_u32 n_letters, S& out) {
  O2Text t;
  enc_span_text(t, buf, mark, cls, letters, n_letters, n);
  enc_span_kernel(t, n, out);
}

extern "C" __global__ void encode_o200k_spans(const enc_u8* __restrict__ buf, enc_i64 n,
                                              const enc_u8* __restrict__ mark,
                                              const enc_u8* __restrict__ cls,
                                              const enc_u8* __restrict__ letters,
                                              enc_u32 n_letters, enc_u32* __restrict__ ent) {
  EncEntFlags out{ent};
  enc_o200k_spans_into(buf, n, mark, cls, letters, n_letters, out);
}
