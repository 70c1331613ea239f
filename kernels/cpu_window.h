// cpu_window.h: host only. The segment loop of the per-document pass (cpu_encode.h): each piece
// is looked up in the piece cache as it is found and a hit's ids go straight to the output; the
// misses wait in a window and are solved together, so that their table misses overlap.
//
//   find       the class scan's fast matchers (cpu_scan.h; the family's matcher where they
//              pass)
//   look up    a piece of 2 .. ENC_CPU_KEY_BYTES bytes: keyed and probed at once (the hit
//              path); one byte: its id outright (enc_one_byte_id: the one-byte block, or the
//              byte's own id where no whole token can answer); a longer one: the long tier
//              (cpu_cache.h); anything else waits in the window as a miss, and every piece
//              after a waiting miss waits with it, for the order
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
// The hit path replaced a ring of 8 found pieces (each one's slot prefetched
// as it was found, looked up 8 pieces later): the ring's stores and loads and the tests of a
// piece's kind made three times cost more than the prefetch saved; a warm pass
// (bench/warm_instr.py, instructions a byte) went 54.9 -> 46.6 on o200k prose, 50.1 -> 36.7
// on cl100k prose, 63.5 -> 58.2 on o200k multilingual. One-byte pieces of a tokenizer.json
// model (no whole-token table, so no one-byte block) had waited as misses in every pass: with
// their ids outright, Llama 3 code went 78.2 -> 48.0, Qwen2 code 85.8 -> 48.6.
// Tried and dropped (in the ring): keeping each found piece's tier and bucket in the ring's
// entry (so the look-up does not test the length and mix the key's bucket again): callgrind's
// count of a warm pass went 0.3 instructions a byte down on o200k prose, 1.6 up on o200k
// multilingual and 0.3-1.0 up on the cl-family and tokenizer.json cells (a wider ring entry).
#pragma once

#include "cpu_solve.h"
#include "cpu_scan.h"

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

// A piece that waits in the window as a miss (its key k when it goes through the slots, its
// THE BYTES HASH h when through the long tier).
__forceinline__ void enc_cpu_wait(EncCpuWindow& w, enc_i64 s, enc_u32 len) {
  const enc_u32 j = w.count;
  w.s[j] = s;
  w.len[j] = len;
  w.at[j] = w.hit[j];
  w.miss[w.n_miss++] = j;
  w.count = j + 1;
}

// A hit's got ids, found at `at`, taken into the window (behind a miss, for the order).
__forceinline__ void enc_cpu_wait_hit(EncCpuWindow& w, enc_u32* at, enc_u32 got) {
  const enc_u32 j = w.count;
  w.n[j] = got;
  w.at[j] = at;
  w.count = j + 1;
}

// A piece the slots do not take (one byte the caller could not answer, or ENC_CPU_KEY_BYTES +
// 1 .. ENC_LONG_PIECE - 1 bytes) looked up: the long tier; else it waits as a miss. Returns the end of out's ids (an answer goes there while the window is empty).
__forceinline__ enc_u32* enc_cpu_look_up_other(const EncCpuModel& m, EncCpuCache* c,
                                               EncCpuWork& wk, EncCpuWindow& w, enc_i64 s,
                                               enc_u32 len, const enc_u8* base, enc_u32* out) {
  const enc_u32 j = w.count;
  if (enc_cpu_long(c, len)) {  // (the caller made room: ENC_CPU_LONG_HITS)
    const enc_u64 h = enc_bytes_hash(base + s, len);
    w.h[j] = h;
    ++wk.lookups;
    enc_u32* at = j ? w.long_hit + w.long_used : out;
    const int got = enc_cpu_long_get(c, h, base + s, len, at);
    if (got >= 0) {
      ++wk.hits;
      if (j == 0) return out + got;
      w.long_used += (enc_u32)got;
      enc_cpu_wait_hit(w, at, (enc_u32)got);
      return out;
    }
  }
  enc_cpu_wait(w, s, len);
  return out;
}

