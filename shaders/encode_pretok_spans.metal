// gpuemu: inputs=buf:uint8,mark:uint8,cls:uint8,letters:uint8,n:int64:0,n_letters:uint32:0
// gpuemu: inputs=gpt2:int32:0,digit_group:int32:0,end_whole:int32:0 outputs=ent:uint32
// gpuemu: header=encode_common.metal
// encode_pretok_spans (kernels/encode_pretok.cu): ent[i] = 1 where an entry starts, for i in
// [0, n + 2). The thread of a span start runs THE CL MATCHER over its span and writes every
// byte of it (enc_spans_at: THE SPAN WALK); a byte outside segments writes its own flag; the
// sentinel slots are written by their own threads. So every flag is written exactly once, in
// any thread order, and the output needs no init_value (the emulator fills it with 0xCD: a
// byte nobody wrote shows).
EncClText t;
enc_span_text(t, buf, mark, cls, letters, n_letters, n);
t.gpt2 = gpt2;
t.digit_group = digit_group;
t.end_whole = end_whole;
for (long i = thread_position_in_grid.x; i < n + 2; i += threads_per_grid.x) {
  if (i >= n) {
    ent[i] = i == n ? 1u : 0u;  // the sentinel entry at n; ent[n + 1] = 0 ends the scan
  } else {
    enc_spans_at(t, i, ent);
  }
}
