// gpuemu: inputs=buf:uint8,pstart:uint32,spec:uint32,w_slots:uint32,w_tok_bytes:uint8
// gpuemu: inputs=n_entries:uint32:0,w_bits:uint32:0,cap:int64:0
// gpuemu: outputs=owner:uint32,count:uint32,scratch:uint32 header=encode_common.metal
// encode_piece_kind (kernels/encode_merge.cu) without dedup: specials, the sentinel and
// whole-token pieces are final (owner ENC_DONE, their id in scratch at the entry's start); every
// other piece merges itself (owner = e).
EncWholeTable w;
w.slots = w_slots;
w.tok_bytes = w_tok_bytes;
w.bits = w_bits;
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint s = pstart[e];
  const uint sp = spec[e];
  const uint len = sp == ENC_NORMAL ? pstart[e + 1] - s : 0u;  // a piece is never the last entry
  const EncKind k = enc_piece_kind_of(buf, s, len, sp, w, false);
  owner[e] = k.done ? ENC_DONE : (uint)e;
  count[e] = k.count;
  if (k.count) scratch[s] = k.id;
}
