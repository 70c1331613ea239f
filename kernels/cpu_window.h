// cpu_window.h: host only. The segment loop of the per-document pass (cpu_encode.h): pieces are
// found, looked up in the piece cache and emitted a window at a time, and the window's misses
// are solved together, so that their table misses overlap.
//
//   find       the class scan's fast matchers (cpu_scan.h; the family's matcher where they
//              pass) find ENC_CPU_AHEAD pieces before the first is looked up, each
//              one's cache slot prefetched as it is found
//   look up    a piece of one byte takes its id outright (enc_one_byte_id: the one-byte
//              block, or the byte's own id where no whole token can answer); a cached piece
//              its slot's ids (a longer one, the long tier's: cpu_cache.h); anything else
//              waits in the window as a miss
//   solve      at ENC_CPU_MISSES misses or ENC_CPU_WINDOW pieces (or the segment's end, or a
//              long piece): every miss's
//              whole-token slot is prefetched (THE BYTES HASH), then its token bytes, then it is
//              looked up; the rest merge ENC_CPU_LANES at a time (enc_merge_step, each run's
//              next pairs prefetched while the others step: the GPU's rule, a CPU's order);
//              the answers go into the cache
//   emit       the window's ids in order
//
// Performance notes: solved one at a time as found, a miss cost ~1 us on the 2-core box (its
// whole-token probe and its merge's pair probes each wait on memory: the tables are several
// MB): with 2% of o200k prose's pieces missing the cache, a pass ran at ~85 MB/s where the
// lookups alone (no solving) ran at ~140; solved a window at a time, fresh text (8-28% of the
// pieces missing a warm cache) ran 40-80% faster. Windows of 8 or 32 misses measured the same
// as 16 (o200k prose and multilingual, fresh text, thread CPU time, three runs each).
// A tokenizer.json model's one-byte pieces (no whole-token table, so no one-byte block) had
// waited as misses in every pass, solved each time: with their ids outright (enc_one_byte_id),
// a warm pass (bench/warm_instr.py, instructions a byte) went 78.2 -> 63.6 on Llama 3 code,
// 85.8 -> 65.1 on Qwen2 code, 58.0 -> 50.1 on Llama 3 prose; thread CPU time 20% less (1 MB).
// Tried and dropped: a hit path without the ring (a piece of 2-24 bytes keyed and probed as
// soon as it is found, its ids straight to out while no miss waits; only misses to the
// window): 17-27% fewer instructions a byte on every cell (o200k prose 46.6 against 53.2,
// cl100k prose 36.7 against 50.1), yet 25-30% more thread CPU time on o200k and cl100k prose
// and o200k multilingual (1 MB warm, one thread, three interleaved runs: 133-148 MB/s against
// 190-197 on o200k prose): each probe waited on its slot, which the ring had prefetched 8
// pieces before. One piece in flight instead (found, keyed, its bucket prefetched, then the
// piece before it looked up): 50.2 on o200k prose, 44.0 on cl100k prose, but still 5-10% more
// thread CPU time than the ring on o200k prose and multilingual and cl100k prose. The ring as
// batches (find 8 pieces, then look the 8 up): 43.6 on cl100k prose, 51.7 on o200k prose,
// yet 5-14% more thread CPU time than the ring on both (a batch's last pieces are looked up
// just after their prefetch); the ring keeps every piece 8 finds behind. Counting the
// window's lookups in the loop's locals rather than the workspace: 0.2-0.8 instructions a
// byte more, dropped.
// Tried and dropped: keeping each found piece's tier and bucket in EncCpuFound (so the look-up
// does not test the length and mix the key's bucket again): callgrind's count of a warm pass
// (bench/warm_instr.py) went 0.3 instructions a byte down on o200k prose, 1.6 up on o200k
// multilingual and 0.3-1.0 up on the cl-family and tokenizer.json cells (a wider ring entry).
// The bucket alone, in the key in place of its mix (the entry no wider, cpu_cache.h's
// enc_cpu_key), went 1.1 down on cl100k and o200k prose. Per piece, the hit path tests little
// more than it must: the loop is specialised on a present cache (enc_cpu_segment_run<true>),
// the look-up tests the cached lengths first, a full window is flushed where a piece is added
// (enc_cpu_added) and long_hit's room is made where the long tier answers (enc_cpu_long_room):
// with cpu_text.h's ASCII entries, 50.1 -> 41.9 on cl100k prose, 53.2 -> 48.4 on o200k prose,
// and 4-22% more MB/s of thread CPU time on the cl-family cells, 1-6% on o200k (bench/ab_warm.py:
// 1 MB warm, one thread, 5 interleaved rounds, the loaded 2-core box).
#pragma once

