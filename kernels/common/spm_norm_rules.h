// spm_norm_rules.h: SentencePiece's normaliser (normalizer.cc) on a device, written once for
// every dialect: CUDA and the native CPU device through kernels/encode_spm.cu, Metal through
// shaders/encode_spm_norm_*.metal. The numpy reference is gputok/stages/spm_arrays.py
// (encode_spm_norm_len, encode_spm_norm_write: the family's own normaliser per segment,
// gputok/stages/spm_norm.py, itself checked against sentencepiece).
//
// THE CHARSMAP MATCH (enc_cm_match): the precompiled charsmap is a darts-clone double array
// (gputok/stages/charsmap.py states the format): from a position, the longest key that is a
// prefix of the rest of the segment, among the first ENC_CM_MAX_RESULTS keys found (shortest
// first, as sentencepiece keeps them), replaced by its NUL-terminated value; a value outside the
// string block means no rule.
// THE SPM NORMALISER (enc_spm_normalize): per segment, sentencepiece's loop: leading prefixes
// that normalise to exactly " " skipped (collapsing whitespace), the dummy "▁" in front (or at
// the end, whitespace as suffix), each rule's replacement (or one character copied) with its
// leading spaces dropped after a space (collapsing), " " written as "▁" (escaping), trailing
// space symbols dropped (collapsing). One thread per segment: a segment is walked in order,
// once to measure its output and once to write it.
// THE USER-DEFINED MATCH (enc_ud_match): sentencepiece's prefix matcher over the model's
// user-defined pieces: from a position, the longest piece that is a byte prefix of the rest of
// the segment. THE SPM NORMALISER tries it first at every position (the piece is copied as it
// is, never rewritten by the charsmap; its spaces are still written as the space symbol), and
// the BPE takes it again on the normalised sentence for its initial symbols (one frozen symbol
// each, leftmost first: kernels/host_spm.h, gputok/stages/spm_plan.py user_defined_spans).
// The pieces are a byte trie in one uint32 array (gputok/stages/spm_tables.py ud_trie): ud[0 ..
// 8) the bit set of the pieces' first bytes (most characters start none: one load says so);
// node k is ud[8 + 3k .. 8 + 3k + 3) = (its first edge, its edge count, 1 + the piece's id or
// 0: no piece ends here), node 0 the root; an edge is byte << 24 | child node, a node's edges
// sorted by byte.
#pragma once

#include "encode_rules.h"  // types, UTF-8

#ifndef ENC_CM_MAX_RESULTS
#define ENC_CM_MAX_RESULTS 32  // sentencepiece keeps at most 32 prefix matches per position
#endif
// the normaliser's flags (gputok/stages/spm_tables.py)
#ifndef ENC_NORM_DUMMY
#define ENC_NORM_DUMMY 1  // add_dummy_prefix
#endif
#ifndef ENC_NORM_COLLAPSE
#define ENC_NORM_COLLAPSE 2  // remove_extra_whitespaces
#endif
#ifndef ENC_NORM_ESCAPE
#define ENC_NORM_ESCAPE 4  // escape_whitespaces: " " is written "▁"
#endif
#ifndef ENC_NORM_SUFFIX
#define ENC_NORM_SUFFIX 8  // treat_whitespace_as_suffix: the dummy at the end
#endif

struct EncCharsMap {
  const GPUTOK_DEV enc_u32* units;
  enc_u32 n_units;
  const GPUTOK_DEV enc_u8* strings;
  enc_u32 n_strings;
  enc_u32 flags;
  const GPUTOK_DEV enc_u32* ud;  // the user-defined pieces' trie (n_ud == 0: none)
  enc_u32 n_ud;
};

