// gpuemu: header
// encode_nfc_common.metal: the header of the quick-check shaders (encode_nfc_flags,
// encode_nfc_compact). THE QUICK CHECK (nfc_unsafe_at) is in kernels/common/nfc_check.h, shared
// with kernels/encode_nfc.cu (CUDA and the native CPU device); gputok.metal_iface expands the
// #include below. The same check serves every normal form: the backend passes the form's bitmap.
#include <metal_stdlib>
using namespace metal;

#include "common/nfc_check.h"
