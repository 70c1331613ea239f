// spm_rules.h: SentencePiece BPE (character-level BPE: SentencePiece .model files and SPM-style
// HF tokenizer.json files) on a device, written once for every dialect: CUDA and the native CPU
// device through kernels/encode_spm.cu, Metal through shaders/encode_spm_*.metal. The numpy
// reference of each kernel is in gputok/stages/spm_arrays.py (one function named after it);
// gputok/stages/spm.py and hf_spm.py are the families' host forms, cpu_ref/spm.py the spec.
//
// The text a chunk holds is each segment's raw UTF-8 (segments: the text between special tokens)
// or, for a normaliser the device does not run (a charsmap, collapsed whitespace), its
// normalised form. The identity normaliser of Mistral, Llama 2 and their tokenizer.json
// conversions is read *virtually*: a " " is read as "▁" (ENC_SPM_ESCAPE), and a segment whose
// first byte carries ENC_SPM_DUMMY starts with a "▁" that no byte holds (the dummy prefix).
//
//   THE SPM CUT      enc_spm_entry_at: an entry (span) starts between two characters that sit side
//                    by side inside no mergeable piece (the cut set), at segment starts, at token
//                    spans and user-defined pieces (host-found, ENC_SPECIAL_START), after them
//   THE SPM SYMBOLS  enc_spm_symbols: a span's initial symbols, one per character (the symbol
//                    table; a character no piece holds is ENC_SPM_UNKNOWN | code point), or HF's
//                    initial symbols (byte tokens, a fused unk) for tokenizer.json models
//   THE COMPARATOR   the merge itself: enc_merge_small / rounds + heap (encode_merge_rules.h) over
//                    symbol ids, the pair table's priority = dense score rank (SentencePiece) or
//                    merge index (HF)
//   THE SPM EXPAND   enc_spm_expand: final symbols no piece emits become byte pieces (byte
//                    fallback) or one unk per run (SentencePiece only)
//   THE UNK RUN      enc_spm_fuse_drop: a run of unk ids across two spans of one segment is one
//
// Room: a span of L bytes has at most L + 1 symbols and ids (one character is at least one
// byte and becomes at most one id per byte; the dummy "▁" adds one, and the host sends a model
// whose "▁" is not one emitted piece to its host stages). So entry e's ids and workspace live at
// offset pstart[e] + e of arrays of n + entries slots.
#pragma once

#include "encode_rules.h"  // types, entries, UTF-8, THE PAIR PROBE, the merge rule

#ifndef ENC_SPM_UNKNOWN
#define ENC_SPM_UNKNOWN 0x80000000u  // symbol of a character no piece holds: | its code point
#endif
#ifndef ENC_SPM_CP_MASK
#define ENC_SPM_CP_MASK 0x1FFFFFu
#endif
#ifndef ENC_SPM_NO_ID
#define ENC_SPM_NO_ID 0xFFFFFFFFu  // no unk piece / no byte token for this byte
#endif
#ifndef ENC_SPM_DUMMY
#define ENC_SPM_DUMMY 16  // mark: the segment starting at this byte starts with a virtual "▁"
#endif
// flags (the model's scalars, gputok/backends/spm_tables.py)
#ifndef ENC_SPM_ESCAPE
#define ENC_SPM_ESCAPE 1  // read " " as "▁" (U+2581)
#endif
#ifndef ENC_SPM_HF
#define ENC_SPM_HF 2  // HF's initial symbols; final symbols are ids (no expansion)
#endif
#ifndef ENC_SPM_BYTE_FALLBACK
#define ENC_SPM_BYTE_FALLBACK 4  // characters no piece emits become byte pieces
#endif
#ifndef ENC_SPM_FUSE_UNK
#define ENC_SPM_FUSE_UNK 8  // a run of unk ids is one
#endif
#ifndef ENC_SPM_CUT_UNKNOWN
#define ENC_SPM_CUT_UNKNOWN 16  // cut on both sides of a character no piece holds
#endif
#ifndef ENC_SPM_SPLIT
#define ENC_SPM_SPLIT 32  // also cut before every "▁" (HF's Metaspace split)
#endif
#define ENC_SPM_SPACE 0x2581u

