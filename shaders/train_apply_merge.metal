// gpuemu: inputs=tok:int32,prv:int32,nxt:int32,is_start:uint8,n:int64:0,state:int64
// gpuemu: outputs=out_tok:int32,out_prv:int32,out_nxt:int32 header=train_common.metal
// train_apply_merge: THE MERGE REWRITE (kernels/train_bpe.cu does it in place): a match's start i
// becomes c, its right half j = nxt[i] dies, links skip j. MLX outputs are fresh buffers, so
// every position i < n (n = the arrays' length) writes its own new state, gathered from the old
// one; no thread writes another's position:
//   tok  c where a match starts; TRAIN_DEAD where one ends (prv[i] starts a match); else as was
//   nxt  where a match starts, past its right half
//   prv  when the left neighbour p dies (it ends the match starting at prv[p]), prv[p]
// A dead position keeps its stale links: nothing reads them (the match rule stops at its tok).
// c: this step's new id, from the state record (no position starts a match when it merges
// nothing, and the arrays come back as they were).
const int c = (int)state[ST_C];
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  int t = tok[i];
  int p = prv[i];
  int x = nxt[i];
  if (t != TRAIN_DEAD) {
    if (is_start[i]) {
      t = c;
      x = nxt[x];
    } else if (p >= 0 && is_start[p]) {
      t = TRAIN_DEAD;
    }
    if (t != TRAIN_DEAD && p >= 0 && prv[p] >= 0 && is_start[prv[p]]) p = prv[p];
  }
  out_tok[i] = t;
  out_prv[i] = p;
  out_nxt[i] = x;
}
