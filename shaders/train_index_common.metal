// gpuemu: header
// train_index_common.metal: the header of train_index_steps.metal, the indexed merge step on
// Metal: CUDA's design (kernels/train_bpe.cu: a pair -> positions index, candidates with a
// boundary, each step touching only the merged pair's occurrences) inside one threadgroup that
// runs a block of steps per launch, with Metal's 32-bit atomics.
//
// The table (one uint32 buffer of TRAIN_IX_TABLE_WORDS blocks of `cap` words, cap a power of
// two): key_hi, key_lo (left + 1, right + 1; 0 = free), c_lo, c_hi (the two halves of the
// int64 count, train_add64), list_len, list_off (the pair's occurrence list in the pool: the
// positions of its left symbol where it was formed, stale ones included, filtered by THE MATCH
// RULE when the pair is merged). A slot is claimed by two compare-and-swaps, key_hi first: a
// thread whose left id equals key_hi competes for key_lo too, and whoever wins key_lo owns the
// slot (the left halves are equal); so no slot is left half-claimed, and the word that goes
// from 0 to a value once, key_lo, counts the slot as used. Open addressing, linear probing,
// THE PAIR HASH; a pair whose count falls to 0 keeps its slot until the host rebuilds the
// table (probe chains stay intact).
#include <metal_stdlib>
using namespace metal;

#include "common/train_rules.h"
#include "train_atomics.metal"

// The state record (int64 each), read at the start of a launch and written at its end
// (gputok/backends/metal/train_index.py reads the same numbers from this file).
#define ST_STOP 0          // why the block stopped (TRAIN_STOP_*), 0 while it runs
#define ST_STEPS 1         // merges recorded in `rec` by this launch
#define ST_NEXT_ID 2       // the next new id
#define ST_VOCAB_LEN 3     // ids so far
#define ST_VOCAB_TARGET 4  // stop at this many ids
#define ST_MIN_COUNT 5     // stop when the best count is below it
#define ST_CAND_N 6        // candidates listed (may pass CAND_CAP: then CAND_FULL)
#define ST_CAND_CAP 7      // room for candidates
#define ST_BOUND_COUNT 8   // the boundary (count, key): every pair outside the candidates is worse
#define ST_BOUND_KEY 9
#define ST_USED 10         // table slots claimed
#define ST_USED_LIMIT 11   // slots a step may claim up to (3/4 of the table)
#define ST_POOL_USED 12
#define ST_POOL_CAP 13
#define ST_GAINS_CAP 14    // room for a step's gains (matches: half of it)
#define ST_A 15            // the last step's pair (a, b) -> c
#define ST_B 16
#define ST_C 17
#define ST_FORCED_KEY 18   // the host's answer to TRAIN_STOP_RESERVED: this pair ...
#define ST_FORCED_ID 19    // ... takes this id (-1: a new one)
#define ST_CAND_FULL 20    // a gained pair found no room among the candidates
#define ST_ANOMALY 21      // a pair gained a second time (never in HF's rule)
#define ST_N_RES 22        // spellings that take a special token's id (rule 7)
#define ST_RES_ROOM 23     // res holds lengths at [0, RES_ROOM), hashes at [RES_ROOM, 2 RES_ROOM)
#define ST_REC_CAP 24      // steps this launch may make
#define ST_N 25            // positions
#define ST_CAP 26          // table slots
#define ST_N_IDS 27        // ids with room in tokinfo
#define ST_NEED 28         // a stop for room (REHASH, POOL, GAINS): the step's 2 x list length
#define ST_SPELL_CAP 29    // slots of the set of the ids' spellings (a power of two)
#define ST_SIZE 32

#define TRAIN_STOP_TARGET 1    // the vocabulary is full
#define TRAIN_STOP_MIN 2       // no pair occurs min_count times
#define TRAIN_STOP_REBUILD 3   // the candidates cannot vouch for the best pair: choose again
#define TRAIN_STOP_REHASH 4    // the table could pass 3/4 full this step
#define TRAIN_STOP_POOL 5      // the pool could overflow this step
#define TRAIN_STOP_GAINS 6     // the gain buffers could overflow this step
#define TRAIN_STOP_RESERVED 7  // the merged token may be spelled like a special token or an id
#define TRAIN_STOP_BLOCK 8     // the launch made REC_CAP steps
#define TRAIN_STOP_RELIST 9    // a step gained a pair that had a list (its id existed: rule 7):
                               // the host lists every pair's occurrences again

#define TRAIN_IX_TABLE_WORDS 6  // key_hi, key_lo, c_lo, c_hi, list_len, list_off
// a step's record in `rec`: a, b, c, count, then the work it did: the occurrence-list entries
// it checked + its matches + its gains (what grows with the merged pair's occurrences), the
// candidates it scanned (at most CAND_CAP), the ids it compared (rule 7: N_IDS)
#define TRAIN_IX_REC 7
// threadgroup counters of a launch
#define TRAIN_IX_MATCHES 0
#define TRAIN_IX_GAINS 1
#define TRAIN_IX_GSLOTS 2
#define TRAIN_IX_POOL_USED 3
#define TRAIN_IX_CAND_N 4
#define TRAIN_IX_USED 5
#define TRAIN_IX_CAND_FULL 6
#define TRAIN_IX_ANOMALY 7
#define TRAIN_IX_COUNTERS 8

// The pair's int64 count at slot s.
METAL_FUNC long train_ix_count(const device uint* c_lo, const device uint* c_hi, uint s) {
  return (long)(((ulong)c_hi[s] << 32) | (ulong)c_lo[s]);
}

// count[key] += delta, claiming a slot for a new key (counted in *used); returns the slot.
METAL_FUNC uint train_ix_add(device uint* key_hi, device uint* key_lo, device uint* c_lo,
                             device uint* c_hi, uint mask, train_u64 key, train_i64 delta,
                             threadgroup atomic_uint* used) {
  const uint hi = (uint)(key >> 32) + 1u;
  const uint lo = (uint)key + 1u;
  uint s = (uint)train_hash(key) & mask;
  while (true) {
    if (train_claim((device atomic_uint*)&key_hi[s], hi) == hi) {
      bool won;
      if (train_claim_won((device atomic_uint*)&key_lo[s], lo, won) == lo) {
        if (won) atomic_fetch_add_explicit(used, 1u, memory_order_relaxed);
        break;
      }
    }
    s = (s + 1u) & mask;
  }
  train_add64((device atomic_uint*)&c_lo[s], (device atomic_uint*)&c_hi[s], delta);
  return s;
}

METAL_FUNC bool train_ix_not_worse(long c, ulong k, long vc, ulong vk) {
  return train_better(c, k, vc, vk) || (c == vc && k == vk);  // THE COMPARATOR
}

// THE SPELLING PRINT: a nonzero 64-bit print of a token's (byte length, THE TOKEN HASH), the key
// of the set of the ids' spellings that rule 7 looks each merged token up in (a print two
// spellings share costs a stop that the host settles by comparing bytes, never a wrong id)
METAL_FUNC ulong train_ix_print(ulong len, ulong h) {
  return train_hash(h ^ (len * 0x9E3779B97F4A7C15ul)) | 1ul;
}