#include "cpu_solve.h"
#include "cpu_scan.h"

#ifndef ENC_CPU_AHEAD
#define ENC_CPU_AHEAD 8  // a power of two
#endif
#ifndef ENC_CPU_WINDOW
#define ENC_CPU_WINDOW 256  // pieces a window holds at most
#endif
#ifndef ENC_CPU_MISSES
#define ENC_CPU_MISSES 16  // misses that end a window (two rounds of the lanes)
#endif
#ifndef ENC_CPU_LANES
#define ENC_CPU_LANES 8
#endif

// Whether a piece of len bytes goes through the piece cache.
__forceinline__ bool enc_cpu_cached(const EncCpuCache* c, enc_u32 len) {
  return c != nullptr && len >= 2 && len <= ENC_CPU_KEY_BYTES;
}

struct EncCpuFound {
  enc_i64 s;
  enc_u32 len;
  EncCpuKey k;  // a piece for the slots: its key
  enc_u64 h;    // a piece for the long tier: THE BYTES HASH
};

#ifndef ENC_CPU_LONG_HITS
#define ENC_CPU_LONG_HITS 4096  // ids of the long tier's answers a window holds
#endif

// A window of pieces (each shorter than ENC_LONG_PIECE) from a first miss on, and the answers
// found so far (a miss's start and length are kept; a hit's ids only).
struct EncCpuWindow {
  enc_u32 count = 0;
  enc_i64 s[ENC_CPU_WINDOW];
  enc_u32 len[ENC_CPU_WINDOW];
  enc_u32 n[ENC_CPU_WINDOW];    // ids
  enc_u32* at[ENC_CPU_WINDOW];  // where they are
  EncCpuKey k[ENC_CPU_WINDOW];
  enc_u32 hit[ENC_CPU_WINDOW][ENC_CPU_SLOT_IDS];
  enc_u32 long_hit[ENC_CPU_LONG_HITS];  // the long tier's answers (waiting behind a miss)
  enc_u32 long_used = 0;
  enc_u32 miss[ENC_CPU_MISSES];  // the misses' window indices
  enc_u32 miss_all[ENC_CPU_MISSES];
  enc_u32 n_miss = 0;
  enc_u64 h[ENC_CPU_WINDOW];     // a miss's bytes hash
  enc_u32 mids[ENC_CPU_MISSES * ENC_LONG_PIECE];  // the misses' ids
  // merge lanes (see encode_merge.cu: EncHostLanes, the chunk pipeline's)
  EncMergeRun run[ENC_CPU_LANES];
  enc_u32 lane_ids[ENC_CPU_LANES][ENC_LONG_PIECE];
  enc_u32 lane_pr[ENC_CPU_LANES][ENC_LONG_PIECE];
  enc_u32 lane_of[ENC_CPU_LANES];  // the window index a lane merges
};

