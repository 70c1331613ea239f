// gpuemu: inputs=links:int32,word_of:int32,wcount:int64,table:uint32,pool:uint32,cand:uint32
// gpuemu: inputs=tokinfo:uint64,res:uint64,state:int64
// gpuemu: outputs=out_links:int32,out_table:uint32,out_pool:uint32,out_cand:uint32
// gpuemu: outputs=out_tokinfo:uint64,out_state:int64,rec:int64,is_start:uint8,scratch:uint32
// gpuemu: template=BLOCK:256 header=train_index_common.metal
// train_index_steps: up to REC_CAP merge steps in one launch of ONE threadgroup, each touching
// only the merged pair's occurrences (kernels/train_bpe.cu's six kernels as six phases between
// threadgroup barriers; the rules from kernels/common/train_rules.h).
//
// MLX gives a kernel fresh output buffers, so the launch first copies its state, input to
// output (links = tok | prv | nxt, n each; the table; the pool; the candidates; tokinfo = the
// ids' byte lengths | hashes | the set of their spellings) and zeroes is_start and gain_n;
// every step then updates the outputs in place, as CUDA updates its arrays. The copy is the launch's one pass over the
// whole state, shared by its steps. One threadgroup, because only its threads can wait for
// each other: threadgroup_barrier(mem_device) orders their device-memory writes between the
// phases, where Metal has no barrier across threadgroups.
//
// A step (the state record's fields, ST_*):
//   select  the best candidate (THE COMPARATOR); the stops in CUDA's order (vocabulary full,
//           REC_CAP steps made, candidates that cannot vouch for the best pair, min_count,
//           room in the table, the pool and the gain buffers); THE TOKEN HASH of the merged
//           token looked up among the ids' spellings (a set of their prints, THE SPELLING
//           PRINT) and the specials' (HF's rule 7: a hit stops the block, the host compares
//           the bytes and answers with FORCED_KEY / FORCED_ID);
//           the record (a, b, c, count); the pair's count to 0
//   mark    over the pair's list: is_start where a merge starts (THE MATCH RULE), in matches
//   deltas  over the matches: THE DELTA RULE into the table; each pair gained filed with the
//           position of its left symbol
//   apply   over the matches: THE MERGE REWRITE
//   lists   over the pairs gained: room in the pool for each one's list, a place among the
//           candidates when it is not worse than the boundary; is_start back to 0
//   place   over the gains: each into its pair's list; gain_n back to 0
// A step's work: the list, its matches and gains, the candidates (at most CAND_CAP) and rule 7's
// probes and specials; recorded per step in rec (TRAIN_IX_REC fields) so a test can count it.
//
// scratch: gain_n[cap] | gain_slot | gain_pos | gslots | matches (GAINS_CAP each).
// Launch one threadgroup of BLOCK threads.
threadgroup long s_state[ST_SIZE];
threadgroup long s_count[BLOCK];
threadgroup ulong s_key[BLOCK];
threadgroup uint s_slot[BLOCK];
threadgroup atomic_uint s_ctr[TRAIN_IX_COUNTERS];
threadgroup long s_list[2];     // this step's list: offset, length
threadgroup long s_best[2];     // this step's pair: count, slot
threadgroup ulong s_token[2];   // the merged token's byte length and THE TOKEN HASH
threadgroup int s_phase;        // 0: stopped; 1: a merge to check (rule 7); 2: a merge
const uint tid = thread_index_in_threadgroup;
const long n = state[ST_N];
const long cap = state[ST_CAP];
const long gcap = state[ST_GAINS_CAP];
const long n_ids = state[ST_N_IDS];
const long spell_cap = state[ST_SPELL_CAP];
const ulong spell_mask = (ulong)(spell_cap - 1);
const long room = state[ST_RES_ROOM];
const uint mask = (uint)(cap - 1);

// ---- the launch's copy of the state, input -> output
for (long i = tid; i < 3 * n; i += BLOCK) out_links[i] = links[i];
for (long i = tid; i < n; i += BLOCK) is_start[i] = 0;
for (long i = tid; i < TRAIN_IX_TABLE_WORDS * cap; i += BLOCK) out_table[i] = table[i];
for (long i = tid; i < state[ST_POOL_CAP]; i += BLOCK) out_pool[i] = pool[i];
for (long i = tid; i < state[ST_CAND_CAP]; i += BLOCK) out_cand[i] = cand[i];
for (long i = tid; i < 2 * n_ids + spell_cap; i += BLOCK) out_tokinfo[i] = tokinfo[i];
for (long i = tid; i < cap; i += BLOCK) scratch[i] = 0u;
for (long i = tid; i < TRAIN_IX_REC * state[ST_REC_CAP]; i += BLOCK) rec[i] = 0;
if (tid == 0u) {
  for (int k = 0; k < ST_SIZE; ++k) s_state[k] = state[k];
  s_state[ST_STEPS] = 0;
  for (int k = 0; k < TRAIN_IX_COUNTERS; ++k)
    atomic_store_explicit(&s_ctr[k], 0u, memory_order_relaxed);
  atomic_store_explicit(&s_ctr[TRAIN_IX_POOL_USED], (uint)state[ST_POOL_USED],
                        memory_order_relaxed);
  atomic_store_explicit(&s_ctr[TRAIN_IX_CAND_N], (uint)state[ST_CAND_N], memory_order_relaxed);
  atomic_store_explicit(&s_ctr[TRAIN_IX_USED], (uint)state[ST_USED], memory_order_relaxed);
  atomic_store_explicit(&s_ctr[TRAIN_IX_CAND_FULL], (uint)state[ST_CAND_FULL],
                        memory_order_relaxed);
}
threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

