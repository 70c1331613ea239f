// host_jsonl.h: the native reader of JSON lines (gputok/corpus/batches.py: read_batches with packed=True,
// for `gputok encode`). Host only: it is a translation unit of the native CPU device's library,
// not a kernel, and no GPU runs it.
//
// One call takes a block of whole lines and writes, for each line, the string field `key` of
// the line's object as UTF-8: byte for byte what the Python reader gets from json.loads(line)
// [key] and then packs (stages/pack.py: utf8_of, which turns each lone surrogate into U+FFFD).
// A line of ASCII whitespace only is blank (bytes.strip(), as the Python reader skips it).
//
// THE FALLBACK RULE: a line this reader cannot take on exactly stops it, and the Python reader
// takes that line (raising its error, or decoding it with errors="replace"), then this one goes
// on. Such lines: invalid UTF-8; anything json.loads rejects or that needs judgement here (not
// an object, no such field, a field that is not a string, a key with a lone surrogate escape,
// NaN / Infinity, a number of over 64 characters (Python's digit limit), nesting over 256
// levels (its recursion limit)). Being stricter than json.loads only ever costs speed, never a
// different result: whatever this reader accepts, json.loads accepts with the same string.
//
// json.loads' rules kept here: whitespace is space, tab, LF, CR only; control characters
// (< 0x20) inside strings are invalid; escapes \" \\ \/ \b \f \n \r \t \uXXXX (hex in either
// case); a high-surrogate escape directly followed by a low-surrogate escape is one character,
// any other surrogate escape stays alone (and becomes U+FFFD when packed); of duplicate keys the
// last one counts; nothing but whitespace may follow the object.
#include <cstring>
#if defined(__SSSE3__) && !defined(GPUTOK_JSONL_SWAR) && !defined(GPUTOK_JSONL_SSE2)
#define GPUTOK_JSONL_VALIDATE16 1
#include <tmmintrin.h>
#elif defined(__SSE2__) && !defined(GPUTOK_JSONL_SWAR)
#include <emmintrin.h>
#endif
#include <thread>
#include <vector>

