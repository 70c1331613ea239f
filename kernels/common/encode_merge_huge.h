// encode_merge_huge.h: one piece of ENC_HUGE_PIECE bytes or more merged by a whole block of
// threads (kernels/encode_merge_huge.cu, shaders/encode_merge_huge.metal), for GPUs: one thread
// walking a multi-MB piece (" " * 10**7, a long CJK run, a base64 blob) runs for seconds, long
// enough for the watchdog of a GPU that drives a display. The ops reference is
// gputok/stages/merge.py, merge_huge; included after encode_rules.h, by GPU dialects only (it
// waits at block barriers, which a host loop has not).
//
// THE COMPARATOR in rounds, decided at every pair at once. A round takes r, the lowest priority
// of any pair (a minimum over the block), and merges the pairs of priority r as the sequential
// rule would, left to right:
//   * in a run of consecutive r pairs a pair merges when the one before it did not (the first,
//     third, ... merge: "aaa", "\t" * 32). A thread needs the flag of the pair just before its
//     first part: each thread states its parts as a function of that flag (keep, flip, or a
//     constant once a pair that is not r intervenes), and a thread composes the functions of
//     the threads before it back to the nearest constant;
//   * every merge is the rule's own up to the first one that makes a pair of priority r or
//     below, on its left, or on its right before the next part merges on (a vocabulary whose
//     merged token ranks below a part, or SentencePiece's equal scores): the merges after that
//     one wait, and the next round takes the lowest pair again. So every round merges at least
//     one pair, and the state after it is the rule's own state after those merges.
// A merge never changes parts other than its two and its neighbours' pairs, so the round is
// linear in the parts it touches: the piece is cut into segments of ENC_HUGE_SEG bytes, each
// with its lowest priority, and a round walks only the segments that hold a pair of priority
// r (a CJK run merges thousands of distinct pairs, each in a few places).
//
// Parts are named by their first byte p in the piece, linked (nxt, prv) as they merge; pr[p] is
// the priority of the pair (p, nxt[p]). Priorities must stay below ENC_HUGE_PRIO: the top bit
// marks a pair that merges this round, and lr keeps priorities in 31 bits
// (gputok/backends/device_tables.py refuses a table whose priorities reach it).
//
// The rounds stay the rule's own whatever the vocabulary, but a round costs the block its
// barriers whatever it merges: where rounds merge fewer than ENC_HUGE_ROUND_MERGES pairs on
// average after ENC_HUGE_ROUNDS_MIN of them (a vocabulary whose every merge makes a pair below
// the round's, which ends each round after one merge), the parts left go to the block heaps of
// the long pieces (enc_merge_heap) on one thread: O(L log L) as before, never worse.
//
// Performance notes (emulated only; to time on a GPU: tests/test_cuda_gpu.py's huge pieces,
// bench/bench_long.py --backend cuda): a round costs six block barriers and, per thread, a look
// at each of its segments' minima; a piece of 10 MB in a block of 1024 threads is ~20 segments
// a thread. Rounds grow slowly with the piece (cl100k, base64 of random bytes: 2.7 K rounds
// for 30 KB, 4.1 K for 120 KB, 7.5 K for 480 KB; a CJK run or "a" * n far fewer), so a 10 MB
// piece is tens of thousands of rounds of microseconds, where one GPU thread's heap took seconds.
// The phases walk the segments of priority r again instead of keeping lists of their merges
// (no workspace beyond the long pieces', no list to size).
#pragma once

#ifndef ENC_HUGE_PIECE
#define ENC_HUGE_PIECE 16384  // bytes; a piece this long merges on a whole block
#endif
#ifndef ENC_HUGE_SEG
#define ENC_HUGE_SEG 512  // bytes of a piece per segment
#endif
#ifndef ENC_HUGE_BLOCK
#define ENC_HUGE_BLOCK 1024  // the most threads a block of encode_merge_huge may have
#endif
#ifndef ENC_HUGE_ROUNDS_MIN
#define ENC_HUGE_ROUNDS_MIN 512  // rounds before the merges per round are judged (below)
#endif
#ifndef ENC_HUGE_ROUND_MERGES
#define ENC_HUGE_ROUND_MERGES 2  // merges a round on average, or the heap takes over
#endif
#define ENC_HUGE_NONE 0xFFFFFFFFu  // no part
#define ENC_HUGE_FLAG 0x80000000u  // in pr[p]: the pair (p, nxt[p]) merges this round
#define ENC_HUGE_PRIO 0x7FFFFFFFu  // priorities are below; NO_MERGE as lr keeps it

