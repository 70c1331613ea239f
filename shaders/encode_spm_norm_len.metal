// gpuemu: inputs=buf:uint8,p_src:uint32,p_len:uint32,p_kind:uint8,units:uint32,strings:uint8
// gpuemu: inputs=n_pieces:int64:0,n_units:uint32:0,n_strings:uint32:0,nflags:uint32:0
// gpuemu: outputs=out_len:uint32 header=encode_spm_common.metal
// encode_spm_norm_len (kernels/encode_spm.cu): each piece's length after THE SPM NORMALISER (a
// token span: its own), one thread per piece.
EncCharsMap cm;
cm.units = units;
cm.n_units = n_units;
cm.strings = strings;
cm.n_strings = n_strings;
cm.flags = nflags;
cm.n_ud = 0;  // (no user-defined pieces: such a model normalises on the host here)
for (long k = thread_position_in_grid.x; k < n_pieces; k += threads_per_grid.x) {
  if (p_kind[k]) {
    out_len[k] = p_len[k];
  } else {
    EncNormOut o;
    o.write = false;
    o.limit = 0;
    o.len = 0;
    o.keep = 0;
    out_len[k] = enc_spm_normalize(cm, buf, p_src[k], p_src[k] + p_len[k], o);
  }
}
