// core/thread_pool: implementation. Wake-up protocol: the caller stores the job, then bumps
// generation_ (release) and notifies; a worker that sees a new generation (acquire) runs its
// range and decrements pending_; the last one notifies the caller. Both sides spin for a few
// microseconds before sleeping, because ops of one forward pass arrive back to back and a
// futex wake costs more than a short spin.
#include "core/thread_pool.h"

namespace sluice {
namespace {

thread_local const ThreadPool* tl_pool = nullptr;  // the pool whose worker this thread is
thread_local int tl_index = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// About 10-50 µs of spinning on current x86 parts (pause is ~40-140 cycles).
constexpr int kSpinIters = 2000;

}  // namespace

ThreadPool::ThreadPool(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = n < 1 ? 1 : n;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_range(int index) {
  int64_t b = 0, e = 0;
  split(job_n_, n_threads_, index, &b, &e);
  if (b >= e) return;
  try {
    (*job_)(b, e, index);
  } catch (...) {
    std::lock_guard<std::mutex> lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_main(int index) {
  tl_pool = this;
  tl_index = index;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpinIters; ++i) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    run_range(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (tl_pool == this) {  // nested call from one of our workers: no one is free to help
    fn(0, n, tl_index);
    return;
  }
  if (n_threads_ == 1 || n == 1) {  // no one to wake (the caller is thread 0)
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // While the job runs, the caller counts as thread 0 of this pool, so a nested
  // parallel_for from its own range also runs inline instead of deadlocking on call_mu_.
  struct CallerScope {
    const ThreadPool* saved_pool = tl_pool;
    int saved_index = tl_index;
    explicit CallerScope(const ThreadPool* p) {
      tl_pool = p;
      tl_index = 0;
    }
    ~CallerScope() {
      tl_pool = saved_pool;
      tl_index = saved_index;
    }
  } caller_scope(this);
  job_ = &fn;
  job_n_ = n;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  run_range(0);

  int p = pending_.load(std::memory_order_acquire);
  for (int i = 0; p != 0 && i < kSpinIters; ++i) {
    cpu_relax();
    p = pending_.load(std::memory_order_acquire);
  }
  while (p != 0) {
    pending_.wait(p, std::memory_order_acquire);
    p = pending_.load(std::memory_order_acquire);
  }
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sluice