// The workspace of one piece: the per-byte arrays are the piece's slices of the long-piece
// workspaces (gputok/backends/device_stages.py), the per-segment ones of seg_ws.
struct EncHuge {
  GPUTOK_DEV enc_u32* ids;    // ids[p]: part p's id (the piece's ids in scratch, at its start)
  GPUTOK_DEV enc_u32* pr;     // pr[p]: the priority of the pair (p, nxt[p]), ENC_HUGE_FLAG set
                              // while it merges
  GPUTOK_DEV enc_u32* nxt;    // the next part (ENC_HUGE_NONE: none)
  GPUTOK_DEV enc_u32* prv;    // the previous part (ENC_HUGE_NONE: none)
  GPUTOK_DEV enc_u64* lr;     // per merge: the new pairs (enc_huge_pack); at the end, the ids
  GPUTOK_DEV enc_u32* seg;    // per segment j: [3j] first part, [3j + 1] lowest pair priority of
                              // its parts, [3j + 2] changed this round
  enc_u32 len, nseg, per;     // bytes, segments, segments per thread
};

// Where segment j of the piece at byte s of the chunk keeps its three words in seg_ws: slot
// 2 * ceil(s / ENC_HUGE_SEG) + j. A piece of L >= ENC_HUGE_SEG bytes holds at least
// floor(L / ENC_HUGE_SEG) segment boundaries (ceil(s / SEG) ... ceil((s + L) / SEG) - 1), the
// next piece's slots start past them, and its ceil(L / SEG) segments fit in twice that many.
GPUTOK_FN enc_u64 enc_huge_seg_base(enc_u32 s) {
  return 6 * (((enc_u64)s + ENC_HUGE_SEG - 1) / ENC_HUGE_SEG);
}

GPUTOK_FN enc_u32 enc_huge_end(GPUTOK_THREAD const EncHuge& h, enc_u32 j) {
  const enc_u32 e = (j + 1) * ENC_HUGE_SEG;
  return e < h.len ? e : h.len;
}

// The id the pair (p, q) of priority r merges into: a compact table's priority is the merged id
// (the tiktoken rule); else a probe (pairs may share a priority: SentencePiece's equal scores).
GPUTOK_FN enc_u32 enc_huge_merged(GPUTOK_THREAD const EncMergeTable& t,
                                  GPUTOK_THREAD const EncHuge& h, enc_u32 p, enc_u32 q,
                                  enc_u32 r) {
  if (t.bits & ENC_PAIR_COMPACT) return r;
  enc_u32 m = 0;
  enc_pair_lookup(t, h.ids[p], h.ids[q], &m);
  return m;
}

// lr[p] of a merge: its left pair's priority and whether the part on its left survives
// unmerged (then the merge writes that part's pr), its right pair's priority (the part after
// it as it is before merging on) and whether that part merges too.
GPUTOK_FN enc_u64 enc_huge_pack(enc_u32 lp, bool left_kept, enc_u32 rp, bool next_merges) {
  const enc_u32 lo = (lp < ENC_HUGE_PRIO ? lp : ENC_HUGE_PRIO) | (left_kept ? ENC_HUGE_FLAG : 0u);
  const enc_u32 hi = (rp < ENC_HUGE_PRIO ? rp : ENC_HUGE_PRIO) | (next_merges ? ENC_HUGE_FLAG : 0u);
  return ((enc_u64)hi << 32) | (enc_u64)lo;
}

GPUTOK_FN enc_u32 enc_huge_prio(enc_u32 w) {
  w &= ENC_HUGE_PRIO;
  return w == ENC_HUGE_PRIO ? ENC_NO_MERGE : w;
}

// Segment j changed (a merge in it, a new pair on one of its parts, its first part eaten): its
// first part and minimum are refreshed at the end of the round by its thread, told through
// s_dirty (block-shared, one word per thread). Plain stores of 1: every writer writes the same.
GPUTOK_FN void enc_huge_touch(GPUTOK_THREAD const EncHuge& h, GPUTOK_SHM enc_u32* s_dirty,
                              enc_u32 j) {
  h.seg[3 * j + 2] = 1u;
  s_dirty[j / h.per] = 1u;
}

