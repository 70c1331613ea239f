// cpu_batch.h: host only. A batch of documents through the per-document pass (cpu_encode.h) on
// every thread, with no interpreter in the loop: gputok/backends/native/perdoc.py
// (PerDocPass.encode_batch) calls gputok_cpu_batch_run (the ids made, each thread's in its own
// memory), sizes the output by the count it returns, then gputok_cpu_batch_take (the ids
// copied into place, in parallel).
//
// A document is (address, kind, units, UTF-8 bytes): kind 0 is UTF-8 already (bytes, an ASCII
// str's own characters, a packed buffer's slice), kind 1, 2 or 4 a str's code units (PEP 393,
// as kernels/host_pack.h reads them): a thread writes its UTF-8 into its own text buffer as it
// takes the document, so the batch is never packed as a whole.
//
// Work is handed out as parts: a document, or a slice of a long one (over ENC_CPU_PART_MAX
// bytes) cut where a piece starts in every parse (THE CL / O200K SPAN RULE: the span walk's
// starts), so one big document keeps every thread busy; consecutive small documents are one
// unit of work (ENC_CPU_UNIT_BYTES), so a batch of chat messages is not a hand-off per message.
// A slice is encoded with the bytes after its end in view (ENC_CPU_LOOK): the pattern looks at
// the characters after a piece to end it (at most three: a contraction), never further, and a
// piece that would run past the slice's end is an error, not a wrong id.
//
// Special tokens (the model's active tokens, or the disallowed ones to refuse) are found in
// each document as stages/split.py finds them: leftmost, then the longest at that position
// (the tokens come sorted by length, longest first); an active token's id is emitted between
// the segments' ids, a disallowed one stops the batch and is reported (the first in document
// order: its document, offset and token), and Python raises the error split.py raises.
// Normalisation (a model with one normal form): a document with a character THE QUICK CHECK
// (common/nfc_check.h) flags is not encoded here but reported; Python normalises it and
// encodes it again.
#pragma once

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "common/nfc_check.h"

#ifndef ENC_CPU_PART_MAX
#define ENC_CPU_PART_MAX (1u << 17)  // bytes: a longer document is sliced
#endif
#ifndef ENC_CPU_UNIT_BYTES
#define ENC_CPU_UNIT_BYTES (1u << 15)  // small documents are grouped to about this much text
#endif
#ifndef ENC_CPU_LOOK
#define ENC_CPU_LOOK 64  // bytes after a slice's end in view (see above)
#endif

// (the runtime's pool, host_runtime.h; the str packer, host_pack.h: other units of the library)
extern "C" int gputok_native_launch(void (*call)(void**), unsigned grid, unsigned block,
                                    void** args, int threads);
extern "C" long long gputok_pack_utf8(const long long* addr, const signed char* kind,
                                      const long long* units, long long n, unsigned char* dst);

// The model's tokens to find (gputok/backends/native/perdoc.py, _Tokens): their UTF-8 one after
// another (off[k] .. off[k + 1]), longest first, their ids, and whether each is active (cut
// out, its id emitted) or disallowed (refused). The two kinds are looked for apart, as split.py
// does: the refused ones in the text as given (a refused token that overlaps an active one's
// occurrence is found all the same), then the active ones.
struct EncCpuSpecials {
  const enc_u8* bytes;
  const enc_u32* off;
  const enc_u32* ids;
  const enc_u8* active;
  enc_u32 count;
  enc_u32 n_kind[2];     // refused, active
  enc_u64 first[2][4];   // bitmaps of each kind's first bytes
};

inline void enc_cpu_specials_init(EncCpuSpecials& s) {
  for (int w = 0; w < 2; ++w) {
    s.n_kind[w] = 0;
    for (int k = 0; k < 4; ++k) s.first[w][k] = 0;
  }
  for (enc_u32 k = 0; k < s.count; ++k) {
    const int w = s.active[k] ? 1 : 0;
    const enc_u8 b = s.bytes[s.off[k]];
    s.first[w][b >> 6] |= 1ull << (b & 63);
    ++s.n_kind[w];
  }
}

