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
#if defined(__SSE2__) && !defined(GPUTOK_JSONL_SWAR)
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
      return false;
    }
    if (e - p <= k) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (long long j = 2; j <= k; ++j)
      if ((p[j] & 0xC0) != 0x80) return false;
    p += k + 1;
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
      return false;
    }
    if (e - p <= k) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (long long j = 2; j <= k; ++j)
      if ((p[j] & 0xC0) != 0x80) return false;
    p += k + 1;
    return true;
  }

  // Past the plain bytes of a string: up to a quote, a backslash or a control character (or
  // the end), checking the UTF-8 of what it passes (false: invalid UTF-8). This is the line's
  // only UTF-8 check: a byte >= 0x80 anywhere outside a string fails the JSON grammar itself,
  // so "invalid UTF-8 or not JSON" (both THE FALLBACK RULE) is decided in the one pass.
  // ASCII 16 bytes at a time with SSE2 (baseline on x86-64), else 8 with SWAR.
  // Performance: a separate valid_utf8 pass over each line before the parse (a third pass
  // after the memchr for the line's end) is what this replaces; see the measurements in
  // bench/bench_host.py's "jsonl reader" row.
  bool plain() {
    for (;;) {
#if defined(__SSE2__) && !defined(GPUTOK_JSONL_SWAR)
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
