// encode_rules.h: the per-thread logic of the encode pipeline, written once for every dialect.
// Used by the CUDA kernels (kernels/encode_*.cu, through encode_common.cuh; also compiled for the
// host by the native CPU device through kernels/dialect_host.h) and by the Metal shaders
// (shaders/encode_*.metal, through shaders/encode_common.metal). A kernel file of either dialect
// is only the loop over its elements and the stores; what each element computes lives here:
//
//   here                  types, constants, UTF-8 (enc_decode), enc_bytes_hash (THE BYTES HASH)
//   encode_pretok_rules.h enc_classify_at, enc_cl_span_start (THE CL SPAN RULE), enc_cl_match
//                         (THE CL MATCHER), enc_spans_at (THE SPAN WALK, both matchers)
//   encode_merge_rules.h  enc_pair_lookup (THE PAIR PROBE), enc_piece_kind_of (specials, the
//                         sentinel, whole-token lookup), enc_merge_small, enc_merge_heap,
//                         enc_merge_long_piece (THE COMPARATOR), enc_emit_ids
//
// Search for a rule's marker to find every place that implements it (gputok/stages/*.py hold
// the numpy forms). Nothing here is atomic: the CUDA dedup claims slots with a 64-bit
// compare-and-swap, which Metal lacks, so it stays in encode_merge.cu (see shaders/README.md).
//
// Every constant is defined in Python (gputok/backends/kernels.py: kernel_constants) and injected
// as a #define block into the CUDA sources; the #ifndef defaults below let a file compile alone
// and are what the Metal shaders use: a test asserts they equal the injected values. 64-bit
// defaults carry the `ul` suffix (Metal has no `long long`; `unsigned long` is 64-bit there and
// on the LP64 hosts nvcc and the native device build for).
//
// No standard headers: NVRTC (CuPy's compiler) ships none, and Metal has its own.
#pragma once

#include "dialect.h"

typedef unsigned char enc_u8;
typedef unsigned short enc_u16;
typedef unsigned int enc_u32;
typedef gputok_u64 enc_u64;
typedef gputok_i64 enc_i64;

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
#ifndef ENC_PAIR_COMPACT
#define ENC_PAIR_COMPACT 256u  // flag in a merge table's bits: 8-byte slots (encode_merge_rules.h)
#endif
#ifndef ENC_PAIR_BYTES
#define ENC_PAIR_BYTES 512u  // flag in a merge table's bits: the byte-pair block follows the slots
#endif
#ifndef ENC_WHOLE_BYTES
#define ENC_WHOLE_BYTES 256u  // flag in a whole-token table's bits: the one-byte block follows
#endif
#ifndef ENC_PAIR_ID_BITS
#define ENC_PAIR_ID_BITS 21
#endif
#ifndef ENC_EMPTY_KEY
#define ENC_EMPTY_KEY 0xFFFFFFFFFFFFFFFFul
#endif
#ifndef ENC_EMPTY_SLOT
#define ENC_EMPTY_SLOT 0xFFFFFFFFu
#endif
#ifndef ENC_HASH_MUL
#define ENC_HASH_MUL 0x9E3779B97F4A7C15ul  // Fibonacci hashing (gputok/stages/table.py)
#endif

#ifndef ENC_LONG_PIECE
#define ENC_LONG_PIECE 256  // bytes; pieces at least this long take encode_merge_long
#endif

// ---------------------------------------------------------------- hashing
#ifndef ENC_BYTES_SEED
#define ENC_BYTES_SEED 0xCBF29CE484222325ul
#endif
#ifndef ENC_WORD_MUL
#define ENC_WORD_MUL 0x9E3779B97F4A7C15ul
#endif
#ifndef ENC_MIX1
#define ENC_MIX1 0xFF51AFD7ED558CCDul
#endif
#ifndef ENC_MIX2
#define ENC_MIX2 0xC4CEB9FE1A85EC53ul
#endif
#define ENC_U64_MAX GPUTOK_U64(0xFFFFFFFFFFFFFFFF)

