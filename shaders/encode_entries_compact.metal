// gpuemu: inputs=scan:uint32,n:int64:0 outputs=pstart:uint32,spec:uint32
// gpuemu: header=encode_common.metal
// encode_entries_compact (kernels/encode_pretok.cu): pstart[scan[i]] = i for every flagged byte
// i (scan is the exclusive sum of the flags), spec = ENC_NORMAL, the sentinel at n ENC_GAP.
// Each entry is written by exactly one thread.
for (long i = thread_position_in_grid.x; i <= n; i += threads_per_grid.x) {
  const uint e = scan[i];
  if (scan[i + 1] != e) {
    pstart[e] = (uint)i;
    spec[e] = i == n ? ENC_GAP : ENC_NORMAL;
  }
}
