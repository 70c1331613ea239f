// o200k_rules.h: o200k pre-tokenization rules, written once for every dialect (CUDA through
// kernels/encode_o200k.cu, the native CPU device through the same file, Metal through a shader
// that includes this header). gputok/stages/scan_o200k.py states the same rules in Python
// (o200k_span_start, o200k_match, contraction_len) and is what the tests hold them to; read its
// docstring first.
//
// Byte coordinates, as in encode_pretok.cu: cls[i] is the class of the character starting at
// byte i (ENC_O_CONT on continuation bytes, ENC_X on token-span bytes and at n); mark[i] holds
// the host's segment marks, so "the character at q" is ENC_X where a segment ends.
//
// THE O200K SPAN RULE: o200k_span_start. THE O200K MATCHER: o200k_match.
#pragma once

#include "encode_rules.h"  // types, marks, UTF-8 (enc_decode), contraction letters

// The o200k classes of gputok/stages/scan_rules.py (OU ... OE), injected from there by
// gputok/backends/kernels.py; the defaults only let a file compile on its own.
#ifndef ENC_O_U
#define ENC_O_U 1  // Lu Lt: upper-only letters
#endif
#ifndef ENC_O_D
#define ENC_O_D 2  // Ll: lower-only letters
#endif
#ifndef ENC_O_B
#define ENC_O_B 3  // Lm Lo: both letter classes
#endif
#ifndef ENC_O_M
#define ENC_O_M 4  // marks: both letter classes, and punctuation
#endif
#ifndef ENC_O_N
#define ENC_O_N 5  // \p{N}
#endif
#ifndef ENC_O_P
#define ENC_O_P 6  // other (punctuation, symbols, ...)
#endif
#ifndef ENC_O_A
#define ENC_O_A 7  // "'"
#endif
#ifndef ENC_O_SL
#define ENC_O_SL 8  // "/"
#endif
#ifndef ENC_O_SP
#define ENC_O_SP 9  // " "
#endif
#ifndef ENC_O_S
#define ENC_O_S 10  // other \s but CR/LF
#endif
#ifndef ENC_O_E
#define ENC_O_E 11  // CR / LF
#endif
#ifndef ENC_O_CONT
#define ENC_O_CONT 15  // a UTF-8 continuation byte (the o200k classes use 4 bits)
#endif

// the class sets, a bit per class (ENC_SET, encode_pretok_rules.h)
#define ENC_O_SET_U (ENC_SET(ENC_O_U) | ENC_SET(ENC_O_B) | ENC_SET(ENC_O_M))
#define ENC_O_SET_W (ENC_SET(ENC_O_D) | ENC_SET(ENC_O_B) | ENC_SET(ENC_O_M))
#define ENC_O_SET_Q (ENC_SET(ENC_O_M) | ENC_SET(ENC_O_P) | ENC_SET(ENC_O_A) | ENC_SET(ENC_O_SL))
#define ENC_O_SET_WS (ENC_SET(ENC_O_SP) | ENC_SET(ENC_O_S) | ENC_SET(ENC_O_E))
#define ENC_O_SET_LETTER (ENC_SET(ENC_O_U) | ENC_SET(ENC_O_D) | ENC_SET(ENC_O_B))
// the prefix of a word: one char that is not CR/LF, a letter or a digit
#define ENC_O_SET_PRE (ENC_O_SET_Q | ENC_SET(ENC_O_SP) | ENC_SET(ENC_O_S))

GPUTOK_FN bool o2_in(enc_u8 c, enc_u32 set) { return (set >> c) & 1u; }
GPUTOK_FN bool o2_is_u(enc_u8 c) { return o2_in(c, ENC_O_SET_U); }
GPUTOK_FN bool o2_is_w(enc_u8 c) { return o2_in(c, ENC_O_SET_W); }
GPUTOK_FN bool o2_is_q(enc_u8 c) { return o2_in(c, ENC_O_SET_Q); }
GPUTOK_FN bool o2_is_ws(enc_u8 c) { return o2_in(c, ENC_O_SET_WS); }
GPUTOK_FN bool o2_is_letter(enc_u8 c) { return o2_in(c, ENC_O_SET_LETTER); }
GPUTOK_FN bool o2_is_pre(enc_u8 c) { return o2_in(c, ENC_O_SET_PRE); }

