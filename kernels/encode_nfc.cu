// encode_nfc.cu: the normaliser's quick check on the device (driven by
// gputok/backends/driver.py through device_stages.py: DeviceStages.nfc_check).
//
// HF's NFC (and NFD / NFKC / NFKD: the same check with the form's table) changes only text
// around "unsafe" code points (common/nfc_check.h). The device flags them; when there are none,
// the chunk is already normalised and never leaves the device. Otherwise the host gets the
// flagged positions, normalises only the spans around them (gputok/backends/hostplan.py,
// splice_normalized) and uploads the rebuilt chunk, so device and host agree on every offset.
//
// Kernels, in launch order:
//   encode_nfc_flags     flag[i] = 1 where an unsafe character starts (flag[n] = 0); the host
//                        sum-scans flag exclusively (encode_scan.cu): flag[n] = the count
//   encode_nfc_compact   pos[scan[i]] = i for every flagged i (only when the count is not 0)
//
// Performance notes: one byte load per ASCII byte and a bitmap probe per other character; the
// scan is the cost of the check (4 bytes per byte). Not tried: a block-level "any" reduction
// that skips the scan for clean chunks (the common case), which would halve the check's traffic.
#include "encode_common.cuh"
#include "common/nfc_check.h"

extern "C" __global__ void encode_nfc_flags(const enc_u8* __restrict__ buf, enc_i64 n,
                                            const enc_u32* __restrict__ bits,
                                            enc_u32* __restrict__ flag) {
  ENC_GRID_STRIDE(i, n + 1) { flag[i] = i < n && nfc_unsafe_at(buf, n, bits, i) ? 1u : 0u; }
}

extern "C" __global__ void encode_nfc_compact(const enc_u32* __restrict__ scan, enc_i64 n,
                                              enc_u32* __restrict__ pos) {
  ENC_GRID_STRIDE(i, n) {
    const enc_u32 e = scan[i];
    if (scan[i + 1] != e) pos[e] = (enc_u32)i;
  }
}
