// train_bpe.cu: one BPE training merge step on the GPU (driven by gputok/train/device.py).
//
// Device state (all positions of all unique words, concatenated):
//   tok[i]      symbol id at position i, or TRAIN_DEAD once merged into its left neighbour
//   prv[i]      previous live position of the same word, -1 at the word's start
//   nxt[i]      next live position of the same word, -1 at the word's end
//   word_of[i]  the word of position i; wcount[w] its count in the corpus
//   keys/counts the pair-count hash table (train_hash.cuh)
//
// A merge step, for the best pair (a, b) -> new id c:
//   train_best_partial + train_best_final   argmax over the table: max count, ties to the
//                                           smallest (a, b); zeroes that pair's count
//   train_find_matches                      is_start[i]: does a merge start at i? (left to right,
//                                           no overlap: in a run of a == b, every other one)
//   train_merge_deltas                      the pair-count changes of every match, applied with
//                                           atomics (new pairs claim table slots)
//   train_apply_merge                       rewrite: tok[i] = c, tok[nxt[i]] = DEAD, relink
// Reads and writes of the state are split over the last three kernels so no kernel reads what
// another thread of the same launch writes; the result is independent of thread order.
//
// Every kernel is a grid-stride loop: any grid size is correct (the emulator tests run small
// grids in forward, reverse and shuffled thread orders, tests/test_train_kernels.py).
// Parameters come as #defines from the driver; the defaults let this file compile on its own.
// The rules themselves (THE COMPARATOR, THE MATCH RULE, THE DELTA RULE) live in
// common/train_rules.h, shared with the Metal shaders (shaders/train_*.metal).
#include "train_hash.cuh"

#ifndef TRAIN_BLOCK
#define TRAIN_BLOCK 256  // threads per block of the reductions (a power of two)
#endif

#define TRAIN_GRID_STRIDE(i, n)                                                      \
  for (train_i64 i = (train_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
       i += (train_i64)gridDim.x * blockDim.x)

// ---------------------------------------------------------------- counting

// Every adjacent pair of live symbols, weighted by its word's count: the table's first fill.
extern "C" __global__ void train_count_pairs(const int* __restrict__ tok,
                                             const int* __restrict__ nxt,
                                             const int* __restrict__ word_of,
                                             const train_i64* __restrict__ wcount, train_i64 n,
                                             train_u64* keys, train_u64* counts, train_u64 mask,
                                             train_u64* stats) {
  TRAIN_GRID_STRIDE(i, n) {
    const int t = tok[i];
    const int j = nxt[i];
    if (t == TRAIN_DEAD || j < 0) continue;
    train_table_add(keys, counts, mask, train_pair_key(t, tok[j]), wcount[word_of[i]],
                    &stats[0]);
  }
}

// Move every live entry (count != 0) of an old table into a fresh one (host-allocated, empty).
extern "C" __global__ void train_rehash(const train_u64* __restrict__ old_keys,
                                        const train_u64* __restrict__ old_counts,
                                        train_i64 old_cap, train_u64* keys, train_u64* counts,
                                        train_u64 mask, train_u64* stats) {
  TRAIN_GRID_STRIDE(s, old_cap) {
    const train_u64 k = old_keys[s];
    const train_u64 c = old_counts[s];
    if (k != TRAIN_EMPTY_KEY && c != 0) train_table_add(keys, counts, mask, k, (train_i64)c,
                                                        &stats[0]);
  }
}

// ---------------------------------------------------------------- best pair

__device__ __forceinline__ void train_block_best(train_i64* s_count, train_u64* s_key) {
  for (unsigned stride = TRAIN_BLOCK / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride &&
        train_better(s_count[threadIdx.x + stride], s_key[threadIdx.x + stride],
                     s_count[threadIdx.x], s_key[threadIdx.x])) {
      s_count[threadIdx.x] = s_count[threadIdx.x + stride];
      s_key[threadIdx.x] = s_key[threadIdx.x + stride];
    }
    __syncthreads();
  }
}

// Per block: the best (count, key) among its slots (count 0 / empty key when none is > 0).
// Launch with blockDim.x == TRAIN_BLOCK.
extern "C" __global__ void train_best_partial(const train_u64* __restrict__ keys,
                                              const train_u64* __restrict__ counts,
                                              train_i64 cap, train_i64* part_count,
                                              train_u64* part_key) {
  __shared__ train_i64 s_count[TRAIN_BLOCK];
  __shared__ train_u64 s_key[TRAIN_BLOCK];
  train_i64 best_c = 0;
  train_u64 best_k = TRAIN_EMPTY_KEY;
  TRAIN_GRID_STRIDE(s, cap) {
    const train_u64 k = keys[s];
    const train_i64 c = (train_i64)counts[s];
    if (k != TRAIN_EMPTY_KEY && c > 0 && train_better(c, k, best_c, best_k)) {
      best_c = c;
      best_k = k;
    }
  }
  s_count[threadIdx.x] = best_c;
  s_key[threadIdx.x] = best_k;
  __syncthreads();
  train_block_best(s_count, s_key);
  if (threadIdx.x == 0) {
    part_count[blockIdx.x] = s_count[0];
    part_key[blockIdx.x] = s_key[0];
  }
}

