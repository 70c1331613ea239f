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
//   encode_merge_long   one thread per long piece: the same rule in O(L log L) with a doubly
//                       linked list of parts and an indexed binary heap keyed by
//                       (priority, position), the array form of merge_long in stages/merge.py
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
    enc_u32 len = pstart[e + 1] - s;
    if (len >= ENC_LONG_PIECE) continue;
    enc_u32* ids = scratch + s;
    enc_u32* pr = prio_ws + s;
    enc_u32 m;
    for (enc_u32 k = 0; k < len; ++k) ids[k] = byte_ids[buf[s + k]];
    for (enc_u32 k = 0; k + 1 < len; ++k) pr[k] = enc_pair_lookup(t, ids[k], ids[k + 1], &m);
    while (len > 1) {
      // the sequential rule: lowest priority, leftmost on ties (strict <)
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
    count[e] = len;
  }
}

// ---------------------------------------------------------------- long pieces
// Indexed binary min-heap over the parts of one piece. Parts are named by their first byte's
// offset p in the piece; key(p) = (prio[p], p), so the minimum is "lowest priority, leftmost".
struct EncHeap {
  enc_u32* heap;   // heap[i] = part
  enc_u32* where;  // where[p] = index of part p in heap
  const enc_u32* prio;
  enc_u32 size;
};

__device__ __forceinline__ bool enc_heap_less(const EncHeap& h, enc_u32 a, enc_u32 b) {
  return h.prio[a] < h.prio[b] || (h.prio[a] == h.prio[b] && a < b);
}

__device__ __forceinline__ void enc_heap_set(EncHeap& h, enc_u32 i, enc_u32 p) {
  h.heap[i] = p;
  h.where[p] = i;
}

__device__ void enc_heap_up(EncHeap& h, enc_u32 i) {
  const enc_u32 p = h.heap[i];
  while (i > 0) {
    const enc_u32 parent = (i - 1) / 2;
    if (!enc_heap_less(h, p, h.heap[parent])) break;
    enc_heap_set(h, i, h.heap[parent]);
    i = parent;
  }
  enc_heap_set(h, i, p);
}

__device__ void enc_heap_down(EncHeap& h, enc_u32 i) {
  const enc_u32 p = h.heap[i];
  while (true) {
    const enc_u32 l = 2 * i + 1;
    if (l >= h.size) break;
    enc_u32 c = l;
    if (l + 1 < h.size && enc_heap_less(h, h.heap[l + 1], h.heap[l])) c = l + 1;
    if (!enc_heap_less(h, h.heap[c], p)) break;
    enc_heap_set(h, i, h.heap[c]);
    i = c;
  }
  enc_heap_set(h, i, p);
}

// part p's key changed: restore the heap order
__device__ __forceinline__ void enc_heap_fix(EncHeap& h, enc_u32 p) {
  const enc_u32 i = h.where[p];
  enc_heap_up(h, i);
  enc_heap_down(h, h.where[p]);
}

__device__ __forceinline__ void enc_heap_remove(EncHeap& h, enc_u32 p) {
  const enc_u32 i = h.where[p];
  const enc_u32 last = h.heap[h.size - 1];
  --h.size;
  if (i < h.size) {
    enc_heap_set(h, i, last);
    enc_heap_up(h, i);
    enc_heap_down(h, h.where[last]);
  }
}

extern "C" __global__ void encode_merge_long(
    const enc_u8* __restrict__ buf, const enc_u32* __restrict__ pstart,
    const enc_u32* __restrict__ n_entries, const enc_u32* __restrict__ owner,
    const enc_u64* __restrict__ t_slots, enc_u32 t_bits, const enc_u32* __restrict__ byte_ids,
    enc_u32* __restrict__ scratch, enc_u32* __restrict__ prio_ws, enc_u32* __restrict__ nxt_ws,
    enc_u32* __restrict__ prv_ws, enc_u32* __restrict__ heap_ws,
    enc_u32* __restrict__ where_ws, enc_u32* __restrict__ count, enc_i64 cap) {
  const EncMergeTable t{t_slots, t_bits};
  const enc_i64 n_ent = (enc_i64)*n_entries;
  ENC_GRID_STRIDE(e, cap) {
    if (e >= n_ent) break;
    if (owner[e] != (enc_u32)e) continue;
    const enc_u32 s = pstart[e];
    const enc_u32 len = pstart[e + 1] - s;
    if (len < ENC_LONG_PIECE) continue;
    // every array is this piece's slice; parts are local offsets, len means "none"
    enc_u32* ids = scratch + s;
    enc_u32* pr = prio_ws + s;
    enc_u32* nxt = nxt_ws + s;
    enc_u32* prv = prv_ws + s;
    EncHeap h{heap_ws + s, where_ws + s, pr, len};
    enc_u32 m;
    for (enc_u32 k = 0; k < len; ++k) {
      ids[k] = byte_ids[buf[s + k]];
      nxt[k] = k + 1;
      prv[k] = k == 0 ? len : k - 1;
    }
    for (enc_u32 k = 0; k < len; ++k) {
      pr[k] = k + 1 < len ? enc_pair_lookup(t, ids[k], ids[k + 1], &m) : ENC_NO_MERGE;
      enc_heap_set(h, k, k);
    }
    for (enc_u32 i = len / 2; i-- > 0;) enc_heap_down(h, i);
    while (true) {
      const enc_u32 p = h.heap[0];
      if (pr[p] == ENC_NO_MERGE) break;  // the smallest key has no merge: nothing has
      const enc_u32 q = nxt[p];
      enc_u32 merged;
      enc_pair_lookup(t, ids[p], ids[q], &merged);
      ids[p] = merged;
      enc_heap_remove(h, q);
      const enc_u32 after = nxt[q];
      nxt[p] = after;
      if (after < len) prv[after] = p;
      pr[p] = after < len ? enc_pair_lookup(t, ids[p], ids[after], &m) : ENC_NO_MERGE;
      enc_heap_fix(h, p);
      const enc_u32 before = prv[p];
      if (before < len) {
        pr[before] = enc_pair_lookup(t, ids[before], ids[p], &m);
        enc_heap_fix(h, before);
      }
    }
    // compact the surviving parts to the front (the write index never passes the read index)
    enc_u32 out = 0;
    for (enc_u32 p = 0; p < len; p = nxt[p]) ids[out++] = ids[p];
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
