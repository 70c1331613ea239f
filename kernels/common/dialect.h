// dialect.h: the few words in which CUDA and Metal differ, so a rule shared by both dialects
// (train_rules.h, ...) is written once. Included by kernels/*.cu (nvcc, NVRTC, the emulator's
// cuda_shim.h) and, pasted into the header MLX compiles, by shaders/*.metal (the Metal compiler
// or the emulator's metal_shim.h).
//
//   GPUTOK_FN        a device helper function (inlined)
//   GPUTOK_DEV       the address space of buffer memory: nothing in CUDA, `device` in Metal, where
//                    a pointer parameter must name its address space
//   GPUTOK_THREAD    the address space of a pointer or reference to a local variable: nothing in
//                    CUDA, `thread` in Metal
//   GPUTOK_U64(x)    a 64-bit unsigned literal (`ull` in CUDA; Metal has no `long long`: `ul`)
//   gputok_u64/_i64  64-bit integers: plain arithmetic is fine in both; Metal has no 64-bit atomic
//                    add or compare-and-swap, so shared rules never do atomics (each dialect does)
#pragma once

#if defined(__METAL_VERSION__) || defined(GPUEMU_METAL)
#define GPUTOK_METAL 1
#define GPUTOK_FN METAL_FUNC
#define GPUTOK_DEV device
#define GPUTOK_THREAD thread
#define GPUTOK_U64(x) x##ul
typedef ulong gputok_u64;
typedef long gputok_i64;
#else
#define GPUTOK_CUDA 1
#define GPUTOK_FN __device__ __forceinline__
#define GPUTOK_DEV
#define GPUTOK_THREAD
#define GPUTOK_U64(x) x##ull
typedef unsigned long long gputok_u64;
typedef long long gputok_i64;
#endif
