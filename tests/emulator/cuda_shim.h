// cuda_shim.h: lets a CUDA .cu file compile with g++ (C++17) and run on the gpuemu fiber runtime.
//
// Used as `g++ -std=c++17 -include cuda_shim.h ...`; see runner.py. Covered:
//   qualifiers   __global__ __device__ __host__ __forceinline__ __noinline__ __constant__
//                __managed__ __launch_bounds__(...) __align__(n) __restrict__ (native in g++)
//   __shared__   static storage in the "gpuemu_shared" section: shared by the fibers of a block
//                (blocks run one after another, so one copy suffices), poisoned between blocks.
//                `extern __shared__ T name[];` (dynamic shared memory) is rewritten by the runner
//                into a pointer to the dynamic shared buffer.
//   built-ins    threadIdx blockIdx blockDim gridDim warpSize, uint3/dim3 and the usual vector
//                types with make_* helpers
//   sync         __syncthreads() (and _count/_and/_or), __syncwarp(mask), __threadfence*(),
//                __nanosleep()
//   warp         __shfl_sync __shfl_up_sync __shfl_down_sync __shfl_xor_sync __ballot_sync
//                __any_sync __all_sync __activemask __match_any_sync __match_all_sync
//                __reduce_{add,min,max,and,or,xor}_sync (warp = 32 consecutive threads of the
//                block in x-major order; collectives are rendezvous of the lanes in the mask)
//   atomics      atomicAdd/Sub/Min/Max/CAS/Exch/Or/And/Xor/Inc/Dec for int, unsigned,
//                unsigned long long (+ long long min/max, float/double add, float exch), also the
//                _block/_system variants
//   bits/math    __popc __popcll __clz __clzll __ffs __ffsll __brev __brevll __byte_perm
//                __funnelshift_* __umulhi __mulhi __umul64hi __mul64hi, min/max overloads,
//                __ldg and cache-hinted loads/stores, float/int bit casts, a few fast-math
//                intrinsics; <cmath> for the rest
//   debugging    printf (host printf), assert (reported as a kernel error), __trap()
// Defines __CUDA_ARCH__ (900 unless given) and GPUEMU.
#pragma once

#include "fiber_runtime.h"

// assert() in device code: report through the launch instead of aborting the process. Renaming
// glibc's failure hook catches every later #include <cassert> too.
#define __assert_fail gpuemu_assert_fail
#include <cassert>
extern "C" [[noreturn]] inline void gpuemu_assert_fail(const char* expr, const char* file,
                                                      unsigned line, const char* func) noexcept {
  gpuemu::fail("assertion `%s` failed at %s:%u (%s)", expr, file, line, func);
}

#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif
#define GPUEMU 1

#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ GPUEMU_SHARED
#define __grid_constant__

// ---------------------------------------------------------------- vector types

using uint3 = gpuemu::Dim;

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(const uint3& v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define GPUEMU_VEC1(N, T, A) \
  struct alignas(A) N { T x; }; \
  inline N make_##N(T x) { return N{x}; }
#define GPUEMU_VEC2(N, T, A) \
  struct alignas(A) N { T x, y; }; \
  inline N make_##N(T x, T y) { return N{x, y}; }
#define GPUEMU_VEC3(N, T) \
  struct N { T x, y, z; }; \
  inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define GPUEMU_VEC4(N, T, A) \
  struct alignas(A) N { T x, y, z, w; }; \
  inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }

GPUEMU_VEC1(char1, signed char, 1)
GPUEMU_VEC1(uchar1, unsigned char, 1)
GPUEMU_VEC1(int1, int, 4)
GPUEMU_VEC1(uint1, unsigned, 4)
GPUEMU_VEC1(float1, float, 4)
GPUEMU_VEC2(char2, signed char, 2)
GPUEMU_VEC2(uchar2, unsigned char, 2)
GPUEMU_VEC2(short2, short, 4)
GPUEMU_VEC2(ushort2, unsigned short, 4)
GPUEMU_VEC2(int2, int, 8)
GPUEMU_VEC2(uint2, unsigned, 8)
GPUEMU_VEC2(float2, float, 8)
GPUEMU_VEC2(longlong2, long long, 16)
GPUEMU_VEC2(ulonglong2, unsigned long long, 16)
GPUEMU_VEC2(double2, double, 16)
GPUEMU_VEC3(char3, signed char)
GPUEMU_VEC3(uchar3, unsigned char)
GPUEMU_VEC3(int3, int)
GPUEMU_VEC3(float3, float)
GPUEMU_VEC4(char4, signed char, 4)
GPUEMU_VEC4(uchar4, unsigned char, 4)
GPUEMU_VEC4(short4, short, 8)
GPUEMU_VEC4(ushort4, unsigned short, 8)
GPUEMU_VEC4(int4, int, 16)
GPUEMU_VEC4(uint4, unsigned, 16)
GPUEMU_VEC4(float4, float, 16)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

