// metal_shim.h: lets MLX-style Metal kernel bodies (mx.fast.metal_kernel) compile with g++ (C++17)
// and run on the gpuemu fiber runtime. metal.py writes the kernel function around the body
// the way MLX does (named buffers, <name>_shape/_strides/_ndim, the attributes the body mentions,
// template parameters) and rewrites `threadgroup` declarations (see below).
//
// Covered:
//   address spaces  device thread (erased), constant (volatile); `threadgroup T x[N];` become
//                   per-threadgroup static storage (GPUEMU_SHARED), `threadgroup T*` pointers
//                   lose the qualifier (both done by the runner's rewrite)
//   keywords        kernel, [[kernel]], METAL_FUNC, metal:: / metal::fast:: / metal::precise::
//   types           uint ushort uchar ulong half (= _Float16) float16_t, vectors
//                   {bool,char,uchar,short,ushort,int,uint,half,float}{2,3,4} with .x/.y/.z/.w, [],
//                   element-wise arithmetic; atomic<T>, atomic_int, atomic_uint, atomic_float
//   atomics         atomic_{load,store,exchange}_explicit, atomic_fetch_{add,sub,min,max,and,or,
//                   xor}_explicit, atomic_compare_exchange_weak_explicit on 32-bit types;
//                   atomic_{min,max}_explicit on atomic<ulong>; memory_order_relaxed only
//   strictness      64-bit atomics other than min/max, other memory orders, `double`, and a small
//                   input (`constant`) passed as a device pointer fail to compile, as on a Mac
//   barriers        threadgroup_barrier(mem_flags::...), simdgroup_barrier(...)
//   simdgroup       simd_sum simd_product simd_min simd_max simd_and simd_or simd_xor
//                   simd_prefix_{exclusive,inclusive}_sum simd_shuffle simd_shuffle_{up,down,xor}
//                   simd_broadcast simd_broadcast_first simd_ballot simd_any simd_all
//                   simd_is_first simd_active_threads_mask (simdgroup = 32 threads; a collective
//                   takes every live thread of the simdgroup, as Metal takes the active ones)
//   functions       min max clamp select abs popcount clz ctz as_type ceildiv elem_to_loc, and
//                   the float math of <cmath> (exp, log, sqrt, rsqrt, fma, floor, ...)
#pragma once

#include <cmath>

#include "fiber_runtime.h"

#define GPUEMU 1
#define GPUEMU_METAL 1

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;
typedef _Float16 float16_t;

namespace metal {

// ---------------------------------------------------------------- vectors

template <class T>
struct type_identity {
  using type = T;
};

template <class T, int N>
struct vec;

template <class T>
struct vec<T, 2> {
  T x, y;
  vec() = default;
  constexpr vec(T s) : x(s), y(s) {}
  constexpr vec(T a, T b) : x(a), y(b) {}
  template <class U>
  explicit constexpr vec(const vec<U, 2>& o) : x(T(o.x)), y(T(o.y)) {}
  T& operator[](int i) { return (&x)[i]; }
  const T& operator[](int i) const { return (&x)[i]; }
};
template <class T>
struct vec<T, 3> {
  T x, y, z;
  vec() = default;
  constexpr vec(T s) : x(s), y(s), z(s) {}
  constexpr vec(T a, T b, T c) : x(a), y(b), z(c) {}
  constexpr vec(vec<T, 2> ab, T c) : x(ab.x), y(ab.y), z(c) {}
  template <class U>
  explicit constexpr vec(const vec<U, 3>& o) : x(T(o.x)), y(T(o.y)), z(T(o.z)) {}
  constexpr vec<T, 2> xy() const { return vec<T, 2>(x, y); }
  T& operator[](int i) { return (&x)[i]; }
  const T& operator[](int i) const { return (&x)[i]; }
};
template <class T>
struct vec<T, 4> {
  T x, y, z, w;
  vec() = default;
  constexpr vec(T s) : x(s), y(s), z(s), w(s) {}
  constexpr vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  constexpr vec(vec<T, 3> abc, T d) : x(abc.x), y(abc.y), z(abc.z), w(d) {}
  constexpr vec(vec<T, 2> ab, vec<T, 2> cd) : x(ab.x), y(ab.y), z(cd.x), w(cd.y) {}
  template <class U>
  explicit constexpr vec(const vec<U, 4>& o) : x(T(o.x)), y(T(o.y)), z(T(o.z)), w(T(o.w)) {}
  T& operator[](int i) { return (&x)[i]; }
  const T& operator[](int i) const { return (&x)[i]; }
};

#define GPUEMU_VEC_OP(op)                                                                     \
  template <class T, int N>                                                                   \
  inline vec<T, N> operator op(vec<T, N> a, const vec<T, N>& b) {                             \
    for (int i = 0; i < N; ++i) a[i] = a[i] op b[i];                                          \
    return a;                                                                                 \
  }                                                                                           \
  template <class T, int N>                                                                   \
  inline vec<T, N> operator op(vec<T, N> a, typename type_identity<T>::type b) {              \
    for (int i = 0; i < N; ++i) a[i] = a[i] op b;                                             \
    return a;                                                                                 \
  }                                                                                           \
  template <class T, int N>                                                                   \
  inline vec<T, N> operator op(typename type_identity<T>::type a, vec<T, N> b) {              \
    for (int i = 0; i < N; ++i) b[i] = a op b[i];                                             \
    return b;                                                                                 \
  }                                                                                           \
  template <class T, int N>                                                                   \
  inline vec<T, N>& operator op##=(vec<T, N>& a, const vec<T, N>& b) {                        \
    for (int i = 0; i < N; ++i) a[i] = a[i] op b[i];                                          \
    return a;                                                                                 \
  }                                                                                           \
  template <class T, int N>                                                                   \
  inline vec<T, N>& operator op##=(vec<T, N>& a, typename type_identity<T>::type b) {         \
    for (int i = 0; i < N; ++i) a[i] = a[i] op b;                                             \
    return a;                                                                                 \
  }
