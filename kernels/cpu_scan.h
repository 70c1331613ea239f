// cpu_scan.h: host only. The per-document pass's piece finder (kernels/cpu_window.h calls it):
// THE CPU SCAN, the classes of a stretch of text as bit masks, and the fast matchers that cut the
// common pieces from those masks, handing every other piece to the family's own matcher (THE
// CL / O200K MATCHER over cpu_text.h's text type), which is the rule.
//
// A region: up to ENC_CPU_SCAN_WORDS 64-byte words of a segment from a piece start (the masks'
// bit 0), and for each of five class sets a bit per byte: set where the byte belongs to a
// character whose class is in the set (every byte of a character outside ASCII carries its
// character's class; the padding's 0xFF bytes, class ENC_X, are in no set). ASCII bytes take
// their bits 16 at a time from THE ASCII NIBBLES (the class table's own ASCII part); a character
// outside ASCII is decoded once and its class looked up in the class table, as the matchers do.
// The region ends at the segment's padding when that is near, else after ENC_CPU_SCAN_WORDS
// words: a run that reaches a region's last bit is not decided here (the fast matcher answers
// "ask the rule"), and pieces are found in a region up to ENC_CPU_SCAN_CORE bytes from its start,
// the next region starting at the next piece.
//
// The fast matchers (enc_cpu_fast_cl, enc_cpu_fast_o200k) take the pattern's alternatives in
// order for the cases whose answer the masks give outright: a run of letters (o200k: upper-case
// then lower-case letters, no letter of both cases or mark), a prefix then such a run, digits,
// punctuation runs and whitespace (THE WHITESPACE RULE from the masks). A case that needs more
// (a contraction, o200k's letters of both cases and marks, a run past the region) returns -1 and
// the family's matcher answers. tests/test_native_perdoc.py holds the finder to the matchers on
// random and real text (gputok_cpu_pieces, cpu_encode.h).
//
// Performance notes: a piece's runs found with ctz on the masks: no loop whose end the branch
// predictor must guess per run, and no class lookup per byte. The matchers alone walked each run
// a character at a time (SSSE3: 16 bytes a step after the first), trying the alternatives in
// turn: ~100 instructions a piece of o200k prose (callgrind); the masks cost ~2.5 a byte with
// SSSE3 and the fast matchers ~25 a piece. Measured (one thread, thread CPU time, 2 MB, three
// interleaved runs, against ENC_CPU_SCAN=0): o200k prose 154-162 MB/s warm against 143-145,
// 76-79 cold against 71-73; o200k code 105-148 against 128-140 warm. cl100k: prose and code
// the same either way, multilingual 5-30% slower warm (96-102 against 107-110): the cl family
// asks its matcher (ENC_CPU_SCAN_CL). A region mostly outside ASCII went 6-25% slower through
// the masks (o200k multilingual) before ENC_CPU_SCAN_PLAIN; with it, the same as the matcher.
// A region's core was 2048 of its 2560 bytes (a fifth of every region scanned twice); at 2432,
// and ENC_CPU_SCAN_PLAIN decided on the first 512 bytes rather than the whole core, a warm pass
// (bench/warm_instr.py, instructions a byte) counted 2.2 fewer on o200k prose, 3.0 on code,
// 1.0 on multilingual (measured over a segment loop without the ring, cpu_window.h's notes).
#pragma once

#ifndef ENC_CPU_SCAN
#define ENC_CPU_SCAN 1  // 0: the segment loop asks the family's matcher for every piece
#endif

#ifndef ENC_CPU_SCAN_WORDS
#define ENC_CPU_SCAN_WORDS 40  // a region's most 64-byte words
#endif
#ifndef ENC_CPU_SCAN_CORE
#define ENC_CPU_SCAN_CORE 2432  // bytes: pieces are found from a region's start up to this
#endif
#ifndef ENC_CPU_SCAN_PROBE
#define ENC_CPU_SCAN_PROBE 8  // the first words whose bytes outside ASCII decide ENC_CPU_SCAN_PLAIN
#endif
#ifndef ENC_CPU_SCAN_CL
#define ENC_CPU_SCAN_CL 0  // 1: cl-family pieces too (see the performance notes)
#endif
#ifndef ENC_CPU_SCAN_PLAIN
#define ENC_CPU_SCAN_PLAIN 16  // see enc_cpu_scan
#endif
#define ENC_CPU_SETS 5

