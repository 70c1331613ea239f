// host_train_spm.h: host only. SentencePiece BPE training's rules for the merge loop of
// host_train_merge.h (gputok/train/spm.py; cpu_ref/spm_train.py states them, rules 5-9):
// which pairs may become pieces (THE SPM PIECE RULE, sentencepiece's IsValidSentencePiece) and
// which candidate is best (THE SPM COMPARATOR).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace train_spm {

enum : uint8_t { DECIMAL = 1, WS = 2, FORBIDDEN = 4 };
constexpr int32_t ANY = -1;        // matches every script
constexpr int32_t INHERITED = -2;  // takes the script before it

// A character's class: its script (Hiragana, Katakana and U+30FC already folded into Han by
// the caller) and flags: a decimal digit (0-9, U+FF10-U+FF19), the whitespace mark U+2581, or
// a character no piece may hold (U+0000, U+001F, U+0020, U+2585).
struct CharInfo {
  int32_t script;
  uint8_t flags;
};

struct Rules {
  int max_len = 16;
  bool split_by_unicode_script = true, split_by_number = true, split_by_whitespace = true,
       split_digits = false, ws_suffix = false, allow_ws_only = false;
  std::unordered_map<uint32_t, CharInfo> info;  // every character of the corpus

  // The classes of a piece's characters (a character not in `info` is FORBIDDEN).
  void classes(const std::string& s, std::vector<CharInfo>* out) const {
    std::u32string cps;
    decode(s, &cps);
    out->clear();
    for (char32_t c : cps) {
      const auto it = info.find(c);
      out->push_back(it == info.end() ? CharInfo{ANY, FORBIDDEN} : it->second);
    }
  }

  static void decode(const std::string& s, std::u32string* out) {
    out->clear();
    for (size_t i = 0; i < s.size();) {
      const unsigned char b = (unsigned char)s[i];
      const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      uint32_t c = n == 1 ? b : b & (0x7F >> n);
      for (int k = 1; k < n && i + k < s.size(); ++k) c = c << 6 | ((unsigned char)s[i + k] & 0x3F);
      out->push_back(c);
      i += n;
    }
  }

  // THE SPM PIECE RULE (cpu_ref/spm_train.py, rule 9), on the classes of a piece's n
  // characters (the merge loop keeps each symbol's: no decoding, no lookup per pair)
  bool valid(const CharInfo* cs, size_t n) const {
    if (n == 0 || n > (size_t)max_len) return false;
    bool all_ws = true;
    for (size_t pos = 0; pos < n; ++pos) all_ws = all_ws && (cs[pos].flags & WS);
    int32_t prev = ANY;
    for (size_t pos = 0; pos < n; ++pos) {
      const CharInfo ci = cs[pos];
      if (ci.flags & FORBIDDEN) return false;
      if (ci.flags & WS) {
        if (!allow_ws_only || !all_ws) {
          const bool last = pos == n - 1;
          if (ws_suffix) {
            if ((split_by_whitespace && !last) || (!split_by_whitespace && !last && pos == 0))
              return false;
          } else if ((split_by_whitespace && pos > 0) ||
                     (!split_by_whitespace && pos > 0 && last)) {
            return false;
          }
        }
        continue;
      }
      int32_t s = ci.script == INHERITED ? prev : ci.script;
      if (!split_by_number && (ci.flags & DECIMAL)) s = ANY;
      if (split_digits && (ci.flags & DECIMAL) && n > 1) return false;
      if (split_by_unicode_script && s != ANY && prev != ANY && prev != s) return false;
      prev = s;
    }
    return true;
  }
};

// THE SPM COMPARATOR (cpu_ref/spm_train.py, rule 7): a higher count; on equal counts fewer
// characters; then the smaller piece as bytes; then (two derivations of one piece, which
// sentencepiece leaves to its heap) the smaller pair key. True when (c1, l1, a1 + b1, k1) is
// worse than (c2, l2, a2 + b2, k2).
inline bool worse(int64_t c1, uint32_t l1, const std::string& a1, const std::string& b1,
                  uint64_t k1, int64_t c2, uint32_t l2, const std::string& a2,
                  const std::string& b2, uint64_t k2) {
  if (c1 != c2) return c1 < c2;
  if (l1 != l2) return l1 > l2;
  // compare a1 + b1 with a2 + b2 without building them
  size_t i = 0;
  const size_t n1 = a1.size() + b1.size(), n2 = a2.size() + b2.size();
  for (; i < n1 && i < n2; ++i) {
    const unsigned char x = i < a1.size() ? a1[i] : b1[i - a1.size()];
    const unsigned char y = i < a2.size() ? a2[i] : b2[i - a2.size()];
    if (x != y) return x > y;
  }
  if (n1 != n2) return n1 > n2;
  return k1 > k2;
}

}  // namespace train_spm
