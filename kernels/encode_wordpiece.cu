// encode_wordpiece.cu: WordPiece (BERT) greedy longest match of every word of a chunk (driven by
// gputok/backends/driver.py; the numpy reference is encode_wordpiece in
// gputok/stages/wordpiece.py).
//
// Entries are words (cut on the host: BertNormalizer + BertPreTokenizer), special tokens and the
// sentinel, exactly as for BPE pieces (encode_common.cuh). The vocabulary is a byte trie whose
// edges live in the merge table's hash layout (the interleaved slots of
// device_tables.merge_slots): key (node << 32 | byte) -> prio = child node, merged = id of the
// token that ends at the child (ENC_NO_TOKEN if none), so enc_pair_lookup walks it. One thread per word:
//   - more than max_chars characters (non-continuation bytes): the word is one unk id;
//   - else from pos = the word's start: walk from ENC_WP_ROOT (first piece) or `cont` (the node
//     "##" leads to) as far as the trie goes; the last node that ends a token is the longest
//     match (tokens are whole UTF-8 strings, so it ends on a character boundary); emit its id
//     and go on after it; no match at all makes the whole word one unk id (HF's rule).
// A word of L bytes has at most L pieces: its ids go to scratch[pstart[e] ...], as BPE pieces'
// do, and encode_emit.cu copies them out.
//
// Performance notes (to measure on a GPU): one thread per word diverges on word length, but
// words are short (English: ~5 bytes, max 100 characters); each step is one hash probe, ~1.2
// slots on average at load <= 1/2. A shared-memory cache of the root's 256 edges is the first
// thing to try if the probe shows up.
#include "encode_common.cuh"

#ifndef ENC_NO_TOKEN
#define ENC_NO_TOKEN 0xFFFFFFFFu  // no token ends at this trie node / no continuation root
#endif
#ifndef ENC_WP_ROOT
#define ENC_WP_ROOT 0  // the trie's root node
#endif

extern "C" __global__ void encode_wordpiece(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ spec, const enc_u32* __restrict__ n_entries,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, enc_u32 cont, enc_u32 unk,
    enc_u32 max_chars, enc_u32* __restrict__ owner, enc_u32* __restrict__ count,
    enc_u32* __restrict__ scratch, enc_i64 cap) {
  const EncMergeTable trie{t_slots, t_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 s = pstart[e];
    const enc_u32 sp = spec[e];
    owner[e] = ENC_DONE;
    if (sp != ENC_NORMAL) {  // a special token (one id) or the sentinel (none)
      count[e] = sp == ENC_GAP ? 0u : 1u;
      if (sp != ENC_GAP) scratch[s] = sp;
      continue;
    }
    const enc_u32 end = pstart[e + 1];  // a word is never the last entry
    enc_u32 chars = 0;
    for (enc_u32 p = s; p < end; ++p) chars += (buf[p] & 0xC0u) != 0x80u;
    bool ok = chars <= max_chars;
    enc_u32 n = 0;
    enc_u32 pos = s;
    while (ok && pos < end) {
      enc_u32 node = pos == s ? (enc_u32)ENC_WP_ROOT : cont;
      enc_u32 best_len = 0, best_id = 0;
      if (node != ENC_NO_TOKEN) {
        for (enc_u32 p = pos; p < end; ++p) {
          enc_u32 tok;
          const enc_u32 child = enc_pair_lookup(trie, node, (enc_u32)buf[p], &tok);
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
        scratch[s + n++] = best_id;
        pos += best_len;
      }
    }
    if (!ok) {
      scratch[s] = unk;
      n = 1;
    }
    count[e] = n;
  }
}
