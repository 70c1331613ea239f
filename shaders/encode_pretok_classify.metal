// gpuemu: inputs=buf:uint8,mark:uint8,cls_table:uint8,n:int64:0 outputs=cls:uint8
// gpuemu: header=encode_common.metal
// encode_pretok_classify (kernels/encode_pretok.cu): cls[i] for i in [0, n], the class of the
// character starting at byte i (enc_classify_at).
for (long i = thread_position_in_grid.x; i <= n; i += threads_per_grid.x) {
  cls[i] = enc_classify_at(buf, n, mark, cls_table, i);
}
