// gpuemu: inputs=buf:uint8,mark:uint8,cls:uint8,pair:uint8,letters:uint8,runstart:uint32
// gpuemu: inputs=cidx:uint32,ws_next:uint8,n:int64:0,pair_bits:int32:0,n_letters:uint32:0
// gpuemu: inputs=gpt2:int32:0,digit_group:int32:0,end_whole:int32:0 outputs=fix:uint8
// gpuemu: header=encode_common.metal
// encode_pretok_fix (kernels/encode_pretok.cu): THE FIX RULE at every byte (enc_fix_at). CUDA
// stores the corrections into the flags in place; an MLX output is fresh, so they go to `fix`
// (starts at 0: init_value=0): 1 = the flag becomes 0, 2 = it becomes 1. The backend applies
// them with one `where`. (The corrections never disagree on a byte: the CUDA form gives the same
// flags in every thread order.)
EncPretokRule r;
r.pair = pair;
r.pair_bits = pair_bits;
r.letters = letters;
r.n_letters = n_letters;
r.gpt2 = gpt2;
r.digit_group = digit_group;
r.end_whole = end_whole;
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  const EncFix f = enc_fix_at(buf, n, mark, cls, r, runstart, cidx, ws_next, i);
  if (f.clear_at >= 0) fix[f.clear_at] = 1;
  if (f.set_at >= 0) fix[f.set_at] = 2;
}
