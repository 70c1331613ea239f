// cpu_cache.h: host only. The piece cache of the native CPU device's per-document pass
// (kernels/cpu_encode.h): a piece's bytes -> its ids, one table per model shared by every
// worker thread and kept from batch to batch (gputok/backends/native/perdoc.py keeps one per
// model).
//
// A piece's ids are a function of its bytes alone (the whole-token lookup, then the merge rule),
// so a cached answer is the answer: the cache changes how often the work is done, never its
// result. A slot holds a piece of 2 to ENC_CPU_KEY_BYTES bytes with at most ENC_CPU_SLOT_IDS
// ids; the long tier (below) pieces of up to ENC_CPU_LONG_MAX bytes (a CJK clause is one piece
// of tens of bytes, whose merge is the costliest per byte); others are solved every time.
//
// Layout: a power of two of 64-byte slots (one cache line each), ENC_CPU_WAYS to a bucket
// chosen by a mix of the piece's bytes (enc_cpu_key). A slot: [meta: sequence (32 bits) |
// length << 32 | id count << 40, the piece's bytes as three zero-padded little-endian words,
// eight ids]. The table never grows past its size (ENC_CPU_CACHE_SLOTS by default; the native
// device's `cache_slots` knob, $GPUTOK_PIECE_CACHE); eviction: see enc_cpu_cache_put.
//
// Concurrency: each slot is a sequence lock. A reader loads the meta word (acquire), the key
// and the ids (relaxed), then the meta word again after an acquire fence: an odd or changed
// sequence is a miss, so a reader never takes a half-written slot and never waits. A writer
// claims the slot by a compare-and-swap of the meta word to an odd sequence (a slot another
// writer holds is skipped: inserting is only a saving), writes, and publishes the next even
// sequence (release). Readers write nothing, so the hot slots stay shared in every core's
// cache; a write happens only on a miss.
//
// Performance notes: a hit reads one line, mostly (the whole-token table's probe is two lines in
// a table of several MB: its slot, then the token's bytes). Direct-mapped, 2-6% of o200k
// prose's pieces missed a warm cache of 64-256K slots on conflicts alone; two ways, 0.3-3.5%
// (multilingual text has more distinct pieces); four, 0-0.5% (256K slots, 2 MB of text), 0.2-2%
// after as much other text again. Tried and dropped: a second table of 16-byte slots, four to
// a line, for one-token pieces of up to 8 bytes (most pieces: a quarter of the memory, so more
// of the hot ones in L2): o200k prose's repeated pass ran 10-20% slower (the four slots'
// tests, and a second probe for the others).
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

#ifndef ENC_CPU_LONG_MAX
#define ENC_CPU_LONG_MAX 1024  // the longest piece the long tier keeps
#endif
#ifndef ENC_CPU_LONG_PROBES
#define ENC_CPU_LONG_PROBES 8
#endif

// (the fields every probe reads first, in their own cache line; the ones threads write after
// them, each in another: a write would otherwise take the readers' line from every core)
struct alignas(64) EncCpuCache {
  EncCpuSlot* slots;
  enc_u64 mask;  // slots - 1
  void* map;     // the mapping the slots are in
  enc_u64 map_bytes;
  // the long tier: pieces of ENC_CPU_KEY_BYTES + 1 .. ENC_CPU_LONG_MAX bytes (or of more ids
  // than a slot holds), entries [length, count, bytes (zero-padded to words), ids] one after
  // another in an arena, found by their THE BYTES HASH in a table of tag << 32 | offset words
  enc_u64* long_slots;
  enc_u64 long_mask;
  enc_u32* arena;
  enc_u64 arena_words;
  void* long_map;
  enc_u64 long_map_bytes;
  alignas(64) enc_u64 arena_used;  // (bumped atomically; offset 0 is no entry)
  // (counted by the batches, not by each probe: a shared counter would be written by every
  // thread on every piece)
  alignas(64) enc_u64 lookups;
  enc_u64 hits, inserts;
};

