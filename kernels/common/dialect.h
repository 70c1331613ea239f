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
//                    add or compare-and-swap, so shared rules never do atomics on buffers (each
//                    dialect does)
//
// A rule that a whole block (threadgroup) runs together (common/encode_merge_huge.h) also needs:
//   GPUTOK_SHM       the address space of a pointer to block-shared memory: nothing in CUDA
//                    (the kernel declares it __shared__), `threadgroup` in Metal
//   GPUTOK_SHARED_U32            a 32-bit word of shared memory that takes atomics
//   GPUTOK_SHARED_LOAD / _STORE / _MIN / _ADD(p, v)   relaxed atomics on one (_ADD returns the old)
//   GPUTOK_BARRIER() every thread of the block waits here; its writes to buffers and to shared
//                    memory before it are seen by the block's threads after it
// (the native CPU device runs no such rule: a host block is one loop, kernels/dialect_host.h)
#pragma once

#if defined(__METAL_VERSION__) || defined(GPUEMU_METAL)
#define GPUTOK_METAL 1
#define GPUTOK_FN METAL_FUNC
#define GPUTOK_DEV device
#define GPUTOK_THREAD thread
#define GPUTOK_U64(x) x##ul
typedef ulong gputok_u64;
typedef long gputok_i64;
#ifdef GPUEMU_METAL
#define GPUTOK_SHM  // (the emulator rewrites `threadgroup` where it reads it, before macros: as
                    // it does for a `threadgroup T*` it sees, the qualifier is dropped)
#else
#define GPUTOK_SHM threadgroup
#endif
#define GPUTOK_SHARED_U32 atomic_uint
#define GPUTOK_SHARED_LOAD(p) atomic_load_explicit((p), memory_order_relaxed)
#define GPUTOK_SHARED_STORE(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define GPUTOK_SHARED_MIN(p, v) atomic_fetch_min_explicit((p), (v), memory_order_relaxed)
#define GPUTOK_SHARED_ADD(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define GPUTOK_BARRIER() threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup)
#else
#define GPUTOK_CUDA 1
#define GPUTOK_FN __device__ __forceinline__
#define GPUTOK_DEV
#define GPUTOK_THREAD
#define GPUTOK_U64(x) x##ull
typedef unsigned long long gputok_u64;
typedef long long gputok_i64;
#define GPUTOK_SHM
#define GPUTOK_SHARED_U32 unsigned int
#define GPUTOK_SHARED_LOAD(p) (*(volatile unsigned int*)(p))
#define GPUTOK_SHARED_STORE(p, v) (*(volatile unsigned int*)(p) = (v))
#define GPUTOK_SHARED_MIN(p, v) atomicMin((p), (v))
#define GPUTOK_SHARED_ADD(p, v) atomicAdd((p), (v))
#define GPUTOK_BARRIER() __syncthreads()
#endif
