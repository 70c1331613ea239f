// nfc_check.h: the normalisation quick check, written once for every dialect (CUDA and the
// native CPU device through kernels/encode_nfc.cu, Metal through a shader including this header).
// gputok/unicode/normalization.py (unsafe_table, normalize_spans) is the Python statement of the
// same rule: a code point is "unsafe" when the normal form may change it or make a neighbour
// change (non-zero combining class, a decomposition that changes, a second half of a
// composition, Hangul vowels and trailing consonants). Text with no unsafe code point is already
// normalised; around each run of unsafe ones the host normalises a span and splices it back.
//
// THE QUICK CHECK: nfc_unsafe_at.
#pragma once

#include "encode_rules.h"  // types, UTF-8 (enc_decode)

// The unsafe table as a bitmap, bit cp of word cp >> 5 (0x110000 bits, 136 KiB: it stays in
// L2, where the byte-per-code-point table of the host, 1.1 MB, would not).
GPUTOK_FN bool nfc_unsafe_cp(const GPUTOK_DEV unsigned int* bits, unsigned int cp) {
  return cp < 0x110000u && ((bits[cp >> 5] >> (cp & 31u)) & 1u) != 0u;
}

// THE QUICK CHECK: does the character starting at byte i (of valid UTF-8, n bytes) need the
// normaliser? Continuation bytes answer no: a character is flagged at its first byte only.
GPUTOK_FN bool nfc_unsafe_at(const GPUTOK_DEV unsigned char* buf, gputok_i64 n,
                             const GPUTOK_DEV unsigned int* bits, gputok_i64 i) {
  const unsigned int b0 = buf[i];
  if (b0 < 0x80u) return false;  // ASCII is safe in every form: one load per byte of prose
  if ((b0 & 0xC0u) == 0x80u) return false;
  const unsigned int cp = enc_decode(buf, i, n);
  return nfc_unsafe_cp(bits, cp);
}
