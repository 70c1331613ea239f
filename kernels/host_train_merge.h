// host_train_merge.h: host only. The merge loop of BPE training on the CPU
// (gputok/train/native.py), HF BpeTrainer's rule as cpu_ref/train.py states it, with work
// proportional to the merged pair's occurrences. A translation unit of the native CPU device's
// library (gputok/backends/native_build.py), not a kernel.
//
// State:
//   words     every unique word of two or more symbols, in one arena: its count, its length
//             and its symbols (rewritten in place as merges shorten it); a word is named by
//             its offset in the arena
//   pairs     pair key (left << 32 | right) -> record {count, word list}, through an
//             open-addressing index; the word list holds every word the pair was *gained* in
//             (its first count, or the merge step that made its newer symbol: a pair is gained
//             in one step only, since only the step that makes a symbol makes pairs with it),
//             so it is a superset of the words that still hold the pair. Lists live in one
//             append-only pool.
//   heap      a lazy max-heap of (count, key) entries: a pair's count only falls after its
//             entry is pushed, so an entry whose count is stale is pushed again with the
//             current count when it surfaces, and the first entry that surfaces with its
//             current count is the best pair (HF keeps the same queue). Only the entries of
//             the highest counts are in the heap: the others wait in buckets by their count's
//             bit length (`parked`, below the heap's `level`), and the next bucket down fills
//             the heap when it runs dry. (A pair's count only falls, so a parked entry never
//             outranks one in the heap; the heap stays small, in cache, where it held every
//             pair and each push and pop missed the cache at its lower levels.)
//
// A merge step of the best pair (a, b) -> c walks the words of (a, b)'s list only, rewrites each
// left to right without overlap (THE MERGE RULE) and applies, per match, HF's count changes
// (THE DELTA RULE of kernels/common/train_rules.h, in its sequential form): with `prev` the
// symbol written just before the match (c when a match precedes it) and `next` the one after,
// (prev, a) -n, (prev, c) +n, (b, next) -n, (c, next) +n; changes to (a, b) itself are left
// out (its count is retired). Pairs gained get this step's word list and a heap entry.
//
// THE COMPARATOR: a higher count wins; on equal counts the smaller key, i.e. the smaller
// (left_id, right_id) (HF BpeTrainer's rule, the same in cpu_ref/train.py, gputok/train/cpu.py,
// kernels/common/train_rules.h).
//
// Ids: the caller gives every symbol's bytes; a merge's id is the next free id, unless its bytes
// are one of the `reserved` strings (HF's rule 7: a learned token spelled like a special token
// takes the special's id, and the vocabulary does not grow).
//
// Performance notes (20 MB of prose, 163K words, 32K merges, one core): the first count
// ~0.15 s, the loop ~0.4 s, three quarters of it in the first 2,000 merges, whose pairs are in
// most words. A step's cost is its words' symbols plus one index probe per change. Tried and
// dropped: a per-pair std::vector of words (2x the memory of the pool, and slower to build).
// The walk of a step's words is bound by memory latency (a word is a cache miss): words live
// beside their header in one arena and are fetched ahead from the list. Against a record array
// pointing into a symbol array (two dependent misses a word, which defeated fetching ahead),
// a global heap of every candidate and a sort of each step's gains, the loop took about half
// the time (SentencePiece training of 32 MB of prose, 31K merges: ~1.6 -> ~0.8 s; HF's rule on
// the same text: ~0.35 -> ~0.23 s).
#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#ifndef TRAIN_EXPORT
#define TRAIN_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace train_merge {

inline uint64_t pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32) | b; }

// THE PAIR HASH (kernels/common/train_rules.h: murmur3's 64-bit finalizer)
inline uint64_t pair_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

struct Pair {
  uint64_t key;
  int64_t count;
  uint64_t list_off;  // its words: pool[list_off .. list_off + list_len)
  uint32_t list_len;
  uint32_t mark;  // 1 + the last word added to its list (a word goes in once)
};

struct Entry {  // a heap entry: the pair's record is found by its key
  int64_t count;
  uint64_t key;
  // SentencePiece mode: THE SPM COMPARATOR's next two keys as far as one integer holds them,
  // the piece's characters << 48 | its first 6 bytes (big-endian, zero-padded: a piece holds
  // no U+0000); the comparator reads the pieces only when these are equal
  uint64_t tie;
};

// THE COMPARATOR, as std::push_heap's "less": a is below b when b is better
inline bool below(const Entry& a, const Entry& b) {
  return a.count < b.count || (a.count == b.count && a.key > b.key);
}

