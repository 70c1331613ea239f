// host_merge.h: host only. The merge stage of a few pieces the host cut (DeviceBackend.merge_pieces:
// a run of one character, a blob, with a few pieces around it) as one call: the three kernels of
// encode_merge.cu that the driver would launch one by one (encode_piece_kind, encode_merge_short,
// encode_merge_long), run in order on the calling thread as one block over every entry. After
// the kernels in their translation unit (gputok/backends/native_build.py), so it calls the
// kernels themselves, their signatures checked by the compiler: no kernel logic here, only the
// launch sequence, which on a CPU costs more in Python (~0.15 ms: argument checks, workspace, three
// launches) than the kernels do on a 10 KB run.
//
// The workspace is two blocks the caller allocates (ws_u32: owner, prio, next, prev, the block
// sizes; ws_u64: the heap keys and the block tree), carved here in the order the Python side
// sizes them (NativeDevice.merge_inline). No dedup: every piece merges itself, as
// merge_pieces asks.

namespace {
// One block over every range (ENC_GRID_STRIDE runs it as one loop), this thread's launch shape
// restored after.
struct EncHostOneBlock {
  enc_host_dim3 saved[3];
  EncHostOneBlock() : saved{enc_host_block_idx, enc_host_block_dim, enc_host_grid_dim} {
    enc_host_block_idx = enc_host_dim3{0, 0, 0};
    enc_host_block_dim = enc_host_dim3{0x7FFFFFFFu, 1, 1};
    enc_host_grid_dim = enc_host_dim3{1, 1, 1};
  }
  ~EncHostOneBlock() {
    enc_host_block_idx = saved[0];
    enc_host_block_dim = saved[1];
    enc_host_grid_dim = saved[2];
  }
};
}  // namespace

extern "C" __attribute__((visibility("default"))) int gputok_native_merge_inline(
    const enc_u8* buf, const enc_u32* pstart, const enc_u32* spec, enc_u32 n_entries,
    const enc_u32* w_slots, const enc_u8* w_tok_bytes, enc_u32 w_bits, const enc_u64* t_slots,
    enc_u32 t_bits, const enc_u32* byte_ids, const enc_u32* join, enc_u32 n, int has_long,
    enc_u32* count, enc_u32* scratch, enc_u32* ws_u32, enc_u64* ws_u64) {
  // count: cap + 1 (the caller's), scratch: n, ws_u32: cap + n (+ 2 n + units with long pieces)
  if (n_entries == 0) return 0;
  const enc_i64 cap = (enc_i64)n_entries;
  const enc_u64 units = (enc_u64)n / ENC_LONG_PIECE + 2;
  enc_u32* owner = ws_u32;                   // cap
  enc_u32* prio = owner + cap;               // n (where[] of the long pieces)
  enc_u32* nxt = prio + n;                   // n (long pieces only)
  enc_u32* prv = nxt + n;                    // n
  enc_u32* size = prv + n;                   // units
  enc_u64* heap = ws_u64;                    // n
  enc_u64* tree = heap + n;                  // 2 * units
  const EncHostOneBlock shape;
  encode_piece_kind(buf, pstart, spec, &n_entries, w_slots, w_tok_bytes, w_bits, nullptr, 0u,
                    owner, count, scratch, cap);
  encode_merge_short(buf, pstart, &n_entries, owner, t_slots, t_bits, byte_ids, scratch, prio,
                     count, cap);
  if (has_long)
    encode_merge_long(buf, pstart, &n_entries, owner, t_slots, t_bits, byte_ids, join, scratch,
                      prio, nxt, prv, heap, tree, size, count, cap);
  return 0;
}
