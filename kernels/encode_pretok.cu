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
#include "encode_common.cuh"

// scan.py's pair-table bits beyond the window bits of encode_common.cuh
#ifndef ENC_B_SPECIAL
#define ENC_B_SPECIAL 16
#endif

__device__ __forceinline__ enc_u8 enc_run_class(enc_u8 c) { return c == ENC_S ? ENC_SP : c; }

// first byte of the character before the one starting at i (i is not a segment start)
__device__ __forceinline__ enc_i64 enc_prev_char(const enc_u8* cls, enc_i64 i) {
  enc_i64 j = i - 1;
  while (j > 0 && cls[j] == ENC_CONT) --j;
  return j;
}

// class of the character before the one at i (ENC_X at a segment start)
__device__ __forceinline__ enc_u8 enc_class_before(const enc_u8* mark, const enc_u8* cls,
                                                   enc_i64 i) {
  return (mark[i] & ENC_SEG_START) ? (enc_u8)ENC_X : cls[enc_prev_char(cls, i)];
}

// first byte after the character at i (at most n)
__device__ __forceinline__ enc_i64 enc_next_char(const enc_u8* buf, enc_i64 i, enc_i64 n) {
  const enc_i64 q = i + enc_utf8_len(buf[i]);
  return q < n ? q : n;
}

// class of the character at q, ENC_X when a segment ends there
__device__ __forceinline__ enc_u8 enc_class_at(const enc_u8* mark, const enc_u8* cls, enc_i64 q) {
  return (mark[q] & ENC_SEG_END) ? (enc_u8)ENC_X : cls[q];
}

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
  ENC_GRID_STRIDE(i, n + 1) {
    if (i == n) {
      cls[i] = ENC_X;
      continue;
    }
    const enc_u8 b = buf[i];
    if ((b & 0xC0) == 0x80) {
      cls[i] = ENC_CONT;
    } else if (mark[i] & ENC_OUTSIDE) {
      cls[i] = ENC_X;
    } else {
      cls[i] = cls_table[enc_decode(buf, i, n)];
    }
  }
}

extern "C" __global__ void encode_pretok_runs(enc_i64 n, const enc_u8* __restrict__ mark,
                                              const enc_u8* __restrict__ cls,
                                              enc_u32* __restrict__ runv,
                                              enc_u32* __restrict__ ischar) {
  ENC_GRID_STRIDE(i, n) {
    const enc_u8 c = cls[i];
    ischar[i] = c != ENC_CONT;
    bool start = false;
    if (c != ENC_CONT && c != ENC_X) {
      start = (mark[i] & ENC_SEG_START) ||
              enc_run_class(cls[enc_prev_char(cls, i)]) != enc_run_class(c);
    }
    runv[i] = start ? (enc_u32)(i + 1) : 0u;
  }
}

extern "C" __global__ void encode_pretok_window(
    const enc_u8* __restrict__ buf, enc_i64 n, const enc_u8* __restrict__ mark,
    const enc_u8* __restrict__ cls, const enc_u8* __restrict__ pair, int pair_bits,
    int next_lo, int next_n, int prev2_lo, int prev2_n, const enc_u32* __restrict__ runstart,
    int track_ws, enc_u8* __restrict__ ws_next, enc_u32* __restrict__ ent) {
  ENC_GRID_STRIDE(i, n + 2) {
    if (i >= n) {
      ent[i] = i == n;  // the sentinel entry at n; ent[n + 1] = 0 ends the scan
      continue;
    }
    const enc_u8 m = mark[i];
    const enc_u8 c = cls[i];
    if (m & ENC_SPECIAL_START) {
      ent[i] = 1;
      continue;
    }
    if (c == ENC_CONT || c == ENC_X) {
      ent[i] = 0;
      continue;
    }
    const enc_u8 kn = enc_class_at(mark, cls, enc_next_char(buf, i, n));
    if (m & ENC_SEG_START) {
      ent[i] = 1;
    } else {
      const enc_i64 j = enc_prev_char(cls, i);
      const enc_u8 kp = cls[j];
      const enc_u8 kpp = enc_class_before(mark, cls, j);
      const enc_u8 rule = pair[(kp << pair_bits) | c];
      enc_u8 x = ENC_B_PAIR;
      if ((unsigned)(kn - next_lo) < (unsigned)next_n) x |= ENC_B_NEXT;
      if ((unsigned)(kpp - prev2_lo) < (unsigned)prev2_n) x |= ENC_B_PREV2;
      ent[i] = (x & rule) != 0;
    }
    // the last character of a whitespace run tells the run's first what follows the run
    if (track_ws && enc_run_class(c) == ENC_SP && enc_run_class(kn) != ENC_SP)
      ws_next[runstart[i] - 1] = kn;
  }
}

