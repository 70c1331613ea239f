// host_bert.h: HF's BertNormalizer + BertPreTokenizer as the native device's pre-tokenizer (the
// cutter of host_regex.h's chunk driver), so a WordPiece model has no host stage there. The rule
// is gputok/components/bert_steps.py's (cpu_ref/wordpiece.py states it), in the same order on
// the same pinned tables (gputok/unicode/bert.py: the flags, canonical classes, full NFD
// decompositions and lowercase of gputok/unicode/data/hf_bert.ucd and hf_norm.ucd):
//
//   clean_text            DROP characters vanish, SPACE ones become " "
//   handle_chinese_chars  a CJK ideograph becomes " c "
//   strip_accents         NFD (full decompositions), marks of each run put in canonical order
//                         (a stable sort by class), then non-spacing marks (MN) vanish
//   lowercase             each character's lowercase (several characters for a few)
//
// then words: cut before and after every whitespace and punctuation character; whitespace
// dropped. Each text between special tokens is one segment: nothing crosses it.
#pragma once

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace gputok_bert {

enum { DROP = 1, SPACE = 2, CJK = 4, PUNCT = 8, WS = 16, MN = 32, DECOMP = 64 };
enum { O_NORMALIZE = 1, O_CLEAN = 2, O_CJK = 4, O_STRIP = 8, O_LOWER = 16 };

struct Tables {
  const uint8_t* flags;      // [0x110000]
  const uint8_t* ccc;        // [0x110000]
  const uint32_t* nfd_keys;  // sorted
  const long long* nfd_off;  // n_nfd + 1
  const uint32_t* nfd_vals;
  long long n_nfd;
  const uint32_t* lower1;    // [0x110000]: the one-character lowercase (itself for the others)
  const uint32_t* multi_keys;  // sorted: characters whose lowercase is several
  const long long* multi_off;
  const uint32_t* multi_vals;
  long long n_multi;
  int opts;
};

static inline long long find(const uint32_t* keys, long long n, uint32_t cp) {
  const uint32_t* at = std::lower_bound(keys, keys + n, cp);
  return (at != keys + n && *at == cp) ? (long long)(at - keys) : -1;
}

static inline void put_utf8(std::string& s, uint32_t c) {
  if (c < 0x80) {
    s.push_back((char)c);
  } else if (c < 0x800) {
    s.push_back((char)(0xC0 | (c >> 6)));
    s.push_back((char)(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    s.push_back((char)(0xE0 | (c >> 12)));
    s.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
    s.push_back((char)(0x80 | (c & 0x3F)));
  } else {
    s.push_back((char)(0xF0 | (c >> 18)));
    s.push_back((char)(0x80 | ((c >> 12) & 0x3F)));
    s.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
    s.push_back((char)(0x80 | (c & 0x3F)));
  }
}

// THE WHOLE-WORD LOOKUP (the native device's shortcut of THE WORDPIECE MATCH): a word that is
// itself a vocabulary entry is that one id - the longest match from its start is the whole
// word, and nothing is left. Open addressing over the entries' bytes (FNV-1a), built once per
// model (gputok_bert_words_new) from every entry; the cut gives such a word as a resolved entry
// (its id as the spec, as a special token's). The same index then answers THE WORDPIECE MATCH
// of the other words in the cut (Words::match), so the kernel's trie walk has nothing left.
struct Memo;

struct Words {
  std::vector<uint8_t> blob;
  std::vector<uint32_t> ids;
  // A slot holds what a probe compares, so a word is found by one cache miss, not three (the
  // slot, the entry's offset, its bytes: 55% of the cut's cycles were those misses): the hash's
  // high half, the entry's first 8 bytes, its length (0: empty), offset and id.
  struct Slot {
    uint64_t head;
    uint32_t tag, len, at, id;
  };
  std::vector<Slot> slot;
  uint32_t mask = 0;
  std::string prefix;          // the continuation prefix ("##")
  uint32_t unk = 0;            // the unknown-word id
  uint64_t max_chars = 0;      // a word of more characters is one unk id
  size_t max_first = 0;        // the longest entry (bytes): the longest first piece
  size_t max_cont = 0;         // the longest entry after the prefix: the longest later piece
  uint64_t prefix_state = 0;   // FNV-1a's state after the prefix's bytes
  std::vector<Memo*> memos;    // the words' memos, one per cutting thread at a time (MEMOS)

  ~Words();

  static uint64_t feed(uint64_t h, const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
  static uint64_t hash(const uint8_t* p, size_t n) {
    const uint64_t h = feed(1469598103934665603ull, p, n);
    return h ^ (h >> 29);
  }
  // The entry whose bytes are head + p[0, n) (head: the prefix or nothing; h: the finished
  // hash of those bytes), or gputok_rx::NORMAL.
  uint32_t find_h(uint64_t h, const std::string* head, const uint8_t* p, size_t n) const {
    const size_t hn = head ? head->size() : 0;
    const uint8_t* hp = hn ? (const uint8_t*)head->data() : nullptr;
    auto at = [hp, hn, p](size_t i) { return i < hn ? hp[i] : p[i - hn]; };
    uint64_t k8 = 0;
    for (size_t i = 0; i < 8 && i < hn + n; ++i) k8 |= (uint64_t)at(i) << (8 * i);
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t s = (uint32_t)h & mask;; s = (s + 1) & mask) {
      const Slot& e = slot[s];
      if (e.len == 0) return gputok_rx::NORMAL;
      if (e.tag != tag || e.len != hn + n || e.head != k8) continue;
      size_t i = 8;
      for (; i < hn + n && blob[e.at + i] == at(i); ++i) {
      }
      if (i >= hn + n) return e.id;
    }
  }
  uint32_t find(const uint8_t* p, size_t n) const { return find_h(hash(p, n), nullptr, p, n); }
  static uint64_t head8(const uint8_t* p, size_t n) {
    uint64_t k8 = 0;
    for (size_t i = 0; i < 8 && i < n; ++i) k8 |= (uint64_t)p[i] << (8 * i);
    return k8;
  }
  // Equal bytes (words are short: a loop beats a call to memcmp, 7% of a batch's cycles).
  static bool same(const uint8_t* x, const uint8_t* y, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (x[i] != y[i]) return false;
    return true;
  }

  // THE WORDPIECE MATCH (common/wordpiece_rules.h states it for the kernels; HF's loop): from
  // the word's start, the longest candidate first, each piece the longest prefix of what is
  // left that is an entry (later pieces: the prefix + it); one failure makes the whole word one
  // unk id. Pieces go to `got` as (bytes, id) pairs. A candidate ends on a character boundary
  // (entries are whole UTF-8 strings). The whole word is known not to be an entry.
  void match(const uint8_t* w, size_t n, std::vector<uint32_t>& got) const {
    got.clear();
    size_t pos = 0;
    while (pos < n) {
      const size_t cap = pos == 0 ? std::min(n - 1, max_first) : std::min(n - pos, max_cont);
      uint32_t id = gputok_rx::NORMAL;
      size_t len = cap;
      for (; len > 0; --len) {
        if (pos + len < n && (w[pos + len] & 0xC0) == 0x80) continue;  // mid-character
        if (pos == 0) {
          id = find_h(hash(w, len), nullptr, w, len);
        } else {
          const uint64_t h = feed(prefix_state, w + pos, len);
          id = find_h(h ^ (h >> 29), &prefix, w + pos, len);
        }
        if (id != gputok_rx::NORMAL) break;
      }
      if (id == gputok_rx::NORMAL) {  // one failure spoils the whole word
        got.clear();
        got.push_back((uint32_t)n);
        got.push_back(unk);
        return;
      }
      got.push_back((uint32_t)len);
      got.push_back(id);
      pos += len;
    }
  }
};

// A memo of matched words (word bytes -> their (bytes, id) pieces) that persists across chunks
// and batches: a word that is no entry is matched once, then found by one probe. One memo per
// cutting thread (leased: MemoLease), so no lock is held while cutting; a memo that fills
// (MEMO_WORDS words or MEMO_BYTES bytes) starts over.
//
// Performance notes: the kernel's trie walk over the words the whole-word lookup leaves (7% of
// the words of English prose, half of those of multilingual text) probed a 4 MB hash table for
// every byte, most probes a cache miss: 18% of a batch's cycles, more than the cut. Matched
// here, memoised, they cost a probe each after their first time.
enum { MEMO_WORDS = 1 << 15, MEMO_BYTES = 1 << 20, MEMOS = 8 };

struct Memo {
  std::mutex busy;
  std::vector<uint8_t> keys;    // the words' bytes, one after another
  std::vector<uint32_t> rec;    // per word: key offset, key bytes, pieces, (bytes, id) pairs
  std::vector<uint32_t> slot;   // record index + 1 (0: empty)
  uint32_t words = 0;

  void reset() {
    keys.clear();
    rec.clear();
    slot.assign(2 * MEMO_WORDS, 0u);  // load <= 1/2
    words = 0;
  }
  // The pieces of word w (hash h): a pointer to (pieces, (bytes, id) pairs), or null.
  const uint32_t* get(uint64_t h, const uint8_t* w, size_t n) const {
    const uint32_t m = (uint32_t)slot.size() - 1;
    for (uint32_t s = (uint32_t)(h >> 7) & m;; s = (s + 1) & m) {
      const uint32_t r = slot[s];
      if (r == 0) return nullptr;
      const uint32_t* q = rec.data() + (r - 1);
      if (q[1] == n && Words::same(keys.data() + q[0], w, n)) return q + 2;
    }
  }
  void put(uint64_t h, const uint8_t* w, size_t n, const std::vector<uint32_t>& got) {
    if (words + 1 > MEMO_WORDS || keys.size() + n > MEMO_BYTES) reset();
    const uint32_t m = (uint32_t)slot.size() - 1;
    uint32_t s = (uint32_t)(h >> 7) & m;
    while (slot[s] != 0) s = (s + 1) & m;
    slot[s] = (uint32_t)rec.size() + 1;
    rec.push_back((uint32_t)keys.size());
    rec.push_back((uint32_t)n);
    rec.push_back((uint32_t)(got.size() / 2));
    rec.insert(rec.end(), got.begin(), got.end());
    keys.insert(keys.end(), w, w + n);
    ++words;
  }
};

inline Words::~Words() {
  for (Memo* m : memos) delete m;
}

// A free memo of `w`'s (locked until the lease ends), or none when every one is in use.
struct MemoLease {
  Memo* memo = nullptr;
  explicit MemoLease(const Words* w) {
    if (w == nullptr) return;
    for (Memo* m : w->memos)
      if (m->busy.try_lock()) {
        memo = m;
        if (m->slot.empty()) m->reset();
        return;
      }
  }
  MemoLease(MemoLease&& o) noexcept : memo(o.memo) { o.memo = nullptr; }
  MemoLease(const MemoLease&) = delete;
  MemoLease& operator=(const MemoLease&) = delete;
  ~MemoLease() {
    if (memo) memo->busy.unlock();
  }
};

// What an ASCII character becomes through every step (Cutter's table): gone, whitespace,
// punctuation, a letter of a word, or K_GENERAL where a step does more than map it to one ASCII
// character (then it goes the general way, with the run of characters around it).
enum { K_SKIP, K_WS, K_PUNCT, K_WORD, K_GENERAL };

struct Cutter {
  const Tables& t;
  const Words* words;
  MemoLease lease;               // this thread's memo of matched words (none: match every time)
  std::vector<uint32_t> a, b, ns, nsp, got;
  uint8_t kind[128], out_byte[128];

  // The steps are per character but for the canonical order of a run of marks (no ASCII
  // character has a class), so an ASCII character that every step maps to one ASCII character
  // is cut by a table, and the runs between them go the general way on their own.
  Cutter(const Tables& tables, const Words* w) : t(tables), words(w), lease(w) {
    const uint8_t* f = t.flags;
    for (uint32_t c = 0; c < 128; ++c) {
      uint32_t cp = c;
      uint8_t k = K_WORD;
      if (t.opts & O_NORMALIZE) {
        if ((t.opts & O_CLEAN) && (f[cp] & DROP)) k = K_SKIP;
        if ((t.opts & O_CLEAN) && (f[cp] & SPACE)) cp = 0x20;
        if ((t.opts & O_CJK) && (f[cp] & CJK)) k = K_GENERAL;
        if ((t.opts & O_STRIP) && ((f[cp] & (DECOMP | MN)) || t.ccc[cp])) k = K_GENERAL;
        if (t.opts & O_LOWER) {
          if (t.n_multi && find(t.multi_keys, t.n_multi, cp) >= 0) k = K_GENERAL;
          cp = t.lower1[cp];
          if (cp >= 0x80 || ((t.opts & O_STRIP) && t.ccc[cp])) k = K_GENERAL;
        }
      }
      if (k == K_WORD) k = (f[cp] & WS) ? K_WS : (f[cp] & PUNCT) ? K_PUNCT : K_WORD;
      if (k == K_WORD && cp != c && !(t.opts & O_LOWER)) k = K_GENERAL;  // (runs map by lower)
      kind[c] = k;
      out_byte[c] = (uint8_t)cp;
    }
  }

  void normalize() {
    const uint8_t* f = t.flags;
    if (t.opts & (O_CLEAN | O_CJK)) {
      b.clear();
      for (uint32_t cp : a) {
        if (t.opts & O_CLEAN) {
          if (f[cp] & DROP) continue;
          if (f[cp] & SPACE) cp = 0x20;
        }
        if ((t.opts & O_CJK) && (f[cp] & CJK)) {
          b.push_back(0x20);
          b.push_back(cp);
          b.push_back(0x20);
        } else {
          b.push_back(cp);
        }
      }
      a.swap(b);
    }
    if (t.opts & O_STRIP) {
      b.clear();
      for (uint32_t cp : a) {
        const long long k = (f[cp] & DECOMP) ? find(t.nfd_keys, t.n_nfd, cp) : -1;
        if (k < 0) {
          b.push_back(cp);
        } else {
          for (long long j = t.nfd_off[k]; j < t.nfd_off[k + 1]; ++j) b.push_back(t.nfd_vals[j]);
        }
      }
      // canonical order: each run of characters with a class, stably sorted by class
      for (size_t i = 0; i < b.size();) {
        if (!t.ccc[b[i]]) { ++i; continue; }
        size_t j = i + 1;
        while (j < b.size() && t.ccc[b[j]]) ++j;
        if (j - i > 1)
          std::stable_sort(b.begin() + (long)i, b.begin() + (long)j,
                           [this](uint32_t x, uint32_t y) { return t.ccc[x] < t.ccc[y]; });
        i = j;
      }
      a.clear();
      for (uint32_t cp : b)
        if (!(f[cp] & MN)) a.push_back(cp);
    }
    if (t.opts & O_LOWER) {
      b.clear();
      for (uint32_t cp : a) {
        const long long k = t.n_multi ? find(t.multi_keys, t.n_multi, cp) : -1;
        if (k < 0) {
          b.push_back(t.lower1[cp]);
        } else {
          for (long long j = t.multi_off[k]; j < t.multi_off[k + 1]; ++j)
            b.push_back(t.multi_vals[j]);
        }
      }
      a.swap(b);
    }
  }

  // One character of the normalised text into the words: whitespace ends a word and goes, a
  // punctuation character is a word of its own, any other joins the open word.
  void put(uint32_t cp, uint8_t fl, bool& open, gputok_rx::Out& out) {
    if (fl & WS) {
      open = false;
      return;
    }
    if (!open || (fl & PUNCT)) {
      out.start.push_back((uint32_t)out.bytes.size());
      out.spec.push_back(gputok_rx::NORMAL);
    }
    put_utf8(out.bytes, cp);
    open = !(fl & PUNCT);
  }

  void cut(int, const uint8_t* w, long long n, gputok_rx::Out& out) {
    const size_t first = out.start.size();
    grow(out.bytes, out.bytes.size() + (size_t)n + 16);  // (about the text: one growth, not
    grow(out.start, first + (size_t)n / 3 + 16);         // many; the growth was 7% of a batch)
    grow(out.spec, first + (size_t)n / 3 + 16);
    words_of(w, n, out);
    if (words == nullptr) return;
    const size_t last = out.start.size();
    const uint8_t* bytes = (const uint8_t*)out.bytes.data();
    Memo* memo = lease.memo;
    // THE WHOLE-WORD LOOKUP of every word, in blocks: the block's slots are fetched ahead, so
    // their cache misses overlap (one miss a word was half of the cut's cycles)
    enum { BLOCK = 16 };
    uint64_t hs[BLOCK];
    size_t several = last;  // the first word that is not one entry
    for (size_t k0 = first; k0 < last; k0 += BLOCK) {
      const size_t k1 = std::min(last, k0 + (size_t)BLOCK);
      for (size_t k = k0; k < k1; ++k) {
        const size_t a0 = out.start[k], a1 = k + 1 < last ? out.start[k + 1] : out.bytes.size();
        hs[k - k0] = Words::hash(bytes + a0, a1 - a0);
        __builtin_prefetch(&words->slot[hs[k - k0] & words->mask]);
      }
      for (size_t k = k0; k < k1; ++k) {
        const size_t a0 = out.start[k], a1 = k + 1 < last ? out.start[k + 1] : out.bytes.size();
        const uint32_t id = one_id(bytes + a0, a1 - a0, hs[k - k0]);
        out.spec[k] = id;
        if (id == gputok_rx::NORMAL && several == last) several = k;
      }
    }
    if (several == last) return;
    // a word of several pieces: the entries from it on are written again, one per piece
    ns.assign(out.start.begin() + (long)several, out.start.end());
    nsp.assign(out.spec.begin() + (long)several, out.spec.end());
    out.start.resize(several);
    out.spec.resize(several);
    for (size_t j = 0; j < ns.size(); ++j) {
      const size_t a0 = ns[j], a1 = j + 1 < ns.size() ? ns[j + 1] : out.bytes.size();
      if (nsp[j] != gputok_rx::NORMAL) {
        out.start.push_back((uint32_t)a0);
        out.spec.push_back(nsp[j]);
        continue;
      }
      const uint8_t* p = bytes + a0;
      const size_t len = a1 - a0;
      const uint64_t h = Words::hash(p, len);
      const uint32_t* q = memo ? memo->get(h, p, len) : nullptr;
      if (q == nullptr) {
        words->match(p, len, got);
        if (memo) memo->put(h, p, len, got);
      }
      const uint32_t pieces = q ? q[0] : (uint32_t)(got.size() / 2);
      const uint32_t* pair = q ? q + 1 : got.data();
      uint32_t at = (uint32_t)a0;
      for (uint32_t i = 0; i < pieces; ++i) {
        out.start.push_back(at);
        out.spec.push_back(pair[2 * i + 1]);
        at += pair[2 * i];
      }
    }
  }

  template <class V>
  static void grow(V& v, size_t want) {
    if (v.capacity() < want) v.reserve(std::max(want, 2 * v.capacity()));
  }

  // A word's id where it is one entry: unk past the character cap, the word's own id where it
  // is an entry, else NORMAL (it has several pieces, or is unk for want of a match).
  uint32_t one_id(const uint8_t* p, size_t n, uint64_t h) const {
    if (n > words->max_chars) {  // (bytes: at least the characters)
      uint64_t chars = 0;
      for (size_t i = 0; i < n; ++i) chars += (p[i] & 0xC0) != 0x80;
      if (chars > words->max_chars) return words->unk;
    }
    return words->find_h(h, nullptr, p, n);
  }

  void words_of(const uint8_t* w, long long n, gputok_rx::Out& out) {
    const uint8_t* f = t.flags;
    bool open = false;
    long long i = 0;
    while (i < n) {
      const uint8_t c = w[i];
      const uint8_t k = c < 0x80 ? kind[c] : K_GENERAL;
      if (k == K_SKIP) {
        ++i;
      } else if (k == K_WORD) {  // a run of word characters: one append
        if (!open) {
          out.start.push_back((uint32_t)out.bytes.size());
          out.spec.push_back(gputok_rx::NORMAL);
          open = true;
        }
        long long j = i + 1;
        while (j < n && w[j] < 0x80 && kind[w[j]] == K_WORD) ++j;
        const size_t at = out.bytes.size();  // (appended, then mapped in place: a resize
        out.bytes.append((const char*)w + i, (size_t)(j - i));  // zero-filled it first)
        if (t.opts & O_LOWER) {
          uint8_t* d = (uint8_t*)&out.bytes[at];
          for (long long q = 0; q < j - i; ++q) d[q] = out_byte[d[q]];
        }
        i = j;
      } else if (k != K_GENERAL) {
        put(out_byte[c], k == K_WS ? WS : k == K_PUNCT ? PUNCT : 0, open, out);
        ++i;
      } else {  // a run the ASCII table does not take: every step, character by character
        long long j = i;
        a.clear();
        while (j < n && (w[j] >= 0x80 || kind[w[j]] == K_GENERAL)) {
          int len;
          a.push_back(gputok_rx::decode(w, j, &len));
          j += len;
        }
        if (t.opts & O_NORMALIZE) normalize();
        for (const uint32_t cp : a) put(cp, f[cp], open, out);
        i = j;
      }
    }
  }
};

}  // namespace gputok_bert

// A model's word index: n entries (every vocabulary entry), entry k's bytes
// blob[off[k] .. off[k + 1]), its id ids[k]; the continuation prefix (plen bytes), the unk id
// and the character cap of a word.
extern "C" __attribute__((visibility("default"))) void* gputok_bert_words_new(
    const uint8_t* blob, const long long* off, const uint32_t* ids, long long n,
    const uint8_t* prefix, long long plen, uint32_t unk, unsigned long long max_chars) {
  gputok_bert::Words* w = new (std::nothrow) gputok_bert::Words();
  if (w == nullptr) return nullptr;
  try {
    w->blob.assign(blob, blob + off[n]);
    w->ids.assign(ids, ids + n);
    w->prefix.assign((const char*)prefix, (size_t)plen);
    w->unk = unk;
    w->max_chars = max_chars;
    w->prefix_state = gputok_bert::Words::feed(1469598103934665603ull, prefix, (size_t)plen);
    for (long long k = 0; k < n; ++k) {
      const size_t len = (size_t)(off[k + 1] - off[k]);
      w->max_first = std::max(w->max_first, len);
      if (len > (size_t)plen && std::memcmp(blob + off[k], prefix, (size_t)plen) == 0)
        w->max_cont = std::max(w->max_cont, len - (size_t)plen);
    }
    for (int k = 0; k < gputok_bert::MEMOS; ++k) w->memos.push_back(new gputok_bert::Memo());
    uint32_t size = 16;
    while (size < 2 * (uint64_t)n + 16) size <<= 1;  // load <= 1/2
    w->slot.assign(size, gputok_bert::Words::Slot{0, 0, 0, 0, 0});
    w->mask = size - 1;
    for (long long k = 0; k < n; ++k) {
      const size_t len = (size_t)(off[k + 1] - off[k]);
      if (len == 0 || len > 0xFFFFFFFFu || off[k] > 0xFFFFFFFFll) throw std::bad_alloc();
      const uint64_t h = gputok_bert::Words::hash(blob + off[k], len);
      uint32_t s = (uint32_t)h & w->mask;
      while (w->slot[s].len != 0) s = (s + 1) & w->mask;
      w->slot[s] = {gputok_bert::Words::head8(blob + off[k], len), (uint32_t)(h >> 32),
                    (uint32_t)len, (uint32_t)off[k], ids[k]};
    }
  } catch (...) {
    delete w;
    return nullptr;
  }
  return w;
}

extern "C" __attribute__((visibility("default"))) void gputok_bert_words_free(void* w) {
  delete static_cast<gputok_bert::Words*>(w);
}

// Cuts a chunk by BERT's steps (words: a whole-word index, or NULL); the result handle as
// gputok_rx_chunk's.
extern "C" __attribute__((visibility("default"))) void* gputok_bert_cut(
    const uint8_t* flags, const uint8_t* ccc, const uint32_t* nfd_keys, const long long* nfd_off,
    const uint32_t* nfd_vals, long long n_nfd, const uint32_t* lower1, const uint32_t* multi_keys,
    const long long* multi_off, const uint32_t* multi_vals, long long n_multi, int opts,
    const uint8_t* data, const long long* doc_off, long long n_docs, const long long* sp_start,
    const long long* sp_end, const uint32_t* sp_id, long long n_sp, int threads,
    const void* words) {
  const gputok_bert::Tables t{flags, ccc, nfd_keys, nfd_off, nfd_vals, n_nfd, lower1,
                              multi_keys, multi_off, multi_vals, n_multi, opts};
  const gputok_bert::Words* w = static_cast<const gputok_bert::Words*>(words);
  return gputok_rx_chunk([&t, w]() { return gputok_bert::Cutter(t, w); }, data, doc_off, n_docs,
                         sp_start, sp_end, sp_id, n_sp, threads);
}
