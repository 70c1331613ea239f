// host_train_words.h: host only. The word counter of BPE training (gputok/train/native.py):
// documents in, unique words and their counts out, on every core. A translation unit of the
// native CPU device's library (gputok/backends/native_build.py), not a kernel.
//
// A batch of documents (UTF-8, back to back, with their offsets) is cut into ranges of whole
// documents of about TRAIN_RANGE_BYTES (256 KB); worker threads take ranges in turn. For each
// range a worker cuts the pieces as the per-document encoder does (gputok_cpu_word_ends,
// kernels/cpu_encode.h: the class scan and the family's matcher, the same rules, the tables of
// the pinned Unicode version HF's trainer splits by; one segment per document, so no word
// crosses a document) and counts every piece (a *word*, HF's Split isolated: the pattern's matches and
// the gaps between them; the supported patterns leave no gaps) in its own table, whose keys
// point into the batch. At the end of the batch each worker moves its table into the shared
// one, shard by shard (64 shards by hash, a lock each: workers rarely wait on each other, and
// the shared table never holds a word twice).
//
// THE PRUNE RULE (bounded memory): when the shared table's bytes pass the budget after a batch,
// every word counted at most `floor` times so far is dropped, floor = 1, 2, 4, ... until the
// table is under half the budget; the floor stays (words seen again start from 0, so their
// counts are low by what was dropped). Merges equal HF's only when nothing was dropped; the
// caller reads `pruned` and says so. With no pruning the counts are exact.
//
// Performance notes: with the chunk pipeline's pre-tokenizer (gputok_native_chunk_pretok:
// marks, classes and entries written for a whole range, then read) the pre-tokenizer was ~60%
// of a core's time on prose and the table ~30% (one probe per piece, most of them hits on a few
// thousand common words that stay in cache); the per-document pass's finder writes only each
// piece's end (4 bytes a piece, not 6 bytes a byte) and finds most pieces from its class masks.
// Tried and dropped:
// one shared table under a single lock (the second core waited ~25% of the time on it).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

extern "C" long long gputok_cpu_word_ends(const unsigned char* buf, const long long* off,
                                          long long d0, long long d1,
                                          const unsigned char* cls_table,
                                          const unsigned char* letters, unsigned n_letters,
                                          int o200k, int gpt2, int digit_group, int end_whole,
                                          const unsigned char* nibbles, unsigned* ends);

#ifndef TRAIN_EXPORT
#define TRAIN_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace train_words {

constexpr long long TRAIN_RANGE_BYTES = 256 << 10;
constexpr int COUNT_AHEAD = 8;  // words hashed ahead of the one counted (a power of two)
constexpr int SHARD_BITS = 6;
constexpr int N_SHARDS = 1 << SHARD_BITS;
constexpr unsigned char SEG_START = 1, SEG_END = 2;  // ENC_SEG_START / ENC_SEG_END

// The first min(n, 8) bytes of p as a little-endian word, zero above them; `end` is the end of
// the readable buffer (a whole 8-byte load where it fits).
inline uint64_t head_word(const uint8_t* p, size_t n, const uint8_t* end) {
  uint64_t w = 0;
  if (p + 8 <= end) {
    std::memcpy(&w, p, 8);
    if (n < 8) w &= (1ull << (8 * n)) - 1;
  } else {
    std::memcpy(&w, p, n < 8 ? n : 8);
  }
  return w;
}

// THE WORD HASH: the words' bytes 8 at a time (the last word zero-padded), each multiplied in
// and folded; the length mixed in first. The top SHARD_BITS pick the shard, the bits below
// them the shard's slot, the high 32 are kept as the slot's tag.
inline uint64_t word_hash(const uint8_t* p, size_t n, uint64_t head) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  h = (h ^ (head * 0xFF51AFD7ED558CCDull)) * 0x9E3779B97F4A7C15ull;
  for (size_t i = 8; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i < 8 ? n - i : 8);
    h ^= h >> 29;
    h = (h ^ (w * 0xFF51AFD7ED558CCDull)) * 0x9E3779B97F4A7C15ull;
  }
  h ^= h >> 32;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

