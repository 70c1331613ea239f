// host_unigram.h: host only. Unigram segmentation on the native CPU device: the best path
// through the lattice of pieces (Viterbi), as sentencepiece computes it for a UNIGRAM `.model`
// and as HF tokenizers does for a `Unigram` tokenizer.json. cpu_ref/unigram.py is the spec (each
// oracle's arithmetic and tie rule); gputok/components/segmenters/unigram.py is the numpy form
// the tests hold this one to; gputok/backends/native/unigram.py binds it.
//
//   gputok_native_unigram_new     a model: the candidate pieces' double-array trie (built here,
//                                 once per model), each id's edge score, unk and byte pieces
//   gputok_native_unigram_norm    gives it THE SPM NORMALISER's tables, the user-defined
//                                 pieces' trie too (THE USER-DEFINED MATCH first: a `.model`'s
//                                 text is normalised here too)
//   gputok_native_unigram_items   a batch's items in order: text segments (normalised first
//                                 when asked) and token ids; every item's id count
//   gputok_native_unigram_text    one text (one segment), the single-text API's call
//   gputok_native_unigram_free
//
// Ids go to this thread's own buffer (*out), valid until its next call here (the caller copies
// them out at once). Returns the id count, -1 without memory, -2 - k when item k needs an
// unknown piece and the model has no unk id (HF only: its error).
//
// The rules (one sentence, its UTF-8 bytes p[0 .. n)):
// * THE UNIGRAM LATTICE: at every character start s, in order, each piece that is a prefix of
//   p[s ..] is an edge s -> s + len, shorter first (the trie walk); when none is exactly the
//   character at s, an unknown edge over that character scores unk_score. An edge's sum is
//   best[s] + its score; THE COMPARATOR (Unigram): it replaces best[e] only when strictly
//   greater, so on a tie the earliest start, then the shortest piece, then unknown wins.
//   sentencepiece sums in float32 from the sentence start and, when best[s] leaves
//   [-1e5, 1e5], subtracts it from every best sum from s to the furthest end reached so far
//   (THE SCORE RESET); HF sums in float64 and never rebases.
// * THE UNIGRAM EMIT, read back from the end: sentencepiece: an unknown edge is its bytes'
//   pieces with byte fallback, else a run of unknown edges is one unk id; HF: unknown edges and
//   edges of the unk piece itself fuse into one run, which is the vocabulary entry it spells if
//   any, else its bytes' <0xXX> tokens with byte fallback when all exist, else the unk id.
//
// Performance notes: a trie node is 12 bytes (base, check, value side by side: a step reads one
// node and its child); the lattice's arrays and the output are this thread's, kept between
// calls up to UG_KEEP bytes. sentencepiece walks a darts double array the same way.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#define UG_NO_ID 0xFFFFFFFFu
#define UG_NO_IDS 0xFFFFFFFEu  // a token span that emits nothing (stages/split.py NO_IDS)
#define UG_HF 1u               // HF's rule (float64, every entry a candidate, fused unk runs)
#define UG_BYTE_FALLBACK 2u
#define UG_KEEP (8u << 20)
#define UG_RESET 100000.0f  // THE SCORE RESET's bound on |best[s]| (sentencepiece's)

namespace {

struct UgNode {
  int base;   // children at base + byte (0: none)
  int check;  // the parent's index (-1: a free cell)
  int value;  // the piece id ending here (-1: none)
};

struct UgModel {
  std::vector<UgNode> da;
  enc_i64 max_len = 0;
  std::vector<double> score;  // edge score per id (HF; sentencepiece's before rounding)
  std::vector<float> score32;  // the same rounded to float32 (sentencepiece)
  enc_u32 byte_ids[256];
  enc_u32 unk = UG_NO_ID;
  double unk_score = 0;
  float unk_score32 = 0;
  enc_u32 flags = 0;
  // THE SPM NORMALISER (copied): a .model without user-defined pieces
  bool has_norm = false;
  std::vector<enc_u32> cm_units;
  std::vector<enc_u8> cm_strings;
  enc_u32 nflags = 0;
  std::vector<enc_u32> ud;  // THE USER-DEFINED MATCH's trie (empty: no user-defined pieces)
};

// ---- the double-array trie -----------------------------------------------------------------

// Placement of each node's children: the first base whose cells are all free, found by walking
// a list of free cells; a cell tried too often as the first child's place leaves the list (it
// stays free for others), so a dense front is not scanned again and again (darts does the same).
struct UgBuilder {
  std::vector<UgNode>& da;
  std::vector<int> nxt, prv;
  std::vector<unsigned char> tries, linked;
  int head = -1, tail = -1;