// The class sets of a family (mask indices): 0 and 1 the letters' runs, 2 punctuation, 3
// whitespace, 4 CR/LF. cl: letters, digits; o200k: upper-case only, lower-case only letters.
template <int O>
struct EncCpuSets;
template <>
struct EncCpuSets<0> {
  static constexpr enc_u32 set[ENC_CPU_SETS] = {
      ENC_SET(ENC_L), ENC_SET(ENC_N), ENC_SET(ENC_P) | ENC_SET(ENC_A),
      ENC_SET(ENC_SP) | ENC_SET(ENC_S) | ENC_SET(ENC_E), ENC_SET(ENC_E)};
};
template <>
struct EncCpuSets<1> {
  static constexpr enc_u32 set[ENC_CPU_SETS] = {ENC_SET(ENC_O_U), ENC_SET(ENC_O_D), ENC_O_SET_Q,
                                                ENC_O_SET_WS, ENC_SET(ENC_O_E)};
};
enum { ENC_CPU_M_A = 0, ENC_CPU_M_B = 1, ENC_CPU_M_Q = 2, ENC_CPU_M_WS = 3, ENC_CPU_M_NL = 4 };

struct EncCpuScan {
  enc_i64 base;      // the text position of bit 0
  enc_i64 core_end;  // pieces starting before this are found here (the text's end: no limit)
  int words;
  bool plain;  // a region mostly outside ASCII: its pieces are the family's matcher's (no masks)
  enc_u64 m[ENC_CPU_SETS][ENC_CPU_SCAN_WORDS];
};

// The class of the character at q (ENC_X on the padding): cpu_text.h's enc_span_at.
template <int O>
__forceinline__ enc_u8 enc_cpu_cls(const EncCpuText<O>& t, enc_i64 q) {
  return enc_span_at(t, q);
}

#if defined(__SSSE3__)
template <int O>
__forceinline__ __m128i enc_cpu_set_row(const enc_u8* nibbles, int s) {
  __m128i r = _mm_setzero_si128();
  for (int c = 0; c < 16; ++c)
    if ((EncCpuSets<O>::set[s] >> c) & 1u)
      r = _mm_or_si128(r, _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles + 16 * c)));
  return r;
}
#endif

// The region from piece start q: its masks computed.
template <int O>
inline void enc_cpu_scan(EncCpuScan& sc, const EncCpuText<O>& t, enc_i64 q) {
  const enc_i64 left = t.n + 1 - q;  // (+1: the first padding byte, where every run ends)
  int words = ENC_CPU_SCAN_WORDS;
  sc.core_end = q + ENC_CPU_SCAN_CORE;
  if (left <= (enc_i64)ENC_CPU_SCAN_WORDS * 64) {
    words = (int)((left + 63) >> 6);
    sc.core_end = t.n + 1;
  }
  sc.base = q;
  sc.words = words;
  const enc_u8* p = t.buf + q;
  // a region of more than one byte in ENC_CPU_SCAN_PLAIN outside ASCII (in its first words, up
  // to the core's end) is left to the matcher: each such character is decoded and looked up
  // for the masks, and its letters (o200k: often of both cases or marked) mostly fall back
  enc_u32 wide = 0;
  const int probe = words < ENC_CPU_SCAN_PROBE ? words : ENC_CPU_SCAN_PROBE;
  for (int k = 0; k < 64 * probe; k += 8) {
    enc_u64 x;
    memcpy(&x, p + k, 8);
    wide += (enc_u32)__builtin_popcountll(x & 0x8080808080808080ull);
  }
  sc.plain = wide * ENC_CPU_SCAN_PLAIN > (enc_u32)(64 * probe);
  if (sc.plain) return;
  enc_u64 carry[ENC_CPU_SETS] = {0, 0, 0, 0, 0};  // a character's bytes past its word's end
#if defined(__SSSE3__)
  __m128i rows[ENC_CPU_SETS];
  for (int s = 0; s < ENC_CPU_SETS; ++s) rows[s] = enc_cpu_set_row<O>(t.nibbles, s);
  const __m128i pow2 = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i zero = _mm_setzero_si128();
#endif
  for (int w = 0; w < words; ++w, p += 64) {
    enc_u64 m[ENC_CPU_SETS] = {0, 0, 0, 0, 0};
    enc_u64 high = 0;
#if defined(__SSSE3__)
    for (int j = 0; j < 4; ++j) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j));
      const __m128i lo = _mm_and_si128(v, low);
      const __m128i bit = _mm_shuffle_epi8(pow2, _mm_and_si128(_mm_srli_epi16(v, 4), low));
      for (int s = 0; s < ENC_CPU_SETS; ++s) {
        const __m128i out = _mm_cmpeq_epi8(_mm_and_si128(_mm_shuffle_epi8(rows[s], lo), bit), zero);
        m[s] |= (enc_u64)(~(unsigned)_mm_movemask_epi8(out) & 0xFFFFu) << (16 * j);
      }
      high |= (enc_u64)(unsigned)_mm_movemask_epi8(v) << (16 * j);
    }