inline uint64_t word_hash(const uint8_t* p, size_t n) {
  return word_hash(p, n, head_word(p, n, p + n));
}

// A worker's table for one batch: 24-byte slots whose words are offsets into the batch (no
// copies); a word of up to 8 bytes compares in its slot (Slot::head).
struct Local {
  struct Slot {
    uint64_t head;   // the word's first 8 bytes (head_word): a word of up to 8 bytes compares
                     // here, with no read of the batch at its first place (a cache miss)
    uint32_t tag;    // the hash's high 32 bits
    uint32_t off;    // the word: base[off .. off + len)
    uint32_t len;
    uint32_t count;  // (0: free) a batch is < 4 GB, so a count in it fits
  };
  std::vector<Slot> slots;
  size_t used = 0;
  const uint8_t* base = nullptr;  // the batch
  const uint8_t* end = nullptr;

  void reset(size_t cap) {
    slots.assign(cap, Slot{0, 0, 0, 0, 0});
    used = 0;
  }
  uint64_t hash_of(const Slot& e) const { return word_hash(base + e.off, e.len); }
  // The slot a word's hash starts at, on its way into the cache (a window of words ahead).
  void prefetch(uint64_t h) const { __builtin_prefetch(slots.data() + (h & (slots.size() - 1))); }
  void add(const uint8_t* p, uint32_t len) {
    if (slots.empty()) reset(1 << 14);
    const uint64_t head = head_word(p, len, end);
    add(p, len, head, word_hash(p, len, head));
  }
  // (slots not empty; head and h the word's head_word and word_hash)
  void add(const uint8_t* p, uint32_t len, uint64_t head, uint64_t h) {
    const uint32_t tag = (uint32_t)(h >> 32);
    const size_t mask = slots.size() - 1;
    for (size_t s = h & mask;; s = (s + 1) & mask) {
      Slot& e = slots[s];
      if (e.count == 0) {
        e = Slot{head, tag, (uint32_t)(p - base), len, 1};
        if (++used * 4 > slots.size() * 3) grow();
        return;
      }
      if (e.head == head && e.len == len &&
          (len <= 8 || (e.tag == tag && std::memcmp(base + e.off, p, len) == 0))) {
        ++e.count;
        return;
      }
    }
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots);
    slots.assign(old.size() * 2, Slot{0, 0, 0, 0, 0});
    const size_t mask = slots.size() - 1;
    for (const Slot& e : old) {
      if (!e.count) continue;
      size_t s = hash_of(e) & mask;
      while (slots[s].count) s = (s + 1) & mask;
      slots[s] = e;
    }
  }
};

// One shard of the shared table. Words live in `arena` as (u32 length, bytes); a slot holds the
// hash's high 32 bits, the word's arena offset and its count (0: free).
struct Shard {
  struct Slot {
    uint32_t tag;
    uint32_t off;
    int64_t count;
  };
  std::mutex mu;
  std::vector<Slot> slots;
  std::vector<uint8_t> arena;
  size_t used = 0;

