// encode_merge_rules.h: the merge stage's per-entry rules, for every dialect (included by
// encode_rules.h, which defines the types, constants and hashes used here).
#pragma once

// ---------------------------------------------------------------- merge table
// THE PAIR PROBE: the open-addressing table of MergeTable (gputok/stages/table.py), probed
// exactly as there: key = left << 32 | right, home slot = (key * HASH_MUL) >> (64 - bits), linear
// probing, an empty slot ends the probe. Returns the pair's priority (ENC_NO_MERGE when absent)
// and sets *merged to the merged id.
// Layout on a device (gputok/backends/device_tables.py, pair_slots), said by the flag
// ENC_PAIR_COMPACT in t_bits (the low 8 bits are the table's size bits):
//   * two 64-bit words per slot, [key, priority | merged << 32], so a probe that hits reads
//     one 16-byte slot (one cache line) where three separate arrays cost three misses: the
//     probes' loads were half of encode_merge_short's time on a CPU (perf, multilingual text);
//   * ENC_PAIR_COMPACT: one 64-bit word per slot, left << 42 | right << 21 | merged, for a
//     vocabulary whose every pair's priority is its merged id (the tiktoken rule) and whose ids
//     fit ENC_PAIR_ID_BITS: half the memory (o200k 16 -> 8 MB), twice the slots per cache line,
//     the same home slots and probe sequence. An empty slot (all ones) matches no pair: no id
//     reaches 2^21 - 1 there.
// THE BYTE-PAIR BLOCK: with ENC_PAIR_BYTES in the bits, the slots are followed by the priority
// of every pair of single-byte tokens, (byte_ids[x], byte_ids[y]) at x << 8 | y, two uint32 to a
// 64-bit word (the low half first): exactly what the probe returns for that pair
// (gputok/backends/device_tables.py, byte_pair_block). A piece's first priorities, one per byte
// pair (~45% of the probes on multilingual text), are then one load each from a 256 KB block
// whose used part stays cached, instead of hash probes into a table of several MB.
struct EncMergeTable {
  const GPUTOK_DEV enc_u64* slots;
  enc_u32 bits;
};

GPUTOK_FN enc_u32 enc_byte_pair_prio(GPUTOK_THREAD const EncMergeTable& t, enc_u8 x, enc_u8 y) {
  const enc_u64 words = (enc_u64)((t.bits & ENC_PAIR_COMPACT) ? 1u : 2u) << (t.bits & 0xFFu);
  const enc_u32 k = ((enc_u32)x << 8) | (enc_u32)y;
  return (enc_u32)(t.slots[words + (k >> 1)] >> (32u * (k & 1u)));
}

GPUTOK_FN enc_u64 enc_pair_home(GPUTOK_THREAD const EncMergeTable& t, enc_u32 left,
                                enc_u32 right) {
  const enc_u64 key = ((enc_u64)left << 32) | (enc_u64)right;
  return (key * ENC_HASH_MUL) >> (64 - (t.bits & 0xFFu));
}

GPUTOK_FN void enc_pair_prefetch(GPUTOK_THREAD const EncMergeTable& t, enc_u32 left,
                                 enc_u32 right) {
  const enc_u64 s = enc_pair_home(t, left, right);
  ENC_PREFETCH(t.slots + ((t.bits & ENC_PAIR_COMPACT) ? s : 2 * s));
}

GPUTOK_FN enc_u32 enc_pair_lookup(GPUTOK_THREAD const EncMergeTable& t, enc_u32 left,
                                  enc_u32 right, GPUTOK_THREAD enc_u32* merged) {
  const enc_u64 mask = ((enc_u64)1 << (t.bits & 0xFFu)) - 1;
  enc_u64 s = enc_pair_home(t, left, right);
  if (t.bits & ENC_PAIR_COMPACT) {
    const enc_u64 want = ((enc_u64)left << ENC_PAIR_ID_BITS) | (enc_u64)right;
    const enc_u64 id_mask = ((enc_u64)1 << ENC_PAIR_ID_BITS) - 1;
#ifdef ENC_PROBE_TWO_SLOTS
    // the same probe two slots at a time, the answer selected without a branch: whether a
    // pair is in the table is a coin toss on real text (about half of a merge step's probes
    // find nothing), and a CPU mispredicted that branch on every other probe
    while (true) {
      const enc_u64 k0 = t.slots[s], k1 = t.slots[(s + 1) & mask];
      const bool hit0 = (k0 >> ENC_PAIR_ID_BITS) == want, end0 = k0 == ENC_EMPTY_KEY;
      const bool hit1 = (k1 >> ENC_PAIR_ID_BITS) == want, end1 = k1 == ENC_EMPTY_KEY;
      if (hit0 | end0 | hit1 | end1) {
        const enc_u32 v1 = hit1 ? (enc_u32)(k1 & id_mask) : ENC_NO_MERGE;
        const enc_u32 v0 = hit0 ? (enc_u32)(k0 & id_mask) : (end0 ? ENC_NO_MERGE : v1);
        *merged = v0;
        return v0;
      }
      s = (s + 2) & mask;
    }
#else
    while (true) {
      const enc_u64 k = t.slots[s];
      if ((k >> ENC_PAIR_ID_BITS) == want) {
        *merged = (enc_u32)(k & id_mask);
        return *merged;
      }
      if (k == ENC_EMPTY_KEY) return ENC_NO_MERGE;
      s = (s + 1) & mask;
    }
#endif
  }
  const enc_u64 key = ((enc_u64)left << 32) | (enc_u64)right;
  while (true) {
    const enc_u64 k = t.slots[2 * s];
    if (k == key) {
      const enc_u64 v = t.slots[2 * s + 1];
      *merged = (enc_u32)(v >> 32);
      return (enc_u32)v;
    }
    if (k == ENC_EMPTY_KEY) return ENC_NO_MERGE;
    s = (s + 1) & mask;
  }
}

