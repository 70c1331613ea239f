// encode_pretok_rules.h: the pre-tokenizer's per-byte rules, for every dialect (included by
// encode_rules.h, which defines the types, constants and UTF-8 helpers used here).
#pragma once

// ---------------------------------------------------------------- the pre-tokenizer
// gputok/stages/scan.py's method in byte coordinates (kernels/encode_pretok.cu explains the
// launches): a character's class sits on its first byte (continuation bytes hold ENC_CONT) and
// the host's per-byte marks say where segments start and end.

GPUTOK_FN enc_u8 enc_run_class(enc_u8 c) { return c == ENC_S ? (enc_u8)ENC_SP : c; }

// first byte of the character before the one starting at i (i is not a segment start)
GPUTOK_FN enc_i64 enc_prev_char(const GPUTOK_DEV enc_u8* cls, enc_i64 i) {
  enc_i64 j = i - 1;
  while (j > 0 && cls[j] == ENC_CONT) --j;
  return j;
}

// class of the character before the one at i (ENC_X at a segment start)
GPUTOK_FN enc_u8 enc_class_before(const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                                  enc_i64 i) {
  return (mark[i] & ENC_SEG_START) ? (enc_u8)ENC_X : cls[enc_prev_char(cls, i)];
}

// first byte after the character at i (at most n)
GPUTOK_FN enc_i64 enc_next_char(const GPUTOK_DEV enc_u8* buf, enc_i64 i, enc_i64 n) {
  const enc_i64 q = i + enc_utf8_len(buf[i]);
  return q < n ? q : n;
}

