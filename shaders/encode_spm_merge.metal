// gpuemu: inputs=buf:uint8,pstart:uint32,spec:uint32,mark:uint8,sym:uint32,t_slots:uint64
// gpuemu: inputs=fin:uint32,byte_ids:uint32,n_entries:uint32:0,t_bits:uint32:0,flags:uint32:0
// gpuemu: inputs=unk:uint32:0,space_id:uint32:0,cap:int64:0
// gpuemu: outputs=scratch:uint32,count:uint32,src:uint32,owner:uint32,where_ws:uint32
// gpuemu: outputs=nxt_ws:uint32,prv_ws:uint32,heap_ws:uint64,tree_ws:uint64,size_ws:uint32
// gpuemu: header=encode_spm_common.metal
// encode_spm_merge (kernels/encode_spm.cu): every entry's ids, one thread each (enc_spm_entry:
// THE SPM SYMBOLS, THE COMPARATOR, THE SPM EXPAND), at scratch[pstart[e] + e ...]; that offset
// in src[e], owner[e] = ENC_DONE for encode_emit. The workspaces are outputs (MLX has no scratch
// buffers), each entry using its own offset range of them. Outputs start at 0 (init_value=0):
// count past the entries, and its spare last slot, must be 0 for the output scan.
EncSpm m;
m.sym = sym;
m.pairs.slots = t_slots;
m.pairs.bits = t_bits;
m.fin = fin;
m.byte_ids = byte_ids;
m.flags = flags;
m.unk = unk;
m.space_id = space_id;
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
  const uint sp = spec[e];
  const uint o = s + (uint)e;
  const uint end = sp == ENC_NORMAL ? pstart[e + 1] : s;  // a span is never the last entry
  const bool dummy = sp != ENC_GAP && (mark[s] & ENC_SPM_DUMMY) != 0;
  count[e] = enc_spm_entry(m, buf, s, end, sp, dummy, scratch + o, ws, o);
  src[e] = o;
  owner[e] = ENC_DONE;
}
