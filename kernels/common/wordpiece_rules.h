// wordpiece_rules.h: the WordPiece (BERT) match of one entry, written once for every dialect
// (CUDA and the native CPU device through kernels/encode_wordpiece.cu, Metal through
// shaders/encode_wordpiece.metal). gputok/components/segmenters/wordpiece.py (encode_wordpiece) is the numpy
// reference and states the same rule.
//
// The vocabulary is a byte trie whose edges live in the merge table's hash layout (the
// interleaved slots of device_tables.merge_slots): key (node << 32 | byte) -> prio = child node,
// merged = id of the token that ends at the child (ENC_NO_TOKEN if none), so enc_pair_lookup
// (THE PAIR PROBE) walks it.
//
// THE WORDPIECE MATCH: enc_wordpiece_entry.
#pragma once

#include "encode_rules.h"  // types, entry kinds, THE PAIR PROBE

#ifndef ENC_NO_TOKEN
#define ENC_NO_TOKEN 0xFFFFFFFFu  // no token ends at this trie node / no continuation root
#endif
#ifndef ENC_WP_ROOT
#define ENC_WP_ROOT 0  // the trie's root node
#endif

// The vocabulary's trie and the model's constants.
struct EncWordPiece {
  EncMergeTable trie;
  enc_u32 cont;       // the node "##" leads to (ENC_NO_TOKEN: no continuation pieces)
  enc_u32 unk;        // the unknown-word id
  enc_u32 max_chars;  // a longer word is one unk id
};

// THE WORDPIECE MATCH: entry e's ids into ids[0 ..) (scratch at the entry's start); returns how
// many. A special token is its one id, the sentinel none. A word (bytes [s, end)):
//   - more than max_chars characters (non-continuation bytes): one unk id;
//   - else from pos = s: walk from ENC_WP_ROOT (first piece) or `cont` (later pieces) as far as
//     the trie goes; the last node that ends a token is the longest match (tokens are whole
//     UTF-8 strings, so it ends on a character boundary); emit its id and go on after it; no
//     match at all makes the whole word one unk id (HF's rule).
// A word of L bytes has at most L pieces, so its ids fit in its own L slots of scratch.
GPUTOK_FN enc_u32 enc_wordpiece_entry(GPUTOK_THREAD const EncWordPiece& wp,
                                      const GPUTOK_DEV enc_u8* buf, enc_u32 s, enc_u32 end,
                                      enc_u32 sp, GPUTOK_DEV enc_u32* ids) {
  if (sp != ENC_NORMAL) {  // a special token (one id) or the sentinel (none)
    if (sp == ENC_GAP) return 0u;
    ids[0] = sp;
    return 1u;
  }
  enc_u32 chars = 0;
  for (enc_u32 p = s; p < end; ++p) chars += (buf[p] & 0xC0u) != 0x80u;
  bool ok = chars <= wp.max_chars;
  enc_u32 n = 0;
  enc_u32 pos = s;
  while (ok && pos < end) {
    enc_u32 node = pos == s ? (enc_u32)ENC_WP_ROOT : wp.cont;
    enc_u32 best_len = 0, best_id = 0;
    if (node != ENC_NO_TOKEN) {
      for (enc_u32 p = pos; p < end; ++p) {
        enc_u32 tok;
        const enc_u32 child = enc_pair_lookup(wp.trie, node, (enc_u32)buf[p], &tok);
        if (child == ENC_NO_MERGE) break;
        node = child;
        if (tok != ENC_NO_TOKEN) {  // the longest match so far
          best_len = p + 1 - pos;
          best_id = tok;
        }
      }
    }
    if (best_len == 0) {
      ok = false;  // one failure spoils the whole word
    } else {
      ids[n++] = best_id;
      pos += best_len;
    }
  }
  if (!ok) {
    ids[0] = wp.unk;
    n = 1;
  }
  return n;
}
