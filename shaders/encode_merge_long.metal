// gpuemu: inputs=buf:uint8,pstart:uint32,owner:uint32,t_slots:uint64,byte_ids:uint32,join:uint32
// gpuemu: inputs=scratch_in:uint32,count_in:uint32,n_entries:uint32:0,t_bits:uint32:0
// gpuemu: inputs=cap:int64:0
// gpuemu: outputs=scratch:uint32,count:uint32,where_ws:uint32,nxt_ws:uint32,prv_ws:uint32
// gpuemu: outputs=heap_ws:uint64,tree_ws:uint64,size_ws:uint32 header=encode_common.metal
// encode_merge_long (kernels/encode_merge.cu): every piece of at least ENC_LONG_PIECE bytes that
// merges itself, cut where no merge can cross and each run merged in O(L log L)
// (enc_merge_long_piece); every other entry carries its ids over. The workspaces are outputs
// (MLX has no scratch buffers), each piece using its own byte range of them, written before
// read. Launched only for a chunk with such a piece.
EncMergeTable t;
t.slots = t_slots;
t.bits = t_bits;
EncLongWork ws;
ws.where = where_ws;
ws.nxt = nxt_ws;
ws.prv = prv_ws;
ws.heap = heap_ws;
ws.tree = tree_ws;
ws.size = size_ws;
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint s = pstart[e];
  if (owner[e] == (uint)e) {
    const uint len = pstart[e + 1] - s;
    if (len >= ENC_LONG_PIECE) {
      count[e] = enc_merge_long_piece(t, buf, byte_ids, join, scratch, ws, s, len);
      continue;
    }
  }
  enc_carry_ids(scratch_in, count_in, scratch, count, e, s);
}
