// gpuemu: inputs=buf:uint8,mark:uint8,cls:uint8,letters:uint8,n:int64:0,n_letters:uint32:0
// gpuemu: outputs=ent:uint32 header=encode_o200k_common.metal
// encode_o200k_spans (kernels/encode_o200k.cu): ent[i] = 1 where an entry starts, for i in
// [0, n + 2). The thread of a span start runs THE O200K MATCHER over its span and writes every
// byte of it; a byte outside segments writes its own flag; the sentinel slots are written by
// their own threads. So every flag is written exactly once, in any thread order, and the
// output needs no init_value (the emulator fills it with 0xCD: a byte nobody wrote shows).
O2Text t;
enc_span_text(t, buf, mark, cls, letters, n_letters, n);
for (long i = thread_position_in_grid.x; i < n + 2; i += threads_per_grid.x) {
  if (i >= n) {
    ent[i] = i == n ? 1u : 0u;  // the sentinel entry at n; ent[n + 1] = 0 ends the scan
  } else {
    enc_spans_at(t, i, ent);
  }
}
