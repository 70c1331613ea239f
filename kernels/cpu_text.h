// cpu_text.h: host only. The text the pattern matchers read in the native CPU device's
// per-document pass (kernels/cpu_encode.h): one segment of a document's UTF-8 (a document, or
// its text between two special tokens), each character's class looked up as the matcher reaches
// it. THE CL MATCHER and THE O200K MATCHER (common/encode_pretok_rules.h, common/o200k_rules.h)
// are written over a text type; the GPU's (EncClText, O2Text) reads a class array and a mark
// array that a launch filled for the whole chunk, this one reads the bytes: no class or mark
// array is written or read.
//
// The segment lies in the thread's own buffer (EncCpuBuf), followed by ENC_CPU_PAD bytes of
// 0xFF, a byte no UTF-8 text has: the class there is ENC_X (the segment's end), found by the
// same load and branch that find a character outside ASCII, so the matchers' loops test no
// bound; and a piece's first 24 bytes are always readable (the piece cache's key, cpu_cache.h).
//
// Run from the segment's start, match after match, the matchers give the regex's pieces in
// order: each match ends where the next one starts (every character starts some alternative of
// these patterns), which is THE SPAN WALK's loop after a span start (encode_pretok_rules.h)
// with the whole segment as one span.
//
// Performance notes: an ASCII byte's class is cls_table[byte] (the class table is indexed by
// code point): one load, no decode. The class and mark arrays of the chunk pipeline cost two
// writes and two reads a byte, and the marks a memset.
#pragma once

#include <cstdlib>
#include <cstring>
#if defined(__SSSE3__)
#include <tmmintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifndef ENC_CPU_PAD
#define ENC_CPU_PAD 64  // 0xFF bytes after a segment in the thread's buffer
#endif

template <int O200K>
struct EncCpuText {
  const enc_u8* buf;  // the segment's first byte; buf[n .. n + ENC_CPU_PAD) are 0xFF
  enc_i64 n;          // its length
  const enc_u8* cls_table;  // by code point: the family's class (o200k's when O200K)
  const enc_u8* letters;    // contraction letters by code point (see enc_letter_bits)
  enc_u32 n_letters;
  int gpt2, digit_group, end_whole;  // the cl family's parameters (EncClText's)
  // THE ASCII NIBBLES: for class c, 16 bytes: bit h of byte l is set where the ASCII byte
  // h << 4 | l has class c (the class table's own ASCII part, arranged for enc_span_skip)
  const enc_u8* nibbles;
};

typedef EncCpuText<0> EncCpuClText;
typedef EncCpuText<1> EncCpuO2Text;

template <int O>
__forceinline__ enc_u8 enc_span_at(const EncCpuText<O>& t, enc_i64 q) {
  const enc_u8 b = t.buf[q];
  if (b < 0x80) return t.cls_table[b];
  return b == 0xFF ? (enc_u8)ENC_X : t.cls_table[enc_decode(t.buf, q, t.n)];
}

template <int O>
__forceinline__ enc_i64 enc_span_next(const EncCpuText<O>& t, enc_i64 q) {
  const enc_i64 r = q + enc_utf8_len(t.buf[q]);
  return r < t.n ? r : t.n;
}

// A character outside ASCII in enc_span_skip: whether its class is in SET (the padding's 0xFF
// is in no set); *q moves past it when it is.
template <enc_u32 SET, int O>
__forceinline__ bool enc_cpu_skip_wide(const EncCpuText<O>& t, enc_i64* q) {
  const enc_u8 b = t.buf[*q];
  if (b == 0xFF || !((SET >> t.cls_table[enc_decode(t.buf, *q, t.n)]) & 1u)) return false;
  *q += enc_utf8_len(b);
  return true;
}

#if defined(__SSSE3__)
// THE ASCII NIBBLES of the classes in SET, OR-ed (a constant set: one load per class)
template <enc_u32 SET>
__forceinline__ __m128i enc_cpu_rows(const enc_u8* nibbles) {
  if constexpr (SET == 0) {
    return _mm_setzero_si128();
  } else {
    const __m128i r = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(nibbles + 16 * __builtin_ctz(SET)));
    return _mm_or_si128(r, enc_cpu_rows<SET & (SET - 1)>(nibbles));
  }
}
#endif

