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
// * Dedup is off by default: whole-token hits already skip merging for most pieces of natural
//   text, and dedup costs a hash insert per remaining piece. Measure both (--dedup in the bench).
// * merge_long is sequential per piece: fine for the rare whitespace runs and blobs, O(L log L)
//   where tiktoken is quadratic, but a single 10 MB piece keeps one thread busy for a while.
#include "encode_common.cuh"

// The whole-token table (gputok/backends/device_tables.py, whole_table): open addressing on the
// top bits of enc_bytes_hash, linear probing; four words per slot, [low 32 bits of the hash,
// token id (ENC_EMPTY_SLOT: free), first byte in tok_bytes, length], so a probe reads one 16-byte
// slot and, when tag and length match, the token's bytes (two cache lines; separate tag / entry
// / offset / id arrays cost five).
struct EncWholeTable {
  const enc_u32* slots;
  const enc_u8* tok_bytes;
  enc_u32 bits;  // 0: no whole-piece lookup (HF rule without ignore_merges)
};

// The id of the token whose bytes are p[0..len), or ENC_NO_MERGE.
__device__ __forceinline__ enc_u32 enc_whole_lookup(const EncWholeTable& w, const enc_u8* p,
                                                    enc_u32 len, enc_u64 h) {
  const enc_u64 mask = (1ull << w.bits) - 1ull;
  enc_u64 s = h >> (64 - w.bits);
  const enc_u32 tag = (enc_u32)h;
  while (true) {
    const enc_u32* slot = w.slots + 4 * s;
    const enc_u32 id = slot[1];
    if (id == ENC_EMPTY_SLOT) return ENC_NO_MERGE;
    if (slot[0] == tag && slot[3] == len && enc_bytes_equal(w.tok_bytes + slot[2], p, len))
      return id;
    s = (s + 1) & mask;
  }
}