// THE O200K SPAN RULE: a piece starts at a character of class c after one of class p in every
// parse (p == ENC_X: a segment start). scan_o200k.py's docstring gives the reason per line.
GPUTOK_FN bool o200k_span_start(enc_u8 p, enc_u8 c) {
  if (p == ENC_X) return c != ENC_X;
  if (c == ENC_O_SP || c == ENC_O_S) return !o2_is_ws(p);
  if (c == ENC_O_E) return o2_is_letter(p) || p == ENC_O_N;
  if (c == ENC_O_N) return p != ENC_O_N;
  if (o2_is_letter(c)) return p == ENC_O_N || p == ENC_O_E;
  if ((c == ENC_O_P || c == ENC_O_SL) && o2_is_letter(p)) return true;
  return (c == ENC_O_P || c == ENC_O_A) && (p == ENC_O_E || p == ENC_O_N);
}

// A read-only view of one chunk: bytes, marks, classes, contraction letters.
struct O2Text {
  const GPUTOK_DEV enc_u8* buf;
  const GPUTOK_DEV enc_u8* mark;
  const GPUTOK_DEV enc_u8* cls;
  const GPUTOK_DEV enc_u8* letters;  // by code point: 1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e
  enc_u32 n_letters;
  enc_i64 n;
  enc_i64 start;  // the current match's first byte (-1: none)
};

// first byte after the character at q (at most n)
GPUTOK_FN enc_i64 o2_next(const O2Text t, enc_i64 q) {
  const enc_i64 r = q + enc_utf8_len(t.buf[q]);
  return r < t.n ? r : t.n;
}

// first byte of the character before the one at q
GPUTOK_FN enc_i64 o2_prev(const O2Text t, enc_i64 q) {
  enc_i64 j = q - 1;
  while (j > 0 && t.cls[j] == ENC_O_CONT) --j;
  return j;
}

// class of the character at q, ENC_X where its segment has ended (q <= n; cls[n] = ENC_X).
// The match's own first byte may carry the previous segment's end mark: it is in the segment.
GPUTOK_FN enc_u8 o2_at(const O2Text t, enc_i64 q) {
  return ((t.mark[q] & ENC_SEG_END) && q != t.start) ? (enc_u8)ENC_X : t.cls[q];
}

// The o200k text as the shared rules see it (THE SPAN WALK, THE WHITESPACE RULE, and the
// matcher below, written over a text type T as THE CL MATCHER is: encode_pretok_rules.h).
GPUTOK_FN enc_u8 enc_span_at(GPUTOK_THREAD const O2Text& t, enc_i64 q) { return o2_at(t, q); }
GPUTOK_FN enc_i64 enc_span_next(GPUTOK_THREAD const O2Text& t, enc_i64 q) { return o2_next(t, q); }
GPUTOK_FN bool enc_span_blank(GPUTOK_THREAD const O2Text&, enc_u8 k) { return o2_is_ws(k); }
GPUTOK_FN bool enc_span_nl(GPUTOK_THREAD const O2Text&, enc_u8 k) { return k == ENC_O_E; }
GPUTOK_FN enc_u8 enc_span_cont(GPUTOK_THREAD const O2Text&) { return ENC_O_CONT; }
GPUTOK_FN enc_i64 enc_span_prev(GPUTOK_THREAD const O2Text& t, enc_i64 q) { return o2_prev(t, q); }
GPUTOK_FN enc_u8 enc_span_letters(GPUTOK_THREAD const O2Text& t, enc_i64 q) {
  return enc_letter_bits(t.letters, t.n_letters, enc_decode(t.buf, q, t.n));
}
GPUTOK_FN void enc_span_begin(GPUTOK_THREAD O2Text& t, enc_i64 i) { t.start = i; }

// The contraction suffix at e ("'" then s|d|m|t, or ll|ve|re, case-insensitive): the position
// after it, or e when there is none.
template <class T>
GPUTOK_FN enc_i64 o2_contraction(GPUTOK_THREAD const T& t, enc_i64 e) {
  if (enc_span_at(t, e) != ENC_O_A) return e;
  const enc_i64 q1 = enc_span_next(t, e);
  if (enc_span_at(t, q1) == ENC_X) return e;
  const enc_u8 t1 = enc_span_letters(t, q1);
  const enc_i64 q2 = enc_span_next(t, q1);
  if (t1 & 1) return q2;
  const enc_u8 t2 = enc_span_at(t, q2) == ENC_X ? (enc_u8)0 : enc_span_letters(t, q2);
  if ((t1 & t2 & 2) || ((t1 & 4) && (t2 & 8))) return enc_span_next(t, q2);
  return e;
}