// One model's tables on the device (gputok/backends/spm_tables.py builds them).
struct EncSpm {
  const GPUTOK_DEV enc_u32* sym;       // symbol of every code point (0x110000)
  EncMergeTable pairs;                 // (left, right) symbols -> (priority, merged symbol)
  EncMergeTable cuts;                  // (cp_a << 32 | cp_b) present: the pair is inner (no cut)
  const GPUTOK_DEV enc_u32* fin;       // SentencePiece: symbol -> emitted id, or UNKNOWN | cp
  const GPUTOK_DEV enc_u32* byte_ids;  // byte -> byte piece (ENC_SPM_NO_ID: none)
  enc_u32 flags;
  enc_u32 unk;       // the unk id (ENC_SPM_NO_ID: none)
  enc_u32 space_id;  // the id "▁" is emitted as (a dummy before a user-defined piece)
};

// The normalised code point of the character at byte i (" " as "▁" when escaping).
GPUTOK_FN enc_u32 enc_spm_cp(GPUTOK_THREAD const EncSpm& m, const GPUTOK_DEV enc_u8* buf,
                             enc_i64 i, enc_i64 n) {
  const enc_u32 cp = enc_decode(buf, i, n);
  return (cp == 0x20u && (m.flags & ENC_SPM_ESCAPE)) ? ENC_SPM_SPACE : cp;
}

GPUTOK_FN bool enc_spm_inner(GPUTOK_THREAD const EncSpm& m, enc_u32 a, enc_u32 b) {
  enc_u32 unused;
  return enc_pair_lookup(m.cuts, a, b, &unused) != ENC_NO_MERGE;
}

// THE SPM CUT between the characters a and b of one segment: no mergeable piece has them side by
// side (then no merge, and no user-defined piece, can cross), or HF's Metaspace split before "▁".
// Next to a character no piece holds there is a cut (SentencePiece) or none (HF, whose byte
// tokens and unk may merge), ENC_SPM_CUT_UNKNOWN.
GPUTOK_FN bool enc_spm_cut(GPUTOK_THREAD const EncSpm& m, enc_u32 a, enc_u32 b) {
  if ((m.flags & ENC_SPM_SPLIT) && b == ENC_SPM_SPACE) return true;
  if (enc_spm_inner(m, a, b)) return false;
  if (!(m.flags & ENC_SPM_CUT_UNKNOWN) &&
      (m.sym[a] >= ENC_SPM_UNKNOWN || m.sym[b] >= ENC_SPM_UNKNOWN))
    return false;
  return true;
}

// Whether an entry starts at the character at byte i > 0 of the chunk, whose mark is k, the
// previous byte's mark kp, the previous character's normalised code point a and its own b:
// token spans (specials and user-defined pieces) are one entry each, a segment starts one, a
// character right after a span starts one, and THE SPM CUT between two characters of a segment
// starts one. (Byte 0 always starts one, a continuation byte never.)
GPUTOK_FN bool enc_spm_starts(GPUTOK_THREAD const EncSpm& m, enc_u32 k, enc_u32 kp, enc_u32 a,
                              enc_u32 b) {
  if (k & ENC_SPECIAL_START) return true;
  if (k & ENC_OUTSIDE) return false;
  if ((k & ENC_SEG_START) || (kp & ENC_OUTSIDE)) return true;
  return enc_spm_cut(m, a, b);
}

// ent[i] of encode_spm_spans (i < n + 2): enc_spm_starts at every character, the sentinel at n.
GPUTOK_FN enc_u32 enc_spm_entry_at(GPUTOK_THREAD const EncSpm& m, const GPUTOK_DEV enc_u8* buf,
                                   enc_i64 n, const GPUTOK_DEV enc_u8* mark, enc_i64 i) {
  if (i >= n) return i == n ? 1u : 0u;
  const enc_u32 k = mark[i];
  if ((buf[i] & 0xC0u) == 0x80u) return (k & ENC_SPECIAL_START) ? 1u : 0u;  // inside a character
  if (i == 0) return (k & ENC_OUTSIDE) && !(k & ENC_SPECIAL_START) ? 0u : 1u;
  if (k & (ENC_SPECIAL_START | ENC_OUTSIDE | ENC_SEG_START)) return enc_spm_starts(m, k, 0, 0, 0);
  if (mark[i - 1] & ENC_OUTSIDE) return 1u;
  enc_i64 j = i - 1;
  while (j > 0 && (buf[j] & 0xC0u) == 0x80u) --j;  // the character before (same segment)
  return enc_spm_starts(m, k, mark[i - 1], enc_spm_cp(m, buf, j, n), enc_spm_cp(m, buf, i, n))
             ? 1u
             : 0u;
}

