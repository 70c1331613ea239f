// encode_merge.cu: BPE of every entry of a chunk (driven by gputok/backends/driver.py).
//
// Entries (see encode_common.cuh): entry e covers bytes [pstart[e], pstart[e + 1]) of the
// chunk's buffer; spec[e] says whether it is a piece, a special token or the sentinel; the
// number of entries is read from *n_entries (device memory, so the host never waits for it).
// Each entry's ids are written to scratch[pstart[e] ...] (a piece of L bytes has at most L
// ids), its id count to count[e].
//
//   encode_piece_kind   specials and the sentinel; whole-piece lookup (a hash table of token
//                       bytes, hits verified by comparing the bytes); optional dedup of the
//                       remaining pieces (owner[e] = the first entry with the same bytes)
//   encode_merge_short  one thread per piece shorter than ENC_LONG_PIECE: the sequential rule
//                       (merge the lowest-priority pair, leftmost on ties, until none is left),
//                       in place in scratch with the pair priorities cached in prio_ws
//   encode_merge_long   one thread per long piece: the same rule, the piece first cut where no
//                       token has the two bytes on either side next to each other (no merge
//                       can cross there), each run merged on its own: short runs as above,
//                       long ones in O(L log L) with a doubly linked list of parts and an
//                       indexed 4-ary heap keyed by (priority, position), the array form of
//                       merge_long in stages/merge.py
//   encode_dup_counts   duplicates take their owner's count (after the merges)
//
// Performance notes (to measure on a GPU, see bench/bench_cuda.py):
// * merge_short works on global memory (scratch / prio_ws, L1-resident for short pieces) rather
//   than per-thread local arrays: no local-memory sizing to worry about, and the same code
//   serves every length below ENC_LONG_PIECE. A register/local fast path for L <= 16 (most
//   pieces that miss the whole-token table) is the first thing to try if merge_short shows up.
// * One thread per piece diverges within a warp (pieces differ in length); sorting pieces by
//   length, or a warp per long-ish piece, are the alternatives to measure.
// * On a CPU each merge step waits on the two probes of the pairs it made (~40% of
//   merge_short's time on multilingual text, perf): the native device keeps 8 pieces in flight
//   and steps them in turn (ENC_HOST_MERGE_LANES): 7.3 -> 4.4 ns per byte on cl100k prose,
//   23 -> 16.5 on o200k multilingual (one core; 4 and 16 lanes measured the same). Prefetching
//   the first pairs of pieces further ahead instead gained nothing.
// * Dedup is off by default: whole-token hits already skip merging for most pieces of natural
//   text, and dedup costs a hash insert per remaining piece. Measure both (--dedup in the bench).
// * merge_long is sequential per piece: fine for the rare whitespace runs and blobs, O(L log L)
//   where tiktoken is quadratic, but a single 10 MB piece keeps one thread busy for a while.
//
// The per-entry logic (whole-token lookup, the sequential rule, the heap of long pieces) is in
// common/encode_rules.h, shared with shaders/encode_piece_kind.metal, encode_merge_short.metal
// and encode_merge_long.metal; here are the loops over entries and the dedup, which claims its
// slots with a 64-bit compare-and-swap (CUDA and the CPU only: Metal has none).
#include "encode_common.cuh"

#define ENC_DEDUP_PROBES 32  // dedup table slots a piece looks at before it merges itself

#ifdef ENC_HOST_PREFETCH_AHEAD
// The native CPU device only (dialect_host.h defines ENC_HOST_PREFETCH_AHEAD): a CPU hides a
// table miss only by asking for the line early. Each short piece is hashed once, AHEAD entries
// before its turn: its whole-token slot and its dedup slot are prefetched then, and AHEAD / 2
// entries before its turn the token bytes that slot points at (the slot is in cache by then).
// The hash waits in a small ring, keyed by entry, until the piece's turn.
#define ENC_HOST_RING 64  // a power of two, > ENC_HOST_PREFETCH_AHEAD
struct EncHostAhead {
  enc_u64 h[ENC_HOST_RING];
  enc_i64 e[ENC_HOST_RING];
};

__forceinline__ void enc_host_ahead_init(EncHostAhead& a) {
  for (int k = 0; k < ENC_HOST_RING; ++k) a.e[k] = -1;
}

