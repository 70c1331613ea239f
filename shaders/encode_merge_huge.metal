// gpuemu: inputs=buf:uint8,pstart:uint32,owner_in:uint32,t_slots:uint64,byte_ids:uint32
// gpuemu: inputs=scratch_in:uint32,count_in:uint32,n_entries:uint32:0,t_bits:uint32:0
// gpuemu: inputs=cap:int64:0 outputs=scratch:uint32,count:uint32,owner:uint32,prio_ws:uint32
// gpuemu: outputs=nxt_ws:uint32,prv_ws:uint32,heap_ws:uint64,seg_ws:uint32
// gpuemu: header=encode_huge_common.metal
// encode_merge_huge (kernels/encode_merge_huge.cu): every piece of ENC_HUGE_PIECE bytes or more
// merged by a whole threadgroup (enc_merge_huge_piece), its ids final (owner ENC_DONE); every
// other entry carries its ids and owner over. A threadgroup looks
// at as many entries as it has threads at a time and queues the huge ones. Launched only for a
// chunk with such a piece, in whole threadgroups (the merge waits at threadgroup barriers).
threadgroup atomic_uint s_min[4];
threadgroup uint s_fk[ENC_HUGE_BLOCK];
threadgroup uint s_dirty[ENC_HUGE_BLOCK];
threadgroup uint s_queue[ENC_HUGE_BLOCK];
threadgroup atomic_uint s_queued;
EncMergeTable t;
t.slots = t_slots;
t.bits = t_bits;
const uint tid = thread_index_in_threadgroup;
const uint nt = threads_per_threadgroup.x;
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long base = (long)threadgroup_position_in_grid.x * nt; base < n_ent;
     base += (long)threadgroups_per_grid.x * nt) {
  if (tid == 0) atomic_store_explicit(&s_queued, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const long e = base + tid;
  if (e < n_ent) {
    const uint s = pstart[e];
    const uint o = owner_in[e];
    if (o == (uint)e && pstart[e + 1] - s >= ENC_HUGE_PIECE) {
      s_queue[atomic_fetch_add_explicit(&s_queued, 1u, memory_order_relaxed)] = (uint)e;
    } else {
      enc_carry_ids(scratch_in, count_in, scratch, count, e, s);
      owner[e] = o;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint queued = atomic_load_explicit(&s_queued, memory_order_relaxed);
  for (uint k = 0; k < queued; ++k) {
    const uint q = s_queue[k];
    const uint s = pstart[q];
    EncHuge h;
    h.ids = scratch + s;
    h.pr = prio_ws + s;
    h.nxt = nxt_ws + s;
    h.prv = prv_ws + s;
    h.lr = heap_ws + s;
    h.seg = seg_ws + enc_huge_seg_base(s);
    h.len = pstart[q + 1] - s;
    h.nseg = (h.len + ENC_HUGE_SEG - 1) / ENC_HUGE_SEG;
    h.per = (h.nseg + nt - 1) / nt;
    const uint c = enc_merge_huge_piece(t, buf + s, byte_ids, h, tid, nt, s_min, s_fk, s_dirty);
    if (tid == 0) {
      count[q] = c;
      owner[q] = ENC_DONE;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
