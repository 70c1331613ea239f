// encode_pretok_rules.h: the pre-tokenizer's per-byte rules, for every dialect (included by
// encode_rules.h, which defines the types, constants and UTF-8 helpers used here).
#pragma once

// ---------------------------------------------------------------- the pre-tokenizer
// gputok/stages/scan_cl.py's method in byte coordinates (kernels/encode_pretok.cu explains the
// launches): a character's class sits on its first byte (continuation bytes hold ENC_CONT) and
// the host's per-byte marks say where segments start and end.

// first byte of the character before the one starting at i (i is not a segment start)
GPUTOK_FN enc_i64 enc_prev_char(const GPUTOK_DEV enc_u8* cls, enc_i64 i) {
  enc_i64 j = i - 1;
  while (j > 0 && cls[j] == ENC_CONT) --j;
  return j;
}

// first byte after the character at i (at most n)
GPUTOK_FN enc_i64 enc_next_char(const GPUTOK_DEV enc_u8* buf, enc_i64 i, enc_i64 n) {
  const enc_i64 q = i + enc_utf8_len(buf[i]);
  return q < n ? q : n;
}

// contraction letters by code point (scan.py's Scanner._letters): 1 = s|d|m|t, 2 = l,
// 4 = v|r, 8 = e; code points past the table have none
GPUTOK_FN enc_u8 enc_letter_bits(const GPUTOK_DEV enc_u8* letters, enc_u32 n_letters,
                                 enc_u32 cp) {
  return cp < n_letters ? letters[cp] : (enc_u8)0;
}

// cls[i] for i in [0, n]: the class of the character starting at byte i (slot n: ENC_X)
GPUTOK_FN enc_u8 enc_classify_at(const GPUTOK_DEV enc_u8* buf, enc_i64 n,
                                 const GPUTOK_DEV enc_u8* mark,
                                 const GPUTOK_DEV enc_u8* cls_table, enc_i64 i) {
  if (i == n) return ENC_X;
  const enc_u8 b = buf[i];
  if ((b & 0xC0) == 0x80) return ENC_CONT;
  if (mark[i] & ENC_OUTSIDE) return ENC_X;
  return cls_table[enc_decode(buf, i, n)];
}

// ---------------------------------------------------------------- THE SPAN WALK
// Both span matchers (the cl rules below, o200k_rules.h) cut a chunk at positions where a piece
// starts in every parse and run the pattern from each such position to the next. A text type T
// (EncClText, O2Text) provides, as overloads found by argument-dependent lookup: enc_span_cont
// (its continuation-byte class), enc_span_prev (the first byte of the character before q),
// enc_span_at (the class at q, ENC_X past the segment's end), enc_span_start (the span rule) and
// enc_span_match (the matcher: the end of the match from a true piece start).
//
// The entry flags the thread of byte i (< n) owns: a token span's byte writes its own flag (1 at
// the span's first byte); a span start writes every byte of its span, 1 where a match starts
// (match after match until the next span start or the segment's end); any other byte belongs to
// the span that holds it and writes nothing. So every flag is written by exactly one thread,
// whatever the order. Returns the first byte after those it wrote for a span start (the bytes
// between belong to its span: their own threads write nothing), else i + 1; a sequential loop
// may go on there (ENC_SKIP_TO), a GPU ignores it.
//
// The flags go to a sink S through enc_ent_put(out, i, flag): EncEntFlags is the flag array
// every device scans; the native CPU device's one-call chunk (kernels/host_chunk.h) walks the
// chunk in order on one thread and takes the starts as a list instead (its sink, found by
// argument-dependent lookup), which is the flags' scan and compaction done as they are written.
struct EncEntFlags {
  GPUTOK_DEV enc_u32* ent;
};

GPUTOK_FN void enc_ent_put(GPUTOK_THREAD EncEntFlags& out, enc_i64 i, enc_u32 flag) {
  out.ent[i] = flag;
}

