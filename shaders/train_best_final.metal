// gpuemu: inputs=part_count:int64,part_key:uint64,part_used:int64,n_parts:int64:0,matches:int64:0
// gpuemu: outputs=best:int64 template=BLOCK:256 header=train_common.metal
// train_best_final: the best of train_fold_best's partials (THE COMPARATOR), as the one record
// the host reads back per step: best[0] = count (0 when no count is > 0), best[1] = pair key,
// best[2] = used table slots, best[3] = merges applied so far (matches), best[4..7] = 0.
// Launch one threadgroup of BLOCK threads.
threadgroup long s_count[BLOCK];
threadgroup ulong s_key[BLOCK];
threadgroup long s_used[BLOCK];
const uint tid = thread_index_in_threadgroup;
long best_c = 0;
ulong best_k = ~0ul;
long used = 0;
for (long p = tid; p < n_parts; p += BLOCK) {
  if (train_better(part_count[p], part_key[p], best_c, best_k)) {
    best_c = part_count[p];
    best_k = part_key[p];
  }
  used += part_used[p];
}
s_count[tid] = best_c;
s_key[tid] = best_k;
s_used[tid] = used;
train_group_best(s_count, s_key, s_used, tid, BLOCK);
if (tid < 8u) {
  const long record[4] = {s_count[0], (long)s_key[0], s_used[0], matches};
  best[tid] = tid < 4u ? record[tid] : 0;
}
