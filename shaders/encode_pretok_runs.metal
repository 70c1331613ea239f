// gpuemu: inputs=mark:uint8,cls:uint8,n:int64:0 outputs=runv:uint32,ischar:uint32
// gpuemu: header=encode_common.metal
// encode_pretok_runs (kernels/encode_pretok.cu): runv[i] = i + 1 where a run starts, ischar[i] =
// 1 at character starts (enc_runs_at); the backend max-scans runv and sum-scans ischar.
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  uint c;
  runv[i] = enc_runs_at(mark, cls, i, &c);
  ischar[i] = c;
}
