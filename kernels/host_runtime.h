// host_runtime.h: the native CPU device's launcher (gputok/backends/native.py builds it with the
// kernels into one shared library; it is the runtime's own translation unit, after
// dialect_host.h). It provides, as extern "C" functions called through ctypes (which releases
// the GIL for the call):
//
//   gputok_native_launch(call, grid, block, args, threads)
//        run one kernel launch: `grid` blocks of `block` threads (dialect_host.h: one block = one
//        loop over its elements), blocks taken from an atomic counter by `threads` workers (the
//        calling thread is one of them); returns when every block is done
//   gputok_native_scan_u32(a, n, op, exclusive, threads)
//        in-place prefix scan of a uint32 array (op 0: sum modulo 2^32, 1: max), the host form
//        of kernels/encode_scan.cu (whose block scans need __shared__ and __syncthreads):
//        reduce each of `threads` contiguous parts, scan the part totals, scan each part from
//        its carry
//
// The worker pool is created on first use and grown to the largest `threads` asked for; workers
// sleep on a condition variable between launches (no spinning: the machine's other work, and
// the Python thread preparing the next chunk, get the cores). A fork()ed child gets a fresh pool
// (the parent's workers do not exist there).
//
// Performance notes: waking the workers costs ~10-30 us per launch, against milliseconds of work
// per launch on a chunk of a few MB; tried and dropped: OpenMP (its idle workers spin by default
// and would need OMP_WAIT_POLICY set before the library loads), and static equal ranges per
// worker (one long piece in a range stalls its worker while the others idle).
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#define ENC_HOST_EXPORT extern "C" __attribute__((visibility("default")))

__thread enc_host_dim3 enc_host_block_idx;
__thread enc_host_dim3 enc_host_block_dim;
__thread enc_host_dim3 enc_host_grid_dim;

namespace enc_host {

// One parallel loop: `run(ctx, item)` for item in [0, items), items taken in order from `next`.
struct Job {
  void (*run)(const void* ctx, unsigned item);
  const void* ctx;
  unsigned items;
  std::atomic<unsigned> next{0};

  void work() {
    for (unsigned k; (k = next.fetch_add(1, std::memory_order_relaxed)) < items;) run(ctx, k);
  }
};

class Pool {
 public:
  // Run `job` on `threads` threads (the caller included); returns when all items are done.
  void run(Job& job, int threads) {
    std::lock_guard<std::mutex> one_at_a_time(launch_mutex_);
    const unsigned helpers = threads > 1 ? (unsigned)threads - 1 : 0u;
    if (helpers == 0 || job.items <= 1) {
      job.work();
      return;
    }
    grow(helpers);
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = &job;
      helpers_ = helpers;
      busy_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    job.work();
    std::unique_lock<std::mutex> lk(m_);
    done_.wait(lk, [&] { return busy_ == 0; });
    job_ = nullptr;  // the mutex orders every worker's writes before the caller goes on
  }

 private:
  void grow(unsigned helpers) {
    while (workers_.size() < helpers) {
      const unsigned index = (unsigned)workers_.size();
      const unsigned long long start = generation_;  // a new worker waits for the next launch
      workers_.emplace_back([this, index, start] { loop(index, start); });
      workers_.back().detach();  // they live as long as the process (or until a fork)
    }
  }

  void loop(unsigned index, unsigned long long seen) {
    std::unique_lock<std::mutex> lk(m_);
    while (true) {
      wake_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= helpers_) continue;  // this launch asked for fewer threads
      Job* job = job_;
      lk.unlock();
      job->work();
      lk.lock();
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::mutex launch_mutex_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  unsigned helpers_ = 0, busy_ = 0;
  unsigned long long generation_ = 0;
};

// Never destroyed (workers may outlive static destruction at exit); replaced in a fork()ed child.
Pool* g_pool = nullptr;
std::once_flag g_pool_once;

void fresh_pool_after_fork() { g_pool = new Pool(); }

Pool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool = new Pool();
    pthread_atfork(nullptr, nullptr, fresh_pool_after_fork);
  });
  return *g_pool;
}