  explicit UgBuilder(std::vector<UgNode>& d) : da(d) {}

  void grow(size_t want) {
    const size_t old = da.size();
    if (want <= old) return;
    size_t n = std::max(want, old * 2);
    da.resize(n, UgNode{0, -1, -1});
    nxt.resize(n, -1);
    prv.resize(n, -1);
    tries.resize(n, 0);
    linked.resize(n, 0);
    for (size_t i = old; i < n; ++i) link((int)i);
  }
  void link(int i) {
    prv[i] = tail;
    nxt[i] = -1;
    if (tail >= 0) nxt[tail] = i; else head = i;
    tail = i;
    linked[i] = 1;
  }
  void unlink(int i) {
    if (!linked[i]) return;
    if (prv[i] >= 0) nxt[prv[i]] = nxt[i]; else head = nxt[i];
    if (nxt[i] >= 0) prv[nxt[i]] = prv[i]; else tail = prv[i];
    linked[i] = 0;
  }
  // a base for the sorted labels lab[0 .. k)
  int place(const unsigned char* lab, int k) {
    const int first = lab[0];
    int p = head;
    for (;;) {
      if (p < 0) {  // past the last free cell: more cells
        const size_t old = da.size();
        grow(old + 512);
        p = (int)old;
        continue;
      }
      const int next = nxt[p];
      const int b = p - first;
      if (b >= 1) {
        grow((size_t)b + 257);
        bool ok = true;
        for (int j = 1; j < k && ok; ++j) ok = da[b + lab[j]].check == -1;
        if (ok) return b;
      }
      if (++tries[p] >= 16) unlink(p);
      p = next;
    }
  }
};

struct UgKey {
  const enc_u8* p;
  enc_i64 n;
  int id;
};

// The trie of keys (bytes -> id; a repeated key keeps its largest id, as a dict filled in id
// order does). Returns false without memory.
bool ug_build(UgModel& m, std::vector<UgKey>& keys) {
  std::sort(keys.begin(), keys.end(), [](const UgKey& a, const UgKey& b) {
    const int c = memcmp(a.p, b.p, (size_t)std::min(a.n, b.n));
    if (c != 0) return c < 0;
    if (a.n != b.n) return a.n < b.n;
    return a.id < b.id;
  });
  m.da.clear();
  UgBuilder bld(m.da);
  bld.grow(1024);
  m.da[0].check = -2;  // the root
  bld.unlink(0);
  struct Todo {
    int node;
    size_t lo, hi;
    enc_i64 depth;
  };
  std::vector<Todo> stack;
  stack.push_back(Todo{0, 0, keys.size(), 0});
  unsigned char lab[256];
  size_t grp[257];
  while (!stack.empty()) {
    const Todo t = stack.back();
    stack.pop_back();
    size_t lo = t.lo;
    while (lo < t.hi && keys[lo].n == t.depth) m.da[t.node].value = keys[lo++].id;
    if (lo == t.hi) continue;
    int k = 0;
    for (size_t i = lo; i < t.hi; ++i) {
      const unsigned char c = keys[i].p[t.depth];
      if (k == 0 || lab[k - 1] != c) {
        lab[k] = c;
        grp[k++] = i;
      }
    }
    grp[k] = t.hi;
    const int b = bld.place(lab, k);
    m.da[t.node].base = b;
    for (int j = 0; j < k; ++j) {
      const int c = b + lab[j];
      m.da[c].check = t.node;
      bld.unlink(c);
    }
    for (int j = k - 1; j >= 0; --j) stack.push_back(Todo{b + lab[j], grp[j], grp[j + 1], t.depth + 1});
  }
  // every base + byte stays inside the array (no bound check in the walk)
  int need = 0;
  for (size_t i = 0; i < m.da.size(); ++i) {
    if (m.da[i].check != -1) need = std::max(need, (int)i + 1);
    need = std::max(need, m.da[i].base + 256);
  }
  m.da.resize((size_t)need + 1, UgNode{0, -1, -1});
  m.da.shrink_to_fit();
  return true;
}

// The id of exactly p[0 .. n), or -1.
__forceinline__ int ug_exact(const UgModel& m, const enc_u8* p, enc_i64 n) {
  const UgNode* da = m.da.data();
  int node = 0;
  for (enc_i64 i = 0; i < n; ++i) {
    const int t = da[node].base + p[i];
    if (da[t].check != node) return -1;
    node = t;
  }
  return da[node].value;
}

// ---- the lattice -----------------------------------------------------------------------------

struct UgWork {  // a thread's arrays
  std::vector<float> best32;
  std::vector<double> best64;
  std::vector<enc_i64> from;  // the best path's last edge's start, per end
  std::vector<int> id;        // its piece (-1: an unknown edge)
  std::vector<enc_i64> path;  // the path's ends, read back
  std::vector<enc_u32> out;
  std::vector<enc_u8> norm;
  void trim() {
    if ((best32.capacity() + from.capacity() * 2 + best64.capacity() * 2) * 4 > UG_KEEP) {
      std::vector<float>().swap(best32);
      std::vector<double>().swap(best64);
      std::vector<enc_i64>().swap(from);
      std::vector<int>().swap(id);
      std::vector<enc_i64>().swap(path);
    }
    if (out.capacity() * 4 > UG_KEEP) std::vector<enc_u32>().swap(out);
    if (norm.capacity() > UG_KEEP) std::vector<enc_u8>().swap(norm);
  }
};

// THE UNIGRAM LATTICE over p[0 .. n) in F (float: sentencepiece, double: HF); fills w.from and
// w.id for every reached end. Returns false when an unknown edge is taken and there is no unk id
// (HF raises then, at the moment the edge would be stored, whatever the final path).
template <typename F, bool SPM>
bool ug_lattice(const UgModel& m, const enc_u8* p, enc_i64 n, std::vector<F>& best, UgWork& w) {
  best.assign((size_t)n + 1, -INFINITY);
  w.from.resize((size_t)n + 1);
  w.id.resize((size_t)n + 1);
  best[0] = 0;
  const UgNode* da = m.da.data();
  const float* s32 = m.score32.data();
  const double* s64 = m.score.data();
  const F unk = SPM ? (F)m.unk_score32 : (F)m.unk_score;
  const bool hf_no_unk = !SPM && m.unk == UG_NO_ID;
  enc_i64 frontier = 0;
  for (enc_i64 s = 0; s < n;) {
    F base = best[s];
    if (SPM && !(base >= -UG_RESET && base <= UG_RESET)) {  // THE SCORE RESET
      for (enc_i64 k = s; k <= frontier; ++k) best[k] = best[k] - base;  // (-inf stays)
      base = 0;
    }
    const enc_i64 rest = n - s;
    const enc_i64 mb = std::min<enc_i64>(enc_utf8_len(p[s]), rest);
    const enc_i64 lim = std::min<enc_i64>(rest, m.max_len);
    bool single = false;
    int node = 0;
    for (enc_i64 k = 0; k < lim; ++k) {
      const int t = da[node].base + p[s + k];
      if (da[t].check != node) break;
      node = t;
      const int v = da[t].value;
      if (v < 0) continue;
      const enc_i64 e = s + k + 1;
      if (e > frontier) frontier = e;
      const F cand = SPM ? (F)(s32[v] + (float)base) : (F)(s64[v] + (double)base);
      if (cand > best[e]) {  // THE COMPARATOR (Unigram): strictly greater
        best[e] = cand;
        w.from[e] = s;
        w.id[e] = v;
      }
      if (k + 1 == mb) single = true;
    }
    if (!single) {
      const enc_i64 e = s + mb;
      if (e > frontier) frontier = e;
      const F cand = unk + base;
      if (cand > best[e]) {
        if (hf_no_unk) return false;
        best[e] = cand;
        w.from[e] = s;
        w.id[e] = -1;
      }
    }
    s += mb;
  }
  return true;
}

// THE UNIGRAM EMIT of the path w holds for p[0 .. n), appended to w.out.
void ug_emit(const UgModel& m, const enc_u8* p, enc_i64 n, UgWork& w) {
  w.path.clear();
  for (enc_i64 e = n; e > 0; e = w.from[e]) w.path.push_back(e);
  std::vector<enc_u32>& out = w.out;
  const bool bf = (m.flags & UG_BYTE_FALLBACK) != 0;
  if (!(m.flags & UG_HF)) {  // sentencepiece
    bool prev_unk = false;
    for (size_t k = w.path.size(); k-- > 0;) {
      const enc_i64 e = w.path[k], s = w.from[e];
      const int v = w.id[e];
      if (v >= 0) {
        out.push_back((enc_u32)v);
        prev_unk = false;
      } else if (bf) {
        for (enc_i64 i = s; i < e; ++i) out.push_back(m.byte_ids[p[i]]);
      } else {
        if (!prev_unk) out.push_back(m.unk);
        prev_unk = true;
      }
    }
    return;
  }
  enc_i64 run = -1;  // start of the pending fused run
  enc_i64 at = 0;
  // a fused run of unknown edges [a, b): one piece if the whole run is one, else its bytes
  // under byte fallback (all of them known), else one unk
  auto flush_run = [&](enc_i64 a, enc_i64 b) {
    const int whole = ug_exact(m, p + a, b - a);
    bool done = whole >= 0;
    if (done) {
      out.push_back((enc_u32)whole);
    } else if (bf) {
      done = true;
      for (enc_i64 i = a; i < b && done; ++i) done = m.byte_ids[p[i]] != UG_NO_ID;
      if (done)
        for (enc_i64 i = a; i < b; ++i) out.push_back(m.byte_ids[p[i]]);
    }
    if (!done) out.push_back(m.unk);
  };
  for (size_t k = w.path.size(); k-- > 0;) {
    const enc_i64 e = w.path[k], s = w.from[e];
    const int v = w.id[e];
    if (v < 0 || (enc_u32)v == m.unk) {
      if (run < 0) run = s;
      at = e;
      continue;
    }
    if (run >= 0) {
      flush_run(run, at);
      run = -1;
    }
    out.push_back((enc_u32)v);
  }
  if (run >= 0) flush_run(run, at);
}

// One sentence's ids appended to w.out; false: HF's missing unk id.
bool ug_sentence(const UgModel& m, const enc_u8* p, enc_i64 n, UgWork& w) {
  if (n <= 0) return true;
  const bool ok = (m.flags & UG_HF) ? ug_lattice<double, false>(m, p, n, w.best64, w)
                                    : ug_lattice<float, true>(m, p, n, w.best32, w);
  if (!ok) return false;
  ug_emit(m, p, n, w);
  return true;
}

// THE SPM NORMALISER of buf[a .. end) into w.norm; its length.
enc_i64 ug_normalize(const UgModel& m, const enc_u8* buf, enc_i64 a, enc_i64 end, UgWork& w) {
  const EncCharsMap cm{m.cm_units.data(), (enc_u32)m.cm_units.size(), m.cm_strings.data(),
                       (enc_u32)m.cm_strings.size(), m.nflags, m.ud.data(),
                       (enc_u32)m.ud.size()};
  EncNormOut o{nullptr, false, 0, 0, 0};
  const enc_u32 len = enc_spm_normalize(cm, buf, (enc_u32)a, (enc_u32)end, o);
  w.norm.resize((size_t)len + 1);
  EncNormOut wr{w.norm.data(), true, len, 0, 0};
  enc_spm_normalize(cm, buf, (enc_u32)a, (enc_u32)end, wr);
  return len;
}

thread_local UgWork ug_work;

}  // namespace

