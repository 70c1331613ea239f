// encode_wordpiece.cu: WordPiece (BERT) greedy longest match of every word of a chunk (driven by
// gputok/backends/driver.py; the numpy reference is encode_wordpiece in
// gputok/components/segmenters/wordpiece.py).
//
// Entries are words (cut on the host: BertNormalizer + BertPreTokenizer), special tokens and the
// sentinel, exactly as for BPE pieces (encode_common.cuh). The vocabulary is a byte trie whose
// edges live in the merge table's hash layout (the interleaved slots of
// device_tables.merge_slots), walked by THE WORDPIECE MATCH of common/wordpiece_rules.h (the
// rule, written once for CUDA, the native CPU device and Metal). One thread per word.
// A word of L bytes has at most L pieces: its ids go to scratch[pstart[e] ...], as BPE pieces'
// do, and encode_emit.cu copies them out.
//
// Performance notes (to measure on a GPU): one thread per word diverges on word length, but
// words are short (English: ~5 bytes, max 100 characters); each step is one hash probe, ~1.2
// slots on average at load <= 1/2. A shared-memory cache of the root's 256 edges is the first
// thing to try if the probe shows up.
#include "encode_common.cuh"
#include "common/wordpiece_rules.h"

extern "C" __global__ void encode_wordpiece(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ spec, const enc_u32* __restrict__ n_entries,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, enc_u32 cont, enc_u32 unk,
    enc_u32 max_chars, enc_u32* __restrict__ owner, enc_u32* __restrict__ count,
    enc_u32* __restrict__ scratch, enc_i64 cap) {
  EncWordPiece wp;
  wp.trie.slots = t_slots;
  wp.trie.bits = t_bits;
  wp.cont = cont;
  wp.unk = unk;
  wp.max_chars = max_chars;
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 s = pstart[e];
    const enc_u32 sp = spec[e];
    owner[e] = ENC_DONE;
    // a word is never the last entry; the sentinel reads no end
    const enc_u32 end = sp == ENC_NORMAL ? pstart[e + 1] : s;
    count[e] = enc_wordpiece_entry(wp, buf, s, end, sp, scratch + s);
  }
}