__forceinline__ bool enc_host_ahead(EncHostAhead& a, const enc_u8* buf, const enc_u32* pstart,
                                    const enc_u32* spec, enc_i64 n_ent, const EncWholeTable& w,
                                    const enc_u64* dedup_slots, enc_u32 dedup_bits, enc_i64 e,
                                    enc_u64* h) {
  const enc_i64 f = e + ENC_HOST_PREFETCH_AHEAD;
  if (f < n_ent && spec[f] == ENC_NORMAL) {
    const enc_u32 fs = pstart[f], fl = pstart[f + 1] - fs;
    // (a one-byte piece takes its id from the one-byte block: no hash, no probe)
    if (fl < ENC_LONG_PIECE && (fl > 1 || !(w.bits & ENC_WHOLE_BYTES))) {
      const enc_u64 fh = enc_bytes_hash(buf + fs, fl);
      a.h[f & (ENC_HOST_RING - 1)] = fh;
      a.e[f & (ENC_HOST_RING - 1)] = f;
      if (w.bits != 0) ENC_PREFETCH(w.slots + 4 * enc_whole_home(w, fh));
      if (dedup_bits != 0) ENC_PREFETCH(dedup_slots + (fh >> (64 - dedup_bits)));
    }
  }
  const enc_i64 g = e + ENC_HOST_PREFETCH_AHEAD / 2;
  if (w.bits != 0 && g < n_ent && a.e[g & (ENC_HOST_RING - 1)] == g) {
    const enc_u64 gh = a.h[g & (ENC_HOST_RING - 1)];
    const enc_u32* slot = w.slots + 4 * enc_whole_home(w, gh);
    if (slot[0] == (enc_u32)gh) ENC_PREFETCH(w.tok_bytes + slot[2]);
  }
  if (a.e[e & (ENC_HOST_RING - 1)] != e) return false;
  *h = a.h[e & (ENC_HOST_RING - 1)];
  return true;
}
#endif

#ifdef ENC_HOST_MERGE_LANES
// encode_merge_short on a CPU: a merge's next step waits on two table probes (the pairs it
// made), each a cache miss on a table of several MB, and a CPU thread has no other warp to run
// meanwhile. So it keeps ENC_HOST_MERGE_LANES pieces in flight and steps them in turn
// (enc_merge_step): one piece's new pairs are in cache by the time its turn comes back. Each
// lane merges in its own small arrays (a piece is shorter than ENC_LONG_PIECE), which stay in
// L1, and copies the final ids to scratch: prio_ws is never touched (~4 bytes of workspace per
// byte of text that a chunk no longer pages in).
// (a run that closes its gaps with enc_host_shift_block is at most ENC_HOST_SHIFT_BLOCK + 2
// long and reads up to ENC_HOST_SHIFT_BLOCK elements past its end: a lane's arrays have room)
static_assert(ENC_LONG_PIECE >= 2 * ENC_HOST_SHIFT_BLOCK + 2, "a merge lane's room");
struct EncHostLanes {
  enc_u32 ids[ENC_HOST_MERGE_LANES][ENC_LONG_PIECE];
  enc_u32 pr[ENC_HOST_MERGE_LANES][ENC_LONG_PIECE];
  EncMergeRun run[ENC_HOST_MERGE_LANES];
  enc_u32* out[ENC_HOST_MERGE_LANES];  // where the piece's ids go (scratch at its start)
  enc_i64 entry[ENC_HOST_MERGE_LANES];
  int busy[ENC_HOST_MERGE_LANES];  // busy[0 .. n): the lanes in use
  int n;
};

__forceinline__ void enc_host_lanes_init(EncHostLanes& l) {
  for (int k = 0; k < ENC_HOST_MERGE_LANES; ++k) l.busy[k] = k;
  l.n = 0;
}

// A piece into a free lane (there is one: the caller steps the lanes while all are busy).
__forceinline__ void enc_host_lanes_add(EncHostLanes& l, const EncMergeTable& t,
                                        const enc_u8* b, const enc_u32* byte_ids,
                                        enc_u32* out, enc_u32 len, enc_i64 e) {
  const int k = l.busy[l.n++];
  enc_merge_short_begin(t, l.run[k], b, byte_ids, l.ids[k], l.pr[k], len);
  l.run[k].roomy = true;
  l.out[k] = out;
  l.entry[k] = e;
}

// Every lane in use one step; a finished lane writes its ids and count, and is free again.
__forceinline__ void enc_host_lanes_step(EncHostLanes& l, const EncMergeTable& t,
                                         enc_u32* count) {
  for (int j = 0; j < l.n;) {
    const int k = l.busy[j];
    if (enc_merge_step(t, l.run[k])) {
      ++j;
      continue;
    }
    const enc_u32 c = l.run[k].len;
    for (enc_u32 q = 0; q < c; ++q) l.out[k][q] = l.ids[k][q];
    count[l.entry[k]] = c;
    l.busy[j] = l.busy[--l.n];
    l.busy[l.n] = k;
  }
}
#endif

