// gpuemu: header
// train_common.metal: the header of the BPE training shaders (shaders/train_*.metal), pasted
// before each kernel by MLX (gputok.metal_iface expands the #include below, since the source
// MLX compiles at run time has no include path). The rules themselves are shared with CUDA in
// kernels/common/train_rules.h; this file holds what Metal does differently: the pair-count
// hash table, without 64-bit atomics.
//
// Why a different table. CUDA claims a slot with one 64-bit compare-and-swap of the pair key and
// adds 64-bit counts with one atomicAdd (kernels/train_hash.cuh). Metal has 32-bit atomics only
// (64-bit ones are at most min/max, on recent GPUs), and MLX gives a kernel fresh output buffers
// on every call, never an input to update in place. So:
//
// * A table is a *main* table, read-only in every kernel:
//     key_hi[s], key_lo[s]  uint32  left + 1, right + 1 (0 = free: MLX's init_value goes through
//                                   float32, so 0 is the one "empty" every output can start as)
//     count[s]              int64
//   and a *delta* table, the atomic outputs of an insertion kernel (count_pairs, merge_deltas,
//   rehash), all starting at 0:
//     d_hi[s], d_lo[s]      the keys of pairs that were not in the main table
//     c_lo[s], c_hi[s]      the two 32-bit halves of the 64-bit sum of the deltas added at s
//   train_fold_best then folds the delta table into a new main table, slot by slot.
// * A key new to the main table takes a slot that is free *in the main table*, so after the fold
//   probe chains are what one table would have: every slot between a key's home and its slot
//   holds another key, in one table or the other.
// * Claiming a slot takes two 32-bit compare-and-swaps: first d_hi (the left id), then d_lo (the
//   right id). Whoever wins d_hi goes on to d_lo, so d_lo is set before the kernel ends. A thread
//   whose left id equals d_hi also competes for d_lo: if it wins, the slot is its key (the left
//   halves are equal), and the thread that won d_hi moves on. A slot is never claimed half.
// * A 64-bit delta is added as two 32-bit atomic adds (train_add64, train_atomics.metal).
#include <metal_stdlib>
using namespace metal;

#include "common/train_rules.h"
#include "train_atomics.metal"

// The state record of the merge loop (int64 each), carried from step to step on the device:
// train_step_select writes it, every other step shader reads this step's pair from it
// (gputok/backends/metal/train.py reads the same numbers from this file).
#define ST_STOP 0          // why the loop stopped (TRAIN_STOP_*), 0 while it runs
#define ST_STEPS 1         // merges made so far
#define ST_NEXT_ID 2       // the next new id
#define ST_VOCAB_LEN 3     // ids so far
#define ST_VOCAB_TARGET 4  // stop at this many ids
#define ST_MIN_COUNT 5     // stop when the best count is below it
#define ST_USED 6          // table slots used (after this step's fold)
#define ST_USED_LIMIT 7    // a step may take the table up to this many slots (3/4 of it)
#define ST_NEED 8          // TRAIN_STOP_REHASH: the slots the step could have needed
#define ST_MERGED 9        // 1 when this step merges (A, B) -> C, else 0
#define ST_A 10
#define ST_B 11
#define ST_C 12
#define ST_COUNT 13        // the merged pair's count
#define ST_FORCED_KEY 14   // the host's answer to TRAIN_STOP_RESERVED: this pair ...
#define ST_FORCED_ID 15    // ... takes this id (-1: a new one)
#define ST_N_RES 16        // spellings that take a special token's id (HF's rule 7)
#define ST_N_SYM 17        // positions (a step's matches are at most this many)
#define ST_SIZE 24

#define TRAIN_STOP_TARGET 1    // the vocabulary is full
#define TRAIN_STOP_MIN 2       // no pair occurs min_count times
#define TRAIN_STOP_REHASH 4    // the table could pass 3/4 full this step
#define TRAIN_STOP_RESERVED 7  // the merged token may be spelled like a special token

// This step's merged pair as the main table stores it ((a + 1, b + 1); (0, 0) when the step
// merges nothing, which matches no used slot).
METAL_FUNC uint train_merged_hi(const device long* state) {
  return state[ST_MERGED] ? (uint)state[ST_A] + 1u : 0u;
}
METAL_FUNC uint train_merged_lo(const device long* state) {
  return state[ST_MERGED] ? (uint)state[ST_B] + 1u : 0u;
}

// The main table's key at slot s as a pair key (left << 32 | right); only for a used slot.
METAL_FUNC train_u64 train_slot_key(uint hi, uint lo) {
  return ((train_u64)(hi - 1u) << 32) | (train_u64)(lo - 1u);
}

// count[key] += delta: in the delta table at the key's slot (found in the main table, or claimed
// among the main table's free slots).
METAL_FUNC void train_table_add(const device uint* key_hi, const device uint* key_lo,
                                device atomic_uint* d_hi, device atomic_uint* d_lo,
                                device atomic_uint* c_lo, device atomic_uint* c_hi, uint mask,
                                train_u64 key, train_i64 delta) {
  const uint hi = (uint)(key >> 32) + 1u;
  const uint lo = (uint)key + 1u;
  uint s = (uint)train_hash(key) & mask;
  while (true) {
    const uint mh = key_hi[s];
    if (mh != 0u) {  // used in the main table: this key's slot, or probe on
      if (mh == hi && key_lo[s] == lo) break;
      s = (s + 1u) & mask;
      continue;
    }
    if (train_claim(&d_hi[s], hi) == hi && train_claim(&d_lo[s], lo) == lo) break;
    s = (s + 1u) & mask;
  }
  train_add64(&c_lo[s], &c_hi[s], delta);
}

// The best (count, key) of a threadgroup's candidates in s_count/s_key[0] (THE COMPARATOR), and
// the sum of s_used in s_used[0]. `block` threads (a power of two, the whole threadgroup) call it
// after each wrote its own candidate at [tid].
METAL_FUNC void train_group_best(threadgroup long* s_count, threadgroup ulong* s_key,
                                 threadgroup long* s_used, uint tid, uint block) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = block / 2u; stride > 0u; stride >>= 1) {
    if (tid < stride) {
      if (train_better(s_count[tid + stride], s_key[tid + stride], s_count[tid], s_key[tid])) {
        s_count[tid] = s_count[tid + stride];
        s_key[tid] = s_key[tid + stride];
      }
      s_used[tid] += s_used[tid + stride];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}