// class of the character at q, ENC_X when a segment ends there
GPUTOK_FN enc_u8 enc_class_at(const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                              enc_i64 q) {
  return (mark[q] & ENC_SEG_END) ? (enc_u8)ENC_X : cls[q];
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

// runv[i] = i + 1 where a run of one class starts (whitespace SP|S counts as one class), else 0;
// *ischar = 1 at character starts
GPUTOK_FN enc_u32 enc_runs_at(const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                              enc_i64 i, GPUTOK_THREAD enc_u32* ischar) {
  const enc_u8 c = cls[i];
  *ischar = c != ENC_CONT;
  bool start = false;
  if (c != ENC_CONT && c != ENC_X) {
    start = (mark[i] & ENC_SEG_START) ||
            enc_run_class(cls[enc_prev_char(cls, i)]) != enc_run_class(c);
  }
  return start ? (enc_u32)(i + 1) : 0u;
}

// The scanner family's tables: pair[(k_prev << pair_bits) | k] holds the window bits (and
// ENC_B_SPECIAL), NEXT / PREV2 test the class after / two before against a range.
struct EncPretokRule {
  const GPUTOK_DEV enc_u8* pair;
  int pair_bits, next_lo, next_n, prev2_lo, prev2_n;
  const GPUTOK_DEV enc_u8* letters;
  enc_u32 n_letters;
  int gpt2, digit_group, end_whole;
};

// What the window rule says at byte i in [0, n + 2): ent (1 where a piece starts) and, at the
// last character of a whitespace run, the class after the run for the run's first byte
// (ws_at < 0: none).
struct EncWindow {
  enc_u32 ent;
  enc_i64 ws_at;
  enc_u8 ws;
};

// THE WINDOW RULE: PAIR[k[i-1], k[i]] & (B_PAIR | NEXT(k[i+1]) | PREV2(k[i-2])), segment
// starts, special-token starts, and the sentinel at n (ent[n + 1] = 0 ends the scan).
GPUTOK_FN EncWindow enc_window_at(const GPUTOK_DEV enc_u8* buf, enc_i64 n,
                                  const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                                  GPUTOK_THREAD const EncPretokRule& r,
                                  const GPUTOK_DEV enc_u32* runstart, int track_ws, enc_i64 i) {
  EncWindow w;
  w.ent = 0;
  w.ws_at = -1;
  w.ws = 0;
  if (i >= n) {
    w.ent = i == n;
    return w;
  }
  const enc_u8 m = mark[i];
  const enc_u8 c = cls[i];
  if (m & ENC_SPECIAL_START) {
    w.ent = 1;
    return w;
  }
  if (c == ENC_CONT || c == ENC_X) return w;
  const enc_u8 kn = enc_class_at(mark, cls, enc_next_char(buf, i, n));
  if (m & ENC_SEG_START) {
    w.ent = 1;
  } else {
    const enc_i64 j = enc_prev_char(cls, i);
    const enc_u8 kp = cls[j];
    const enc_u8 kpp = enc_class_before(mark, cls, j);
    const enc_u8 rule = r.pair[(kp << r.pair_bits) | c];
    enc_u8 x = ENC_B_PAIR;
    if ((unsigned)(kn - r.next_lo) < (unsigned)r.next_n) x |= ENC_B_NEXT;
    if ((unsigned)(kpp - r.prev2_lo) < (unsigned)r.prev2_n) x |= ENC_B_PREV2;
    w.ent = (x & rule) != 0;
  }
  // the last character of a whitespace run tells the run's first what follows the run
  if (track_ws && enc_run_class(c) == ENC_SP && enc_run_class(kn) != ENC_SP) {
    w.ws_at = (enc_i64)runstart[i] - 1;
    w.ws = kn;
  }
  return w;
}

// The sparse corrections at byte i where PAIR has B_SPECIAL: ent[clear_at] = 0 and
// ent[set_at] = 1 (negative: none). They read only what earlier launches wrote, so thread order
// cannot matter; each dialect stores them its own way (CUDA: into ent; Metal, whose outputs are
// fresh: into a correction array the driver applies).
struct EncFix {
  enc_i64 clear_at;
  enc_i64 set_at;
};

// THE FIX RULE: contractions, digit groups, whitespace after CR/LF.
GPUTOK_FN EncFix enc_fix_at(const GPUTOK_DEV enc_u8* buf, enc_i64 n,
                            const GPUTOK_DEV enc_u8* mark, const GPUTOK_DEV enc_u8* cls,
                            GPUTOK_THREAD const EncPretokRule& r,
                            const GPUTOK_DEV enc_u32* runstart, const GPUTOK_DEV enc_u32* cidx,
                            const GPUTOK_DEV enc_u8* ws_next, enc_i64 i) {
  EncFix f;
  f.clear_at = -1;
  f.set_at = -1;
  const enc_u8 c = cls[i];
  if (c == ENC_CONT || c == ENC_X) return f;
  const enc_u8 kp = enc_class_before(mark, cls, i);
  if (!(r.pair[(kp << r.pair_bits) | c] & ENC_B_SPECIAL)) return f;
  if (c == ENC_A) {
    // an apostrophe that starts a piece, followed by a contraction suffix
    const enc_i64 q1 = enc_next_char(buf, i, n);
    if (enc_class_at(mark, cls, q1) != ENC_L) return f;
    const enc_i64 q2 = enc_next_char(buf, q1, n);
    const enc_u8 t1 = enc_letter_bits(r.letters, r.n_letters, enc_decode(buf, q1, n));
    const enc_u8 t2 = (mark[q2] & ENC_SEG_END)
                          ? (enc_u8)0
                          : enc_letter_bits(r.letters, r.n_letters, enc_decode(buf, q2, n));
    enc_i64 end;
    if (t1 & 1) {
      end = q2;
    } else if ((t1 & t2 & 2) || ((t1 & 4) && (t2 & 8))) {
      end = enc_next_char(buf, q2, n);
    } else {
      return f;
    }
    if (r.gpt2) f.clear_at = q1;  // the letters after the contraction start a new piece
    if (!(mark[end] & ENC_SEG_END)) f.set_at = end;
  } else if (c == ENC_N) {
    // a digit after a digit: cut every digit_group from the digit run's start
    if (r.digit_group > 1) {
      const enc_u32 off = cidx[i] - cidx[runstart[i] - 1];
      if (off % (enc_u32)r.digit_group == 0) f.set_at = i;
    }
  } else if (!r.gpt2 && (c == ENC_SP || c == ENC_S)) {
    // whitespace right after a CR/LF run (kp == E): cut here if punctuation took the CR/LF
    // run, or if the whitespace run from here has no further CR/LF (cl100k: unless it
    // reaches the end of the text)
    const enc_i64 es = (enc_i64)runstart[enc_prev_char(cls, i)] - 1;  // the CR/LF run start
    const enc_u8 before = enc_class_before(mark, cls, es);
    bool cut = before == ENC_P || before == ENC_A;
    if (!cut) {
      const enc_u8 after = ws_next[i];
      cut = after != ENC_E && !(r.end_whole && after == ENC_X);
    }
    if (cut) f.set_at = i;
  }
  return f;
}
