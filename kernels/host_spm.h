// host_spm.h: host only. A SentencePiece chunk's whole kernel sequence in one call on the
// calling thread (NativeDevice.spm_chunk, gputok/backends/native/spm.py): what
// gputok/backends/spm_device.py launches one by one (marks, THE SPM CUT, entries, the merge,
// THE UNK RUN, emit), so a chunk of a chunk workers' batch, or one text, holds the Python
// interpreter's lock for one call. Like host_chunk.h it has no rule of its own: the cut walks
// the chunk in order (enc_spm_starts at each character, its previous code point kept from the
// step before instead of decoded again) and lists the entries' starts as it finds them; each
// entry is enc_spm_entry of common/spm_rules.h; the fuse is enc_spm_fuse_drop.
//
//   gputok_native_spm_chunk   returns the id count (ids into out, document offsets into
//                             out_doc), -1 when there is no memory for the workspace
//   gputok_native_spm_norm    THE SPM NORMALISER over a chunk's pieces (segments and token
//                             spans), user-defined pieces included: each piece's length
//                             (measure), then its bytes (write); what encode_spm_norm_len and
//                             _write launch, as one call per pass (a model with user-defined
//                             pieces, whose trie those kernels do not take)
//   gputok_native_spm_ud_spans  the user-defined pieces of a chunk's segments (THE
//                             USER-DEFINED MATCH at each character, left to right): their count;
//                             the first cap written (a caller whose arrays were short calls again)
//   gputok_native_spm_text    one text, its normaliser and its user-defined pieces too
//
// The tables and scalars come as one array of words (tab, ENC_SPM_TAB_*: NativeDevice's
// spm_tab); out has room for n + (the dummies) ids, the most a chunk makes (spm_rules.h).
//
// Performance notes: a chunk's workspace (~18 bytes per byte) is this thread's own and kept
// between calls up to ENC_SPM_KEEP bytes (a short text's call then allocates nothing; a big
// chunk's is freed after it, as a chunk worker's would otherwise stay resident).

#include <vector>

enum {
  ENC_SPM_TAB_SYM,
  ENC_SPM_TAB_C_SLOTS,
  ENC_SPM_TAB_T_SLOTS,
  ENC_SPM_TAB_FIN,
  ENC_SPM_TAB_BYTE_IDS,
  ENC_SPM_TAB_C_BITS,
  ENC_SPM_TAB_T_BITS,
  ENC_SPM_TAB_FLAGS,
  ENC_SPM_TAB_UNK,
  ENC_SPM_TAB_SPACE_ID,
  ENC_SPM_TAB_FUSE,
  ENC_SPM_TAB_CM_UNITS,  // THE SPM NORMALISER's tables (normalizer "rewrite")
  ENC_SPM_TAB_CM_STRINGS,
  ENC_SPM_TAB_N_UNITS,
  ENC_SPM_TAB_N_STRINGS,
  ENC_SPM_TAB_NFLAGS,
  ENC_SPM_TAB_REWRITE,  // 1: a text is rewritten by THE SPM NORMALISER first
  ENC_SPM_TAB_UD,       // THE USER-DEFINED MATCH's trie (common/spm_norm_rules.h)
  ENC_SPM_TAB_N_UD,     // its length (0: no user-defined pieces)
  ENC_SPM_TAB_MODEL,    // the model's serial number in this process (never reused: the memos')
  ENC_SPM_TAB_WORDS
};

#define ENC_SPM_KEEP (4u << 20)

namespace {
struct EncSpmWork {  // a thread's workspace
  enc_u64* mem = nullptr;
  enc_u64 words = 0;
  ~EncSpmWork() { free(mem); }
  enc_u64* get(enc_u64 want) {
    if (words < want || (words * 8 > ENC_SPM_KEEP && want * 16 < words)) {
      free(mem);
      mem = static_cast<enc_u64*>(malloc(8 * want));
      words = mem != nullptr ? want : 0;
    }
    return mem;
  }
  void trim() {
    if (words * 8 > ENC_SPM_KEEP) {
      free(mem);
      mem = nullptr;
      words = 0;
    }
  }
};

// A thread's memo of merged spans (a span's bytes and dummy bit -> its ids) for one model at a
// time (ENC_SPM_TAB_MODEL; another model's chunk starts it over): a span of ordinary text is
// merged once, then copied. It fills up to ENC_SPM_MEMO_SPANS spans or ENC_SPM_MEMO_BYTES
// bytes and starts over; spans past ENC_SPM_MEMO_LONGEST bytes are merged every time.
//
// Performance notes: the merge probes the pair table (most probes a cache miss) for every
// symbol of every span, 57% of a prose batch's cycles with no memo; words repeat (the 1 MB
// corpora have 10-25% distinct spans), so most spans become one probe and a copy.
#define ENC_SPM_MEMO_SPANS (1u << 15)
#define ENC_SPM_MEMO_BYTES (1u << 20)
#define ENC_SPM_MEMO_LONGEST 64u

struct EncSpmMemo {
  enc_u64 model = 0;            // 0: empty
  std::vector<enc_u8> keys;     // the spans' bytes, one after another
  std::vector<enc_u32> rec;     // per span: key offset, key bytes | dummy << 31, ids, the ids
  std::vector<enc_u32> slot;    // record index + 1 (0: empty)
  enc_u32 spans = 0;