// contraction letters by code point (scan.py's Scanner._letters): 1 = s|d|m|t, 2 = l,
// 4 = v|r, 8 = e; code points past the table have none
__device__ __forceinline__ enc_u8 enc_letter_bits(const enc_u8* letters, enc_u32 n_letters,
                                                  enc_u32 cp) {
  return cp < n_letters ? letters[cp] : (enc_u8)0;
}

extern "C" __global__ void encode_pretok_fix(
    const enc_u8* __restrict__ buf, enc_i64 n, const enc_u8* __restrict__ mark,
    const enc_u8* __restrict__ cls, const enc_u8* __restrict__ pair, int pair_bits,
    const enc_u8* __restrict__ letters, enc_u32 n_letters, const enc_u32* __restrict__ runstart,
    const enc_u32* __restrict__ cidx, const enc_u8* __restrict__ ws_next, int gpt2,
    int digit_group, int end_whole, enc_u32* ent) {
  ENC_GRID_STRIDE(i, n) {
    const enc_u8 c = cls[i];
    if (c == ENC_CONT || c == ENC_X) continue;
    const enc_u8 kp = enc_class_before(mark, cls, i);
    if (!(pair[(kp << pair_bits) | c] & ENC_B_SPECIAL)) continue;
    if (c == ENC_A) {
      // an apostrophe that starts a piece, followed by a contraction suffix
      const enc_i64 q1 = enc_next_char(buf, i, n);
      if (enc_class_at(mark, cls, q1) != ENC_L) continue;
      const enc_i64 q2 = enc_next_char(buf, q1, n);
      const enc_u8 t1 = enc_letter_bits(letters, n_letters, enc_decode(buf, q1, n));
      const enc_u8 t2 = (mark[q2] & ENC_SEG_END)
                            ? (enc_u8)0
                            : enc_letter_bits(letters, n_letters, enc_decode(buf, q2, n));
      enc_i64 end;
      if (t1 & 1) {
        end = q2;
      } else if ((t1 & t2 & 2) || ((t1 & 4) && (t2 & 8))) {
        end = enc_next_char(buf, q2, n);
      } else {
        continue;
      }
      if (gpt2) ent[q1] = 0;  // the letters after the contraction start a new piece
      if (!(mark[end] & ENC_SEG_END)) ent[end] = 1;
    } else if (c == ENC_N) {
      // a digit after a digit: cut every digit_group from the digit run's start
      if (digit_group > 1) {
        const enc_u32 off = cidx[i] - cidx[runstart[i] - 1];
        if (off % (enc_u32)digit_group == 0) ent[i] = 1;
      }
    } else if (!gpt2 && (c == ENC_SP || c == ENC_S)) {
      // whitespace right after a CR/LF run (kp == E): cut here if punctuation took the CR/LF
      // run, or if the whitespace run from here has no further CR/LF (cl100k: unless it
      // reaches the end of the text)
      const enc_i64 es = (enc_i64)runstart[enc_prev_char(cls, i)] - 1;  // the CR/LF run start
      const enc_u8 before = enc_class_before(mark, cls, es);
      bool cut = before == ENC_P || before == ENC_A;
      if (!cut) {
        const enc_u8 after = ws_next[i];
        cut = after != ENC_E && !(end_whole && after == ENC_X);
      }
      if (cut) ent[i] = 1;
    }
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
