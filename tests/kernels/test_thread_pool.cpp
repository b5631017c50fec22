// tests/kernels/test_thread_pool: the persistent pool the cpu backend runs on: coverage of
// every index exactly once, the fixed chunking, exceptions, nesting and reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace sluice::test_thread_pool {
namespace {

TEST(ThreadPool, SizeDefaultsToHardware) {
  ThreadPool p0(0);
  EXPECT_GE(p0.size(), 1);
  ThreadPool p3(3);
  EXPECT_EQ(p3.size(), 3);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int nt : {1, 2, 3, 5}) {
    ThreadPool pool(nt);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, nt);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "nt=" << nt << " n=" << n << " i=" << i;
    }
  }
}

// The ranges handed out are exactly the fixed chunks, whichever thread claims them.
TEST(ThreadPool, ChunksAreFixed) {
  ThreadPool pool(3);
  for (int64_t n : {5, 100, 1000}) {
    const int64_t k = pool.n_chunks(n);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> got;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      std::lock_guard<std::mutex> lk(mu);
      got.emplace_back(b, e);
    });
    std::sort(got.begin(), got.end());
    ASSERT_EQ(static_cast<int64_t>(got.size()), k) << "n=" << n;
    for (int64_t c = 0; c < k; ++c) {
      EXPECT_EQ(got[static_cast<size_t>(c)].first, n * c / k);
      EXPECT_EQ(got[static_cast<size_t>(c)].second, n * (c + 1) / k);
    }
  }
}

// A slow thread does not hold up the others: they claim the remaining chunks.
TEST(ThreadPool, SlowThreadSharesWork) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(64);
  pool.parallel_for(64, [&](int64_t b, int64_t e, int t) {
    if (t == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ManyCallsBackToBack) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int it = 0; it < 20000; ++it) pool.parallel_for(4, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 4 * 20000);
}

TEST(ThreadPool, RethrowsExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(10,
                                 [&](int64_t b, int64_t, int) {
                                   if (b > 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // Still usable afterwards.
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e, int) { n += static_cast<int>(e - b); });
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t, int t) {
    pool.parallel_for(5, [&](int64_t b, int64_t e, int t2) {
      EXPECT_EQ(t, t2);
      inner += static_cast<int>(e - b);
    });
  });
  EXPECT_EQ(inner.load(), 10);
}

}  // namespace
}  // namespace sluice::test_thread_pool