// ---------------------------------------------------------------- whole-token table
// The whole-token table (gputok/backends/device_tables.py, whole_table): open addressing on the
// top bits of enc_bytes_hash, linear probing; four words per slot, [low 32 bits of the hash,
// token id (ENC_EMPTY_SLOT: free), first byte in tok_bytes, length], so a probe reads one 16-byte
// slot and, when tag and length match, the token's bytes (two cache lines; separate tag / entry
// / offset / id arrays cost five). The low 8 bits of `bits` are the table's size bits; with
// ENC_WHOLE_BYTES set the slots are followed by the one-byte block: 256 words, the id of the
// token whose bytes are that one byte (ENC_NO_MERGE: none), exactly what the probe returns
// (device_tables.py, whole_byte_block). A one-byte piece (15-23% of the pieces of prose, code
// and multilingual text) then takes its id with one load: no hash, probe or byte compare.
struct EncWholeTable {
  const GPUTOK_DEV enc_u32* slots;
  const GPUTOK_DEV enc_u8* tok_bytes;
  enc_u32 bits;  // 0: no whole-piece lookup (HF rule without ignore_merges)
};

GPUTOK_FN enc_u64 enc_whole_home(GPUTOK_THREAD const EncWholeTable& w, enc_u64 h) {
  return h >> (64 - (w.bits & 0xFFu));
}

// The id of the token whose bytes are p[0..len), or ENC_NO_MERGE.
GPUTOK_FN enc_u32 enc_whole_lookup(GPUTOK_THREAD const EncWholeTable& w,
                                   const GPUTOK_DEV enc_u8* p, enc_u32 len, enc_u64 h) {
  const enc_u64 mask = ((enc_u64)1 << (w.bits & 0xFFu)) - 1;
  enc_u64 s = enc_whole_home(w, h);
  const enc_u32 tag = (enc_u32)h;
  while (true) {
    const GPUTOK_DEV enc_u32* slot = w.slots + 4 * s;
    const enc_u32 id = slot[1];
    if (id == ENC_EMPTY_SLOT) return ENC_NO_MERGE;
    if (slot[0] == tag && slot[3] == len && enc_bytes_equal(w.tok_bytes + slot[2], p, len))
      return id;
    s = (s + 1) & mask;
  }
}

// The id of a one-byte piece without a probe: the one-byte block's (see EncWholeTable) where
// the table has one and it names a token; else, where no whole token can answer (no whole-token
// table: the HF rule without ignore_merges; or the block says none), the merge rule's answer for
// one part, which merges nothing: the byte's own id. ENC_NO_MERGE: a table without the block
// (the caller probes it).
GPUTOK_FN enc_u32 enc_one_byte_id(GPUTOK_THREAD const EncWholeTable& w,
                                  const GPUTOK_DEV enc_u32* byte_ids, enc_u8 b) {
  if (w.bits & ENC_WHOLE_BYTES) {
    const enc_u32 id = w.slots[((enc_u64)4 << (w.bits & 0xFFu)) + b];
    return id != ENC_NO_MERGE ? id : byte_ids[b];
  }
  return w.bits == 0 ? byte_ids[b] : ENC_NO_MERGE;
}

// What an entry is before any merging (encode_piece_kind): a special token (one id), the
// sentinel or a gap (no ids), a piece that is one token (one id), or a piece to merge (then h is
// its bytes hash when with_hash, for the dedup of the dialects that have one).
struct EncKind {
  bool done;      // final: `count` ids (0 or 1), the one being `id`
  enc_u32 count;
  enc_u32 id;
  enc_u64 h;
};

// has_h: the caller computed the piece's bytes hash already (h; the native CPU device hashes
// pieces ahead of time to prefetch their table slots), else it is computed here when needed.
GPUTOK_FN EncKind enc_piece_kind_hashed(const GPUTOK_DEV enc_u8* buf, enc_u32 s, enc_u32 len,
                                        enc_u32 sp, GPUTOK_THREAD const EncWholeTable& w,
                                        bool with_hash, enc_u64 h, bool has_h) {
  EncKind k;
  k.done = true;
  k.count = 0;
  k.id = 0;
  k.h = 0;
  if (sp != ENC_NORMAL) {  // a special token (one id) or the sentinel (none)
    if (sp != ENC_GAP) {
      k.count = 1;
      k.id = sp;
    }
    return k;
  }
  const GPUTOK_DEV enc_u8* p = buf + s;
  if (len == 1 && (w.bits & ENC_WHOLE_BYTES)) {  // the one-byte block (see EncWholeTable)
    const enc_u32 id = w.slots[((enc_u64)4 << (w.bits & 0xFFu)) + p[0]];
    if (id != ENC_NO_MERGE) {
      k.count = 1;
      k.id = id;
      return k;
    }
  }
  if (w.bits != 0 || with_hash) k.h = has_h ? h : enc_bytes_hash(p, len);
  if (w.bits != 0) {
    const enc_u32 id = enc_whole_lookup(w, p, len, k.h);
    if (id != ENC_NO_MERGE) {
      k.count = 1;
      k.id = id;
      return k;
    }
  }
  k.done = false;
  return k;
}