  void reset(enc_u64 owner) {
    model = owner;
    keys.clear();
    rec.clear();
    slot.assign(2 * ENC_SPM_MEMO_SPANS, 0u);  // load <= 1/2
    spans = 0;
  }
  static enc_u64 hash(const enc_u8* p, enc_u32 n, enc_u32 dummy) {
    enc_u64 h = 1469598103934665603ull ^ dummy;
    for (enc_u32 i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  // the record of span p[0, n) with its dummy bit: (ids, the ids...), or null
  const enc_u32* get(enc_u64 h, const enc_u8* p, enc_u32 key) const {
    const enc_u32 m = (enc_u32)slot.size() - 1;
    const enc_u32 n = key & 0x7FFFFFFFu;
    for (enc_u32 s = (enc_u32)h & m;; s = (s + 1) & m) {
      const enc_u32 r = slot[s];
      if (r == 0) return nullptr;
      const enc_u32* q = rec.data() + (r - 1);
      if (q[1] != key) continue;
      const enc_u8* k = keys.data() + q[0];
      enc_u32 i = 0;
      while (i < n && k[i] == p[i]) ++i;
      if (i == n) return q + 2;
    }
  }
  void put(enc_u64 h, const enc_u8* p, enc_u32 key, const enc_u32* ids, enc_u32 count) {
    const enc_u32 n = key & 0x7FFFFFFFu;
    if (spans + 1 > ENC_SPM_MEMO_SPANS || keys.size() + n > ENC_SPM_MEMO_BYTES) reset(model);
    const enc_u32 m = (enc_u32)slot.size() - 1;
    enc_u32 s = (enc_u32)h & m;
    while (slot[s] != 0) s = (s + 1) & m;
    slot[s] = (enc_u32)rec.size() + 1;
    rec.push_back((enc_u32)keys.size());
    rec.push_back(key);
    rec.push_back(count);
    rec.insert(rec.end(), ids, ids + count);
    keys.insert(keys.end(), p, p + n);
    ++spans;
  }
};

__forceinline__ EncSpm enc_spm_of(const enc_u64* tab) {
  EncSpm m;
  m.sym = reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_SYM]);
  m.cuts.slots = reinterpret_cast<const enc_u64*>(tab[ENC_SPM_TAB_C_SLOTS]);
  m.cuts.bits = (enc_u32)tab[ENC_SPM_TAB_C_BITS];
  m.pairs.slots = reinterpret_cast<const enc_u64*>(tab[ENC_SPM_TAB_T_SLOTS]);
  m.pairs.bits = (enc_u32)tab[ENC_SPM_TAB_T_BITS];
  m.fin = reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_FIN]);
  m.byte_ids = reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_BYTE_IDS]);
  m.flags = (enc_u32)tab[ENC_SPM_TAB_FLAGS];
  m.unk = (enc_u32)tab[ENC_SPM_TAB_UNK];
  m.space_id = (enc_u32)tab[ENC_SPM_TAB_SPACE_ID];
  return m;
}