// The ids of one segment (a text with no special token in it, in a text buffer) into out (room
// for t.n + ENC_CPU_SLOT_IDS ids), its pieces from its start up to `stop` (t.n, or a slice's
// end with the bytes after it in view, cpu_batch.h): the end of the ids, or nullptr (no
// memory); *end_at: where the last piece ended (stop, unless one ran past it).
//
// The hit path: a piece of 2 .. ENC_CPU_KEY_BYTES bytes is keyed and probed as soon as it is
// found, and its cached ids go straight to out while no miss waits (a hit behind a miss waits
// with it, for the order); only misses and the rarer kinds of piece take the window's path.
// The counts are kept in registers and added to the workspace at the end.
template <class T>
enc_u32* enc_cpu_segment_to(const EncCpuModel& m, EncCpuCache* c, EncCpuWork& wk, const T& t,
                            enc_i64 stop, enc_u32* out, enc_i64* end_at) {
  EncCpuWindow& w = *wk.window;
  w.count = w.n_miss = 0;
  enc_u64 lookups = 0, hits = 0;
  enc_i64 i = 0;
#if ENC_CPU_SCAN
  EncCpuScan sc;
  enc_cpu_scan_reset(sc);
#endif
  while (i < stop) {
#if ENC_CPU_SCAN
    enc_i64 e = enc_cpu_piece(sc, t, i);
#else
    enc_i64 e = enc_cpu_match(t, i);
#endif
    if (e <= i) e = enc_span_next(t, i);  // (never: every character starts a match)
    const enc_i64 s = i;
    const enc_u32 len = (enc_u32)(e - i);
    i = e;
    enc_u32 id1;
    if (enc_cpu_cached(c, len)) {  // the hit path
      EncCpuKey k;
      enc_cpu_key(t.buf + s, len, k);
      const enc_u32 j = w.count;
      ++lookups;
      int got = enc_cpu_cache_get(c, k, len, j ? w.hit[j] : out);
      if (got > 0) {
        ++hits;
        if (j == 0) {
          out += got;
          continue;
        }
        enc_cpu_wait_hit(w, w.hit[j], (enc_u32)got);
      } else {
        if (got == 0) {  // the slot says: more ids than it holds, in the long tier
          if (w.long_used + len > ENC_CPU_LONG_HITS) {
            out = enc_cpu_flush(m, c, wk, w, t.buf, out);
          }
          const enc_u32 jj = w.count;
          enc_u32* at = jj ? w.long_hit + w.long_used : out;
          got = enc_cpu_long_get(c, enc_cpu_key_hash(k, len), t.buf + s, len, at);
          if (got > 0) {
            ++hits;
            if (jj == 0) {
              out += got;
              continue;
            }
            w.long_used += (enc_u32)got;
            enc_cpu_wait_hit(w, at, (enc_u32)got);
          }
        }
        if (got <= 0) {
          w.k[w.count] = k;
          enc_cpu_wait(w, s, len);
        }
      }
    } else if (len == 1 && (id1 = enc_one_byte_id(m.w, m.byte_ids, t.buf[s])) != ENC_NO_MERGE) {
      const enc_u32 j = w.count;  // (a one-byte piece: its id outright, no cache)
      if (j == 0) {
        *out++ = id1;
        continue;
      }
      w.hit[j][0] = id1;
      enc_cpu_wait_hit(w, w.hit[j], 1);
    } else if (len >= ENC_LONG_PIECE) {  // the window first, then the long piece straight to out
      out = enc_cpu_flush(m, c, wk, w, t.buf, out);
      const bool tier = enc_cpu_long(c, len);
      const enc_u64 h = tier ? enc_bytes_hash(t.buf + s, len) : 0;
      int got = tier ? enc_cpu_long_get(c, h, t.buf + s, len, out) : -1;
      if (tier) ++lookups;
      if (got < 0) {
        got = enc_cpu_solve(m, wk, t.buf + s, len, h, tier, out);
        if (got < 0) return nullptr;
        if (tier) {
          enc_cpu_long_put(c, h, t.buf + s, len, out, (enc_u32)got);
          ++wk.inserts;
        }
      } else {
        ++hits;
      }
      out += got;
      continue;
    } else {
      // (room for the long tier's answer: at most one id a byte)
      if (w.long_used + len > ENC_CPU_LONG_HITS) out = enc_cpu_flush(m, c, wk, w, t.buf, out);
      out = enc_cpu_look_up_other(m, c, wk, w, s, len, t.buf, out);
    }
    if (w.count == ENC_CPU_WINDOW || w.n_miss == ENC_CPU_MISSES)
      out = enc_cpu_flush(m, c, wk, w, t.buf, out);
  }
  out = enc_cpu_flush(m, c, wk, w, t.buf, out);
  wk.lookups += lookups;
  wk.hits += hits;
  *end_at = i;
  return out;
}