GPUTOK_FN EncKind enc_piece_kind_of(const GPUTOK_DEV enc_u8* buf, enc_u32 s, enc_u32 len,
                                    enc_u32 sp, GPUTOK_THREAD const EncWholeTable& w,
                                    bool with_hash) {
  return enc_piece_kind_hashed(buf, s, len, sp, w, with_hash, 0, false);
}

// ---------------------------------------------------------------- short merges
// The sequential rule on one run of ids, in place: merge the adjacent pair of lowest priority,
// leftmost on ties (THE COMPARATOR: strict <), until no pair merges; pr[0 .. len - 1) caches the
// pairs' priorities. O(len^2): for short runs (encode_merge_short's pieces, encode_merge_long's
// segments). Written as steps so that a CPU can interleave several runs: each step first looks
// up the priorities the previous one left pending (the pairs its merge made, whose table slots
// it prefetched), so a device that hides latency by switching threads runs the steps in a loop
// (enc_merge_small) and the native CPU device switches between runs instead (encode_merge.cu,
// ENC_HOST_MERGE_LANES).
struct EncMergeRun {
  GPUTOK_DEV enc_u32* ids;
  GPUTOK_DEV enc_u32* pr;
  enc_u32 len;     // ids left
  enc_u32 lo, hi;  // pr[lo .. hi) pending: looked up at the next step
#ifdef ENC_HOST_SHIFT_BLOCK
  bool roomy;  // ids and pr hold 2 * ENC_HOST_SHIFT_BLOCK + 2 elements at least (see the step)
#endif
};

GPUTOK_FN void enc_merge_begin(GPUTOK_THREAD const EncMergeTable& t,
                               GPUTOK_THREAD EncMergeRun& r, GPUTOK_DEV enc_u32* ids,
                               GPUTOK_DEV enc_u32* pr, enc_u32 len) {
  r.ids = ids;
  r.pr = pr;
  r.len = len;
  r.lo = 0;
  r.hi = len > 0 ? len - 1 : 0;
#ifdef ENC_HOST_SHIFT_BLOCK
  r.roomy = false;
#endif
  for (enc_u32 k = 0; k + 1 < len; ++k) enc_pair_prefetch(t, ids[k], ids[k + 1]);
}

// One merge (after the pending lookups); false when no pair merges: r.len ids are final.
GPUTOK_FN bool enc_merge_step(GPUTOK_THREAD const EncMergeTable& t,
                              GPUTOK_THREAD EncMergeRun& r) {
  GPUTOK_DEV enc_u32* ids = r.ids;
  GPUTOK_DEV enc_u32* pr = r.pr;
  enc_u32 m;
  for (enc_u32 k = r.lo; k < r.hi; ++k) pr[k] = enc_pair_lookup(t, ids[k], ids[k + 1], &m);
  enc_u32 len = r.len;
#ifdef ENC_SCAN_TWO_MINIMA
  // THE COMPARATOR (lowest priority, then leftmost) as one integer minimum of priority << 32 |
  // position, kept in two running minima (even and odd pairs): half the loop-carried chain of
  // one compare-and-select per pair, for an out-of-order CPU (kernels/dialect_host.h)
  enc_u64 m0 = ENC_U64_MAX, m1 = ENC_U64_MAX;
  enc_u32 q = 0;
  for (; q + 2 < len; q += 2) {
    const enc_u64 a0 = ((enc_u64)pr[q] << 32) | (enc_u64)q;
    const enc_u64 a1 = ((enc_u64)pr[q + 1] << 32) | (enc_u64)(q + 1);
    m0 = a0 < m0 ? a0 : m0;
    m1 = a1 < m1 ? a1 : m1;
  }
  if (q + 1 < len) {
    const enc_u64 a0 = ((enc_u64)pr[q] << 32) | (enc_u64)q;
    m0 = a0 < m0 ? a0 : m0;
  }
  const enc_u64 key = m0 < m1 ? m0 : m1;
  const enc_u32 best = len > 1 ? (enc_u32)(key >> 32) : ENC_NO_MERGE;
  const enc_u32 at = (enc_u32)key;
#else
  // THE COMPARATOR (lowest priority, then leftmost: strict <) in one running minimum of 32-bit
  // compares: a GPU thread issues in order, and the 64-bit keys of the CPU's form cost it two
  // compares and two selects a pair (its merge stage ran 11-13% slower on an H200,
  // bench/results/cuda.md, "The kernels' GPU forms")
  enc_u32 best = ENC_NO_MERGE, at = 0;
  for (enc_u32 k = 0; k + 1 < len; ++k) {
    if (pr[k] < best) {
      best = pr[k];
      at = k;
    }
  }
#endif
  if (best == ENC_NO_MERGE) {
    r.lo = r.hi = 0;
    return false;
  }
  enc_u32 merged = best;  // a compact table's priority is the merged id (the tiktoken rule)
  if (!(t.bits & ENC_PAIR_COMPACT)) enc_pair_lookup(t, ids[at], ids[at + 1], &merged);
  ids[at] = merged;
#ifdef ENC_HOST_SHIFT_BLOCK
  // a short run (most of them) closes the gap with one fixed-size move of each array
  // (dialect_host.h, enc_host_shift_block): past the run's end it moves what no step reads,
  // and the loops' exits, mispredicted as often as the run's length changes, are gone
  if (r.roomy && len <= ENC_HOST_SHIFT_BLOCK + 2) {
    enc_host_shift_block(ids + at + 1);
    enc_host_shift_block(pr + at + 1);
  } else
#endif
  {
    for (enc_u32 k = at + 1; k + 1 < len; ++k) ids[k] = ids[k + 1];
    for (enc_u32 k = at + 1; k + 2 < len; ++k) pr[k] = pr[k + 1];
  }
  --len;
  r.len = len;
  // the pairs the merge made: (at - 1, at) and (at, at + 1), where they exist; both slots are
  // fetched before either probe waits on memory
  r.lo = at > 0 ? at - 1 : at;
  r.hi = at + 1 < len ? at + 1 : len - 1;
  for (enc_u32 k = r.lo; k < r.hi; ++k) enc_pair_prefetch(t, ids[k], ids[k + 1]);
  return true;
}

