// gpuemu: inputs=buf:uint8,mark:uint8,cls_table:uint8,n:int64:0 outputs=cls:uint8
// gpuemu: header=encode_o200k_common.metal
// encode_o200k_classify (kernels/encode_o200k.cu): cls[i] for i in [0, n], the o200k class of
// the character starting at byte i (o200k_classify_at: ENC_O_CONT on continuation bytes, ENC_X
// outside segments and at n).
for (long i = thread_position_in_grid.x; i <= n; i += threads_per_grid.x) {
  cls[i] = o200k_classify_at(buf, n, mark, cls_table, i);
}