extern "C" __attribute__((visibility("default"))) void* gputok_native_unigram_new(
    const enc_u8* blob, const enc_i64* off, const int* ids, enc_i64 n_keys, const double* score,
    enc_i64 n_vocab, enc_u32 flags, enc_u32 unk, double unk_score, const enc_u32* byte_ids) {
  try {
    UgModel* m = new UgModel();
    m->flags = flags;
    m->unk = unk;
    m->unk_score = unk_score;
    m->unk_score32 = (float)unk_score;
    m->score.assign(score, score + n_vocab);
    m->score32.resize((size_t)n_vocab);
    for (enc_i64 i = 0; i < n_vocab; ++i) m->score32[i] = (float)score[i];
    for (int b = 0; b < 256; ++b) m->byte_ids[b] = byte_ids[b];
    std::vector<UgKey> keys((size_t)n_keys);
    for (enc_i64 k = 0; k < n_keys; ++k) {
      keys[k] = UgKey{blob + off[k], off[k + 1] - off[k], ids[k]};
      m->max_len = std::max(m->max_len, off[k + 1] - off[k]);
    }
    ug_build(*m, keys);
    return m;
  } catch (...) {
    return nullptr;
  }
}

extern "C" __attribute__((visibility("default"))) int gputok_native_unigram_norm(
    void* h, const enc_u32* units, enc_u32 n_units, const enc_u8* strings, enc_u32 n_strings,
    enc_u32 nflags, const enc_u32* ud, enc_u32 n_ud) {
  try {
    UgModel* m = static_cast<UgModel*>(h);
    m->cm_units.assign(units, units + n_units);
    m->cm_strings.assign(strings, strings + n_strings);
    m->nflags = nflags;
    m->ud.assign(ud, ud + n_ud);
    m->has_norm = true;
    return 0;
  } catch (...) {
    return -1;
  }
}