// The window's misses solved: whole tokens, then merges in lanes; answers cached.
inline void enc_cpu_solve_window(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                                 EncCpuWindow& w, const enc_u8* base) {
  if (w.n_miss == 0) return;
  const bool whole = m.w.bits != 0;
  enc_u32* dst = w.mids;
  for (enc_u32 q = 0; q < w.n_miss; ++q) {  // hashes; whole-token slots prefetched
    const enc_u32 j = w.miss[q];
    w.at[j] = dst;
    dst += w.len[j];
    if (!whole || w.len[j] > m.w_max_len) continue;
    if (!enc_cpu_long(c, w.len[j]))  // (the long tier's pieces have theirs)
      w.h[j] = enc_cpu_cached(c, w.len[j]) ? enc_cpu_key_hash(w.k[j], w.len[j])
                                           : enc_bytes_hash(base + w.s[j], w.len[j]);
    ENC_PREFETCH(m.w.slots + 4 * enc_whole_home(m.w, w.h[j]));
  }
  if (whole) {
    for (enc_u32 q = 0; q < w.n_miss; ++q) {  // the token bytes a matching slot points at
      const enc_u32 j = w.miss[q];
      if (w.len[j] > m.w_max_len) continue;
      const enc_u32* slot = m.w.slots + 4 * enc_whole_home(m.w, w.h[j]);
      if (slot[0] == (enc_u32)w.h[j]) ENC_PREFETCH(m.w.tok_bytes + slot[2]);
    }
  }
  for (enc_u32 q = 0; q < w.n_miss; ++q) w.miss_all[q] = w.miss[q];
  enc_u32 merges = 0;  // the misses that are no token, compacted to the front of miss
  for (enc_u32 q = 0; q < w.n_miss; ++q) {
    const enc_u32 j = w.miss[q];
    if (whole && w.len[j] <= m.w_max_len) {
      const enc_u32 id = enc_whole_lookup(m.w, base + w.s[j], w.len[j], w.h[j]);
      if (id != ENC_NO_MERGE) {
        w.at[j][0] = id;
        w.n[j] = 1;
        continue;
      }
    }
    w.miss[merges++] = j;
  }
  // the merges, ENC_CPU_LANES in flight, each stepped in turn
  enc_u32 next = 0, busy = 0;
  enc_u32 free_lane[ENC_CPU_LANES], active[ENC_CPU_LANES];
  for (enc_u32 l = 0; l < ENC_CPU_LANES; ++l) free_lane[l] = l;
  enc_u32 n_free = ENC_CPU_LANES;
  while (next < merges || busy) {
    while (next < merges && n_free) {
      const enc_u32 l = free_lane[--n_free];
      const enc_u32 j = w.miss[next++];
      enc_merge_short_begin(m.t, w.run[l], base + w.s[j], m.byte_ids, w.lane_ids[l],
                            w.lane_pr[l], w.len[j]);
      w.run[l].roomy = true;  // (the lane's arrays: ENC_LONG_PIECE each)
      w.lane_of[l] = j;
      active[busy++] = l;
    }
    for (enc_u32 a = 0; a < busy;) {
      const enc_u32 l = active[a];
      if (enc_merge_step(m.t, w.run[l])) {
        ++a;
        continue;
      }
      const enc_u32 j = w.lane_of[l];
      const enc_u32 k = w.run[l].len;
      for (enc_u32 x = 0; x < k; ++x) w.at[j][x] = w.lane_ids[l][x];
      w.n[j] = k;
      active[a] = active[--busy];
      free_lane[n_free++] = l;
    }
  }
  for (enc_u32 q = 0; q < w.n_miss; ++q) {  // the answers into the cache
    const enc_u32 j = w.miss_all[q];
    if (enc_cpu_long(c, w.len[j])) {
      enc_cpu_long_put(c, w.h[j], base + w.s[j], w.len[j], w.at[j], w.n[j]);
      ++wk.inserts;
      continue;
    }
    if (!enc_cpu_cached(c, w.len[j])) continue;
    if (w.n[j] > ENC_CPU_SLOT_IDS) {  // in the long tier, its slot saying so (0 ids)
      const enc_u64 h = enc_cpu_key_hash(w.k[j], w.len[j]);
      enc_cpu_long_put(c, h, base + w.s[j], w.len[j], w.at[j], w.n[j]);
      enc_cpu_cache_put(c, w.k[j], w.len[j], w.at[j], 0);
    } else {
      enc_cpu_cache_put(c, w.k[j], w.len[j], w.at[j], w.n[j]);
    }
    ++wk.inserts;
  }
}

