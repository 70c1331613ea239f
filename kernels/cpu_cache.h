// cpu_cache.h: host only. The piece cache of the native CPU device's per-document pass
// (kernels/cpu_encode.h): a piece's bytes -> its ids, one table per model shared by every
// worker thread and kept from batch to batch (NativeDevice keeps it with the model's tables).
//
// A piece's ids are a function of its bytes alone (the whole-token lookup, then the merge rule),
// so a cached answer is the answer: the cache changes how often the work is done, never its
// result. Only what fits a slot is cached: pieces of 2 to ENC_CPU_KEY_BYTES bytes with at most
// ENC_CPU_SLOT_IDS ids (a longer or rarer piece is looked up or merged every time).
//
// Layout: a power of two of 64-byte slots (one cache line each), two to a bucket chosen by a mix
// of the piece's bytes (enc_cpu_key). A slot: [meta: sequence (32 bits) | length << 32 | id
// count << 40, the piece's bytes as three zero-padded little-endian words, eight ids]. The
// table never grows past its size (ENC_CPU_CACHE_SLOTS by default; the native device's
// `cache_slots` knob, $GPUTOK_PIECE_CACHE); eviction: see enc_cpu_cache_put.
//
// Concurrency: each slot is a sequence lock. A reader loads the meta word (acquire), the key
// and the ids (relaxed), then the meta word again after an acquire fence: an odd or changed
// sequence is a miss, so a reader never takes a half-written slot and never waits. A writer
// claims the slot by a compare-and-swap of the meta word to an odd sequence (a slot another
// writer holds is skipped: inserting is only a saving), writes, and publishes the next even
// sequence (release). Readers write nothing, so the hot slots stay shared in every core's
// cache; a write happens only on a miss.
//
// Performance notes: a probe reads one line, two at most (the whole-token table's probe is two
// lines in a table of several MB: its slot, then the token's bytes). Direct-mapped, 2-6% of
// o200k prose's pieces missed a warm cache of 64-256K slots on conflicts alone. Tried and
// dropped: a second table of 16-byte slots, four to a line, for one-token pieces of up to 8
// bytes (most pieces: a quarter of the memory, so more of the hot ones in L2): o200k prose's
// repeated pass ran 10-20% slower (the four slots' tests, and a second probe for the others).
#pragma once

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#ifndef ENC_CPU_KEY_BYTES
#define ENC_CPU_KEY_BYTES 24  // the longest piece a slot holds
#endif
#ifndef ENC_CPU_SLOT_IDS
#define ENC_CPU_SLOT_IDS 8  // the most ids a slot holds
#endif
#ifndef ENC_CPU_CACHE_SLOTS
#define ENC_CPU_CACHE_SLOTS (1u << 18)  // 16 MB
#endif

struct alignas(64) EncCpuSlot {
  enc_u64 meta;  // sequence | len << 32 | count << 40
  enc_u64 key[ENC_CPU_KEY_BYTES / 8];
  enc_u32 ids[ENC_CPU_SLOT_IDS];
};
static_assert(sizeof(EncCpuSlot) == 64, "one cache line a slot");

struct EncCpuCache {
  EncCpuSlot* slots;
  enc_u64 mask;  // slots - 1
  void* map;     // the mapping the slots are in
  enc_u64 map_bytes;
  // (counted by the batches, not by each probe: a shared counter would be written by every
  // thread on every piece)
  enc_u64 lookups, hits, inserts;
};

// The piece's bytes as the slot keeps them: three little-endian words, zero-padded. The slot
// is chosen by a cheaper mix of them than THE BYTES HASH (which a miss computes for the
// whole-token table: enc_cpu_key_hash).
struct EncCpuKey {
  enc_u64 w[ENC_CPU_KEY_BYTES / 8];
  enc_u64 mix;
};

static_assert(ENC_CPU_KEY_BYTES == 24, "enc_cpu_key reads three words");