namespace enc_jsonl {

enum { DOC = 0, BLANK = 1 };
enum { STOP_END = 0, STOP_FALLBACK = 1, STOP_FULL = 2 };
enum { MAX_DEPTH = 256, MAX_NUMBER = 64 };

struct Out {
  unsigned char* p;
  long long n;
};

inline void put_cp(Out& o, unsigned cp) {
  unsigned char* q = o.p + o.n;
  if (cp < 0x80) {
    q[0] = (unsigned char)cp;
    o.n += 1;
  } else if (cp < 0x800) {
    q[0] = (unsigned char)(0xC0 | (cp >> 6));
    q[1] = (unsigned char)(0x80 | (cp & 0x3F));
    o.n += 2;
  } else if (cp < 0x10000) {
    q[0] = (unsigned char)(0xE0 | (cp >> 12));
    q[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    q[2] = (unsigned char)(0x80 | (cp & 0x3F));
    o.n += 3;
  } else {
    q[0] = (unsigned char)(0xF0 | (cp >> 18));
    q[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    q[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    q[3] = (unsigned char)(0x80 | (cp & 0x3F));
    o.n += 4;
  }
}

// The strict UTF-8 sequence at p (p < e, *p >= 0x80): its length, 0 where it is not one
// (Python's decoder: no overlong forms, no encoded surrogates, nothing above U+10FFFF).
inline long long utf8_seq_len(const unsigned char* p, const unsigned char* e) {
  const unsigned c = *p;
  long long k;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    k = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    k = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (e - p <= k) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (long long j = 2; j <= k; ++j)
    if ((p[j] & 0xC0) != 0x80) return 0;
  return k + 1;
}

// Strict UTF-8 as Python's decoder takes it: no overlong forms, no encoded surrogates, nothing
// above U+10FFFF.
inline bool valid_utf8(const unsigned char* p, const unsigned char* e) {
  while (p < e) {
    while (e - p >= 8) {  // ASCII eight bytes at a time
      unsigned long long w;
      std::memcpy(&w, p, 8);
      if (w & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p >= e) break;
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    const long long n = utf8_seq_len(p, e);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

inline int hex_digit(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline bool hex4(const unsigned char* p, const unsigned char* e, unsigned* u) {
  if (e - p < 4) return false;
  unsigned v = 0;
  for (int k = 0; k < 4; ++k) {
    const int d = hex_digit(p[k]);
    if (d < 0) return false;
    v = (v << 4) | (unsigned)d;
  }
  *u = v;
  return true;
}

#if defined(GPUTOK_JSONL_VALIDATE16)
// The errors of 16 bytes of UTF-8 `w` after the 16 before them `prev` (non-zero: invalid), by
// table lookups on the nibbles of each byte and of the one before it (the published lookup
// method of Keiser and Lemire). A sequence that runs past w's end is not judged here: the
// caller's scalar check takes it (Line::plain backs up to its lead byte).
inline __m128i utf8_errors16(__m128i w, __m128i prev) {
  enum : unsigned char {
    TOO_SHORT = 1 << 0, TOO_LONG = 1 << 1, OVERLONG_3 = 1 << 2, TOO_LARGE = 1 << 3,
    SURROGATE = 1 << 4, OVERLONG_2 = 1 << 5, TOO_LARGE_1000 = 1 << 6, OVERLONG_4 = 1 << 6,
    TWO_CONTS = 1 << 7, CARRY = TOO_SHORT | TOO_LONG | TWO_CONTS
  };
  const __m128i nib = _mm_set1_epi8(0x0F);
  const __m128i prev1 = _mm_alignr_epi8(w, prev, 15);  // the byte before each byte
  const __m128i hi1 = _mm_shuffle_epi8(
      _mm_setr_epi8(TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG,
                    TOO_LONG, TWO_CONTS, TWO_CONTS, TWO_CONTS, TWO_CONTS,
                    TOO_SHORT | OVERLONG_2, TOO_SHORT, TOO_SHORT | OVERLONG_3 | SURROGATE,
                    TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4),
      _mm_and_si128(_mm_srli_epi16(prev1, 4), nib));
  const char big = CARRY | TOO_LARGE | TOO_LARGE_1000;
  const __m128i lo1 = _mm_shuffle_epi8(
      _mm_setr_epi8(CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4, CARRY | OVERLONG_2, CARRY,
                    CARRY, CARRY | TOO_LARGE, big, big, big, big, big, big, big, big,
                    (char)(big | SURROGATE), big, big),
      _mm_and_si128(prev1, nib));
  const char cont8 = TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4;
  const char cont9 = TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE;
  const char contab = TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE;
  const __m128i hi2 = _mm_shuffle_epi8(
      _mm_setr_epi8(TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT,
                    TOO_SHORT, cont8, cont9, contab, contab, TOO_SHORT, TOO_SHORT, TOO_SHORT,
                    TOO_SHORT),
      _mm_and_si128(_mm_srli_epi16(w, 4), nib));
  const __m128i special = _mm_and_si128(_mm_and_si128(hi1, lo1), hi2);
  // the second continuation byte of a 3- or 4-byte sequence, the third of a 4-byte one: these
  // must be continuation bytes (TWO_CONTS there is expected, not an error)
  const __m128i prev2 = _mm_alignr_epi8(w, prev, 14), prev3 = _mm_alignr_epi8(w, prev, 13);
  const __m128i third = _mm_subs_epu8(prev2, _mm_set1_epi8((char)(0xE0 - 1)));
  const __m128i fourth = _mm_subs_epu8(prev3, _mm_set1_epi8((char)(0xF0 - 1)));
  const __m128i must = _mm_cmpgt_epi8(_mm_or_si128(third, fourth), _mm_setzero_si128());
  // (cmpgt is signed: a saturated difference is at most 0x1F, never negative)
  return _mm_xor_si128(special, _mm_and_si128(must, _mm_set1_epi8((char)0x80)));
}
#endif

struct Line {
  const unsigned char* p;
  const unsigned char* e;

  void ws() {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  }

  // One UTF-8 sequence at p (*p >= 0x80), strictly as valid_utf8 takes it; false: invalid.
  // Its continuation bytes are all >= 0x80, so a sequence never hides a quote, a backslash or a
  // control character.
  bool utf8_seq() {
    const long long n = utf8_seq_len(p, e);
    if (n == 0) return false;
    p += n;
    return true;
  }

  // Past the plain bytes of a string: up to a quote, a backslash or a control character (or
  // the end), checking the UTF-8 of what it passes (false: invalid UTF-8). This is the line's
  // only UTF-8 check: a byte >= 0x80 anywhere outside a string fails the JSON grammar itself,
  // so "invalid UTF-8 or not JSON" (both THE FALLBACK RULE) is decided in the one pass.
  // ASCII 16 bytes at a time with SSE2 (baseline on x86-64), else 8 with SWAR; with SSSE3
  // (isa_flags: the library's on such CPUs) non-ASCII 16 at a time too (utf8_errors16).
  // Performance, the parse alone, GB/s on one core of a loaded 2-core x86-64 box (bench_host's
  // corpora): with a separate valid_utf8 pass before the parse, prose 1.31, multilingual 0.54,
  // the mixed 32 MB 0.85; fused with scalar sequences 2.07 / 0.81 / 1.32; the SSSE3 runs on top
  // (same run) multilingual +24%, mixed +13%, prose the same. The corpus job's reader
  // (read_batches, packed) went 0.6-0.7 -> 1.05 GB/s per core. Tried and dropped: a table
  // (lead byte -> length, range) in utf8_seq (multilingual 0.81 -> 0.68); scalar over short
  // ASCII gaps between non-ASCII (0.73); one SSSE3 loop for ASCII too (prose 2.0 -> 1.76: its
  // stop test is dearer than the signed compare), hence the ASCII loop first and the checking
  // one from the first non-ASCII byte; reusing the reader's output buffer instead of fresh
  // pages a block (+3%: the runs keep views of it, so it would need a pool; not done).
  bool plain() {
    for (;;) {
#if (defined(__SSE2__) || defined(GPUTOK_JSONL_VALIDATE16)) && !defined(GPUTOK_JSONL_SWAR)
      const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'),
                    space = _mm_set1_epi8(0x20);
      while (e - p >= 16) {
        const __m128i w = _mm_loadu_si128((const __m128i*)p);
        // signed w < 0x20: a control character, or a byte >= 0x80 (negative)
        const int hit = _mm_movemask_epi8(_mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, slash)),
            _mm_cmplt_epi8(w, space)));
        if (hit != 0) {
          p += __builtin_ctz((unsigned)hit);
          break;
        }
        p += 16;
      }
#if defined(GPUTOK_JSONL_VALIDATE16)
      // at non-ASCII with 16 bytes left: on 16 at a time, non-ASCII checked as it passes (a
      // loop of its own: the ASCII one above is the faster where there is only ASCII)
      if (e - p >= 16 && *p >= 0x80) {
        const __m128i ctl = _mm_set1_epi8(0x1F);
        const unsigned char* const from = p;
        __m128i prev = _mm_setzero_si128(), err = _mm_setzero_si128();
        bool wide = false;  // a byte >= 0x80 passed
        while (e - p >= 16) {
          const __m128i w = _mm_loadu_si128((const __m128i*)p);
          const int hit = _mm_movemask_epi8(_mm_or_si128(
              _mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, slash)),
              _mm_cmpeq_epi8(_mm_min_epu8(w, ctl), w)));  // w <= 0x1F
          if (hit != 0) {
            // ASCII up to the stop: straight to it (what came before must end there whole)
            const int j = __builtin_ctz((unsigned)hit);
            const unsigned below = (1u << j) - 1;
            if ((_mm_movemask_epi8(w) & below) == 0) {
              if (j > 0 && _mm_movemask_epi8(prev) != 0) {
                const __m128i ok = _mm_cmpeq_epi8(utf8_errors16(w, prev), _mm_setzero_si128());
                if ((~(unsigned)_mm_movemask_epi8(ok) & below) != 0) return false;
              }
              p += j;
            }
            break;
          }
          if (_mm_movemask_epi8(_mm_or_si128(w, prev)) != 0) {
            err = _mm_or_si128(err, utf8_errors16(w, prev));
            wide = true;
          }
          prev = w;
          p += 16;
        }
        if (wide) {
          if (_mm_movemask_epi8(_mm_cmpeq_epi8(err, _mm_setzero_si128())) != 0xFFFF) return false;
          // a sequence cut by where the vectors stopped: back to its lead byte (the scalar
          // check below takes it whole)
          for (int back = 1; back <= 3 && p - back >= from; ++back) {
            const unsigned c = p[-back];
            if (c < 0x80) break;
            if (c >= 0xC0) {
              if (back < (c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2)) p -= back;
              break;
            }
          }
        }
      }
#endif
#else
      const unsigned long long ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
      while (e - p >= 8) {
        unsigned long long w;
        std::memcpy(&w, p, 8);
        const unsigned long long q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        // a byte of zero in q or b, a byte below 0x20 in w (exact for any byte: the high bit
        // of w masks the borrows of bytes >= 0x80), or a byte >= 0x80
        const unsigned long long hit =
            ((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w) | w;
        if (hit & highs) break;
        p += 8;
      }
#endif
      while (p < e && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) ++p;
      if (p >= e || *p < 0x80) return true;
      // non-ASCII: its sequences one by one while they last (a run of CJK, emoji, ...)
      do {
        if (!utf8_seq()) return false;
      } while (p < e && *p >= 0x80);
    }
  }

  // A string at p (*p == '"'), decoded into `out` when given (which has room: a string never
  // decodes longer than it is written); `lone`: a surrogate escape was left alone.
  bool string(Out* out, bool* lone) {
    ++p;
    for (;;) {
      const unsigned char* s = p;
      if (!plain()) return false;  // invalid UTF-8
      if (out != nullptr) {
        std::memcpy(out->p + out->n, s, (size_t)(p - s));
        out->n += p - s;
      }
      if (p >= e || *p < 0x20) return false;  // unterminated, or a control character
      if (*p++ == '"') return true;
      if (p >= e) return false;
      unsigned cp;
      switch (*p++) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = 0x08; break;
        case 'f': cp = 0x0C; break;
        case 'n': cp = 0x0A; break;
        case 'r': cp = 0x0D; break;
        case 't': cp = 0x09; break;
        case 'u': {
          if (!hex4(p, e, &cp)) return false;
          p += 4;
          unsigned low;
          if (cp >= 0xD800 && cp <= 0xDBFF && e - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
              hex4(p + 2, e, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            p += 6;
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) {
            *lone = true;
            cp = 0xFFFD;
          }
          break;
        }
        default:
          return false;
      }
      if (out != nullptr) put_cp(*out, cp);
    }
  }

  bool literal(const char* word, int n) {
    if (e - p < n || std::memcmp(p, word, (size_t)n) != 0) return false;
    p += n;
    return true;
  }

  bool digits() {
    const unsigned char* s = p;
    while (p < e && *p >= '0' && *p <= '9') ++p;
    return p > s;
  }

  bool number() {
    const unsigned char* s = p;
    if (*p == '-') ++p;
    if (p >= e) return false;
    if (*p == '0') {
      ++p;
    } else if (!digits()) {
      return false;  // (-Infinity: the Python reader's)
    }
    if (p < e && *p == '.') {
      ++p;
      if (!digits()) return false;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < e && (*p == '+' || *p == '-')) ++p;
      if (!digits()) return false;
    }
    return p - s <= MAX_NUMBER;
  }

  // Any value (validated, not kept).
  bool value(int depth) {
    if (p >= e) return false;
    bool lone = false;
    switch (*p) {
      case '"':
        return string(nullptr, &lone);
      case 't':
        return literal("true", 4);
      case 'f':
        return literal("false", 5);
      case 'n':
        return literal("null", 4);
      case '{':
      case '[': {
        if (depth >= MAX_DEPTH) return false;
        const unsigned char close = *p == '{' ? '}' : ']';
        const bool object = close == '}';
        ++p;
        ws();
        if (p < e && *p == close) {
          ++p;
          return true;
        }
        for (;;) {
          if (object) {
            if (p >= e || *p != '"' || !string(nullptr, &lone)) return false;
            ws();
            if (p >= e || *p++ != ':') return false;
            ws();
          }
          if (!value(depth + 1)) return false;
          ws();
          if (p >= e) return false;
          const unsigned char c = *p++;
          if (c == close) return true;
          if (c != ',') return false;
          ws();
        }
      }
      default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) return number();
        return false;
    }
  }
};

// One line (without its newline) into out at out->n: DOC (the field's text appended), BLANK,
// or -1 (THE FALLBACK RULE; out->n unchanged).
inline int parse_line(const unsigned char* p, const unsigned char* e, const unsigned char* key,
                      long long key_len, Out* out, std::vector<unsigned char>& key_buf) {
  const unsigned char* q = p;
  while (q < e && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r' || *q == 0x0B ||
                   *q == 0x0C))
    ++q;
  if (q == e) return BLANK;
  // (no UTF-8 pass here: Line::plain checks it inside strings, the grammar outside them)
  const long long start = out->n;
  Line ln{p, e};
  ln.ws();
  if (ln.p >= e || *ln.p != '{') return -1;
  ++ln.p;
  ln.ws();
  bool found = false, is_str = false;
  if (ln.p < e && *ln.p == '}') {
    ++ln.p;
  } else {
    for (;;) {
      if (ln.p >= e || *ln.p != '"') return out->n = start, -1;
      if (key_buf.size() < (size_t)(e - ln.p)) key_buf.resize((size_t)(e - ln.p));
      Out k{key_buf.data(), 0};
      bool lone = false;
      if (!ln.string(&k, &lone) || lone) return out->n = start, -1;
      ln.ws();
      if (ln.p >= e || *ln.p++ != ':') return out->n = start, -1;
      ln.ws();
      if (k.n == key_len && std::memcmp(k.p, key, (size_t)key_len) == 0) {
        found = true;
        is_str = ln.p < e && *ln.p == '"';
        out->n = start;  // a later duplicate replaces an earlier one
        bool lone_v = false;
        if (is_str ? !ln.string(out, &lone_v) : !ln.value(1)) return out->n = start, -1;
      } else if (!ln.value(1)) {
        return out->n = start, -1;
      }
      ln.ws();
      if (ln.p >= e) return out->n = start, -1;
      const unsigned char c = *ln.p++;
      if (c == '}') break;
      if (c != ',') return out->n = start, -1;
      ln.ws();
    }
  }
  ln.ws();
  if (ln.p != e || !found || !is_str) return out->n = start, -1;
  return DOC;
}

}  // namespace enc_jsonl

