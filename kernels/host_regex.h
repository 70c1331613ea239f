// host_regex.h: the native pattern matcher: a pre-tokenizer's steps (``PretokSpec``) cut on the
// host's cores, for a pattern no vectorised scanner knows (DeepSeek's sequences, the GGUF
// families, a vocabulary trained with a pattern of its own). The program comes from
// gputok/stages/pattern_program.py (its docstring lists the instructions); the rule it follows is
// Python ``regex``'s on the pinned pattern: leftmost-first, greedy-first backtracking, the
// matches of each step taken over every piece of the step before (``Pretokenizer._steps``).
//
// gputok_pretok_program: a chunk of documents (UTF-8, valid: the caller packed it) with its
// special-token spans -> the pieces as entries_from_split (gputok/backends/hostplan.py) gives
// them: the pieces' bytes in order, each piece's start, its spec (NORMAL, or the token's id) and
// each document's first entry. Documents are cut on the library's threads, each into its own
// buffers, then joined.
//
// Performance notes: a class test is the class's 128-bit ASCII map or a binary search of its
// ranges; each thread keeps one backtracking stack for all its matches.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gputok_rx {

enum { CHAR, CLASS, ANY, ANYNL, SPLIT, JMP, MATCH, LOOK, ATOMIC, ASSERT };
enum { A_BEGIN, A_END, A_BOL, A_EOL };
enum { LOOK_BEHIND = 1, LOOK_NEG = 2 };
enum { SPLIT_STEP = 0, PREFIX_STEP = 1 };
static const uint32_t NORMAL = 0xFFFFFFFFu;

struct Prog {
  const int32_t* code;
  const int32_t* steps;  // [n_steps][3]: kind, entry, keep gaps
  int n_steps;
  const long long* class_off;
  const uint32_t* ranges;  // pairs
  const uint32_t* ascii;   // [classes][4]
};