GPUEMU_VEC_OP(+)
GPUEMU_VEC_OP(-)
GPUEMU_VEC_OP(*)
GPUEMU_VEC_OP(/)
GPUEMU_VEC_OP(%)
GPUEMU_VEC_OP(&)
GPUEMU_VEC_OP(|)
GPUEMU_VEC_OP(^)
GPUEMU_VEC_OP(<<)
GPUEMU_VEC_OP(>>)
#undef GPUEMU_VEC_OP

template <class T, int N>
inline bool operator==(const vec<T, N>& a, const vec<T, N>& b) {
  for (int i = 0; i < N; ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}
template <class T, int N>
inline bool operator!=(const vec<T, N>& a, const vec<T, N>& b) {
  return !(a == b);
}

// ---------------------------------------------------------------- atomics

// Metal's atomics, strictly: 32-bit int / uint / float (and bool) with every operation;
// atomic<ulong> with atomic_min_explicit / atomic_max_explicit only (which return nothing; Apple9
// GPUs and later); no other 64-bit atomic (no add, no compare-and-swap), and only
// memory_order_relaxed. What Metal rejects fails to compile here too, with a message that says so.
enum memory_order { memory_order_relaxed };
struct metal_supports_only_memory_order_relaxed {};
constexpr metal_supports_only_memory_order_relaxed memory_order_consume{}, memory_order_acquire{},
    memory_order_release{}, memory_order_acq_rel{}, memory_order_seq_cst{};

template <class T>
struct atomic {
  static_assert(sizeof(T) == 4 || std::is_same<T, bool>::value ||
                    std::is_same<T, unsigned long>::value,
                "Metal has atomics of 32-bit types (and bool), and atomic<ulong> for "
                "atomic_min_explicit/atomic_max_explicit only");
  T v_;  // same layout as T: an output buffer of T can be viewed as atomic<T>
};
using atomic_int = atomic<int>;
using atomic_uint = atomic<unsigned>;
using atomic_float = atomic<float>;
using atomic_bool = atomic<bool>;
using atomic_ulong = atomic<unsigned long>;

#define GPUEMU_MTL_NOT64(NAME)                                                                  \
  static_assert(sizeof(T) != 8, "Metal has no 64-bit " #NAME ": the only 64-bit atomics are "  \
                                "atomic_min_explicit/atomic_max_explicit on atomic<ulong>")

template <class T, class F>
inline T atomic_rmw_(volatile atomic<T>* o, F f) {
  gpuemu::atomic_point();
  atomic<T>* p = const_cast<atomic<T>*>(o);
  T old = p->v_;
  p->v_ = f(old);
  return old;
}

#define GPUEMU_MTL_ATOMIC(NAME, EXPR)                                                          \
  template <class T>                                                                           \
  inline T NAME(volatile atomic<T>* o, typename type_identity<T>::type v, memory_order) {     \
    GPUEMU_MTL_NOT64(NAME);                                                                    \
    return atomic_rmw_(o, [&](T old) { return (T)(EXPR); });                                  \
  }
GPUEMU_MTL_ATOMIC(atomic_fetch_add_explicit, old + v)
GPUEMU_MTL_ATOMIC(atomic_fetch_sub_explicit, old - v)
GPUEMU_MTL_ATOMIC(atomic_fetch_min_explicit, v < old ? v : old)
GPUEMU_MTL_ATOMIC(atomic_fetch_max_explicit, old < v ? v : old)
GPUEMU_MTL_ATOMIC(atomic_fetch_and_explicit, old & v)
GPUEMU_MTL_ATOMIC(atomic_fetch_or_explicit, old | v)
GPUEMU_MTL_ATOMIC(atomic_fetch_xor_explicit, old ^ v)
GPUEMU_MTL_ATOMIC(atomic_exchange_explicit, v)
#undef GPUEMU_MTL_ATOMIC

// the 64-bit min/max (atomic<ulong> only); they return nothing
inline void atomic_min_explicit(volatile atomic<unsigned long>* o, unsigned long v, memory_order) {
  atomic_rmw_(o, [&](unsigned long old) { return v < old ? v : old; });
}
inline void atomic_max_explicit(volatile atomic<unsigned long>* o, unsigned long v, memory_order) {
  atomic_rmw_(o, [&](unsigned long old) { return old < v ? v : old; });
}

template <class T>
inline T atomic_load_explicit(const volatile atomic<T>* o, memory_order) {
  GPUEMU_MTL_NOT64(atomic_load_explicit);
  gpuemu::atomic_point();
  return const_cast<const atomic<T>*>(o)->v_;
}
template <class T>
inline void atomic_store_explicit(volatile atomic<T>* o, typename type_identity<T>::type v,
                                  memory_order) {
  GPUEMU_MTL_NOT64(atomic_store_explicit);
  gpuemu::atomic_point();
  const_cast<atomic<T>*>(o)->v_ = v;
}
// (Metal has only the weak form, which may fail spuriously; here it never does.)
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* o, T* expected,
                                                  typename type_identity<T>::type desired,
                                                  memory_order, memory_order) {
  GPUEMU_MTL_NOT64(atomic_compare_exchange_weak_explicit);
  gpuemu::atomic_point();
  atomic<T>* p = const_cast<atomic<T>*>(o);
  if (p->v_ == *expected) {
    p->v_ = desired;
    return true;
  }
  *expected = p->v_;
  return false;
}
#undef GPUEMU_MTL_NOT64