  size_t bytes() const { return slots.capacity() * sizeof(Slot) + arena.capacity(); }
  uint32_t len_at(uint32_t off) const {
    uint32_t n;
    std::memcpy(&n, arena.data() + off, 4);
    return n;
  }
  void add(uint64_t h, const uint8_t* p, uint32_t len, int64_t c) {
    if (slots.empty()) slots.assign(1 << 10, Slot{0, 0, 0});
    size_t mask = slots.size() - 1;
    const uint32_t tag = (uint32_t)(h >> 32);
    for (size_t s = (h >> SHARD_BITS) & mask;; s = (s + 1) & mask) {
      Slot& e = slots[s];
      if (e.count == 0) {
        if (arena.size() + 4 + len > 0xFFFFFFFFull) throw std::length_error("shard arena");
        e.tag = tag;
        e.off = (uint32_t)arena.size();
        e.count = c;
        arena.resize(arena.size() + 4 + len);
        std::memcpy(arena.data() + e.off, &len, 4);
        std::memcpy(arena.data() + e.off + 4, p, len);
        if (++used * 4 > slots.size() * 3) rehash(slots.size() * 2);
        return;
      }
      if (e.tag == tag && len_at(e.off) == len &&
          std::memcmp(arena.data() + e.off + 4, p, len) == 0) {
        e.count += c;
        return;
      }
    }
  }
  // Rebuild with `cap` slots, keeping the words whose count is above `floor` (0: all).
  void rehash(size_t cap, int64_t floor = 0, int64_t* dropped_words = nullptr,
              int64_t* dropped_count = nullptr) {
    std::vector<Slot> old;
    old.swap(slots);
    std::vector<uint8_t> old_arena;
    if (floor > 0) old_arena.swap(arena);
    slots.assign(cap, Slot{0, 0, 0});
    used = 0;
    size_t mask = cap - 1;
    for (const Slot& e : old) {
      if (!e.count) continue;
      Slot f = e;
      if (floor > 0) {
        if (e.count <= floor) {
          ++*dropped_words;
          *dropped_count += e.count;
          continue;
        }
        uint32_t n;
        std::memcpy(&n, old_arena.data() + e.off, 4);
        f.off = (uint32_t)arena.size();
        arena.insert(arena.end(), old_arena.begin() + e.off, old_arena.begin() + e.off + 4 + n);
      }
      // the slot from the same hash bits add() used: the tag's bits are the hash's high 32,
      // the index bits are not kept, so recompute them from the word
      const uint8_t* w = arena.data() + f.off + 4;
      const uint64_t h = word_hash(w, len_at(f.off));
      size_t s = (h >> SHARD_BITS) & mask;
      while (slots[s].count) s = (s + 1) & mask;
      slots[s] = f;
      ++used;
    }
    if (floor > 0) arena.shrink_to_fit();
  }
};

struct Counter {
  Shard shards[N_SHARDS];
  // pre-tokenizer tables (the encoder's, for one pattern; owned by the caller)
  const uint8_t* cls_table;
  const uint8_t* letters;
  uint32_t n_letters;
  int o200k, gpt2, digit_group, end_whole;
  const uint8_t* nibbles;  // THE ASCII NIBBLES of cls_table (kernels/cpu_text.h; the caller's)
  int threads;
  int64_t budget;  // bytes of the shared table before THE PRUNE RULE (0: none)
  int64_t floor = 0;
  int64_t pruned_words = 0, pruned_count = 0;
  int64_t pieces = 0;

  size_t bytes() const {
    size_t b = 0;
    for (const Shard& s : shards) b += s.bytes();
    return b;
  }
  int64_t n_words() const {
    int64_t n = 0;
    for (const Shard& s : shards) n += (int64_t)s.used;
    return n;
  }
};

struct Workspace {
  std::vector<uint32_t> ends;
  Local local;
};

// Count the pieces of documents [d0, d1) of the batch into `local`.
inline int64_t count_range(const Counter& c, Workspace& ws, const uint8_t* buf,
                           const int64_t* off, int64_t d0, int64_t d1) {
  const int64_t base = off[d0], n = off[d1] - base;
  if (n <= 0) return 0;
  if (ws.ends.size() < (size_t)n) ws.ends.resize((size_t)n);
  const long long k = gputok_cpu_word_ends(buf, (const long long*)off, d0, d1, c.cls_table,
                                           c.letters, c.n_letters, c.o200k, c.gpt2,
                                           c.digit_group, c.end_whole, c.nibbles,
                                           ws.ends.data());
  if (k < 0) throw std::bad_alloc();
  // the pieces tile the range (the documents back to back, none crossing a document's end);
  // each is hashed and its slot prefetched COUNT_AHEAD pieces before it is counted
  Local& t = ws.local;
  if (t.slots.empty()) t.reset(1 << 14);
  const uint8_t* p = buf + base;
  uint64_t head[COUNT_AHEAD], hash[COUNT_AHEAD];
  for (long long e = 0; e < k + COUNT_AHEAD; ++e) {
    const int r = (int)(e & (COUNT_AHEAD - 1));
    if (e >= COUNT_AHEAD) {
      const uint32_t a = e - COUNT_AHEAD ? ws.ends[e - COUNT_AHEAD - 1] : 0;
      t.add(p + a, ws.ends[e - COUNT_AHEAD] - a, head[r], hash[r]);
    }
    if (e < k) {
      const uint32_t a = e ? ws.ends[e - 1] : 0, len = ws.ends[e] - a;
      head[r] = head_word(p + a, len, t.end);
      hash[r] = word_hash(p + a, len, head[r]);
      t.prefetch(hash[r]);
    }
  }
  return k;
}