#define threadIdx (static_cast<const uint3&>(::gpuemu::g_tid))
#define blockIdx (static_cast<const uint3&>(::gpuemu::g_bid))
#define blockDim (static_cast<const uint3&>(::gpuemu::g_bdim))
#define gridDim (static_cast<const uint3&>(::gpuemu::g_gdim))
constexpr int warpSize = 32;

// ---------------------------------------------------------------- synchronisation

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gpuemu::block_barrier(gpuemu::B_SYNC, 0, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  return gpuemu::block_barrier(gpuemu::B_COUNT, pred != 0, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  return gpuemu::block_barrier(gpuemu::B_AND, pred != 0, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  return gpuemu::block_barrier(gpuemu::B_OR, pred != 0, file, line);
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  gpuemu::warp_collective<int, gpuemu::W_SYNC>(0, mask, false, 0, 32, file, line);
}
inline void __threadfence() { gpuemu::atomic_point(); }
inline void __threadfence_block() { gpuemu::atomic_point(); }
inline void __threadfence_system() { gpuemu::atomic_point(); }
inline void __nanosleep(unsigned) { gpuemu::atomic_point(); }
[[noreturn]] inline void __trap() { gpuemu::fail("__trap() called"); }
[[noreturn]] inline void __brkpt() { gpuemu::fail("__brkpt() called"); }
inline long long clock64() { return (long long)++gpuemu::g_clock; }
inline unsigned long long __globaltimer() { return ++gpuemu::g_clock; }

// ---------------------------------------------------------------- warp intrinsics

inline unsigned __activemask() { return gpuemu::live_lanes(); }

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src, int width = 32,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_value<T, gpuemu::W_SHFL>(var, mask, false, src, width, file, line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_value<T, gpuemu::W_SHFL_UP>(var, mask, false, (int)delta, width, file, line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_value<T, gpuemu::W_SHFL_DOWN>(var, mask, false, (int)delta, width, file,
                                                    line);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_value<T, gpuemu::W_SHFL_XOR>(var, mask, false, lane_mask, width, file,
                                                   line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return (unsigned)gpuemu::warp_bits<int, gpuemu::W_BALLOT>(pred != 0, mask, false, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return (int)gpuemu::warp_bits<int, gpuemu::W_ANY>(pred != 0, mask, false, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return (int)gpuemu::warp_bits<int, gpuemu::W_ALL>(pred != 0, mask, false, file, line);
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
  return (unsigned)gpuemu::warp_bits<T, gpuemu::W_MATCH_ANY>(value, mask, false, file, line);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  uint64_t r = gpuemu::warp_bits<T, gpuemu::W_MATCH_ALL>(value, mask, false, file, line);
  *pred = (r >> 32) & 1;
  return (unsigned)r;
}
#define GPUEMU_REDUCE(NAME, OP)                                                               \
  inline unsigned NAME(unsigned mask, unsigned v, const char* file = __builtin_FILE(),        \
                       int line = __builtin_LINE()) {                                         \
    return gpuemu::warp_value<unsigned, OP>(v, mask, false, 0, 32, file, line);              \
  }                                                                                           \
  inline int NAME(unsigned mask, int v, const char* file = __builtin_FILE(),                  \
                  int line = __builtin_LINE()) {                                              \
    return gpuemu::warp_value<int, OP>(v, mask, false, 0, 32, file, line);                   \
  }
GPUEMU_REDUCE(__reduce_add_sync, gpuemu::W_RED_ADD)
GPUEMU_REDUCE(__reduce_min_sync, gpuemu::W_RED_MIN)
GPUEMU_REDUCE(__reduce_max_sync, gpuemu::W_RED_MAX)
GPUEMU_REDUCE(__reduce_and_sync, gpuemu::W_RED_AND)
GPUEMU_REDUCE(__reduce_or_sync, gpuemu::W_RED_OR)
GPUEMU_REDUCE(__reduce_xor_sync, gpuemu::W_RED_XOR)
#undef GPUEMU_REDUCE

// ---------------------------------------------------------------- atomics
// Fibers never run concurrently, so an atomic is a plain read-modify-write; in yield-on-atomic
// mode the fiber first lets the others run, which changes the interleaving between atomics.

namespace gpuemu {
template <class T, class F>
inline T atomic_rmw(T* p, F f) {
  atomic_point();
  T old = *p;
  *p = f(old);
  return old;
}
}  // namespace gpuemu

#define GPUEMU_ATOMIC(NAME, T, EXPR)                                            \
  inline T NAME(T* p, T v) { return gpuemu::atomic_rmw(p, [&](T o) { return (T)(EXPR); }); } \
  inline T NAME##_block(T* p, T v) { return NAME(p, v); }                        \
  inline T NAME##_system(T* p, T v) { return NAME(p, v); }
#define GPUEMU_ATOMIC_INTS(NAME, EXPR)                 \
  GPUEMU_ATOMIC(NAME, int, EXPR)                       \
  GPUEMU_ATOMIC(NAME, unsigned, EXPR)                  \
  GPUEMU_ATOMIC(NAME, unsigned long long, EXPR)

GPUEMU_ATOMIC_INTS(atomicAdd, o + v)
GPUEMU_ATOMIC(atomicAdd, float, o + v)
GPUEMU_ATOMIC(atomicAdd, double, o + v)
GPUEMU_ATOMIC(atomicSub, int, o - v)
GPUEMU_ATOMIC(atomicSub, unsigned, o - v)
GPUEMU_ATOMIC_INTS(atomicMin, v < o ? v : o)
GPUEMU_ATOMIC(atomicMin, long long, v < o ? v : o)
GPUEMU_ATOMIC_INTS(atomicMax, v > o ? v : o)
GPUEMU_ATOMIC(atomicMax, long long, v > o ? v : o)
GPUEMU_ATOMIC_INTS(atomicExch, v)
GPUEMU_ATOMIC(atomicExch, float, v)
GPUEMU_ATOMIC_INTS(atomicOr, o | v)
GPUEMU_ATOMIC_INTS(atomicAnd, o & v)
GPUEMU_ATOMIC_INTS(atomicXor, o ^ v)
GPUEMU_ATOMIC(atomicInc, unsigned, o >= v ? 0u : o + 1u)
GPUEMU_ATOMIC(atomicDec, unsigned, (o == 0u || o > v) ? v : o - 1u)
#undef GPUEMU_ATOMIC_INTS
#undef GPUEMU_ATOMIC

#define GPUEMU_CAS(T)                                                           \
  inline T atomicCAS(T* p, T cmp, T v) {                                        \
    return gpuemu::atomic_rmw(p, [&](T o) { return o == cmp ? v : o; });       \
  }                                                                             \
  inline T atomicCAS_block(T* p, T cmp, T v) { return atomicCAS(p, cmp, v); }   \
  inline T atomicCAS_system(T* p, T cmp, T v) { return atomicCAS(p, cmp, v); }
GPUEMU_CAS(int)
GPUEMU_CAS(unsigned)
GPUEMU_CAS(unsigned long long)
GPUEMU_CAS(unsigned short)
#undef GPUEMU_CAS

// ---------------------------------------------------------------- integer intrinsics

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    unsigned sel = (s >> (4 * i)) & 7u;
    r |= (unsigned)((v >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)((v << (sh & 31u)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)((v << (sh > 32u ? 32u : sh)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(v >> (sh & 31u));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(v >> (sh > 32u ? 32u : sh));
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) {
  return (long long)(((__int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }

// min/max: like CUDA's overloads, usual arithmetic conversions for mixed arguments
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return (C)a < (C)b ? (C)b : (C)a;
}
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a < b ? b : a; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a < b ? b : a; }

// ---------------------------------------------------------------- loads, stores, casts, math

template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

namespace gpuemu {
template <class To, class From>
inline To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To t;
  memcpy(&t, &f, sizeof t);
  return t;
}
}  // namespace gpuemu
inline int __float_as_int(float f) { return gpuemu::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return gpuemu::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return gpuemu::bit_cast<float>(i); }
inline float __uint_as_float(unsigned i) { return gpuemu::bit_cast<float>(i); }
inline long long __double_as_longlong(double d) { return gpuemu::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return gpuemu::bit_cast<double>(i); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }

// ---------------------------------------------------------------- launching

namespace gpuemu {
template <class... Ts>
inline int cuda_launch(void (*fn)(Ts...), void** args, const unsigned* grid, const unsigned* block,
                       const long long* opts) {
  KernelCall<Ts...> call{fn, args};
  return run_launch(Dim{grid[0], grid[1], grid[2]}, Dim{block[0], block[1], block[2]},
                    Dim{0, 0, 0}, false, opts, &KernelCall<Ts...>::run, &call);
}
}  // namespace gpuemu

GPUEMU_EXPORT unsigned long long gpuemu_dyn_shared_base() {
  return (unsigned long long)(uintptr_t)gpuemu::g_dyn_shared;
}