// Segment j's first part (replaced by the part after it when a merge from an earlier segment
// ate it) and the lowest priority of its parts' pairs.
GPUTOK_FN void enc_huge_refresh(GPUTOK_THREAD const EncHuge& h, enc_u32 j) {
  const enc_u32 end = enc_huge_end(h, j);
  enc_u32 p = h.seg[3 * j];
  if (p != ENC_HUGE_NONE) {
    const enc_u32 b = h.prv[p];
    if (b != ENC_HUGE_NONE && h.nxt[b] != p) {  // eaten: its left part links past it
      p = h.nxt[p];
      if (p >= end) p = ENC_HUGE_NONE;
      h.seg[3 * j] = p;
    }
  }
  enc_u32 low = ENC_NO_MERGE;
  for (; p < end; p = h.nxt[p]) low = h.pr[p] < low ? h.pr[p] : low;  // (NONE ends it too)
  h.seg[3 * j + 1] = low;
  h.seg[3 * j + 2] = 0u;
}

// The block heaps' workspace fits in the piece's segment words (tree and sizes: five words per
// ENC_HEAP_BLOCK parts, in three per ENC_HUGE_SEG bytes) when the heap takes over.
static_assert(5 * ENC_HUGE_SEG <= 3 * ENC_HEAP_BLOCK, "see enc_merge_huge_piece's handover");