// THE SPM SYMBOLS of the span [s, end) into ids[0 ..) (dummy: a "▁" first); returns how many.
// SentencePiece: one symbol per character. HF (ENC_SPM_HF, BPE::merge_word): a character of the
// vocabulary is its id; else its byte tokens when byte fallback has them all; else nothing when
// there is no unk token; else an unk, fused with the unk before it (ENC_SPM_FUSE_UNK), which is
// written only when the next character of the vocabulary (or the end) comes: byte tokens
// emitted meanwhile come out before it (HF's order).
GPUTOK_FN enc_u32 enc_spm_symbols(GPUTOK_THREAD const EncSpm& m, const GPUTOK_DEV enc_u8* buf,
                                  enc_u32 s, enc_u32 end, bool dummy, GPUTOK_DEV enc_u32* ids) {
  enc_u32 k = 0;
  bool pending = false;
  enc_i64 i = s;
  bool first = dummy;
  while (first || i < (enc_i64)end) {
    enc_u32 cp;
    int len = 0;
    if (first) {
      cp = (m.flags & ENC_SPM_ESCAPE) ? ENC_SPM_SPACE : 0x20u;
      first = false;
    } else {
      len = enc_utf8_len(buf[i]);
      cp = enc_spm_cp(m, buf, i, end);
      i += len;
    }
    const enc_u32 sy = m.sym[cp];
    if (!(m.flags & ENC_SPM_HF) || sy < ENC_SPM_UNKNOWN) {
      if (pending) {
        ids[k++] = m.unk;
        pending = false;
      }
      ids[k++] = sy;
      continue;
    }
    if (m.flags & ENC_SPM_BYTE_FALLBACK) {
      const enc_i64 at = i - len;
      bool all = true;
      for (int q = 0; q < len; ++q) all = all && m.byte_ids[buf[at + q]] != ENC_SPM_NO_ID;
      if (all) {
        for (int q = 0; q < len; ++q) ids[k++] = m.byte_ids[buf[at + q]];
        continue;
      }
    }
    if (m.unk == ENC_SPM_NO_ID) continue;  // no unk token: HF drops the character
    if (pending && !(m.flags & ENC_SPM_FUSE_UNK)) ids[k++] = m.unk;
    pending = true;
  }
  if (pending) ids[k++] = m.unk;
  return k;
}

// The UTF-8 of code point cp into b[0 ..); returns its length.
GPUTOK_FN int enc_spm_utf8(enc_u32 cp, GPUTOK_THREAD enc_u8* b) {
  if (cp < 0x80u) {
    b[0] = (enc_u8)cp;
    return 1;
  }
  if (cp < 0x800u) {
    b[0] = (enc_u8)(0xC0u | (cp >> 6));
    b[1] = (enc_u8)(0x80u | (cp & 0x3Fu));
    return 2;
  }
  if (cp < 0x10000u) {
    b[0] = (enc_u8)(0xE0u | (cp >> 12));
    b[1] = (enc_u8)(0x80u | ((cp >> 6) & 0x3Fu));
    b[2] = (enc_u8)(0x80u | (cp & 0x3Fu));
    return 3;
  }
  b[0] = (enc_u8)(0xF0u | (cp >> 18));
  b[1] = (enc_u8)(0x80u | ((cp >> 12) & 0x3Fu));
  b[2] = (enc_u8)(0x80u | ((cp >> 6) & 0x3Fu));
  b[3] = (enc_u8)(0x80u | (cp & 0x3Fu));
  return 4;
}

// What one final symbol emits (THE SPM EXPAND): *cp = the character to expand, or the id itself.
GPUTOK_FN bool enc_spm_final_id(GPUTOK_THREAD const EncSpm& m, enc_u32 f,
                                GPUTOK_THREAD enc_u32* out) {
  const enc_u32 g = f < ENC_SPM_UNKNOWN ? m.fin[f] : f;
  *out = g < ENC_SPM_UNKNOWN ? g : (g & ENC_SPM_CP_MASK);
  return g < ENC_SPM_UNKNOWN;
}