// enc_span_skip's loop (encode_pretok_rules.h) with the bytes in hand, its answer the same.
// With SSSE3, 16 bytes a step: each byte's membership of the set's ASCII bytes is one bit of
// a table row (THE ASCII NIBBLES of the set's classes, OR-ed: row by the low nibble, bit by the
// high one, 0 for a byte from 0x80), so the run's end in ASCII is the first clear bit of a
// 16-bit mask; a byte from 0x80 is a character outside ASCII (decoded, its class looked up) or
// the padding. Without it, a byte at a time.
// Performance notes: a byte at a time cost ~9 instructions a byte, the largest share of an
// o200k prose pass (callgrind, the piece cache warm); 16 at a time ~12 a step.
template <enc_u32 SET, int O>
__forceinline__ enc_i64 enc_span_skip(const EncCpuText<O>& t, enc_i64 q) {
#if defined(__SSSE3__)
  // the first character alone first: many runs are empty (an optional class before the one
  // that follows it), and one load and a test cost less than a step's set-up
  const enc_u8 b0 = t.buf[q];
  if (b0 < 0x80) {
    if (!((SET >> t.cls_table[b0]) & 1u)) return q;
    ++q;
  } else if (!enc_cpu_skip_wide<SET>(t, &q)) {
    return q;
  }
  const __m128i rows = enc_cpu_rows<SET>(t.nibbles);
  const __m128i pow2 = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i low = _mm_set1_epi8(0x0F);
  while (true) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t.buf + q));
    const __m128i row = _mm_shuffle_epi8(rows, _mm_and_si128(v, low));
    const __m128i bit = _mm_shuffle_epi8(pow2, _mm_and_si128(_mm_srli_epi16(v, 4), low));
    const __m128i out = _mm_cmpeq_epi8(_mm_and_si128(row, bit), _mm_setzero_si128());
    const unsigned stop = (unsigned)_mm_movemask_epi8(out);
    if (stop == 0) {
      q += 16;
      continue;
    }
    q += __builtin_ctz(stop);
    if (t.buf[q] < 0x80 || !enc_cpu_skip_wide<SET>(t, &q)) return q;
  }
#else
  const enc_u8* buf = t.buf;
  while (true) {
    const enc_u8 b = buf[q];
    if (b < 0x80) {
      if (!((SET >> t.cls_table[b]) & 1u)) return q;
      ++q;
    } else if (!enc_cpu_skip_wide<SET>(t, &q)) {
      return q;
    }
  }
#endif
}

template <int O>
__forceinline__ bool enc_span_blank(const EncCpuText<O>&, enc_u8 k) {
  return O ? o2_is_ws(k) : enc_is_ws(k);
}

template <int O>
__forceinline__ bool enc_span_nl(const EncCpuText<O>&, enc_u8 k) {
  return k == (O ? ENC_O_E : ENC_E);
}

template <int O>
__forceinline__ enc_u8 enc_span_letters(const EncCpuText<O>& t, enc_i64 q) {
  return enc_letter_bits(t.letters, t.n_letters, enc_decode(t.buf, q, t.n));
}

template <int O>
__forceinline__ void enc_span_begin(EncCpuText<O>&, enc_i64) {}

// The first byte at or after q that is not a space (0x20): the padding's 0xFF ends every run,
// so a load never starts past it (16 bytes a step with SSE2).
__forceinline__ enc_i64 enc_cpu_spaces(const enc_u8* buf, enc_i64 q) {
#if defined(__SSE2__)
  const __m128i sp = _mm_set1_epi8(' ');
  while (true) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + q));
    const unsigned other = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, sp)) & 0xFFFFu;
    if (other) return q + __builtin_ctz(other);
    q += 16;
  }
#else
  while (buf[q] == ' ') ++q;
  return q;
#endif
}

