// gpuemu fiber runtime: runs a GPU kernel launch on the CPU, one fiber per GPU thread.
//
// Shared by cuda_shim.h and metal_shim.h. Each emulated module is a single translation unit
// (the kernel source plus generated launchers) built into its own shared library, so this header
// holds definitions, not just declarations.
//
// Model:
//   * blocks (threadgroups) run one after another on the calling OS thread, in forward, reverse
//     or seeded-shuffled order;
//   * inside a block every thread is a ucontext fiber with its own stack (stacks are mmap'ed once,
//     guarded by a PROT_NONE page, and reused across blocks and launches);
//   * fibers are scheduled round-robin in forward, reverse or shuffled (reshuffled every round)
//     order; a fiber runs until it reaches a block barrier, a warp/simdgroup collective, an atomic
//     (only in yield-on-atomic mode), or returns;
//   * a block barrier is released when every live fiber of the block waits at it; waiting at
//     different barriers (divergence), or at a barrier after some threads of the block returned,
//     is reported as an error (CUDA and Metal leave both undefined), as is any state in which no
//     fiber can make progress (deadlock);
//   * warp collectives are rendezvous: the last participant to arrive computes every
//     participant's result;
//   * SIGSEGV/SIGBUS/SIGFPE/SIGILL raised by a fiber (out-of-bounds access, fiber stack overflow,
//     integer division by zero) abort the launch with an error instead of killing the process.
//
// Shared memory (`__shared__`, Metal `threadgroup` variables) is plain static storage placed in the
// "gpuemu_shared" section. That is correct because blocks run strictly one after another: all the
// fibers of the running block see the same storage, and the next block reuses it. Between blocks the
// section (and the dynamic shared buffer) is filled with a poison byte, so a kernel that reads shared
// memory it never wrote gets garbage here too.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define GPUEMU_EXPORT extern "C" __attribute__((visibility("default"))) __attribute__((used))
#define GPUEMU_SHARED static __attribute__((section("gpuemu_shared")))

extern "C" {
extern char __start_gpuemu_shared[] __attribute__((weak));
extern char __stop_gpuemu_shared[] __attribute__((weak));
}