// The whole rule on one run; returns how many ids are left (at the front of ids).
GPUTOK_FN enc_u32 enc_merge_small(GPUTOK_THREAD const EncMergeTable& t, GPUTOK_DEV enc_u32* ids,
                                  GPUTOK_DEV enc_u32* pr, enc_u32 len) {
  EncMergeRun r;
  enc_merge_begin(t, r, ids, pr, len);
  while (enc_merge_step(t, r)) {
  }
  return r.len;
}

// One piece shorter than ENC_LONG_PIECE: its bytes' ids into ids[0..len), the run begun there
// (enc_merge_begin); enc_merge_short_piece merges it at once and returns the id count.
// With the byte-pair block (ENC_PAIR_BYTES) its first priorities are read from there, none left
// pending.
GPUTOK_FN void enc_merge_short_begin(GPUTOK_THREAD const EncMergeTable& t,
                                     GPUTOK_THREAD EncMergeRun& r, const GPUTOK_DEV enc_u8* b,
                                     const GPUTOK_DEV enc_u32* byte_ids, GPUTOK_DEV enc_u32* ids,
                                     GPUTOK_DEV enc_u32* pr, enc_u32 len) {
  for (enc_u32 k = 0; k < len; ++k) ids[k] = byte_ids[b[k]];
  if (!(t.bits & ENC_PAIR_BYTES)) {
    enc_merge_begin(t, r, ids, pr, len);
    return;
  }
  for (enc_u32 k = 0; k + 1 < len; ++k) pr[k] = enc_byte_pair_prio(t, b[k], b[k + 1]);
  r.ids = ids;
  r.pr = pr;
  r.len = len;
  r.lo = 0;
  r.hi = 0;
#ifdef ENC_HOST_SHIFT_BLOCK
  r.roomy = false;
#endif
}

GPUTOK_FN enc_u32 enc_merge_short_piece(GPUTOK_THREAD const EncMergeTable& t,
                                        const GPUTOK_DEV enc_u8* b,
                                        const GPUTOK_DEV enc_u32* byte_ids,
                                        GPUTOK_DEV enc_u32* ids, GPUTOK_DEV enc_u32* pr,
                                        enc_u32 len) {
  EncMergeRun r;
  enc_merge_short_begin(t, r, b, byte_ids, ids, pr, len);
  while (enc_merge_step(t, r)) {
  }
  return r.len;
}

// ---------------------------------------------------------------- long pieces
// Indexed 4-ary min-heap over the parts of one piece. Parts are named by their first byte's
// offset p in the piece; a heap entry is its key, priority << 32 | p, so the minimum is "lowest
// priority, leftmost" (THE COMPARATOR: one integer comparison) and sifting reads only the heap
// array, whose four children of a node share a cache line; where[p] is p's index in the heap.
// Performance notes: the first form (binary heap of part indices, keys compared through a
// separate priority array) took ~1.1 us per byte of "a" * 10**6 on a CPU, two or three cache
// misses per level over 20 levels; keys in the heap and four children per node halve the
// levels and the misses per level (measured in bench/bench_long.py).
struct EncHeap {
  GPUTOK_DEV enc_u64* heap;   // heap[i] = key of the part at index i
  GPUTOK_DEV enc_u32* where;  // where[p] = index of part p in heap
  enc_u32 size;
};

GPUTOK_FN enc_u64 enc_heap_key(enc_u32 prio, enc_u32 p) {
  return ((enc_u64)prio << 32) | (enc_u64)p;
}

GPUTOK_FN void enc_heap_set(GPUTOK_THREAD EncHeap& h, enc_u32 i, enc_u64 k) {
  h.heap[i] = k;
  h.where[(enc_u32)k] = i;
}

GPUTOK_FN void enc_heap_up(GPUTOK_THREAD EncHeap& h, enc_u32 i) {
  const enc_u64 k = h.heap[i];
  while (i > 0) {
    const enc_u32 parent = (i - 1) / 4;
    if (h.heap[parent] <= k) break;
    enc_heap_set(h, i, h.heap[parent]);
    i = parent;
  }
  enc_heap_set(h, i, k);
}

GPUTOK_FN void enc_heap_down(GPUTOK_THREAD EncHeap& h, enc_u32 i) {
  const enc_u64 k = h.heap[i];
  while (true) {
    const enc_u32 first = 4 * i + 1;
    if (first >= h.size) break;
    const enc_u32 end = h.size - first < 4 ? h.size : first + 4;
    enc_u32 c = first;
    enc_u64 ck = h.heap[first];
    for (enc_u32 j = first + 1; j < end; ++j) {
      if (h.heap[j] < ck) {
        ck = h.heap[j];
        c = j;
      }
    }
    if (ck >= k) break;
    enc_heap_set(h, i, ck);
    i = c;
  }
  enc_heap_set(h, i, k);
}

