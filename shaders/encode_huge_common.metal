// gpuemu: header
// encode_huge_common.metal: the header of encode_merge_huge.metal: the encode shaders' header
// and the block-wide merge of one piece (kernels/common/encode_merge_huge.h, shared with
// kernels/encode_merge_huge.cu). gputok.metal_iface expands the #includes below.
#include "encode_common.metal"
#include "common/encode_merge_huge.h"