inline void flush(Counter& c, Local& local, int first_shard) {
  // group the entries by shard, then take each shard's lock once
  std::vector<uint32_t> start(N_SHARDS + 1, 0);
  std::vector<uint64_t> hash(local.used);
  std::vector<uint32_t> which(local.used);
  size_t k = 0;
  for (uint32_t i = 0; i < local.slots.size(); ++i) {
    if (!local.slots[i].count) continue;
    hash[k] = local.hash_of(local.slots[i]);
    which[k] = i;
    ++start[(hash[k] >> (64 - SHARD_BITS)) + 1];
    ++k;
  }
  for (int s = 0; s < N_SHARDS; ++s) start[s + 1] += start[s];
  std::vector<uint32_t> order(start[N_SHARDS]);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t j = 0; j < k; ++j) order[fill[hash[j] >> (64 - SHARD_BITS)]++] = (uint32_t)j;
  for (int k = 0; k < N_SHARDS; ++k) {
    const int s = (first_shard + k) & (N_SHARDS - 1);
    if (start[s] == start[s + 1]) continue;
    std::lock_guard<std::mutex> g(c.shards[s].mu);
    for (uint32_t j = start[s]; j < start[s + 1]; ++j) {
      const Local::Slot& e = local.slots[which[order[j]]];
      c.shards[s].add(hash[order[j]], local.base + e.off, e.len, e.count);
    }
  }
  local.slots.clear();
  local.slots.shrink_to_fit();
  local.used = 0;
}

inline void prune(Counter& c) {
  if (c.budget <= 0 || (int64_t)c.bytes() <= c.budget) return;
  while ((int64_t)c.bytes() > c.budget / 2) {
    c.floor = c.floor ? 2 * c.floor : 1;
    for (Shard& s : c.shards) {
      size_t keep = 0;
      for (const Shard::Slot& e : s.slots) keep += e.count > c.floor;
      size_t cap = 1 << 10;
      while (cap * 3 < keep * 4 + 4) cap *= 2;
      s.rehash(cap, c.floor, &c.pruned_words, &c.pruned_count);
      s.slots.shrink_to_fit();
    }
    if (c.n_words() == 0) break;
  }
}

// Runs `work(t)` on min(threads, n_ranges) threads (t = 0 on this one), then adds the pieces
// the workers counted and prunes: 0, or -1 when a worker (`failed`) or the prune ran out of
// memory. The tail of every batch of the counter.
template <class Work>
inline int run_and_prune(Counter& c, int64_t n_ranges, Work& work,
                         const std::atomic<int64_t>& pieces, const std::atomic<int>& failed) {
  const int nt = (int)std::min<int64_t>(c.threads, n_ranges);
  std::vector<std::thread> pool;
  for (int t = 1; t < nt; ++t) pool.emplace_back(std::ref(work), t);
  work(0);
  for (std::thread& th : pool) th.join();
  if (failed) return -1;
  c.pieces += pieces;
  try {
    prune(c);
  } catch (const std::exception&) {
    return -1;
  }
  return 0;
}


}  // namespace train_words

