// dialect_host.h: the CUDA dialect of kernels/encode_*.cu for a host C++ compiler (the native
// CPU device, gputok/backends/native.py). Prepended to a kernel file's exact source (constants
// injected, headers expanded: gputok/backends/kernels.py build_source), so the CPU runs the same
// kernel text as the GPU; only the launch shape differs, and that difference lives here.
//
// How a launch maps onto CPU threads (host_runtime.h runs it):
//   * a launch of G blocks of B threads is G work items ("blocks"); the runtime's workers take
//     blocks from an atomic counter (dynamic scheduling: a block holding one long piece does not
//     hold up the others) and run each block's B threads as one plain loop;
//   * so ENC_GRID_STRIDE below visits, for block b, the elements b*B .. b*B+B-1, then the same
//     range one grid further on (G*B), ... exactly the elements a CUDA block's threads visit, in
//     ascending order. The kernels are written to give the same result in any thread order
//     (tests/test_cuda_kernels.py runs them forward, reversed and shuffled), so the order in
//     which a CPU visits them cannot change a result;
//   * blockIdx / blockDim / gridDim are per-worker values the runtime sets before each block;
//     threadIdx is not provided: a kernel that needs its own thread index (the block scans of
//     encode_scan.cu, with __shared__ and __syncthreads) has no host form, and the device adapter
//     runs that step on the host instead (NativeDevice.scan). Using either here is a compile
//     error, not a wrong result.
// Only the atomics the encode kernels use are provided (atomicCAS on 64-bit slots: dedup).
//
// Performance notes: the per-block loop keeps the element index in a register and reads the
// launch shape once per grid stride; grids are sized so that a grid covers the range (one stride),
// so each block is one tight loop over consecutive elements (cache-friendly, and the compiler
// can vectorise the simplest kernels). Tried and dropped: a plain std::thread per launch (tens of
// microseconds of thread start-up per launch, ~15 launches per chunk), and interleaved element
// ranges per worker (two cores writing to the same cache lines of uint8/uint32 arrays).
#pragma once

// system headers first: the qualifier macros below must not reach them
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// __restrict__ is a keyword of GCC and Clang in C++ already

struct enc_host_dim3 {
  unsigned x, y, z;
};

// The launch shape of the block a worker is running (set by host_runtime.h before each block).
// __thread, not thread_local: plain TLS with no initialisation wrapper to call.
extern __thread enc_host_dim3 enc_host_block_idx;
extern __thread enc_host_dim3 enc_host_block_dim;
extern __thread enc_host_dim3 enc_host_grid_dim;
#define blockIdx enc_host_block_idx
#define blockDim enc_host_block_dim
#define gridDim enc_host_grid_dim

// A block's threads as one loop: for each grid stride, the block's B consecutive elements.
// `break` in a kernel body leaves the inner loop only; the encode kernels break on "past the
// last entry", which every later element of the outer loop is too (it breaks again at once).
#define ENC_GRID_STRIDE(i, n)                                                                   \
  for (enc_i64 enc_hs_ = (enc_i64)blockIdx.x * blockDim.x, enc_hn_ = (enc_i64)(n),              \
               enc_hstep_ = (enc_i64)gridDim.x * blockDim.x;                                    \
       enc_hs_ < enc_hn_; enc_hs_ += enc_hstep_)                                                \
    for (enc_i64 i = enc_hs_,                                                                   \
                 enc_he_ = (enc_hs_ + (enc_i64)blockDim.x < enc_hn_ ? enc_hs_ + (enc_i64)blockDim.x \
                                                                    : enc_hn_);                 \
         i < enc_he_; ++i)

// Inside ENC_GRID_STRIDE, a kernel that has just written elements i .. next-1 itself (and knows
// their own iterations would do nothing) may skip them: the loop goes on at `next` (at most to
// its block's end; a later block starts at its own first element as before). On a GPU each
// element is its own thread and this is a no-op (encode_common.cuh).
#define ENC_SKIP_TO(i, next) \
  do {                       \
    if ((next) > (i) + 1) (i) = (next) - 1; \
  } while (0)

// THE BYTES HASH and enc_bytes_equal read strings a word at a time (common/encode_rules.h); a
// CPU loads the word whole. Bytes [k, k + 8) of a string of len >= k + 8 are in it; a shorter
// tail of a string of 8 bytes or more is the end of the string's last 8 bytes; a string shorter
// than 8 bytes is read as 8 bytes where those do not cross a 4 KB boundary (no page past the
// string's own can be touched, whatever buffer it is in), byte by byte where they would.
#define ENC_WORD_AT 1
__forceinline__ unsigned long long enc_host_load8(const unsigned char* p) {
  unsigned long long w;
  __builtin_memcpy(&w, p, 8);
  return w;  // (x86-64 and arm64: little-endian)
}