// part p's key is now k: restore the heap order
GPUTOK_FN void enc_heap_fix(GPUTOK_THREAD EncHeap& h, enc_u32 p, enc_u64 k) {
  const enc_u32 i = h.where[p];
  h.heap[i] = k;
  enc_heap_up(h, i);
  enc_heap_down(h, h.where[p]);
}

GPUTOK_FN void enc_heap_remove(GPUTOK_THREAD EncHeap& h, enc_u32 p) {
  const enc_u32 i = h.where[p];
  const enc_u64 last = h.heap[h.size - 1];
  --h.size;
  if (i < h.size) {
    enc_heap_set(h, i, last);
    enc_heap_up(h, i);
    enc_heap_down(h, h.where[(enc_u32)last]);
  }
}

// Long runs: the heap is split into blocks of ENC_HEAP_BLOCK consecutive parts, each with its
// own 4-ary heap (a merge touches parts p, its right neighbour and its left one: at most two
// neighbouring blocks), and a tree of the blocks' minima on top, so every sift stays within a
// few cache-resident KB whatever the run's length. Performance notes: one heap over the whole
// run cost 160 ns per byte of "a" * 10**6 and 240 at 10**7 (its lower levels miss the caches);
// blocks keep the time per byte flat in the length (bench/bench_long.py).
#ifndef ENC_HEAP_BLOCK
#define ENC_HEAP_BLOCK 2048
#endif
// the per-run tree and block sizes live at slots indexed by (run start / ENC_LONG_PIECE): runs
// are at least ENC_LONG_PIECE long, so with blocks at least twice that, runs never overlap there
static_assert(ENC_HEAP_BLOCK >= 2 * ENC_LONG_PIECE, "see the block storage above");

struct EncBlockHeaps {
  GPUTOK_DEV enc_u64* heap;   // block j's heap: heap[j * ENC_HEAP_BLOCK ...]
  GPUTOK_DEV enc_u32* where;  // where[p]: part p's index in its block's heap
  GPUTOK_DEV enc_u64* tree;   // tree[nb + j]: block j's minimum (~0 when empty); tree[i]: min of
                              // 2i, 2i + 1
  GPUTOK_DEV enc_u32* size;   // size[j]: block j's heap size
  enc_u32 nb;
};

GPUTOK_FN EncHeap enc_block(GPUTOK_THREAD const EncBlockHeaps& b, enc_u32 j) {
  EncHeap h;
  h.heap = b.heap + (enc_u64)j * ENC_HEAP_BLOCK;
  h.where = b.where;
  h.size = b.size[j];
  return h;
}

// block j's heap h changed: store its size, and its minimum up the tree while that changes
GPUTOK_FN void enc_block_done(GPUTOK_THREAD EncBlockHeaps& b, enc_u32 j,
                              GPUTOK_THREAD const EncHeap& h) {
  b.size[j] = h.size;
  enc_u32 i = b.nb + j;
  const enc_u64 v = h.size ? h.heap[0] : ENC_U64_MAX;
  if (b.tree[i] == v) return;
  b.tree[i] = v;
  for (i >>= 1; i >= 1; i >>= 1) {
    const enc_u64 l = b.tree[2 * i], r = b.tree[2 * i + 1];
    const enc_u64 m = l < r ? l : r;
    if (b.tree[i] == m) break;  // unchanged here: unchanged above
    b.tree[i] = m;
  }
}

// The sequential rule on one run of ids in O(len log len): a doubly linked list of parts and
// the block heaps above. Returns how many ids are left (compacted to the front of ids).
GPUTOK_FN enc_u32 enc_merge_heap(GPUTOK_THREAD const EncMergeTable& t, GPUTOK_DEV enc_u32* ids,
                                 GPUTOK_DEV enc_u32* nxt, GPUTOK_DEV enc_u32* prv,
                                 EncBlockHeaps b, enc_u32 len) {
  // parts are local offsets, len means "none"
  enc_u32 m;
  for (enc_u32 k = 0; k < len; ++k) {
    nxt[k] = k + 1;
    prv[k] = k == 0 ? len : k - 1;
  }
  b.nb = (len + ENC_HEAP_BLOCK - 1) / ENC_HEAP_BLOCK;
  for (enc_u32 j = 0; j < b.nb; ++j) {
    const enc_u32 lo = j * ENC_HEAP_BLOCK;
    const enc_u32 n = len - lo < ENC_HEAP_BLOCK ? len - lo : ENC_HEAP_BLOCK;
    EncHeap h;
    h.heap = b.heap + lo;
    h.where = b.where;
    h.size = n;
    for (enc_u32 k = 0; k < n; ++k) {
      const enc_u32 p = lo + k;
      const enc_u32 pr = p + 1 < len ? enc_pair_lookup(t, ids[p], ids[p + 1], &m) : ENC_NO_MERGE;
      enc_heap_set(h, k, enc_heap_key(pr, p));
    }
    for (enc_u32 i = (n - 2) / 4 + 1; n > 1 && i-- > 0;) enc_heap_down(h, i);
    b.size[j] = n;
    b.tree[b.nb + j] = h.heap[0];
  }
  for (enc_u32 i = b.nb; i-- > 1;) {
    const enc_u64 l = b.tree[2 * i], r = b.tree[2 * i + 1];
    b.tree[i] = l < r ? l : r;
  }
  while (true) {
    const enc_u64 top = b.tree[1];
    if ((enc_u32)(top >> 32) == ENC_NO_MERGE) break;  // the smallest key has no merge: none has
    const enc_u32 p = (enc_u32)top;
    const enc_u32 q = nxt[p];
    enc_u32 merged;
    enc_pair_lookup(t, ids[p], ids[q], &merged);
    ids[p] = merged;
    const enc_u32 after = nxt[q];
    nxt[p] = after;
    if (after < len) prv[after] = p;
    const enc_u32 before = prv[p];
    if (before < len) enc_pair_prefetch(t, ids[before], merged);
    const enc_u32 jq = q / ENC_HEAP_BLOCK;
    EncHeap hq = enc_block(b, jq);
    enc_heap_remove(hq, q);
    enc_block_done(b, jq, hq);
    const enc_u32 jp = p / ENC_HEAP_BLOCK;
    EncHeap hp = enc_block(b, jp);
    enc_heap_fix(hp, p, enc_heap_key(after < len ? enc_pair_lookup(t, merged, ids[after], &m)
                                                 : ENC_NO_MERGE, p));
    enc_block_done(b, jp, hp);
    if (before < len) {
      const enc_u32 jb = before / ENC_HEAP_BLOCK;
      EncHeap hb = enc_block(b, jb);
      enc_heap_fix(hb, before, enc_heap_key(enc_pair_lookup(t, ids[before], merged, &m), before));
      enc_block_done(b, jb, hb);
    }
  }
  // compact the surviving parts to the front (the write index never passes the read index)
  enc_u32 out = 0;
  for (enc_u32 p = 0; p < len; p = nxt[p]) ids[out++] = ids[p];
  return out;
}