// The first token of a kind (1: active, 0: refused) at or after i in buf[0 .. n): its position
// (n: none) and index in *tok. Leftmost first; at one position the first token in order that
// matches (the longest).
inline enc_i64 enc_cpu_find_special(const EncCpuSpecials& s, int kind, const enc_u8* buf,
                                    enc_i64 i, enc_i64 n, enc_u32* tok) {
  if (!s.n_kind[kind]) return n;
  const enc_u64* first = s.first[kind];
  for (; i < n; ++i) {
    const enc_u8 b = buf[i];
    if (!((first[b >> 6] >> (b & 63)) & 1)) continue;
    for (enc_u32 k = 0; k < s.count; ++k) {
      const enc_u32 a = s.off[k], len = s.off[k + 1] - a;
      if ((s.active[k] != 0) == (kind != 0) && (enc_i64)len <= n - i &&
          memcmp(buf + i, s.bytes + a, len) == 0) {
        *tok = k;
        return i;
      }
    }
  }
  return n;
}

// A part: bytes [a, b) of document d (a slice is encoded with ENC_CPU_LOOK bytes more in view).
struct EncCpuPart {
  enc_u64 doc;
  enc_u64 a, b;
};

// A thread's output: ids in blocks of at least ENC_CPU_ARENA ids, each part's contiguous.
#ifndef ENC_CPU_ARENA
#define ENC_CPU_ARENA (1u << 20)
#endif
struct EncCpuArena {
  std::vector<enc_u32*> blocks;
  enc_u32* at = nullptr;
  enc_u64 left = 0;
  ~EncCpuArena() {
    for (enc_u32* p : blocks) free(p);
  }
  enc_u32* room(enc_u64 n) {  // room for n ids (nullptr without memory)
    if (n > left) {
      const enc_u64 size = n > ENC_CPU_ARENA ? n : ENC_CPU_ARENA;
      enc_u32* p = static_cast<enc_u32*>(malloc(4 * size));
      if (p == nullptr) return nullptr;
      blocks.push_back(p);
      at = p;
      left = size;
    }
    return at;
  }
  void used(enc_u64 n) {
    at += n;
    left -= n;
  }
};

// What a batch's run leaves for its take (and for Python: the count, the error, the flagged
// documents).
struct EncCpuBatch {
  EncCpuModel m;
  EncCpuCache* cache;
  EncCpuSpecials sp;
  const enc_u32* nfc_bits;  // THE QUICK CHECK's bitmap, or nullptr (no normaliser)
  const long long* addr;
  const signed char* kind;
  const long long* units;
  const long long* nbytes;
  enc_u64 n_docs;
  std::vector<EncCpuPart> parts;
  std::vector<enc_u64> unit_end;  // units: parts [unit_end[u - 1], unit_end[u])
  std::vector<enc_u32*> ids;      // per part: its ids (in some thread's arena)
  std::vector<enc_u64> count;     // per part: how many
  std::vector<enc_u8*> wide;      // the UTF-8 of long str documents (sliced: made first)
  std::vector<EncCpuArena> arenas;
  std::atomic<unsigned> next_arena{0};
  unsigned long long serial = 0;
  // the first refused token (document order), a flagged document, a failure
  std::atomic<enc_u64> bad_doc{~0ull};
  std::mutex bad_lock;
  enc_u64 bad_pos = 0;
  enc_u32 bad_tok = 0;
  std::atomic<int> failed{0};  // 1: no memory; 2: a piece ran past a slice's end
  std::vector<enc_u8> flagged;  // per document: sent back for the normaliser
  ~EncCpuBatch() {
    for (enc_u8* p : wide) free(p);
  }
};

