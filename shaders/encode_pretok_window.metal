// gpuemu: inputs=buf:uint8,mark:uint8,cls:uint8,pair:uint8,runstart:uint32,n:int64:0
// gpuemu: inputs=pair_bits:int32:0,next_lo:int32:0,next_n:int32:0,prev2_lo:int32:0
// gpuemu: inputs=prev2_n:int32:0,track_ws:int32:0 outputs=ent:uint32,ws_next:uint8
// gpuemu: header=encode_common.metal
// encode_pretok_window (kernels/encode_pretok.cu): THE WINDOW RULE at every byte of [0, n + 2)
// (enc_window_at); ws_next[run start] = the class after each whitespace run (read by
// encode_pretok_fix only where it was written).
EncPretokRule r;
r.pair = pair;
r.pair_bits = pair_bits;
r.next_lo = next_lo;
r.next_n = next_n;
r.prev2_lo = prev2_lo;
r.prev2_n = prev2_n;
for (long i = thread_position_in_grid.x; i < n + 2; i += threads_per_grid.x) {
  const EncWindow w = enc_window_at(buf, n, mark, cls, r, runstart, track_ws, i);
  ent[i] = w.ent;
  if (w.ws_at >= 0) ws_next[w.ws_at] = w.ws;
}
