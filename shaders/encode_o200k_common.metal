// gpuemu: header
// encode_o200k_common.metal: the header of the o200k pre-tokenization shaders
// (encode_o200k_classify, encode_o200k_spans). THE O200K SPAN RULE and THE O200K MATCHER are in
// kernels/common/o200k_rules.h, shared with kernels/encode_o200k.cu (CUDA and the native CPU
// device); gputok.metal_iface expands the #include below, since the source MLX compiles at run
// time has no include path. Nothing here differs from CUDA: every byte's flag is written by
// exactly one thread (enc_spans_at: THE SPAN WALK), so the fresh output MLX gives needs no
// carried input.
#include <metal_stdlib>
using namespace metal;

#include "common/o200k_rules.h"