// Long runs, first in rounds: r, the lowest priority of any pair, is merged everywhere in one
// left-to-right sweep (leftmost first where two r pairs overlap), then the next lowest, and so
// on: a sequential pass over an array per round instead of three heap updates per merge. This
// is the sequential rule as long as no merge makes a pair of priority r or below: each merge
// is then the lowest pair, leftmost (the pairs left of the sweep are all above r), and the
// lowest pair of the next round is the minimum the sweep saw. A new pair not above r (a
// vocabulary whose merged token ranks below a part; or one of r itself: a merge never makes a
// pair of its own token, but SentencePiece ranks equal scores alike, and that pair is then the
// leftmost of priority r), on a merge's left or on its right before the next part merges on,
// ends the rounds there, and so does a round that merged fewer than
// one part in ENC_ROUND_MIN_SHARE (the sweeps then cost at most that many times the merges):
// the heap takes over from that state, which is the rule's own state after those merges.
// pr[k] (workspace, len) is the priority of the pair (k, k + 1). Returns the parts left (at
// the front of ids); *finished: no pair merges (else the heap goes on from them).
// Performance notes: "a" * n merges in a few rounds (aa, then aaaa, ...), each a streaming pass,
// where the heap spent ~60 ns per byte on three sifts and tree updates per merge.
#ifndef ENC_ROUND_MIN_SHARE
#define ENC_ROUND_MIN_SHARE 8
#endif

// Where a round reads its parts (enc_part_id, enc_part_prio): the arrays the last round left,
// rewritten in place (EncArrayParts: ids, and pr[k] the priority of the pair (k, k + 1), the
// last part's ENC_NO_MERGE), or, for a run's first round, its bytes (EncByteParts: the one-byte
// tokens' ids and the byte-pair block's priorities, ENC_PAIR_BYTES). From the bytes the round
// writes only its output: the run's per-byte arrays are never written whole ("a" * n: 4 bytes of
// workspace a byte, not 8; in a fresh process their first touch cost more than the merging).
struct EncArrayParts {
  GPUTOK_DEV enc_u32* ids;
  GPUTOK_DEV enc_u32* pr;
};

struct EncByteParts {
  const GPUTOK_DEV enc_u8* b;
  const GPUTOK_DEV enc_u32* byte_ids;
  enc_u32 len;
};

GPUTOK_FN enc_u32 enc_part_id(GPUTOK_THREAD const EncArrayParts& p, enc_u32 i) {
  return p.ids[i];
}

GPUTOK_FN enc_u32 enc_part_id(GPUTOK_THREAD const EncByteParts& p, enc_u32 i) {
  return p.byte_ids[p.b[i]];
}

GPUTOK_FN enc_u32 enc_part_prio(GPUTOK_THREAD const EncMergeTable& t,
                                GPUTOK_THREAD const EncArrayParts& p, enc_u32 i) {
  return p.pr[i];
}

GPUTOK_FN enc_u32 enc_part_prio(GPUTOK_THREAD const EncMergeTable& t,
                                GPUTOK_THREAD const EncByteParts& p, enc_u32 i) {
  return i + 1 < p.len ? enc_byte_pair_prio(t, p.b[i], p.b[i + 1]) : ENC_NO_MERGE;
}

// The lowest priority of the first round's pairs (the arrays: pr written as it goes).
GPUTOK_FN enc_u32 enc_parts_begin(GPUTOK_THREAD const EncMergeTable& t,
                                  GPUTOK_THREAD const EncArrayParts& p, enc_u32 m) {
  enc_u32 best = ENC_NO_MERGE, merged = 0;
  for (enc_u32 k = 0; k + 1 < m; ++k) {
    p.pr[k] = enc_pair_lookup(t, p.ids[k], p.ids[k + 1], &merged);
    if (p.pr[k] < best) best = p.pr[k];
  }
  if (m > 0) p.pr[m - 1] = ENC_NO_MERGE;  // the last part has no pair (and never equals r)
  return best;
}

