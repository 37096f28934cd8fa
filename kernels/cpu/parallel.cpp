// The CPU backend's thread pool: parallel_for(n, grain, fn) calls fn(begin, end) on disjoint
// chunks of [0, n) spread over `num_threads()` threads, and returns when all are done.
//
// Design:
// - Persistent workers. Starting a thread costs tens of microseconds, more than many kernels take,
//   so the num_threads() - 1 workers are started once, on the first parallel_for that needs them,
//   and sleep on a condition variable between jobs. The calling thread works too: with 2 threads
//   there is 1 worker.
// - Short spins before sleeping. Waking a sleeping thread is slow here (a VM: the idle vCPU has
//   to be woken too; measurements: NOTES.md), slower than a gemm's pack-then-compute phases. So a
//   worker that finishes a job polls for the next one for up to kSpin before it sleeps, and the
//   caller polls for the workers to finish for as long before it sleeps: back-to-back jobs (a gemm
//   posts two per block of k) then start within a microsecond. The bound keeps the waste small
//   when no job follows.
// - One job at a time. A job is (fn, n, chunk size); every thread that joins it claims chunks from
//   one atomic counter until none are left, so a slow or descheduled thread (common on a shared
//   VM) leaves its share to the others instead of holding everyone up.
// - Chunks: [0, n) is cut into at most 4 chunks per thread, none shorter than `grain` (but the
//   last). Four per thread balances uneven chunks without paying the claim cost per element.
// - Nesting and concurrency. A parallel_for called from inside a chunk (a gemm inside a conv that
//   is already parallel over the batch) runs inline: the pool is busy with its parent, and waiting
//   for it would deadlock. A parallel_for from a second user thread while the pool is busy also
//   runs inline on that thread, rather than queue behind a job it knows nothing about.
// - Exceptions: the first exception thrown by fn is kept, the chunks not yet claimed are skipped,
//   and it is rethrown in the caller once every thread has left the job.
#include "kiln/kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/log.h"

namespace kiln::cpu {
namespace {

using ChunkFn = std::function<void(int64_t begin, int64_t end)>;

// How long a thread polls before it sleeps (see the file comment).
constexpr std::chrono::microseconds kSpin{100};

// Tells the CPU this is a spin-wait loop: saves power and yields the core's resources.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls done() until it is true or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    // Reading the clock costs more than a poll: look at it every 64 polls only.
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

// True on pool workers always, and on a calling thread while it runs chunks: a parallel_for
// from such a thread is nested and must run inline.
thread_local bool t_inside_parallel_region = false;

int default_num_threads() {
  const char* env = std::getenv("KILN_NUM_THREADS");
  if (env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
  unsigned hw = std::thread::hardware_concurrency();
  const int machine = hw == 0 ? 1 : static_cast<int>(hw);
  // A malformed value falls back to the machine's count instead of failing every kernel.
  if (env) logging::warn(detail::concat("KILN_NUM_THREADS='", env, "' is not a whole number in [1, 1024]: using the machine's ",
                                    machine, " threads"));
  return machine;
}

// 0 until first read; then the thread count every later parallel_for uses.
std::atomic<int> g_num_threads{0};

class ThreadPool {
 public:
  ~ThreadPool() { resize(0); }

  // Runs the job on the pool; false when another thread holds the pool (the caller then runs
  // it inline).
  bool try_run(int64_t n, int64_t chunk, const ChunkFn& fn, int threads) {
    std::unique_lock<std::mutex> run_lock(run_mutex_, std::try_to_lock);
    if (!run_lock.owns_lock()) return false;
    // Only the holder of run_mutex_ starts or stops workers, so no job is in flight here.
    if (static_cast<int>(workers_.size()) != threads - 1) resize(threads - 1);

    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      n_ = n;
      chunk_ = chunk;
      num_chunks_ = (n + chunk - 1) / chunk;
      next_chunk_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      job_open_ = true;
      ++generation_;
    }
    wake_.notify_all();

    t_inside_parallel_region = true;
    run_chunks();
    t_inside_parallel_region = false;

    // Every chunk is claimed once run_chunks returns; the claimed ones are done when no worker is
    // inside the job. Closing the job under the same lock keeps late wakers out of it.
    spin_until([&] { return inside_.load(std::memory_order_acquire) == 0; });
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return inside_.load(std::memory_order_relaxed) == 0; });
      job_open_ = false;
      fn_ = nullptr;
      error = error_;
    }
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  void run_chunks() {
    for (;;) {
      int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks_) return;
      int64_t begin = c * chunk_;
      int64_t end = std::min(n_, begin + chunk_);
      try {
        (*fn_)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        // Skip the chunks nobody has claimed yet: the result is discarded anyway.
        next_chunk_.store(num_chunks_, std::memory_order_relaxed);
      }
    }
  }

  void worker_loop() {
    t_inside_parallel_region = true;
    uint64_t seen = 0;  // the last job this worker joined or found closed
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mutex_);
      if (stop_) return;
      if (generation_ != seen && !job_open_) {
        // The caller finished that job alone before this worker got to it (a short one): note it
        // and poll again, since the next job is likely to follow at once.
        seen = generation_;
        continue;
      }
      wake_.wait(lock, [&] { return stop_ || (job_open_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      inside_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();

      run_chunks();

      lock.lock();
      inside_.fetch_sub(1, std::memory_order_release);
      lock.unlock();
      done_.notify_all();
    }
  }

  void resize(int workers) {
    if (!workers_.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake_.notify_all();
      for (std::thread& t : workers_) t.join();
      workers_.clear();
      stop_ = false;
    }
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  std::mutex run_mutex_;  // held by the one thread whose job the pool runs
  std::vector<std::thread> workers_;

  // Guards the fields below. The atomic ones are written under it too (so that condition
  // variable waits see every change) but may be polled without it.
  std::mutex mutex_;
  std::condition_variable wake_;  // workers wait here for a job (or stop)
  std::condition_variable done_;  // the caller waits here for the workers to leave the job
  std::atomic<uint64_t> generation_{0};  // bumped per job, so a worker joins each job at most once
  bool job_open_ = false;
  bool stop_ = false;
  std::atomic<int> inside_{0};  // workers currently in the job
  const ChunkFn* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, num_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::exception_ptr error_;
};

ThreadPool& pool() {
  static ThreadPool p;
  return p;
}

}  // namespace

int num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    int expected = 0;
    if (g_num_threads.compare_exchange_strong(expected, default_num_threads()))
      logging::debug(detail::concat("cpu: ", g_num_threads.load(), " threads"));
    n = g_num_threads.load(std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, ValueError, "set_num_threads: the thread count must be at least 1, got ", n);
  // The pool resizes itself at its next job, when no job is in flight.
  g_num_threads.store(n, std::memory_order_relaxed);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = num_threads();
  if (n <= grain || threads == 1 || t_inside_parallel_region) {
    fn(0, n);
    return;
  }
  int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  if (!pool().try_run(n, chunk, fn, threads)) fn(0, n);
}

}  // namespace kiln::cpu