// ---------------------------------------------------------------- barriers

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2,
                                  mem_texture = 4, mem_threadgroup_imageblock = 8 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return mem_flags((unsigned)a | (unsigned)b);
}

inline void threadgroup_barrier(mem_flags = mem_flags::mem_none,
                                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gpuemu::block_barrier(gpuemu::B_SYNC, 0, file, line);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gpuemu::warp_collective<int, gpuemu::W_SYNC>(0, 0, true, 0, 32, file, line);
}

// ---------------------------------------------------------------- simdgroup functions

struct simd_vote {
  using vote_t = uint64_t;
  vote_t v;
  vote_t active;
  explicit constexpr operator vote_t() const { return v; }
  constexpr bool all() const { return v == active; }
  constexpr bool any() const { return v != 0; }
};

#define GPUEMU_SIMD_VALUE(NAME, OP)                                                           \
  template <class T>                                                                          \
  inline T NAME(T v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {      \
    return gpuemu::warp_value<T, OP>(v, 0, true, 0, 32, file, line);                         \
  }
GPUEMU_SIMD_VALUE(simd_sum, gpuemu::W_RED_ADD)
GPUEMU_SIMD_VALUE(simd_product, gpuemu::W_RED_MUL)
GPUEMU_SIMD_VALUE(simd_min, gpuemu::W_RED_MIN)
GPUEMU_SIMD_VALUE(simd_max, gpuemu::W_RED_MAX)
GPUEMU_SIMD_VALUE(simd_and, gpuemu::W_RED_AND)
GPUEMU_SIMD_VALUE(simd_or, gpuemu::W_RED_OR)
GPUEMU_SIMD_VALUE(simd_xor, gpuemu::W_RED_XOR)
GPUEMU_SIMD_VALUE(simd_prefix_exclusive_sum, gpuemu::W_SCAN_EXCL)
GPUEMU_SIMD_VALUE(simd_prefix_inclusive_sum, gpuemu::W_SCAN_INCL)
GPUEMU_SIMD_VALUE(simd_broadcast_first, gpuemu::W_BCAST_FIRST)
#undef GPUEMU_SIMD_VALUE

#define GPUEMU_SIMD_LANE(NAME, OP)                                                            \
  template <class T>                                                                          \
  inline T NAME(T v, ushort arg, const char* file = __builtin_FILE(),                         \
                int line = __builtin_LINE()) {                                                \
    return gpuemu::warp_value<T, OP>(v, 0, true, (int)arg, 32, file, line);                  \
  }
GPUEMU_SIMD_LANE(simd_shuffle, gpuemu::W_SHFL)
GPUEMU_SIMD_LANE(simd_broadcast, gpuemu::W_SHFL)
GPUEMU_SIMD_LANE(simd_shuffle_up, gpuemu::W_SHFL_UP)
GPUEMU_SIMD_LANE(simd_shuffle_down, gpuemu::W_SHFL_DOWN)
GPUEMU_SIMD_LANE(simd_shuffle_xor, gpuemu::W_SHFL_XOR)
#undef GPUEMU_SIMD_LANE

inline simd_vote simd_ballot(bool pred, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  uint64_t bits = gpuemu::warp_bits<int, gpuemu::W_BALLOT>(pred ? 1 : 0, 0, true, file, line);
  return simd_vote{bits, gpuemu::live_lanes()};
}
inline bool simd_any(bool pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_bits<int, gpuemu::W_ANY>(pred ? 1 : 0, 0, true, file, line) != 0;
}
inline bool simd_all(bool pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpuemu::warp_bits<int, gpuemu::W_ALL>(pred ? 1 : 0, 0, true, file, line) != 0;
}
inline simd_vote simd_active_threads_mask() {
  uint64_t m = gpuemu::live_lanes();
  return simd_vote{m, m};
}
inline bool simd_is_first() {
  uint32_t m = gpuemu::live_lanes();
  return m && (unsigned)__builtin_ctz(m) == (gpuemu::g_launch.cur->linear & 31u);
}

// ---------------------------------------------------------------- functions

template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }
template <class T>
inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T>
inline T select(T a, T b, bool c) { return c ? b : a; }
template <class To, class From>
inline To as_type(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type between types of different sizes");
  To t;
  memcpy(&t, &f, sizeof t);
  return t;
}
template <class T>
inline T popcount(T x) {
  return (T)__builtin_popcountll((unsigned long long)(std::make_unsigned_t<T>)x);
}
template <class T>
inline T clz(T x) {
  using U = std::make_unsigned_t<T>;
  constexpr int bits = 8 * sizeof(T);
  return x == 0 ? (T)bits : (T)(__builtin_clzll((unsigned long long)(U)x) - (64 - bits));
}
template <class T>
inline T ctz(T x) {
  constexpr int bits = 8 * sizeof(T);
  return x == 0 ? (T)bits : (T)__builtin_ctzll((unsigned long long)x);
}
template <class T>
inline T abs(T x) { return x < T(0) ? T(-x) : x; }
template <class T>
inline T rsqrt(T x) { return T(1) / T(std::sqrt(x)); }
template <class T>
inline T fract(T x) { return x - T(std::floor(x)); }
template <class T>
inline T saturate(T x) { return clamp(x, T(0), T(1)); }
template <class T>
inline T mix(T a, T b, T t) { return a + (b - a) * t; }
template <class T>
inline T sign(T x) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }

#define GPUEMU_MTL_MATH1(NAME)                                       \
  inline float NAME(float x) { return std::NAME(x); }                \
  inline half NAME(half x) { return (half)std::NAME((float)x); }
#define GPUEMU_MTL_MATH2(NAME)                                                     \
  inline float NAME(float x, float y) { return std::NAME(x, y); }                  \
  inline half NAME(half x, half y) { return (half)std::NAME((float)x, (float)y); }
GPUEMU_MTL_MATH1(exp)
GPUEMU_MTL_MATH1(exp2)
GPUEMU_MTL_MATH1(log)
GPUEMU_MTL_MATH1(log2)
GPUEMU_MTL_MATH1(log10)
GPUEMU_MTL_MATH1(sqrt)
GPUEMU_MTL_MATH1(floor)
GPUEMU_MTL_MATH1(ceil)
GPUEMU_MTL_MATH1(round)
GPUEMU_MTL_MATH1(trunc)
GPUEMU_MTL_MATH1(rint)
GPUEMU_MTL_MATH1(sin)
GPUEMU_MTL_MATH1(cos)
GPUEMU_MTL_MATH1(tan)
GPUEMU_MTL_MATH1(tanh)
GPUEMU_MTL_MATH1(erf)
GPUEMU_MTL_MATH2(pow)
GPUEMU_MTL_MATH2(fmod)
GPUEMU_MTL_MATH2(fmin)
GPUEMU_MTL_MATH2(fmax)
#undef GPUEMU_MTL_MATH1
#undef GPUEMU_MTL_MATH2
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float precise_divide(float a, float b) { return a / b; }
inline bool isnan(float x) { return std::isnan(x); }
inline bool isinf(float x) { return std::isinf(x); }
inline bool isfinite(float x) { return std::isfinite(x); }