// A counter for one pre-tokenizer (the encoder's tables for the pattern and their ASCII
// nibbles; they must outlive it).
TRAIN_EXPORT void* gputok_train_words_new(const unsigned char* cls_table,
                                          const unsigned char* letters, unsigned n_letters,
                                          int o200k, int gpt2, int digit_group, int end_whole,
                                          const unsigned char* nibbles, int threads,
                                          long long budget) {
  auto* c = new train_words::Counter();
  c->cls_table = cls_table;
  c->letters = letters;
  c->n_letters = n_letters;
  c->o200k = o200k;
  c->gpt2 = gpt2;
  c->digit_group = digit_group;
  c->end_whole = end_whole;
  c->nibbles = nibbles;
  c->threads = threads < 1 ? 1 : threads;
  c->budget = budget;
  return c;
}

TRAIN_EXPORT void gputok_train_words_free(void* ctx) {
  delete static_cast<train_words::Counter*>(ctx);
}

// Count the words of documents buf[off[d] .. off[d + 1]) for d < n_docs (a batch < 4 GB).
// Returns 0, or -1 when memory ran out (the counter is then unusable).
TRAIN_EXPORT int gputok_train_words_add(void* ctx, const unsigned char* buf,
                                        const long long* off, long long n_docs) {
  using namespace train_words;
  Counter& c = *static_cast<Counter*>(ctx);
  // ranges of whole documents of about TRAIN_RANGE_BYTES
  std::vector<int64_t> cuts{0};
  for (int64_t d = 0; d < n_docs; ++d)
    if (off[d + 1] - off[cuts.back()] >= TRAIN_RANGE_BYTES) cuts.push_back(d + 1);
  if (cuts.back() != n_docs) cuts.push_back(n_docs);
  const int64_t n_ranges = (int64_t)cuts.size() - 1;
  if (n_ranges <= 0) return 0;
  std::atomic<int64_t> next{0}, pieces{0};
  std::atomic<int> failed{0};
  auto work = [&](int t) {
    try {
      Workspace ws;
      ws.local.base = buf;
      ws.local.end = buf + off[n_docs];
      int64_t mine = 0;
      for (int64_t r; (r = next.fetch_add(1)) < n_ranges;)
        mine += count_range(c, ws, buf, (const int64_t*)off, cuts[r], cuts[r + 1]);
      pieces += mine;
      ws.ends.clear();
      ws.ends.shrink_to_fit();
      flush(c, ws.local, t * (N_SHARDS / 8));
    } catch (const std::exception&) {
      failed = 1;
    }
  };
  return run_and_prune(c, n_ranges, work, pieces, failed);
}

// [unique words, their bytes, table bytes, pieces counted, floor, words pruned, count pruned]
TRAIN_EXPORT void gputok_train_words_stats(void* ctx, long long* out) {
  auto& c = *static_cast<train_words::Counter*>(ctx);
  long long bytes = 0;
  for (const auto& s : c.shards)
    for (const auto& e : s.slots)
      if (e.count) bytes += s.len_at(e.off);
  out[0] = c.n_words();
  out[1] = bytes;
  out[2] = (long long)c.bytes();
  out[3] = c.pieces;
  out[4] = c.floor;
  out[5] = c.pruned_words;
  out[6] = c.pruned_count;
}

// Every word (stats' counts of them): bytes back to back, offsets (n + 1), counts; words of
// fewer than `min_len` bytes are left out (and `out_n` says how many were written). The
// shards are released as they are copied.
TRAIN_EXPORT void gputok_train_words_export(void* ctx, unsigned char* bytes, long long* offsets,
                                            long long* counts, long long min_len,
                                            long long* out_n) {
  auto& c = *static_cast<train_words::Counter*>(ctx);
  long long k = 0, at = 0;
  offsets[0] = 0;
  for (auto& s : c.shards) {
    for (const auto& e : s.slots) {
      if (!e.count) continue;
      const uint32_t n = s.len_at(e.off);
      if ((long long)n < min_len) continue;
      std::memcpy(bytes + at, s.arena.data() + e.off + 4, n);
      at += n;
      counts[k] = e.count;
      offsets[++k] = at;
    }
    std::vector<train_words::Shard::Slot>().swap(s.slots);
    std::vector<uint8_t>().swap(s.arena);
    s.used = 0;
  }
  *out_n = k;
}