namespace enc_cpu {

// The class of the character at q of a document's UTF-8 (n bytes), ENC_X at n: the span rule's
// view of it (bounds checked: the document is not padded).
inline enc_u8 class_at(const EncCpuModel& m, const enc_u8* d, enc_i64 n, enc_i64 q) {
  if (q >= n) return ENC_X;
  return m.cls_table[enc_decode(d, q, n)];
}

// The first position at or after x (a character start past 0) where a piece starts in every
// parse, or n.
inline enc_i64 cut_at(const EncCpuModel& m, const enc_u8* d, enc_i64 n, enc_i64 x) {
  while (x < n && (d[x] & 0xC0) == 0x80) ++x;
  if (x >= n) return n;
  enc_i64 p = x - 1;
  while (p > 0 && (d[p] & 0xC0) == 0x80) --p;
  enc_u8 pc = class_at(m, d, n, p);
  while (x < n) {
    const enc_u8 c = class_at(m, d, n, x);
    const bool start = m.o200k ? o200k_span_start(pc, c) : enc_cl_span_start(pc, c, m.gpt2);
    if (start) return x;
    pc = c;
    x += enc_utf8_len(d[x]);
  }
  return n;
}

// The UTF-8 of document d, where it can be read in place (kind 0, or made first), else nullptr.
inline const enc_u8* utf8_in_place(const EncCpuBatch& B, enc_u64 d) {
  return B.kind[d] == 0 ? reinterpret_cast<const enc_u8*>(B.addr[d]) : nullptr;
}

// Document d's bytes [a, e) into the thread's text buffer, padded: nullptr without memory.
inline enc_u8* load(const EncCpuBatch& B, const enc_u8* wide, enc_u64 d, enc_u64 a, enc_u64 e,
                    EncCpuBuf& text) {
  enc_u8* t = text.room(e - a);
  if (t == nullptr) return nullptr;
  const enc_u8* src = wide != nullptr ? wide : utf8_in_place(B, d);
  if (src != nullptr) {
    memcpy(t, src + a, (size_t)(e - a));
  } else {  // a str's code units, the whole document (a sliced one was made first)
    gputok_pack_utf8(B.addr + d, B.kind + d, B.units + d, 1, t);
  }
  text.pad(e - a);
  return t;
}

// The ids of text[0 .. n) up to `stop` (a slice ends at a piece start; the bytes after it are
// in view): segments between special tokens, the tokens' ids. Returns the end of the ids, or
// nullptr (failed, or a refused token: recorded in B).
inline enc_u32* encode_text(EncCpuBatch& B, EncCpuWork& wk, enc_u64 d, enc_u64 base,
                            enc_u8* text, enc_i64 n, enc_i64 stop, enc_u32* out) {
  enc_u32 tok = 0;
  const enc_i64 refused = enc_cpu_find_special(B.sp, 0, text, 0, stop, &tok);
  if (refused < stop) {  // keep the first in document order
    std::lock_guard<std::mutex> lk(B.bad_lock);
    if (d < B.bad_doc.load()) {
      B.bad_pos = base + (enc_u64)refused;
      B.bad_tok = tok;
      B.bad_doc.store(d);
    }
    return nullptr;
  }
  enc_i64 i = 0;
  while (i < stop) {
    const enc_i64 s = enc_cpu_find_special(B.sp, 1, text, i, stop, &tok);
    if (s > i) {  // the segment [i, s): its end padded while it is encoded
      enc_u8 keep[ENC_CPU_PAD];
      const enc_i64 seg_end = s < stop ? s : n;  // a slice's segment sees its lookahead
      const bool cut = seg_end < n;
      if (cut) {
        memcpy(keep, text + seg_end, ENC_CPU_PAD);
        memset(text + seg_end, 0xFF, ENC_CPU_PAD);
      }
      enc_u32* got = nullptr;
      enc_i64 end_at = 0;
      if (B.m.o200k) {
        EncCpuO2Text t = enc_cpu_text<EncCpuO2Text>(B.m, text + i, seg_end - i);
        got = enc_cpu_segment_to(B.m, B.cache, wk, t, s - i, out, &end_at);
      } else {
        EncCpuClText t = enc_cpu_text<EncCpuClText>(B.m, text + i, seg_end - i);
        got = enc_cpu_segment_to(B.m, B.cache, wk, t, s - i, out, &end_at);
      }
      if (cut) memcpy(text + seg_end, keep, ENC_CPU_PAD);
      if (got == nullptr) {
        B.failed.store(1);
        return nullptr;
      }
      if (end_at != s - i) {  // a piece past the slice's end (see the file's comment)
        B.failed.store(2);
        return nullptr;
      }
      out = got;
    }
    if (s < stop) {
      *out++ = B.sp.ids[tok];
      i = s + (B.sp.off[tok + 1] - B.sp.off[tok]);
    } else {
      i = stop;
    }
  }
  return out;
}

// Does document d's text (n bytes) need the normaliser (THE QUICK CHECK anywhere)?
inline bool needs_normal(const EncCpuBatch& B, const enc_u8* text, enc_i64 n) {
  for (enc_i64 i = 0; i < n; ++i)
    if (text[i] >= 0x80 && nfc_unsafe_at(text, n, B.nfc_bits, i)) return true;
  return false;
}

thread_local unsigned long long tl_serial = 0;
thread_local EncCpuArena* tl_arena = nullptr;

// Unit u (on whichever thread takes it): each of its parts' ids into the thread's arena.
inline void run_unit(EncCpuBatch& B, enc_u64 u) {
  if (B.failed.load(std::memory_order_relaxed)) return;
  if (tl_serial != B.serial) {  // this thread's first unit of the batch: an arena of its own
    tl_serial = B.serial;
    tl_arena = &B.arenas[B.next_arena.fetch_add(1)];
  }
  EncCpuArena& arena = *tl_arena;
  EncCpuWork& wk = enc_cpu_work();
  const enc_u64 p0 = u ? B.unit_end[u - 1] : 0;
  for (enc_u64 p = p0; p < B.unit_end[u]; ++p) {
    const EncCpuPart& part = B.parts[p];
    const enc_u64 d = part.doc;
    if (d > B.bad_doc.load(std::memory_order_relaxed)) break;  // after a refused token
    const enc_u64 n_doc = (enc_u64)B.nbytes[d];
    const enc_u64 view = part.b + ENC_CPU_LOOK < n_doc ? part.b + ENC_CPU_LOOK : n_doc;
    enc_u8* text = load(B, B.wide[d], d, part.a, view, wk.text);
    enc_u32* out = arena.room(view - part.a + 2 * ENC_CPU_SLOT_IDS);
    if (text == nullptr || out == nullptr) {
      B.failed.store(1);
      return;
    }
    if (B.nfc_bits != nullptr && needs_normal(B, text, (enc_i64)(view - part.a))) {
      B.flagged[d] = 1;  // (a sliced document's every part says so: same value)
      B.ids[p] = out;
      B.count[p] = 0;
      continue;
    }
    enc_u32* end = encode_text(B, wk, d, part.a, text, (enc_i64)(view - part.a),
                               (enc_i64)(part.b - part.a), out);
    if (end == nullptr) break;
    B.ids[p] = out;
    B.count[p] = (enc_u64)(end - out);
    arena.used(B.count[p]);
  }
  enc_cpu_count(B.cache, wk);
}

void run_unit_call(void** args) {
  run_unit(**static_cast<EncCpuBatch**>(args[0]), enc_host_block_idx.x);
}

struct CopyArgs {
  EncCpuBatch* B;
  const enc_u64* pos;  // per part: where its ids go
  void* out;
  int u16;
};

void copy_unit_call(void** args) {
  const CopyArgs& c = **static_cast<CopyArgs**>(args[0]);
  const EncCpuBatch& B = *c.B;
  const enc_u64 u = enc_host_block_idx.x;
  for (enc_u64 p = u ? B.unit_end[u - 1] : 0; p < B.unit_end[u]; ++p) {
    const enc_u32* src = B.ids[p];
    const enc_u64 k = B.count[p];
    if (c.u16) {
      enc_u16* dst = static_cast<enc_u16*>(c.out) + c.pos[p];
      for (enc_u64 j = 0; j < k; ++j) dst[j] = (enc_u16)src[j];
    } else {
      memcpy(static_cast<enc_u32*>(c.out) + c.pos[p], src, 4 * k);
    }
  }
}

std::atomic<unsigned long long> g_serial{0};

}  // namespace enc_cpu

