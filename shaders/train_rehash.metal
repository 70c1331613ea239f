// gpuemu: inputs=old_hi:uint32,old_lo:uint32,old_count:int64,old_cap:int64:0,key_hi:uint32
// gpuemu: inputs=key_lo:uint32,mask:uint32:0
// gpuemu: outputs=d_hi:uint32,d_lo:uint32,c_lo:uint32,c_hi:uint32 atomic_outputs=true
// gpuemu: header=train_common.metal
// train_rehash: every live entry (count != 0) of an old main table, inserted into a delta table
// over a new, empty main table key_hi/key_lo of mask + 1 slots (folded in by train_fold_best).
// Grid-stride loop; outputs start at 0 (init_value=0).
for (long s = thread_position_in_grid.x; s < old_cap; s += threads_per_grid.x) {
  const uint hi = old_hi[s];
  const long count = old_count[s];
  if (hi != 0u && count != 0)
    train_table_add(key_hi, key_lo, d_hi, d_lo, c_lo, c_hi, mask, train_slot_key(hi, old_lo[s]),
                    count);
}