GPUTOK_FN enc_u32 enc_parts_begin(GPUTOK_THREAD const EncMergeTable& t,
                                  GPUTOK_THREAD const EncByteParts& p, enc_u32 m) {
  enc_u32 best = ENC_NO_MERGE;
  for (enc_u32 k = 0; k + 1 < m; ++k) {
    const enc_u32 q = enc_byte_pair_prio(t, p.b[k], p.b[k + 1]);
    best = q < best ? q : best;
  }
  return best;
}

// The parts as ids, where no round ran (the arrays hold them already).
GPUTOK_FN void enc_parts_out(GPUTOK_THREAD const EncArrayParts& p, GPUTOK_DEV enc_u32* ids,
                             enc_u32 m) {}

GPUTOK_FN void enc_parts_out(GPUTOK_THREAD const EncByteParts& p, GPUTOK_DEV enc_u32* ids,
                             enc_u32 m) {
  for (enc_u32 k = 0; k < m; ++k) ids[k] = enc_part_id(p, k);
}

// One round: every pair of priority r merged in one left-to-right sweep over the m parts of
// src, the output into ids / pr (never ahead of the part being read: in place for the arrays).
// Returns the parts left; *best: the lowest priority of the output's pairs; *merges: how many
// merges; *cut: a new pair not above r ended the round (the parts after it copied over
// unmerged).
template <class P>
GPUTOK_FN enc_u32 enc_merge_round(GPUTOK_THREAD const EncMergeTable& t,
                                  GPUTOK_THREAD const P& src, GPUTOK_DEV enc_u32* ids,
                                  GPUTOK_DEV enc_u32* pr, enc_u32 m, enc_u32 r,
                                  GPUTOK_THREAD enc_u32* best, GPUTOK_THREAD enc_u32* merges,
                                  GPUTOK_THREAD bool* cut) {
  enc_u32 w = 0, i = 0, merged = 0, low = ENC_NO_MERGE, count = 0;
  enc_u32 prev_pr = ENC_NO_MERGE;  // the last output's pair priority before this round
  bool prev_new = false;           // the last output is a merge of this round
  *cut = true;
  while (i < m) {
    enc_u32 tok = enc_part_id(src, i);
    const enc_u32 pi = enc_part_prio(t, src, i);
    enc_u32 q = ENC_NO_MERGE;
    if (prev_new) {  // the pair the last merge made on its right, before tok merges on
      q = enc_pair_lookup(t, ids[w - 1], tok, &merged);
      if (q <= r) {  // not above the round's priority: the heap goes on from here
        for (; i < m; ++i) ids[w++] = enc_part_id(src, i);
        *best = low;
        *merges = count;
        return w;
      }
    }
    const bool cur_new = pi == r;  // i + 1 < m: the last part's priority is ENC_NO_MERGE
    if (cur_new) {
      if (t.bits & ENC_PAIR_COMPACT) {
        tok = r;  // a compact table's priority is the merged id (the tiktoken rule)
      } else {
        enc_pair_lookup(t, tok, enc_part_id(src, i + 1), &tok);
      }
      i += 2;
      ++count;
    } else {
      i += 1;
    }
    if (w > 0) {
      // the pair (ids[w - 1], tok): the one this merge made on its left, the one the last
      // made on its right, or unchanged when neither side merged this round
      const enc_u32 p = cur_new ? enc_pair_lookup(t, ids[w - 1], tok, &merged)
                                : (prev_new ? q : prev_pr);
      pr[w - 1] = p;
      if (p < low) low = p;
      if (p <= r) {
        ids[w++] = tok;
        for (; i < m; ++i) ids[w++] = enc_part_id(src, i);
        *best = low;
        *merges = count;
        return w;
      }
    }
    ids[w++] = tok;
    prev_new = cur_new;
    prev_pr = pi;
  }
  pr[w - 1] = ENC_NO_MERGE;
  *best = low;
  *merges = count;
  *cut = false;
  return w;
}

// The rounds on the m parts of `first` (its first round from there, the next ones in ids / pr):
// returns the parts left (at the front of ids); *finished: no pair merges.
template <class P>
GPUTOK_FN enc_u32 enc_merge_rounds_from(GPUTOK_THREAD const EncMergeTable& t,
                                        GPUTOK_THREAD const P& first, GPUTOK_DEV enc_u32* ids,
                                        GPUTOK_DEV enc_u32* pr, enc_u32 m,
                                        GPUTOK_THREAD bool* finished) {
  enc_u32 best = enc_parts_begin(t, first, m), merges = 0;
  bool cut = false;
  *finished = false;
  if (best == ENC_NO_MERGE) {
    enc_parts_out(first, ids, m);
    *finished = true;
    return m;
  }
  const enc_u32 before = m;
  m = enc_merge_round(t, first, ids, pr, m, best, &best, &merges, &cut);
  if (cut || (best != ENC_NO_MERGE && merges * ENC_ROUND_MIN_SHARE < before)) return m;
  EncArrayParts arrays;
  arrays.ids = ids;
  arrays.pr = pr;
  while (best != ENC_NO_MERGE) {
    const enc_u32 n = m;
    m = enc_merge_round(t, arrays, ids, pr, m, best, &best, &merges, &cut);
    if (cut || (best != ENC_NO_MERGE && merges * ENC_ROUND_MIN_SHARE < n)) return m;
  }
  *finished = true;
  return m;
}

