// memory/io_engine: the io_uring engine (liburing) and the pread thread-pool fallback.
#include "memory/io_engine.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace sluice {
namespace {

// One read's result travels in a 32-bit cqe->res; keep every read well below that.
constexpr size_t kMaxReadBytes = size_t{1} << 30;

// Submission runs on a thread of its own. Submitting an O_DIRECT read pins the destination
// pages (and faults in a fresh buffer), which costs about as long as the transfer itself on a
// fast device (measured here: 0.4 ms to submit 3 x 1 MiB into a prefaulted buffer, 1.5-2 ms
// into a fresh one, 1.8 ms for the reads): done on the caller's thread it would serialize
// with the compute it is meant to overlap. The caller only queues; completions are reaped on
// the caller's thread (one submitter and one reaper may share a ring: they touch different
// halves of it).
class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(unsigned depth) : depth_(depth) {
    const int r = io_uring_queue_init(depth, &ring_, 0);
    if (r < 0) {
      std::string why = std::strerror(-r);
      if (r == -EPERM) why += " (is kernel.io_uring_disabled set, or a seccomp filter in the way?)";
      fail("io_uring_queue_init(", depth, ") failed: ", why);
    }
    submitter_ = std::thread([this] { submit_loop(); });
  }
  ~UringEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    submitter_.join();  // it submits what is queued before it stops
    // The buffers of reads still in flight belong to the caller, who must not free them
    // before their completion; drain so that no DMA outlives this engine either way.
    while (in_flight_ > 0 && !submit_error_) {
      io_uring_cqe* cqe = nullptr;
      const int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r < 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    io_uring_queue_exit(&ring_);
  }
  std::string_view name() const override { return "io_uring"; }
  size_t in_flight() const override { return in_flight_; }
  size_t max_in_flight() const override { return depth_; }

  void submit(std::span<const IoRead> reads) override {
    for (const IoRead& r : reads)
      if (r.len > kMaxReadBytes) fail("io_uring: read of ", r.len, " bytes at offset ", r.offset, " exceeds 1 GiB");
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (in_flight_ + reads.size() > depth_)
        fail("io_uring: ", in_flight_ + reads.size(), " reads in flight exceed the queue depth ", depth_);
      queue_.insert(queue_.end(), reads.begin(), reads.end());
      in_flight_ += reads.size();
    }
    cv_.notify_one();
  }

  size_t reap(std::span<IoCompletion> out, size_t min_complete) override {
    size_t n = 0;
    while (n < out.size() && in_flight_ > 0) {
      if (submit_error_) fail("io_uring_submit failed: ", std::strerror(submit_error_));
      io_uring_cqe* cqe = nullptr;
      int r;
      if (n < min_complete) {
        // Bounded waits, so that a submission error on the other thread is noticed. Without
        // IORING_FEAT_EXT_ARG (kernels < 5.11) liburing would queue the timeout as an SQE from
        // this thread, racing the submitter: wait unbounded there.
        if (ring_.features & IORING_FEAT_EXT_ARG) {
          __kernel_timespec ts{0, 50'000'000};
          r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
          if (r == -ETIME) continue;
        } else {
          r = io_uring_wait_cqe(&ring_, &cqe);
        }
      } else {
        r = io_uring_peek_cqe(&ring_, &cqe);
      }
      if (r == -EAGAIN) break;  // peek: nothing completed yet
      if (r == -EINTR) continue;
      if (r < 0) fail("io_uring: waiting for a completion failed: ", std::strerror(-r));
      out[n++] = {cqe->user_data, cqe->res};
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    return n;
  }

 private:
  void submit_loop() {
    std::vector<IoRead> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        batch.swap(queue_);
      }
      for (const IoRead& r : batch) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) {  // the submission queue is full of unsubmitted entries: hand them over first
          flush();
          sqe = io_uring_get_sqe(&ring_);
        }
        if (!sqe) {
          submit_error_ = EBUSY;
          return;
        }
        io_uring_prep_read(sqe, r.fd, r.buf, static_cast<unsigned>(r.len), r.offset);
        sqe->user_data = r.tag;
      }
      flush();
      batch.clear();
      if (submit_error_) return;
    }
  }

  void flush() {
    for (;;) {
      const int r = io_uring_submit(&ring_);
      if (r >= 0) return;
      if (r == -EINTR || r == -EAGAIN || r == -EBUSY) {
        // EAGAIN/EBUSY: the kernel is short of resources or the completion queue is full;
        // the reaper drains it (in_flight <= depth keeps the CQ, 2 x depth, from staying full).
        std::this_thread::yield();
        continue;
      }
      submit_error_ = -r;  // reported by the next reap()
      return;
    }
  }

  io_uring ring_{};
  size_t depth_;
  std::atomic<size_t> in_flight_{0};  // queued, submitted or completed-unreaped
  std::atomic<int> submit_error_{0};  // errno of a failed io_uring_submit
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<IoRead> queue_;
  bool stop_ = false;
  std::thread submitter_;
};