template <class T, class S>
GPUTOK_FN enc_i64 enc_spans_into(GPUTOK_THREAD const T& t, enc_i64 i, GPUTOK_THREAD S& out) {
  const enc_u8 m = t.mark[i];
  if (m & ENC_OUTSIDE) {
    enc_ent_put(out, i, (m & ENC_SPECIAL_START) ? 1u : 0u);
    return i + 1;
  }
  const enc_u8 c = t.cls[i];
  if (c == enc_span_cont(t)) return i + 1;
  const enc_u8 p = (m & ENC_SEG_START) ? (enc_u8)ENC_X : t.cls[enc_span_prev(t, i)];
  if (!enc_span_start(t, p, c)) return i + 1;
  enc_i64 pos = i;
  while (true) {
    enc_ent_put(out, pos, 1u);
    const enc_i64 end = enc_span_match(t, pos);
    for (enc_i64 q = pos + 1; q < end; ++q) enc_ent_put(out, q, 0u);
    pos = end;
    const enc_u8 k = enc_span_at(t, pos);
    if (k == ENC_X || enc_span_start(t, t.cls[enc_span_prev(t, pos)], k)) return pos;
  }
}

template <class T>
GPUTOK_FN enc_i64 enc_spans_at(GPUTOK_THREAD const T& t, enc_i64 i, GPUTOK_DEV enc_u32* ent) {
  EncEntFlags out{ent};
  return enc_spans_into(t, i, out);
}

// A span text's common fields (EncClText, O2Text): the chunk, its marks, classes and
// contraction letters; no match under way.
template <class T>
GPUTOK_FN void enc_span_text(GPUTOK_THREAD T& t, const GPUTOK_DEV enc_u8* buf,
                             const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                             const GPUTOK_DEV enc_u8* letters, enc_u32 n_letters, enc_i64 n) {
  t.buf = buf;
  t.mark = mark;
  t.cls = cls;
  t.letters = letters;
  t.n_letters = n_letters;
  t.n = n;
  t.start = -1;
}

// THE WHITESPACE RULE, the patterns' common tail, from a blank at i: \s*[\r\n]+ (up to the
// run's last CR/LF, when it has one), else \s+(?!\S) (the whole run at the segment's end, else
// all but its last character when that leaves one or more), else \s+ (its single character);
// end_whole puts \s++$ (the whole run when it reaches the segment's end) before them. A text
// type provides enc_span_at, enc_span_next, enc_span_blank (any \s) and enc_span_nl (CR/LF).
template <class T>
GPUTOK_FN enc_i64 enc_whitespace_end(GPUTOK_THREAD const T& t, enc_i64 i, bool end_whole) {
  enc_i64 j = i;
  enc_i64 last_nl = -1;
  enc_i64 last = i;  // the run's last char
  int chars = 0;
  enc_u8 k = enc_span_at(t, i);
  while (enc_span_blank(t, k)) {
    if (enc_span_nl(t, k)) last_nl = j;
    last = j;
    ++chars;
    j = enc_span_next(t, j);
    k = enc_span_at(t, j);
  }
  if (end_whole && k == ENC_X) return j;
  if (last_nl >= 0) return enc_span_next(t, last_nl);
  if (k == ENC_X || chars < 2) return j;
  return last;
}

// ---------------------------------------------------------------- spans and the matcher
// The cl100k / Llama 3 / Qwen2 / GPT-2 rules of gputok/stages/scan_cl.py (cl_span_start,
// cl_match, contraction_end: the Python reference the tests hold these to; read its docstring).

GPUTOK_FN bool enc_is_ws(enc_u8 c) { return c == ENC_SP || c == ENC_S || c == ENC_E; }
GPUTOK_FN bool enc_is_q(enc_u8 c) { return c == ENC_P || c == ENC_A; }

