// core/thread_pool: a persistent pool of worker threads for the cpu backend's ops.
// Threads are created once; each parallel_for wakes them (brief spin, then a futex wait via
// std::atomic::wait), and the calling thread works too. Work is split statically into
// size() contiguous ranges, so which thread computes which index is a pure function of
// (n, size()): kernels that never split a reduction across ranges are bitwise deterministic
// for any thread count.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  // fn(begin, end, thread): process indices [begin, end); thread in [0, size()) names the
  // executing thread (0 = the caller), for per-thread scratch buffers.
  using Fn = std::function<void(int64_t begin, int64_t end, int thread)>;

  // n <= 0: std::thread::hardware_concurrency(). n == 1: no worker threads at all.
  explicit ThreadPool(int n);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) split into size() contiguous ranges (empty ranges are skipped);
  // returns when all are done. An exception thrown by fn is rethrown here (the first one).
  // Called from inside a worker of this pool, it runs inline on that thread. Calls from
  // different outside threads are serialized.
  void parallel_for(int64_t n, const Fn& fn);

  // The range of thread `i` of `n_threads` over [0, n): the split parallel_for uses.
  static void split(int64_t n, int n_threads, int i, int64_t* begin, int64_t* end) {
    *begin = n * i / n_threads;
    *end = n * (i + 1) / n_threads;
  }

 private:
  void worker_main(int index);
  void run_range(int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time from outside the pool

  // The current job, published by a release increment of generation_.
  const Fn* job_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};  // workers still running the current job
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace sluice
