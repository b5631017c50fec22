// core/thread_pool: a persistent pool of worker threads for the cpu backend's ops.
// Threads are created once; each parallel_for wakes them (brief spin, then a futex wait via
// std::atomic::wait), and the calling thread works too. The index range is cut into a fixed
// set of chunks (a pure function of n and size()) that threads claim first come, first
// served, so a worker that wakes late, or is descheduled on a busy machine, delays nothing:
// the others take its chunks. Kernels that compute each output index start to finish inside
// one chunk, never splitting a reduction, are bitwise deterministic for any thread count and
// any claiming order.
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
  // fn(begin, end, thread): process indices [begin, end). It may be called several times per
  // thread (one call per claimed chunk). thread in [0, size()) names the executing thread
  // (0 = the caller), for per-thread scratch buffers.
  using Fn = std::function<void(int64_t begin, int64_t end, int thread)>;

  // n <= 0: std::thread::hardware_concurrency(). n == 1: no worker threads at all.
  explicit ThreadPool(int n);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) and returns when every index is done. An exception thrown by fn is
  // rethrown here (the first one; chunks not yet claimed are then skipped). Called from
  // inside a job of this pool, it runs inline on the calling thread. Calls from different
  // outside threads are serialized.
  void parallel_for(int64_t n, const Fn& fn);

  // The chunks parallel_for cuts [0, n) into: chunk c of n_chunks(n) is
  // [n·c/k, n·(c+1)/k) with k = n_chunks(n).
  int64_t n_chunks(int64_t n) const;

 private:
  void worker_main(int index);
  // Claims and runs chunks of job `gen` until none are left; false if the job is gone.
  void run_chunks(uint32_t gen, int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel_for at a time from outside the pool

  // The current job: fields written by the caller before it publishes claim_ =
  // gen << 32 | n_chunks << 16 | next_chunk (release); a thread claims a chunk by a CAS on
  // claim_, which also checks the generation (see thread_pool.cpp for why that is enough).
  std::atomic<const Fn*> job_fn_{nullptr};
  std::atomic<int64_t> job_n_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // chunks finished in the current job
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

}  // namespace sluice