// The batch's parts and units (document order), the UTF-8 of sliced str documents made first.
// false without memory.
inline bool enc_cpu_plan(EncCpuBatch& B) {
  enc_u64 unit_bytes = 0;
  for (enc_u64 d = 0; d < B.n_docs; ++d) {
    const enc_u64 n = (enc_u64)B.nbytes[d];
    if (n <= ENC_CPU_PART_MAX || B.sp.count || B.nfc_bits != nullptr) {
      // (a document with tokens to find or a normaliser to check stays whole)
      B.parts.push_back(EncCpuPart{d, 0, n});
      unit_bytes += n;
      if (unit_bytes >= ENC_CPU_UNIT_BYTES) {
        B.unit_end.push_back(B.parts.size());
        unit_bytes = 0;
      }
      continue;
    }
    if (unit_bytes) {
      B.unit_end.push_back(B.parts.size());
      unit_bytes = 0;
    }
    const enc_u8* src = enc_cpu::utf8_in_place(B, d);
    if (src == nullptr) {  // a long str: its UTF-8 first (each slice reads it)
      enc_u8* w = static_cast<enc_u8*>(malloc(n ? n : 1));
      if (w == nullptr) return false;
      B.wide[d] = w;
      gputok_pack_utf8(B.addr + d, B.kind + d, B.units + d, 1, w);
      src = w;
    }
    enc_u64 a = 0;
    while (a < n) {
      const enc_u64 b =
          a + ENC_CPU_PART_MAX >= n
              ? n
              : (enc_u64)enc_cpu::cut_at(B.m, src, (enc_i64)n, (enc_i64)(a + ENC_CPU_PART_MAX));
      B.parts.push_back(EncCpuPart{d, a, b});
      B.unit_end.push_back(B.parts.size());
      a = b;
    }
    if (n == 0) {
      B.parts.push_back(EncCpuPart{d, 0, 0});
      B.unit_end.push_back(B.parts.size());
    }
  }
  if (unit_bytes || B.unit_end.empty() || B.unit_end.back() != B.parts.size())
    B.unit_end.push_back(B.parts.size());
  return true;
}