__forceinline__ unsigned long long enc_word_at(const unsigned char* p, unsigned k,
                                               unsigned len) {
  const unsigned r = len - k;
  if (r >= 8) return enc_host_load8(p + k);
  if (len >= 8) return enc_host_load8(p + len - 8) >> (8 * (8 - r));
  if (((unsigned long long)(__UINTPTR_TYPE__)(p + k) & 4095u) <= 4088u)
    return enc_host_load8(p + k) & ((1ull << (8 * r)) - 1);
  unsigned long long w = 0;
  for (unsigned j = 0; j < r; ++j) w |= (unsigned long long)p[k + j] << (8 * j);
  return w;
}

// The merge step's scan for the lowest pair (common/encode_merge_rules.h, enc_merge_step) as
// 64-bit keys in two running minima: an out-of-order core overlaps the two chains.
#define ENC_SCAN_TWO_MINIMA 1

// Memory-level parallelism is the CPU's latency hiding (a GPU switches warps instead): kernels
// mark loads they will need soon (encode_common.cuh, enc_pair_prefetch).
#define ENC_PREFETCH(p) __builtin_prefetch(p)
#ifndef ENC_HOST_NO_AHEAD
#define ENC_HOST_PREFETCH_AHEAD 16  // entries (encode_merge.cu: encode_piece_kind's table lookups)
#endif
#define ENC_HOST_MERGE_LANES 8  // pieces merged in turn (encode_merge.cu: encode_merge_short)

// The merge step's branches (common/encode_merge_rules.h, enc_merge_step), in the forms a CPU
// predicts: the pair probe reads two slots at a time and selects its answer; a short run's
// ids and priorities close the gap a merge leaves with one move of ENC_HOST_SHIFT_BLOCK
// elements each (a merge lane's arrays have the room). encode_merge_short, one thread, the
// pieces of a 4 MB corpus (best of 50 passes, alternated): o200k multilingual 73.6 -> 64.0 ms,
// cl100k multilingual 63.6 -> 53.7, o200k prose 15.0 -> 12.9; the branch mispredictions
// counted by a simulator 5.8 -> 4.2 million (o200k multilingual).
#define ENC_PROBE_TWO_SLOTS 1
#define ENC_HOST_SHIFT_BLOCK 16
// p[0 .. ENC_HOST_SHIFT_BLOCK) = p[1 .. ENC_HOST_SHIFT_BLOCK + 1), all loaded before any store
__forceinline__ void enc_host_shift_block(unsigned* p) {
  unsigned t[ENC_HOST_SHIFT_BLOCK];
  __builtin_memcpy(t, p + 1, sizeof t);
  __builtin_memcpy(p, t, sizeof t);
}

// atomicCAS on 64-bit words (CUDA's unsigned long long overload): sequentially consistent, as
// the dedup insert-or-find needs (a claimed slot's entry index is read only after the CAS).
__forceinline__ unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected,
                                             unsigned long long desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;  // the old value, as CUDA returns it
}

// ---------------------------------------------------------------- the launch table
// Each kernel file's translation unit ends with a table generated by gputok/backends/native.py:
// ENC_HOST_KERNEL(name) per extern "C" __global__ function. An entry holds a trampoline that
// unpacks CUDA-style arguments (args[k] points at argument k's value, as cuLaunchKernel takes
// them) into a call with the kernel's exact parameter types, and the parameter types as a
// string, so Python checks every argument's width and constness before a launch.

struct enc_host_kernel {
  const char* name;
  void (*call)(void**);
  const char* (*signature)();
};

template <class... A, std::size_t... I>
__forceinline__ void enc_host_invoke(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

template <class... A>
constexpr auto enc_host_arity(void (*)(A...)) {
  return std::index_sequence_for<A...>{};
}

template <auto F>
void enc_host_call(void** args) {
  enc_host_invoke(F, args, enc_host_arity(F));
}

// "u4", "i8", "f4" ...: a scalar's kind and width in bytes (numpy's dtype.kind and itemsize)
template <class T>
void enc_host_type_code(std::string& s) {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic_v<U>, "kernel parameters are pointers or arithmetic scalars");
  s += std::is_floating_point_v<U> ? 'f' : (std::is_signed_v<U> ? 'i' : 'u');
  s += std::to_string(sizeof(U));
}

// one parameter: "c" (const pointer) or "m" (mutable pointer) before the pointee's code
template <class T>
void enc_host_param_code(std::string& s) {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  if constexpr (std::is_pointer_v<U>) {
    using P = std::remove_pointer_t<U>;
    s += std::is_const_v<P> ? 'c' : 'm';
    enc_host_type_code<P>(s);
  } else {
    enc_host_type_code<U>(s);
  }
  s += ' ';
}

template <class... A>
std::string enc_host_signature_of(void (*)(A...)) {
  std::string s;
  (enc_host_param_code<A>(s), ...);
  return s;
}

template <auto F>
const char* enc_host_signature() {
  static const std::string s = enc_host_signature_of(F);
  return s.c_str();
}

#define ENC_HOST_KERNEL(f) {#f, &enc_host_call<&f>, &enc_host_signature<&f>}