extern "C" __global__ void encode_piece_kind(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ spec, const enc_u32* __restrict__ n_entries,
    const enc_u32* __restrict__ w_slots, const enc_u8* __restrict__ w_tok_bytes, enc_u32 w_bits,
    enc_u64* dedup_slots, enc_u32 dedup_bits, enc_u32* __restrict__ owner,
    enc_u32* __restrict__ count, enc_u32* __restrict__ scratch, enc_i64 cap) {
  const EncWholeTable w{w_slots, w_tok_bytes, w_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    const enc_u32 s = pstart[e];
    const enc_u32 sp = spec[e];
    if (sp != ENC_NORMAL) {  // a special token (one id) or the sentinel (none)
      owner[e] = ENC_DONE;
      if (sp == ENC_GAP) {
        count[e] = 0;
      } else {
        count[e] = 1;
        scratch[s] = sp;
      }
      continue;
    }
    const enc_u32 len = pstart[e + 1] - s;  // a piece is never the last entry
    const enc_u8* p = buf + s;
    enc_u64 h = 0;
    if (w.bits != 0 || dedup_bits != 0) h = enc_bytes_hash(p, len);
    if (w.bits != 0) {
      const enc_u32 id = enc_whole_lookup(w, p, len, h);
      if (id != ENC_NO_MERGE) {
        owner[e] = ENC_DONE;
        count[e] = 1;
        scratch[s] = id;
        continue;
      }
    }
    enc_u32 own = (enc_u32)e;
    if (dedup_bits != 0 && len < ENC_LONG_PIECE) {
      // insert-or-find: a slot holds tag << 32 | entry, claimed once with a CAS, so the entry
      // index is never read before it is written; equal tags are confirmed by the bytes
      const enc_u64 mine = ((enc_u64)(enc_u32)h << 32) | (enc_u64)e;
      const enc_u64 mask = (1ull << dedup_bits) - 1ull;
      enc_u64 slot = h >> (64 - dedup_bits);
      while (true) {
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

// The sequential rule on one run of ids, in place: merge the adjacent pair of lowest priority,
// leftmost on ties (THE COMPARATOR: strict <), until no pair merges; pr[0 .. len - 1) caches the
// pairs' priorities. Returns how many ids are left (at the front of ids). O(len^2): for short
// runs (encode_merge_short's pieces, encode_merge_long's segments).
__device__ __forceinline__ enc_u32 enc_merge_small(const EncMergeTable& t, enc_u32* ids,
                                                   enc_u32* pr, enc_u32 len) {
  enc_u32 m;
  for (enc_u32 k = 0; k + 1 < len; ++k) pr[k] = enc_pair_lookup(t, ids[k], ids[k + 1], &m);
  while (len > 1) {
    enc_u32 best = ENC_NO_MERGE, at = 0;
    for (enc_u32 k = 0; k + 1 < len; ++k) {
      if (pr[k] < best) {
        best = pr[k];
        at = k;
      }
    }
    if (best == ENC_NO_MERGE) break;
    enc_u32 merged;
    enc_pair_lookup(t, ids[at], ids[at + 1], &merged);
    ids[at] = merged;
    // both new pairs' slots are fetched before either probe waits on memory
    if (at > 0) enc_pair_prefetch(t, ids[at - 1], merged);
    if (at + 2 < len) enc_pair_prefetch(t, merged, ids[at + 2]);
    for (enc_u32 k = at + 1; k + 1 < len; ++k) ids[k] = ids[k + 1];
    for (enc_u32 k = at + 1; k + 2 < len; ++k) pr[k] = pr[k + 1];
    --len;
    if (at + 1 < len) pr[at] = enc_pair_lookup(t, ids[at], ids[at + 1], &m);
    if (at > 0) pr[at - 1] = enc_pair_lookup(t, ids[at - 1], ids[at], &m);
  }
  return len;
}

extern "C" __global__ void encode_merge_short(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ n_entries, const enc_u32* __restrict__ owner,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ byte_ids,
    enc_u32* __restrict__ scratch, enc_u32* __restrict__ prio_ws, enc_u32* __restrict__ count,
    enc_i64 cap) {
  const EncMergeTable t{t_slots, t_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    if (owner[e] != (enc_u32)e) continue;  // final already, or a duplicate
    const enc_u32 s = pstart[e];
    const enc_u32 len = pstart[e + 1] - s;
    if (len >= ENC_LONG_PIECE) continue;
    enc_u32* ids = scratch + s;
    for (enc_u32 k = 0; k < len; ++k) ids[k] = byte_ids[buf[s + k]];
    count[e] = enc_merge_small(t, ids, prio_ws + s, len);
  }
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
  enc_u64* heap;   // heap[i] = key of the part at index i
  enc_u32* where;  // where[p] = index of part p in heap
  enc_u32 size;
};

__device__ __forceinline__ enc_u64 enc_heap_key(enc_u32 prio, enc_u32 p) {
  return ((enc_u64)prio << 32) | (enc_u64)p;
}

__device__ __forceinline__ void enc_heap_set(EncHeap& h, enc_u32 i, enc_u64 k) {
  h.heap[i] = k;
  h.where[(enc_u32)k] = i;
}

__device__ void enc_heap_up(EncHeap& h, enc_u32 i) {
  const enc_u64 k = h.heap[i];
  while (i > 0) {
    const enc_u32 parent = (i - 1) / 4;
    if (h.heap[parent] <= k) break;
    enc_heap_set(h, i, h.heap[parent]);
    i = parent;
  }
  enc_heap_set(h, i, k);
}

__device__ void enc_heap_down(EncHeap& h, enc_u32 i) {
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
__device__ __forceinline__ void enc_heap_fix(EncHeap& h, enc_u32 p, enc_u64 k) {
  const enc_u32 i = h.where[p];
  h.heap[i] = k;
  enc_heap_up(h, i);
  enc_heap_down(h, h.where[p]);
}

__device__ __forceinline__ void enc_heap_remove(EncHeap& h, enc_u32 p) {
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
  enc_u64* heap;   // block j's heap: heap[j * ENC_HEAP_BLOCK ...]
  enc_u32* where;  // where[p]: part p's index in its block's heap
  enc_u64* tree;   // tree[nb + j]: block j's minimum (~0 when empty); tree[i]: min of 2i, 2i + 1
  enc_u32* size;   // size[j]: block j's heap size
  enc_u32 nb;
};

__device__ __forceinline__ EncHeap enc_block(const EncBlockHeaps& b, enc_u32 j) {
  return EncHeap{b.heap + (enc_u64)j * ENC_HEAP_BLOCK, b.where, b.size[j]};
}

// block j's heap h changed: store its size, and its minimum up the tree while that changes
__device__ __forceinline__ void enc_block_done(EncBlockHeaps& b, enc_u32 j, const EncHeap& h) {
  b.size[j] = h.size;
  enc_u32 i = b.nb + j;
  const enc_u64 v = h.size ? h.heap[0] : ~0ull;
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
__device__ enc_u32 enc_merge_heap(const EncMergeTable& t, enc_u32* ids, enc_u32* nxt,
                                  enc_u32* prv, EncBlockHeaps b, enc_u32 len) {
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
    EncHeap h{b.heap + lo, b.where, n};
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

// May a part ever span the boundary between bytes x and y? Only if some token the merges can
// make has the bytes x y next to each other: join[] has bit (x << 8 | y) set for every byte pair
// inside a merged token (gputok/backends/device_tables.py, join_bitmap). Where it is clear no
// merge crosses the boundary, so the runs on either side merge independently (the rule's
// "lowest priority, leftmost" order restricted to one run is that run's own order) and each
// run can take the cheaper algorithm: an emoji run is thousands of 4-byte runs, not one heap.
__device__ __forceinline__ bool enc_may_join(const enc_u32* join, enc_u8 x, enc_u8 y) {
  const enc_u32 bit = ((enc_u32)x << 8) | y;
  return (join[bit >> 5] >> (bit & 31)) & 1u;
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
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    if (owner[e] != (enc_u32)e) continue;
    const enc_u32 s = pstart[e];
    const enc_u32 len = pstart[e + 1] - s;
    if (len < ENC_LONG_PIECE) continue;
    // every array is this piece's slice (the byte offset s); runs are slices of that
    enc_u32* ids = scratch + s;
    const enc_u8* b = buf + s;
    for (enc_u32 k = 0; k < len; ++k) ids[k] = byte_ids[b[k]];
    enc_u32 out = 0, a = 0;
    for (enc_u32 k = 1; k <= len; ++k) {
      if (k < len && enc_may_join(join, b[k - 1], b[k])) continue;
      const enc_u32 run = k - a;  // the run [a, k): merged, then moved down to out (<= a)
      const enc_u32 g = s + a;  // the run's first byte in the chunk
      const enc_u32 unit = g / ENC_LONG_PIECE;
      const enc_u32 got =
          run < ENC_LONG_PIECE
              ? enc_merge_small(t, ids + a, where_ws + g, run)
              : enc_merge_heap(t, ids + a, nxt_ws + g, prv_ws + g,
                               EncBlockHeaps{heap_ws + g, where_ws + g, tree_ws + 2 * (enc_u64)unit,
                                             size_ws + unit, 0},
                               run);
      for (enc_u32 j = 0; j < got; ++j) ids[out + j] = ids[a + j];
      out += got;
      a = k;
    }
    count[e] = out;
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
