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
#include <new>

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
// itself a vocabulary entry (and short enough: the table holds only entries of at most
// max_input_chars_per_word characters) is that one id - the longest match from its start is the
// whole word, and nothing is left. Open addressing over the entries' bytes (FNV-1a), built once
// per model (gputok_bert_words_new); the cut gives such a word as a resolved entry (its id as
// the spec, as a special token's), so the kernel's trie walk is only for the others.
struct Words {
  std::vector<uint8_t> blob;
  std::vector<long long> off;
  std::vector<uint32_t> ids, slot;  // slot: entry index + 1 (0: empty)
  uint32_t mask = 0;

  static uint64_t hash(const uint8_t* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  uint32_t find(const uint8_t* p, size_t n) const {
    for (uint32_t s = (uint32_t)hash(p, n) & mask;; s = (s + 1) & mask) {
      const uint32_t e = slot[s];
      if (e == 0) return gputok_rx::NORMAL;
      const long long a = off[e - 1], len = off[e] - a;
      if ((size_t)len == n && std::memcmp(blob.data() + a, p, n) == 0) return ids[e - 1];
    }
  }
};

// What an ASCII character becomes through every step (Cutter's table): gone, whitespace,
// punctuation, a letter of a word, or K_GENERAL where a step does more than map it to one ASCII
// character (then it goes the general way, with the run of characters around it).
enum { K_SKIP, K_WS, K_PUNCT, K_WORD, K_GENERAL };

struct Cutter {
  const Tables& t;
  const Words* words;
  std::vector<uint32_t> a, b;
  uint8_t kind[128], out_byte[128];

  // The steps are per character but for the canonical order of a run of marks (no ASCII
  // character has a class), so an ASCII character that every step maps to one ASCII character
  // is cut by a table, and the runs between them go the general way on their own.
  Cutter(const Tables& tables, const Words* w) : t(tables), words(w) {
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
    words_of(w, n, out);
    if (words == nullptr) return;
    const size_t last = out.start.size();
    const uint8_t* bytes = (const uint8_t*)out.bytes.data();
    for (size_t k = first; k < last; ++k) {  // THE WHOLE-WORD LOOKUP
      const size_t a0 = out.start[k], a1 = k + 1 < last ? out.start[k + 1] : out.bytes.size();
      out.spec[k] = words->find(bytes + a0, a1 - a0);
    }
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

// A model's whole-word index: n entries, entry k's bytes blob[off[k] .. off[k + 1]), its id ids[k].
extern "C" __attribute__((visibility("default"))) void* gputok_bert_words_new(
    const uint8_t* blob, const long long* off, const uint32_t* ids, long long n) {
  gputok_bert::Words* w = new (std::nothrow) gputok_bert::Words();
  if (w == nullptr) return nullptr;
  try {
    w->blob.assign(blob, blob + off[n]);
    w->off.assign(off, off + n + 1);
    w->ids.assign(ids, ids + n);
    uint32_t size = 16;
    while (size < 2 * (uint64_t)n + 16) size <<= 1;  // load <= 1/2
    w->slot.assign(size, 0u);
    w->mask = size - 1;
    for (long long k = 0; k < n; ++k) {
      uint32_t s = (uint32_t)gputok_bert::Words::hash(blob + off[k], (size_t)(off[k + 1] - off[k]))
                   & w->mask;
      while (w->slot[s] != 0) s = (s + 1) & w->mask;
      w->slot[s] = (uint32_t)k + 1;
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