extern "C" __global__ void encode_piece_kind(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ spec, const enc_u32* __restrict__ n_entries,
    const enc_u32* __restrict__ w_slots, const enc_u8* __restrict__ w_tok_bytes, enc_u32 w_bits,
    enc_u64* dedup_slots, enc_u32 dedup_bits, enc_u32* __restrict__ owner,
    enc_u32* __restrict__ count, enc_u32* __restrict__ scratch, enc_i64 cap) {
  const EncWholeTable w{w_slots, w_tok_bytes, w_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
#ifdef ENC_HOST_PREFETCH_AHEAD
  EncHostAhead ahead;
  enc_host_ahead_init(ahead);
#endif
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    enc_u64 ahead_h = 0;
    bool has_h = false;
#ifdef ENC_HOST_PREFETCH_AHEAD
    has_h = enc_host_ahead(ahead, buf, pstart, spec, n_ent, w, dedup_slots, dedup_bits, e,
                           &ahead_h);
#endif
    const enc_u32 s = pstart[e];
    // a piece is never the last entry; for the sentinel len is not used
    const enc_u32 len = spec[e] == ENC_NORMAL ? pstart[e + 1] - s : 0u;
    const EncKind k = enc_piece_kind_hashed(buf, s, len, spec[e], w, dedup_bits != 0, ahead_h,
                                              has_h);
    if (k.done) {
      owner[e] = ENC_DONE;
      count[e] = k.count;
      if (k.count) scratch[s] = k.id;
      continue;
    }
    const enc_u64 h = k.h;
    const enc_u8* p = buf + s;
    enc_u32 own = (enc_u32)e;
    if (dedup_bits != 0 && len < ENC_LONG_PIECE) {
      // insert-or-find: a slot holds tag << 32 | entry, claimed once with a CAS, so the entry
      // index is never read before it is written; equal tags are confirmed by the bytes. After
      // ENC_DEDUP_PROBES slots the piece merges itself (dedup only saves work, so a crowded
      // table, a chunk of almost only distinct misses, costs no more than that)
      const enc_u64 mine = ((enc_u64)(enc_u32)h << 32) | (enc_u64)e;
      const enc_u64 mask = (1ull << dedup_bits) - 1ull;
      enc_u64 slot = h >> (64 - dedup_bits);
      for (int probe = 0; probe < ENC_DEDUP_PROBES; ++probe) {
        enc_u64 cur = dedup_slots[slot];
        if (cur == ENC_EMPTY_KEY) {
          cur = atomicCAS(&dedup_slots[slot], ENC_EMPTY_KEY, mine);
          if (cur == ENC_EMPTY_KEY) break;  // claimed: this entry owns these bytes
        }
        if ((cur >> 32) == (mine >> 32)) {
          const enc_u32 o = (enc_u32)cur;
          const enc_u32 os = pstart[o];
          if (pstart[o + 1] - os == len && enc_bytes_equal(buf + os, p, len)) {
            own = o;
            break;
          }
        }
        slot = (slot + 1) & mask;
      }
    }
    owner[e] = own;
  }
}

extern "C" __global__ void encode_merge_short(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ n_entries, const enc_u32* __restrict__ owner,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ byte_ids,
    enc_u32* __restrict__ scratch, enc_u32* __restrict__ prio_ws, enc_u32* __restrict__ count,
    enc_i64 cap) {
  const EncMergeTable t{t_slots, t_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
#ifdef ENC_HOST_MERGE_LANES
  EncHostLanes lanes;
  enc_host_lanes_init(lanes);
#endif
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    if (owner[e] != (enc_u32)e) continue;  // final already, or a duplicate
    const enc_u32 s = pstart[e];
    const enc_u32 len = pstart[e + 1] - s;
    if (len >= ENC_LONG_PIECE) continue;
#ifdef ENC_HOST_MERGE_LANES
    enc_host_lanes_add(lanes, t, buf + s, byte_ids, scratch + s, len, e);
    while (lanes.n == ENC_HOST_MERGE_LANES) enc_host_lanes_step(lanes, t, count);
#else
    count[e] = enc_merge_short_piece(t, buf + s, byte_ids, scratch + s, prio_ws + s, len);
#endif
  }
#ifdef ENC_HOST_MERGE_LANES
  while (lanes.n) enc_host_lanes_step(lanes, t, count);  // the block's last pieces
#endif
}

extern "C" __global__ void encode_merge_long(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ n_entries, const enc_u32* __restrict__ owner,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ byte_ids,
    const enc_u32* __restrict__ join, enc_u32* __restrict__ scratch,
    enc_u32* __restrict__ where_ws, enc_u32* __restrict__ nxt_ws, enc_u32* __restrict__ prv_ws,
    enc_u64* __restrict__ heap_ws, enc_u64* __restrict__ tree_ws, enc_u32* __restrict__ size_ws,
    enc_u32* __restrict__ count, enc_i64 cap) {
  const EncMergeTable t{t_slots, t_bits};
  const EncLongWork ws{where_ws, nxt_ws, prv_ws, heap_ws, tree_ws, size_ws};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    if (owner[e] != (enc_u32)e) continue;
    const enc_u32 s = pstart[e];
    const enc_u32 len = pstart[e + 1] - s;
    if (len < ENC_LONG_PIECE) continue;
    count[e] = enc_merge_long_piece(t, buf, byte_ids, join, scratch, ws, s, len);
  }
}

extern "C" __global__ void encode_dup_counts(const enc_u32* __restrict__ n_entries,
                                             const enc_u32* __restrict__ owner,
                                             enc_u32* __restrict__ count, enc_i64 cap) {
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 o = owner[e];
    if (o != ENC_DONE && o != (enc_u32)e) count[e] = count[o];
  }
}