namespace fast {
using namespace ::metal;
}
namespace precise {
using namespace ::metal;
}

}  // namespace metal

using namespace metal;

#define kernel
#define device
// The constant address space: a `const constant T*` (MLX's type for inputs under 8 elements) does
// not convert to a `const device T*` on a Mac; as `const volatile T*` it does not convert to a
// plain `const T*` here either, so a small input passed to a device-pointer helper fails on both.
#define constant volatile
#define thread
#define METAL_FUNC inline __attribute__((always_inline))

#define GPUEMU_VEC_TYPES(T, P) \
  typedef metal::vec<T, 2> P##2; \
  typedef metal::vec<T, 3> P##3; \
  typedef metal::vec<T, 4> P##4;
GPUEMU_VEC_TYPES(bool, bool)
GPUEMU_VEC_TYPES(signed char, char)
GPUEMU_VEC_TYPES(unsigned char, uchar)
GPUEMU_VEC_TYPES(short, short)
GPUEMU_VEC_TYPES(unsigned short, ushort)
GPUEMU_VEC_TYPES(int, int)
GPUEMU_VEC_TYPES(unsigned int, uint)
GPUEMU_VEC_TYPES(long, long)
GPUEMU_VEC_TYPES(unsigned long, ulong)
GPUEMU_VEC_TYPES(_Float16, half)
GPUEMU_VEC_TYPES(float, float)
#undef GPUEMU_VEC_TYPES

// MLX utilities available to kernel bodies (mlx/backend/metal/kernels/utils.h provides these)
template <typename IdxT = int64_t>
inline IdxT elem_to_loc(IdxT elem, constant const int* shape, constant const int64_t* strides,
                        int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}
template <class T, class U>
inline constexpr auto ceildiv(T n, U d) -> decltype((n + d - 1) / d) {
  return (n + d - 1) / d;
}

