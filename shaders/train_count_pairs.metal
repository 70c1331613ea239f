// gpuemu: inputs=tok:int32,nxt:int32,word_of:int32,wcount:int64,key_hi:uint32,key_lo:uint32
// gpuemu: inputs=n:int64:0,mask:uint32:0
// gpuemu: outputs=d_hi:uint32,d_lo:uint32,c_lo:uint32,c_hi:uint32 atomic_outputs=true
// gpuemu: header=train_common.metal
// train_count_pairs: every adjacent pair of live symbols, weighted by its word's count, added to
// a delta table over the main table key_hi/key_lo (all free for the first count; the driver then
// folds it in with train_fold_best). Grid-stride loop: any grid is correct.
// Outputs start at 0 (init_value=0).
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  const int t = tok[i];
  const int j = nxt[i];
  if (t == TRAIN_DEAD || j < 0) continue;
  train_table_add(key_hi, key_lo, d_hi, d_lo, c_lo, c_hi, mask, train_pair_key(t, tok[j]),
                  wcount[word_of[i]]);
}