// The whole rule on the piece of len bytes at b (len >= ENC_HUGE_SEG), by the block's nt
// threads (tid: this one), each calling it with the same arguments; its ids end at the front of
// h.ids and every thread gets their count. s_min: four shared words; s_fk, s_dirty: nt words.
GPUTOK_FN enc_u32 enc_merge_huge_piece(GPUTOK_THREAD const EncMergeTable& t,
                                       const GPUTOK_DEV enc_u8* b,
                                       const GPUTOK_DEV enc_u32* byte_ids, EncHuge h,
                                       enc_u32 tid, enc_u32 nt,
                                       GPUTOK_SHM GPUTOK_SHARED_U32* s_min,
                                       GPUTOK_SHM enc_u32* s_fk, GPUTOK_SHM enc_u32* s_dirty) {
  const enc_u32 len = h.len;
  const enc_u32 j0 = tid * h.per < h.nseg ? tid * h.per : h.nseg;
  const enc_u32 j1 = j0 + h.per < h.nseg ? j0 + h.per : h.nseg;  // my segments [j0, j1)
  if (tid == 0) {
    GPUTOK_SHARED_STORE(&s_min[0], ENC_NO_MERGE);
    GPUTOK_SHARED_STORE(&s_min[3], 0u);  // merges so far
  }
  GPUTOK_BARRIER();  // (the block's last piece is done with the shared words)
  // every byte a part; my segments' bytes, pairs and minima
  enc_u32 tmin = ENC_NO_MERGE;
  bool has_parts = j0 < j1;
  for (enc_u32 j = j0; j < j1; ++j) {
    const enc_u32 end = enc_huge_end(h, j);
    enc_u32 low = ENC_NO_MERGE;
    for (enc_u32 p = j * ENC_HUGE_SEG; p < end; ++p) {
      h.ids[p] = byte_ids[b[p]];
      h.nxt[p] = p + 1 < len ? p + 1 : ENC_HUGE_NONE;
      h.prv[p] = p > 0 ? p - 1 : ENC_HUGE_NONE;
      enc_u32 q = ENC_NO_MERGE, m = 0;
      if (p + 1 < len) {
        q = (t.bits & ENC_PAIR_BYTES)
                ? enc_byte_pair_prio(t, b[p], b[p + 1])
                : enc_pair_lookup(t, byte_ids[b[p]], byte_ids[b[p + 1]], &m);
      }
      h.pr[p] = q;
      low = q < low ? q : low;
    }
    h.seg[3 * j] = j * ENC_HUGE_SEG;
    h.seg[3 * j + 1] = low;
    h.seg[3 * j + 2] = 0u;
    tmin = low < tmin ? low : tmin;
  }
  s_dirty[tid] = 0u;
  GPUTOK_SHARED_MIN(&s_min[0], tmin);
  GPUTOK_BARRIER();
  bool handover = false;
  for (enc_u32 round = 0;; ++round) {
    const enc_u32 r = GPUTOK_SHARED_LOAD(&s_min[round & 1u]);
    if (r == ENC_NO_MERGE) break;  // (the same word for every thread: all leave together)
    if (round >= ENC_HUGE_ROUNDS_MIN &&
        GPUTOK_SHARED_LOAD(&s_min[3]) < (enc_u32)ENC_HUGE_ROUND_MERGES * round) {
      handover = true;  // rounds that merge next to nothing: the heap goes on (see above)
      break;
    }
    const enc_u32 rf = r | ENC_HUGE_FLAG;
    if (tid == 0) {
      GPUTOK_SHARED_STORE(&s_min[(round + 1) & 1u], ENC_NO_MERGE);
      GPUTOK_SHARED_STORE(&s_min[2], ENC_HUGE_NONE);
    }
    const bool mine = tmin == r;  // some pair of mine is of priority r
    // 1. my parts as a function of the flag of the pair before my first part: bit x of fk is
    // the flag of my last pair when that one is x (both flags walked at once)
    enc_u32 fk = has_parts ? 0u : 2u;  // no r pair: 0 whatever comes in; no part: passed on
    if (mine) {
      enc_u32 f0 = 0u, f1 = 1u;
      for (enc_u32 j = j0; j < j1; ++j) {
        enc_u32 p = h.seg[3 * j];
        if (p == ENC_HUGE_NONE) continue;
        if (h.seg[3 * j + 1] != r) {  // no r pair in it: its last pair does not merge
          f0 = f1 = 0u;
          continue;
        }
        for (const enc_u32 end = enc_huge_end(h, j); p < end; p = h.nxt[p]) {
          const enc_u32 isr = h.pr[p] == r ? 1u : 0u;
          f0 = isr & (f0 ^ 1u);
          f1 = isr & (f1 ^ 1u);
        }
      }
      fk = f0 | (f1 << 1);
    }
    s_fk[tid] = fk;
    GPUTOK_BARRIER();
    // 2. the flag coming in: the threads before me composed back to the nearest constant
    // (codes: 0 and 3 constant, 1 flips, 2 passes on); then my merges flagged in pr
    if (mine) {
      enc_u32 x = 0u, flip = 0u;
      for (enc_u32 u = tid; u-- > 0;) {
        const enc_u32 k = s_fk[u];
        if (k == 0u || k == 3u) {
          x = k & 1u;
          break;
        }
        flip ^= k & 1u;
      }
      enc_u32 st = x ^ flip;
      for (enc_u32 j = j0; j < j1; ++j) {
        enc_u32 p = h.seg[3 * j];
        if (p == ENC_HUGE_NONE) continue;
        if (h.seg[3 * j + 1] != r) {
          st = 0u;
          continue;
        }
        for (const enc_u32 end = enc_huge_end(h, j); p < end; p = h.nxt[p]) {
          st = (h.pr[p] == r && st == 0u) ? 1u : 0u;
          if (st) h.pr[p] = rf;
        }
      }
    }
    GPUTOK_BARRIER();
    // 3. each merge's new pairs into lr; the first merge whose new pair is not above r
    if (mine) {
      enc_u32 cut = ENC_HUGE_NONE;
      for (enc_u32 j = j0; j < j1 && cut == ENC_HUGE_NONE; ++j) {
        if (h.seg[3 * j + 1] != r) continue;
        for (enc_u32 p = h.seg[3 * j], end = enc_huge_end(h, j); p < end; p = h.nxt[p]) {
          if (h.pr[p] != rf) continue;
          const enc_u32 q = h.nxt[p];
          const enc_u32 x = enc_huge_merged(t, h, p, q, r);
          enc_u32 lp = ENC_NO_MERGE, rp = ENC_NO_MERGE, m = 0;
          bool kept = false, next = false;
          const enc_u32 lb = h.prv[p];
          if (lb != ENC_HUGE_NONE) {
            const enc_u32 la = h.prv[lb];
            const bool eaten = la != ENC_HUGE_NONE && h.pr[la] == rf;  // la merged with lb
            lp = enc_pair_lookup(t, eaten ? enc_huge_merged(t, h, la, lb, r) : h.ids[lb], x, &m);
            kept = !eaten;
          }
          const enc_u32 r2 = h.nxt[q];
          if (r2 != ENC_HUGE_NONE) {
            rp = enc_pair_lookup(t, x, h.ids[r2], &m);
            next = h.pr[r2] == rf;
          }
          h.lr[p] = enc_huge_pack(lp, kept, rp, next);
          if (lp <= r || rp <= r) {  // (NO_MERGE is above every r)
            cut = p;
            break;
          }
        }
      }
      if (cut != ENC_HUGE_NONE) GPUTOK_SHARED_MIN(&s_min[2], cut);
    }
    GPUTOK_BARRIER();
    const enc_u32 last = GPUTOK_SHARED_LOAD(&s_min[2]);  // merges up to this part happen
    // 4. the links and ids of the merges that happen (their priorities are still flagged)
    if (mine) {
      enc_u32 merged = 0;
      for (enc_u32 j = j0; j < j1; ++j) {
        if (h.seg[3 * j + 1] != r) continue;
        for (enc_u32 p = h.seg[3 * j], end = enc_huge_end(h, j); p < end; p = h.nxt[p]) {
          if (h.pr[p] != rf || p > last) continue;
          const enc_u32 q = h.nxt[p];
          h.ids[p] = enc_huge_merged(t, h, p, q, r);
          const enc_u32 r2 = h.nxt[q];
          h.nxt[p] = r2;
          if (r2 != ENC_HUGE_NONE) h.prv[r2] = p;
          enc_huge_touch(h, s_dirty, q / ENC_HUGE_SEG);  // (q may have been its segment's first)
          ++merged;
        }
      }
      if (merged) GPUTOK_SHARED_ADD(&s_min[3], merged);
    }
    GPUTOK_BARRIER();
    // 5. the priorities: a merge's own pair, its left part's; the waiting merges unflagged
    if (mine) {
      for (enc_u32 j = j0; j < j1; ++j) {
        if (h.seg[3 * j + 1] != r) continue;
        bool changed = false;
        for (enc_u32 p = h.seg[3 * j], end = enc_huge_end(h, j); p < end; p = h.nxt[p]) {
          if (h.pr[p] != rf) continue;
          if (p > last) {
            h.pr[p] = r;
            continue;
          }
          const enc_u64 v = h.lr[p];
          const enc_u32 lo = (enc_u32)v, hi = (enc_u32)(v >> 32);
          const enc_u32 r2 = h.nxt[p];  // the part after the merge (links are updated)
          h.pr[p] = ((hi & ENC_HUGE_FLAG) && r2 <= last) ? enc_huge_prio((enc_u32)h.lr[r2])
                                                         : enc_huge_prio(hi);
          if (lo & ENC_HUGE_FLAG) {  // the part on the left stayed: its pair is the left one
            const enc_u32 lb = h.prv[p];
            h.pr[lb] = enc_huge_prio(lo);
            enc_huge_touch(h, s_dirty, lb / ENC_HUGE_SEG);
          }
          changed = true;
        }
        if (changed) enc_huge_touch(h, s_dirty, j);
      }
    }
    GPUTOK_BARRIER();
    // 6. my changed segments refreshed; the next round's minimum
    if (s_dirty[tid]) {
      s_dirty[tid] = 0u;
      tmin = ENC_NO_MERGE;
      has_parts = false;
      for (enc_u32 j = j0; j < j1; ++j) {
        if (h.seg[3 * j + 2]) enc_huge_refresh(h, j);
        tmin = h.seg[3 * j + 1] < tmin ? h.seg[3 * j + 1] : tmin;
        has_parts = has_parts || h.seg[3 * j] != ENC_HUGE_NONE;
      }
    }
    GPUTOK_SHARED_MIN(&s_min[(round + 1) & 1u], tmin);
    GPUTOK_BARRIER();
  }
  // the parts in order to the front of ids: my count, the counts before mine, my ids through lr
  enc_u32 c = 0;
  for (enc_u32 j = j0; j < j1; ++j)
    for (enc_u32 p = h.seg[3 * j], end = enc_huge_end(h, j); p < end; p = h.nxt[p]) ++c;
  s_fk[tid] = c;
  GPUTOK_BARRIER();
  enc_u32 base = 0, total = 0;
  for (enc_u32 u = 0; u < nt; ++u) {
    base += u < tid ? s_fk[u] : 0u;
    total += s_fk[u];
  }
  for (enc_u32 j = j0; j < j1; ++j)
    for (enc_u32 p = h.seg[3 * j], end = enc_huge_end(h, j); p < end; p = h.nxt[p])
      h.lr[base++] = h.ids[p];
  GPUTOK_BARRIER();
  for (enc_u32 k = tid; k < total; k += nt) h.ids[k] = (enc_u32)h.lr[k];
  GPUTOK_BARRIER();
  if (!handover) return total;
  // the heap on one thread from the rounds' state (the rule's own after their merges): its
  // keys in lr, where[] in pr, its tree and block sizes in the segment words
  if (tid == 0) {
    EncBlockHeaps bh;
    bh.heap = h.lr;
    bh.where = h.pr;
    bh.tree = (GPUTOK_DEV enc_u64*)h.seg;  // (8-byte aligned: enc_huge_seg_base is even)
    bh.size = h.seg + 4 * ((total + ENC_HEAP_BLOCK - 1) / ENC_HEAP_BLOCK);
    bh.nb = 0;
    GPUTOK_SHARED_STORE(&s_min[0], enc_merge_heap(t, h.ids, h.nxt, h.prv, bh, total));
  }
  GPUTOK_BARRIER();
  const enc_u32 left = GPUTOK_SHARED_LOAD(&s_min[0]);
  GPUTOK_BARRIER();  // (read before the block's next piece resets the word)
  return left;
}
