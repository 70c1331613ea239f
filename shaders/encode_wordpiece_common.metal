// gpuemu: header
// encode_wordpiece_common.metal: the header of encode_wordpiece.metal. THE WORDPIECE MATCH is in
// kernels/common/wordpiece_rules.h, shared with kernels/encode_wordpiece.cu (CUDA and the native
// CPU device); the trie is probed by THE PAIR PROBE of kernels/common/encode_merge_rules.h.
// gputok.metal_iface expands the #include below.
#include <metal_stdlib>
using namespace metal;

#include "common/wordpiece_rules.h"
