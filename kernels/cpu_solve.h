// cpu_solve.h: host only. What the per-document pass (kernels/cpu_encode.h) and its segment
// loop (kernels/cpu_window.h) share: the model's tables as the pass reads them (EncCpuModel), a
// thread's workspace (EncCpuWork), and the ids of one piece that is not in the cache
// (enc_cpu_solve: a whole token, else the merge rule).
#pragma once

#include "common/encode_rules.h"
#include "common/o200k_rules.h"
#include "cpu_text.h"
#include "cpu_cache.h"

#ifndef ENC_HOST_EXPORT
#define ENC_HOST_EXPORT extern "C" __attribute__((visibility("default")))
#endif

// The words that describe a model to this pass (native/perdoc.py, _Model): the tables' addresses,
// then the scalars, as host_chunk.h's ENC_TAB_* with the longest whole token's length after.
enum {
  ENC_CPU_TAB_W_SLOTS,
  ENC_CPU_TAB_W_TOK_BYTES,
  ENC_CPU_TAB_T_SLOTS,
  ENC_CPU_TAB_BYTE_IDS,
  ENC_CPU_TAB_JOIN,
  ENC_CPU_TAB_CLS_TABLE,
  ENC_CPU_TAB_LETTERS,
  ENC_CPU_TAB_W_BITS,
  ENC_CPU_TAB_T_BITS,
  ENC_CPU_TAB_N_LETTERS,
  ENC_CPU_TAB_O200K,
  ENC_CPU_TAB_GPT2,
  ENC_CPU_TAB_DIGIT_GROUP,
  ENC_CPU_TAB_END_WHOLE,
  ENC_CPU_TAB_W_MAX_LEN,
  ENC_CPU_TAB_NIBBLES,
  ENC_CPU_TAB_WORDS
};

struct EncCpuModel {
  EncMergeTable t;
  EncWholeTable w;
  const enc_u32* byte_ids;
  const enc_u32* join;
  const enc_u8* cls_table;
  const enc_u8* letters;
  enc_u32 n_letters;
  int o200k, gpt2, digit_group, end_whole;
  enc_u32 w_max_len;  // no token is longer: a longer piece skips the whole-token lookup
  const enc_u8* nibbles;  // THE ASCII NIBBLES of the class table (cpu_text.h)
};

inline EncCpuModel enc_cpu_model(const enc_u64* tab) {
  EncCpuModel m;
  m.t.slots = reinterpret_cast<const enc_u64*>(tab[ENC_CPU_TAB_T_SLOTS]);
  m.t.bits = (enc_u32)tab[ENC_CPU_TAB_T_BITS];
  m.w.slots = reinterpret_cast<const enc_u32*>(tab[ENC_CPU_TAB_W_SLOTS]);
  m.w.tok_bytes = reinterpret_cast<const enc_u8*>(tab[ENC_CPU_TAB_W_TOK_BYTES]);
  m.w.bits = (enc_u32)tab[ENC_CPU_TAB_W_BITS];
  m.byte_ids = reinterpret_cast<const enc_u32*>(tab[ENC_CPU_TAB_BYTE_IDS]);
  m.join = reinterpret_cast<const enc_u32*>(tab[ENC_CPU_TAB_JOIN]);
  m.cls_table = reinterpret_cast<const enc_u8*>(tab[ENC_CPU_TAB_CLS_TABLE]);
  m.letters = reinterpret_cast<const enc_u8*>(tab[ENC_CPU_TAB_LETTERS]);
  m.n_letters = (enc_u32)tab[ENC_CPU_TAB_N_LETTERS];
  m.o200k = (int)tab[ENC_CPU_TAB_O200K];
  m.gpt2 = (int)tab[ENC_CPU_TAB_GPT2];
  m.digit_group = (int)tab[ENC_CPU_TAB_DIGIT_GROUP];
  m.end_whole = (int)tab[ENC_CPU_TAB_END_WHOLE];
  m.w_max_len = (enc_u32)tab[ENC_CPU_TAB_W_MAX_LEN];
  m.nibbles = reinterpret_cast<const enc_u8*>(tab[ENC_CPU_TAB_NIBBLES]);
  return m;
}