// A pair taken or dropped (SentencePiece mode): far below any count deltas can reach.
constexpr int64_t RETIRED = INT64_MIN / 4;
inline bool alive(int64_t count) { return count > RETIRED / 2; }

class Index {  // pair key -> index into `pairs`
 public:
  // a key and its index side by side: a probe is one cache miss, not one per array
  struct Slot {
    uint64_t key;
    uint32_t idx;
  };
  std::vector<Slot> slots;
  size_t used = 0;
  static constexpr uint64_t EMPTY = ~0ull;

  void init(size_t expect) {
    size_t cap = 1 << 10;
    while (cap * 3 < expect * 4 + 4) cap *= 2;
    slots.assign(cap, Slot{EMPTY, 0});
    used = 0;
  }
  // the index of `key`, or `fresh` after inserting it (then *made = true)
  uint32_t find_or_add(uint64_t key, uint32_t fresh, bool* made) {
    size_t mask = slots.size() - 1;
    for (size_t s = pair_hash(key) & mask;; s = (s + 1) & mask) {
      if (slots[s].key == key) {
        *made = false;
        return slots[s].idx;
      }
      if (slots[s].key == EMPTY) {
        slots[s] = Slot{key, fresh};
        *made = true;
        if (++used * 4 > slots.size() * 3) grow();
        return fresh;
      }
    }
  }
  uint32_t find(uint64_t key) const {
    size_t mask = slots.size() - 1;
    for (size_t s = pair_hash(key) & mask;; s = (s + 1) & mask) {
      if (slots[s].key == key) return slots[s].idx;
      if (slots[s].key == EMPTY) return ~0u;
    }
  }

 private:
  void grow() {
    std::vector<Slot> old;
    old.swap(slots);
    slots.assign(old.size() * 2, Slot{EMPTY, 0});
    size_t mask = slots.size() - 1;
    for (const Slot& o : old) {
      if (o.key == EMPTY) continue;
      size_t s = pair_hash(o.key) & mask;
      while (slots[s].key != EMPTY) s = (s + 1) & mask;
      slots[s] = o;
    }
  }
};

// The words, back to back in one arena of uint32: a word is a header (its count, two
// uint32; its length) and then its symbols, and it is named by its header's offset (what the
// pair lists hold). A step's walk reads a word with one fetch (a header beside its symbols, not
// a record in another array pointing at them), and can fetch it ahead from the list alone.
constexpr uint32_t WORD_HEAD = 3;
inline int64_t word_count(const uint32_t* w) {
  int64_t n;
  std::memcpy(&n, w, 8);
  return n;
}
// the largest arena: offsets and "1 + offset" marks are uint32
constexpr uint64_t ARENA_MAX = 0xFFFFFFFEull;

// A step's count changes, gathered per worker before they touch the pair index: a big step's
// changes fall on few distinct pairs ((x, a), (x, c), ... for the few symbols x next to the
// pair), so they add up here, in cache, and the index is probed once per distinct pair.
class StepMap {
 public:
  std::vector<uint64_t> keys;
  std::vector<int64_t> delta;
  std::vector<uint32_t> mark;  // 1 + the last word that gained it (a word is listed once)
  std::vector<uint32_t> ord;   // its place in `used` (which a grow keeps)
  std::vector<uint32_t> used;  // slots in use, in order
  static constexpr uint64_t EMPTY = ~0ull;

  StepMap() { resize(1 << 10); }
  void clear() {
    for (uint32_t s : used) keys[s] = EMPTY;
    used.clear();
  }
  uint32_t add(uint64_t key, int64_t d) {
    if ((used.size() + 1) * 2 > keys.size()) grow();
    const size_t mask = keys.size() - 1;
    for (size_t s = pair_hash(key) & mask;; s = (s + 1) & mask) {
      if (keys[s] == key) {
        delta[s] += d;
        return (uint32_t)s;
      }
      if (keys[s] == EMPTY) {
        keys[s] = key;
        delta[s] = d;
        mark[s] = 0;
        ord[s] = (uint32_t)used.size();
        used.push_back((uint32_t)s);
        return (uint32_t)s;
      }
    }
  }

 private:
  void resize(size_t cap) {
    keys.assign(cap, EMPTY);
    delta.assign(cap, 0);
    mark.assign(cap, 0);
    ord.assign(cap, 0);
  }
  void grow() {  // (slots move; ordinals stay)
    std::vector<uint64_t> k = keys;
    std::vector<int64_t> d = delta;
    std::vector<uint32_t> m = mark, u = used;
    resize(keys.size() * 2);
    used.clear();
    const size_t mask = keys.size() - 1;
    for (uint32_t o : u) {
      size_t s = pair_hash(k[o]) & mask;
      while (keys[s] != EMPTY) s = (s + 1) & mask;
      keys[s] = k[o];
      delta[s] = d[o];
      mark[s] = m[o];
      ord[s] = (uint32_t)used.size();
      used.push_back((uint32_t)s);
    }
  }
};

