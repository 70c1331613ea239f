// host_runtime.h: the native CPU device's launcher (gputok/backends/native.py builds it with the
// kernels into one shared library; it is the runtime's own translation unit, after
// dialect_host.h). Called through ctypes, which releases the GIL for every call.
//
// Work comes in two forms, as on a GPU:
//   * synchronous: gputok_native_launch / gputok_native_scan_u32 run one launch (or scan) and
//     return when it is done (tests and one-off steps);
//   * streams: gputok_native_stream_* queue launches, scans and timestamps on a stream, which
//     runs them in order on its own thread (plus its own helper workers) while Python goes on;
//     gputok_native_stream_sync waits for everything queued. The driver keeps two chunks in
//     flight on two streams (driver.py), so two chunks run at once with no barrier between
//     them: on a machine whose cores are shared with other processes, a worker the OS stops for
//     a time slice holds up only its own chunk. (Splitting every launch over all cores instead
//     made each launch wait for its slowest worker: 1.75x slower than one thread on the shared
//     2-core box; on an idle machine both forms scale.)
//
// A launch of `grid` blocks of `block` threads (dialect_host.h: one block = one loop over its
// elements) hands its blocks out through an atomic counter (dynamic scheduling: a block holding
// one long piece does not hold up the others). The scan is the host form of
// kernels/encode_scan.cu (whose block scans need __shared__ and __syncthreads): reduce a few
// contiguous parts per thread, scan the part totals, scan each part from its carry.
//
// Workers sleep on condition variables between launches (no spinning: the machine's other work,
// and the Python thread preparing the next chunk, get the cores). A fork()ed child gets fresh
// pools; streams do not survive a fork (native.py makes new ones in the child).
//
// Performance notes: waking a helper costs ~10-30 us per launch, against milliseconds of work
// per launch on a chunk of a few MB. Tried and dropped: OpenMP (its idle workers spin by
// default, and would need OMP_WAIT_POLICY set before the library loads).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>

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
  // A one-thread run is the caller's alone and takes no lock: several callers (the driver's
  // chunk workers, native.py) run their launches side by side.
  void run(Job& job, int threads) {
    const unsigned helpers = threads > 1 ? (unsigned)threads - 1 : 0u;
    if (helpers == 0 || job.items <= 1) {
      job.work();
      return;
    }
    std::lock_guard<std::mutex> one_at_a_time(launch_mutex_);
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

void launch(Pool& p, void (*call)(void**), unsigned grid, unsigned block, void** args,
            int threads) {
  Launch l{call, args, grid, block};
  Job job;
  job.run = run_block;
  job.ctx = &l;
  job.items = grid;
  p.run(job, threads);
}

// ---------------------------------------------------------------- scans
struct Scan {
  unsigned* a;
  long long n;
  int exclusive;
  unsigned parts;
  unsigned* totals;  // per part: its sum, then the carry into it
};

inline long long part_lo(const Scan& s, unsigned p) { return s.n * (long long)p / s.parts; }

void scan_reduce(const void* ctx, unsigned p) {
  const Scan& s = *static_cast<const Scan*>(ctx);
  unsigned acc = 0;
  const unsigned* a = s.a;
  const long long hi = part_lo(s, p + 1);
  for (long long i = part_lo(s, p); i < hi; ++i) acc += a[i];
  s.totals[p] = acc;
}

void scan_apply(const void* ctx, unsigned p) {
  const Scan& s = *static_cast<const Scan*>(ctx);
  unsigned acc = s.totals[p];
  unsigned* a = s.a;
  const long long hi = part_lo(s, p + 1);
  long long i = part_lo(s, p);
  if (s.exclusive) {
    for (; i < hi; ++i) {
      const unsigned v = a[i];
      a[i] = acc;
      acc += v;
    }
  } else {
    for (; i < hi; ++i) a[i] = acc += a[i];
  }
}

void scan(Pool& p, unsigned* a, long long n, int exclusive, int threads) {
  if (n <= 0) return;
  // below ~256K elements one thread is faster than waking the others; above, a few parts per
  // thread so that a worker the OS runs late leaves its parts to the others
  long long parts = n < (1 << 18) || threads < 2 ? 1 : n >> 16;
  if (parts > 4LL * threads) parts = 4LL * threads;
  std::vector<unsigned> totals((size_t)parts);
  Scan s{a, n, exclusive, (unsigned)parts, totals.data()};
  if (parts > 1) {
    Job reduce;
    reduce.run = scan_reduce;
    reduce.ctx = &s;
    reduce.items = (unsigned)parts;
    p.run(reduce, threads);
  }
  unsigned carry = 0;  // exclusive scan of the part totals: each part's carry
  for (long long k = 0; k < parts; ++k) {
    const unsigned t = totals[k];
    totals[k] = carry;
    carry += t;
  }
  Job apply;
  apply.run = scan_apply;
  apply.ctx = &s;
  apply.items = (unsigned)parts;
  p.run(apply, threads);
}

// ---------------------------------------------------------------- streams
constexpr int kMaxArgs = 32;

struct Op {
  enum Kind { kLaunch, kScan, kTime } kind;
  void (*call)(void**);
  unsigned grid, block;
  unsigned long long vals[kMaxArgs];  // argument values, copied at enqueue (args[k] = &vals[k])
  unsigned* a;  // scan
  long long n;
  int exclusive;
  double* when;  // timestamp: seconds on the steady clock, written when the op runs
};

class Stream {
 public:
  explicit Stream(int threads) : threads_(threads) {
    std::thread([this] { loop(); }).detach();
  }

  void push(const Op& op) {
    {
      std::lock_guard<std::mutex> lk(m_);
      queue_.push_back(op);
      ++pending_;
    }
    work_.notify_one();
  }

  void sync() {
    std::unique_lock<std::mutex> lk(m_);
    idle_.wait(lk, [&] { return pending_ == 0; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(m_);
    while (true) {
      work_.wait(lk, [&] { return !queue_.empty(); });
      Op op = queue_.front();
      queue_.pop_front();
      lk.unlock();
      run(op);
      lk.lock();
      if (--pending_ == 0) idle_.notify_all();  // the mutex publishes the op's writes
    }
  }

  void run(Op& op) {
    if (op.kind == Op::kLaunch) {
      void* args[kMaxArgs];
      for (int k = 0; k < kMaxArgs; ++k) args[k] = &op.vals[k];
      launch(pool_, op.call, op.grid, op.block, args, threads_);
    } else if (op.kind == Op::kScan) {
      scan(pool_, op.a, op.n, op.exclusive, threads_);
    } else {
      *op.when = std::chrono::duration<double>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count();
    }
  }

  const int threads_;
  Pool pool_;
  std::mutex m_;
  std::condition_variable work_, idle_;
  std::deque<Op> queue_;
  long long pending_ = 0;
};

}  // namespace enc_host

ENC_HOST_EXPORT int gputok_native_abi() { return 2; }

ENC_HOST_EXPORT int gputok_native_max_args() { return enc_host::kMaxArgs; }

ENC_HOST_EXPORT int gputok_native_launch(void (*call)(void**), unsigned grid, unsigned block,
                                         void** args, int threads) {
  enc_host::launch(enc_host::pool(), call, grid, block, args, threads);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_scan_u32(unsigned* a, long long n, int exclusive,
                                           int threads) {
  enc_host::scan(enc_host::pool(), a, n, exclusive, threads);
  return 0;
}

// A new stream whose launches use `threads` threads (its own thread included). Streams live as
// long as the process: the Python side makes two per device.
ENC_HOST_EXPORT void* gputok_native_stream_new(int threads) {
  return new enc_host::Stream(threads < 1 ? 1 : threads);
}

ENC_HOST_EXPORT int gputok_native_stream_launch(void* stream, void (*call)(void**), unsigned grid,
                                                unsigned block, const unsigned long long* vals,
                                                int nargs) {
  if (nargs < 0 || nargs > enc_host::kMaxArgs) return -1;
  enc_host::Op op{};
  op.kind = enc_host::Op::kLaunch;
  op.call = call;
  op.grid = grid;
  op.block = block;
  for (int k = 0; k < nargs; ++k) op.vals[k] = vals[k];
  static_cast<enc_host::Stream*>(stream)->push(op);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_stream_scan_u32(void* stream, unsigned* a, long long n,
                                                  int exclusive) {
  enc_host::Op o{};
  o.kind = enc_host::Op::kScan;
  o.a = a;
  o.n = n;
  o.exclusive = exclusive;
  static_cast<enc_host::Stream*>(stream)->push(o);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_stream_time(void* stream, double* when) {
  enc_host::Op o{};
  o.kind = enc_host::Op::kTime;
  o.when = when;
  static_cast<enc_host::Stream*>(stream)->push(o);
  return 0;
}

ENC_HOST_EXPORT int gputok_native_stream_sync(void* stream) {
  static_cast<enc_host::Stream*>(stream)->sync();
  return 0;
}