// Run a batch: the documents (addr, kind, units, nbytes: n_docs each), the model (tab), its
// piece cache (or nullptr), its tokens to find (specials: count, bytes, off, ids, active; count
// 0: none), THE QUICK CHECK's bitmap (nullptr: no normaliser), on `threads` threads. Returns
// the batch (for gputok_cpu_batch_take / _free) and its id count in *total; its status in
// *status: 0 done, 1 no memory, 2 a piece past a slice's end (a bug: nothing is returned),
// 3 a refused token (*bad: document, byte offset, token index), 4 documents for the normaliser
// (flags: one byte per document, 1 where it was not encoded).
ENC_HOST_EXPORT void* gputok_cpu_batch_run(const long long* addr, const signed char* kind,
                                           const long long* units, const long long* nbytes,
                                           long long n_docs, const unsigned long long* tab,
                                           void* cache, unsigned sp_count,
                                           const unsigned char* sp_bytes,
                                           const unsigned* sp_off, const unsigned* sp_ids,
                                           const unsigned char* sp_active,
                                           const unsigned* nfc_bits, int threads,
                                           long long* total, int* status,
                                           unsigned long long* bad, unsigned char* flags) {
  EncCpuBatch* B = new (std::nothrow) EncCpuBatch();
  *status = 1;
  *total = 0;
  if (B == nullptr) return nullptr;
  try {
    B->m = enc_cpu_model(tab);
    B->cache = static_cast<EncCpuCache*>(cache);
    B->sp = EncCpuSpecials{sp_bytes, sp_off, sp_ids, sp_active, sp_count, {0, 0}, {}};
    enc_cpu_specials_init(B->sp);
    B->nfc_bits = nfc_bits;
    B->addr = addr;
    B->kind = kind;
    B->units = units;
    B->nbytes = nbytes;
    B->n_docs = (enc_u64)n_docs;
    B->wide.assign(B->n_docs, nullptr);
    if (nfc_bits != nullptr) B->flagged.assign(B->n_docs, 0);
    if (!enc_cpu_plan(*B)) return B;
    B->ids.assign(B->parts.size(), nullptr);
    B->count.assign(B->parts.size(), 0);
    const int t = threads < 1 ? 1 : threads;
    B->arenas = std::vector<EncCpuArena>((size_t)t + 1);
    B->serial = ++enc_cpu::g_serial;
  } catch (const std::bad_alloc&) {
    return B;
  }
  const unsigned n_units = (unsigned)B->unit_end.size();
  void* args[1] = {&B};
  if (threads <= 1 || n_units <= 1) {
    for (unsigned u = 0; u < n_units; ++u) enc_cpu::run_unit(*B, u);
  } else {
    gputok_native_launch(enc_cpu::run_unit_call, n_units, 1, args,
                         threads < (int)n_units ? threads : (int)n_units);
  }
  enc_cpu::tl_serial = 0;  // (the calling thread's; a later batch may reuse the address)
  const int f = B->failed.load();
  if (f) {
    *status = f;
    return B;
  }
  if (B->bad_doc.load() != ~0ull) {
    bad[0] = B->bad_doc.load();
    bad[1] = B->bad_pos;
    bad[2] = B->bad_tok;
    *status = 3;
    return B;
  }
  long long sum = 0;
  for (enc_u64 c : B->count) sum += (long long)c;
  *total = sum;
  *status = 0;
  if (nfc_bits != nullptr) {
    bool any = false;
    for (enc_u64 d = 0; d < B->n_docs; ++d) {
      flags[d] = B->flagged[d];
      any |= B->flagged[d] != 0;
    }
    if (any) *status = 4;
  }
  return B;
}