// One worker's share of a step: its changes, and its gains as (ordinal << 32 | word).
struct Share {
  StepMap map;
  std::vector<uint64_t> gains;
};

// Threads for the big steps: `run(n, job)` calls job(0 .. n - 1), job(0) on the caller.
class Crew {
 public:
  explicit Crew(int n) : n_(n < 1 ? 1 : n) {}
  ~Crew() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int size() const { return n_; }
  void run(const std::function<void(int)>& job) {
    while ((int)threads_.size() < n_ - 1) {
      const int id = (int)threads_.size() + 1;
      threads_.emplace_back([this, id] { loop(id); });
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = &job;
      pending_ = n_ - 1;
      ++gen_;
    }
    cv_.notify_all();
    job(0);
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || gen_ != seen; });
        if (stop_) return;
        seen = gen_;
        job = job_;
      }
      (*job)(id);
      {
        std::lock_guard<std::mutex> g(mu_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }
  int n_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t gen_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Words per worker below which a step runs on one thread (waking a worker costs ~20-50 us);
// the tests lower it to run small steps on several workers.
constexpr uint32_t PAR_MIN_WORDS = 4096;
// how many words ahead a step's walk fetches a word (Trainer::rewrite)
constexpr uint32_t PREFETCH_WORDS = 8;

struct Trainer {
  std::vector<uint32_t> arena;  // the words (WORD_HEAD)
  uint64_t n_words = 0;
  // pairs
  Index index;
  std::vector<Pair> pairs;
  std::vector<uint32_t> pool;
  std::vector<Entry> heap;
  std::vector<Entry> parked[65];  // by bit length of the count, below `level`
  int level = 0;                  // the heap holds entries of bit length >= level
  // ids
  std::vector<std::string> tok;  // bytes of every id (empty: not a byte string)
  std::unordered_map<std::string, uint32_t> reserved;
  uint32_t next_id = 0;
  int64_t vocab_len = 0;
  // a step's work
  std::vector<Share> shares;
  std::vector<uint64_t> gains;  // pair << 32 | word
  std::unique_ptr<Crew> crew;
  uint32_t par_min = PAR_MIN_WORDS;
  // SentencePiece mode (host_train_spm.h): pairs only where THE SPM PIECE RULE allows, THE SPM
  // COMPARATOR, candidates kept at count 0, a piece made twice dropped the second time
  std::unique_ptr<train_spm::Rules> spm;
  std::vector<uint32_t> nchars;  // characters of each id (SentencePiece mode)
  // the classes of each id's characters: classes[class_at[id] .. + nchars[id])
  std::vector<train_spm::CharInfo> classes;
  std::vector<uint64_t> class_at;
  std::vector<train_spm::CharInfo> scratch;
  std::unordered_set<std::string> made;

  struct Cmp {
    const Trainer* t;
    bool operator()(const Entry& x, const Entry& y) const { return t->worse(x, y); }
  };
  Cmp cmp() const { return Cmp{this}; }
  bool worse(const Entry& x, const Entry& y) const {
    if (!spm) return below(x, y);
    if (x.count != y.count) return x.count < y.count;
    if (x.tie != y.tie) return x.tie > y.tie;
    const uint32_t xa = (uint32_t)(x.key >> 32), xb = (uint32_t)x.key;
    const uint32_t ya = (uint32_t)(y.key >> 32), yb = (uint32_t)y.key;
    return train_spm::worse(x.count, nchars[xa] + nchars[xb], tok[xa], tok[xb], x.key, y.count,
                            nchars[ya] + nchars[yb], tok[ya], tok[yb], y.key);
  }
  Entry entry(int64_t count, uint64_t key) const {
    uint64_t tie = 0;
    if (spm) {
      const std::string& a = tok[key >> 32];
      const std::string& b = tok[(uint32_t)key];
      unsigned char head[6] = {};
      for (size_t i = 0; i < 6 && i < a.size() + b.size(); ++i)
        head[i] = (unsigned char)(i < a.size() ? a[i] : b[i - a.size()]);
      tie = (uint64_t)(nchars[key >> 32] + nchars[(uint32_t)key]) << 48;
      for (int i = 0; i < 6; ++i) tie |= (uint64_t)head[i] << (40 - 8 * i);
    }
    return Entry{count, key, tie};
  }
  // whether a pair with this count is (still) a candidate for the heap
  bool queued(int64_t count) const { return spm ? alive(count) : count > 0; }

  uint32_t pair_of(uint64_t key) {
    bool fresh;
    const uint32_t p = index.find_or_add(key, (uint32_t)pairs.size(), &fresh);
    if (fresh) {
      int64_t start = 0;
      if (spm) {  // a pair no piece may be is kept, retired, so the rule runs once per pair
        const uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)key;
        const uint32_t na = nchars[a], nb = nchars[b];
        bool ok = na + nb <= (uint32_t)spm->max_len;
        if (ok) {
          scratch.resize(na + nb);
          std::copy_n(classes.data() + class_at[a], na, scratch.data());
          std::copy_n(classes.data() + class_at[b], nb, scratch.data() + na);
          ok = spm->valid(scratch.data(), na + nb);
        }
        if (!ok) start = RETIRED;
      }
      pairs.push_back(Pair{key, start, 0, 0, 0});
    }
    return p;
  }

  // Append a word (its count and symbols) to the arena.
  void add_word(int64_t count, const uint32_t* s, uint32_t len) {
    if (arena.size() + WORD_HEAD + len > ARENA_MAX)
      throw std::length_error("the words are too many for the merge loop");
    const size_t at = arena.size();
    arena.resize(at + WORD_HEAD + len);
    std::memcpy(arena.data() + at, &count, 8);
    arena[at + 2] = len;
    std::memcpy(arena.data() + at + WORD_HEAD, s, 4ull * len);
    ++n_words;
  }

  void build(int threads) {
    index.init(1 << 12);  // (it grows: a corpus's byte pairs are a few thousand)
    // first pass: counts, and the number of distinct words of each pair (a word's length is
    // its first one here, so the walk steps from word to word)
    const uint32_t end = (uint32_t)arena.size();
    for (uint32_t w = 0; w < end; w += WORD_HEAD + arena[w + 2]) {
      const uint32_t* s = arena.data() + w + WORD_HEAD;
      const int64_t n = word_count(arena.data() + w);
      for (uint32_t i = 0; i + 1 < arena[w + 2]; ++i) {
        Pair& p = pairs[pair_of(pair_key(s[i], s[i + 1]))];
        p.count += n;
        if (p.mark != w + 1 && alive(p.count)) {
          p.mark = w + 1;
          ++p.list_len;
        }
      }
    }
    uint64_t at = 0;
    for (Pair& p : pairs) {
      p.list_off = at;
      at += p.list_len;
      p.list_len = 0;
      p.mark = 0;
    }
    pool.resize(at);
    for (uint32_t w = 0; w < end; w += WORD_HEAD + arena[w + 2]) {
      const uint32_t* s = arena.data() + w + WORD_HEAD;
      for (uint32_t i = 0; i + 1 < arena[w + 2]; ++i) {
        Pair& p = pairs[index.find(pair_key(s[i], s[i + 1]))];
        if (p.mark != w + 1 && alive(p.count)) {
          p.mark = w + 1;
          pool[p.list_off + p.list_len++] = w;
        }
      }
    }
    level = 65;  // (all parked, then the top bucket into the heap)
    for (const Pair& p : pairs)
      if (queued(p.count)) push(entry(p.count, p.key));
    refill();
    shares.resize(threads < 1 ? 1 : threads);
    if (threads > 1) crew.reset(new Crew(threads));
  }

  // Room for `more` pool entries. When the pool is full, the lists of pairs that no word holds
  // any more (count 0: merged, or merged away) are dropped and the live ones packed into a
  // new pool first, so the pool stays near the live lists' size instead of growing with every
  // step's gains.
  void reserve_pool(size_t more) {
    if (pool.size() + more <= pool.capacity()) return;
    size_t live = 0;
    for (Pair& p : pairs) {
      if (p.count <= 0) p.list_len = p.mark = 0;
      live += p.list_len;
    }
    std::vector<uint32_t> fresh;
    fresh.reserve(live + more + (live + more) / 2);
    for (Pair& p : pairs) {
      const uint64_t to = fresh.size();
      fresh.insert(fresh.end(), pool.begin() + p.list_off,
                   pool.begin() + p.list_off + p.list_len);
      p.list_off = to;
    }
    pool.swap(fresh);
  }

  uint32_t new_id(uint32_t a, uint32_t b) {
    std::string s = tok[a] + tok[b];
    auto it = reserved.find(s);
    if (it != reserved.end()) {
      if (tok.size() <= it->second) tok.resize(it->second + 1);
      tok[it->second] = s;
      return it->second;
    }
    const uint32_t c = next_id++;
    if (tok.size() <= c) tok.resize(c + 1);
    tok[c] = std::move(s);
    ++vocab_len;
    return c;
  }

  static int bits(int64_t count) { return count <= 0 ? 0 : 64 - __builtin_clzll((uint64_t)count); }
  // A candidate's entry: into the heap, or parked below it.
  void push(const Entry& e) {
    const int b = bits(e.count);
    if (b >= level) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), cmp());
    } else {
      parked[b].push_back(e);
    }
  }
  // The heap is empty: the highest parked bucket becomes the heap. False when none is left.
  bool refill() {
    while (level > 0 && parked[level - 1].empty()) --level;
    if (level == 0) return false;
    --level;
    heap.swap(parked[level]);
    std::vector<Entry>().swap(parked[level]);
    std::make_heap(heap.begin(), heap.end(), cmp());
    return true;
  }

  // The best pair with a count of at least min_count (popped), or false.
  bool pop_best(int64_t min_count, Entry* out) {
    while (!heap.empty() || refill()) {
      std::pop_heap(heap.begin(), heap.end(), cmp());
      Entry e = heap.back();
      heap.pop_back();
      const int64_t cur = pairs[index.find(e.key)].count;
      if (cur != e.count) {  // stale: its count fell since it was pushed
        if (queued(cur)) {
          e.count = cur;
          push(e);
        }
        continue;
      }
      if (cur < min_count) {
        push(e);  // (kept: a later call with the same floor stops here again)
        return false;
      }
      *out = e;
      return true;
    }
    return false;
  }

  // Where a step's changes go. Direct: into the pair records at once, the gains into `gains`
  // as (pair << 32 | word) (one thread: the hot pairs' records stay in cache, and a second
  // table in front of them measured 20% slower). A worker's Share: its own StepMap.
  struct Direct {
    Trainer& t;
    void change(uint64_t key, int64_t d) { t.pairs[t.index.find(key)].count += d; }
    void gain(uint64_t key, int64_t d, uint32_t w) {
      const uint32_t k = t.pair_of(key);
      Pair& p = t.pairs[k];
      p.count += d;
      if (p.mark != w + 1) {
        p.mark = w + 1;
        t.gains.push_back((uint64_t)k << 32 | w);
      }
    }
  };
  struct ToShare {
    Share& sh;
    void change(uint64_t key, int64_t d) { sh.map.add(key, d); }
    void gain(uint64_t key, int64_t d, uint32_t w) {
      const uint32_t slot = sh.map.add(key, d);
      if (sh.map.mark[slot] != w + 1) {
        sh.map.mark[slot] = w + 1;
        sh.gains.push_back((uint64_t)sh.map.ord[slot] << 32 | w);
      }
    }
  };

  // Rewrite the words list[j0 .. j1) for the merge of (a, b) -> c, their changes into `sink`.
  template <class Sink>
  void rewrite(Sink sink, const uint32_t* list, uint32_t j0, uint32_t j1, uint32_t a,
               uint32_t b, uint32_t c) {
    const uint64_t merged = pair_key(a, b);
    uint32_t* const base = arena.data();
    for (uint32_t j = j0; j < j1; ++j) {
      // the walk waits on memory (a word is a cache miss or two): words are fetched
      // PREFETCH_WORDS ahead, their first two cache lines (most words fit in them)
      if (j + PREFETCH_WORDS < j1) {
        const uint32_t* ahead = base + list[j + PREFETCH_WORDS];
        __builtin_prefetch(ahead);
        __builtin_prefetch(ahead + 16);
      }
      const uint32_t w = list[j];
      uint32_t* const s = base + w + WORD_HEAD;
      const uint32_t len = base[w + 2];
      const int64_t n = word_count(base + w);
      // THE MERGE RULE: left to right, without overlap; `o` writes, `r` reads
      uint32_t o = 0, r = 0;
      while (r < len) {
        if (r + 1 < len && s[r] == a && s[r + 1] == b) {
          if (o > 0) {  // THE DELTA RULE, left side: prev is what was written last
            const uint32_t prev = s[o - 1];
            const uint64_t old = pair_key(prev, a);
            if (old != merged) sink.change(old, -n);
            sink.gain(pair_key(prev, c), n, w);
          }
          if (r + 2 < len) {  // right side: next is still unread
            const uint32_t next = s[r + 2];
            const uint64_t old = pair_key(b, next);
            if (old != merged) sink.change(old, -n);
            sink.gain(pair_key(c, next), n, w);
          }
          s[o++] = c;
          r += 2;
        } else {
          s[o++] = s[r++];
        }
      }
      base[w + 2] = o;
    }
  }

  // `gains` (pair << 32 | word) grouped by pair in one counting pass, each pair's words in the
  // order they came (ascending: a step walks its list in order, the workers' shares in turn):
  // the pairs in `gained`, the words of gained[g] grouped[gained_at[g] .. gained_at[g + 1]).
  // (A std::sort of the gains was a tenth of the SentencePiece loop.)
  std::vector<uint32_t> gained, gained_at, grouped, slot_of;
  void group_gains() {
    constexpr uint32_t NONE = ~0u;
    if (slot_of.size() < pairs.size()) slot_of.resize(pairs.size(), NONE);
    gained.clear();
    gained_at.clear();
    for (uint64_t g : gains) {
      uint32_t& sl = slot_of[g >> 32];
      if (sl == NONE) {
        sl = (uint32_t)gained.size();
        gained.push_back((uint32_t)(g >> 32));
        gained_at.push_back(0);
      }
      ++gained_at[sl];
    }
    uint32_t at = 0;
    for (uint32_t& n : gained_at) {
      const uint32_t here = n;
      n = at;
      at += here;
    }
    grouped.resize(gains.size());
    for (uint64_t g : gains) grouped[gained_at[slot_of[g >> 32]]++] = (uint32_t)g;
    // (each start has moved to the next group's: shift back, and close the last group)
    for (size_t i = gained_at.size(); i-- > 0;) gained_at[i] = i ? gained_at[i - 1] : 0;
    gained_at.push_back((uint32_t)gains.size());
    for (uint32_t k : gained) slot_of[k] = NONE;
  }

  // One merge step; returns the merged id, or -1 when the pair was dropped (SentencePiece
  // mode: its piece was made before, by another derivation).
  int64_t merge(const Entry& best) {
    const uint32_t a = (uint32_t)(best.key >> 32), b = (uint32_t)best.key;
    Pair& top = pairs[index.find(best.key)];
    if (spm && !made.insert(tok[a] + tok[b]).second) {
      top.count = RETIRED;
      return -1;
    }
    const uint32_t c = new_id(a, b);
    if (spm) {
      if (nchars.size() <= c) {
        nchars.resize(c + 1);
        class_at.resize(c + 1);
      }
      nchars[c] = nchars[a] + nchars[b];
      class_at[c] = classes.size();
      classes.resize(class_at[c] + nchars[c]);
      std::copy_n(classes.data() + class_at[a], nchars[a], classes.data() + class_at[c]);
      std::copy_n(classes.data() + class_at[b], nchars[b],
                  classes.data() + class_at[c] + nchars[a]);
    }
    top.count = spm ? RETIRED : 0;  // retired: no occurrence is left after this step
    const uint32_t* list = pool.data() + top.list_off;
    const uint32_t list_len = top.list_len;
    // the words: on every worker when there are enough of them (each word is in the list
    // once, so workers never share a word)
    const int n_sh = crew && list_len >= 2 * par_min
                         ? (int)std::min<uint32_t>(crew->size(), list_len / par_min)
                         : 1;
    gains.clear();
    if (n_sh == 1) {
      rewrite(Direct{*this}, list, 0, list_len, a, b, c);
    } else {
      for (int t = 0; t < n_sh; ++t) {
        shares[t].map.clear();
        shares[t].gains.clear();
      }
      const std::function<void(int)> job = [&](int t) {
        if (t >= n_sh) return;
        const uint32_t j0 = (uint32_t)((uint64_t)list_len * t / n_sh);
        const uint32_t j1 = (uint32_t)((uint64_t)list_len * (t + 1) / n_sh);
        rewrite(ToShare{shares[t]}, list, j0, j1, a, b, c);
      };
      crew->run(job);
      // the workers' changes, into the pair records; their gains, as (pair, word) (a word
      // is in one share only, so no (pair, word) repeats across shares)
      std::vector<uint32_t> to_pair;
      for (int t = 0; t < n_sh; ++t) {
        StepMap& m = shares[t].map;
        to_pair.resize(m.used.size());
        for (size_t i = 0; i < m.used.size(); ++i) {
          const uint32_t sl = m.used[i];
          const uint32_t k = pair_of(m.keys[sl]);
          pairs[k].count += m.delta[sl];
          to_pair[i] = k;
        }
        for (uint64_t g : shares[t].gains)
          gains.push_back((uint64_t)to_pair[g >> 32] << 32 | (uint32_t)g);
      }
    }
    // the gained pairs' lists: grouped by pair, each moved to the end of the pool and extended.
    // (A gained pair is always new in HF's rule, its old list empty; the other case, kept
    // whole here, merges the old list in without repeats.) Then their heap entries.
    group_gains();
    size_t more = 0;
    for (size_t g = 0; g < gained.size(); ++g)
      more += pairs[gained[g]].list_len + (gained_at[g + 1] - gained_at[g]);
    reserve_pool(more);
    for (size_t g = 0; g < gained.size(); ++g) {
      Pair& p = pairs[gained[g]];
      if (!alive(p.count)) continue;  // (a pair no piece may be, or one taken: no list, entry)
      const uint32_t n_new = gained_at[g + 1] - gained_at[g];
      const uint64_t to = pool.size();
      pool.resize(to + p.list_len + n_new);  // (within the reserved room: no reallocation)
      std::memmove(pool.data() + to, pool.data() + p.list_off, 4ull * p.list_len);
      uint32_t* w = pool.data() + to + p.list_len;
      std::memcpy(w, grouped.data() + gained_at[g], 4ull * n_new);
      w += n_new;
      if (p.list_len) {  // (not in HF's rule: an old list, so words may repeat)
        std::sort(pool.data() + to, w);
        w = std::unique(pool.data() + to, w);
        pool.resize(w - pool.data());
      }
      p.list_off = to;
      p.list_len = (uint32_t)(pool.size() - to);
      if (queued(p.count)) push(entry(p.count, p.key));
    }
    return c;
  }
};

}  // namespace train_merge