// ---------------------------------------------------------------- kernel launches
struct Launch {
  void (*call)(void**);
  void** args;
  unsigned grid, block;
};

void run_block(const void* ctx, unsigned b) {
  const Launch& l = *static_cast<const Launch*>(ctx);
  enc_host_grid_dim = enc_host_dim3{l.grid, 1, 1};
  enc_host_block_dim = enc_host_dim3{l.block, 1, 1};
  enc_host_block_idx = enc_host_dim3{b, 0, 0};
  l.call(l.args);
}

// ---------------------------------------------------------------- scans
struct Scan {
  unsigned* a;
  long long n;
  int op, exclusive;
  unsigned parts;
  unsigned* totals;  // per part: its reduction, then the carry into it
};

inline long long part_lo(const Scan& s, unsigned p) { return s.n * (long long)p / s.parts; }

void scan_reduce(const void* ctx, unsigned p) {
  const Scan& s = *static_cast<const Scan*>(ctx);
  unsigned acc = 0;
  const unsigned* a = s.a;
  const long long hi = part_lo(s, p + 1);
  if (s.op == 0) {
    for (long long i = part_lo(s, p); i < hi; ++i) acc += a[i];
  } else {
    for (long long i = part_lo(s, p); i < hi; ++i) acc = a[i] > acc ? a[i] : acc;
  }
  s.totals[p] = acc;
}

void scan_apply(const void* ctx, unsigned p) {
  const Scan& s = *static_cast<const Scan*>(ctx);
  unsigned acc = s.totals[p];
  unsigned* a = s.a;
  const long long hi = part_lo(s, p + 1);
  long long i = part_lo(s, p);
  if (s.op == 0 && s.exclusive) {
    for (; i < hi; ++i) {
      const unsigned v = a[i];
      a[i] = acc;
      acc += v;
    }
  } else if (s.op == 0) {
    for (; i < hi; ++i) a[i] = acc += a[i];
  } else if (s.exclusive) {
    for (; i < hi; ++i) {
      const unsigned v = a[i];
      a[i] = acc;
      acc = v > acc ? v : acc;
    }
  } else {
    for (; i < hi; ++i) a[i] = acc = a[i] > acc ? a[i] : acc;
  }
}

}  // namespace enc_host

ENC_HOST_EXPORT int gputok_native_launch(void (*call)(void**), unsigned grid, unsigned block,
                                         void** args, int threads) {
  enc_host::Launch l{call, args, grid, block};
  enc_host::Job job;
  job.run = enc_host::run_block;
  job.ctx = &l;
  job.items = grid;
  enc_host::pool().run(job, threads);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_scan_u32(unsigned* a, long long n, int op, int exclusive,
                                           int threads) {
  if (n <= 0) return 0;
  // below ~256K elements one thread is faster than waking the others
  const unsigned parts = n < (1 << 18) || threads < 2 ? 1u : (unsigned)threads;
  std::vector<unsigned> totals(parts);
  enc_host::Scan s{a, n, op, exclusive, parts, totals.data()};
  if (parts > 1) {
    enc_host::Job reduce;
    reduce.run = enc_host::scan_reduce;
    reduce.ctx = &s;
    reduce.items = parts;
    enc_host::pool().run(reduce, threads);
  }
  unsigned carry = 0;  // exclusive scan of the part totals: each part's carry
  for (unsigned p = 0; p < parts; ++p) {
    const unsigned t = totals[p];
    totals[p] = carry;
    carry = op == 0 ? carry + t : (t > carry ? t : carry);
  }
  enc_host::Job apply;
  apply.run = enc_host::scan_apply;
  apply.ctx = &s;
  apply.items = parts;
  enc_host::pool().run(apply, threads);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_abi() { return 1; }
