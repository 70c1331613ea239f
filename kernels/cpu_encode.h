// cpu_encode.h: host only. The native CPU device's per-document pass for byte-level BPE: one
// thread takes a document (or a part of one cut where a piece starts in every parse) from its
// first byte to its last ids in a single pass, where the chunk pipeline (kernels/host_chunk.h,
// the GPU's kernels run in order) writes and reads an array per stage for a whole chunk:
//
//   for each piece the pattern matcher finds (kernels/cpu_scan.h: the class scan's fast
//   matchers for the common pieces, else kernels/cpu_text.h: THE CL / O200K MATCHER over the
//   bytes, the classes looked up as it goes)
//     one byte         its id outright (enc_one_byte_id: the one-byte block, or its byte id)
//     2-24 bytes       the piece cache (kernels/cpu_cache.h, shared by the threads, kept from
//                      batch to batch), else as below and then cached
//     else             the whole-token lookup (THE BYTES HASH, EncWholeTable), else the merge
//                      rule: enc_merge_step for a piece under ENC_LONG_PIECE bytes (THE
//                      COMPARATOR over a run of priorities), enc_merge_long_piece for a longer
//                      one (O(L log L): the runs, the rounds, the block heaps)
//     the ids go straight to the output.
//
// Every rule is the shared one (kernels/common/*.h); only the order of the work and where it
// is kept differ from the chunk pipeline. The batch entry points (threads, documents, specials)
// are in kernels/cpu_batch.h.
//
// Performance notes: see the "tried and dropped" notes next to each step below.
#pragma once

#include "cpu_solve.h"
#include "cpu_window.h"

inline EncCpuWork::EncCpuWork() : window(new EncCpuWindow) {}

inline EncCpuWork::~EncCpuWork() {
  free(w32);
  free(w64);
  delete window;
}

template <class T>
enc_u32* enc_cpu_segment(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk, const T& t,
                         enc_u32* out) {
  enc_i64 end_at = 0;
  return enc_cpu_segment_to(m, c, wk, t, t.n, out, &end_at);
}

// The text type of the model's family over buf[0 .. n).
template <class T>
__forceinline__ T enc_cpu_text(const EncCpuModel& m, const enc_u8* buf, enc_i64 n) {
  T t;
  t.buf = buf;
  t.n = n;
  t.cls_table = m.cls_table;
  t.letters = m.letters;
  t.n_letters = m.n_letters;
  t.gpt2 = m.gpt2;
  t.digit_group = m.digit_group;
  t.end_whole = m.end_whole;
  t.nibbles = m.nibbles;
  return t;
}

// One segment of n bytes at buf (in a text buffer): the end of its ids in out, or nullptr (no
// memory).
inline enc_u32* enc_cpu_encode(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                               const enc_u8* buf, enc_i64 n, enc_u32* out) {
  if (m.o200k) return enc_cpu_segment(m, c, wk, enc_cpu_text<EncCpuO2Text>(m, buf, n), out);
  return enc_cpu_segment(m, c, wk, enc_cpu_text<EncCpuClText>(m, buf, n), out);
}

inline EncCpuWork& enc_cpu_work() {
  thread_local EncCpuWork wk;
  return wk;
}

// The cache's counts, added from a thread's workspace (after a text or a batch's unit).
inline void enc_cpu_count(EncCpuCache* c, EncCpuWork& wk) {
  if (c != nullptr && wk.lookups) {
    __atomic_fetch_add(&c->lookups, wk.lookups, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->hits, wk.hits, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->inserts, wk.inserts, __ATOMIC_RELAXED);
  }
  wk.lookups = wk.hits = wk.inserts = 0;
}

// ---------------------------------------------------------------- entry points (ctypes)
// (the batch over threads: cpu_batch.h, at the end of this file)

ENC_HOST_EXPORT void* gputok_cpu_cache_new(unsigned long long slots) {
  return enc_cpu_cache_new(slots ? slots : ENC_CPU_CACHE_SLOTS);
}

ENC_HOST_EXPORT void gputok_cpu_cache_free(void* cache) {
  enc_cpu_cache_free(static_cast<EncCpuCache*>(cache));
}

// out[0..4): slots, lookups, hits, inserts.
ENC_HOST_EXPORT void gputok_cpu_cache_stats(const void* cache, unsigned long long* out) {
  const EncCpuCache* c = static_cast<const EncCpuCache*>(cache);
  out[0] = c->mask + 1;
  out[1] = __atomic_load_n(&c->lookups, __ATOMIC_RELAXED);
  out[2] = __atomic_load_n(&c->hits, __ATOMIC_RELAXED);
  out[3] = __atomic_load_n(&c->inserts, __ATOMIC_RELAXED);
}