// The window solved and its ids emitted to out; returns the end of the ids.
inline enc_u32* enc_cpu_flush(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                              EncCpuWindow& w, const enc_u8* base, enc_u32* out) {
  enc_cpu_solve_window(m, c, wk, w, base);
  for (enc_u32 j = 0; j < w.count; ++j) {
    const enc_u32* src = w.at[j];
    const enc_u32 k = w.n[j];
    for (enc_u32 x = 0; x < k; ++x) out[x] = src[x];
    out += k;
  }
  w.count = 0;
  w.n_miss = 0;
  w.long_used = 0;
  return out;
}

// Piece j added to the window: a full window (pieces or misses) solved and emitted.
__forceinline__ enc_u32* enc_cpu_added(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                                       EncCpuWindow& w, enc_u32 j, const enc_u8* base,
                                       enc_u32* out) {
  w.count = j + 1;
  if (w.count == ENC_CPU_WINDOW || w.n_miss == ENC_CPU_MISSES)
    out = enc_cpu_flush(m, c, wk, w, base, out);
  return out;
}

// Room in the window's long_hit for a long-tier answer of up to len ids (at most one id a
// byte): the window flushed to *out when there is none. Returns the piece's window index.
__forceinline__ enc_u32 enc_cpu_long_room(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                                          EncCpuWindow& w, enc_u32 len, const enc_u8* base,
                                          enc_u32** out) {
  if (w.count && w.long_used + len > ENC_CPU_LONG_HITS)
    *out = enc_cpu_flush(m, c, wk, w, base, *out);
  return w.count;
}

// A found piece looked up: the one-byte block or the cache answer it; else it waits in the
// window as a miss. While the window is empty the answer goes straight to out (returned: the
// end of out's ids); once a miss waits, every piece after it waits with it, for the order.
// A window it fills is flushed here, so a hit while none waits (the warm pass's common case)
// tests nothing after its ids. (A long piece never comes here.)
__forceinline__ enc_u32* enc_cpu_look_up(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk,
                                         EncCpuWindow& w, const EncCpuFound& f,
                                         const enc_u8* base, enc_u32* out) {
  enc_u32 j = w.count;
  enc_u32* dst = j ? w.hit[j] : out;
  if (enc_cpu_cached(c, f.len)) {  // (the common piece first)
    ++wk.lookups;
    int got = enc_cpu_cache_get(c, f.k, f.len, dst);
    enc_u32* at = w.hit[j];
    if (got == 0) {  // the slot says: more ids than it holds, in the long tier
      j = enc_cpu_long_room(m, c, wk, w, f.len, base, &out);
      at = j ? w.long_hit + w.long_used : out;
      got = enc_cpu_long_get(c, enc_cpu_key_hash(f.k, f.len), base + f.s, f.len, at);
      if (got > 0) w.long_used += j ? (enc_u32)got : 0u;
    }
    if (got > 0) {
      ++wk.hits;
      if (j == 0) return out + got;
      w.n[j] = (enc_u32)got;
      w.at[j] = at;
      return enc_cpu_added(m, c, wk, w, j, base, out);
    }
    w.k[j] = f.k;
  } else if (f.len == 1) {  // its id outright (the one-byte block, or its byte id: enc_one_byte_id)
    const enc_u32 id = enc_one_byte_id(m.w, m.byte_ids, base[f.s]);
    if (id != ENC_NO_MERGE) {
      if (j == 0) {
        out[0] = id;
        return out + 1;
      }
      w.hit[j][0] = id;
      w.n[j] = 1;
      w.at[j] = w.hit[j];
      return enc_cpu_added(m, c, wk, w, j, base, out);
    }
  } else if (enc_cpu_long(c, f.len)) {
    j = enc_cpu_long_room(m, c, wk, w, f.len, base, &out);
    w.h[j] = f.h;
    ++wk.lookups;
    enc_u32* at = j ? w.long_hit + w.long_used : out;
    const int got = enc_cpu_long_get(c, f.h, base + f.s, f.len, at);
    if (got >= 0) {
      ++wk.hits;
      if (j == 0) return out + got;
      w.long_used += (enc_u32)got;
      w.n[j] = (enc_u32)got;
      w.at[j] = at;
      return enc_cpu_added(m, c, wk, w, j, base, out);
    }
  }
  w.s[j] = f.s;
  w.len[j] = f.len;
  w.at[j] = w.hit[j];
  w.miss[w.n_miss++] = j;
  return enc_cpu_added(m, c, wk, w, j, base, out);
}

