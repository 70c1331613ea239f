// train_bpe.cu: BPE training's merge loop on the GPU, on the device from one merge to the next
// (driven by gputok/backends/cuda/train.py; the numpy form of every kernel is in
// gputok/backends/train_arrays.py).
//
// Device state:
//   positions   all symbols of all unique words, concatenated (positions never move):
//               tok[i] (TRAIN_DEAD once merged into its left neighbour), prv[i] / nxt[i] (the
//               previous / next live position of the word, -1 at its ends), word_of[i];
//               wcount[w] the word's count; is_start[i] this step's match flags (0 between steps)
//   pair table  keys/counts (train_hash.cuh), and per slot the pair's *occurrence list*
//               pool[list_off .. list_off + list_len): the positions of its left symbol where it
//               was formed (all of them, and stale ones: a list is written once, when the pair
//               first appears, and filtered by THE MATCH RULE when the pair is merged)
//   candidates  cand[0 .. cand_n): slots that may hold the best pair. Every pair outside was
//               worse than the boundary (THE COMPARATOR) when the host chose them, and only
//               gets worse (a pair's count only falls once it exists); a pair formed later that
//               beats the boundary is added. So the best candidate is the best pair as long as
//               it is not worse than the boundary; else the host chooses again (REBUILD).
//   state       one int64 record (ST_*): counters, this step's pair, why the loop stopped
//
// A merge step, six launches, none waiting for the host (each returns at once once the loop
// has stopped; the host queues steps in blocks and reads the merges back after each block):
//   train_step_select   one block: the best candidate; checks (boundary, min_count, room in the
//                       table, pool and gain buffers, HF's rule 7 by THE TOKEN HASH); records
//                       (a, b, c, count), retires the pair (count 0), or stops the loop
//   train_step_mark     over the pair's list: is_start at the occurrences where a merge starts
//                       (THE MATCH RULE), listed in `matches`
//   train_step_deltas   over the matches: THE DELTA RULE into the table (atomics); each pair
//                       gained is filed with the position of its left symbol
//   train_step_apply    over the matches: THE MERGE REWRITE
//   train_step_lists    over the gained pairs: a list's room in the pool, the candidates a
//                       gained pair joins; over the matches: is_start back to 0
//   train_step_place    over the gains: each occurrence into its pair's list
// Work per step: the merged pair's occurrences and what they change, plus one block over the
// candidates; no pass over all positions or all slots.
//
// Set-up (host-driven, once and after a table rebuild): train_count_pairs,
// train_count_occurrences + a host scan + train_place_occurrences (the first lists),
// train_rehash (a larger table: keys, counts and lists move).
//
// Every kernel is a grid-stride loop: any grid size is correct (the emulator tests run small
// grids in forward, reverse and shuffled thread orders, tests/test_train_kernels.py). The rules
// (THE COMPARATOR, THE MATCH RULE, THE DELTA RULE, THE TOKEN HASH) live in
// common/train_rules.h, shared with the Metal shaders (shaders/train_*.metal).
#include "train_hash.cuh"

#ifndef TRAIN_BLOCK
#define TRAIN_BLOCK 256  // threads per block of the reductions (a power of two)
#endif

// the state record (gputok/backends/cuda/train.py passes the same numbers as defines)
#ifndef ST_STOP
#define ST_STOP 0          // why the loop stopped (TRAIN_STOP_*), 0 while it runs
#define ST_STEPS 1         // merges recorded in `rec` in this block
#define ST_NEXT_ID 2       // the next new id
#define ST_VOCAB_LEN 3     // ids so far
#define ST_VOCAB_TARGET 4  // stop at this many ids
#define ST_MIN_COUNT 5     // stop when the best count is below it
#define ST_CAND_N 6        // candidates listed
#define ST_CAND_CAP 7      // room for candidates
#define ST_BOUND_COUNT 8   // the boundary (count, key): every pair outside the candidates is worse
#define ST_BOUND_KEY 9
#define ST_USED 10         // table slots claimed
#define ST_USED_LIMIT 11   // slots a step may claim up to (3/4 of the table)
#define ST_POOL_USED 12
#define ST_POOL_CAP 13
#define ST_GAINS 14        // this step's gains
#define ST_GAINS_CAP 15
#define ST_GSLOTS 16       // this step's distinct pairs gained
#define ST_MATCHES 17      // this step's matches
#define ST_A 18            // this step's pair (a, b) -> c
#define ST_B 19
#define ST_C 20
#define ST_LIST_OFF 21     // this step's pair's occurrence list
#define ST_LIST_LEN 22
#define ST_FORCED_KEY 23   // the host's answer to TRAIN_STOP_RESERVED: this pair ...
#define ST_FORCED_ID 24    // ... takes this id (-1: a new one)
#define ST_CAND_FULL 25    // a gained pair found no room among the candidates
#define ST_ANOMALY 26      // a pair gained a second time (never in HF's rule)
#define ST_N_RES 27        // spellings that take a special token's id (rule 7)
#define ST_REC_CAP 28      // merges a block may record
#define ST_SIZE 32
#endif