// THE CL SPAN RULE: a piece starts at a character of class c after one of class p in every
// parse (p == ENC_X: a segment start).
GPUTOK_FN bool enc_cl_span_start(enc_u8 p, enc_u8 c, int gpt2) {
  if (p == ENC_X) return c != ENC_X;
  if (c == ENC_SP || c == ENC_S) return !enc_is_ws(p);
  if (c == ENC_E) return p == ENC_L || p == ENC_N;
  if (c == ENC_L)
    return gpt2 ? (p == ENC_N || p == ENC_P || p == ENC_S) : (p == ENC_N || p == ENC_E);
  if (c == ENC_N) return p != ENC_N && !(gpt2 && p == ENC_SP);
  if (enc_is_q(c)) return p == ENC_L || p == ENC_N || p == ENC_S || p == ENC_E;
  return false;
}

// A read-only view of one chunk and the pattern's parameters.
struct EncClText {
  const GPUTOK_DEV enc_u8* buf;
  const GPUTOK_DEV enc_u8* mark;
  const GPUTOK_DEV enc_u8* cls;
  const GPUTOK_DEV enc_u8* letters;  // by code point: 1 = s|d|m|t, 2 = l, 4 = v|r, 8 = e
  enc_u32 n_letters;
  enc_i64 n;
  enc_i64 start;    // the current match's first byte (-1: none)
  int gpt2;         // GPT-2: CR/LF are S, " " is the only prefix, no [\r\n]* after punctuation
  int digit_group;  // 3: \p{N}{1,3}; 1: \p{N}; 0: \p{N}+
  int end_whole;    // \s++$: a whitespace run reaching the segment's end is one piece
};

// class of the character at q, ENC_X where its segment has ended (q <= n; cls[n] = ENC_X).
// The match's own first byte may carry the previous segment's end mark: it is in the segment.
GPUTOK_FN enc_u8 enc_cl_at(const EncClText t, enc_i64 q) {
  return ((t.mark[q] & ENC_SEG_END) && q != t.start) ? (enc_u8)ENC_X : t.cls[q];
}

// first byte after the character at q (at most n)
GPUTOK_FN enc_i64 enc_cl_next(const EncClText t, enc_i64 q) { return enc_next_char(t.buf, q, t.n); }

// The cl text as the shared rules see it (THE SPAN WALK, THE WHITESPACE RULE).
GPUTOK_FN enc_u8 enc_span_at(GPUTOK_THREAD const EncClText& t, enc_i64 q) {
  return enc_cl_at(t, q);
}
GPUTOK_FN enc_i64 enc_span_next(GPUTOK_THREAD const EncClText& t, enc_i64 q) {
  return enc_cl_next(t, q);
}
GPUTOK_FN bool enc_span_blank(GPUTOK_THREAD const EncClText&, enc_u8 k) { return enc_is_ws(k); }
GPUTOK_FN bool enc_span_nl(GPUTOK_THREAD const EncClText&, enc_u8 k) { return k == ENC_E; }
GPUTOK_FN enc_u8 enc_span_cont(GPUTOK_THREAD const EncClText&) { return ENC_CONT; }
GPUTOK_FN enc_i64 enc_span_prev(GPUTOK_THREAD const EncClText& t, enc_i64 q) {
  return enc_prev_char(t.cls, q);
}
GPUTOK_FN enc_u8 enc_span_letters(GPUTOK_THREAD const EncClText& t, enc_i64 q) {
  return enc_letter_bits(t.letters, t.n_letters, enc_decode(t.buf, q, t.n));
}
GPUTOK_FN void enc_span_begin(GPUTOK_THREAD EncClText& t, enc_i64 i) { t.start = i; }

// The matchers below are written over a text type T (EncClText here; the native CPU device's
// per-document pass has its own, kernels/cpu_text.h, whose classes come from the bytes as it
// goes, with no class or mark array), through its accessors, found by argument-dependent
// lookup: enc_span_at (the class at q, ENC_X past the segment's end), enc_span_next (the first
// byte after the character at q), enc_span_letters (the contraction letter bits of the
// character at q) and enc_span_begin (a match starts at i); and its fields gpt2, digit_group
// and end_whole.

// A set of classes as a bit per class (ENC_X, 0, is in none): the runs the matchers take.
#define ENC_SET(c) (1u << (c))