// Parses the lines of data[0 .. n) (each ends with '\n', except a last one at the end of the
// input) until a line THE FALLBACK RULE leaves to Python, `max_lines` lines, or the end. Line k
// gets status[k] (DOC or BLANK), line_end[k] (the offset in data after its newline) and
// doc_end[k] (the bytes written to out so far). out needs room for n bytes. res: lines parsed,
// bytes written, why it stopped (STOP_END, STOP_FALLBACK: line res[0] is Python's, STOP_FULL).
ENC_HOST_EXPORT void gputok_jsonl_parse(const unsigned char* data, long long n,
                                        const unsigned char* key, long long key_len,
                                        unsigned char* out, unsigned char* status,
                                        long long* line_end, long long* doc_end,
                                        long long max_lines, long long* res) {
  using namespace enc_jsonl;
  Out o{out, 0};
  std::vector<unsigned char> key_buf(64);
  long long pos = 0, k = 0;
  res[2] = STOP_END;
  while (pos < n) {
    if (k >= max_lines) {
      res[2] = STOP_FULL;
      break;
    }
    const void* nl = std::memchr(data + pos, '\n', (size_t)(n - pos));
    const long long end = nl ? (const unsigned char*)nl - data + 1 : n;
    const int got = parse_line(data + pos, data + end, key, key_len, &o, key_buf);
    if (got < 0) {
      res[2] = STOP_FALLBACK;
      break;
    }
    status[k] = (unsigned char)got;
    line_end[k] = end;
    doc_end[k] = o.n;
    ++k;
    pos = end;
  }
  res[0] = k;
  res[1] = o.n;
}