// One text of n bytes (valid UTF-8, one segment: no special token) on the calling thread: its
// ids into out (room for n + ENC_CPU_SLOT_IDS); returns their count, or -1 without memory.
// cache: the model's piece cache, or nullptr.
ENC_HOST_EXPORT long long gputok_cpu_encode_text(const enc_u8* buf, long long n,
                                                 const unsigned long long* tab, void* cache,
                                                 unsigned* out) {
  const EncCpuModel m = enc_cpu_model(tab);
  EncCpuCache* c = static_cast<EncCpuCache*>(cache);
  EncCpuWork& wk = enc_cpu_work();
  enc_u8* text = wk.text.room((enc_u64)n);
  if (text == nullptr) return -1;
  memcpy(text, buf, (size_t)n);
  wk.text.pad((enc_u64)n);
  enc_u32* end = enc_cpu_encode(m, c, wk, text, n, out);
  enc_cpu_count(c, wk);
  return end == nullptr ? -1 : (long long)(end - out);
}

// The pieces of one text of n bytes (valid UTF-8, one segment): where each ends, into ends
// (room for n); returns their count. how: 0 the family's matcher alone (the shared rule,
// enc_cpu_rule), 1 cpu_scan.h's fast matchers first (for every family, whether or not its
// segment loop takes them), 2 the segment loop's own finder (enc_cpu_piece: the scan, or
// cpu_text.h's ASCII entry to the matcher): tests hold 1 and 2 to 0
// (tests/test_native_perdoc.py). -1 without memory.
template <class T>
long long enc_cpu_pieces(const T& t, int how, long long* ends) {
  EncCpuScan sc;
  enc_cpu_scan_reset(sc);
  long long count = 0;
  for (enc_i64 i = 0; i < t.n;) {
    enc_i64 e = how == 1 ? enc_cpu_scan_piece(sc, t, i)
                         : (how == 2 ? enc_cpu_piece(sc, t, i) : enc_cpu_rule(t, i));
    if (e <= i) e = enc_span_next(t, i);  // (as the segment loop)
    ends[count++] = e;
    i = e;
  }
  return count;
}

ENC_HOST_EXPORT long long gputok_cpu_pieces(const enc_u8* buf, long long n,
                                            const unsigned long long* tab, int how,
                                            long long* ends) {
  const EncCpuModel m = enc_cpu_model(tab);
  EncCpuWork& wk = enc_cpu_work();
  enc_u8* text = wk.text.room((enc_u64)n);
  if (text == nullptr) return -1;
  memcpy(text, buf, (size_t)n);
  wk.text.pad((enc_u64)n);
  if (m.o200k) return enc_cpu_pieces(enc_cpu_text<EncCpuO2Text>(m, text, n), how, ends);
  return enc_cpu_pieces(enc_cpu_text<EncCpuClText>(m, text, n), how, ends);
}

// THE TRAINING WORDS (kernels/host_train_words.h, another unit): documents [d0, d1) of a batch,
// buf[off[d] .. off[d + 1]) (valid UTF-8), each one segment, cut into pieces as the per-document
// pass cuts them (enc_cpu_piece), on the calling thread, from the pre-tokenizer's tables as the
// word counter holds them (no model). Where each piece ends, relative to off[d0], into ends
// (room for off[d1] - off[d0]); returns their count, or -1 without memory.
template <class T>
__forceinline__ long long enc_cpu_word_ends(T t, const enc_u8* buf, const long long* off,
                                            long long d0, long long d1, unsigned* ends) {
  EncCpuWork& wk = enc_cpu_work();
  long long count = 0;
  for (long long d = d0; d < d1; ++d) {
    const enc_i64 n = off[d + 1] - off[d];
    if (n <= 0) continue;
    enc_u8* text = wk.text.room((enc_u64)n);
    if (text == nullptr) return -1;
    memcpy(text, buf + off[d], (size_t)n);
    wk.text.pad((enc_u64)n);
    t.buf = text;
    t.n = n;
    const unsigned at = (unsigned)(off[d] - off[d0]);
    EncCpuScan sc;
    enc_cpu_scan_reset(sc);
    for (enc_i64 i = 0; i < n;) {
      enc_i64 e = enc_cpu_piece(sc, t, i);
      if (e <= i) e = enc_span_next(t, i);  // (as the segment loop)
      ends[count++] = at + (unsigned)e;
      i = e;
    }
  }
  return count;
}

ENC_HOST_EXPORT long long gputok_cpu_word_ends(const enc_u8* buf, const long long* off,
                                               long long d0, long long d1,
                                               const enc_u8* cls_table, const enc_u8* letters,
                                               unsigned n_letters, int o200k, int gpt2,
                                               int digit_group, int end_whole,
                                               const enc_u8* nibbles, unsigned* ends) {
  auto text = [&](auto t) {  // (enc_cpu_text's fields, from the counter's tables)
    t.cls_table = cls_table, t.letters = letters, t.n_letters = n_letters;
    t.gpt2 = gpt2, t.digit_group = digit_group, t.end_whole = end_whole, t.nibbles = nibbles;
    return enc_cpu_word_ends(t, buf, off, d0, d1, ends);
  };
  return o200k ? text(EncCpuO2Text{}) : text(EncCpuClText{});
}