// The fallback: blocking pread(2) on a few worker threads, so several reads are still in
// flight and the caller still computes while they run.
class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { work(); });
  }
  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_todo_.notify_all();
    for (auto& t : workers_) t.join();  // workers finish the queue first: no read outlives us
  }
  std::string_view name() const override { return "pread"; }
  size_t in_flight() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return in_flight_;
  }
  size_t max_in_flight() const override { return 64; }

  void submit(std::span<const IoRead> reads) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const IoRead& r : reads) todo_.push_back(r);
      in_flight_ += reads.size();
    }
    cv_todo_.notify_all();
  }

  size_t reap(std::span<IoCompletion> out, size_t min_complete) override {
    std::unique_lock<std::mutex> lk(mu_);
    // in_flight_ counts queued, running and finished-but-unreaped reads alike.
    const size_t want = std::min({min_complete, in_flight_, out.size()});
    cv_done_.wait(lk, [&] { return done_.size() >= want; });
    size_t n = 0;
    while (n < out.size() && !done_.empty()) {
      out[n++] = done_.front();
      done_.pop_front();
    }
    in_flight_ -= n;
    return n;
  }

 private:
  void work() {
    for (;;) {
      IoRead r;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_todo_.wait(lk, [&] { return stop_ || !todo_.empty(); });
        if (todo_.empty()) return;  // stop_ and nothing left
        r = todo_.front();
        todo_.pop_front();
      }
      // Loop over short reads: a regular file returns short only at end of file (res 0 next).
      int64_t got = 0;
      while (static_cast<size_t>(got) < r.len) {
        const ssize_t n = ::pread(r.fd, static_cast<char*>(r.buf) + got, r.len - got,
                                  static_cast<off_t>(r.offset + got));
        if (n < 0) {
          if (errno == EINTR) continue;
          got = -errno;
          break;
        }
        if (n == 0) break;
        got += n;
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        done_.push_back({r.tag, got});
      }
      cv_done_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_todo_, cv_done_;
  std::deque<IoRead> todo_;
  std::deque<IoCompletion> done_;
  size_t in_flight_ = 0;  // submitted and not yet reaped (queued, running or done)
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> make_io_uring(unsigned depth) { return std::make_unique<UringEngine>(depth); }
std::unique_ptr<IoEngine> make_io_pread(int threads) { return std::make_unique<PreadEngine>(threads); }

std::unique_ptr<IoEngine> make_io_engine(std::string_view kind) {
  if (kind == "uring") return make_io_uring();
  if (kind == "pread") return make_io_pread();
  if (kind != "auto") fail("expert I/O engine '", kind, "' is not one of: auto, uring, pread");
  try {
    return make_io_uring();
  } catch (const Error& e) {
    std::fprintf(stderr, "sluice: %s; expert reads use pread threads instead\n", e.what());
    return make_io_pread();
  }
}

}  // namespace sluice