// the code point at p[i] (valid UTF-8) and its length
static inline uint32_t decode(const uint8_t* p, long long i, int* len) {
  const uint32_t b = p[i];
  if (b < 0x80) { *len = 1; return b; }
  if (b < 0xE0) { *len = 2; return ((b & 0x1F) << 6) | (p[i + 1] & 0x3F); }
  if (b < 0xF0) {
    *len = 3;
    return ((b & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
  }
  *len = 4;
  return ((b & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) |
         (p[i + 3] & 0x3F);
}

static inline bool in_class(const Prog& g, int k, uint32_t cp) {
  if (cp < 128) return (g.ascii[4 * k + (cp >> 5)] >> (cp & 31)) & 1u;
  long long lo = g.class_off[k], hi = g.class_off[k + 1];  // ranges [lo, hi): pairs
  while (lo < hi) {
    const long long mid = (lo + hi) >> 1;
    if (g.ranges[2 * mid + 1] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < g.class_off[k + 1] && g.ranges[2 * lo] <= cp;
}

struct Matcher {
  const Prog& g;
  const uint8_t* s;
  long long n;
  std::vector<long long> stack;  // (pc, pos) pairs

  Matcher(const Prog& prog) : g(prog), s(nullptr), n(0) {}

  // the end of the first match of the sub-program at `pc` from `pos`, or -1; a match ending
  // before `min_end` is no match (the search's "must advance" after an empty match)
  long long run(int pc, long long pos, long long min_end = -1) {
    const size_t base = stack.size();
    const int32_t* code = g.code;
    for (;;) {
      bool ok = true;
      switch (code[pc]) {
        case CHAR: {
          int len;
          if (pos < n && decode(s, pos, &len) == (uint32_t)code[pc + 1]) { pos += len; pc += 2; }
          else ok = false;
          break;
        }
        case CLASS: {
          int len;
          if (pos < n && in_class(g, code[pc + 1], decode(s, pos, &len))) { pos += len; pc += 2; }
          else ok = false;
          break;
        }
        case ANY:
        case ANYNL: {
          int len;
          if (pos < n && (code[pc] == ANYNL || decode(s, pos, &len) != '\n')) {
            decode(s, pos, &len);
            pos += len;
            pc += 1;
          } else {
            ok = false;
          }
          break;
        }
        case SPLIT:
          stack.push_back(code[pc + 2]);
          stack.push_back(pos);
          pc = code[pc + 1];
          break;
        case JMP:
          pc = code[pc + 1];
          break;
        case MATCH:
          if (pos < min_end) { ok = false; break; }
          stack.resize(base);
          return pos;
        case LOOK: {
          const int flags = code[pc + 1];
          long long at = pos;
          bool found;
          if (flags & LOOK_BEHIND) {
            int back = code[pc + 3];
            while (back > 0 && at > 0) {
              --at;
              while (at > 0 && (s[at] & 0xC0) == 0x80) --at;
              --back;
            }
            found = back == 0 && run(code[pc + 2], at) == pos;
          } else {
            found = run(code[pc + 2], at) >= 0;
          }
          if (found != ((flags & LOOK_NEG) != 0)) pc = code[pc + 4];
          else ok = false;
          break;
        }
        case ATOMIC: {
          const long long end = run(code[pc + 1], pos);
          if (end >= 0) { pos = end; pc = code[pc + 2]; }
          else ok = false;
          break;
        }
        case ASSERT: {
          const int kind = code[pc + 1];
          ok = kind == A_BEGIN || kind == A_BOL ? pos == 0
             : kind == A_END ? pos == n
             : (pos == n || (pos == n - 1 && s[pos] == '\n'));
          if (ok) pc += 2;
          break;
        }
        default:
          stack.resize(base);
          return -1;
      }
      if (!ok) {
        if (stack.size() == base) return -1;
        pos = stack.back();
        stack.pop_back();
        pc = (int)stack.back();
        stack.pop_back();
      }
    }
  }
};

// What one thread writes: pieces' bytes, starts (in `bytes`), specs; and per document the
// number of entries.
struct Out {
  std::string bytes;
  std::vector<uint32_t> start;
  std::vector<uint32_t> spec;
  void piece(const uint8_t* p, long long n, uint32_t sp) {
    start.push_back((uint32_t)bytes.size());
    spec.push_back(sp);
    bytes.append((const char*)p, (size_t)n);
  }
};

struct Cutter {
  const Prog& g;
  Matcher m;

  Cutter(const Prog& prog) : g(prog), m(prog) {}

  // One word through the steps from `step` on (an empty word is a word: a findall step makes
  // them where its pattern matches empty text, and a prefix step gives it its space; an empty
  // piece at the end is dropped, as the host's entries drop it).
  void cut(int step, const uint8_t* w, long long n, Out& out) {
    if (step == g.n_steps) {
      if (n > 0) out.piece(w, n, NORMAL);
      return;
    }
    const int32_t* st = g.steps + 3 * step;
    if (st[0] == PREFIX_STEP) {
      if (n > 0 && w[0] == ' ') return cut(step + 1, w, n, out);
      std::string t(1, ' ');  // (the piece with its prefix space: its own copy)
      t.append((const char*)w, (size_t)n);
      return cut(step + 1, (const uint8_t*)t.data(), (long long)t.size(), out);
    }
    const int entry = st[1];
    const bool keep_gaps = st[2] != 0;
    // the matches, as Python's finditer finds them: the leftmost from the search position; after
    // an empty match the next one may not be empty at that same position (must advance)
    long long from = 0, gap = 0;
    bool advance = false;
    while (from <= n) {
      long long at = from, end = -1;
      for (;;) {
        m.s = w;  // (a deeper step's search set them to its own word)
        m.n = n;
        end = m.run(entry, at, advance && at == from ? at + 1 : -1);
        if (end >= 0 || at >= n) break;
        int len;
        decode(w, at, &len);
        at += len;
      }
      if (end < 0) break;
      if (keep_gaps) {  // (HF "isolated": gaps are pieces, empty matches only cut)
        if (at > gap) cut(step + 1, w + gap, at - gap, out);
        if (end > at) cut(step + 1, w + at, end - at, out);
        gap = end;
      } else {
        cut(step + 1, w + at, end - at, out);
      }
      advance = end == at;
      from = end;
    }
    if (keep_gaps && n > gap) cut(step + 1, w + gap, n - gap, out);
  }
};

}  // namespace gputok_rx

// Cut documents d0..d1 (their bytes data[doc_off[d] .. doc_off[d + 1]), with the special-token
// spans sp_* inside them, sorted, from span k on) into `out` with `c.cut(0, text, n, out)` per
// stretch of text between spans; doc_n[d - d0] = the entries of document d.
template <class C>
static void gputok_rx_cut_docs(C& c, const uint8_t* data, const long long* doc_off, long long d0,
                               long long d1, const long long* sp_start, const long long* sp_end,
                               const uint32_t* sp_id, long long k, long long n_sp,
                               gputok_rx::Out& out, long long* doc_n) {
  for (long long d = d0; d < d1; ++d) {
    const long long lo = doc_off[d], hi = doc_off[d + 1];
    const size_t before = out.start.size();
    long long cur = lo;
    while (k < n_sp && sp_start[k] < lo) ++k;
    for (;;) {
      const long long nxt = (k < n_sp && sp_start[k] < hi) ? sp_start[k] : hi;
      if (nxt > cur) c.cut(0, data + cur, nxt - cur, out);  // (empty text: no words)
      if (nxt >= hi) break;
      out.piece(data + nxt, sp_end[k] - nxt, sp_id[k]);
      cur = sp_end[k];
      ++k;
    }
    doc_n[d - d0] = (long long)(out.start.size() - before);
  }
}

struct GputokRxResult {
  std::vector<gputok_rx::Out> parts;
  std::vector<long long> doc_n;
};

// A chunk cut by `make()`'s cutters (one per thread, over ranges of about equal bytes); the
// handle gputok_rx_sizes / gputok_rx_take read (null on failure).
template <class Make>
static void* gputok_rx_chunk(Make make, const uint8_t* data, const long long* doc_off,
                             long long n_docs, const long long* sp_start, const long long* sp_end,
                             const uint32_t* sp_id, long long n_sp, int threads) {
  try {
    auto* r = new GputokRxResult();
    r->doc_n.assign((size_t)n_docs, 0);
    const long long total = n_docs ? doc_off[n_docs] - doc_off[0] : 0;
    int parts = threads < 1 ? 1 : threads;
    if (total < (1 << 16) || n_docs < 2) parts = 1;  // (threads cost more than a small chunk)
    if (parts > n_docs) parts = (int)(n_docs ? n_docs : 1);
    std::vector<long long> cut((size_t)parts + 1, n_docs);
    cut[0] = 0;
    for (int p = 1; p < parts; ++p) {
      const long long want = doc_off[0] + total * p / parts;
      long long lo = cut[(size_t)p - 1], hi = n_docs;
      while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (doc_off[mid] < want) lo = mid + 1;
        else hi = mid;
      }
      cut[(size_t)p] = lo;
    }
    r->parts.resize((size_t)parts);
    std::vector<char> failed((size_t)parts, 0);
    auto job = [&](int p) {
      const long long a = cut[(size_t)p], b = cut[(size_t)p + 1];
      if (a >= b) return;
      try {
        long long lo = 0, hi = n_sp;  // the first span at or after the range's start
        while (lo < hi) {
          const long long mid = (lo + hi) >> 1;
          if (sp_start[mid] < doc_off[a]) lo = mid + 1;
          else hi = mid;
        }
        auto c = make();
        gputok_rx_cut_docs(c, data, doc_off, a, b, sp_start, sp_end, sp_id, lo, n_sp,
                           r->parts[(size_t)p], r->doc_n.data() + a);
      } catch (...) {
        failed[(size_t)p] = 1;
      }
    };
    if (parts == 1) {
      job(0);
    } else {
      std::vector<std::thread> pool;
      for (int p = 1; p < parts; ++p) pool.emplace_back(job, p);
      job(0);
      for (auto& t : pool) t.join();
    }
    for (char f : failed)
      if (f) { delete r; return nullptr; }
    return r;
  } catch (...) {
    return nullptr;
  }
}

// Cuts a chunk by the pattern program; the result handle as gputok_rx_chunk's.
extern "C" __attribute__((visibility("default"))) void* gputok_rx_cut(
    const int32_t* code, const int32_t* steps, int n_steps, const long long* class_off,
    const uint32_t* ranges, const uint32_t* ascii, const uint8_t* data, const long long* doc_off,
    long long n_docs, const long long* sp_start, const long long* sp_end, const uint32_t* sp_id,
    long long n_sp, int threads) {
  const gputok_rx::Prog g{code, steps, n_steps, class_off, ranges, ascii};
  return gputok_rx_chunk([&g]() { return gputok_rx::Cutter(g); }, data, doc_off, n_docs,
                         sp_start, sp_end, sp_id, n_sp, threads);
}

// sizes[0] = bytes, sizes[1] = pieces (without the final GAP entry)
extern "C" __attribute__((visibility("default"))) void gputok_rx_sizes(void* h, long long* sizes) {
  auto* r = static_cast<GputokRxResult*>(h);
  long long nb = 0, np_ = 0;
  for (auto& o : r->parts) { nb += (long long)o.bytes.size(); np_ += (long long)o.start.size(); }
  sizes[0] = nb;
  sizes[1] = np_;
}

// Copies the result out and frees it: bytes, starts (pieces + 1: the end), specs (pieces + 1:
// the final one `gap`), doc_entry (documents + 1).
extern "C" __attribute__((visibility("default"))) void gputok_rx_take(
    void* h, uint8_t* bytes, uint32_t* start, uint32_t* spec, uint32_t* doc_entry, uint32_t gap) {
  auto* r = static_cast<GputokRxResult*>(h);
  uint32_t base = 0;
  size_t e = 0;
  for (auto& o : r->parts) {
    std::memcpy(bytes + base, o.bytes.data(), o.bytes.size());
    for (size_t i = 0; i < o.start.size(); ++i, ++e) {
      start[e] = o.start[i] + base;
      spec[e] = o.spec[i];
    }
    base += (uint32_t)o.bytes.size();
  }
  start[e] = base;
  spec[e] = gap;
  doc_entry[0] = 0;
  long long acc = 0;
  for (size_t d = 0; d < r->doc_n.size(); ++d) {
    acc += r->doc_n[d];
    doc_entry[d + 1] = (uint32_t)acc;
  }
  delete r;
}
