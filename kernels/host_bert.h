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

struct Cutter {
  const Tables& t;
  std::vector<uint32_t> a, b;
  std::string word;

  explicit Cutter(const Tables& tables) : t(tables) {}

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

  void cut(int, const uint8_t* w, long long n, gputok_rx::Out& out) {
    a.clear();
    for (long long i = 0; i < n;) {
      int len;
      a.push_back(gputok_rx::decode(w, i, &len));
      i += len;
    }
    if (t.opts & O_NORMALIZE) normalize();
    const uint8_t* f = t.flags;
    size_t i = 0;
    while (i < a.size()) {
      const uint8_t fi = f[a[i]];
      if (fi & WS) { ++i; continue; }  // (whitespace: a word of its own, dropped)
      size_t j = i + 1;
      if (!(fi & PUNCT))
        while (j < a.size() && !(f[a[j]] & (WS | PUNCT))) ++j;
      word.clear();
      for (size_t k = i; k < j; ++k) put_utf8(word, a[k]);
      out.piece((const uint8_t*)word.data(), (long long)word.size(), gputok_rx::NORMAL);
      i = j;
    }
  }
};

}  // namespace gputok_bert

// Cuts a chunk by BERT's steps; the result handle as gputok_rx_chunk's.
extern "C" __attribute__((visibility("default"))) void* gputok_bert_cut(
    const uint8_t* flags, const uint8_t* ccc, const uint32_t* nfd_keys, const long long* nfd_off,
    const uint32_t* nfd_vals, long long n_nfd, const uint32_t* lower1, const uint32_t* multi_keys,
    const long long* multi_off, const uint32_t* multi_vals, long long n_multi, int opts,
    const uint8_t* data, const long long* doc_off, long long n_docs, const long long* sp_start,
    const long long* sp_end, const uint32_t* sp_id, long long n_sp, int threads) {
  const gputok_bert::Tables t{flags, ccc, nfd_keys, nfd_off, nfd_vals, n_nfd, lower1,
                              multi_keys, multi_off, multi_vals, n_multi, opts};
  return gputok_rx_chunk([&t]() { return gputok_bert::Cutter(t); }, data, doc_off, n_docs,
                         sp_start, sp_end, sp_id, n_sp, threads);
}