device int* tok = out_links;
device int* prv = out_links + n;
device int* nxt = out_links + 2 * n;
device uint* key_hi = out_table;
device uint* key_lo = out_table + cap;
device uint* c_lo = out_table + 2 * cap;
device uint* c_hi = out_table + 3 * cap;
device uint* list_len = out_table + 4 * cap;
device uint* list_off = out_table + 5 * cap;
device uint* gain_n = scratch;
device uint* gain_slot = scratch + cap;
device uint* gain_pos = scratch + cap + gcap;
device uint* gslots = scratch + cap + 2 * gcap;
device uint* matches = scratch + cap + 3 * gcap;
device ulong* tok_len = out_tokinfo;
device ulong* tok_hash = out_tokinfo + n_ids;
device ulong* spell = out_tokinfo + 2 * n_ids;  // the ids' spellings (prints), SPELL_CAP slots
const long bound_c = state[ST_BOUND_COUNT];
const ulong bound_k = (ulong)state[ST_BOUND_KEY];

while (true) {
  // ---- select: the best candidate (THE COMPARATOR), in s_count/s_key/s_slot[0]
  const uint cand_n = atomic_load_explicit(&s_ctr[TRAIN_IX_CAND_N], memory_order_relaxed);
  const long scanned = (long)cand_n < state[ST_CAND_CAP] ? (long)cand_n : state[ST_CAND_CAP];
  long best_c = 0;
  ulong best_k = ~0ul;
  uint best_s = 0u;
  for (long k = tid; k < scanned; k += BLOCK) {
    const uint s = out_cand[k];
    const long c = train_ix_count(c_lo, c_hi, s);
    const ulong key = ((ulong)(key_hi[s] - 1u) << 32) | (ulong)(key_lo[s] - 1u);
    if (c > 0 && train_better(c, key, best_c, best_k)) {
      best_c = c;
      best_k = key;
      best_s = s;
    }
  }
  s_count[tid] = best_c;
  s_key[tid] = best_k;
  s_slot[tid] = best_s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = BLOCK / 2u; stride > 0u; stride >>= 1) {
    if (tid < stride &&
        train_better(s_count[tid + stride], s_key[tid + stride], s_count[tid], s_key[tid])) {
      s_count[tid] = s_count[tid + stride];
      s_key[tid] = s_key[tid + stride];
      s_slot[tid] = s_slot[tid + stride];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0u) {
    s_phase = 0;  // (1 below: no stop)
    const long bc = s_count[0];
    const ulong bk = s_key[0];
    const uint bs = s_slot[0];
    const long len = bc > 0 ? (long)list_len[bs] : 0;
    const long used = (long)atomic_load_explicit(&s_ctr[TRAIN_IX_USED], memory_order_relaxed);
    const long pool_used =
        (long)atomic_load_explicit(&s_ctr[TRAIN_IX_POOL_USED], memory_order_relaxed);
    const bool cand_full =
        atomic_load_explicit(&s_ctr[TRAIN_IX_CAND_FULL], memory_order_relaxed) != 0u;
    if (s_state[ST_VOCAB_LEN] >= s_state[ST_VOCAB_TARGET]) {
      s_state[ST_STOP] = TRAIN_STOP_TARGET;
    } else if (s_state[ST_STEPS] >= s_state[ST_REC_CAP]) {
      s_state[ST_STOP] = TRAIN_STOP_BLOCK;
    } else if (cand_full || (long)cand_n > s_state[ST_CAND_CAP]) {
      s_state[ST_STOP] = TRAIN_STOP_REBUILD;
    } else if (bc <= 0 || !train_ix_not_worse(bc, bk, bound_c, bound_k)) {
      // a pair outside the candidates may be better (or, with none outside, none is left)
      s_state[ST_STOP] = bound_c > 0 ? TRAIN_STOP_REBUILD : TRAIN_STOP_MIN;
    } else if (bc < s_state[ST_MIN_COUNT]) {
      s_state[ST_STOP] = TRAIN_STOP_MIN;
    } else if (used + 2 * len > s_state[ST_USED_LIMIT]) {
      // (room for this step: at most one match per occurrence, two gains per match)
      s_state[ST_STOP] = TRAIN_STOP_REHASH;
    } else if (pool_used + 2 * len > s_state[ST_POOL_CAP]) {
      s_state[ST_STOP] = TRAIN_STOP_POOL;
    } else if (2 * len > gcap) {
      s_state[ST_STOP] = TRAIN_STOP_GAINS;
    } else {
      s_phase = 1;
    }
    s_state[ST_NEED] = 2 * len;
    if (s_phase == 1) {
      const int a = (int)(bk >> 32);
      const int b = (int)(bk & 0xFFFFFFFFul);
      s_state[ST_A] = a;
      s_state[ST_B] = b;
      s_state[ST_C] = -1;
      s_best[0] = bc;
      s_best[1] = bs;
      s_list[0] = (long)list_off[bs];
      s_list[1] = len;
      // THE TOKEN HASH of the merged token
      s_token[0] = tok_len[a] + tok_len[b];
      s_token[1] = train_token_join(tok_hash[a], tok_hash[b], tok_len[b]);
      if ((ulong)s_state[ST_FORCED_KEY] == bk) {
        s_state[ST_C] = s_state[ST_FORCED_ID];
        s_state[ST_FORCED_KEY] = -1;  // (no pair key: ids are below 2**31)
        s_phase = 2;
      }
    }
    // rule 7: the merged token's spelling among the ids' (their set of prints) and the
    // specials'; a hit stops the block for the host to compare the bytes
    long probes = 0;
    if (s_phase == 1) {
      const ulong want = train_ix_print(s_token[0], s_token[1]);
      bool hit = false;
      for (ulong s = want & spell_mask; spell[s] != 0ul; s = (s + 1ul) & spell_mask, ++probes)
        hit = hit || spell[s] == want;
      for (long r = 0; r < s_state[ST_N_RES]; ++r)
        hit = hit || (res[r] == s_token[0] && res[room + r] == s_token[1]);
      if (hit) {
        s_state[ST_STOP] = TRAIN_STOP_RESERVED;
        s_phase = 0;
      }
    }
    if (s_phase != 0) {
      const long steps = s_state[ST_STEPS];
      if (s_state[ST_C] < 0) {
        s_state[ST_C] = s_state[ST_NEXT_ID]++;
        s_state[ST_VOCAB_LEN] += 1;
      }
      const long c = s_state[ST_C];
      tok_len[c] = s_token[0];
      tok_hash[c] = s_token[1];
      const ulong print = train_ix_print(s_token[0], s_token[1]);
      ulong s = print & spell_mask;
      while (spell[s] != 0ul && spell[s] != print) s = (s + 1ul) & spell_mask;
      spell[s] = print;
      rec[TRAIN_IX_REC * steps] = s_state[ST_A];
      rec[TRAIN_IX_REC * steps + 1] = s_state[ST_B];
      rec[TRAIN_IX_REC * steps + 2] = c;
      rec[TRAIN_IX_REC * steps + 3] = s_best[0];
      rec[TRAIN_IX_REC * steps + 5] = scanned;
      rec[TRAIN_IX_REC * steps + 6] = probes + (s_phase == 1 ? s_state[ST_N_RES] : 0);
      c_lo[s_best[1]] = 0u;  // retired: after this step no occurrence is left
      c_hi[s_best[1]] = 0u;
      atomic_store_explicit(&s_ctr[TRAIN_IX_MATCHES], 0u, memory_order_relaxed);
      atomic_store_explicit(&s_ctr[TRAIN_IX_GAINS], 0u, memory_order_relaxed);
      atomic_store_explicit(&s_ctr[TRAIN_IX_GSLOTS], 0u, memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  if (s_state[ST_STOP] != 0) break;  // (every thread reads it between the same two barriers)
  const int a = (int)s_state[ST_A];
  const int b = (int)s_state[ST_B];
  const int c = (int)s_state[ST_C];

  // ---- mark: THE MATCH RULE over the pair's list (a list holds a position once)
  for (long k = tid; k < s_list[1]; k += BLOCK) {
    const uint p = out_pool[s_list[0] + k];
    if (!train_match_starts(tok, prv, nxt, p, a, b)) continue;
    is_start[p] = 1;
    matches[atomic_fetch_add_explicit(&s_ctr[TRAIN_IX_MATCHES], 1u, memory_order_relaxed)] = p;
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  const uint n_match = atomic_load_explicit(&s_ctr[TRAIN_IX_MATCHES], memory_order_relaxed);

  // ---- deltas: THE DELTA RULE of every match into the table; the gains filed
  for (uint m = tid; m < n_match; m += BLOCK) {
    const long i = matches[m];
    const train_deltas d = train_match_deltas(tok, prv, nxt, is_start, i, a, b, c,
                                              wcount[word_of[i]]);
    for (int k = 0; k < d.n; ++k) {
      const uint s = train_ix_add(key_hi, key_lo, c_lo, c_hi, mask, d.key[k], d.delta[k],
                                  &s_ctr[TRAIN_IX_USED]);
      if (d.delta[k] <= 0) continue;
      device atomic_uint* first = (device atomic_uint*)&gain_n[s];
      if (atomic_fetch_add_explicit(first, 1u, memory_order_relaxed) == 0u)
        gslots[atomic_fetch_add_explicit(&s_ctr[TRAIN_IX_GSLOTS], 1u, memory_order_relaxed)] = s;
      const uint g = atomic_fetch_add_explicit(&s_ctr[TRAIN_IX_GAINS], 1u, memory_order_relaxed);
      gain_slot[g] = s;
      gain_pos[g] = (uint)d.at[k];
    }
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

  // ---- apply: THE MERGE REWRITE at every match
  for (uint m = tid; m < n_match; m += BLOCK) train_merge_rewrite(tok, prv, nxt, matches[m], c);
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

  // ---- lists: each gained pair's room in the pool and maybe a candidate; is_start back to 0
  const uint n_slots = atomic_load_explicit(&s_ctr[TRAIN_IX_GSLOTS], memory_order_relaxed);
  for (uint k = tid; k < n_slots + n_match; k += BLOCK) {
    if (k >= n_slots) {
      is_start[matches[k - n_slots]] = 0;
      continue;
    }
    const uint s = gslots[k];
    // a pair with a list already: c existed (rule 7), the host lists every pair again
    if (list_len[s] != 0u)
      atomic_store_explicit(&s_ctr[TRAIN_IX_ANOMALY], 1u, memory_order_relaxed);
    list_off[s] = atomic_fetch_add_explicit(&s_ctr[TRAIN_IX_POOL_USED], gain_n[s],
                                            memory_order_relaxed);
    list_len[s] = 0u;
    const long cnt = train_ix_count(c_lo, c_hi, s);
    const ulong key = ((ulong)(key_hi[s] - 1u) << 32) | (ulong)(key_lo[s] - 1u);
    if (cnt > 0 && train_ix_not_worse(cnt, key, bound_c, bound_k)) {
      const uint at =
          atomic_fetch_add_explicit(&s_ctr[TRAIN_IX_CAND_N], 1u, memory_order_relaxed);
      if ((long)at < state[ST_CAND_CAP])
        out_cand[at] = s;
      else
        atomic_store_explicit(&s_ctr[TRAIN_IX_CAND_FULL], 1u, memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

  // ---- place: every gain into its pair's list; gain_n back to 0
  const uint n_gain = atomic_load_explicit(&s_ctr[TRAIN_IX_GAINS], memory_order_relaxed);
  for (uint g = tid; g < n_gain; g += BLOCK) {
    const uint s = gain_slot[g];
    const uint at = atomic_fetch_add_explicit((device atomic_uint*)&list_len[s], 1u,
                                              memory_order_relaxed);
    out_pool[list_off[s] + at] = gain_pos[g];
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  for (uint k = tid; k < n_slots; k += BLOCK) gain_n[gslots[k]] = 0u;
  if (tid == 0u) {
    const long steps = s_state[ST_STEPS];
    rec[TRAIN_IX_REC * steps + 4] = s_list[1] + n_match + n_gain;
    s_state[ST_STEPS] = steps + 1;
    if (atomic_load_explicit(&s_ctr[TRAIN_IX_ANOMALY], memory_order_relaxed))
      s_state[ST_STOP] = TRAIN_STOP_RELIST;
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  if (s_state[ST_STOP] != 0) break;
}

// ---- the state record out, with the counters
if (tid == 0u) {
  s_state[ST_USED] = atomic_load_explicit(&s_ctr[TRAIN_IX_USED], memory_order_relaxed);
  s_state[ST_POOL_USED] = atomic_load_explicit(&s_ctr[TRAIN_IX_POOL_USED], memory_order_relaxed);
  s_state[ST_CAND_N] = atomic_load_explicit(&s_ctr[TRAIN_IX_CAND_N], memory_order_relaxed);
  s_state[ST_CAND_FULL] = atomic_load_explicit(&s_ctr[TRAIN_IX_CAND_FULL], memory_order_relaxed);
  s_state[ST_ANOMALY] = atomic_load_explicit(&s_ctr[TRAIN_IX_ANOMALY], memory_order_relaxed);
  for (int k = 0; k < ST_SIZE; ++k) out_state[k] = s_state[k];
}