// One block: the best of the partials -> best[0] = count, best[1] = key; best[2], best[3] =
// stats (slots claimed, matches so far) for the host's one read-back per step. The winning
// pair's count is set to 0: after this step's merge no occurrence of it is left.
// Launch with one block of TRAIN_BLOCK threads.
extern "C" __global__ void train_best_final(const train_i64* __restrict__ part_count,
                                            const train_u64* __restrict__ part_key,
                                            train_i64 n_parts, const train_u64* keys,
                                            train_u64* counts, train_u64 mask,
                                            const train_u64* stats, train_i64* best) {
  __shared__ train_i64 s_count[TRAIN_BLOCK];
  __shared__ train_u64 s_key[TRAIN_BLOCK];
  train_i64 best_c = 0;
  train_u64 best_k = TRAIN_EMPTY_KEY;
  for (train_i64 p = threadIdx.x; p < n_parts; p += blockDim.x) {
    if (train_better(part_count[p], part_key[p], best_c, best_k)) {
      best_c = part_count[p];
      best_k = part_key[p];
    }
  }
  s_count[threadIdx.x] = best_c;
  s_key[threadIdx.x] = best_k;
  __syncthreads();
  train_block_best(s_count, s_key);
  if (threadIdx.x == 0) {
    best[0] = s_count[0];
    best[1] = (train_i64)s_key[0];
    best[2] = (train_i64)stats[0];
    best[3] = (train_i64)stats[1];
    if (s_count[0] > 0) {
      const train_i64 s = train_table_find(keys, mask, s_key[0]);
      if (s >= 0) counts[s] = 0;
    }
  }
}

// ---------------------------------------------------------------- merge

// is_start[i] = 1 when the merge of (a, b) starts at position i (THE MATCH RULE).
// stats[1] += matches found.
extern "C" __global__ void train_find_matches(const int* __restrict__ tok,
                                              const int* __restrict__ prv,
                                              const int* __restrict__ nxt, train_i64 n, int a,
                                              int b, unsigned char* is_start, train_u64* stats) {
  TRAIN_GRID_STRIDE(i, n) {
    const unsigned char m = train_match_starts(tok, prv, nxt, i, a, b) ? 1 : 0;
    is_start[i] = m;
    if (m) atomicAdd(&stats[1], 1ull);
  }
}

// The pair-count changes of every match (THE DELTA RULE), applied with atomics (new pairs claim
// table slots). Changes to (a, b) itself are left out: train_best_final already zeroed it.
extern "C" __global__ void train_merge_deltas(const int* __restrict__ tok,
                                              const int* __restrict__ prv,
                                              const int* __restrict__ nxt,
                                              const int* __restrict__ word_of,
                                              const train_i64* __restrict__ wcount,
                                              const unsigned char* __restrict__ is_start,
                                              train_i64 n, int a, int b, int c, train_u64* keys,
                                              train_u64* counts, train_u64 mask,
                                              train_u64* stats) {
  TRAIN_GRID_STRIDE(i, n) {
    if (!is_start[i]) continue;
    const train_deltas d = train_match_deltas(tok, prv, nxt, is_start, i, a, b, c,
                                              wcount[word_of[i]]);
    for (int k = 0; k < d.n; ++k)
      train_table_add(keys, counts, mask, d.key[k], d.delta[k], &stats[0]);
  }
}

// THE MERGE REWRITE: position i becomes c, its right half j dies, links skip j. Thread i writes only
// tok[i], tok[j], nxt[i] and prv[q], which no other match touches, and reads only nxt[j],
// which no thread writes (j never starts a match).
extern "C" __global__ void train_apply_merge(int* tok, int* prv, int* nxt,
                                             const unsigned char* __restrict__ is_start,
                                             train_i64 n, int c) {
  TRAIN_GRID_STRIDE(i, n) {
    if (!is_start[i]) continue;
    const int j = nxt[i];
    const int q = nxt[j];
    tok[i] = c;
    tok[j] = TRAIN_DEAD;
    nxt[i] = q;
    if (q >= 0) prv[q] = (int)i;
  }
}
