// gpuemu: inputs=part_count:int64,part_key:uint64,part_used:int64,n_parts:int64:0,state:int64
// gpuemu: inputs=tok_len:uint64,tok_hash:uint64,res_len:uint64,res_hash:uint64,n_ids:int64:0
// gpuemu: outputs=out_state:int64,out_len:uint64,out_hash:uint64
// gpuemu: template=BLOCK:256 header=train_common.metal
// train_step_select: the merge of this step, chosen on the device (the host reads the state
// records once per block of steps). From train_fold_best's partials, the best pair (THE
// COMPARATOR) and the used slots; then, unless the loop has stopped, in this order:
//   * the vocabulary is full (VOCAB_LEN >= VOCAB_TARGET): stop TARGET;
//   * no pair counts min_count (or none is left): stop MIN;
//   * the step could take the table past USED_LIMIT (it adds at most two pairs per match and
//     at most 2 * ids + 1 distinct ones, (x, c), (c, y), (c, c)): stop REHASH, the slots it
//     could need in NEED;
//   * the merged token's bytes (length and THE TOKEN HASH) equal a special token's spelling or
//     an id's that exists (HF's rule 7: an existing string keeps its id): stop RESERVED with
//     (A, B), unless the host already answered for this pair (FORCED_KEY, FORCED_ID); the host
//     compares the bytes, so a hash collision costs a block, never a wrong id;
//   * else the step merges (A, B) -> C (the next id, or the host's answer), MERGED = 1.
// A stopped loop stays stopped (MERGED = 0) until the host clears STOP between blocks; every other
// step shader then leaves its inputs as they were.
// Outputs: the new state record (ST_SIZE), and the ids' byte lengths and hashes (n_ids each) with
// C's entry written. Every output element is written here (no init_value).
// Launch one threadgroup of BLOCK threads.
threadgroup long s_count[BLOCK];
threadgroup ulong s_key[BLOCK];
threadgroup long s_used[BLOCK];
threadgroup long s_state[ST_SIZE];
threadgroup ulong s_token[2];  // the merged token's byte length and hash
threadgroup int s_phase;       // 0: no merge; 1: a merge to check against the ids; 2: a merge
const uint tid = thread_index_in_threadgroup;
long best_c = 0;
ulong best_k = ~0ul;
long used = 0;
for (long p = tid; p < n_parts; p += BLOCK) {
  if (train_better(part_count[p], part_key[p], best_c, best_k)) {  // THE COMPARATOR
    best_c = part_count[p];
    best_k = part_key[p];
  }
  used += part_used[p];
}
s_count[tid] = best_c;
s_key[tid] = best_k;
s_used[tid] = used;
train_group_best(s_count, s_key, s_used, tid, BLOCK);
if (tid == 0u) {
  for (int k = 0; k < ST_SIZE; ++k) s_state[k] = state[k];
  s_state[ST_MERGED] = 0;
  s_phase = 0;
  const long bc = s_count[0];
  const ulong bk = s_key[0];
  s_state[ST_USED] = s_used[0];
  const long vocab_len = s_state[ST_VOCAB_LEN];
  const long most = 2 * (bc < s_state[ST_N_SYM] ? bc : s_state[ST_N_SYM]);
  const long bound = most < 2 * vocab_len + 1 ? most : 2 * vocab_len + 1;
  if (s_state[ST_STOP] != 0) {
    // stopped earlier in the block: nothing to do until the host has answered
  } else if (vocab_len >= s_state[ST_VOCAB_TARGET]) {
    s_state[ST_STOP] = TRAIN_STOP_TARGET;
  } else if (bc <= 0 || bc < s_state[ST_MIN_COUNT]) {
    s_state[ST_STOP] = TRAIN_STOP_MIN;
  } else if (s_used[0] + bound > s_state[ST_USED_LIMIT]) {
    s_state[ST_STOP] = TRAIN_STOP_REHASH;
    s_state[ST_NEED] = s_used[0] + bound;
  } else {
    const int a = (int)(bk >> 32);
    const int b = (int)(bk & 0xFFFFFFFFul);
    s_state[ST_A] = a;
    s_state[ST_B] = b;
    s_state[ST_C] = -1;
    s_state[ST_COUNT] = bc;
    // THE TOKEN HASH of the merged token
    s_token[0] = tok_len[a] + tok_len[b];
    s_token[1] = train_token_join(tok_hash[a], tok_hash[b], tok_len[b]);
    s_phase = 1;
    if ((ulong)s_state[ST_FORCED_KEY] == bk) {
      s_state[ST_C] = s_state[ST_FORCED_ID];
      s_state[ST_FORCED_KEY] = -1;  // (no pair key: ids are below 2**31)
      s_phase = 2;
    }
  }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
// every id, and every special's spelling, against the merged token (an unused id has length
// 0, a merged token at least 2 bytes)
long hit = 0;
if (s_phase == 1) {
  const ulong n_bytes = s_token[0], h = s_token[1];
  for (long i = tid; i < n_ids; i += BLOCK)
    if (tok_len[i] == n_bytes && tok_hash[i] == h) hit = 1;
  for (long r = tid; r < s_state[ST_N_RES]; r += BLOCK)
    if (res_len[r] == n_bytes && res_hash[r] == h) hit = 1;
}
s_count[tid] = hit;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (tid == 0u && s_phase != 0) {
  bool suspect = false;
  for (uint k = 0; k < BLOCK; ++k) suspect = suspect || s_count[k] != 0;
  if (s_phase == 1 && suspect) {
    s_state[ST_STOP] = TRAIN_STOP_RESERVED;
    s_phase = 0;
  } else {
    if (s_state[ST_C] < 0) {
      s_state[ST_C] = s_state[ST_NEXT_ID]++;
      s_state[ST_VOCAB_LEN] += 1;
    }
    s_state[ST_MERGED] = 1;
    s_state[ST_STEPS] += 1;
  }
}
threadgroup_barrier(mem_flags::mem_threadgroup);
for (int k = tid; k < ST_SIZE; k += BLOCK) out_state[k] = s_state[k];
const long c = s_state[ST_MERGED] ? s_state[ST_C] : -1;
for (long i = tid; i < n_ids; i += BLOCK) {
  out_len[i] = i == c ? s_token[0] : tok_len[i];
  out_hash[i] = i == c ? s_token[1] : tok_hash[i];
}
