// gpuemu: inputs=tok:int32,prv:int32,nxt:int32,n:int64:0,a:int32:0,b:int32:0
// gpuemu: outputs=is_start:uint8 header=train_common.metal
// train_find_matches: is_start[i] = 1 when the merge of (a, b) starts at position i (THE MATCH
// RULE), for every i < n. Grid-stride loop: any grid is correct.
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x)
  is_start[i] = train_match_starts(tok, prv, nxt, i, a, b) ? 1 : 0;