__forceinline__ EncCharsMap enc_spm_cm_of(const enc_u64* tab) {
  EncCharsMap cm{reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_CM_UNITS]),
                 (enc_u32)tab[ENC_SPM_TAB_N_UNITS],
                 reinterpret_cast<const enc_u8*>(tab[ENC_SPM_TAB_CM_STRINGS]),
                 (enc_u32)tab[ENC_SPM_TAB_N_STRINGS], (enc_u32)tab[ENC_SPM_TAB_NFLAGS],
                 reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_UD]),
                 (enc_u32)tab[ENC_SPM_TAB_N_UD]};
  return cm;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) long long gputok_native_spm_chunk(
    const enc_u8* buf, enc_i64 n, const enc_u32* doc_off, enc_i64 n_docs, const enc_u32* mpos,
    const enc_u8* mbits, enc_i64 n_marks, const enc_u32* sp_pos, const enc_u32* sp_id,
    enc_i64 n_spans, const enc_u64* tab, int out_u16, void* out, enc_i64* out_doc) {
  thread_local EncSpmWork work;
  const EncSpm m = enc_spm_of(tab);
  const enc_u64 room = 2 * (enc_u64)n + 2;  // entries <= n + 1: offsets pstart[e] + e < room
  // mark (n + 2 bytes), then pstart, spec (n + 2 each), count (n + 3), scratch and where (room)
  const enc_u64 w8 = ((enc_u64)n + 2 + 7) / 8;
  const enc_u64 w32 = 3 * ((enc_u64)n + 2) + 1 + 2 * room;
  enc_u64* mem = work.get(w8 + (w32 + 1) / 2);
  if (mem == nullptr) return -1;
  enc_u8* mark = reinterpret_cast<enc_u8*>(mem);
  enc_u32* pstart = reinterpret_cast<enc_u32*>(mem + w8);
  enc_u32* spec = pstart + (n + 2);
  enc_u32* count = spec + (n + 2);
  enc_u32* scratch = count + (n + 3);
  enc_u32* where = scratch + room;
  for (enc_i64 i = 0; i < n + 2; ++i) mark[i] = 0;
  for (enc_i64 k = 0; k < n_marks; ++k) mark[mpos[k]] = mbits[k];
  // THE SPM CUT, walked in order: the entries' starts as found
  enc_u32 cap = 0;
  enc_u32 a = 0, kp = 0;
  for (enc_i64 i = 0; i < n;) {
    const enc_u32 k = mark[i];
    const int len = enc_utf8_len(buf[i]);
    const enc_u32 b = enc_spm_cp(m, buf, i, n);
    if (i == 0 ? !((k & ENC_OUTSIDE) && !(k & ENC_SPECIAL_START))
               : enc_spm_starts(m, k, kp, a, b))
      pstart[cap++] = (enc_u32)i;
    a = b;
    kp = mark[i + len - 1];
    i += len;
  }
  pstart[cap++] = (enc_u32)n;  // the sentinel
  for (enc_u32 e = 0; e < cap; ++e) spec[e] = ENC_NORMAL;
  spec[cap - 1] = ENC_GAP;
  for (enc_i64 k = 0; k < n_spans; ++k) {  // (both lists ascend)
    enc_u32 lo = 0, hi = cap;
    while (lo < hi) {
      const enc_u32 mid = lo + (hi - lo) / 2;
      if (pstart[mid] < sp_pos[k]) lo = mid + 1; else hi = mid;
    }
    spec[lo] = sp_id[k];
  }
  // the merge; the long spans' workspace only when there is one
  bool has_long = false;
  for (enc_u32 e = 0; e + 1 < cap && !has_long; ++e)
    has_long = pstart[e + 1] - pstart[e] + 1 >= ENC_LONG_PIECE;
  enc_u32* w32l = nullptr;
  enc_u64* w64l = nullptr;
  const enc_u64 units = room / ENC_LONG_PIECE + 2;
  if (has_long) {
    w32l = static_cast<enc_u32*>(malloc(4 * (2 * room + units)));
    w64l = static_cast<enc_u64*>(malloc(8 * (room + 2 * units)));
    if (w32l == nullptr || w64l == nullptr) {
      free(w32l);
      free(w64l);
      return -1;
    }
  }
  EncLongWork ws;
  ws.where = where;
  ws.nxt = w32l;
  ws.prv = w32l != nullptr ? w32l + room : nullptr;
  ws.size = w32l != nullptr ? w32l + 2 * room : nullptr;
  ws.heap = w64l;
  ws.tree = w64l != nullptr ? w64l + room : nullptr;
  thread_local EncSpmMemo memo;
  if (memo.model != tab[ENC_SPM_TAB_MODEL]) memo.reset(tab[ENC_SPM_TAB_MODEL]);
  for (enc_u32 e = 0; e < cap; ++e) {
    const enc_u32 s = pstart[e], sp = spec[e], o = s + e;
    const enc_u32 end = sp == ENC_NORMAL ? pstart[e + 1] : s;
    const bool dummy = sp != ENC_GAP && (mark[s] & ENC_SPM_DUMMY) != 0;
    if (sp != ENC_NORMAL || end - s > ENC_SPM_MEMO_LONGEST) {
      count[e] = enc_spm_entry(m, buf, s, end, sp, dummy, scratch + o, ws, o);
      continue;
    }
    const enc_u32 key = (end - s) | (dummy ? 0x80000000u : 0u);
    const enc_u64 h = EncSpmMemo::hash(buf + s, end - s, dummy ? 1u : 0u);
    const enc_u32* q = memo.get(h, buf + s, key);
    if (q != nullptr) {
      for (enc_u32 i = 0; i < q[0]; ++i) scratch[o + i] = q[1 + i];
      count[e] = q[0];
    } else {
      count[e] = enc_spm_entry(m, buf, s, end, sp, dummy, scratch + o, ws, o);
      memo.put(h, buf + s, key, scratch + o, count[e]);
    }
  }
  free(w32l);
  free(w64l);
  // THE UNK RUN, then the emit (each entry's ids from scratch[pstart[e] + e + drop])
  enc_i64 total = 0;
  enc_i64 d = 0;
  enc_u32 prev_count = 0;
  for (enc_u32 e = 0; e < cap; ++e) {
    for (; d <= n_docs && doc_off[d] <= pstart[e]; ++d)
      out_doc[d] = total;  // a document starts at its first entry (at or after its offset)
    const enc_u32 c = count[e];
    const enc_u32 o = pstart[e] + e;
    enc_u32 drop = 0;
    if (tab[ENC_SPM_TAB_FUSE] && e > 0 && c > 0) {
      const enc_u32 po = pstart[e - 1] + (e - 1);
      drop = enc_spm_fuse_drop(m.unk, spec[e], spec[e - 1],
                               (mark[pstart[e]] & ENC_SEG_START) != 0, scratch[o], c,
                               prev_count ? scratch[po + prev_count - 1] : 0u, prev_count);
    }
    prev_count = c;
    if (out_u16) {
      enc_u16* dst = static_cast<enc_u16*>(out) + total;
      for (enc_u32 q = drop; q < c; ++q) dst[q - drop] = (enc_u16)scratch[o + q];
    } else {
      enc_u32* dst = static_cast<enc_u32*>(out) + total;
      for (enc_u32 q = drop; q < c; ++q) dst[q - drop] = scratch[o + q];
    }
    total += c - drop;
  }
  for (; d <= n_docs; ++d) out_doc[d] = total;
  work.trim();
  return total;
}

