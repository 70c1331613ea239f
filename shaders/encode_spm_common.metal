// gpuemu: header
// encode_spm_common.metal: the header of the SentencePiece shaders (encode_spm_*.metal). THE SPM
// CUT, THE SPM SYMBOLS, THE SPM EXPAND and THE UNK RUN are in kernels/common/spm_rules.h, THE
// CHARSMAP MATCH and THE SPM NORMALISER in kernels/common/spm_norm_rules.h, the
// merge (THE COMPARATOR) in kernels/common/encode_merge_rules.h, both shared with
// kernels/encode_spm.cu (CUDA and the native CPU device). gputok.metal_iface expands the
// #include below.
#include <metal_stdlib>
using namespace metal;

#include "common/spm_norm_rules.h"
#include "common/spm_rules.h"
