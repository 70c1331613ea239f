// gpuemu: header
// train_atomics.metal: the two 32-bit atomic moves of the training tables, for Metal's lack of
// 64-bit atomics; included by both table headers (train_common.metal: the main + delta table of
// the five-launch step; train_index_common.metal: the one table of the indexed step).
#include <metal_stdlib>
using namespace metal;

// Claim `*word` for `want` if it is free (0); returns the word's value after the attempt (want
// when this thread claimed it, or another thread claimed it for the same value). Metal has only
// the weak compare-and-swap, which may fail spuriously: retry while the word still reads free.
// `won` is set when this thread's swap stored `want`.
METAL_FUNC uint train_claim_won(device atomic_uint* word, uint want, thread bool& won) {
  uint seen = 0u;
  won = false;
  while (!atomic_compare_exchange_weak_explicit(word, &seen, want, memory_order_relaxed,
                                                memory_order_relaxed)) {
    if (seen != 0u) return seen;
  }
  won = true;
  return want;
}

METAL_FUNC uint train_claim(device atomic_uint* word, uint want) {
  bool won;
  return train_claim_won(word, want, won);
}

// A 64-bit sum kept as two 32-bit words (lo, hi) += delta: the low half, whose carry the adding
// thread sees (the sum wrapped below the old value), then high half + carry. Additions commute
// and each carry is exact, so the 64-bit sum is exact (mod 2^64, i.e. as int64).
METAL_FUNC void train_add64(device atomic_uint* lo, device atomic_uint* hi, long delta) {
  const ulong u = (ulong)delta;
  const uint add_lo = (uint)u;
  const uint old = atomic_fetch_add_explicit(lo, add_lo, memory_order_relaxed);
  const uint add_hi = (uint)(u >> 32) + ((old + add_lo < old) ? 1u : 0u);
  if (add_hi != 0u) atomic_fetch_add_explicit(hi, add_hi, memory_order_relaxed);
}