// The first byte at or after q whose character's class is not in SET: the end of a run. A text
// type may have its own, faster form of this (the native CPU device's walks ASCII bytes without
// decoding, 16 at a time: kernels/cpu_text.h); it must give this loop's answer.
template <enc_u32 SET, class T>
GPUTOK_FN enc_i64 enc_span_skip(GPUTOK_THREAD const T& t, enc_i64 q) {
  enc_u8 k = enc_span_at(t, q);
  while ((SET >> k) & 1u) {
    q = enc_span_next(t, q);
    k = enc_span_at(t, q);
  }
  return q;
}

// The contraction at i ("'" then s|d|m|t, or ll|ve|re, in the letters' case rule): the
// position after it, or i when there is none.
template <class T>
GPUTOK_FN enc_i64 enc_cl_contraction(GPUTOK_THREAD const T& t, enc_i64 i) {
  const enc_i64 q1 = enc_span_next(t, i);
  if (enc_span_at(t, q1) == ENC_X) return i;
  const enc_u8 t1 = enc_span_letters(t, q1);
  const enc_i64 q2 = enc_span_next(t, q1);
  if (t1 & 1) return q2;
  const enc_u8 t2 = enc_span_at(t, q2) == ENC_X ? (enc_u8)0 : enc_span_letters(t, q2);
  if ((t1 & t2 & 2) || ((t1 & 4) && (t2 & 8))) return enc_span_next(t, q2);
  return i;
}

// THE CL MATCHER: the end of the match that starts at i (a true piece start): the pattern's
// alternatives in order, leftmost-first (scan_cl.py, cl_match).
template <class T>
GPUTOK_FN enc_i64 enc_cl_match(T t, enc_i64 i) {
  enc_span_begin(t, i);
  const enc_u8 c = enc_span_at(t, i);
  // 1. a contraction
  if (c == ENC_A) {
    const enc_i64 e = enc_cl_contraction(t, i);
    if (e != i) return e;
  }
  // 2. a word: the letter run, after one prefix character
  if (c == ENC_L) return enc_span_skip<ENC_SET(ENC_L)>(t, enc_span_next(t, i));
  const enc_i64 after = enc_span_next(t, i);
  const enc_u8 ka = enc_span_at(t, after);
  if (ka == ENC_L && (t.gpt2 ? c == ENC_SP : (c != ENC_E && c != ENC_N)))
    return enc_span_skip<ENC_SET(ENC_L)>(t, enc_span_next(t, after));
  // 3. digits
  const enc_i64 d = (t.gpt2 && c == ENC_SP && ka == ENC_N) ? after : i;
  if (enc_span_at(t, d) == ENC_N) {
    if (t.digit_group == 0) return enc_span_skip<ENC_SET(ENC_N)>(t, d);
    enc_i64 j = enc_span_next(t, d);
    for (int k = 1; k < t.digit_group && enc_span_at(t, j) == ENC_N; ++k) j = enc_span_next(t, j);
    return j;
  }
  // 4. punctuation: one optional " ", the run, then (cl) CR/LF
  const enc_i64 s = (c == ENC_SP && enc_is_q(ka)) ? after : i;
  if (enc_is_q(enc_span_at(t, s))) {
    const enc_i64 j = enc_span_skip<ENC_SET(ENC_P) | ENC_SET(ENC_A)>(t, s);
    return t.gpt2 ? j : enc_span_skip<ENC_SET(ENC_E)>(t, j);
  }
  // 5. whitespace (THE WHITESPACE RULE; \s++$ first when end_whole)
  return enc_whitespace_end(t, i, t.end_whole != 0);
}

// The cl rules as THE SPAN WALK sees them.
GPUTOK_FN bool enc_span_start(GPUTOK_THREAD const EncClText& t, enc_u8 p, enc_u8 c) {
  return enc_cl_span_start(p, c, t.gpt2);
}
GPUTOK_FN enc_i64 enc_span_match(GPUTOK_THREAD const EncClText& t, enc_i64 i) {
  return enc_cl_match(t, i);
}