namespace gpuemu {

// The values of the thread attributes MLX passes to a kernel, for the running fiber.
struct MetalAttrs {
  uint dispatch_quadgroups_per_threadgroup;
  uint dispatch_simdgroups_per_threadgroup;
  uint3 dispatch_threads_per_threadgroup;
  uint3 grid_origin;
  uint3 grid_size;
  uint quadgroup_index_in_threadgroup;
  uint quadgroups_per_threadgroup;
  uint simdgroup_index_in_threadgroup;
  uint simdgroups_per_threadgroup;
  uint thread_execution_width;
  uint thread_index_in_quadgroup;
  uint thread_index_in_simdgroup;
  uint thread_index_in_threadgroup;
  uint3 thread_position_in_grid;
  uint3 thread_position_in_threadgroup;
  uint3 threadgroup_position_in_grid;
  uint3 threadgroups_per_grid;
  uint3 threads_per_grid;
  uint threads_per_simdgroup;
  uint3 threads_per_threadgroup;
};

inline MetalAttrs metal_attrs() {
  const Launch& L = g_launch;
  const Dim t = g_tid, b = L.bid, nb = L.block, nom = L.nominal, g = L.grid_threads;
  const uint lin = t.x + t.y * nb.x + t.z * nb.x * nb.y;
  const uint n = nb.x * nb.y * nb.z, nn = nom.x * nom.y * nom.z;
  MetalAttrs a;
  a.dispatch_quadgroups_per_threadgroup = (nn + 3) / 4;
  a.dispatch_simdgroups_per_threadgroup = (nn + 31) / 32;
  a.dispatch_threads_per_threadgroup = uint3(nom.x, nom.y, nom.z);
  a.grid_origin = uint3(0u, 0u, 0u);
  a.grid_size = uint3(g.x, g.y, g.z);
  a.quadgroup_index_in_threadgroup = lin / 4;
  a.quadgroups_per_threadgroup = (n + 3) / 4;
  a.simdgroup_index_in_threadgroup = lin / 32;
  a.simdgroups_per_threadgroup = (n + 31) / 32;
  a.thread_execution_width = 32;
  a.thread_index_in_quadgroup = lin % 4;
  a.thread_index_in_simdgroup = lin % 32;
  a.thread_index_in_threadgroup = lin;
  a.thread_position_in_grid = uint3(b.x * nom.x + t.x, b.y * nom.y + t.y, b.z * nom.z + t.z);
  a.thread_position_in_threadgroup = uint3(t.x, t.y, t.z);
  a.threadgroup_position_in_grid = uint3(b.x, b.y, b.z);
  a.threadgroups_per_grid = uint3(L.grid.x, L.grid.y, L.grid.z);
  a.threads_per_grid = uint3(g.x, g.y, g.z);
  a.threads_per_simdgroup = 32;
  a.threads_per_threadgroup = uint3(nb.x, nb.y, nb.z);
  return a;
}

// grid: threads per grid (as MLX's grid=), threadgroup: threads per threadgroup, clipped to the
// grid like MLX does (dispatchThreads with non-uniform edge threadgroups).
inline int metal_launch(const unsigned* grid, const unsigned* tg, const long long* opts,
                        void (*call)(void*), void* closure) {
  Dim g{grid[0], grid[1], grid[2]};
  Dim t{tg[0] < grid[0] ? tg[0] : grid[0], tg[1] < grid[1] ? tg[1] : grid[1],
        tg[2] < grid[2] ? tg[2] : grid[2]};
  if (!g.x || !g.y || !g.z) return 0;
  if (!t.x || !t.y || !t.z) {
    snprintf(g_launch.err, sizeof g_launch.err, "threadgroup size must be positive");
    return 1;
  }
  Dim nb{(g.x + t.x - 1) / t.x, (g.y + t.y - 1) / t.y, (g.z + t.z - 1) / t.z};
  return run_launch(nb, t, g, true, opts, call, closure);
}

}  // namespace gpuemu

// Static threadgroup memory of this kernel: metal.py's rewrite follows every `threadgroup`
// declaration with GPUEMU_TG_SIZE(sizeof(var), ...), which records the exact sizes in their own
// section; the runner rejects a total over Metal's 32 KiB. (The gpuemu_shared section's size
// would include the host compiler's alignment padding.)
#define GPUEMU_TG_CAT2(a, b) a##b
#define GPUEMU_TG_CAT(a, b) GPUEMU_TG_CAT2(a, b)
#define GPUEMU_TG_SIZE(...)                                                               \
  static unsigned long long __attribute__((section("gpuemu_tgsize"), used))               \
  GPUEMU_TG_CAT(gpuemu_tg_size_, __COUNTER__)[] = {__VA_ARGS__};
extern "C" {
extern unsigned long long __start_gpuemu_tgsize[] __attribute__((weak));
extern unsigned long long __stop_gpuemu_tgsize[] __attribute__((weak));
}
GPUEMU_EXPORT unsigned long long gpuemu_metal_threadgroup_bytes() {
  unsigned long long total = 0;
  if (__start_gpuemu_tgsize && __stop_gpuemu_tgsize)
    for (const unsigned long long* p = __start_gpuemu_tgsize; p < __stop_gpuemu_tgsize; ++p)
      total += *p;
  return total;
}

// Metal has no double: using it in a kernel or header fails to compile here as on a Mac.
#define double metal_has_no_double_type
