// gpuemu: inputs=scan:uint32,n:int64:0 outputs=pos:uint32 header=encode_nfc_common.metal
// encode_nfc_compact (kernels/encode_nfc.cu): pos[scan[i]] = i for every flagged i (where the
// exclusive scan steps). Launched only when the count is not 0, with pos sized by it: every
// slot is written exactly once.
for (long i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
  const uint e = scan[i];
  if (scan[i + 1] != e) pos[e] = (uint)i;
}