// A trainer over words data[offsets[w] .. offsets[w + 1]) (bytes) counted counts[w] times, each
// byte b the symbol byte_ids[b] (words of fewer than two bytes are skipped). `tok_bytes` /
// `tok_off`: the bytes of ids 0 .. n_ids - 1 (an id that stands for no byte string has none);
// `reserved`/`res_off`/`res_id`: n_reserved byte strings and the ids a merge spelling them
// takes. New ids start at n_ids. `threads`: workers for the steps with many words (at least
// `par_min` words each; 0: PAR_MIN_WORDS). Returns null when memory runs out.
TRAIN_EXPORT void* gputok_train_merge_new(const unsigned char* data, const long long* offsets,
                                          const long long* counts, long long n_words,
                                          const unsigned* byte_ids,
                                          const unsigned char* tok_bytes,
                                          const long long* tok_off, long long n_ids,
                                          const unsigned char* reserved, const long long* res_off,
                                          const unsigned* res_id, long long n_reserved,
                                          long long vocab_len, int threads, int par_min) {
  using namespace train_merge;
  try {
    auto* t = new Trainer();
    long long total = 0, kept = 0;
    for (long long w = 0; w < n_words; ++w) {
      const long long len = offsets[w + 1] - offsets[w];
      if (len >= 2 && counts[w] != 0) {
        total += len;
        ++kept;
      }
    }
    if ((uint64_t)(total + WORD_HEAD * kept) > ARENA_MAX)
      throw std::length_error("the words are too many for the merge loop");
    t->arena.reserve((size_t)(total + WORD_HEAD * kept));
    std::vector<uint32_t> s;
    for (long long w = 0; w < n_words; ++w) {
      const long long len = offsets[w + 1] - offsets[w];
      if (len < 2 || counts[w] == 0) continue;
      s.resize((size_t)len);
      for (long long i = 0; i < len; ++i) s[i] = byte_ids[data[offsets[w] + i]];
      t->add_word(counts[w], s.data(), (uint32_t)len);
    }
    t->tok.resize((size_t)n_ids);
    for (long long i = 0; i < n_ids; ++i)
      t->tok[i].assign((const char*)tok_bytes + tok_off[i], (size_t)(tok_off[i + 1] - tok_off[i]));
    for (long long r = 0; r < n_reserved; ++r)
      t->reserved.emplace(std::string((const char*)reserved + res_off[r],
                                      (size_t)(res_off[r + 1] - res_off[r])),
                          res_id[r]);
    t->next_id = (uint32_t)n_ids;
    t->vocab_len = vocab_len;
    if (par_min > 0) t->par_min = (uint32_t)par_min;
    t->build((int)threads);
    return t;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// A SentencePiece trainer (host_train_spm.h) over words of character ids
// ids[offsets[w] .. offsets[w + 1]) counted counts[w] times: id i is the character whose UTF-8
// is tok_bytes[tok_off[i] .. tok_off[i + 1]); cps/scripts/flags: the class (train_spm::CharInfo)
// of each of the n_cps characters of the corpus; rule_flags: bits 0-5 = split_by_unicode_script,
// split_by_number, split_by_whitespace, split_digits, treat_whitespace_as_suffix,
// allow_whitespace_only_pieces. New ids start at n_ids.
TRAIN_EXPORT void* gputok_train_spm_new(const unsigned* ids, const long long* offsets,
                                        const long long* counts, long long n_words,
                                        const unsigned char* tok_bytes, const long long* tok_off,
                                        long long n_ids, const unsigned* cps, const int* scripts,
                                        const unsigned char* flags, long long n_cps, int max_len,
                                        int rule_flags, int threads, int par_min) {
  using namespace train_merge;
  try {
    auto* t = new Trainer();
    auto rules = std::make_unique<train_spm::Rules>();
    rules->max_len = max_len;
    rules->split_by_unicode_script = rule_flags & 1;
    rules->split_by_number = rule_flags & 2;
    rules->split_by_whitespace = rule_flags & 4;
    rules->split_digits = rule_flags & 8;
    rules->ws_suffix = rule_flags & 16;
    rules->allow_ws_only = rule_flags & 32;
    for (long long k = 0; k < n_cps; ++k)
      rules->info[cps[k]] = train_spm::CharInfo{scripts[k], flags[k]};
    t->spm = std::move(rules);
    long long total = 0;
    for (long long w = 0; w < n_words; ++w)
      if (offsets[w + 1] - offsets[w] >= 2 && counts[w] != 0)
        total += WORD_HEAD + offsets[w + 1] - offsets[w];
    if ((uint64_t)total > ARENA_MAX)
      throw std::length_error("the words are too many for the merge loop");
    t->arena.reserve((size_t)total);
    for (long long w = 0; w < n_words; ++w) {
      const long long len = offsets[w + 1] - offsets[w];
      if (len < 2 || counts[w] == 0) continue;
      t->add_word(counts[w], ids + offsets[w], (uint32_t)len);
    }
    t->tok.resize((size_t)n_ids);
    t->nchars.assign((size_t)n_ids, 1);
    t->class_at.resize((size_t)n_ids);
    std::vector<train_spm::CharInfo> cls;
    for (long long i = 0; i < n_ids; ++i) {
      t->tok[i].assign((const char*)tok_bytes + tok_off[i], (size_t)(tok_off[i + 1] - tok_off[i]));
      t->spm->classes(t->tok[i], &cls);
      t->nchars[i] = (uint32_t)cls.size();
      t->class_at[i] = t->classes.size();
      t->classes.insert(t->classes.end(), cls.begin(), cls.end());
    }
    t->next_id = (uint32_t)n_ids;
    t->vocab_len = n_ids;
    if (par_min > 0) t->par_min = (uint32_t)par_min;
    t->build(threads);
    return t;
  } catch (const std::exception&) {
    return nullptr;
  }
}

TRAIN_EXPORT void gputok_train_merge_free(void* ctx) {
  delete static_cast<train_merge::Trainer*>(ctx);
}

// Up to `max_steps` merges, while the vocabulary has fewer than `target_len` ids and the best
// count is at least `min_count`: out[4 k .. 4 k + 4) = (left, right, merged, count) of each.
// Returns the number done (fewer than max_steps: training is over), or -1 when memory ran out.
TRAIN_EXPORT long long gputok_train_merge_run(void* ctx, long long max_steps,
                                              long long target_len, long long min_count,
                                              long long* out) {
  auto& t = *static_cast<train_merge::Trainer*>(ctx);
  long long done = 0;
  try {
    train_merge::Entry best;
    while (done < max_steps && t.vocab_len < target_len && t.pop_best(min_count, &best)) {
      const int64_t c = t.merge(best);
      if (c < 0) continue;  // dropped (SentencePiece mode)
      out[4 * done] = best.key >> 32;
      out[4 * done + 1] = best.key & 0xFFFFFFFFull;
      out[4 * done + 2] = c;
      out[4 * done + 3] = best.count;
      ++done;
    }
  } catch (const std::exception&) {
    return -1;
  }
  return done;
}

// [words, symbols, pairs, pool entries, heap entries, bytes held]
TRAIN_EXPORT void gputok_train_merge_stats(void* ctx, long long* out) {
  auto& t = *static_cast<train_merge::Trainer*>(ctx);
  out[0] = (long long)t.n_words;
  out[1] = (long long)(t.arena.size() - train_merge::WORD_HEAD * t.n_words);
  out[2] = (long long)t.pairs.size();
  out[3] = (long long)t.pool.size();
  size_t parked = 0, parked_cap = 0;
  for (const auto& v : t.parked) {
    parked += v.size();
    parked_cap += v.capacity();
  }
  out[4] = (long long)(t.heap.size() + parked);
  out[5] = (long long)(t.arena.capacity() * 4 +
                       t.index.slots.capacity() * sizeof(train_merge::Index::Slot) +
                       t.pairs.capacity() * sizeof(train_merge::Pair) +
                       t.pool.capacity() * 4 +
                       (t.heap.capacity() + parked_cap) * sizeof(train_merge::Entry));
}