// pre? U* W+ (without the prefix): the end of the word from s, or -1. U* takes the U-run and
// backtracks until W+ can start: at the run's end before an OD (W+ then takes the W-run), else at
// the run's last OB/OM (only OU follow it, so W+ takes that char alone), found by walking the run
// again (a run not followed by a lowercase letter is rare: an all-caps word).
template <class T>
GPUTOK_FN enc_i64 o2_word1(GPUTOK_THREAD const T& t, enc_i64 s) {
  const enc_i64 j = enc_span_skip<ENC_O_SET_U>(t, s);
  if (enc_span_at(t, j) == ENC_O_D) return enc_span_skip<ENC_O_SET_W>(t, j);
  enc_i64 last_bm = -1;
  for (enc_i64 q = s; q < j; q = enc_span_next(t, q))
    if (enc_span_at(t, q) != ENC_O_U) last_bm = q;
  return last_bm < 0 ? -1 : enc_span_next(t, last_bm);
}

// pre? U+ W*: the U-run (at least one char), then the OD run after it; -1 when s is not in U
template <class T>
GPUTOK_FN enc_i64 o2_word2(GPUTOK_THREAD const T& t, enc_i64 s) {
  if (!o2_is_u(enc_span_at(t, s))) return -1;
  return enc_span_skip<ENC_SET(ENC_O_D)>(t, enc_span_skip<ENC_O_SET_U>(t, s));
}

// THE O200K MATCHER: the end of the o200k match that starts at i (a true piece start): the
// pattern's alternatives in order, leftmost-first (scan_o200k.py, o200k_match).
template <class T>
GPUTOK_FN enc_i64 o200k_match(T t, enc_i64 i) {
  enc_span_begin(t, i);
  const enc_u8 c = enc_span_at(t, i);
  const enc_i64 after = enc_span_next(t, i);
  const bool pre = o2_is_pre(c);
  // 1. pre? U* W+ C?   2. pre? U+ W* C?   (with the prefix first, then without)
  enc_i64 e = pre ? o2_word1(t, after) : -1;
  if (e < 0) e = o2_word1(t, i);
  if (e < 0 && pre) e = o2_word2(t, after);
  if (e < 0) e = o2_word2(t, i);
  if (e >= 0) return o2_contraction(t, e);
  // 3. \p{N}{1,3}
  if (c == ENC_O_N) {
    enc_i64 j = after;
    for (int k = 1; k < 3 && enc_span_at(t, j) == ENC_O_N; ++k) j = enc_span_next(t, j);
    return j;
  }
  // 4. " ?Q+[\r\n/]*"
  const enc_i64 s = (c == ENC_O_SP && o2_is_q(enc_span_at(t, after))) ? after : i;
  if (o2_is_q(enc_span_at(t, s)))
    return enc_span_skip<ENC_SET(ENC_O_E) | ENC_SET(ENC_O_SL)>(t,
                                                               enc_span_skip<ENC_O_SET_Q>(t, s));
  // whitespace: 5. \s*[\r\n]+  6. \s+(?!\S)  7. \s+ (THE WHITESPACE RULE)
  return enc_whitespace_end(t, i, false);
}

// cls[i] for i in [0, n]: the o200k class of the character starting at byte i (ENC_O_CONT on
// continuation bytes; ENC_X on token-span bytes and in slot n)
GPUTOK_FN enc_u8 o200k_classify_at(const GPUTOK_DEV enc_u8* buf, enc_i64 n,
                                   const GPUTOK_DEV enc_u8* mark,
                                   const GPUTOK_DEV enc_u8* cls_table, enc_i64 i) {
  if (i == n) return ENC_X;
  const enc_u8 b = buf[i];
  if ((b & 0xC0) == 0x80) return ENC_O_CONT;
  if (mark[i] & ENC_OUTSIDE) return ENC_X;
  return cls_table[enc_decode(buf, i, n)];
}

// The o200k rules as THE SPAN WALK sees them.
GPUTOK_FN bool enc_span_start(GPUTOK_THREAD const O2Text&, enc_u8 p, enc_u8 c) {
  return o200k_span_start(p, c);
}
GPUTOK_FN enc_i64 enc_span_match(GPUTOK_THREAD const O2Text& t, enc_i64 i) {
  return o200k_match(t, i);
}
