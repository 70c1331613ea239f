// gpuemu: inputs=buf:uint8,bits:uint32,n:int64:0 outputs=flag:uint32
// gpuemu: header=encode_nfc_common.metal
// encode_nfc_flags (kernels/encode_nfc.cu): flag[i] = 1 where a character the normal form may
// change starts (THE QUICK CHECK), for i in [0, n]; flag[n] = 0. The backend sum-scans the flags
// exclusively with MLX (flag[n] becomes the count) and reads that one value back.
for (long i = thread_position_in_grid.x; i <= n; i += threads_per_grid.x) {
  flag[i] = i < n && nfc_unsafe_at(buf, n, bits, i) ? 1u : 0u;
}
