// gpuemu: inputs=buf:uint8,pstart:uint32,spec:uint32,t_slots:uint64,n_entries:uint32:0
// gpuemu: inputs=t_bits:uint32:0,cont:uint32:0,unk:uint32:0,max_chars:uint32:0,cap:int64:0
// gpuemu: outputs=owner:uint32,count:uint32,scratch:uint32 header=encode_wordpiece_common.metal
// encode_wordpiece (kernels/encode_wordpiece.cu): THE WORDPIECE MATCH of every entry, one thread
// each; its ids go to scratch at its own start and are final (owner ENC_DONE), as the merge
// shaders leave them for encode_emit.
EncWordPiece wp;
wp.trie.slots = t_slots;
wp.trie.bits = t_bits;
wp.cont = cont;
wp.unk = unk;
wp.max_chars = max_chars;
const long n_ent = (long)n_entries < cap ? (long)n_entries : cap;
for (long e = thread_position_in_grid.x; e < n_ent; e += threads_per_grid.x) {
  const uint s = pstart[e];
  const uint sp = spec[e];
  owner[e] = ENC_DONE;
  const uint end = sp == ENC_NORMAL ? pstart[e + 1] : s;  // a word is never the last entry
  count[e] = enc_wordpiece_entry(wp, buf, s, end, sp, scratch + s);
}