// THE USER-DEFINED MATCH at buf[pos .. end): the longest piece's length in bytes (0: none) and,
// in *id, its id.
GPUTOK_FN enc_u32 enc_ud_match(const GPUTOK_DEV enc_u32* ud, enc_u32 n_ud,
                               const GPUTOK_DEV enc_u8* buf, enc_u32 pos, enc_u32 end,
                               GPUTOK_THREAD enc_u32* id) {
  if (n_ud == 0 || pos >= end || !((ud[buf[pos] >> 5] >> (buf[pos] & 31u)) & 1u)) return 0;
  enc_u32 node = 0, best = 0;
  for (enc_u32 i = pos; i < end; ++i) {
    const enc_u32 b = buf[i];
    const GPUTOK_DEV enc_u32* at = ud + 8 + 3 * node;
    enc_u32 lo = at[0], hi = lo + at[1];
    const enc_u32 last = hi;
    while (lo < hi) {  // the edge of byte b (binary search: the root may have many)
      const enc_u32 mid = lo + (hi - lo) / 2;
      if ((ud[mid] >> 24) < b) lo = mid + 1; else hi = mid;
    }
    if (lo == last || (ud[lo] >> 24) != b) break;
    node = ud[lo] & 0xFFFFFFu;
    const enc_u32 piece = ud[8 + 3 * node + 2];
    if (piece != 0) {
      best = i + 1 - pos;
      *id = piece - 1;
    }
  }
  return best;
}

GPUTOK_FN enc_u32 enc_cm_off(enc_u32 unit) { return (unit >> 10) << ((unit & 512u) >> 6); }

// THE CHARSMAP MATCH at buf[pos .. end): the key's length in bytes (0: no rule) and, in *value,
// its replacement's offset in the string block.
GPUTOK_FN enc_u32 enc_cm_match(GPUTOK_THREAD const EncCharsMap& cm, const GPUTOK_DEV enc_u8* buf,
                               enc_u32 pos, enc_u32 end, GPUTOK_THREAD enc_u32* value) {
  if (cm.n_units == 0) return 0;
  enc_u32 node = enc_cm_off(cm.units[0]);
  enc_u32 best = 0, found = 0, val = 0;
  for (enc_u32 i = pos; i < end; ++i) {
    const enc_u32 b = buf[i];
    node ^= b;
    if (node >= cm.n_units) break;
    const enc_u32 unit = cm.units[node];
    if ((unit & 0x800000FFu) != b) break;
    node ^= enc_cm_off(unit);
    if ((unit & 0x100u) && found < ENC_CM_MAX_RESULTS) {
      ++found;
      best = i + 1 - pos;
      val = cm.units[node] & 0x7FFFFFFFu;
    }
  }
  if (best == 0 || val >= cm.n_strings) return 0;  // (the longest's value outside: no rule)
  *value = val;
  return best;
}

// The output of one segment, measured (write false) or written (out[0 .. limit)): bytes go out
// one at a time, a space as the space symbol; the length of the output before its trailing
// space symbols is kept for the collapse.
struct EncNormOut {
  GPUTOK_DEV enc_u8* out;
  bool write;
  enc_u32 limit;  // bytes written at most (the measured length): trailing spaces past it dropped
  enc_u32 len;    // bytes so far
  enc_u32 keep;   // bytes up to the last character that is not a space symbol
};

GPUTOK_FN void enc_norm_byte(GPUTOK_THREAD EncNormOut& o, enc_u8 b) {
  if (o.write && o.len < o.limit) o.out[o.len] = b;
  ++o.len;
}

// One character of a replacement (or of the text), its bytes c[0 .. n): " " becomes the space
// symbol; a space symbol (" ", or "▁" when escaping) does not move keep.
GPUTOK_FN void enc_norm_char(GPUTOK_THREAD EncNormOut& o, enc_u32 flags,
                             const GPUTOK_DEV enc_u8* c, enc_u32 n) {
  const bool escape = (flags & ENC_NORM_ESCAPE) != 0;
  if (n == 1 && c[0] == 0x20u) {
    if (escape) {
      enc_norm_byte(o, 0xE2u);
      enc_norm_byte(o, 0x96u);
      enc_norm_byte(o, 0x81u);
    } else {
      enc_norm_byte(o, 0x20u);
    }
    return;
  }
  for (enc_u32 k = 0; k < n; ++k) enc_norm_byte(o, c[k]);
  if (!(escape && n == 3 && c[0] == 0xE2u && c[1] == 0x96u && c[2] == 0x81u)) o.keep = o.len;
}

