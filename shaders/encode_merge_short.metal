// gpuemu: inputs=buf:uint8,pstart:uint32,owner:uint32,t_slots:uint64,byte_ids:uint32
// gpuemu: inputs=scratch_in:uint32,count_in:uint32,n_entries:uint32:0,t_bits:uint32:0
// gpuemu: inputs=cap:int64:0 outputs=scratch:uint32,count:uint32,prio_ws:uint32
// gpuemu: header=encode_common.metal
// encode_merge_short (kernels/encode_merge.cu): every piece shorter than ENC_LONG_PIECE that
// merges itself, by the sequential rule (enc_merge_short_piece: THE COMPARATOR); every other
// entry carries its ids over from scratch_in / count_in.
EncMergeTable t;
t.slots = t_slots;
t.bits = t_bits;
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint s = pstart[e];
  if (owner[e] == (uint)e) {
    const uint len = pstart[e + 1] - s;
    if (len < ENC_LONG_PIECE) {
      count[e] = enc_merge_short_piece(t, buf + s, byte_ids, scratch + s, prio_ws + s, len);
      continue;
    }
  }
  enc_carry_ids(scratch_in, count_in, scratch, count, e, s);
}
