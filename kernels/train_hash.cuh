// train_hash.cuh: the pair-count hash table of the BPE trainer (kernels/train_bpe.cu).
//
// Open addressing with linear probing over two arrays of `mask + 1` slots (a power of two):
//   keys[s]   pair key  left << 32 | right  (TRAIN_EMPTY_KEY = free slot)
//   counts[s] the pair's count, int64 stored as uint64 (two's complement: adding a negative
//             delta as uint64 wraps to the right signed result; the host views it as int64)
// A slot's key goes from TRAIN_EMPTY_KEY to a pair exactly once (atomicCAS) and never back:
// a pair whose count drops to 0 keeps its slot (so probe chains stay intact) until the host
// rebuilds the table (train_rehash). The host keeps the load under 3/4, so probing ends.
#pragma once

#include "common/train_rules.h"  // train_u64, train_pair_key, THE PAIR HASH

#ifndef TRAIN_EMPTY_KEY
#define TRAIN_EMPTY_KEY 0xFFFFFFFFFFFFFFFFull
#endif

// counts[key] += delta, claiming a slot for a new key; returns the slot. `n_used` counts
// claimed slots.
__device__ __forceinline__ train_u64 train_table_add(train_u64* keys, train_u64* counts, train_u64 mask,
                                                train_u64 key, train_i64 delta,
                                                train_u64* n_used) {
  train_u64 s = train_hash(key) & mask;
  while (true) {
    train_u64 k = keys[s];
    if (k == TRAIN_EMPTY_KEY) {
      // claim the free slot; if another thread got there first, it may have claimed it for
      // this same key (then add here) or for another (then keep probing)
      k = atomicCAS(&keys[s], TRAIN_EMPTY_KEY, key);
      if (k == TRAIN_EMPTY_KEY) {
        atomicAdd(n_used, 1ull);
        k = key;
      }
    }
    if (k == key) {
      atomicAdd(&counts[s], (train_u64)delta);
      return s;
    }
    s = (s + 1) & mask;
  }
}

// the slot of `key`, or -1 when absent
__device__ __forceinline__ train_i64 train_table_find(const train_u64* keys, train_u64 mask,
                                                      train_u64 key) {
  train_u64 s = train_hash(key) & mask;
  while (true) {
    train_u64 k = keys[s];
    if (k == key) return (train_i64)s;
    if (k == TRAIN_EMPTY_KEY) return -1;
    s = (s + 1) & mask;
  }
}