// The key of a piece of len (2 .. ENC_CPU_KEY_BYTES) bytes at p, whose next 24 bytes are
// readable (the text buffer's padding: cpu_text.h): three loads masked by the length. (The
// masks from a table: computed with compares, they were a branch the length mispredicted.)
struct EncCpuMasks {
  enc_u64 m[ENC_CPU_KEY_BYTES + 1][3] = {};
  constexpr EncCpuMasks() {
    for (int len = 0; len <= ENC_CPU_KEY_BYTES; ++len)
      for (int j = 0; j < 3; ++j) {
        const int b = len - 8 * j;  // this word's bytes
        m[len][j] = b >= 8 ? ~0ull : (b <= 0 ? 0ull : (1ull << (8 * b)) - 1);
      }
  }
};
static constexpr EncCpuMasks enc_cpu_masks{};

__forceinline__ void enc_cpu_key(const enc_u8* p, enc_u32 len, EncCpuKey& k) {
  const enc_u64* m = enc_cpu_masks.m[len];
  k.w[0] = enc_host_load8(p) & m[0];
  k.w[1] = enc_host_load8(p + 8) & m[1];
  k.w[2] = enc_host_load8(p + 16) & m[2];
  k.mix = ((k.w[0] ^ (k.w[1] * 0xC2B2AE3D27D4EB4Full) ^ (k.w[2] * 0x165667B19E3779F9ull)) + len) *
          0x9E3779B97F4A7C15ull;
}

// THE BYTES HASH of the piece (common/encode_rules.h), from its key's words.
__forceinline__ enc_u64 enc_cpu_key_hash(const EncCpuKey& k, enc_u32 len) {
  enc_u64 h = enc_bytes_hash_word(enc_bytes_hash_start(len), k.w[0]);
  if (len > 8) h = enc_bytes_hash_word(h, k.w[1]);
  if (len > 16) h = enc_bytes_hash_word(h, k.w[2]);
  return enc_bytes_hash_end(h);
}

// The piece's bucket: two neighbouring slots (one 128-byte pair of lines).
__forceinline__ EncCpuSlot* enc_cpu_slot(const EncCpuCache* c, const EncCpuKey& k) {
  return c->slots + ((k.mix >> 32) & c->mask & ~(enc_u64)1);
}

// Slot s's ids for the piece (len bytes, key k) into out[0 .. ENC_CPU_SLOT_IDS): their count,
// or -1. The key and ids are read with plain loads and used only if the sequence is unchanged
// after them (the acquire fence orders the loads before that check): a copy of a slot being
// rewritten is thrown away, never used.
__forceinline__ int enc_cpu_slot_get(const EncCpuSlot* s, const EncCpuKey& k, enc_u32 len,
                                     enc_u32* out) {
  const enc_u64 m0 = __atomic_load_n(&s->meta, __ATOMIC_ACQUIRE);
  // an even sequence and this length (the count above them is the slot's)
  if ((m0 & 0xFF00000001ull) != ((enc_u64)len << 32)) return -1;
  if (((s->key[0] ^ k.w[0]) | (s->key[1] ^ k.w[1]) | (s->key[2] ^ k.w[2])) != 0) return -1;
  memcpy(out, s->ids, sizeof s->ids);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&s->meta, __ATOMIC_RELAXED) != m0) return -1;
  return (int)((m0 >> 40) & 0xFFu);
}

// The cached ids of the piece: its bucket's first slot, then its second.
__forceinline__ int enc_cpu_cache_get(const EncCpuCache* c, const EncCpuKey& k, enc_u32 len,
                                      enc_u32* out) {
  const EncCpuSlot* s = enc_cpu_slot(c, k);
  const int got = enc_cpu_slot_get(s, k, len, out);
  return got >= 0 ? got : enc_cpu_slot_get(s + 1, k, len, out);
}