// The ids of one segment (a text with no special token in it, in a text buffer) into out (room
// for t.n + ENC_CPU_SLOT_IDS ids), its pieces from its start up to `stop` (t.n, or a slice's
// end with the bytes after it in view, cpu_batch.h): the end of the ids, or nullptr (no
// memory); *end_at: where the last piece ended (stop, unless one ran past it).
// CACHED: c is not nullptr (enc_cpu_segment_to's dispatch), so that the tests of it in every
// piece's look-up fold away.
template <bool CACHED, class T>
enc_u32* enc_cpu_segment_run(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk, const T& t,
                             enc_i64 stop, enc_u32* out, enc_i64* end_at) {
  if (CACHED && c == nullptr) __builtin_unreachable();
  EncCpuFound ring[ENC_CPU_AHEAD];
  EncCpuWindow& w = *wk.window;
  w.count = w.n_miss = 0;
  unsigned found = 0, done = 0;  // pieces found, pieces looked up (ring indices mod AHEAD)
  enc_i64 i = 0;
#if ENC_CPU_SCAN
  EncCpuScan sc;
  enc_cpu_scan_reset(sc);
#endif
  while (true) {
    if (i < stop) {  // find the next piece; its cache slot on its way
#if ENC_CPU_SCAN
      enc_i64 e = enc_cpu_piece(sc, t, i);
#else
      enc_i64 e = enc_cpu_match(t, i);
#endif
      if (e <= i) e = enc_span_next(t, i);  // (never: every character starts a match)
      EncCpuFound& f = ring[found++ & (ENC_CPU_AHEAD - 1)];
      f.s = i;
      f.len = (enc_u32)(e - i);
      if (enc_cpu_cached(c, f.len)) {
        enc_cpu_key(c, t.buf + i, f.len, f.k);
        ENC_PREFETCH(f.k.bucket);
      } else if (enc_cpu_long(c, f.len)) {
        f.h = enc_bytes_hash(t.buf + i, f.len);
        ENC_PREFETCH(enc_cpu_long_home(c, f.h));
      }
      i = e;
      if (found - done < ENC_CPU_AHEAD) continue;
    } else if (found == done) {
      break;
    }
    const EncCpuFound& f = ring[done++ & (ENC_CPU_AHEAD - 1)];  // the oldest found piece
    if (f.len >= ENC_LONG_PIECE) {  // the window first, then the long piece straight to out
      out = enc_cpu_flush(m, c, wk, w, t.buf, out);
      const bool tier = enc_cpu_long(c, f.len);
      int got = tier ? enc_cpu_long_get(c, f.h, t.buf + f.s, f.len, out) : -1;
      if (got < 0) {
        got = enc_cpu_solve(m, wk, t.buf + f.s, f.len, f.h, tier, out);
        if (got < 0) return nullptr;
        if (tier) enc_cpu_long_put(c, f.h, t.buf + f.s, f.len, out, (enc_u32)got);
      }
      out += got;
    } else {
      out = enc_cpu_look_up(m, c, wk, w, f, t.buf, out);
    }
  }
  out = enc_cpu_flush(m, c, wk, w, t.buf, out);
  *end_at = i;
  return out;
}

template <class T>
enc_u32* enc_cpu_segment_to(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk, const T& t,
                            enc_i64 stop, enc_u32* out, enc_i64* end_at) {
  if (c != nullptr) return enc_cpu_segment_run<true>(m, c, wk, t, stop, out, end_at);
  return enc_cpu_segment_run<false>(m, nullptr, wk, t, stop, out, end_at);
}