// The piece's bytes as the slot keeps them: three little-endian words, zero-padded, and its
// bucket, chosen by a cheaper mix of them than THE BYTES HASH (which a miss computes for the
// whole-token table: enc_cpu_key_hash). (The bucket is found once, where the key is made: the
// prefetch, the look-up and an insert all take it from here.)
struct EncCpuKey {
  enc_u64 w[ENC_CPU_KEY_BYTES / 8];
  EncCpuSlot* bucket;
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


// THE BYTES HASH of the piece (common/encode_rules.h), from its key's words.
__forceinline__ enc_u64 enc_cpu_key_hash(const EncCpuKey& k, enc_u32 len) {
  enc_u64 h = enc_bytes_hash_word(enc_bytes_hash_start(len), k.w[0]);
  if (len > 8) h = enc_bytes_hash_word(h, k.w[1]);
  if (len > 16) h = enc_bytes_hash_word(h, k.w[2]);
  return enc_bytes_hash_end(h);
}

#ifndef ENC_CPU_WAYS
#define ENC_CPU_WAYS 4  // slots a bucket (a power of two)
#endif

// The key of a piece of len (2 .. ENC_CPU_KEY_BYTES) bytes at p in cache c, its bucket
// ENC_CPU_WAYS neighbouring slots.
__forceinline__ void enc_cpu_key(const EncCpuCache* c, const enc_u8* p, enc_u32 len,
                                 EncCpuKey& k) {
  const enc_u64* m = enc_cpu_masks.m[len];
  k.w[0] = enc_host_load8(p) & m[0];
  k.w[1] = enc_host_load8(p + 8) & m[1];
  k.w[2] = enc_host_load8(p + 16) & m[2];
  const enc_u64 mix =
      ((k.w[0] ^ (k.w[1] * 0xC2B2AE3D27D4EB4Full) ^ (k.w[2] * 0x165667B19E3779F9ull)) + len) *
      0x9E3779B97F4A7C15ull;
  k.bucket = c->slots + ((mix >> 32) & c->mask & ~(enc_u64)(ENC_CPU_WAYS - 1));
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

// The cached ids of the piece: its bucket's slots in order (a piece found early in a text sits
// in a first slot: one line read). (0: the slot says its ids are in the long tier.)
__forceinline__ int enc_cpu_cache_get(const EncCpuCache* /* the key's */, const EncCpuKey& k,
                                      enc_u32 len, enc_u32* out) {
  const EncCpuSlot* s = k.bucket;
  for (int j = 0; j < ENC_CPU_WAYS; ++j) {
    const int got = enc_cpu_slot_get(s + j, k, len, out);
    if (got >= 0) return got;
  }
  return -1;
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

// Cache the piece's count ids (count <= ENC_CPU_SLOT_IDS, 2 <= len <= ENC_CPU_KEY_BYTES; a
// count of 0 says the piece's ids are more than a slot holds, kept in the long tier;
// ids[0 .. ENC_CPU_SLOT_IDS) is read, its tail unused). Eviction: a piece takes its bucket's
// first empty slot; in a full bucket, the last slot (from the piece before). The first slots
// keep the first pieces they took: the pieces met first in a text are mostly its frequent
// ones, which so stay, and the rare ones churn through the last slot.
__forceinline__ void enc_cpu_cache_put(EncCpuCache* /* the key's */, const EncCpuKey& k,
                                       enc_u32 len, const enc_u32* ids, enc_u32 count) {
  EncCpuSlot* s = k.bucket;
  int j = 0;
  while (j < ENC_CPU_WAYS - 1 && ((__atomic_load_n(&s[j].meta, __ATOMIC_RELAXED) >> 32) & 0xFFu))
    ++j;
  enc_cpu_slot_put(s + j, k, len, ids, count);
}

// ---------------------------------------------------------------- the long tier
// Entries are written once, before the table word that points at them is published (a
// compare-and-swap from 0, release), and never change: a reader that loads the word (acquire)
// reads a finished entry, with no sequence to check. Nothing is evicted: once the arena or a
// piece's probe run is full, new pieces are not kept (the first pieces met stay: mostly the
// text's frequent ones). A tier's bound is its arena (8 words a slot of the cache).

// Whether a piece of len bytes goes to the long tier.
__forceinline__ bool enc_cpu_long(const EncCpuCache* c, enc_u32 len) {
  return c != nullptr && len > ENC_CPU_KEY_BYTES && len <= ENC_CPU_LONG_MAX;
}

__forceinline__ const enc_u64* enc_cpu_long_home(const EncCpuCache* c, enc_u64 h) {
  return c->long_slots + (h & c->long_mask);
}

// The ids of the piece p[0 .. len) (THE BYTES HASH h) into out (room for len ids): their count,
// or -1.
__forceinline__ int enc_cpu_long_get(const EncCpuCache* c, enc_u64 h, const enc_u8* p,
                                     enc_u32 len, enc_u32* out) {
  const enc_u32 tag = (enc_u32)(h >> 32);
  enc_u64 s = h & c->long_mask;
  for (int probe = 0; probe < ENC_CPU_LONG_PROBES; ++probe) {
    const enc_u64 v = __atomic_load_n(&c->long_slots[s], __ATOMIC_ACQUIRE);
    if (v == 0) return -1;
    if ((enc_u32)(v >> 32) == tag) {
      const enc_u32* e = c->arena + (enc_u32)v;
      if (e[0] == len && memcmp(e + 2, p, len) == 0) {
        const enc_u32 count = e[1];
        memcpy(out, e + 2 + (len + 3) / 4, 4 * (size_t)count);
        return (int)count;
      }
    }
    s = (s + 1) & c->long_mask;
  }
  return -1;
}

// Keep the piece's count ids in the long tier (while there is room).
inline void enc_cpu_long_put(EncCpuCache* c, enc_u64 h, const enc_u8* p, enc_u32 len,
                             const enc_u32* ids, enc_u32 count) {
  const enc_u64 need = 2 + (len + 3) / 4 + count;
  if (__atomic_load_n(&c->arena_used, __ATOMIC_RELAXED) + need > c->arena_words) return;
  const enc_u64 off = __atomic_fetch_add(&c->arena_used, need, __ATOMIC_RELAXED);
  if (off + need > c->arena_words || off > 0xFFFFFFFFu) return;
  enc_u32* e = c->arena + off;
  e[0] = len;
  e[1] = count;
  e[1 + (len + 3) / 4] = 0;  // (the last word's padding)
  memcpy(e + 2, p, len);
  memcpy(e + 2 + (len + 3) / 4, ids, 4 * (size_t)count);
  const enc_u64 word = ((enc_u64)(enc_u32)(h >> 32) << 32) | off;
  enc_u64 s = h & c->long_mask;
  for (int probe = 0; probe < ENC_CPU_LONG_PROBES; ++probe) {
    enc_u64 expect = 0;
    if (__atomic_compare_exchange_n(&c->long_slots[s], &expect, word, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED))
      return;
    s = (s + 1) & c->long_mask;  // (taken: by another piece, or this one from another thread)
  }
}

// ---------------------------------------------------------------- making one

// Fresh zero pages of `bytes` (a fresh process's first batch pays for no memset of them, and a
// page costs memory once a piece is cached in it), in 2 MB pages where the system gives them
// (a probe per piece over several MB with 4 KB pages also missed the TLB): the aligned start,
// the mapping and its size in *map / *map_bytes; nullptr without memory.
inline void* enc_cpu_pages(enc_u64 bytes, void** map, enc_u64* map_bytes) {
  const enc_u64 huge = 2u << 20;
  const enc_u64 span = bytes >= huge ? bytes + huge : bytes;  // room to align to 2 MB
  void* mem = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  enc_u8* at = static_cast<enc_u8*>(mem);
  if (span > bytes) {
    at += (huge - ((enc_u64)(__UINTPTR_TYPE__)at & (huge - 1))) & (huge - 1);
#ifdef MADV_HUGEPAGE
    madvise(at, bytes, MADV_HUGEPAGE);
#endif
  }
  *map = mem;
  *map_bytes = span;
  return at;
}

inline void enc_cpu_cache_free(EncCpuCache* c) {
  if (c == nullptr) return;
  if (c->map != nullptr) munmap(c->map, c->map_bytes);
  if (c->long_map != nullptr) munmap(c->long_map, c->long_map_bytes);
  free(c);
}

// A cache of `slots` slots (rounded up to a power of two, at least 64) and its long tier
// (slots / 4 table words, 8 arena words a slot), empty: every slot's length is 0, which no
// cached piece has. nullptr without memory.
inline EncCpuCache* enc_cpu_cache_new(enc_u64 slots) {
  enc_u64 n = 64;
  while (n < slots) n <<= 1;
  void* mem = nullptr;
  if (posix_memalign(&mem, 64, sizeof(EncCpuCache)) != 0) return nullptr;
  memset(mem, 0, sizeof(EncCpuCache));
  EncCpuCache* c = static_cast<EncCpuCache*>(mem);
  c->slots = static_cast<EncCpuSlot*>(enc_cpu_pages(n * sizeof(EncCpuSlot), &c->map,
                                                    &c->map_bytes));
  c->mask = n - 1;
  const enc_u64 table = n / 4, words = 8 * n;
  enc_u8* tier = static_cast<enc_u8*>(enc_cpu_pages(8 * table + 4 * words, &c->long_map,
                                                    &c->long_map_bytes));
  if (c->slots == nullptr || tier == nullptr) {
    enc_cpu_cache_free(c);
    return nullptr;
  }
  c->long_slots = reinterpret_cast<enc_u64*>(tier);
  c->long_mask = table - 1;
  c->arena = reinterpret_cast<enc_u32*>(tier + 8 * table);
  c->arena_words = words;
  c->arena_used = 1;
  return c;
}