// ---------------------------------------------------------------- one str to one list

// (the str layout, the packer and the list builder: host_pack.h and host_lists.h, another unit)
// (gputok_str_locate reads a str through the interpreter's public C API: host_pack.h, built
// against this interpreter's Python.h; this unit needs no header of its own to call it. Weak:
// a library built without the header has none, and Python never asks for this call there)
extern "C" __attribute__((weak)) void gputok_str_locate(const void* const* obj, long long n, int bytes_docs,
                                  long long* addr, signed char* kind, long long* units,
                                  long long* len);
extern "C" long long gputok_pack_utf8(const long long* addr, const signed char* kind,
                                      const long long* units, long long n, unsigned char* dst);
extern "C" void* gputok_id_list(const void* ids, int width, long long n, const void* api,
                                long long items_at);
namespace enc_lists {
struct PyApi {  // (host_lists.h's: the interpreter's functions the list builder calls)
  void* (*list_new)(long long);
  void* (*long_from)(unsigned long);
  void (*incref)(void*);
  void (*decref)(void*);
};
}  // namespace enc_lists

// A thread's ids of one text, grown to the longest met.
struct EncCpuIds {
  enc_u32* ids = nullptr;
  enc_u64 cap = 0;
  ~EncCpuIds() { free(ids); }
  enc_u32* room(enc_u64 n) {
    if (n > cap) {
      free(ids);
      cap = n + (n >> 3);
      ids = static_cast<enc_u32*>(malloc(4 * cap));
      if (ids == nullptr) cap = 0;
    }
    return ids;
  }
};

// What gputok_cpu_encode_str needs besides the str (NativeDevice's, per model): the model's
// words and cache, the list builder's (IdLists': its interpreter functions, the list's item
// offset), and None's address (a str this does not take gets None back, with a reference).
enum {
  ENC_CPU_STR_TAB,
  ENC_CPU_STR_CACHE,
  ENC_CPU_STR_API,
  ENC_CPU_STR_ITEMS_AT,
  ENC_CPU_STR_NONE,
  ENC_CPU_STR_WORDS
};

// One Python str (obj; no active token in it) to the list of its ids, in one call with the
// interpreter's lock held (ctypes.PyDLL): its characters read where CPython keeps them, the ids
// made on this thread, the list built by host_lists.h. A new reference to the list; None (a
// new reference) for a str this does not take (a surrogate, characters that live elsewhere:
// the caller encodes it its way); NULL with no exception set: no memory. For a short text: a
// long one's caller releases the lock for the encoding (gputok_cpu_encode_text), the work then
// worth more than a call.
ENC_HOST_EXPORT void* gputok_cpu_encode_str(const void* obj, const unsigned long long* ctx) {
  long long addr = 0, units = 0, len = 0;
  signed char kind = 0;
  if (gputok_str_locate != nullptr) gputok_str_locate(&obj, 1, 0, &addr, &kind, &units, &len);
  else len = -2;
  if (len < 0) {  // (a surrogate, or characters not ready: the caller's way)
    void* none = reinterpret_cast<void*>(ctx[ENC_CPU_STR_NONE]);
    reinterpret_cast<const enc_lists::PyApi*>(ctx[ENC_CPU_STR_API])->incref(none);
    return none;
  }
  const EncCpuModel m = enc_cpu_model(reinterpret_cast<const enc_u64*>(ctx[ENC_CPU_STR_TAB]));
  EncCpuCache* c = reinterpret_cast<EncCpuCache*>(ctx[ENC_CPU_STR_CACHE]);
  EncCpuWork& wk = enc_cpu_work();
  thread_local EncCpuIds ids;
  enc_u8* text = wk.text.room((enc_u64)len);
  enc_u32* out = ids.room((enc_u64)len + ENC_CPU_SLOT_IDS);
  if (text == nullptr || out == nullptr) return nullptr;
  if (kind == 0)
    memcpy(text, reinterpret_cast<const void*>(addr), (size_t)len);
  else
    gputok_pack_utf8(&addr, &kind, &units, 1, text);
  wk.text.pad((enc_u64)len);
  enc_u32* end = enc_cpu_encode(m, c, wk, text, len, out);
  enc_cpu_count(c, wk);
  if (end == nullptr) return nullptr;
  return gputok_id_list(out, 4, (long long)(end - out),
                        reinterpret_cast<const void*>(ctx[ENC_CPU_STR_API]),
                        (long long)ctx[ENC_CPU_STR_ITEMS_AT]);
}

#include "cpu_batch.h"