// The dummy: one space symbol (keep unmoved).
GPUTOK_FN void enc_norm_space(GPUTOK_THREAD EncNormOut& o, enc_u32 flags) {
  if (flags & ENC_NORM_ESCAPE) {
    enc_norm_byte(o, 0xE2u);
    enc_norm_byte(o, 0x96u);
    enc_norm_byte(o, 0x81u);
  } else {
    enc_norm_byte(o, 0x20u);
  }
}

// One normalising step at buf[pos .. end) (THE USER-DEFINED MATCH, else THE CHARSMAP MATCH,
// else one character): the replacement (*rep, *rep_len: in the string block
// when *from_strings, else in buf) and the bytes consumed.
GPUTOK_FN enc_u32 enc_norm_prefix(GPUTOK_THREAD const EncCharsMap& cm,
                                  const GPUTOK_DEV enc_u8* buf, enc_u32 pos, enc_u32 end,
                                  GPUTOK_THREAD enc_u32* rep, GPUTOK_THREAD enc_u32* rep_len,
                                  GPUTOK_THREAD bool* from_strings) {
  enc_u32 value = 0;
  const enc_u32 u = enc_ud_match(cm.ud, cm.n_ud, buf, pos, end, &value);
  if (u != 0) {  // a user-defined piece: copied as it is
    *rep = pos;
    *rep_len = u;
    *from_strings = false;
    return u;
  }
  const enc_u32 n = enc_cm_match(cm, buf, pos, end, &value);
  if (n != 0) {
    enc_u32 k = value;
    while (k < cm.n_strings && cm.strings[k] != 0) ++k;
    *rep = value;
    *rep_len = k - value;
    *from_strings = true;
    return n;
  }
  const enc_u32 c = (enc_u32)enc_utf8_len(buf[pos]);
  *rep = pos;
  *rep_len = c;
  *from_strings = false;
  return c;
}

// THE SPM NORMALISER of the segment buf[a .. end) into o (see the file's head); returns the
// output's length.
GPUTOK_FN enc_u32 enc_spm_normalize(GPUTOK_THREAD const EncCharsMap& cm,
                                    const GPUTOK_DEV enc_u8* buf, enc_u32 a, enc_u32 end,
                                    GPUTOK_THREAD EncNormOut& o) {
  const enc_u32 f = cm.flags;
  const bool collapse = (f & ENC_NORM_COLLAPSE) != 0;
  enc_u32 pos = a, rep = 0, rep_len = 0;
  bool strs = false;
  if (collapse) {  // leading prefixes that normalise to exactly " "
    while (pos < end) {
      const enc_u32 n = enc_norm_prefix(cm, buf, pos, end, &rep, &rep_len, &strs);
      const GPUTOK_DEV enc_u8* r = strs ? cm.strings + rep : buf + rep;
      if (!(rep_len == 1 && r[0] == 0x20u)) break;
      pos += n;
    }
  }
  o.len = o.keep = 0;
  if (pos == end) return 0;
  const bool dummy = (f & ENC_NORM_DUMMY) != 0, suffix = (f & ENC_NORM_SUFFIX) != 0;
  if (dummy && !suffix) enc_norm_space(o, f);
  bool prev_space = collapse;
  while (pos < end) {
    const enc_u32 n = enc_norm_prefix(cm, buf, pos, end, &rep, &rep_len, &strs);
    const GPUTOK_DEV enc_u8* r = strs ? cm.strings + rep : buf + rep;
    enc_u32 k = 0;
    if (prev_space)
      while (k < rep_len && r[k] == 0x20u) ++k;  // a rewrite's leading spaces after a space
    if (k < rep_len) {
      prev_space = r[rep_len - 1] == 0x20u;
      while (k < rep_len) {
        const enc_u32 c = (enc_u32)enc_utf8_len(r[k]);
        const enc_u32 cn = k + c <= rep_len ? c : rep_len - k;
        enc_norm_char(o, f, r + k, cn);
        k += cn;
      }
    }
    pos += n;
    if (!collapse) prev_space = false;
  }
  enc_u32 len = collapse ? o.keep : o.len;  // trailing space symbols go, literal "▁" ones too
  if (dummy && suffix) {
    o.len = len;
    enc_norm_space(o, f);
    len = o.len;
  }
  return len;
}