namespace gpuemu {

struct Dim {
  unsigned x, y, z;
};

enum : int { ST_READY = 0, ST_BARRIER = 1, ST_WARP = 2, ST_EXITED = 3 };

enum : int {
  W_SYNC, W_SHFL, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_ANY, W_ALL,
  W_RED_ADD, W_RED_MIN, W_RED_MAX, W_RED_AND, W_RED_OR, W_RED_XOR, W_RED_MUL,
  W_SCAN_EXCL, W_SCAN_INCL, W_BCAST_FIRST, W_MATCH_ANY, W_MATCH_ALL, W_OP_COUNT
};

inline const char* warp_op_name(int op, bool metal) {
  static const char* cuda[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                               "__shfl_xor_sync", "__ballot_sync", "__any_sync", "__all_sync",
                               "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                               "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                               "warp product", "warp exclusive scan", "warp inclusive scan",
                               "warp broadcast-first", "__match_any_sync", "__match_all_sync"};
  static const char* mtl[] = {"simdgroup_barrier", "simd_shuffle", "simd_shuffle_up",
                              "simd_shuffle_down", "simd_shuffle_xor", "simd_ballot", "simd_any",
                              "simd_all", "simd_sum", "simd_min", "simd_max", "simd_and",
                              "simd_or", "simd_xor", "simd_product", "simd_prefix_exclusive_sum",
                              "simd_prefix_inclusive_sum", "simd_broadcast_first", "match_any",
                              "match_all"};
  if (op < 0 || op >= W_OP_COUNT) return "?";
  return metal ? mtl[op] : cuda[op];
}

enum : int { B_SYNC = 0, B_COUNT = 1, B_AND = 2, B_OR = 3 };

// Launch options, passed from Python as an array of long long.
enum : int {
  OPT_ORDER = 0,        // 0 forward, 1 reverse, 2 shuffle
  OPT_SEED,             // shuffle seed
  OPT_SHARED_BYTES,     // dynamic shared memory per block
  OPT_YIELD_ATOMIC,     // yield to the scheduler before every atomic / fence
  OPT_ALLOW_EXITED,     // release barriers although some threads of the block returned
  OPT_STACK,            // fiber stack size in bytes
  OPT_SHARED_FILL,      // poison byte for shared memory between blocks, -1: leave stale
  OPT_SPIN_LIMIT,       // livelock guard (atomics in one run slice / yields without progress)
  OPT_MAX_THREADS,      // max threads per block
  OPT_COUNT
};

enum : int { ORDER_FORWARD = 0, ORDER_REVERSE = 1, ORDER_SHUFFLE = 2 };

constexpr size_t kDynSharedCapacity = 256 * 1024;
alignas(256) inline unsigned char g_dyn_shared[kDynSharedCapacity];

struct Launch;
using ResolveFn = void (*)(Launch&, unsigned base, unsigned n, uint32_t part);

struct Fiber {
  ucontext_t ctx;
  char* stack;
  int state;
  unsigned linear;
  Dim tid;
  // block barrier
  const char* bfile;
  int bline;
  int bkind;
  int bpred;
  int bres;
  // warp collective
  int wop;
  int wdyn;
  const void* wtag;
  unsigned wmask;
  int warg;
  int wwidth;
  const char* wfile;
  int wline;
  ResolveFn wresolve;
  alignas(16) unsigned char wval[16];
  alignas(16) unsigned char wres[16];
  uint64_t wres_u;
};

struct Launch {
  ucontext_t sched_ctx;
  ucontext_t tmpl_ctx;
  std::vector<Fiber> fibers;
  std::vector<unsigned> order;
  std::vector<char*> stacks;
  size_t stack_size = 0;
  size_t page = 4096;
  Fiber* cur = nullptr;
  volatile bool in_fiber = false;
  bool abort = false;
  bool metal = false;
  char err[8192];
  void (*call)(void*) = nullptr;
  void* closure = nullptr;
  Dim grid{1, 1, 1};          // blocks per grid
  Dim nominal{1, 1, 1};       // requested block size
  Dim block{1, 1, 1};         // size of the running block (smaller at Metal grid edges)
  Dim bid{0, 0, 0};
  Dim grid_threads{0, 0, 0};  // Metal: threads per grid
  int order_mode = 0;
  uint64_t rng = 0;
  int yield_atomic = 0;
  int allow_exited = 0;
  long long shared_fill = 0xCD;
  size_t shared_bytes = 0;
  uint64_t spin_limit = 50000000ull;
  uint64_t spin = 0;
  uint64_t since_progress = 0;
  unsigned nthreads = 0;
  unsigned n_ready = 0, n_barrier = 0, n_warp = 0, n_exited = 0;
  uint64_t barriers_released = 0;
  struct sigaction old_act[4];
  stack_t old_altstack;
  char* altstack = nullptr;
};

inline Launch g_launch;
inline pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
// Values of the current thread, updated by the scheduler at every switch into a fiber.
inline Dim g_tid{0, 0, 0};
inline Dim g_bid{0, 0, 0};
inline Dim g_bdim{1, 1, 1};
inline Dim g_gdim{1, 1, 1};
inline unsigned long long g_clock = 0;

// ---------------------------------------------------------------- errors

inline int where_prefix(Launch& L, char* buf, size_t n, const Fiber* f) {
  const char* blk = L.metal ? "threadgroup" : "block";
  if (f)
    return snprintf(buf, n, "%s (%u,%u,%u) thread (%u,%u,%u): ", blk, L.bid.x, L.bid.y, L.bid.z,
                    f->tid.x, f->tid.y, f->tid.z);
  return snprintf(buf, n, "%s (%u,%u,%u): ", blk, L.bid.x, L.bid.y, L.bid.z);
}

inline void set_error_v(Launch& L, const Fiber* f, const char* fmt, va_list ap) {
  if (L.abort) return;  // keep the first error
  int k = where_prefix(L, L.err, sizeof L.err, f);
  if (k < 0) k = 0;
  if ((size_t)k < sizeof L.err) vsnprintf(L.err + k, sizeof L.err - k, fmt, ap);
  L.abort = true;
}

inline void set_error(Launch& L, const Fiber* f, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error_v(L, f, fmt, ap);
  va_end(ap);
}

// Report an error from inside a fiber and abandon the launch (never returns).
[[noreturn]] inline void fail(const char* fmt, ...) {
  Launch& L = g_launch;
  va_list ap;
  va_start(ap, fmt);
  set_error_v(L, L.in_fiber ? L.cur : nullptr, fmt, ap);
  va_end(ap);
  if (L.in_fiber && L.cur) {
    L.in_fiber = false;
    setcontext(&L.sched_ctx);
  }
  fprintf(stderr, "gpuemu: %s\n", L.err);
  abort();
}

inline Launch& in_fiber_or_die(const char* what) {
  Launch& L = g_launch;
  if (!L.in_fiber || !L.cur) {
    fprintf(stderr, "gpuemu: %s called outside of a kernel launch\n", what);
    abort();
  }
  return L;
}

// ---------------------------------------------------------------- scheduling

inline void set_state(Launch& L, Fiber* f, int s) {
  auto dec = [&](int st) {
    switch (st) {
      case ST_READY: --L.n_ready; break;
      case ST_BARRIER: --L.n_barrier; break;
      case ST_WARP: --L.n_warp; break;
      default: --L.n_exited; break;
    }
  };
  auto inc = [&](int st) {
    switch (st) {
      case ST_READY: ++L.n_ready; break;
      case ST_BARRIER: ++L.n_barrier; break;
      case ST_WARP: ++L.n_warp; break;
      default: ++L.n_exited; break;
    }
  };
  dec(f->state);
  f->state = s;
  inc(s);
}

// Give control back to the scheduler; returns when the scheduler resumes this fiber.
inline void yield_fiber(Launch& L, Fiber* f) {
  L.in_fiber = false;
  swapcontext(&f->ctx, &L.sched_ctx);
}

inline void switch_to(Launch& L, Fiber* f) {
  L.cur = f;
  g_tid = f->tid;
  L.spin = 0;
  L.in_fiber = true;
  swapcontext(&L.sched_ctx, &f->ctx);
  L.in_fiber = false;
}

// A point where, in yield-on-atomic mode, the fiber lets the others run (atomics, fences).
inline void atomic_point() {
  Launch& L = g_launch;
  if (!L.in_fiber) return;
  if (L.yield_atomic) {
    if (++L.since_progress > L.spin_limit)
      fail("livelock: %llu yields at atomics/fences without any thread finishing or reaching a "
           "barrier (raise spin_limit if this is expected)",
           (unsigned long long)L.since_progress);
    yield_fiber(L, L.cur);
  } else if (++L.spin > L.spin_limit) {
    fail("%llu atomic operations without yielding: a spin-wait on another thread? Spin-waits "
         "need yield_on_atomic=True (and can never wait on a later block, since blocks run "
         "one after another)",
         (unsigned long long)L.spin);
  }
}

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <class V>
inline void shuffle_vec(V& v, size_t n, uint64_t& rng) {
  for (size_t i = n; i > 1; --i) {
    size_t j = (size_t)(splitmix(rng) % i);
    std::swap(v[i - 1], v[j]);
  }
}

// ---------------------------------------------------------------- warp collectives

template <class T>
inline char type_tag_v = 0;

inline Fiber* warp_fibers(Launch& L, unsigned base) { return L.fibers.data() + base; }

inline void try_resolve(Launch& L, Fiber* f) {
  unsigned base = f->linear & ~31u;
  unsigned n = L.nthreads - base < 32 ? L.nthreads - base : 32;
  uint32_t exist = n == 32 ? 0xFFFFFFFFu : ((1u << n) - 1u);
  Fiber* F = warp_fibers(L, base);
  uint32_t part = 0;
  if (f->wdyn) {
    for (unsigned l = 0; l < n; ++l)
      if (F[l].state != ST_EXITED) part |= 1u << l;
  } else {
    part = f->wmask & exist;
  }
  for (unsigned l = 0; l < n; ++l) {
    if (!(part & (1u << l))) continue;
    Fiber& g = F[l];
    if (g.state != ST_WARP) return;  // not arrived yet (or exited: a deadlock, reported later)
    if (f->wdyn) {
      if (g.wop != f->wop || g.wtag != f->wtag || g.wline != f->wline ||
          (g.wfile != f->wfile && strcmp(g.wfile, f->wfile) != 0))
        fail("divergent simdgroup functions: lane %u is in %s at %s:%d, lane %u in %s at %s:%d "
             "(the emulator needs every live thread of a simdgroup to reach the same simdgroup "
             "function call)",
             f->linear & 31, warp_op_name(f->wop, true), f->wfile, f->wline, l,
             warp_op_name(g.wop, true), g.wfile, g.wline);
    } else {
      if (g.wmask != f->wmask) return;  // another group; resolved (or reported) later
      if (g.wop != f->wop || g.wtag != f->wtag || g.wwidth != f->wwidth)
        fail("mismatched warp collectives with mask 0x%08x: lane %u in %s at %s:%d, lane %u in "
             "%s at %s:%d",
             f->wmask, f->linear & 31, warp_op_name(f->wop, false), f->wfile, f->wline, l,
             warp_op_name(g.wop, false), g.wfile, g.wline);
    }
  }
  f->wresolve(L, base, n, part);
  for (unsigned l = 0; l < n; ++l)
    if (part & (1u << l)) set_state(L, &F[l], ST_READY);
  L.since_progress = 0;
}

template <class T>
inline T load_val(const Fiber& g) {
  T v;
  memcpy(&v, g.wval, sizeof(T));
  return v;
}

template <class T>
inline void store_res(Fiber& g, const T& v) {
  memcpy(g.wres, &v, sizeof(T));
}

template <class T, int OP>
inline T reduce_vals(Fiber* F, unsigned n, uint32_t part, unsigned upto, bool inclusive) {
  T acc{};
  bool first = true;
  for (unsigned l = 0; l < n; ++l) {
    if (!(part & (1u << l))) continue;
    if (l > upto || (l == upto && !inclusive)) break;
    T v = load_val<T>(F[l]);
    if (first) {
      acc = v;
      first = false;
      continue;
    }
    if constexpr (OP == W_RED_ADD || OP == W_SCAN_EXCL || OP == W_SCAN_INCL) acc = acc + v;
    else if constexpr (OP == W_RED_MUL) acc = acc * v;
    else if constexpr (OP == W_RED_MIN) acc = v < acc ? v : acc;
    else if constexpr (OP == W_RED_MAX) acc = acc < v ? v : acc;
    else if constexpr (OP == W_RED_AND) acc = acc & v;
    else if constexpr (OP == W_RED_OR) acc = acc | v;
    else if constexpr (OP == W_RED_XOR) acc = acc ^ v;
  }
  return acc;
}

template <class T, int OP>
void resolve_op(Launch& L, unsigned base, unsigned n, uint32_t part) {
  Fiber* F = warp_fibers(L, base);
  if constexpr (OP == W_SYNC) {
    (void)F;
  } else if constexpr (OP == W_SHFL || OP == W_SHFL_UP || OP == W_SHFL_DOWN || OP == W_SHFL_XOR) {
    for (unsigned l = 0; l < n; ++l) {
      if (!(part & (1u << l))) continue;
      Fiber& g = F[l];
      int w = g.wwidth;
      if (w <= 0 || w > 32 || (w & (w - 1)) != 0)
        fail("%s: width %d is not a power of two in [1, 32]", warp_op_name(OP, L.metal), w);
      int seg = (int)l & ~(w - 1);
      int src;
      bool own = false;
      if (OP == W_SHFL) {
        src = seg + (g.warg & (w - 1));
      } else if (OP == W_SHFL_UP) {
        src = (int)l - g.warg;
        own = src < seg;
      } else if (OP == W_SHFL_DOWN) {
        src = (int)l + g.warg;
        own = src >= seg + w;
      } else {
        src = (int)l ^ g.warg;
        own = src < seg || src >= seg + w;
      }
      if (own) {
        store_res(g, load_val<T>(g));
        continue;
      }
      if (src < 0 || src >= 32 || !(part & (1u << src))) {
        Launch& LL = L;
        LL.cur = &g;
        fail("%s at %s:%d reads lane %d, which does not take part (participants 0x%08x; lanes "
             "beyond the block, returned lanes and lanes outside the mask give undefined values "
             "on a GPU)",
             warp_op_name(OP, L.metal), g.wfile, g.wline, src, part);
      }
      store_res(g, load_val<T>(F[src]));
    }
  } else if constexpr (OP == W_BALLOT || OP == W_ANY || OP == W_ALL) {
    uint64_t bits = 0;
    for (unsigned l = 0; l < n; ++l)
      if ((part & (1u << l)) && load_val<T>(F[l])) bits |= 1ull << l;
    uint64_t r = OP == W_BALLOT ? bits : OP == W_ANY ? (bits != 0) : (bits == part);
    for (unsigned l = 0; l < n; ++l)
      if (part & (1u << l)) F[l].wres_u = r;
  } else if constexpr (OP == W_MATCH_ANY || OP == W_MATCH_ALL) {
    for (unsigned l = 0; l < n; ++l) {
      if (!(part & (1u << l))) continue;
      uint64_t same = 0;
      for (unsigned k = 0; k < n; ++k)
        if ((part & (1u << k)) && memcmp(F[k].wval, F[l].wval, sizeof(T)) == 0) same |= 1ull << k;
      if (OP == W_MATCH_ANY) F[l].wres_u = same;
      else F[l].wres_u = same == part ? (part | (1ull << 32)) : 0;  // bit 32: pred
    }
  } else if constexpr (OP == W_BCAST_FIRST) {
    unsigned first = 0;
    while (!(part & (1u << first))) ++first;
    for (unsigned l = 0; l < n; ++l)
      if (part & (1u << l)) store_res(F[l], load_val<T>(F[first]));
  } else if constexpr (OP == W_SCAN_EXCL || OP == W_SCAN_INCL) {
    for (unsigned l = 0; l < n; ++l)
      if (part & (1u << l)) store_res(F[l], reduce_vals<T, OP>(F, n, part, l, OP == W_SCAN_INCL));
  } else {
    T r = reduce_vals<T, OP>(F, n, part, 31, true);
    for (unsigned l = 0; l < n; ++l)
      if (part & (1u << l)) store_res(F[l], r);
  }
}

// Enter a warp collective; returns the calling fiber once the collective completed.
template <class T, int OP>
inline Fiber* warp_collective(const T& v, unsigned mask, bool dyn, int arg, int width,
                              const char* file, int line) {
  static_assert(sizeof(T) <= 16, "warp collectives on values wider than 16 bytes");
  static_assert(std::is_trivially_copyable<T>::value, "warp collective on a non-trivial type");
  Launch& L = in_fiber_or_die(warp_op_name(OP, false));
  Fiber* f = L.cur;
  if (!dyn && !(mask & (1u << (f->linear & 31))))
    fail("%s at %s:%d: the calling lane %u is not in its own mask 0x%08x",
         warp_op_name(OP, L.metal), file, line, f->linear & 31, mask);
  f->wop = OP;
  f->wdyn = dyn;
  f->wtag = &type_tag_v<T>;
  f->wmask = mask;
  f->warg = arg;
  f->wwidth = width;
  f->wfile = file;
  f->wline = line;
  f->wresolve = &resolve_op<T, OP>;
  memset(f->wval, 0, sizeof f->wval);
  memcpy(f->wval, &v, sizeof(T));
  set_state(L, f, ST_WARP);
  try_resolve(L, f);
  if (f->state == ST_WARP) yield_fiber(L, f);
  return f;
}

template <class T, int OP>
inline T warp_value(const T& v, unsigned mask, bool dyn, int arg, int width, const char* file,
                    int line) {
  Fiber* f = warp_collective<T, OP>(v, mask, dyn, arg, width, file, line);
  T r;
  memcpy(&r, f->wres, sizeof(T));
  return r;
}

template <class T, int OP>
inline uint64_t warp_bits(const T& v, unsigned mask, bool dyn, const char* file, int line) {
  Fiber* f = warp_collective<T, OP>(v, mask, dyn, 0, 32, file, line);
  return f->wres_u;
}

// Lanes of the caller's warp that exist and have not returned.
inline uint32_t live_lanes() {
  Launch& L = in_fiber_or_die("activemask");
  unsigned base = L.cur->linear & ~31u;
  unsigned n = L.nthreads - base < 32 ? L.nthreads - base : 32;
  uint32_t m = 0;
  for (unsigned l = 0; l < n; ++l)
    if (L.fibers[base + l].state != ST_EXITED) m |= 1u << l;
  return m;
}

// ---------------------------------------------------------------- block barrier

inline int block_barrier(int kind, int pred, const char* file, int line) {
  Launch& L = in_fiber_or_die("barrier");
  Fiber* f = L.cur;
  f->bkind = kind;
  f->bpred = pred;
  f->bfile = file;
  f->bline = line;
  set_state(L, f, ST_BARRIER);
  yield_fiber(L, f);
  return f->bres;
}

inline const char* barrier_name(Launch& L, int kind) {
  if (L.metal) return "threadgroup_barrier";
  switch (kind) {
    case B_COUNT: return "__syncthreads_count";
    case B_AND: return "__syncthreads_and";
    case B_OR: return "__syncthreads_or";
    default: return "__syncthreads";
  }
}

// Called by the scheduler when every live fiber waits at a barrier.
inline bool release_barrier(Launch& L) {
  Fiber* first = nullptr;
  unsigned count = 0;
  for (unsigned i = 0; i < L.nthreads; ++i) {
    Fiber& g = L.fibers[i];
    if (g.state != ST_BARRIER) continue;
    if (!first) {
      first = &g;
    } else if (g.bkind != first->bkind || g.bline != first->bline ||
               (g.bfile != first->bfile && strcmp(g.bfile, first->bfile) != 0)) {
      set_error(L, nullptr,
                "divergent barriers: thread (%u,%u,%u) waits at %s (%s:%d) while thread "
                "(%u,%u,%u) waits at %s (%s:%d); every thread of a block must reach the same "
                "barrier",
                first->tid.x, first->tid.y, first->tid.z, barrier_name(L, first->bkind),
                first->bfile, first->bline, g.tid.x, g.tid.y, g.tid.z, barrier_name(L, g.bkind),
                g.bfile, g.bline);
      return false;
    }
    if (g.bpred) ++count;
  }
  if (L.n_exited > 0 && !L.allow_exited) {
    Fiber* gone = nullptr;
    for (unsigned i = 0; i < L.nthreads && !gone; ++i)
      if (L.fibers[i].state == ST_EXITED) gone = &L.fibers[i];
    set_error(L, nullptr,
              "%s at %s:%d is reached by %u of the block's %u threads; %u threads (e.g. thread "
              "(%u,%u,%u)) had already returned. A barrier that not every thread reaches is "
              "undefined behaviour; keep all threads alive until the last barrier (or launch "
              "with allow_exited_at_barrier=True to accept it)",
              barrier_name(L, first->bkind), first->bfile, first->bline, L.n_barrier, L.nthreads,
              L.n_exited, gone->tid.x, gone->tid.y, gone->tid.z);
    return false;
  }
  int res = 0;
  switch (first->bkind) {
    case B_COUNT: res = (int)count; break;
    case B_AND: res = count == L.n_barrier; break;
    case B_OR: res = count > 0; break;
    default: break;
  }
  for (unsigned i = 0; i < L.nthreads; ++i) {
    Fiber& g = L.fibers[i];
    if (g.state != ST_BARRIER) continue;
    g.bres = res;
    set_state(L, &g, ST_READY);
  }
  ++L.barriers_released;
  L.since_progress = 0;
  return true;
}

inline void report_deadlock(Launch& L) {
  char buf[6000];
  size_t k = 0;
  auto put = [&](const char* fmt, ...) {
    if (k >= sizeof buf - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + k, sizeof buf - k, fmt, ap);
    va_end(ap);
    if (w > 0) k += (size_t)w;
    if (k > sizeof buf - 1) k = sizeof buf - 1;
  };
  put("deadlock: no thread can make progress (%u waiting in warp collectives, %u at barriers, "
      "%u returned).",
      L.n_warp, L.n_barrier, L.n_exited);
  int shown = 0;
  for (unsigned base = 0; base < L.nthreads && shown < 6; base += 32) {
    unsigned n = L.nthreads - base < 32 ? L.nthreads - base : 32;
    uint32_t warp = 0, bar = 0, gone = 0;
    Fiber* w0 = nullptr;
    Fiber* b0 = nullptr;
    for (unsigned l = 0; l < n; ++l) {
      Fiber& g = L.fibers[base + l];
      if (g.state == ST_WARP) {
        warp |= 1u << l;
        if (!w0) w0 = &g;
      } else if (g.state == ST_BARRIER) {
        bar |= 1u << l;
        if (!b0) b0 = &g;
      } else if (g.state == ST_EXITED) {
        gone |= 1u << l;
      }
    }
    if (!warp) continue;
    ++shown;
    put(" %s %u: lanes 0x%08x wait in %s", L.metal ? "simdgroup" : "warp", base / 32, warp,
        warp_op_name(w0->wop, L.metal));
    if (!w0->wdyn) put(" (mask 0x%08x)", w0->wmask);
    put(" at %s:%d", w0->wfile, w0->wline);
    if (bar) put("; lanes 0x%08x wait at %s:%d", bar, b0->bfile, b0->bline);
    if (gone) put("; lanes 0x%08x returned", gone);
    if (n < 32) put("; only %u lanes exist in this warp", n);
    put(".");
  }
  set_error(L, nullptr, "%s", buf);
}

// ---------------------------------------------------------------- fibers

inline void fiber_exit_now(Launch& L, Fiber* f) {
  set_state(L, f, ST_EXITED);
  L.since_progress = 0;
  if (L.metal) {
    // Metal simdgroup functions take the threads that are still active: a returned lane may
    // complete a collective the others already wait in.
    unsigned base = f->linear & ~31u;
    unsigned n = L.nthreads - base < 32 ? L.nthreads - base : 32;
    for (unsigned l = 0; l < n; ++l) {
      Fiber& g = L.fibers[base + l];
      if (g.state == ST_WARP && g.wdyn) {
        try_resolve(L, &g);
        break;
      }
    }
  }
  L.in_fiber = false;
  setcontext(&L.sched_ctx);
  abort();  // unreachable
}

inline void fiber_main() {
  Launch& L = g_launch;
  L.call(L.closure);
  fiber_exit_now(L, L.cur);
}

inline bool ensure_stacks(Launch& L, unsigned n, size_t stack_size) {
  long pg = sysconf(_SC_PAGESIZE);
  L.page = pg > 0 ? (size_t)pg : 4096;
  stack_size = (stack_size + L.page - 1) / L.page * L.page;
  if (stack_size != L.stack_size) {
    for (char* s : L.stacks) munmap(s - L.page, L.stack_size + L.page);
    L.stacks.clear();
    L.stack_size = stack_size;
  }
  while (L.stacks.size() < n) {
    void* p = mmap(nullptr, stack_size + L.page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    mprotect(p, L.page, PROT_NONE);  // guard page below the stack
    L.stacks.push_back((char*)p + L.page);
  }
  if (L.fibers.size() < n) L.fibers.resize(n);
  if (L.order.size() < n) L.order.resize(n);
  return true;
}

inline void on_fault(int sig, siginfo_t* si, void*) {
  Launch& L = g_launch;
  if (L.in_fiber && L.cur) {
    Fiber* f = L.cur;
    const char* what = sig == SIGSEGV   ? "invalid memory access (SIGSEGV)"
                       : sig == SIGBUS  ? "bus error (SIGBUS)"
                       : sig == SIGFPE  ? "arithmetic fault (SIGFPE, e.g. integer division by zero)"
                                        : "illegal instruction (SIGILL)";
    char* a = (char*)si->si_addr;
    if ((sig == SIGSEGV || sig == SIGBUS) && a >= f->stack - L.page && a < f->stack)
      set_error(L, f, "fiber stack overflow (stack size %zu bytes; launch with a larger "
                "stack_size)", L.stack_size);
    else if (sig == SIGSEGV || sig == SIGBUS)
      set_error(L, f, "%s at address %p", what, (void*)a);
    else
      set_error(L, f, "%s", what);
    L.in_fiber = false;
    setcontext(&L.sched_ctx);
  }
  // Not raised by a fiber: restore the previous handler and let the fault happen again.
  int idx = sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : sig == SIGFPE ? 2 : 3;
  sigaction(sig, &L.old_act[idx], nullptr);
}

inline void install_handlers(Launch& L) {
  if (!L.altstack) L.altstack = (char*)malloc(1 << 16);
  stack_t ss;
  ss.ss_sp = L.altstack;
  ss.ss_size = 1 << 16;
  ss.ss_flags = 0;
  sigaltstack(&ss, &L.old_altstack);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  const int sigs[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (int i = 0; i < 4; ++i) sigaction(sigs[i], &sa, &L.old_act[i]);
}

inline void remove_handlers(Launch& L) {
  const int sigs[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (int i = 0; i < 4; ++i) sigaction(sigs[i], &L.old_act[i], nullptr);
  sigaltstack(&L.old_altstack, nullptr);
}

inline void poison_shared(Launch& L) {
  if (L.shared_fill < 0) return;
  if (__start_gpuemu_shared && __stop_gpuemu_shared && __stop_gpuemu_shared > __start_gpuemu_shared)
    memset(__start_gpuemu_shared, (int)L.shared_fill,
           (size_t)(__stop_gpuemu_shared - __start_gpuemu_shared));
  if (L.shared_bytes) memset(g_dyn_shared, (int)L.shared_fill, L.shared_bytes);
}

inline int run_block(Launch& L) {
  const Dim b = L.block;
  const unsigned n = b.x * b.y * b.z;
  L.nthreads = n;
  L.n_ready = n;
  L.n_barrier = L.n_warp = L.n_exited = 0;
  L.since_progress = 0;
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = L.fibers[i];
    f.state = ST_READY;
    f.linear = i;
    f.tid = Dim{i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
    f.stack = L.stacks[i];
    memcpy(&f.ctx, &L.tmpl_ctx, sizeof(ucontext_t));
    f.ctx.uc_mcontext.fpregs = &f.ctx.__fpregs_mem;
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = L.stack_size;
    f.ctx.uc_stack.ss_flags = 0;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, (void (*)())fiber_main, 0);
    L.order[i] = L.order_mode == ORDER_REVERSE ? n - 1 - i : i;
  }
  if (L.order_mode == ORDER_SHUFFLE) shuffle_vec(L.order, n, L.rng);
  poison_shared(L);
  for (;;) {
    for (unsigned k = 0; k < n; ++k) {
      Fiber* f = &L.fibers[L.order[k]];
      if (f->state != ST_READY) continue;
      switch_to(L, f);
      if (L.abort) return -1;
    }
    if (L.n_exited == n) return 0;
    if (L.n_ready > 0) {
      if (L.order_mode == ORDER_SHUFFLE) shuffle_vec(L.order, n, L.rng);
      continue;
    }
    if (L.n_warp == 0 && L.n_barrier > 0) {
      if (!release_barrier(L)) return -1;
      if (L.order_mode == ORDER_SHUFFLE) shuffle_vec(L.order, n, L.rng);
      continue;
    }
    report_deadlock(L);
    return -1;
  }
}

// Runs a whole launch. grid: blocks per grid; block: threads per block; grid_threads: for Metal
// (dispatchThreads) the number of threads per grid, which clips the edge threadgroups.
inline int run_launch(Dim grid, Dim block, Dim grid_threads, bool metal, const long long* opts,
                      void (*call)(void*), void* closure) {
  struct Lock {
    Lock() { pthread_mutex_lock(&g_mutex); }
    ~Lock() { pthread_mutex_unlock(&g_mutex); }
  } lock;
  Launch& L = g_launch;
  L.err[0] = 0;
  L.abort = false;
  L.metal = metal;
  L.call = call;
  L.closure = closure;
  L.order_mode = (int)opts[OPT_ORDER];
  L.rng = (uint64_t)opts[OPT_SEED] * 0x2545F4914F6CDD1Dull + 0x1234567ull;
  L.yield_atomic = (int)opts[OPT_YIELD_ATOMIC];
  L.allow_exited = (int)opts[OPT_ALLOW_EXITED];
  L.shared_fill = opts[OPT_SHARED_FILL];
  L.shared_bytes = (size_t)opts[OPT_SHARED_BYTES];
  L.spin_limit = opts[OPT_SPIN_LIMIT] > 0 ? (uint64_t)opts[OPT_SPIN_LIMIT] : 50000000ull;
  L.barriers_released = 0;
  const unsigned long long max_threads = opts[OPT_MAX_THREADS] > 0 ? opts[OPT_MAX_THREADS] : 1024;
  const unsigned long long nb = (unsigned long long)block.x * block.y * block.z;
  const unsigned long long ng = (unsigned long long)grid.x * grid.y * grid.z;
  if (L.order_mode < 0 || L.order_mode > 2) {
    snprintf(L.err, sizeof L.err, "invalid order %d", L.order_mode);
    return 1;
  }
  if (nb == 0 || ng == 0) return 0;
  if (nb > max_threads) {
    snprintf(L.err, sizeof L.err, "%llu threads per block exceed the limit of %llu", nb,
             max_threads);
    return 1;
  }
  if (L.shared_bytes > kDynSharedCapacity) {
    snprintf(L.err, sizeof L.err, "%zu bytes of dynamic shared memory exceed the emulator's %zu",
             L.shared_bytes, kDynSharedCapacity);
    return 1;
  }
  size_t stack = opts[OPT_STACK] > 0 ? (size_t)opts[OPT_STACK] : (size_t)64 * 1024;
  if (stack < 16 * 1024) stack = 16 * 1024;
  if (!ensure_stacks(L, (unsigned)nb, stack)) {
    snprintf(L.err, sizeof L.err, "cannot map %llu fiber stacks of %zu bytes", nb, stack);
    return 1;
  }
  getcontext(&L.tmpl_ctx);
  L.grid = grid;
  L.nominal = block;
  L.grid_threads = grid_threads;
  g_gdim = grid;
  std::vector<unsigned long long> border;
  if (L.order_mode == ORDER_SHUFFLE) {
    border.resize(ng);
    for (unsigned long long i = 0; i < ng; ++i) border[i] = i;
    shuffle_vec(border, ng, L.rng);
  }
  install_handlers(L);
  int rc = 0;
  for (unsigned long long i = 0; i < ng; ++i) {
    unsigned long long b = L.order_mode == ORDER_FORWARD   ? i
                           : L.order_mode == ORDER_REVERSE ? ng - 1 - i
                                                           : border[i];
    Dim bid{(unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y),
            (unsigned)(b / ((unsigned long long)grid.x * grid.y))};
    Dim bd = block;
    if (metal) {
      unsigned* dims[3] = {&bd.x, &bd.y, &bd.z};
      const unsigned gt[3] = {grid_threads.x, grid_threads.y, grid_threads.z};
      const unsigned bi[3] = {bid.x, bid.y, bid.z};
      const unsigned nom[3] = {block.x, block.y, block.z};
      for (int d = 0; d < 3; ++d) {
        unsigned long long start = (unsigned long long)bi[d] * nom[d];
        unsigned long long left = gt[d] - start;
        *dims[d] = left < nom[d] ? (unsigned)left : nom[d];
      }
    }
    L.bid = bid;
    L.block = bd;
    g_bid = bid;
    g_bdim = bd;
    if (run_block(L) != 0) {
      rc = 1;
      break;
    }
  }
  remove_handlers(L);
  L.cur = nullptr;
  L.in_fiber = false;
  return rc;
}

// ---------------------------------------------------------------- kernel signatures

// Describes a parameter type for the Python side:
//   p<kind><size>[c]  pointer (kind of the pointee: i/u/f/b/s/v; c: pointee is const)
//   i<size> u<size> f<size> b1  scalars; s<size> other types passed by value
template <class T>
inline void describe_scalar(char* out, size_t n) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_void<U>::value) {
    snprintf(out, n, "v0");
  } else if constexpr (std::is_same<U, bool>::value) {
    snprintf(out, n, "b1");
  } else if constexpr (std::is_enum<U>::value) {
    describe_scalar<std::underlying_type_t<U>>(out, n);
  } else if constexpr (std::is_integral<U>::value) {
    snprintf(out, n, "%c%zu", std::is_signed<U>::value ? 'i' : 'u', sizeof(U));
  } else if constexpr (std::is_floating_point<U>::value) {
    snprintf(out, n, "f%zu", sizeof(U));
  } else if constexpr (std::is_pointer<U>::value) {
    snprintf(out, n, "s%zu", sizeof(U));
  } else {
    snprintf(out, n, "s%zu", sizeof(U));
  }
}

template <class T>
inline void describe_param(std::vector<char>& out) {
  using D = std::decay_t<T>;
  char buf[64];
  if constexpr (std::is_pointer<D>::value) {
    using P = std::remove_pointer_t<D>;
    char inner[48];
    describe_scalar<P>(inner, sizeof inner);
    snprintf(buf, sizeof buf, "p%s%s", inner, std::is_const<P>::value ? "c" : "");
  } else {
    describe_scalar<D>(buf, sizeof buf);
  }
  if (!out.empty()) out.push_back(',');
  for (char* c = buf; *c; ++c) out.push_back(*c);
}

template <class... Ts>
inline const char* signature_of(void (*)(Ts...)) {
  // built once, by the first caller (a static's initialiser runs once even when two threads,
  // two emulated GPUs, ask at the same time; filling a shared vector on demand did not)
  static const std::vector<char> s = [] {
    std::vector<char> v;
    (describe_param<Ts>(v), ...);
    v.push_back(0);
    return v;
  }();
  return s.data();
}

template <class... Ts, size_t... I>
inline void invoke_kernel(void (*fn)(Ts...), void** args, std::index_sequence<I...>) {
  fn(*reinterpret_cast<std::decay_t<Ts>*>(args[I])...);
}

template <class... Ts>
struct KernelCall {
  void (*fn)(Ts...);
  void** args;
  static void run(void* p) {
    auto* c = static_cast<KernelCall*>(p);
    invoke_kernel(c->fn, c->args, std::index_sequence_for<Ts...>{});
  }
};

}  // namespace gpuemu

GPUEMU_EXPORT const char* gpuemu_last_error() { return gpuemu::g_launch.err; }
GPUEMU_EXPORT unsigned long long gpuemu_barriers_released() {
  return gpuemu::g_launch.barriers_released;
}
GPUEMU_EXPORT unsigned long long gpuemu_dyn_shared_capacity() {
  return gpuemu::kDynSharedCapacity;
}