// The ids of a run batch into out (its total, uint16 when u16, else uint32) and the document
// offsets into doc_off (n_docs + 1; a flagged document has no ids), on `threads` threads; the
// batch is freed.
ENC_HOST_EXPORT void gputok_cpu_batch_take(void* batch, void* out, int u16, long long* doc_off,
                                           int threads) {
  EncCpuBatch* B = static_cast<EncCpuBatch*>(batch);
  std::vector<enc_u64> pos(B->parts.size());
  enc_u64 at = 0;
  for (enc_u64 p = 0; p < B->parts.size(); ++p) {
    pos[p] = at;
    at += B->count[p];
  }
  enc_u64 p = 0;
  for (enc_u64 d = 0; d <= B->n_docs; ++d) {
    while (p < B->parts.size() && B->parts[p].doc < d) ++p;
    doc_off[d] = (long long)(p < B->parts.size() ? pos[p] : at);
  }
  enc_cpu::CopyArgs c{B, pos.data(), out, u16};
  enc_cpu::CopyArgs* cp = &c;
  void* args[1] = {&cp};
  const unsigned n_units = (unsigned)B->unit_end.size();
  if (threads <= 1 || n_units <= 1 || at < (1u << 18)) {
    for (unsigned u = 0; u < n_units; ++u) {
      enc_host_block_idx.x = u;
      enc_cpu::copy_unit_call(args);
    }
  } else {
    gputok_native_launch(enc_cpu::copy_unit_call, n_units, 1, args,
                         threads < (int)n_units ? threads : (int)n_units);
  }
  delete B;
}

ENC_HOST_EXPORT void gputok_cpu_batch_free(void* batch) {
  delete static_cast<EncCpuBatch*>(batch);
}
