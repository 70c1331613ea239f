// gpuemu: inputs=pstart:uint32,spec:uint32,mark:uint8,scratch:uint32,src_in:uint32
// gpuemu: inputs=count_in:uint32,n_entries:uint32:0,unk:uint32:0,cap:int64:0
// gpuemu: outputs=src:uint32,count:uint32 header=encode_spm_common.metal
// encode_spm_fuse (kernels/encode_spm.cu): THE UNK RUN, each entry's new start and count from the
// merge's (read only). Outputs start at 0: count's spare last slot stays 0 for the output scan.
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint c = count_in[e];
  uint drop = 0;
  if (e > 0 && c > 0) {
    const uint pc = count_in[e - 1];
    drop = enc_spm_fuse_drop(unk, spec[e], spec[e - 1], (mark[pstart[e]] & ENC_SEG_START) != 0,
                             scratch[src_in[e]], c, pc ? scratch[src_in[e - 1] + pc - 1] : 0u,
                             pc);
  }
  src[e] = src_in[e] + drop;
  count[e] = c - drop;
}
