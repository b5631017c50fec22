// core/thread_pool: implementation.
// Protocol: the caller writes the job fields (fn, n), resets done_, stores (release)
// claim_ = gen << 32 | chunks << 16 | next = 0, then bumps generation_ and notifies. Every
// thread, the caller included, loops: load claim_; if its generation is not gen or all
// chunks are claimed, stop; else CAS it to the next chunk, read the job fields, run the
// chunk and add 1 to done_. The caller returns once done_ == chunks. A successful CAS
// acquires the caller's release of this job's fields, and proves the job unfinished: the
// caller overwrites the fields only after seeing this chunk counted in done_, which comes
// after the worker's reads. Waits spin a few microseconds before sleeping
// on a futex (std::atomic::wait), since the ops of one forward pass come back to back.
#include "core/thread_pool.h"

#include <algorithm>

namespace sluice {
namespace {

thread_local const ThreadPool* tl_pool = nullptr;  // the pool whose job this thread is running
thread_local int tl_index = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// About 10-50 µs of spinning on current x86 parts (pause is ~40-140 cycles).
constexpr int kSpinIters = 2000;
// Chunks per thread: enough that a thread that arrives late still finds work to share,
// few enough that claiming (one CAS) stays negligible.
constexpr int64_t kChunksPerThread = 4;

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

// At most 65535 chunks: the count shares claim_ with the generation and the next chunk.
int64_t ThreadPool::n_chunks(int64_t n) const { return std::min<int64_t>({n, kChunksPerThread * n_threads_, 0xffff}); }

void ThreadPool::run_chunks(uint32_t gen, int index) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(c >> 32) != gen) return;
    const int64_t chunks = static_cast<int64_t>((c >> 16) & 0xffff), next = static_cast<int64_t>(c & 0xffff);
    if (next >= chunks) return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // Claimed: the job is unfinished, so these are still its fields (see the file comment).
    const Fn* fn = job_fn_.load(std::memory_order_relaxed);
    const int64_t n = job_n_.load(std::memory_order_relaxed);
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        (*fn)(n * next / chunks, n * (next + 1) / chunks, index);
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_.notify_one();
    c = claim_.load(std::memory_order_acquire);
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
    run_chunks(g, index);
  }
}

void ThreadPool::parallel_for(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (tl_pool == this) {  // nested call from inside one of our jobs: run it here
    fn(0, n, tl_index);
    return;
  }
  if (n_threads_ == 1 || n == 1) {  // no one to wake (the caller is thread 0)
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // While the job runs, the caller counts as thread 0 of this pool, so a nested
  // parallel_for from its own chunk runs inline instead of deadlocking on call_mu_.
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

  const int64_t chunks = n_chunks(n);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  error_ = nullptr;
  failed_.store(false, std::memory_order_relaxed);
  job_fn_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(gen) << 32 | static_cast<uint64_t>(chunks) << 16, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();

  run_chunks(gen, 0);

  int64_t d = done_.load(std::memory_order_acquire);
  for (int i = 0; d != chunks && i < kSpinIters; ++i) {
    cpu_relax();
    d = done_.load(std::memory_order_acquire);
  }
  while (d != chunks) {
    done_.wait(d, std::memory_order_acquire);
    d = done_.load(std::memory_order_acquire);
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sluice