#ifndef TRAIN_STOP_TARGET
#define TRAIN_STOP_TARGET 1    // the vocabulary is full
#define TRAIN_STOP_MIN 2       // no pair occurs min_count times
#define TRAIN_STOP_REBUILD 3   // the candidates cannot vouch for the best pair: choose again
#define TRAIN_STOP_REHASH 4    // the table could pass 3/4 full this step
#define TRAIN_STOP_POOL 5      // the pool could overflow this step
#define TRAIN_STOP_GAINS 6     // the gain buffers could overflow this step
#define TRAIN_STOP_RESERVED 7  // the merged token may be spelled like a special token
#define TRAIN_STOP_BLOCK 8     // `rec` is full
#define TRAIN_STOP_ANOMALY 9
#endif

#define TRAIN_GRID_STRIDE(i, n)                                                      \
  for (train_i64 i = (train_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
       i += (train_i64)gridDim.x * blockDim.x)

__device__ __forceinline__ train_u64* train_counter(train_i64* state, int k) {
  return reinterpret_cast<train_u64*>(&state[k]);
}

// ---------------------------------------------------------------- set-up

// Every adjacent pair of live symbols, weighted by its word's count: the table's first fill.
extern "C" __global__ void train_count_pairs(const int* __restrict__ tok,
                                             const int* __restrict__ nxt,
                                             const int* __restrict__ word_of,
                                             const train_i64* __restrict__ wcount, train_i64 n,
                                             train_u64* keys, train_u64* counts, train_u64 mask,
                                             train_i64* state) {
  TRAIN_GRID_STRIDE(i, n) {
    const int t = tok[i];
    const int j = nxt[i];
    if (t == TRAIN_DEAD || j < 0) continue;
    train_table_add(keys, counts, mask, train_pair_key(t, tok[j]), wcount[word_of[i]],
                    train_counter(state, ST_USED));
  }
}

// The occurrences of each pair: gain_n[slot] += 1 per position where it starts.
extern "C" __global__ void train_count_occurrences(const int* __restrict__ tok,
                                                   const int* __restrict__ nxt, train_i64 n,
                                                   const train_u64* __restrict__ keys,
                                                   train_u64 mask, unsigned* gain_n) {
  TRAIN_GRID_STRIDE(i, n) {
    const int t = tok[i];
    const int j = nxt[i];
    if (t == TRAIN_DEAD || j < 0) continue;
    atomicAdd(&gain_n[train_table_find(keys, mask, train_pair_key(t, tok[j]))], 1u);
  }
}

// Each position into its pair's list (list_off from the host's scan of gain_n; list_len 0).
extern "C" __global__ void train_place_occurrences(const int* __restrict__ tok,
                                                   const int* __restrict__ nxt, train_i64 n,
                                                   const train_u64* __restrict__ keys,
                                                   train_u64 mask,
                                                   const train_i64* __restrict__ list_off,
                                                   unsigned* list_len, unsigned* pool) {
  TRAIN_GRID_STRIDE(i, n) {
    const int t = tok[i];
    const int j = nxt[i];
    if (t == TRAIN_DEAD || j < 0) continue;
    const train_i64 s = train_table_find(keys, mask, train_pair_key(t, tok[j]));
    pool[list_off[s] + atomicAdd(&list_len[s], 1u)] = (unsigned)i;
  }
}

// Move every live entry (count != 0) of an old table, with its list, into a fresh one
// (host-allocated, empty; ST_USED reset by the host).
extern "C" __global__ void train_rehash(const train_u64* __restrict__ old_keys,
                                        const train_u64* __restrict__ old_counts,
                                        const train_i64* __restrict__ old_off,
                                        const unsigned* __restrict__ old_len,
                                        train_i64 old_cap, train_u64* keys, train_u64* counts,
                                        train_i64* list_off, unsigned* list_len, train_u64 mask,
                                        train_i64* state) {
  TRAIN_GRID_STRIDE(s, old_cap) {
    const train_u64 k = old_keys[s];
    const train_u64 c = old_counts[s];
    if (k == TRAIN_EMPTY_KEY || c == 0) continue;
    const train_u64 t = train_table_add(keys, counts, mask, k, (train_i64)c,
                                        train_counter(state, ST_USED));
    list_off[t] = old_off[s];
    list_len[t] = old_len[s];
  }
}

// ---------------------------------------------------------------- a merge step

__device__ __forceinline__ bool train_not_worse(train_i64 c, train_u64 k, train_i64 vc,
                                                train_u64 vk) {
  return train_better(c, k, vc, vk) || (c == vc && k == vk);
}

// Launch with one block of TRAIN_BLOCK threads.
extern "C" __global__ void train_step_select(const train_u64* __restrict__ keys,
                                             train_u64* counts,
                                             const train_i64* __restrict__ list_off,
                                             const unsigned* __restrict__ list_len,
                                             const unsigned* __restrict__ cand, train_i64* rec,
                                             train_u64* tok_len, train_u64* tok_hash,
                                             const train_u64* __restrict__ res_len,
                                             const train_u64* __restrict__ res_hash,
                                             train_i64* state) {
  __shared__ train_i64 s_count[TRAIN_BLOCK];
  __shared__ train_u64 s_key[TRAIN_BLOCK];
  __shared__ train_i64 s_slot[TRAIN_BLOCK];
  if (state[ST_STOP]) return;  // (read by every thread before thread 0 writes it)
  train_i64 best_c = 0, best_s = -1;
  train_u64 best_k = TRAIN_EMPTY_KEY;
  const train_i64 n_cand = state[ST_CAND_N] < state[ST_CAND_CAP] ? state[ST_CAND_N]
                                                                  : state[ST_CAND_CAP];
  for (train_i64 k = threadIdx.x; k < n_cand; k += blockDim.x) {
    const unsigned s = cand[k];
    const train_i64 c = (train_i64)counts[s];
    // THE COMPARATOR
    if (c > 0 && train_better(c, keys[s], best_c, best_k)) {
      best_c = c;
      best_k = keys[s];
      best_s = s;
    }
  }
  s_count[threadIdx.x] = best_c;
  s_key[threadIdx.x] = best_k;
  s_slot[threadIdx.x] = best_s;
  __syncthreads();
  for (unsigned stride = TRAIN_BLOCK / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride &&
        train_better(s_count[threadIdx.x + stride], s_key[threadIdx.x + stride],
                     s_count[threadIdx.x], s_key[threadIdx.x])) {
      s_count[threadIdx.x] = s_count[threadIdx.x + stride];
      s_key[threadIdx.x] = s_key[threadIdx.x + stride];
      s_slot[threadIdx.x] = s_slot[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const train_i64 bc = s_count[0];
  const train_u64 bk = s_key[0];
  const train_i64 bs = s_slot[0];
  const train_i64 steps = state[ST_STEPS];
  if (state[ST_VOCAB_LEN] >= state[ST_VOCAB_TARGET]) {
    state[ST_STOP] = TRAIN_STOP_TARGET;
    return;
  }
  if (steps >= state[ST_REC_CAP]) {
    state[ST_STOP] = TRAIN_STOP_BLOCK;
    return;
  }
  if (state[ST_CAND_FULL] || state[ST_CAND_N] > state[ST_CAND_CAP]) {
    state[ST_STOP] = TRAIN_STOP_REBUILD;
    return;
  }
  const train_i64 vc = state[ST_BOUND_COUNT];
  if (bc <= 0 || !train_not_worse(bc, bk, vc, (train_u64)state[ST_BOUND_KEY])) {
    // a pair outside the candidates may be better (or, with none outside, none is left)
    state[ST_STOP] = vc > 0 ? TRAIN_STOP_REBUILD : TRAIN_STOP_MIN;
    return;
  }
  if (bc < state[ST_MIN_COUNT]) {
    state[ST_STOP] = TRAIN_STOP_MIN;
    return;
  }
  // room for this step: at most one match per occurrence, two gains per match
  const train_i64 len = (train_i64)list_len[bs];
  if (state[ST_USED] + 2 * len > state[ST_USED_LIMIT]) {
    state[ST_STOP] = TRAIN_STOP_REHASH;
    return;
  }
  if (state[ST_POOL_USED] + 2 * len > state[ST_POOL_CAP]) {
    state[ST_STOP] = TRAIN_STOP_POOL;
    return;
  }
  if (2 * len > state[ST_GAINS_CAP]) {
    state[ST_STOP] = TRAIN_STOP_GAINS;
    return;
  }
  const int a = (int)(bk >> 32), b = (int)(bk & 0xFFFFFFFFu);
  // THE TOKEN HASH of the merged token; rule 7 by the host when it may be a special's spelling
  const train_u64 n_bytes = tok_len[a] + tok_len[b];
  const train_u64 h = train_token_join(tok_hash[a], tok_hash[b], tok_len[b]);
  train_i64 c;
  if ((train_u64)state[ST_FORCED_KEY] == bk) {
    c = state[ST_FORCED_ID];
    state[ST_FORCED_KEY] = (train_i64)TRAIN_EMPTY_KEY;
  } else {
    c = -1;
    for (train_i64 r = 0; r < state[ST_N_RES]; ++r) {
      if (res_len[r] == n_bytes && res_hash[r] == h) {
        state[ST_A] = a;
        state[ST_B] = b;
        state[ST_STOP] = TRAIN_STOP_RESERVED;
        return;
      }
    }
  }
  if (c < 0) {
    c = state[ST_NEXT_ID]++;
    state[ST_VOCAB_LEN] += 1;
  }
  tok_len[c] = n_bytes;
  tok_hash[c] = h;
  rec[4 * steps] = a;
  rec[4 * steps + 1] = b;
  rec[4 * steps + 2] = c;
  rec[4 * steps + 3] = bc;
  state[ST_STEPS] = steps + 1;
  counts[bs] = 0;  // retired: after this step no occurrence is left
  state[ST_A] = a;
  state[ST_B] = b;
  state[ST_C] = c;
  state[ST_LIST_OFF] = list_off[bs];
  state[ST_LIST_LEN] = len;
  state[ST_GAINS] = 0;
  state[ST_GSLOTS] = 0;
  state[ST_MATCHES] = 0;
}

// is_start[p] = 1 at the occurrences of the list where a merge starts (THE MATCH RULE; a list
// holds a position once), each listed in `matches`.
extern "C" __global__ void train_step_mark(const int* __restrict__ tok,
                                           const int* __restrict__ prv,
                                           const int* __restrict__ nxt,
                                           const unsigned* __restrict__ pool,
                                           unsigned char* is_start, unsigned* matches,
                                           train_i64* state) {
  if (state[ST_STOP]) return;
  const int a = (int)state[ST_A], b = (int)state[ST_B];
  const train_i64 off = state[ST_LIST_OFF];
  TRAIN_GRID_STRIDE(k, state[ST_LIST_LEN]) {
    const unsigned p = pool[off + k];
    if (!train_match_starts(tok, prv, nxt, p, a, b)) continue;
    is_start[p] = 1;
    matches[atomicAdd(train_counter(state, ST_MATCHES), 1ull)] = p;
  }
}

// THE DELTA RULE of every match into the table; each pair gained (a new pair with c) is filed
// with its left symbol's position, and the first gain of a pair lists the pair.
extern "C" __global__ void train_step_deltas(const int* __restrict__ tok,
                                             const int* __restrict__ prv,
                                             const int* __restrict__ nxt,
                                             const int* __restrict__ word_of,
                                             const train_i64* __restrict__ wcount,
                                             const unsigned char* __restrict__ is_start,
                                             const unsigned* __restrict__ matches,
                                             train_u64* keys, train_u64* counts, train_u64 mask,
                                             unsigned* gain_n, unsigned* gain_slot,
                                             unsigned* gain_pos, unsigned* gslots,
                                             train_i64* state) {
  if (state[ST_STOP]) return;
  const int a = (int)state[ST_A], b = (int)state[ST_B], c = (int)state[ST_C];
  TRAIN_GRID_STRIDE(m, state[ST_MATCHES]) {
    const train_i64 i = matches[m];
    const train_deltas d = train_match_deltas(tok, prv, nxt, is_start, i, a, b, c,
                                              wcount[word_of[i]]);
    for (int k = 0; k < d.n; ++k) {
      const train_u64 s = train_table_add(keys, counts, mask, d.key[k], d.delta[k],
                                          train_counter(state, ST_USED));
      if (d.delta[k] <= 0) continue;
      if (atomicAdd(&gain_n[s], 1u) == 0u)
        gslots[atomicAdd(train_counter(state, ST_GSLOTS), 1ull)] = (unsigned)s;
      const train_u64 g = atomicAdd(train_counter(state, ST_GAINS), 1ull);
      gain_slot[g] = (unsigned)s;
      gain_pos[g] = (unsigned)d.at[k];
    }
  }
}

// THE MERGE REWRITE (common/train_rules.h) at every match.
extern "C" __global__ void train_step_apply(int* tok, int* prv, int* nxt,
                                            const unsigned* __restrict__ matches,
                                            train_i64* state) {
  if (state[ST_STOP]) return;
  const int c = (int)state[ST_C];
  TRAIN_GRID_STRIDE(m, state[ST_MATCHES]) train_merge_rewrite(tok, prv, nxt, matches[m], c);
}

// Over the gained pairs: room in the pool for each one's list (its count of gains), and a place
// among the candidates when it beats the boundary; over the matches: is_start back to 0.
extern "C" __global__ void train_step_lists(const train_u64* __restrict__ keys,
                                            const train_u64* __restrict__ counts,
                                            train_i64* list_off, unsigned* list_len,
                                            const unsigned* __restrict__ gain_n,
                                            const unsigned* __restrict__ gslots,
                                            const unsigned* __restrict__ matches,
                                            unsigned char* is_start, unsigned* cand,
                                            train_i64* state) {
  if (state[ST_STOP]) return;
  const train_i64 n_slots = state[ST_GSLOTS];
  TRAIN_GRID_STRIDE(k, n_slots + state[ST_MATCHES]) {
    if (k >= n_slots) {
      is_start[matches[k - n_slots]] = 0;
      continue;
    }
    const unsigned s = gslots[k];
    if (list_len[s] != 0) state[ST_ANOMALY] = 1;  // a pair formed in two steps
    list_off[s] = (train_i64)atomicAdd(train_counter(state, ST_POOL_USED),
                                       (train_u64)gain_n[s]);
    list_len[s] = 0;
    const train_i64 cnt = (train_i64)counts[s];
    if (cnt > 0 && train_not_worse(cnt, keys[s], state[ST_BOUND_COUNT],
                                   (train_u64)state[ST_BOUND_KEY])) {
      const train_u64 at = atomicAdd(train_counter(state, ST_CAND_N), 1ull);
      if ((train_i64)at < state[ST_CAND_CAP])
        cand[at] = s;
      else
        state[ST_CAND_FULL] = 1;
    }
  }
}

// Every gain into its pair's list; the gain counters back to 0.
extern "C" __global__ void train_step_place(const train_i64* __restrict__ list_off,
                                            unsigned* list_len, unsigned* gain_n,
                                            const unsigned* __restrict__ gain_slot,
                                            const unsigned* __restrict__ gain_pos,
                                            unsigned* pool, train_i64* state) {
  if (state[ST_STOP]) return;
  TRAIN_GRID_STRIDE(g, state[ST_GAINS]) {
    const unsigned s = gain_slot[g];
    pool[list_off[s] + atomicAdd(&list_len[s], 1u)] = gain_pos[g];
    gain_n[s] = 0;
  }
}