extern "C" __attribute__((visibility("default"))) void gputok_native_unigram_free(void* h) {
  delete static_cast<UgModel*>(h);
}

// The trie's cells (a test's and the docs' measure of it).
extern "C" __attribute__((visibility("default"))) long long gputok_native_unigram_cells(
    const void* h) {
  return (long long)static_cast<const UgModel*>(h)->da.size();
}

// items k = 0 .. n_items: buf[start[k] .. end[k]) a text segment (tok[k] == UG_NO_ID), else
// the token tok[k] (none for UG_NO_IDS); normalize: segments go through THE SPM NORMALISER
// first. counts[k]: item k's ids.
extern "C" __attribute__((visibility("default"))) long long gputok_native_unigram_items(
    const void* h, const enc_u8* buf, const enc_i64* start, const enc_i64* end,
    const enc_u32* tok, enc_i64 n_items, int normalize, enc_i64* counts, const enc_u32** out) {
  const UgModel& m = *static_cast<const UgModel*>(h);
  UgWork& w = ug_work;
  try {
    w.trim();
    w.out.clear();
    for (enc_i64 k = 0; k < n_items; ++k) {
      const size_t before = w.out.size();
      const enc_u32 t = tok != nullptr ? tok[k] : UG_NO_ID;
      if (t != UG_NO_ID) {
        if (t != UG_NO_IDS) w.out.push_back(t);
      } else if (normalize && m.has_norm) {
        const enc_i64 len = ug_normalize(m, buf, start[k], end[k], w);
        if (!ug_sentence(m, w.norm.data(), len, w)) return -2 - k;
      } else if (!ug_sentence(m, buf + start[k], end[k] - start[k], w)) {
        return -2 - k;
      }
      counts[k] = (enc_i64)(w.out.size() - before);
    }
  } catch (...) {
    return -1;
  }
  *out = w.out.data();
  return (long long)w.out.size();
}

// One text as one segment (normalised first when asked and the model has the normaliser).
extern "C" __attribute__((visibility("default"))) long long gputok_native_unigram_text(
    const void* h, const enc_u8* buf, enc_i64 n, int normalize, const enc_u32** out) {
  const UgModel& m = *static_cast<const UgModel*>(h);
  UgWork& w = ug_work;
  try {
    w.trim();
    w.out.clear();
    bool ok;
    if (normalize && m.has_norm) {
      const enc_i64 len = ug_normalize(m, buf, 0, n, w);
      ok = ug_sentence(m, w.norm.data(), len, w);
    } else {
      ok = ug_sentence(m, buf, n, w);
    }
    if (!ok) return -2;
  } catch (...) {
    return -1;
  }
  *out = w.out.data();
  return (long long)w.out.size();
}
