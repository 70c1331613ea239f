// encode_common.cuh: types, constants and device helpers shared by the encode kernels
// (encode_pretok.cu, encode_scan.cu, encode_merge.cu, encode_emit.cu), driven by
// gputok/backends/driver.py.
//
// Every constant below is defined in Python (gputok/backends/kernels.py: KERNEL_CONSTANTS, which
// takes each from the module that owns it) and injected as a #define block when a module is
// built; the #ifndef defaults only let this file compile on its own (nvcc -ptx), and a test
// asserts they equal the injected values.
//
// No standard headers: NVRTC (CuPy's compiler) ships none, so fixed-width types are spelled
// out. Every kernel is a grid-stride loop, so any grid size is correct; the host caps grids at a
// few blocks per SM, the emulator tests run tiny grids in three thread orders.
#pragma once

typedef unsigned char enc_u8;
typedef unsigned short enc_u16;
typedef unsigned int enc_u32;
typedef unsigned long long enc_u64;
typedef long long enc_i64;

// (a host compiler gets its own form from kernels/dialect_host.h: a block's threads as one loop)
#ifndef ENC_GRID_STRIDE
#define ENC_GRID_STRIDE(i, n)                                                    \
  for (enc_i64 i = (enc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (enc_i64)(n); \
       i += (enc_i64)gridDim.x * blockDim.x)
#endif

// ---------------------------------------------------------------- pre-tokenizer classes
// The run classes of gputok/stages/scan_rules.py (cl100k / gpt2 families), one per code point;
// ENC_CONT marks UTF-8 continuation bytes (the kernels work in byte coordinates).
#ifndef ENC_X
#define ENC_X 0  // no character: outside every segment, or past a segment end
#endif
#ifndef ENC_L
#define ENC_L 1  // letter
#endif
#ifndef ENC_N
#define ENC_N 2  // digit (\p{N})
#endif
#ifndef ENC_P
#define ENC_P 3  // other (punctuation, symbols, ...)
#endif
#ifndef ENC_A
#define ENC_A 4  // "'"
#endif
#ifndef ENC_SP
#define ENC_SP 5  // " "
#endif
#ifndef ENC_S
#define ENC_S 6  // other whitespace
#endif
#ifndef ENC_E
#define ENC_E 7  // CR / LF (cl families; gpt2 maps them to ENC_S)
#endif
#ifndef ENC_CONT
#define ENC_CONT 8
#endif

// window-rule bits (scan_rules.py's B_PAIR / B_NEXT / B_PREV2)
#ifndef ENC_B_PAIR
#define ENC_B_PAIR 1
#endif
#ifndef ENC_B_NEXT
#define ENC_B_NEXT 2
#endif
#ifndef ENC_B_PREV2
#define ENC_B_PREV2 4
#endif

// per-byte marks written by the host's segment plan (documents split at special tokens)
#ifndef ENC_SEG_START
#define ENC_SEG_START 1  // a (non-empty) segment starts at this byte
#endif
#ifndef ENC_SEG_END
#define ENC_SEG_END 2  // a segment ends here: the previous byte was its last
#endif
#ifndef ENC_OUTSIDE
#define ENC_OUTSIDE 4  // the byte belongs to a token span, not to any segment
#endif
#ifndef ENC_SPECIAL_START
#define ENC_SPECIAL_START 8  // a token span starts here (it becomes one entry)
#endif

// ---------------------------------------------------------------- entries
// An entry is a piece, a token span, or the sentinel at the end of the chunk. spec[e]:
#ifndef ENC_NORMAL
#define ENC_NORMAL 0xFFFFFFFFu  // a piece of text: merged
#endif
#ifndef ENC_GAP
#define ENC_GAP 0xFFFFFFFEu  // no ids: the sentinel, or whitespace an lstrip/rstrip token took
#endif
//                 any other value: the id of a special or added token
// owner[e] after encode_piece_kind:
#ifndef ENC_DONE
#define ENC_DONE 0xFFFFFFFFu  // ids already final in scratch (token, whole-token piece)
#endif
//                 e: this entry merges its own piece; another index: a duplicate of that entry

#ifndef ENC_NO_MERGE
#define ENC_NO_MERGE 0xFFFFFFFFu
#endif
#ifndef ENC_EMPTY_KEY
#define ENC_EMPTY_KEY 0xFFFFFFFFFFFFFFFFull
#endif
#ifndef ENC_EMPTY_SLOT
#define ENC_EMPTY_SLOT 0xFFFFFFFFu
#endif
#ifndef ENC_HASH_MUL
#define ENC_HASH_MUL 0x9E3779B97F4A7C15ull  // Fibonacci hashing (gputok/stages/table.py)
#endif

#ifndef ENC_LONG_PIECE
#define ENC_LONG_PIECE 256  // bytes; pieces at least this long take encode_merge_long
#endif

// ---------------------------------------------------------------- UTF-8
// Bytes of the character whose first byte is b (a stray continuation byte counts as one).
__device__ __forceinline__ int enc_utf8_len(enc_u8 b) {
  return b < 0xC0 ? 1 : (b < 0xE0 ? 2 : (b < 0xF0 ? 3 : 4));
}

// The code point starting at byte i (input is valid UTF-8; reads never pass n).
__device__ __forceinline__ enc_u32 enc_decode(const enc_u8* buf, enc_i64 i, enc_i64 n) {
  const enc_u32 b0 = buf[i];
  if (b0 < 0x80) return b0;
  const int len = enc_utf8_len((enc_u8)b0);
  enc_u32 cp = len == 2 ? (b0 & 0x1Fu) : (len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u));
  for (int k = 1; k < len; ++k) {
    const enc_u32 b = i + k < n ? (enc_u32)buf[i + k] : 0x80u;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return cp < 0x110000u ? cp : 0xFFFDu;
}

// ---------------------------------------------------------------- hashing
#ifndef ENC_FNV_OFFSET
#define ENC_FNV_OFFSET 0xCBF29CE484222325ull
#endif
#ifndef ENC_FNV_PRIME
#define ENC_FNV_PRIME 0x100000001B3ull
#endif
#ifndef ENC_MIX1
#define ENC_MIX1 0xFF51AFD7ED558CCDull
#endif
#ifndef ENC_MIX2
#define ENC_MIX2 0xC4CEB9FE1A85EC53ull
#endif
// Byte-string hash of the whole-token table and the dedup table: FNV-1a over the bytes, then
// a 64-bit finalizer so the top bits (the slot) depend on every byte. The host builds the
// whole-token table with the same function (gputok/backends/device_tables.py, bytes_hash).
__device__ __forceinline__ enc_u64 enc_bytes_hash(const enc_u8* p, enc_u32 len) {
  enc_u64 h = ENC_FNV_OFFSET;
  for (enc_u32 k = 0; k < len; ++k) {
    h ^= p[k];
    h *= ENC_FNV_PRIME;
  }
  h ^= h >> 33;
  h *= ENC_MIX1;
  h ^= h >> 33;
  h *= ENC_MIX2;
  h ^= h >> 33;
  return h;
}

__device__ __forceinline__ bool enc_bytes_equal(const enc_u8* a, const enc_u8* b, enc_u32 len) {
  for (enc_u32 k = 0; k < len; ++k)
    if (a[k] != b[k]) return false;
  return true;
}

// ---------------------------------------------------------------- merge table
// The open-addressing table of MergeTable (gputok/stages/table.py), probed exactly as there:
// key = left << 32 | right, home slot = (key * HASH_MUL) >> (64 - bits), linear probing, an
// empty slot ends the probe. Returns the pair's priority (ENC_NO_MERGE when absent) and sets
// *merged to the merged id.
// Layout on a device (gputok/backends/device_tables.py, merge_slots): two 64-bit words per slot,
// [key, priority | merged << 32], so a probe that hits reads one 16-byte slot (one cache line,
// one 128-bit load) where three separate arrays cost three misses: the probes' loads were half
// of encode_merge_short's time on a CPU (perf, multilingual text).
struct EncMergeTable {
  const enc_u64* slots;
  enc_u32 bits;
};

// A hint that the pair's home slot is about to be probed (a no-op where ENC_PREFETCH is not
// given: the GPU hides latency with other warps; a CPU core has only its own thread).
#ifndef ENC_PREFETCH
#define ENC_PREFETCH(p) ((void)0)
#endif
__device__ __forceinline__ void enc_pair_prefetch(const EncMergeTable& t, enc_u32 left,
                                                  enc_u32 right) {
  const enc_u64 key = ((enc_u64)left << 32) | (enc_u64)right;
  ENC_PREFETCH(t.slots + 2 * ((key * ENC_HASH_MUL) >> (64 - t.bits)));
}

__device__ __forceinline__ enc_u32 enc_pair_lookup(const EncMergeTable& t, enc_u32 left,
                                                   enc_u32 right, enc_u32* merged) {
  const enc_u64 key = ((enc_u64)left << 32) | (enc_u64)right;
  const enc_u64 mask = (1ull << t.bits) - 1ull;
  enc_u64 s = (key * ENC_HASH_MUL) >> (64 - t.bits);
  while (true) {
    const enc_u64 k = t.slots[2 * s];
    if (k == key) {
      const enc_u64 v = t.slots[2 * s + 1];
      *merged = (enc_u32)(v >> 32);
      return (enc_u32)v;
    }
    if (k == ENC_EMPTY_KEY) return ENC_NO_MERGE;
    s = (s + 1) & mask;
  }
}
