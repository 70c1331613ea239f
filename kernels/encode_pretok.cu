// encode_pretok.cu: regex pre-tokenization on the GPU, in byte coordinates (driven by
// gputok/backends/device_stages.py: DeviceStages.pretok).
//
// For the cl100k family (cl100k, Llama 3, Qwen2) and GPT-2 (r50k, p50k, HF's ByteLevel): the
// text is cut at positions where a piece starts in every parse (THE CL SPAN RULE), and the
// thread at each such position runs the pattern (THE CL MATCHER) up to the next one: no regex,
// no host re-scan, exact by construction. gputok/stages/scan_cl.py states both rules in Python
// and says why they hold; o200k takes the same route with its own rules (encode_o200k.cu).
// Coordinates: every byte of the chunk has a slot, a character's class sits on its first byte
// (continuation bytes hold ENC_CONT), and the host's per-byte marks say where segments
// (documents, or the text between special tokens) start and end, so "the next character" stops
// at a segment boundary.
//
// Kernels, in launch order:
//   encode_pretok_marks      scatter the host's marks (position, bits) into mark[]
//   encode_pretok_classify   cls[i] = class of the character starting at byte i (table lookup)
//   encode_pretok_spans      ent[i] = 1 where an entry starts: every byte is written by exactly
//                            one thread (the span that holds it, or itself outside segments),
//                            so thread order cannot matter; the sentinel at n
// then the host sum-scans ent exclusively (encode_scan.cu) and:
//   encode_entries_compact   pstart[scan[i]] = i for every flagged i; spec = ENC_NORMAL, the
//                            sentinel ENC_GAP
//   encode_entries_specials  spec of each special-token entry = its id
//   encode_doc_entries       doc_entry[d] = scan[doc_off[d]] (the document's first entry)
//
// Performance notes: the spans kernel replaced a window rule over class pairs with sparse
// corrections (runs, window, fix: three kernels and two scans, ~16 ns per byte of cl100k prose
// on one CPU core; before and after: bench/results/native-spans-2026-11-23.md at faa7536). The
// thread of a byte that starts no span returns after two class loads; on a GPU, a warp's
// threads do unequal work where spans are long (CJK clauses), as for o200k. Not tried yet: a
// warp-cooperative matcher.
// What each byte computes (classes, THE CL SPAN RULE, THE CL MATCHER) is written once in
// common/encode_pretok_rules.h, shared with shaders/encode_pretok_*.metal; here: the loops and
// stores.
#include "encode_common.cuh"

extern "C" __global__ void encode_pretok_marks(const enc_u32* __restrict__ pos,
                                               const enc_u8* __restrict__ bits, enc_i64 count,
                                               enc_u8* __restrict__ mark) {
  // positions are unique (the host merged the bits of coinciding marks)
  ENC_GRID_STRIDE(k, count) { mark[pos[k]] = bits[k]; }
}

extern "C" __global__ void encode_pretok_classify(const enc_u8* __restrict__ buf, enc_i64 n,
                                                  const enc_u8* __restrict__ mark,
                                                  const enc_u8* __restrict__ cls_table,
                                                  enc_u8* __restrict__ cls) {
  ENC_GRID_STRIDE(i, n + 1) { cls[i] = enc_classify_at(buf, n, mark, cls_table, i); }
}

// The spans kernel's body, its flags to `out` (the kernel: EncEntFlags over ent; the native CPU
// device's one-call chunk: the list of starts, kernels/host_chunk.h).
template <class S>
__device__ __forceinline__ void enc_pretok_spans_into(const enc_u8* __restrict__ buf, enc_i64 n,
                                                      const enc_u8* __restrict__ mark,
                                                      const enc_u8* __restrict__ cls,
                                                      const enc_u8* __restrict__ letters,
                                                      enc_u32 n_letters, int gpt2,
                                                      int digit_group, int end_whole, S& out) {
  EncClText t;
  enc_span_text(t, buf, mark, cls, letters, n_letters, n);
  t.gpt2 = gpt2;
  t.digit_group = digit_group;
  t.end_whole = end_whole;
  enc_span_kernel(t, n, out);
}

extern "C" __global__ void encode_pretok_spans(const enc_u8* __restrict__ buf, enc_i64 n,
                                               const enc_u8* __restrict__ mark,
                                               const enc_u8* __restrict__ cls,
                                               const enc_u8* __restrict__ letters,
                                               enc_u32 n_letters, int gpt2, int digit_group,
                                               int end_whole, enc_u32* __restrict__ ent) {
  EncEntFlags out{ent};
  enc_pretok_spans_into(buf, n, mark, cls, letters, n_letters, gpt2, digit_group, end_whole,
                        out);
}

extern "C" __global__ void encode_entries_compact(const enc_u32* __restrict__ scan, enc_i64 n,
                                                  enc_u32* __restrict__ pstart,
                                                  enc_u32* __restrict__ spec) {
  ENC_GRID_STRIDE(i, n + 1) {
    const enc_u32 e = scan[i];
    if (scan[i + 1] != e) {
      pstart[e] = (enc_u32)i;
      spec[e] = i == n ? ENC_GAP : ENC_NORMAL;
    }
  }
}

extern "C" __global__ void encode_entries_specials(const enc_u32* __restrict__ scan,
                                                   const enc_u32* __restrict__ sp_pos,
                                                   const enc_u32* __restrict__ sp_id,
                                                   enc_i64 count, enc_u32* __restrict__ spec) {
  ENC_GRID_STRIDE(k, count) { spec[scan[sp_pos[k]]] = sp_id[k]; }
}

extern "C" __global__ void encode_doc_entries(const enc_u32* __restrict__ scan,
                                              const enc_u32* __restrict__ doc_off,
                                              enc_i64 n_docs1, enc_u32* __restrict__ doc_entry) {
  ENC_GRID_STRIDE(d, n_docs1) { doc_entry[d] = scan[doc_off[d]]; }
}
