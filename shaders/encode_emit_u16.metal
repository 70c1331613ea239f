// gpuemu: inputs=pstart:uint32,owner:uint32,out_off:uint32,scratch:uint32,n_entries:uint32:0
// gpuemu: inputs=cap:int64:0 outputs=out:uint16 header=encode_common.metal
// encode_emit_u16 (kernels/encode_emit.cu): entry e's ids to out[out_off[e] ...] as uint16
// (out_off is the exclusive sum of the counts); every id is written by exactly one thread.
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint dst = out_off[e];
  const uint c = out_off[e + 1] - dst;
  if (c == 0) continue;
  const uint o = owner[e];
  enc_emit_ids<ushort>(scratch, pstart[(o == ENC_DONE) ? (uint)e : o], c, out, dst);
}