extern "C" __attribute__((visibility("default"))) long long gputok_native_spm_norm(
    const enc_u8* buf, const enc_u32* p_src, const enc_u32* p_len, const enc_u8* p_kind,
    enc_i64 k, const enc_u64* tab, const enc_u32* p_dst, enc_u32* out_len, enc_u8* out) {
  const EncCharsMap cm = enc_spm_cm_of(tab);
  enc_i64 total = 0;
  for (enc_i64 q = 0; q < k; ++q) {
    if (out == nullptr) {  // measure
      EncNormOut o{nullptr, false, 0, 0, 0};
      out_len[q] = p_kind[q] ? p_len[q]
                             : enc_spm_normalize(cm, buf, p_src[q], p_src[q] + p_len[q], o);
    } else if (p_kind[q]) {  // a token span: its bytes as they are
      for (enc_u32 i = 0; i < p_len[q]; ++i) out[p_dst[q] + i] = buf[p_src[q] + i];
    } else {
      EncNormOut o{out + p_dst[q], true, out_len[q], 0, 0};
      enc_spm_normalize(cm, buf, p_src[q], p_src[q] + p_len[q], o);
    }
    total += out_len[q];
  }
  return total;
}

extern "C" __attribute__((visibility("default"))) long long gputok_native_spm_ud_spans(
    const enc_u8* buf, const enc_u32* lo, const enc_u32* hi, enc_i64 n_segs, const enc_u64* tab,
    enc_u32* out_start, enc_u32* out_end, enc_u32* out_id, enc_i64 cap) {
  const enc_u32* ud = reinterpret_cast<const enc_u32*>(tab[ENC_SPM_TAB_UD]);
  const enc_u32 n_ud = (enc_u32)tab[ENC_SPM_TAB_N_UD];
  enc_i64 count = 0;
  enc_u32 id = 0;
  for (enc_i64 k = 0; k < n_segs; ++k) {
    for (enc_u32 i = lo[k], end = hi[k]; i < end;) {
      const enc_u32 u = enc_ud_match(ud, n_ud, buf, i, end, &id);
      if (u == 0) {
        i += (enc_u32)enc_utf8_len(buf[i]);
        continue;
      }
      if (count < cap) {
        out_start[count] = i;
        out_end[count] = i + u;
        out_id[count] = id;
      }
      ++count;
      i += u;
    }
  }
  return count;
}

