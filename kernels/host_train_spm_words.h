// host_train_spm_words.h: host only. SentencePiece training's words (cpu_ref/spm_train.py rules
// 1, 2 and 4; gputok/train/spm_words.py drives it) on every core, into the word counter of
// host_train_words.h (the same Local tables, shards and THE PRUNE RULE).
//
// Per sentence of a batch (UTF-8, back to back):
//   rule 1   a sentence that is empty, holds U+2585 (the trainer's unknown mark) or is longer
//            than max_sentence_length bytes is skipped;
//   rule 2   THE SPM NORMALISER, the encoder's (host_train_norm.h's export, the model's
//            charsmap and flags); an empty result is skipped; then each meta piece (the
//            caller's keys, longest first at each position, left to right, not overlapping)
//            becomes U+001F;
//   rule 4   SplitIntoWords: a word boundary at position j between characters a and b, by the
//            settings: before each "▁" (the default), before a "▁" after a non-"▁"
//            (allow_whitespace_only_pieces), after each "▁" (treat_whitespace_as_suffix), before
//            a non-"▁" after a "▁" (both).
// A worker normalises its sentences into its own buffer (words are counted as offsets into it,
// as host_train_words.h counts offsets into the batch) and moves its table into the shared one
// at the end of the batch.
//
// Performance notes: the normaliser walks the charsmap trie from every position (most Latin
// letters start some key of nmt_nfkc), ~2/3 of a worker's time on prose; the split and the
// table the rest. The buffer holds a worker's normalised share of the batch (~ its bytes).

extern "C" long long gputok_native_spm_normalize(const unsigned* units, unsigned n_units,
                                                 const unsigned char* strings, unsigned n_strings,
                                                 unsigned flags, const unsigned char* buf,
                                                 long long n, unsigned char* out, long long cap);

namespace train_words {

// the split settings (gputok/train/spm_words.py passes them)
constexpr int SPM_SPLIT_SUFFIX = 1;   // treat_whitespace_as_suffix
constexpr int SPM_SPLIT_WS_ONLY = 2;  // allow_whitespace_only_pieces

struct SpmWordsArgs {
  const unsigned* units;
  unsigned n_units;
  const uint8_t* strings;
  unsigned n_strings;
  unsigned norm_flags;
  const uint8_t* keys;      // meta pieces, longest first, back to back
  const int64_t* key_off;   // n_keys + 1
  int64_t n_keys;
  int64_t max_len;          // max_sentence_length, in bytes
  int split;                // SPM_SPLIT_*
};

inline bool is_space_at(const uint8_t* p, size_t i, size_t n) {  // "▁" = E2 96 81
  return i + 3 <= n && p[i] == 0xE2 && p[i + 1] == 0x96 && p[i + 2] == 0x81;
}

inline size_t utf8_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// The meta pieces of t[0 .. n) turned into U+001F in place (a key is never empty, so the text
// only shrinks); returns the new length. `first` marks the keys' first bytes.
inline size_t replace_meta(const SpmWordsArgs& a, const bool* first, uint8_t* t, size_t n) {
  size_t r = 0, w = 0;
  while (r < n) {
    if (first[t[r]]) {
      int64_t hit = -1;
      for (int64_t k = 0; k < a.n_keys; ++k) {
        const size_t len = (size_t)(a.key_off[k + 1] - a.key_off[k]);
        if (len <= n - r && std::memcmp(t + r, a.keys + a.key_off[k], len) == 0) {
          hit = k;
          break;
        }
      }
      if (hit >= 0) {
        t[w++] = 0x1F;
        r += (size_t)(a.key_off[hit + 1] - a.key_off[hit]);
        continue;
      }
    }
    t[w++] = t[r++];
  }
  return w;
}

// One worker's sentences: normalised into `text` (words counted into `local` as offsets).
struct SpmWorker {
  std::vector<uint8_t> text;
  size_t used = 0;
  Local local;

  uint8_t* room(size_t need) {  // at least `need` bytes free after `used` (+ 8 for loads)
    if (used + need + 8 > text.size()) {
      text.resize(std::max(text.size() * 2, used + need + 8 + (1 << 16)));
      local.base = text.data();
    }
    return text.data() + used;
  }

