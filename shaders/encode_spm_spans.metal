// gpuemu: inputs=buf:uint8,mark:uint8,sym:uint32,c_slots:uint64,n:int64:0,c_bits:uint32:0
// gpuemu: inputs=flags:uint32:0 outputs=ent:uint32 header=encode_spm_common.metal
// encode_spm_spans (kernels/encode_spm.cu): ent[i] = 1 where an entry starts (THE SPM CUT), the
// sentinel at n; every flag written by exactly one thread.
EncSpm m;
m.sym = sym;
m.cuts.slots = c_slots;
m.cuts.bits = c_bits;
m.flags = flags;
for (long i = thread_position_in_grid.x; i < n + 2; i += threads_per_grid.x) {
  ent[i] = enc_spm_entry_at(m, buf, n, mark, i);
}