// One text of one segment (no token span: the caller checked), the chunk call with its marks
// and its id count written to out, which has room for out_cap ids: Encoding.encode's text in one
// call with no array made on the way (NativeDevice.spm_text_call). A model whose normaliser
// rewrites the text (ENC_SPM_TAB_REWRITE) has it rewritten first, THE SPM NORMALISER into this
// thread's buffer (measured, then written). A model with user-defined pieces has them found in
// the (normalised) text, THE USER-DEFINED MATCH at each character left to right, each one span:
// OUTSIDE bytes, SPECIAL_START first, its id (spm_plan.user_defined_spans's marks). Returns the
// id count; -1 without memory; -(2 + k) when out has room for fewer than the k ids the text may
// make (the caller grows it and calls again).
extern "C" __attribute__((visibility("default"))) long long gputok_native_spm_text(
    const enc_u8* buf, enc_i64 n, const enc_u64* tab, int seg_bits, int out_u16, void* out,
    enc_i64 out_cap) {
  thread_local EncSpmWork norm, spans;
  const EncCharsMap cm = enc_spm_cm_of(tab);
  if (tab[ENC_SPM_TAB_REWRITE] && n > 0) {
    EncNormOut o{nullptr, false, 0, 0, 0};
    const enc_u32 len = enc_spm_normalize(cm, buf, 0, (enc_u32)n, o);
    if ((enc_i64)len + 1 > out_cap) return -2 - ((enc_i64)len + 1);
    enc_u8* text = reinterpret_cast<enc_u8*>(norm.get(((enc_u64)len + 8) / 8));
    if (text == nullptr) return -1;
    EncNormOut w{text, true, len, 0, 0};
    enc_spm_normalize(cm, buf, 0, (enc_u32)n, w);
    buf = text;
    n = len;
    seg_bits &= ~ENC_SPM_DUMMY;  // (the rewritten text has its dummy)
  } else if (n + 1 > out_cap) {
    return -2 - (n + 1);
  }
  const enc_u32 doc_off[2] = {0, (enc_u32)n};
  enc_u32 one_pos[1] = {0};
  enc_u8 one_bits[1] = {(enc_u8)seg_bits};
  const enc_u32* mpos = one_pos;
  const enc_u8* mbits = one_bits;
  const enc_u32* sp_pos = nullptr;
  const enc_u32* sp_id = nullptr;
  enc_i64 n_marks = n > 0 ? 1 : 0, n_spans = 0;
  enc_u32 id = 0;
  enc_i64 first = 0;  // the first user-defined piece (none: n)
  while (first < n && enc_ud_match(cm.ud, cm.n_ud, buf, (enc_u32)first, (enc_u32)n, &id) == 0)
    first += enc_utf8_len(buf[first]);
  if (first < n) {  // marks (at most one a byte), spans (at most one a byte)
    enc_u64* mem = spans.get(((enc_u64)n * 13 + 16) / 8);
    if (mem == nullptr) return -1;
    enc_u32* pos = reinterpret_cast<enc_u32*>(mem);
    enc_u32* sps = pos + n + 1;
    enc_u32* sid = sps + n;
    enc_u8* bits = reinterpret_cast<enc_u8*>(sid + n);
    n_marks = 0;
    if (first > 0) {
      pos[0] = 0;
      bits[0] = (enc_u8)seg_bits;
      n_marks = 1;
    }
    for (enc_i64 i = first; i < n;) {
      const enc_u32 u = enc_ud_match(cm.ud, cm.n_ud, buf, (enc_u32)i, (enc_u32)n, &id);
      if (u == 0) {
        i += enc_utf8_len(buf[i]);
        continue;
      }
      sps[n_spans] = (enc_u32)i;
      sid[n_spans++] = id;
      for (enc_u32 q = 0; q < u; ++q) {
        pos[n_marks] = (enc_u32)i + q;
        bits[n_marks++] = (enc_u8)(ENC_OUTSIDE | (q == 0 ? ENC_SPECIAL_START : 0) |
                                   (i + q == 0 ? seg_bits : 0));
      }
      i += u;
    }
    mpos = pos;
    mbits = bits;
    sp_pos = sps;
    sp_id = sid;
  }
  enc_i64 out_doc[2];
  const long long got = gputok_native_spm_chunk(buf, n, doc_off, 1, mpos, mbits, n_marks, sp_pos,
                                                sp_id, n_spans, tab, out_u16, out, out_doc);
  norm.trim();
  spans.trim();
  return got;
}
