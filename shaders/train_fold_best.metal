// gpuemu: inputs=key_hi:uint32,key_lo:uint32,count:int64,d_hi:uint32,d_lo:uint32,c_lo:uint32
// gpuemu: inputs=c_hi:uint32,cap:int64:0,state:int64
// gpuemu: outputs=out_hi:uint32,out_lo:uint32,out_count:int64,part_count:int64,part_key:uint64
// gpuemu: outputs=part_used:int64
// gpuemu: template=BLOCK:256 header=train_common.metal
// train_fold_best: the main table plus a delta table -> the new main table, and per threadgroup
// the best pair among its slots (THE COMPARATOR) and the number of used slots.
//   * a slot free in the main table takes the delta table's key (0 when free in both);
//   * count + the delta's two 32-bit halves, as int64;
//   * the pair the state record says the last step merged (whose delta table this is) gets
//     count 0: the step merged every occurrence of it away (the delta rule leaves its own
//     changes out); a state of a step that merged nothing zeroes nothing;
//   * part_count/part_key[g] = the best (count > 0) of threadgroup g's slots, (0, ~0) if none;
//     part_used[g] = its used slots.
// Launch with threadgroups of BLOCK threads and a grid that is a multiple of BLOCK (the
// reduction needs every thread of a threadgroup); the slots are a grid-stride loop.
threadgroup long s_count[BLOCK];
threadgroup ulong s_key[BLOCK];
threadgroup long s_used[BLOCK];
long best_c = 0;
ulong best_k = ~0ul;
long used = 0;
const uint merged_hi = train_merged_hi(state);
const uint merged_lo = train_merged_lo(state);
for (long s = thread_position_in_grid.x; s < cap; s += threads_per_grid.x) {
  uint hi = key_hi[s];
  uint lo = key_lo[s];
  long total = count[s];
  if (hi == 0u) {
    hi = d_hi[s];
    lo = d_lo[s];
    total = 0;
  }
  total += (long)(((ulong)c_hi[s] << 32) | (ulong)c_lo[s]);
  if (hi != 0u) {
    if (hi == merged_hi && lo == merged_lo) total = 0;
    ++used;
    const ulong key = train_slot_key(hi, lo);
    if (total > 0 && train_better(total, key, best_c, best_k)) {
      best_c = total;
      best_k = key;
    }
  }
  out_hi[s] = hi;
  out_lo[s] = lo;
  out_count[s] = total;
}
const uint tid = thread_index_in_threadgroup;
s_count[tid] = best_c;
s_key[tid] = best_k;
s_used[tid] = used;
train_group_best(s_count, s_key, s_used, tid, BLOCK);
if (tid == 0u) {
  const uint g = threadgroup_position_in_grid.x;
  part_count[g] = s_count[0];
  part_key[g] = s_key[0];
  part_used[g] = s_used[0];
}
