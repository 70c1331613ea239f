// gpuemu: inputs=tok:int32,prv:int32,nxt:int32,word_of:int32,wcount:int64,is_start:uint8
// gpuemu: inputs=key_hi:uint32,key_lo:uint32,n:int64:0,state:int64,mask:uint32:0
// gpuemu: outputs=d_hi:uint32,d_lo:uint32,c_lo:uint32,c_hi:uint32 atomic_outputs=true
// gpuemu: header=train_common.metal
// train_merge_deltas: the pair-count changes of every match (THE DELTA RULE), added to a delta
// table over the main table key_hi/key_lo (new pairs claim slots free in the main table; the
// driver folds it in with train_fold_best, which also zeroes (a, b) itself).
// (a, b) -> c: this step's merge, from the state record (no matches when it merges nothing).
// Grid-stride loop; outputs start at 0 (init_value=0: atomic sums need zeros before any thread
// adds, and no Metal launch can wait for all of its threadgroups).
const int a = (int)state[ST_A];
const int b = (int)state[ST_B];
const int c = (int)state[ST_C];
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  if (!is_start[i]) continue;
  const train_deltas d = train_match_deltas(tok, prv, nxt, is_start, i, a, b, c,
                                            wcount[word_of[i]]);
  for (int k = 0; k < d.n; ++k)
    train_table_add(key_hi, key_lo, d_hi, d_lo, c_lo, c_hi, mask, d.key[k], d.delta[k]);
}