// Whether b is an ASCII byte of a class that is neither blank nor ENC_X (so neither the
// padding nor a character outside ASCII, whose class the caller would have to decode).
__forceinline__ bool enc_cpu_ascii_solid(const EncCpuClText& t, enc_u8 b) {
  if (b >= 0x80) return false;
  const enc_u8 k = t.cls_table[b];
  return k != ENC_X && !enc_is_ws(k);
}

// The end of the piece that starts at i (i < t.n): the family's matcher, with ASCII entries
// for the common pieces, each the matcher's own answer for the starts it takes:
//   a word      [^\r\n\p{L}\p{N}]?\p{L}+ (GPT-2: " "?\p{L}+) from a letter, or a prefix then a
//               letter: the letter run (enc_span_skip) from there
//   indentation a CR/LF then spaces, then an ASCII character of no blank class: THE WHITESPACE
//               RULE's \s*[\r\n]+ takes the line end alone; two or more spaces, then such a
//               character: its \s+(?!\S) takes all the spaces but the last (no earlier
//               alternative matches a space before a space)
// An apostrophe (a contraction comes first), a character outside ASCII, the segment's end (the
// padding's 0xFF), a tab or other blank in the run, and every other start go to THE CL
// MATCHER.
// Performance notes: the matcher reaches the same answers through its class and length helpers
// (a decode-length and an end clamp per character; the whitespace rule a character at a time);
// the tests here are a load and a compare a byte, a run of spaces 16 bytes a step.
__forceinline__ enc_i64 enc_cpu_match(const EncCpuClText& t, enc_i64 i) {
  const enc_u8 b0 = t.buf[i];
  if (b0 < 0x80) {
    const enc_u8 c = t.cls_table[b0];
    if (c == ENC_L) return enc_span_skip<ENC_SET(ENC_L)>(t, i + 1);
    const enc_u8 b1 = t.buf[i + 1];  // (i + 1 <= t.n: a byte of the text or the padding)
    if (b1 < 0x80 && t.cls_table[b1] == ENC_L &&
        (t.gpt2 ? c == ENC_SP : (c != ENC_E && c != ENC_N && c != ENC_A)))
      return enc_span_skip<ENC_SET(ENC_L)>(t, i + 2);
    if (c == ENC_E && t.cls_table[' '] == ENC_SP) {  // a line end, then spaces
      if (enc_cpu_ascii_solid(t, t.buf[enc_cpu_spaces(t.buf, i + 1)])) return i + 1;
    } else if (b0 == ' ' && b1 == ' ' && c == ENC_SP) {  // spaces
      const enc_i64 r = enc_cpu_spaces(t.buf, i + 2);
      if (enc_cpu_ascii_solid(t, t.buf[r])) return r - 1;
    }
  }
  return enc_cl_match(t, i);
}

__forceinline__ enc_i64 enc_cpu_match(const EncCpuO2Text& t, enc_i64 i) {
  return o200k_match(t, i);
}

// The family's matcher alone (the rule the finders above are held to).
__forceinline__ enc_i64 enc_cpu_rule(const EncCpuClText& t, enc_i64 i) {
  return enc_cl_match(t, i);
}

__forceinline__ enc_i64 enc_cpu_rule(const EncCpuO2Text& t, enc_i64 i) {
  return o200k_match(t, i);
}

// A thread's text buffer: a segment's bytes copied (or a str's characters written as UTF-8)
// with the padding after them; grown to the longest text met, kept between calls.
struct EncCpuBuf {
  enc_u8* mem = nullptr;
  enc_u64 cap = 0;
  ~EncCpuBuf() { free(mem); }
  // room for n bytes and the padding (nullptr without memory)
  enc_u8* room(enc_u64 n) {
    if (n + ENC_CPU_PAD > cap) {
      free(mem);
      cap = n + ENC_CPU_PAD + (n >> 3);
      mem = static_cast<enc_u8*>(malloc(cap));
      if (mem == nullptr) cap = 0;
    }
    return mem;
  }
  // the padding after n bytes
  void pad(enc_u64 n) { memset(mem + n, 0xFF, ENC_CPU_PAD); }
};
