// host_chunk.h: host only. One chunk's whole kernel sequence in two calls (three for a big
// chunk), on the calling thread: what DeviceBackend._kernels launches one by one for a chunk
// whose pieces are cut on the device (pre-tokenization, entries, merge, emit; no normaliser
// check, BPE models), for the native CPU device's chunk workers (each runs a chunk on one thread
// anyway: NativeDevice.chunk_inline). A chunk of a many-core batch then holds the Python
// interpreter's lock for two or three calls, not for ~20 launches and allocations (~0.3 ms a
// chunk, which 16 workers would take in turn), and a short text skips them too. Like
// host_merge.h it calls the kernels themselves, in the launch order of
// gputok/backends/device_stages.py, their signatures checked by the compiler: no kernel logic
// here, only the sequence, the entries as a list of starts (EncHostStarts: what the flags' scan
// and compaction give, in a sequential walk's form) and the prefix sum of the counts (the
// runtime's, on this thread).
//
//   gputok_native_chunk_pretok   pre-tokenization, the entries' starts listed as found: returns
//                                the entry count (the caller sizes the entry arrays by it, as
//                                the driver does)
//   gputok_native_chunk_finish   entries, merge (with the dedup set when given), the counts'
//                                scan: the chunk's id count; a small chunk's emit too
//   gputok_native_chunk_emit     a big chunk's emit, into an output of exactly that size
//
// Workspace (the caller's arrays, m = n + 2): mark, cls (uint8, m), ent (uint32, m: the starts,
// then the merge's scratch); then, for `cap` entries, pstart, spec, owner (cap), count
// (cap + 1), doc_entry (n_docs + 1). A chunk with a piece of ENC_LONG_PIECE bytes or more takes
// the long pieces' workspace from malloc (as rare as such pieces; ~20 bytes per byte of the
// chunk).

extern "C" int gputok_native_scan_u32(unsigned* a, long long n, int exclusive, int threads);

// (EncHostOneBlock: host_merge.h, before this file in the unit)