  int64_t sentence(const SpmWordsArgs& a, const bool* first, const uint8_t* s, size_t n) {
    size_t cap = 4 * n + 64;
    long long len = gputok_native_spm_normalize(a.units, a.n_units, a.strings, a.n_strings,
                                                a.norm_flags, s, (long long)n, room(cap),
                                                (long long)cap);
    if ((size_t)len > cap) {  // a rule that grows the text more than 4 times
      cap = (size_t)len;
      gputok_native_spm_normalize(a.units, a.n_units, a.strings, a.n_strings, a.norm_flags, s,
                                  (long long)n, room(cap), (long long)cap);
    }
    if (len <= 0) return 0;
    uint8_t* t = text.data() + used;
    size_t m = a.n_keys ? replace_meta(a, first, t, (size_t)len) : (size_t)len;
    local.end = text.data() + used + m;
    // rule 4: cut at the boundaries (see the file's head)
    const bool suffix = (a.split & SPM_SPLIT_SUFFIX) != 0;
    const bool ws_only = (a.split & SPM_SPLIT_WS_ONLY) != 0;
    int64_t words = 0;
    size_t start = 0;
    bool prev_space = false;
    for (size_t i = 0; i < m;) {
      const bool sp = is_space_at(t, i, m);
      if (i > 0) {
        const bool cut =
            suffix ? (prev_space && !(ws_only && sp)) : (sp && !(ws_only && prev_space));
        if (cut) {
          local.add(t + start, (uint32_t)(i - start));
          ++words;
          start = i;
        }
      }
      prev_space = sp;
      i += sp ? 3 : utf8_len(t[i]);
    }
    local.add(t + start, (uint32_t)(m - start));
    used += m;
    return words + 1;
  }
};

}  // namespace train_words

// Count SentencePiece training's words of sentences buf[off[d] .. off[d + 1] - sep) for
// d < n_docs (each sentence followed by `sep` bytes that are not part of it; a batch < 4 GB).
// The charsmap (units, strings; n_units 0: identity) and the normaliser's flags are the
// encoder's (gputok/stages/spm_tables.py); keys: the meta pieces, longest first. Returns 0, or
// -1 when memory ran out (the counter is then unusable).
TRAIN_EXPORT int gputok_train_words_add_spm(void* ctx, const unsigned char* buf,
                                            const long long* off, long long n_docs, int sep,
                                            const unsigned* units, unsigned n_units,
                                            const unsigned char* strings, unsigned n_strings,
                                            unsigned norm_flags, const unsigned char* keys,
                                            const long long* key_off, long long n_keys,
                                            long long max_len, int split) {
  using namespace train_words;
  Counter& c = *static_cast<Counter*>(ctx);
  const SpmWordsArgs a{units, n_units, strings, n_strings, norm_flags, keys,
                       (const int64_t*)key_off, n_keys, max_len, split};
  bool first[256] = {};
  for (long long k = 0; k < n_keys; ++k)
    if (key_off[k + 1] > key_off[k]) first[keys[key_off[k]]] = true;
  std::vector<int64_t> cuts{0};  // ranges of whole sentences of about TRAIN_RANGE_BYTES
  for (int64_t d = 0; d < n_docs; ++d)
    if (off[d + 1] - off[cuts.back()] >= TRAIN_RANGE_BYTES) cuts.push_back(d + 1);
  if (cuts.back() != n_docs) cuts.push_back(n_docs);
  const int64_t n_ranges = (int64_t)cuts.size() - 1;
  if (n_ranges <= 0) return 0;
  std::atomic<int64_t> next{0}, pieces{0};
  std::atomic<int> failed{0};
  auto work = [&](int t) {
    try {
      SpmWorker w;
      int64_t mine = 0;
      for (int64_t r; (r = next.fetch_add(1)) < n_ranges;) {
        for (int64_t d = cuts[r]; d < cuts[r + 1]; ++d) {
          const uint8_t* s = buf + off[d];
          const int64_t n = off[d + 1] - off[d] - sep;
          if (n <= 0 || n > a.max_len) continue;  // rule 1
          bool unk = false;  // U+2585 = E2 96 85
          for (const uint8_t* p = s;
               (p = (const uint8_t*)std::memchr(p, 0xE2, (size_t)(s + n - p))); ++p)
            if (p + 2 < s + n && p[1] == 0x96 && p[2] == 0x85) {
              unk = true;
              break;
            }
          if (!unk) mine += w.sentence(a, first, s, (size_t)n);
        }
      }
      pieces += mine;
      flush(c, w.local, t * (N_SHARDS / 8));
    } catch (const std::exception&) {
      failed = 1;
    }
  };
  return run_and_prune(c, n_ranges, work, pieces, failed);
}
