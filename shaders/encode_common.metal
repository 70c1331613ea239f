// gpuemu: header
// encode_common.metal: the header of the encode shaders (shaders/encode_*.metal), pasted before
// each kernel by MLX (gputok.metal_iface expands the #include below: the source MLX compiles at
// run time has no include path). Every rule is in kernels/common/encode_rules.h, shared with the
// CUDA kernels; what differs on Metal is only how results are stored, because MLX gives a
// kernel fresh output buffers on every call and never an input to update in place:
//
// * a stage that completes an array another stage began takes the old array as an input
//   (`scratch_in`, `count_in`) and every entry's thread writes its whole output: what it
//   computes, or what it carries over unchanged (enc_carry_ids below);
// * scans, gathers and scatters of whole arrays are MLX operations (mx.cumsum, take, indexed
//   assignment), not shaders;
// * the CUDA dedup (a 64-bit compare-and-swap per piece) has no Metal form: Metal has 32-bit
//   atomics only, and the backend refuses dedup=True (every piece merges where it stands, the
//   default on CUDA too).
//
// * no output starts filled (no `init_value`: MLX would fill every output, workspaces included,
//   before the kernel, ~50 bytes of fill per byte of text over the merge shaders): each shader
//   writes what a later step reads. (count past the chunk's entries is never read: the
//   exclusive scan's sums up to the last entry, all that emit and the offsets take, skip it.)
//
// Every shader is a grid-stride loop (any grid is correct). Scalars are 0-d inputs (MLX passes
// them as `const constant T&`); arrays are padded to at least 8 elements by the backend (MLX
// passes smaller ones in the constant address space, which `device` pointers do not accept).
#include <metal_stdlib>
using namespace metal;

#include "common/encode_rules.h"

// Entry e's ids, unchanged by this launch: count_in[e] of them at its start s pass through.
METAL_FUNC void enc_carry_ids(const device uint* scratch_in, const device uint* count_in,
                              device uint* scratch, device uint* count, long e, uint s) {
  const uint c = count_in[e];
  for (uint k = 0; k < c; ++k) scratch[s + k] = scratch_in[s + k];
  count[e] = c;
}

