// train_rules.h: the BPE training rules, written once for every dialect. Used by the CUDA kernels
// (kernels/train_bpe.cu, kernels/train_hash.cuh) and the Metal shaders (shaders/train_*.metal,
// through shaders/train_common.metal); gputok/backends/train_arrays.py states them in numpy.
// Search for the marker of a rule (THE COMPARATOR, THE MATCH RULE, THE DELTA RULE, THE PAIR
// HASH, THE TOKEN HASH, THE MERGE REWRITE) to find every place that implements it.
//
// Device state (all positions of all unique words, concatenated):
//   tok[i]      symbol id at position i, or TRAIN_DEAD once merged into its left neighbour
//   prv[i]      previous live position of the same word, -1 at the word's start
//   nxt[i]      next live position of the same word, -1 at the word's end
//   is_start[i] 1 when this step's merge of (a, b) starts at i
// Pair keys are left << 32 | right, so key order is (left_id, right_id) order.
//
// Nothing here touches memory atomically: CUDA's table uses 64-bit compare-and-swap, which
// Metal lacks, so each dialect keeps its own table (train_hash.cuh, train_common.metal) and
// feeds it what these rules compute.
#pragma once

#include "dialect.h"

#ifndef TRAIN_DEAD
#define TRAIN_DEAD (-1)
#endif

typedef gputok_u64 train_u64;
typedef gputok_i64 train_i64;

GPUTOK_FN train_u64 train_pair_key(int left, int right) {
  return ((train_u64)(unsigned)left << 32) | (train_u64)(unsigned)right;
}

// THE PAIR HASH: murmur3's 64-bit finalizer, so consecutive ids spread over the whole table
GPUTOK_FN train_u64 train_hash(train_u64 k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdul;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ul;
  k ^= k >> 33;
  return k;
}

// THE TOKEN HASH: a token's bytes b_0 .. b_{n-1} as sum(b_i * P^(n-1-i)) mod 2^64, so the hash of
// a joined token follows from its parts' (hash, length): h(ab) = h(a) * P^len(b) + h(b). The
// device loop checks each merged token against the spellings that take a special token's id
// (HF's rule 7); a hit stops the loop and the host compares the bytes (gputok/train/vocab.py).
#define TRAIN_TOKEN_P GPUTOK_U64(0x100000001b3)

GPUTOK_FN train_u64 train_pow_p(train_u64 e) {
  train_u64 r = 1, b = TRAIN_TOKEN_P;
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return r;
}

GPUTOK_FN train_u64 train_token_join(train_u64 ha, train_u64 hb, train_u64 len_b) {
  return ha * train_pow_p(len_b) + hb;
}

// THE COMPARATOR: a higher count wins; on equal counts the smaller key, i.e. the smaller
// (left_id, right_id), since key = left << 32 | right (HF BpeTrainer's rule).
GPUTOK_FN bool train_better(train_i64 c1, train_u64 k1, train_i64 c2, train_u64 k2) {
  return c1 > c2 || (c1 == c2 && k1 < k2);
}

// THE MATCH RULE: does the merge of (a, b) start at position i? HF scans each word left to right
// and merges every (a, b) it meets, without overlap; for a != b matches cannot overlap, for
// a == b a run of r symbols a merges at run positions 0, 2, 4, ... (pairs (0,1), (2,3), ...).
GPUTOK_FN bool train_match_starts(const GPUTOK_DEV int* tok, const GPUTOK_DEV int* prv,
                                  const GPUTOK_DEV int* nxt, train_i64 i, int a, int b) {
  const int j = nxt[i];
  if (tok[i] != a || j < 0 || tok[j] != b) return false;
  if (a != b) return true;
  // position of i in its run of a's: the number of a's right before it
  int k = 0;
  for (int p = prv[i]; p >= 0 && tok[p] == a; p = prv[p]) ++k;
  return (k & 1) == 0;
}

// THE DELTA RULE: the pair-count changes of the match (i, j = nxt[i]) with neighbours
// p = prv[i], q = nxt[j], for a word counted w times:
//   left:  (tok[p], a) -w and (tok[p], c) +w; but when p is itself the right half of a match
//          (prv[p] starts one), the new left pair is (c, c) and the old one, (b, a), is that
//          match's right pair, counted there
//   right: (b, tok[q]) -w, and (c, tok[q]) +w unless q starts a match (whose left side adds
//          the (c, c))
// Changes to (a, b) itself are left out: every occurrence of it is merged away this step, and
// the table sets its count to 0 (each dialect in its own way).
// `at[k]`: the position of the pair's left symbol (after this step's rewrite, for the pairs
// gained), where the device loop files the pair's new occurrence.
struct train_deltas {
  train_u64 key[4];
  train_i64 delta[4];
  train_i64 at[4];
  int n;
};

// (Returned by value: a pointer to a local would need Metal's `thread` address space.)
GPUTOK_FN train_deltas train_match_deltas(const GPUTOK_DEV int* tok, const GPUTOK_DEV int* prv,
                                          const GPUTOK_DEV int* nxt,
                                          const GPUTOK_DEV unsigned char* is_start, train_i64 i,
                                          int a, int b, int c, train_i64 w) {
  const train_u64 merged = train_pair_key(a, b);
  const int j = nxt[i];
  const int p = prv[i];
  const int q = nxt[j];
  train_deltas d;
  d.n = 0;
  if (p >= 0) {
    const int pp = prv[p];
    if (pp >= 0 && is_start[pp]) {
      d.key[d.n] = train_pair_key(c, c);
      d.at[d.n] = pp;
      d.delta[d.n++] = w;
    } else {
      const train_u64 old = train_pair_key(tok[p], a);
      if (old != merged) {
        d.key[d.n] = old;
        d.at[d.n] = p;
        d.delta[d.n++] = -w;
      }
      d.key[d.n] = train_pair_key(tok[p], c);
      d.at[d.n] = p;
      d.delta[d.n++] = w;
    }
  }
  if (q >= 0) {
    const train_u64 old = train_pair_key(b, tok[q]);
    if (old != merged) {
      d.key[d.n] = old;
      d.at[d.n] = j;
      d.delta[d.n++] = -w;
    }
    if (!is_start[q]) {
      d.key[d.n] = train_pair_key(c, tok[q]);
      d.at[d.n] = i;
      d.delta[d.n++] = w;
    }
  }
  return d;
}

// THE MERGE REWRITE in place, for the match starting at i: i becomes c, its right half
// j = nxt[i] dies, links skip j. The thread of match i writes only tok[i], tok[j], nxt[i] and
// prv[q], which no other match touches, and reads only nxt[j], which no thread writes (j never
// starts a match). (shaders/train_apply_merge.metal gathers the same rewrite into fresh arrays.)
GPUTOK_FN void train_merge_rewrite(GPUTOK_DEV int* tok, GPUTOK_DEV int* prv, GPUTOK_DEV int* nxt,
                                   train_i64 i, int c) {
  const int j = nxt[i];
  const int q = nxt[j];
  tok[i] = c;
  tok[j] = TRAIN_DEAD;
  nxt[i] = q;
  if (q >= 0) prv[q] = (int)i;
}