// Whether data[0 .. n) is strict UTF-8 (valid_utf8: what Python's decoder accepts), checked in
// up to `threads` parts of 4 MB or more side by side. A part starts at a byte that is not a
// continuation byte (at most three steps past an even cut; four continuation bytes in a row
// are invalid anyway, and the part that starts with one says so), so each part is valid on
// its own exactly when the text is valid there.
ENC_HOST_EXPORT int gputok_utf8_valid(const unsigned char* data, long long n, int threads) {
  using namespace enc_jsonl;
  const long long least = 4ll << 20;
  long long parts = (n + least - 1) / least;
  if (parts > threads) parts = threads;
  if (parts <= 1) return valid_utf8(data, data + n) ? 1 : 0;
  std::vector<long long> cut((size_t)parts + 1);
  cut[0] = 0;
  cut[(size_t)parts] = n;
  for (long long k = 1; k < parts; ++k) {
    long long c = n / parts * k;
    for (int step = 0; step < 3 && c < n && (data[c] & 0xC0) == 0x80; ++step) ++c;
    cut[(size_t)k] = c < cut[(size_t)k - 1] ? cut[(size_t)k - 1] : c;
  }
  std::vector<unsigned char> ok((size_t)parts, 0);
  std::vector<std::thread> helpers;
  for (long long k = 1; k < parts; ++k)
    helpers.emplace_back([&, k] {
      ok[(size_t)k] = valid_utf8(data + cut[(size_t)k], data + cut[(size_t)k + 1]) ? 1 : 0;
    });
  ok[0] = valid_utf8(data, data + cut[1]) ? 1 : 0;
  for (auto& h : helpers) h.join();
  for (long long k = 0; k < parts; ++k)
    if (!ok[(size_t)k]) return 0;
  return 1;
}