// The rounds on a run of ids (pr: its workspace, len).
GPUTOK_FN enc_u32 enc_merge_rounds(GPUTOK_THREAD const EncMergeTable& t, GPUTOK_DEV enc_u32* ids,
                                   GPUTOK_DEV enc_u32* pr, enc_u32 len,
                                   GPUTOK_THREAD bool* finished) {
  EncArrayParts arrays;
  arrays.ids = ids;
  arrays.pr = pr;
  return enc_merge_rounds_from(t, arrays, ids, pr, len, finished);
}

// May a part ever span the boundary between bytes x and y? Only if some token the merges can
// make has the bytes x y next to each other: join[] has bit (x << 8 | y) set for every byte pair
// inside a merged token (gputok/backends/device_tables.py, join_bitmap). Where it is clear no
// merge crosses the boundary, so the runs on either side merge independently (the rule's
// "lowest priority, leftmost" order restricted to one run is that run's own order) and each
// run can take the cheaper algorithm: an emoji run is thousands of 4-byte runs, not one heap.
GPUTOK_FN bool enc_may_join(const GPUTOK_DEV enc_u32* join, enc_u8 x, enc_u8 y) {
  const enc_u32 bit = ((enc_u32)x << 8) | y;
  return (join[bit >> 5] >> (bit & 31)) & 1u;
}

// Workspace of the long pieces, each array indexed by the chunk's byte offsets (one slice per
// piece): where/nxt/prv (uint32, n), heap keys (uint64, n), per ENC_LONG_PIECE bytes two tree
// slots (uint64) and one block size (uint32).
struct EncLongWork {
  GPUTOK_DEV enc_u32* where;
  GPUTOK_DEV enc_u32* nxt;
  GPUTOK_DEV enc_u32* prv;
  GPUTOK_DEV enc_u64* heap;
  GPUTOK_DEV enc_u64* tree;
  GPUTOK_DEV enc_u32* size;
};

// One piece of at least ENC_LONG_PIECE bytes starting at byte s of the chunk: its ids into
// scratch[s ...], cut where no merge can cross, each run merged on its own (short runs with
// enc_merge_short_piece, long ones in rounds, then with the heap); returns the id count.
// Each run merges where its ids go, right after the runs before it (out <= its first byte a),
// its workspace at the same offset: the piece's arrays are written up to the ids it makes plus
// one run, not per byte (an emoji run, 4-byte runs of 2 ids: ~4 bytes of workspace a byte, not
// 8). The run [out, out + run) stays inside the piece, so the per-run slots of the long ones
// (tree, size: by offset / ENC_LONG_PIECE) stay inside the piece's as well.
GPUTOK_FN enc_u32 enc_merge_long_piece(GPUTOK_THREAD const EncMergeTable& t,
                                       const GPUTOK_DEV enc_u8* buf,
                                       const GPUTOK_DEV enc_u32* byte_ids,
                                       const GPUTOK_DEV enc_u32* join,
                                       GPUTOK_DEV enc_u32* scratch,
                                       GPUTOK_THREAD const EncLongWork& ws, enc_u32 s,
                                       enc_u32 len) {
  // every array is this piece's slice (the byte offset s); runs are slices of that, their ids
  // made from their bytes as they merge (b is never written)
  GPUTOK_DEV enc_u32* ids = scratch + s;
  const GPUTOK_DEV enc_u8* b = buf + s;
  enc_u32 out = 0, a = 0;
  for (enc_u32 k = 1; k <= len; ++k) {
    if (k < len && enc_may_join(join, b[k - 1], b[k])) continue;
    const enc_u32 run = k - a;  // the run [a, k), merged into ids[out ...]
    const enc_u32 o = s + out;  // where its ids and workspace start in the chunk
    enc_u32 got;
    if (run < ENC_LONG_PIECE) {
      got = enc_merge_short_piece(t, b + a, byte_ids, ids + out, ws.where + o, run);
    } else {
      bool finished = false;  // rounds first; where is their pair priorities' workspace
      if (t.bits & ENC_PAIR_BYTES) {  // the first round straight from the bytes
        EncByteParts bytes;
        bytes.b = b + a;
        bytes.byte_ids = byte_ids;
        bytes.len = run;
        got = enc_merge_rounds_from(t, bytes, ids + out, ws.where + o, run, &finished);
      } else {
        for (enc_u32 j = 0; j < run; ++j) ids[out + j] = byte_ids[b[a + j]];
        got = enc_merge_rounds(t, ids + out, ws.where + o, run, &finished);
      }
      if (!finished) {
        const enc_u32 unit = o / ENC_LONG_PIECE;
        EncBlockHeaps bh;
        bh.heap = ws.heap + o;
        bh.where = ws.where + o;
        bh.tree = ws.tree + 2 * (enc_u64)unit;
        bh.size = ws.size + unit;
        bh.nb = 0;
        got = enc_merge_heap(t, ids + out, ws.nxt + o, ws.prv + o, bh, got);
      }
    }
    out += got;
    a = k;
  }
  return out;
}

// ---------------------------------------------------------------- emit
// Entry e's ids, count of them, from scratch[src ...] to out[dst ...] in the output's dtype.
template <class T>
GPUTOK_FN void enc_emit_ids(const GPUTOK_DEV enc_u32* scratch, enc_u32 src, enc_u32 c,
                            GPUTOK_DEV T* out, enc_u32 dst) {
  for (enc_u32 k = 0; k < c; ++k) out[dst + k] = (T)scratch[src + k];
}