// A thread's workspace: a short piece's run (enc_merge_step, in L1), a long piece's arrays
// (grown to the longest piece met, kept), and the cache counts of its pieces.
struct EncCpuWork {
  enc_u32 ids[ENC_LONG_PIECE];
  enc_u32 pr[ENC_LONG_PIECE];
  enc_u32* w32 = nullptr;  // where, nxt, prv (len each), size (units)
  enc_u64* w64 = nullptr;  // heap (len), tree (2 units)
  enc_u64 long_cap = 0;
  enc_u64 lookups = 0, hits = 0, inserts = 0;
  EncCpuBuf text;  // the text being encoded, padded (cpu_text.h)
  struct EncCpuWindow* window;  // the segment loop's (cpu_window.h)
  EncCpuWork();
  ~EncCpuWork();
  // room for a long piece of len bytes; false without memory
  bool reserve_long(enc_u64 len) {
    if (len <= long_cap) return true;
    free(w32);
    free(w64);
    const enc_u64 units = len / ENC_LONG_PIECE + 2;
    w32 = static_cast<enc_u32*>(malloc(4 * (3 * len + units)));
    w64 = static_cast<enc_u64*>(malloc(8 * (len + 2 * units)));
    long_cap = (w32 != nullptr && w64 != nullptr) ? len : 0;
    return long_cap != 0;
  }
};

// The ids of a piece that is not in the cache: a whole token, else merged. Returns the count,
// or -1 without memory for a long piece's workspace. out has room for len ids. hash: THE BYTES
// HASH of the piece when has_hash.
//
// Performance notes: tried and dropped: misses of 32 or 64 bytes and more merged by
// enc_merge_long_piece (O(L log L)) instead of enc_merge_step's lanes (a scan of every pair per
// merge, O(L^2)), in the window and here. Though the merge rule is ~55% of the instructions of o200k
// multilingual's first pass (callgrind, 0.5 MB), that pass ran no faster (3 MB, one thread,
// thread CPU time, four interleaved runs: 35.5 / 36.5 MB/s against 37.4 for the lanes).
__forceinline__ int enc_cpu_solve(const EncCpuModel& m, EncCpuWork& wk, const enc_u8* p,
                                  enc_u32 len, enc_u64 hash, bool has_hash, enc_u32* out) {
  if (m.w.bits != 0 && len <= m.w_max_len) {
    const enc_u32 id = enc_whole_lookup(m.w, p, len, has_hash ? hash : enc_bytes_hash(p, len));
    if (id != ENC_NO_MERGE) {
      out[0] = id;
      return 1;
    }
  }
  if (len < ENC_LONG_PIECE) {
    EncMergeRun r;
    enc_merge_short_begin(m.t, r, p, m.byte_ids, wk.ids, wk.pr, len);
    r.roomy = true;  // (wk's arrays: ENC_LONG_PIECE each, see encode_merge.cu's lanes)
    while (enc_merge_step(m.t, r)) {
    }
    for (enc_u32 k = 0; k < r.len; ++k) out[k] = wk.ids[k];
    return (int)r.len;
  }
  if (!wk.reserve_long(len)) return -1;
  EncLongWork ws;
  ws.where = wk.w32;
  ws.nxt = wk.w32 + len;
  ws.prv = wk.w32 + 2 * (enc_u64)len;
  ws.size = wk.w32 + 3 * (enc_u64)len;
  ws.heap = wk.w64;
  ws.tree = wk.w64 + len;
  return (int)enc_merge_long_piece(m.t, p, m.byte_ids, m.join, out, ws, 0, len);
}