// THE SPM EXPAND of the k final symbols in ids[0 .. k), in place; returns the id count. A symbol
// some piece emits is that id (fin); any other is one character (an unknown one, a character
// that only occurs inside pieces, or one that spells a control/byte/unused piece): its UTF-8
// bytes as byte pieces (byte fallback), else the unk id, a run of them one (the run's first).
// Without byte fallback no symbol has more than one id: the ids are written from the first on
// (symbol j's id, if any, goes at or before j). With it none has fewer: from the last back
// (symbol j's ids start at or after j); either way nothing is overwritten before it is read.
GPUTOK_FN enc_u32 enc_spm_expand(GPUTOK_THREAD const EncSpm& m, GPUTOK_DEV enc_u32* ids,
                                 enc_u32 k) {
  if (m.flags & ENC_SPM_HF) return k;
  enc_u32 v;
  if (!(m.flags & ENC_SPM_BYTE_FALLBACK)) {
    enc_u32 w = 0;
    bool prev_unk = false;
    for (enc_u32 j = 0; j < k; ++j) {
      if (enc_spm_final_id(m, ids[j], &v)) {
        ids[w++] = v;
        prev_unk = false;
      } else {
        if (!prev_unk) ids[w++] = m.unk;
        prev_unk = true;
      }
    }
    return w;
  }
  enc_u8 b[4];
  enc_u32 total = 0;
  for (enc_u32 j = 0; j < k; ++j)
    total += enc_spm_final_id(m, ids[j], &v) ? 1u : (enc_u32)enc_spm_utf8(v, b);
  enc_u32 w = total;
  for (enc_u32 j = k; j-- > 0;) {
    if (enc_spm_final_id(m, ids[j], &v)) {
      ids[--w] = v;
    } else {
      const int len = enc_spm_utf8(v, b);
      for (int q = len; q-- > 0;) ids[--w] = m.byte_ids[b[q]];
    }
  }
  return total;
}

// Workspace of one span's merge, each array at the span's offset o (pstart[e] + e): the pair
// priorities of a short run (where), and a long run's linked list and block heaps
// (EncLongWork, the same arrays as encode_merge_long's, per-run tree and size slots at
// o / ENC_LONG_PIECE).
GPUTOK_FN enc_u32 enc_spm_merge_run(GPUTOK_THREAD const EncSpm& m, GPUTOK_DEV enc_u32* ids,
                                    GPUTOK_THREAD const EncLongWork& ws, enc_u32 o, enc_u32 k) {
  if (k < ENC_LONG_PIECE) return enc_merge_small(m.pairs, ids, ws.where + o, k);
  bool finished = false;  // rounds while they are the rule, then the heap
  enc_u32 got = enc_merge_rounds(m.pairs, ids, ws.where + o, k, &finished);
  if (!finished) {
    const enc_u32 unit = o / ENC_LONG_PIECE;
    EncBlockHeaps bh;
    bh.heap = ws.heap + o;
    bh.where = ws.where + o;
    bh.tree = ws.tree + 2 * (enc_u64)unit;
    bh.size = ws.size + unit;
    bh.nb = 0;
    got = enc_merge_heap(m.pairs, ids, ws.nxt + o, ws.prv + o, bh, got);
  }
  return got;
}

// One entry's ids into ids[0 ..) (scratch at offset o = pstart[e] + e); returns how many. A
// token span is its id (none for ENC_GAP), after the dummy's "▁" when a segment starts with a
// user-defined piece; a span is THE SPM SYMBOLS, merged (THE COMPARATOR), then THE SPM EXPAND.
GPUTOK_FN enc_u32 enc_spm_entry(GPUTOK_THREAD const EncSpm& m, const GPUTOK_DEV enc_u8* buf,
                                enc_u32 s, enc_u32 end, enc_u32 sp, bool dummy,
                                GPUTOK_DEV enc_u32* ids, GPUTOK_THREAD const EncLongWork& ws,
                                enc_u32 o) {
  if (sp != ENC_NORMAL) {
    enc_u32 k = 0;
    if (dummy) ids[k++] = m.space_id;
    if (sp != ENC_GAP) ids[k++] = sp;
    return k;
  }
  const enc_u32 k = enc_spm_symbols(m, buf, s, end, dummy, ids);
  return enc_spm_expand(m, ids, enc_spm_merge_run(m, ids, ws, o, k));
}

// THE UNK RUN (SentencePiece without byte fallback): entry e drops its first id when that id is
// the unk, the entry before it is a span of the same segment (e does not start a segment), and
// that span's last id is the unk too. A span's last id is never dropped (a span of one dropped
// id is itself unk, so the run goes on through it), so each entry reads its neighbour's ids as
// the merge left them.
GPUTOK_FN enc_u32 enc_spm_fuse_drop(enc_u32 unk, enc_u32 sp, enc_u32 prev_sp, bool seg_start,
                                    enc_u32 first_id, enc_u32 count, enc_u32 prev_last,
                                    enc_u32 prev_count) {
  return (sp == ENC_NORMAL && prev_sp == ENC_NORMAL && !seg_start && count > 0 &&
          prev_count > 0 && first_id == unk && prev_last == unk)
             ? 1u
             : 0u;
}