// A hint that memory is about to be read (the CPU device's memory-level parallelism); a no-op on
// GPUs, which hide latency with other warps.
#ifndef ENC_PREFETCH
#define ENC_PREFETCH(p) ((void)(p))
#endif

// ---------------------------------------------------------------- UTF-8
// Bytes of the character whose first byte is b (a stray continuation byte counts as one).
GPUTOK_FN int enc_utf8_len(enc_u8 b) {
  return b < 0xC0 ? 1 : (b < 0xE0 ? 2 : (b < 0xF0 ? 3 : 4));
}

// The code point starting at byte i (input is valid UTF-8; reads never pass n).
GPUTOK_FN enc_u32 enc_decode(const GPUTOK_DEV enc_u8* buf, enc_i64 i, enc_i64 n) {
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
// The little-endian word of bytes [k, min(k + 8, len)) of the len-byte string at p, zero-padded
// (k < len): THE BYTES HASH and enc_bytes_equal read a string a word at a time. Byte loads here;
// the native CPU device loads whole words (kernels/dialect_host.h defines ENC_WORD_AT).
#ifndef ENC_WORD_AT
GPUTOK_FN enc_u64 enc_word_at(const GPUTOK_DEV enc_u8* p, enc_u32 k, enc_u32 len) {
  const enc_u32 e = len - k < 8u ? len - k : 8u;
  enc_u64 w = 0;
  for (enc_u32 j = 0; j < e; ++j) w |= (enc_u64)p[k + j] << (8u * j);
  return w;
}
#endif

// THE BYTES HASH, of the whole-token table and the dedup table: from ENC_BYTES_SEED ^ len, each
// 8-byte little-endian word of the bytes (the last one zero-padded) xor-ed in and the state
// multiplied by ENC_WORD_MUL, then a 64-bit finalizer so the top bits (the slot) depend on every
// byte. A word at a time: a piece of up to 8 bytes is one multiply and no loop to mispredict
// (byte-at-a-time FNV-1a was a fifth of the whole-token lookup's time on a CPU). The host builds
// the whole-token table with the same function (gputok/backends/device_tables.py, bytes_hash).
// In three steps (enc_bytes_hash_start, _word per word, _end), for a caller that has the words
// already (the native CPU device's piece cache keys a piece by them: kernels/cpu_cache.h).
GPUTOK_FN enc_u64 enc_bytes_hash_start(enc_u32 len) { return ENC_BYTES_SEED ^ (enc_u64)len; }

GPUTOK_FN enc_u64 enc_bytes_hash_word(enc_u64 h, enc_u64 word) {
  return (h ^ word) * ENC_WORD_MUL;
}

GPUTOK_FN enc_u64 enc_bytes_hash_end(enc_u64 h) {
  h ^= h >> 33;
  h *= ENC_MIX1;
  h ^= h >> 33;
  h *= ENC_MIX2;
  h ^= h >> 33;
  return h;
}

GPUTOK_FN enc_u64 enc_bytes_hash(const GPUTOK_DEV enc_u8* p, enc_u32 len) {
  enc_u64 h = enc_bytes_hash_start(len);
  for (enc_u32 k = 0; k < len; k += 8) h = enc_bytes_hash_word(h, enc_word_at(p, k, len));
  return enc_bytes_hash_end(h);
}

// Equal bytes: a device that loads whole words (ENC_WORD_AT) compares words; one that loads
// bytes compares bytes, stopping at the first difference (assembling two words from byte loads
// only to compare them costs a GPU thread shifts it need not do).
GPUTOK_FN bool enc_bytes_equal(const GPUTOK_DEV enc_u8* a, const GPUTOK_DEV enc_u8* b,
                               enc_u32 len) {
#ifdef ENC_WORD_AT
  for (enc_u32 k = 0; k < len; k += 8)
    if (enc_word_at(a, k, len) != enc_word_at(b, k, len)) return false;
#else
  for (enc_u32 k = 0; k < len; ++k)
    if (a[k] != b[k]) return false;
#endif
  return true;
}

// The rules by concern, over the definitions above:
#include "encode_pretok_rules.h"
#include "encode_merge_rules.h"