#else
    for (int k = 0; k < 64; ++k) {
      const enc_u8 b = p[k];
      if (b >= 0x80) {
        high |= 1ull << k;
        continue;
      }
      const enc_u8 c = t.cls_table[b];
      for (int s = 0; s < ENC_CPU_SETS; ++s) m[s] |= (enc_u64)((EncCpuSets<O>::set[s] >> c) & 1u) << k;
    }
#endif
    for (int s = 0; s < ENC_CPU_SETS; ++s) {
      m[s] |= carry[s];
      carry[s] = 0;
    }
    while (high) {  // characters outside ASCII: their classes, on every byte of each
      const int k = __builtin_ctzll(high);
      const enc_u8 b = p[k];
      if (b < 0xC0 || b == 0xFF) {  // a continuation byte (its character's bits are set) or
        high &= high - 1;           // the padding (in no set)
        continue;
      }
      const int len = enc_utf8_len(b);
      const enc_u8 c = t.cls_table[enc_decode(t.buf, q + 64 * (enc_i64)w + k, t.n)];
      const enc_u64 bits = ((1ull << len) - 1) << k;  // (k + len may pass 64: the carry)
      const enc_u64 over = k + len > 64 ? ((1ull << len) - 1) >> (64 - k) : 0;
      for (int s = 0; s < ENC_CPU_SETS; ++s) {
        if ((EncCpuSets<O>::set[s] >> c) & 1u) {
          m[s] |= bits;
          carry[s] |= over;
        }
      }
      high &= ~bits;
    }
    for (int s = 0; s < ENC_CPU_SETS; ++s) sc.m[s][w] = m[s];
  }
}

// The first position at or after q (in the region) whose character is not in set s: the end of
// a run; -1 when the run reaches the region's last bit.
__forceinline__ enc_i64 enc_cpu_run(const EncCpuScan& sc, int s, enc_i64 q) {
  const enc_i64 r = q - sc.base;
  int w = (int)(r >> 6);
  enc_u64 x = ~sc.m[s][w] >> (r & 63);
  if (x) return q + __builtin_ctzll(x);
  for (++w; w < sc.words; ++w) {
    x = ~sc.m[s][w];
    if (x) return sc.base + 64 * (enc_i64)w + __builtin_ctzll(x);
  }
  return -1;
}

// Set s's bits of the bytes [q, q + len) (len 1 .. 64, inside the region), bit 0 for q.
__forceinline__ enc_u64 enc_cpu_bits(const EncCpuScan& sc, int s, enc_i64 q, enc_i64 len) {
  const enc_i64 r = q - sc.base;
  const int w = (int)(r >> 6), b = (int)(r & 63);
  enc_u64 x = sc.m[s][w] >> b;
  if (b && w + 1 < sc.words) x |= sc.m[s][w + 1] << (64 - b);
  return len >= 64 ? x : x & ((1ull << len) - 1);
}

// THE WHITESPACE RULE from the masks, for a blank at q: the piece's end, or -1 (ask the rule).
template <int O>
__forceinline__ enc_i64 enc_cpu_fast_blank(const EncCpuScan& sc, const EncCpuText<O>& t,
                                           enc_i64 q, bool end_whole) {
  const enc_i64 r = enc_cpu_run(sc, ENC_CPU_M_WS, q);
  if (r < 0 || r - q > 64) return -1;
  const enc_u8 k = enc_cpu_cls(t, r);
  if (end_whole && k == ENC_X) return r;
  const enc_u64 nl = enc_cpu_bits(sc, ENC_CPU_M_NL, q, r - q);
  if (nl) return q + 64 - __builtin_clzll(nl);  // after the run's last CR/LF (one byte each)
  if (k == ENC_X || enc_span_next(t, q) >= r) return r;  // at the end, or a single character
  enc_i64 last = r - 1;
  while ((t.buf[last] & 0xC0) == 0x80) --last;
  return last;
}