// Write a piece into slot s unless another writer holds it.
__forceinline__ void enc_cpu_slot_put(EncCpuSlot* s, const EncCpuKey& k, enc_u32 len,
                                      const enc_u32* ids, enc_u32 count) {
  enc_u64 m = __atomic_load_n(&s->meta, __ATOMIC_RELAXED);
  if (m & 1u) return;
  const enc_u32 seq = (enc_u32)m;
  if (!__atomic_compare_exchange_n(&s->meta, &m, (m & ~(enc_u64)0xFFFFFFFFu) | (seq + 1u), false,
                                   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return;
  __atomic_thread_fence(__ATOMIC_RELEASE);  // the odd sequence before any of the new contents
  for (int j = 0; j < ENC_CPU_KEY_BYTES / 8; ++j)
    __atomic_store_n(&s->key[j], k.w[j], __ATOMIC_RELAXED);
  for (enc_u32 j = 0; j < ENC_CPU_SLOT_IDS; ++j)  // (the ids past count: whatever ids holds)
    __atomic_store_n(&s->ids[j], ids[j], __ATOMIC_RELAXED);
  const enc_u64 meta = (enc_u64)(seq + 2u) | ((enc_u64)len << 32) | ((enc_u64)count << 40);
  __atomic_store_n(&s->meta, meta, __ATOMIC_RELEASE);
}

// Cache the piece's count ids (count <= ENC_CPU_SLOT_IDS, 2 <= len <= ENC_CPU_KEY_BYTES;
// ids[0 .. ENC_CPU_SLOT_IDS) is read, its tail unused). Eviction: a bucket's first slot keeps
// the first piece it took (an empty first slot takes the piece); every later piece of that
// bucket takes the second slot from the one before. The pieces met first in a text are mostly
// its frequent ones, which so stay; the rare ones churn through the second slot.
__forceinline__ void enc_cpu_cache_put(EncCpuCache* c, const EncCpuKey& k, enc_u32 len,
                                       const enc_u32* ids, enc_u32 count) {
  EncCpuSlot* s = enc_cpu_slot(c, k);
  const bool first_empty = ((__atomic_load_n(&s->meta, __ATOMIC_RELAXED) >> 32) & 0xFFu) == 0;
  enc_cpu_slot_put(first_empty ? s : s + 1, k, len, ids, count);
}

// A cache of `slots` slots (rounded up to a power of two, at least 64), empty: every slot's
// length is 0, which no cached piece has. Fresh zero pages (a fresh process's first batch pays
// for no memset of them, and a page costs memory once a piece is cached in it), in 2 MB pages
// where the system gives them: a probe per piece over several MB with 4 KB pages also missed
// the TLB. nullptr without memory.
inline EncCpuCache* enc_cpu_cache_new(enc_u64 slots) {
  enc_u64 n = 64;
  while (n < slots) n <<= 1;
  EncCpuCache* c = static_cast<EncCpuCache*>(calloc(1, sizeof(EncCpuCache)));
  if (c == nullptr) return nullptr;
  const enc_u64 bytes = n * sizeof(EncCpuSlot);
  const enc_u64 huge = 2u << 20;
  const enc_u64 span = bytes >= huge ? bytes + huge : bytes;  // room to align to 2 MB
  void* mem = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    free(c);
    return nullptr;
  }
  enc_u8* at = static_cast<enc_u8*>(mem);
  if (span > bytes) {
    at += (huge - ((enc_u64)(__UINTPTR_TYPE__)at & (huge - 1))) & (huge - 1);
#ifdef MADV_HUGEPAGE
    madvise(at, bytes, MADV_HUGEPAGE);
#endif
  }
  c->map = mem;
  c->map_bytes = span;
  c->slots = reinterpret_cast<EncCpuSlot*>(at);
  c->mask = n - 1;
  return c;
}

inline void enc_cpu_cache_free(EncCpuCache* c) {
  if (c == nullptr) return;
  munmap(c->map, c->map_bytes);
  free(c);
}
