// encode_pretok.cu: regex pre-tokenization on the GPU, in byte coordinates (driven by
// gputok/backends/driver.py).
//
// This is gputok/stages/scan.py's method (read its module docstring first), for the cl100k
// family (cl100k, Llama 3, Qwen2) and GPT-2 (r50k, p50k). Differences are only of coordinates:
// scan.py works on code points with separator characters (class X) between documents; here
// every byte of the chunk has a slot, a character's class sits on its first byte (continuation
// bytes hold ENC_CONT), and the host's per-byte marks say where segments (documents, or the text
// between special tokens) start and end, so "previous / next character" stops at a segment
// boundary exactly where scan.py sees a separator.
//
// Kernels, in launch order:
//   encode_pretok_marks      scatter the host's marks (position, bits) into mark[]
//   encode_pretok_classify   cls[i] = class of the character starting at byte i (table lookup)
//   encode_pretok_runs       runv[i] = i + 1 where a run of one class starts (whitespace SP|S
//                            counts as one class), ischar[i] = 1 at character starts; the host
//                            max-scans runv (-> run start + 1) and sum-scans ischar (-> char index)
//   encode_pretok_window     ent[i] = 1 where a piece starts: the pair-table rule
//                            PAIR[k[i-1], k[i]] & (B_PAIR | NEXT(k[i+1]) | PREV2(k[i-2])),
//                            segment starts, special-token starts, and the sentinel at n;
//                            ws_next[run start] = class after each whitespace run
//   encode_pretok_fix        the sparse corrections where PAIR has B_SPECIAL: contractions,
//                            digit groups, whitespace after CR/LF (reads only what the earlier
//                            launches wrote, so thread order cannot matter)
// then the host sum-scans ent exclusively (encode_scan.cu) and:
//   encode_entries_compact   pstart[scan[i]] = i for every flagged i; spec = ENC_NORMAL, the
//                            sentinel ENC_GAP
//   encode_entries_specials  spec of each special-token entry = its id
//   encode_doc_entries       doc_entry[d] = scan[doc_off[d]] (the document's first entry)
//
// Performance notes (to measure on a GPU): the window kernel re-derives neighbour classes by
// stepping back over continuation bytes (at most 3 + 3 loads from L1) instead of compacting to
// code points first: one pass less over memory. runs/window/fix could be fused once the
// per-kernel times are known; ent/runv/ischar are uint32 so one scan kernel serves all (uint8
// flags would cut the scan's reads by 4).
// What each byte computes (classes, runs, THE WINDOW RULE, THE FIX RULE) is written once in
// common/encode_rules.h, shared with shaders/encode_pretok_*.metal; here: the loops and stores.
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

extern "C" __global__ void encode_pretok_runs(enc_i64 n, const enc_u8* __restrict__ mark,
                                              const enc_u8* __restrict__ cls,
                                              enc_u32* __restrict__ runv,
                                              enc_u32* __restrict__ ischar) {
  ENC_GRID_STRIDE(i, n) {
    enc_u32 c;
    runv[i] = enc_runs_at(mark, cls, i, &c);
    ischar[i] = c;
  }
}

extern "C" __global__ void encode_pretok_window(
    const enc_u8* __restrict__ buf, enc_i64 n, const enc_u8* __restrict__ mark,
    const enc_u8* __restrict__ cls, const enc_u8* __restrict__ pair, int pair_bits,
    int next_lo, int next_n, int prev2_lo, int prev2_n, const enc_u32* __restrict__ runstart,
    int track_ws, enc_u8* __restrict__ ws_next, enc_u32* __restrict__ ent) {
  const EncPretokRule r{pair,    pair_bits, next_lo, next_n, prev2_lo, prev2_n,
                        nullptr, 0,         0,       0,      0};
  ENC_GRID_STRIDE(i, n + 2) {
    const EncWindow w = enc_window_at(buf, n, mark, cls, r, runstart, track_ws, i);
    ent[i] = w.ent;
    if (w.ws_at >= 0) ws_next[w.ws_at] = w.ws;
  }
}

extern "C" __global__ void encode_pretok_fix(
    const enc_u8* __restrict__ buf, enc_i64 n, const enc_u8* __restrict__ mark,
    const enc_u8* __restrict__ cls, const enc_u8* __restrict__ pair, int pair_bits,
    const enc_u8* __restrict__ letters, enc_u32 n_letters, const enc_u32* __restrict__ runstart,
    const enc_u32* __restrict__ cidx, const enc_u8* __restrict__ ws_next, int gpt2,
    int digit_group, int end_whole, enc_u32* ent) {
  const EncPretokRule r{pair, pair_bits, 0, 0, 0, 0, letters, n_letters, gpt2, digit_group,
                        end_whole};
  ENC_GRID_STRIDE(i, n) {
    const EncFix f = enc_fix_at(buf, n, mark, cls, r, runstart, cidx, ws_next, i);
    if (f.clear_at >= 0) ent[f.clear_at] = 0;
    if (f.set_at >= 0) ent[f.set_at] = 1;
  }
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