// THE CL MATCHER's answer where the masks give it (see the file's comment), else -1.
__forceinline__ enc_i64 enc_cpu_fast(const EncCpuScan& sc, const EncCpuClText& t, enc_i64 q) {
  const enc_u8 c = enc_cpu_cls(t, q);
  if (c == ENC_L) return enc_cpu_run(sc, ENC_CPU_M_A, q);
  if (c == ENC_A) return -1;  // a contraction first: the rule's
  const enc_i64 a = enc_span_next(t, q);
  const enc_u8 ka = enc_cpu_cls(t, a);
  if (ka == ENC_L && (t.gpt2 ? c == ENC_SP : (c != ENC_E && c != ENC_N)))
    return enc_cpu_run(sc, ENC_CPU_M_A, a);
  const enc_i64 d = (t.gpt2 && c == ENC_SP && ka == ENC_N) ? a : q;
  if ((d == q ? c : ka) == ENC_N) {
    if (t.digit_group == 0) return enc_cpu_run(sc, ENC_CPU_M_B, d);
    enc_i64 j = enc_span_next(t, d);
    for (int k = 1; k < t.digit_group && enc_cpu_cls(t, j) == ENC_N; ++k) j = enc_span_next(t, j);
    return j;
  }
  const bool sp_q = c == ENC_SP && enc_is_q(ka);
  if (sp_q || enc_is_q(c)) {
    enc_i64 e = enc_cpu_run(sc, ENC_CPU_M_Q, sp_q ? a : q);
    if (e < 0 || t.gpt2) return e;
    while (enc_cpu_cls(t, e) == ENC_E) e = enc_span_next(t, e);
    return e;
  }
  return enc_cpu_fast_blank(sc, t, q, t.end_whole != 0);
}

// THE O200K MATCHER's answer where the masks give it (see the file's comment), else -1.
__forceinline__ enc_i64 enc_cpu_fast(const EncCpuScan& sc, const EncCpuO2Text& t, enc_i64 q) {
  const enc_u8 c = enc_cpu_cls(t, q);
  enc_i64 s = -1;  // a word's letters start here
  enc_i64 a = q;
  enc_u8 ka = c;
  if (c == ENC_O_U || c == ENC_O_D) {
    s = q;
  } else if (c == ENC_O_B || c == ENC_O_M) {
    return -1;  // (letters of both cases, marks: the rule's backtracking)
  } else {
    a = t.buf[q] < 0x80 ? q + 1 : enc_span_next(t, q);  // (q < t.n: q + 1 <= t.n)
    ka = enc_cpu_cls(t, a);
    if (o2_is_pre(c)) {
      if (ka == ENC_O_U || ka == ENC_O_D) s = a;
      else if (ka == ENC_O_B || ka == ENC_O_M) return -1;
    }
  }
  if (s >= 0) {  // pre? U* W+ and pre? U+ W* over upper- and lower-case letters only
    enc_i64 e = enc_cpu_run(sc, ENC_CPU_M_A, s);
    if (e >= 0) e = enc_cpu_run(sc, ENC_CPU_M_B, e);
    if (e < 0) return -1;
    const enc_u8 k = enc_cpu_cls(t, e);
    return (k == ENC_O_B || k == ENC_O_M || k == ENC_O_A) ? -1 : e;
  }
  if (c == ENC_O_N) {  // \p{N}{1,3}
    enc_i64 j = a;
    for (int k = 1; k < 3 && ka == ENC_O_N; ++k) {
      j = enc_span_next(t, j);
      ka = enc_cpu_cls(t, j);
    }
    return j;
  }
  const bool sp_q = c == ENC_O_SP && o2_is_q(ka);
  if (sp_q || o2_is_q(c)) {  //  ?Q+[\r\n/]*
    enc_i64 e = enc_cpu_run(sc, ENC_CPU_M_Q, sp_q ? a : q);
    if (e < 0) return -1;
    while (true) {
      const enc_u8 k = enc_cpu_cls(t, e);
      if (k != ENC_O_E && k != ENC_O_SL) return e;
      e = enc_span_next(t, e);
    }
  }
  return enc_cpu_fast_blank(sc, t, q, false);
}

// No region yet: the next piece scans one.
__forceinline__ void enc_cpu_scan_reset(EncCpuScan& sc) {
  sc.base = 0;
  sc.core_end = -1;
  sc.plain = false;
}

// The end of the piece that starts at i: the fast matcher's answer from the region (scanned
// from i when i is outside its core), else the family's matcher's.
template <class T>
__forceinline__ enc_i64 enc_cpu_scan_piece(EncCpuScan& sc, const T& t, enc_i64 i) {
  if (i >= sc.core_end || i < sc.base) enc_cpu_scan(sc, t, i);
  if (sc.plain) return enc_cpu_match(t, i);
  const enc_i64 e = enc_cpu_fast(sc, t, i);
  return e >= 0 ? e : enc_cpu_match(t, i);
}

// The segment loop's piece finder: the scan for the families where it measured faster (o200k;
// cl with ENC_CPU_SCAN_CL), else the family's matcher.
template <int O>
__forceinline__ enc_i64 enc_cpu_piece(EncCpuScan& sc, const EncCpuText<O>& t, enc_i64 i) {
  if (O == 0 && !ENC_CPU_SCAN_CL) return enc_cpu_match(t, i);
  return enc_cpu_scan_piece(sc, t, i);
}
