// gpuemu: inputs=tok:int32,prv:int32,nxt:int32,n:int64:0,state:int64
// gpuemu: outputs=is_start:uint8 header=train_common.metal
// train_find_matches: is_start[i] = 1 when this step's merge of (a, b) (the state record's)
// starts at position i (THE MATCH RULE), for every i < n; all 0 when the step merges nothing.
// Grid-stride loop: any grid is correct.
const bool merging = state[ST_MERGED] != 0;
const int a = (int)state[ST_A];
const int b = (int)state[ST_B];
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x)
  is_start[i] = merging && train_match_starts(tok, prv, nxt, i, a, b) ? 1 : 0;