namespace {
// The entry starts of a chunk as THE SPAN WALK finds them walking the chunk in order on one
// thread (enc_span_kernel under EncHostOneBlock): a list, written over the flag array's own
// memory (the k-th start is at a byte >= k, so the list never overtakes the walk). This is the
// flags' exclusive scan and compaction (encode_scan.cu, encode_entries_compact) in the form a
// sequential walk has: entry e is the e-th start.
struct EncHostStarts {
  enc_u32* at;
  enc_u32 n;
};

__forceinline__ void enc_ent_put(EncHostStarts& out, enc_i64 i, enc_u32 flag) {
  if (flag) out.at[out.n++] = (enc_u32)i;
}

// The first entry whose start is at byte `pos` or after (the flags' exclusive scan at pos):
// a binary search of the ascending starts.
__forceinline__ enc_u32 enc_host_entry_at(const enc_u32* pstart, enc_u32 cap, enc_u32 pos) {
  enc_u32 lo = 0, hi = cap;
  while (lo < hi) {
    const enc_u32 mid = lo + (hi - lo) / 2;
    if (pstart[mid] < pos)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}
}  // namespace

// Pre-tokenization (DeviceStages.pretok) with its entries listed as found: ent[0 .. count)
// holds the byte of each entry's start (the sentinel's, n, last); returns the entry count.
extern "C" __attribute__((visibility("default"))) long long gputok_native_chunk_pretok(
    const enc_u8* buf, enc_i64 n, const enc_u32* mpos, const enc_u8* mbits, enc_i64 n_marks,
    const enc_u8* cls_table, const enc_u8* letters, enc_u32 n_letters, int o200k, int gpt2,
    int digit_group, int end_whole, enc_u8* mark, enc_u8* cls, enc_u32* ent) {
  const EncHostOneBlock shape;
  const enc_i64 m = n + 2;
  for (enc_i64 i = 0; i < m; ++i) mark[i] = 0;
  if (n_marks) encode_pretok_marks(mpos, mbits, n_marks, mark);
  EncHostStarts starts{ent, 0};
  if (o200k) {
    encode_o200k_classify(buf, n, mark, cls_table, cls);
    enc_o200k_spans_into(buf, n, mark, cls, letters, n_letters, starts);
  } else {
    encode_pretok_classify(buf, n, mark, cls_table, cls);
    enc_pretok_spans_into(buf, n, mark, cls, letters, n_letters, gpt2, digit_group, end_whole,
                          starts);
  }
  return starts.n;
}

// Emit (DeviceStages.emit) of a finished chunk into `out` (count[cap] ids: a big chunk's caller
// sizes it so, as a bound of one id per byte would page in ~4 bytes per byte, mostly unwritten).
extern "C" __attribute__((visibility("default"))) void gputok_native_chunk_emit(
    enc_u32 cap, const enc_u32* pstart, const enc_u32* owner, const enc_u32* count,
    const enc_u32* scratch, const enc_u32* doc_entry, enc_i64 n_docs, int out_u16, void* out,
    enc_i64* out_doc) {
  const EncHostOneBlock shape;
  if (out_u16) {
    encode_emit_u16(&cap, pstart, owner, count, scratch, static_cast<enc_u16*>(out),
                    (enc_i64)cap);
  } else {
    encode_emit_u32(&cap, pstart, owner, count, scratch, static_cast<enc_u32*>(out),
                    (enc_i64)cap);
  }
  encode_doc_offsets(doc_entry, count, n_docs + 1, out_doc);
}

// Entries (DeviceStages.entries), merge (DeviceStages.merge; dedup_bits 0: no dedup set, else
// dedup_slots has room for 1 << dedup_bits slots, emptied here) and the id counts' scan of the
// `cap` entries the pre-tokenization found, then the emit into `out` when it is given (a small
// chunk's caller sizes it by the bound, one id per byte, and saves a call). *ran_long: whether a
// long piece was merged. Returns 0, or -1 when the long pieces' workspace could not be
// allocated.
extern "C" __attribute__((visibility("default"))) int gputok_native_chunk_finish(
    const enc_u8* buf, enc_i64 n, const enc_u32* doc_off, enc_i64 n_docs, const enc_u32* sp_pos,
    const enc_u32* sp_id, enc_i64 n_spans, const enc_u32* w_slots, const enc_u8* w_tok_bytes,
    enc_u32 w_bits, const enc_u64* t_slots, enc_u32 t_bits, const enc_u32* byte_ids,
    const enc_u32* join, enc_u64* dedup_slots, enc_u32 dedup_bits, enc_u32 cap, enc_u32* ent,
    enc_u32* pstart, enc_u32* spec, enc_u32* owner, enc_u32* count, enc_u32* doc_entry,
    int* ran_long, int out_u16, void* out, enc_i64* out_doc) {
  const EncHostOneBlock shape;
  // the entries (encode_entries_compact, encode_entries_specials, encode_doc_entries) from the
  // list of starts: a special token's entry takes its id, the sentinel's is a gap; a document
  // and a special token start at the first entry at or after their byte
  for (enc_u32 e = 0; e < cap; ++e) {
    pstart[e] = ent[e];
    spec[e] = ENC_NORMAL;
  }
  spec[cap - 1] = ENC_GAP;
  for (enc_i64 k = 0; k < n_spans; ++k)
    spec[enc_host_entry_at(pstart, cap, sp_pos[k])] = sp_id[k];
  for (enc_i64 d = 0; d <= n_docs; ++d)
    doc_entry[d] = enc_host_entry_at(pstart, cap, doc_off[d]);
  // the starts are copied out: their n + 2 words hold the merge's scratch (n), as the launches
  // free the entry scan before the merge allocates (one 4-byte-per-byte array less per chunk)
  enc_u32* scratch = ent;
  count[cap] = 0;  // the spare slot the scan's total lands in
  if (dedup_bits)  // an empty dedup set (filled here: no interpreter lock held for it)
    for (enc_u64 k = 0; k < ((enc_u64)1 << dedup_bits); ++k) dedup_slots[k] = ENC_EMPTY_KEY;
  encode_piece_kind(buf, pstart, spec, &cap, w_slots, w_tok_bytes, w_bits, dedup_slots,
                    dedup_bits, owner, count, scratch, (enc_i64)cap);
  // (prio_ws: the host form of encode_merge_short never touches it, see ENC_HOST_MERGE_LANES)
  encode_merge_short(buf, pstart, &cap, owner, t_slots, t_bits, byte_ids, scratch, nullptr,
                     count, (enc_i64)cap);
  bool has_long = false;
  for (enc_u32 e = 0; e + 1 < cap && !has_long; ++e)
    has_long = pstart[e + 1] - pstart[e] >= ENC_LONG_PIECE;
  *ran_long = has_long;
  if (has_long) {
    const enc_u64 units = (enc_u64)n / ENC_LONG_PIECE + 2;
    // where (the rounds' priorities), next, prev and the block sizes (uint32); keys, tree (uint64)
    enc_u32* w32 = static_cast<enc_u32*>(malloc(4 * (4 * (enc_u64)n + units)));
    enc_u64* w64 = static_cast<enc_u64*>(malloc(8 * ((enc_u64)n + 2 * units)));
    const bool ok = w32 != nullptr && w64 != nullptr;
    if (ok)
      encode_merge_long(buf, pstart, &cap, owner, t_slots, t_bits, byte_ids, join, scratch, w32,
                        w32 + n, w32 + 2 * n, w64, w64 + n, w32 + 3 * n, count, (enc_i64)cap);
    free(w32);
    free(w64);
    if (!ok) return -1;
  }
  if (dedup_bits) encode_dup_counts(&cap, owner, count, (enc_i64)cap);
  gputok_native_scan_u32(count, (long long)cap + 1, 1, 1);  // count[cap]: the chunk's id count
  if (out != nullptr)
    gputok_native_chunk_emit(cap, pstart, owner, count, scratch, doc_entry, n_docs, out_u16, out,
                             out_doc);
  return 0;
}

// One short text, its whole sequence in one call (NativeDevice.text_short, for
// DeviceBackend.encode_short): pre-tokenization of one document with one segment (its marks at
// 0 and n, mbits: the segment's bits), then gputok_native_chunk_finish with its emit, the
// workspace this thread's own and kept between calls (a short text is at most ~64 KB): the
// interpreter's glue of the two calls (~15 arrays and addresses, ~20 us a call) was more than
// the kernels of a 1,000-character text. tab: the model's tables and scalars (ENC_TAB_*,
// NativeDevice._text_tab); dedup_per_entry: the dedup set's slots per entry (0: none), sized
// as DeviceStages.merge sizes it. The ids go to out (room for max(n, 1), uint16 or uint32);
// returns their count, or -1 when there is no memory for the workspace.
enum {
  ENC_TAB_W_SLOTS,
  ENC_TAB_W_TOK_BYTES,
  ENC_TAB_T_SLOTS,
  ENC_TAB_BYTE_IDS,
  ENC_TAB_JOIN,
  ENC_TAB_CLS_TABLE,
  ENC_TAB_LETTERS,
  ENC_TAB_W_BITS,
  ENC_TAB_T_BITS,
  ENC_TAB_N_LETTERS,
  ENC_TAB_O200K,
  ENC_TAB_GPT2,
  ENC_TAB_DIGIT_GROUP,
  ENC_TAB_END_WHOLE,
  ENC_TAB_WORDS
};

namespace {
struct EncHostShortWork {  // a thread's workspace, grown to the largest text it met
  enc_u64* mem = nullptr;
  enc_u64 words = 0;
  ~EncHostShortWork() { free(mem); }
  enc_u64* get(enc_u64 want) {
    if (words < want) {
      free(mem);
      mem = static_cast<enc_u64*>(malloc(8 * want));
      words = mem != nullptr ? want : 0;
    }
    return mem;
  }
};
}  // namespace

extern "C" __attribute__((visibility("default"))) long long gputok_native_text_short(
    const enc_u8* buf, enc_i64 n, const enc_u64* tab, const enc_u8* mbits,
    double dedup_per_entry, int out_u16, void* out, int* ran_long) {
  thread_local EncHostShortWork first, second;
  static enc_u64 no_dedup[1];  // (never read with dedup_bits 0)
  const enc_u64 m = (enc_u64)n + 2;
  // mark, cls (m bytes each), then ent (m uint32)
  const enc_u64 bytes_mc = (2 * m + 7) & ~(enc_u64)7;
  enc_u64* w1 = first.get(bytes_mc / 8 + (m + 1) / 2);
  if (w1 == nullptr) return -1;
  enc_u8* mark = reinterpret_cast<enc_u8*>(w1);
  enc_u32* ent = reinterpret_cast<enc_u32*>(w1 + bytes_mc / 8);
  const enc_u32 mpos[2] = {0, (enc_u32)n};
  const enc_u32 cap = (enc_u32)gputok_native_chunk_pretok(
      buf, n, mpos, mbits, 2, reinterpret_cast<const enc_u8*>(tab[ENC_TAB_CLS_TABLE]),
      reinterpret_cast<const enc_u8*>(tab[ENC_TAB_LETTERS]), (enc_u32)tab[ENC_TAB_N_LETTERS],
      (int)tab[ENC_TAB_O200K], (int)tab[ENC_TAB_GPT2], (int)tab[ENC_TAB_DIGIT_GROUP],
      (int)tab[ENC_TAB_END_WHOLE], mark, mark + m, ent);
  // the dedup set (1 << dbits slots), then pstart, spec, owner (cap), count (cap + 1) and
  // doc_entry (2), as NativeDevice.chunk_inline lays them out
  enc_u32 dbits = 0;
  if (dedup_per_entry > 0) {
    const double want = (double)cap * dedup_per_entry;
    unsigned long long v = (unsigned long long)((want > 2.0 ? want : 2.0) - 1.0);
    enc_u32 bits = 0;
    while (v) {
      ++bits;
      v >>= 1;
    }
    dbits = bits > 4 ? bits : 4;
  }
  const enc_u64 slots = dbits ? (enc_u64)1 << dbits : 0;
  const enc_u64 words32 = 4 * (enc_u64)cap + 1 + 2;
  enc_u64* w2 = second.get(slots + (words32 + 1) / 2);
  if (w2 == nullptr) return -1;
  enc_u32* pstart = reinterpret_cast<enc_u32*>(w2 + slots);
  enc_u32* spec = pstart + cap;
  enc_u32* owner = spec + cap;
  enc_u32* count = owner + cap;
  enc_u32* doc_entry = count + cap + 1;
  enc_i64 out_doc[2];
  const enc_u32 doc_off[2] = {0, (enc_u32)n};
  const int status = gputok_native_chunk_finish(
      buf, n, doc_off, 1, nullptr, nullptr, 0,
      reinterpret_cast<const enc_u32*>(tab[ENC_TAB_W_SLOTS]),
      reinterpret_cast<const enc_u8*>(tab[ENC_TAB_W_TOK_BYTES]), (enc_u32)tab[ENC_TAB_W_BITS],
      reinterpret_cast<const enc_u64*>(tab[ENC_TAB_T_SLOTS]), (enc_u32)tab[ENC_TAB_T_BITS],
      reinterpret_cast<const enc_u32*>(tab[ENC_TAB_BYTE_IDS]),
      reinterpret_cast<const enc_u32*>(tab[ENC_TAB_JOIN]), dbits ? w2 : no_dedup, dbits, cap,
      ent, pstart, spec, owner, count, doc_entry, ran_long, out_u16, out, out_doc);
  if (status != 0) return -1;
  return out_doc[1];
}
