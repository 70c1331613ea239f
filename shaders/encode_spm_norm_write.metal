// gpuemu: inputs=buf:uint8,p_src:uint32,p_len:uint32,p_kind:uint8,units:uint32,strings:uint8
// gpuemu: inputs=p_dst:uint32,out_len:uint32,n_pieces:int64:0,n_units:uint32:0
// gpuemu: inputs=n_strings:uint32:0,nflags:uint32:0 outputs=out:uint8
// gpuemu: header=encode_spm_common.metal
// encode_spm_norm_write (kernels/encode_spm.cu): each piece's bytes at its place p_dst[k] (the
// lengths' exclusive scan): THE SPM NORMALISER's output, or a token span as it is. Every byte
// of the output is written by exactly one thread.
EncCharsMap cm;
cm.units = units;
cm.n_units = n_units;
cm.strings = strings;
cm.n_strings = n_strings;
cm.flags = nflags;
cm.n_ud = 0;  // (no user-defined pieces: such a model normalises on the host here)
for (long k = thread_position_in_grid.x; k < n_pieces; k += threads_per_grid.x) {
  if (p_kind[k]) {
    for (uint q = 0; q < p_len[k]; ++q) out[p_dst[k] + q] = buf[p_src[k] + q];
  } else {
    EncNormOut o;
    o.out = out + p_dst[k];
    o.write = true;
    o.limit = out_len[k];
    o.len = 0;
    o.keep = 0;
    enc_spm_normalize(cm, buf, p_src[k], p_src[k] + p_len[k], o);
  }
}
