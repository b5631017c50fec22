// tests/unit/test_expert_cache: the streaming cache's bookkeeping — the budget is never
// exceeded (counting page-rounded buffers), held / loading / pinned entries are never evicted,
// a request that cannot be met evicts nothing, and eviction is SLRU (used-once experts go first).
#include <gtest/gtest.h>

#include <random>

#include "core/expert_cache.h"

namespace sluice {
namespace {

using State = ExpertCache::State;

ExpertCache::Entry* ready(ExpertCache& c, int layer, int expert, size_t bytes, bool prefetch_only = false) {
  ExpertCache::Entry* e = c.insert(layer, expert, bytes, prefetch_only);
  if (e) e->state = State::ready;
  return e;
}

TEST(ExpertCache, CountsPageRoundedBytesAndNeverExceedsBudget) {
  const size_t pg = ExpertCache::slot_bytes(1);
  EXPECT_EQ(pg, ExpertCache::slot_bytes(pg));
  EXPECT_EQ(2 * pg, ExpertCache::slot_bytes(pg + 1));
  ExpertCache c(10 * pg);
  ASSERT_NE(ready(c, 0, 0, 3 * pg - 5), nullptr);  // 3 pages
  EXPECT_EQ(c.used(), 3 * pg);

  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const int layer = static_cast<int>(rng() % 4), expert = static_cast<int>(rng() % 16);
    if (ExpertCache::Entry* e = c.find(layer, expert)) {
      c.mark_used(e);
    } else {
      const size_t bytes = 1 + rng() % (4 * pg);  // 1..4 pages
      ExpertCache::Entry* n = ready(c, layer, expert, bytes);
      ASSERT_NE(n, nullptr) << "nothing is held, so room can always be made";
      // The buffer is really there and writable, over its whole rounded size.
      n->buf[0] = 1;
      n->buf[n->bytes - 1] = 2;
    }
    ASSERT_LE(c.used(), c.budget());
  }
  EXPECT_LE(c.peak(), c.budget());
  EXPECT_GT(c.evictions(), 0u);
}

TEST(ExpertCache, HeldLoadingAndPinnedEntriesAreNeverEvicted) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(3 * pg);
  ExpertCache::Entry* held = ready(c, 0, 0, pg);
  ExpertCache::Entry* loading = c.insert(0, 1, pg, false);  // a read in flight
  ExpertCache::Entry* pinned = ready(c, 0, 2, pg);
  held->holds = 1;
  pinned->pinned = true;
  ASSERT_NE(loading, nullptr);
  EXPECT_EQ(loading->state, State::loading);
  // Full, and nothing evictable: the request fails and evicts nothing.
  EXPECT_EQ(c.insert(1, 0, pg, false), nullptr);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.evictions(), 0u);
  // Release the hold: now it is the victim.
  held->holds = 0;
  ASSERT_NE(ready(c, 1, 0, pg), nullptr);
  EXPECT_EQ(c.find(0, 0), nullptr);
  EXPECT_NE(c.find(0, 1), nullptr);
  EXPECT_NE(c.find(0, 2), nullptr);
  // Larger than the budget: never.
  EXPECT_EQ(c.insert(2, 0, 4 * pg, false), nullptr);
}

TEST(ExpertCache, ARequestThatCannotBeMetEvictsNothing) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(4 * pg);
  ready(c, 0, 0, pg);
  ready(c, 0, 1, pg)->holds = 1;
  ready(c, 0, 2, pg)->holds = 1;
  ready(c, 0, 3, pg);
  // Needs 3 pages; only 2 are evictable.
  EXPECT_EQ(c.insert(1, 0, 3 * pg, false), nullptr);
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.evictions(), 0u);
}

TEST(ExpertCache, SlruEvictsUsedOnceExpertsBeforeReusedOnes) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(4 * pg);
  for (int e = 0; e < 4; ++e) c.mark_used(ready(c, 0, e, pg));
  // Expert 0 is used again: protected. The others were used once.
  c.mark_used(c.find(0, 0));
  // Three new experts push out 1, 2, 3 (probationary, LRU first), not 0, though 0 is older.
  for (int e = 10; e < 13; ++e) c.mark_used(ready(c, 0, e, pg));
  EXPECT_NE(c.find(0, 0), nullptr);
  EXPECT_EQ(c.find(0, 1), nullptr);
  EXPECT_EQ(c.find(0, 2), nullptr);
  EXPECT_EQ(c.find(0, 3), nullptr);
  // A prefetch may not push out a protected expert: with only 0 protected and the rest held,
  // there is no room for it.
  for (int e = 10; e < 13; ++e) c.find(0, e)->holds = 1;
  EXPECT_EQ(c.insert(0, 20, pg, /*probationary_only=*/true), nullptr);
  // A demand load may.
  EXPECT_NE(c.insert(0, 20, pg, /*probationary_only=*/false), nullptr);
  EXPECT_EQ(c.find(0, 0), nullptr);
}

TEST(ExpertCache, ABufferOfTheSameSizeIsReused) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(2 * pg);
  uint8_t* b0 = ready(c, 0, 0, 2 * pg)->buf;
  uint8_t* b1 = ready(c, 0, 1, 2 * pg)->buf;  // evicts 0, takes its mapping
  EXPECT_EQ(b0, b1);
  EXPECT_EQ(c.used(), 2 * pg);
}

TEST(ExpertCache, EraseDropsAFailedLoad) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(2 * pg);
  ExpertCache::Entry* e = c.insert(3, 4, pg, false);
  c.erase(e);
  EXPECT_EQ(c.find(3, 4), nullptr);
  EXPECT_EQ(c.used(), 0u);
}

}  // namespace
}  // namespace sluice

// ---- the policy over other slot allocators (the VRAM expert tier) ----------------------

namespace sluice {
namespace {

// Stands in for device memory: 2 MiB allocation granularity (as cudaMalloc's large-page
// pools), addresses that are never dereferenced, every live byte accounted.
class FakeDeviceAllocator final : public ExpertSlotAllocator {
 public:
  static constexpr size_t kGrain = size_t{2} << 20;
  struct Counters {
    size_t live = 0, peak = 0;
    int allocs = 0, releases = 0;
  };
  explicit FakeDeviceAllocator(Counters* c) : c_(c) {}
  size_t slot_bytes(size_t bytes) const override { return (bytes + kGrain - 1) / kGrain * kGrain; }
  uint8_t* allocate(size_t bytes) override {
    c_->live += bytes;
    c_->peak = std::max(c_->peak, c_->live);
    ++c_->allocs;
    next_ += bytes;
    return reinterpret_cast<uint8_t*>(next_);
  }
  void release(uint8_t*, size_t bytes) override {
    c_->live -= bytes;
    ++c_->releases;
  }
  bool host_visible() const override { return false; }

 private:
  Counters* c_;
  uintptr_t next_ = uintptr_t{1} << 40;
};

TEST(ExpertCachePolicy, DeviceSlotsKeepTheBudgetAndReleaseEverything) {
  FakeDeviceAllocator::Counters n;
  {
    const size_t grain = FakeDeviceAllocator::kGrain;
    ExpertCache c(10 * grain, std::make_unique<FakeDeviceAllocator>(&n));
    EXPECT_EQ(c.slot_size(1), grain);
    EXPECT_EQ(c.slot_size(grain + 1), 2 * grain);
    std::mt19937 rng(3);
    for (int i = 0; i < 3000; ++i) {
      const int layer = static_cast<int>(rng() % 48), expert = static_cast<int>(rng() % 8);
      if (ExpertCache::Entry* e = c.find(layer, expert)) {
        c.mark_used(e);
        continue;
      }
      ExpertCache::Entry* e = c.insert(layer, expert, 1 + rng() % (3 * grain), false);
      ASSERT_NE(e, nullptr);
      e->state = State::ready;
      // Device slots are not host memory: nothing registers them as refillable host buffers.
      EXPECT_EQ(host_buffer_generation(e->buf), 0u);
      ASSERT_LE(c.used(), c.budget());
      ASSERT_EQ(n.live, c.used());
    }
    EXPECT_GT(c.evictions(), 0u);
    EXPECT_LE(n.peak, 10 * grain);
  }
  EXPECT_EQ(n.live, 0u);
  EXPECT_EQ(n.allocs, n.releases);
}

// The hot set: pinned experts (chosen by routing counts) survive any amount of churn, and the
// experts the decode keeps returning to (used twice) outlive one-off ones.
TEST(ExpertCachePolicy, PinnedHotSetAndFrequencySurviveChurn) {
  FakeDeviceAllocator::Counters n;
  const size_t grain = FakeDeviceAllocator::kGrain;
  ExpertCache c(8 * grain, std::make_unique<FakeDeviceAllocator>(&n));
  for (int e = 0; e < 2; ++e) {
    ExpertCache::Entry* p = c.insert(0, e, grain, false);
    p->state = State::ready;
    p->pinned = true;
  }
  ExpertCache::Entry* hot = c.insert(1, 0, grain, false);
  hot->state = State::ready;
  c.mark_used(hot);
  c.mark_used(hot);  // second use: protected
  for (int i = 0; i < 200; ++i) {
    ExpertCache::Entry* e = c.insert(2 + i, 0, grain, false);
    ASSERT_NE(e, nullptr);
    e->state = State::ready;
    c.mark_used(e);
    if (i % 3 == 0) c.mark_used(c.find(1, 0));  // the decode comes back to the hot expert
  }
  EXPECT_NE(c.find(0, 0), nullptr);
  EXPECT_NE(c.find(0, 1), nullptr);
  EXPECT_NE(c.find(1, 0), nullptr);
  EXPECT_LE(c.used(), c.budget());
}

// Keyed by (layer, expert), not by address: the same slot serves different experts over time,
// and the host registry tells a consumer of a host slot that its contents changed.
TEST(ExpertCachePolicy, HostSlotRefillChangesTheGeneration) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(2 * pg);
  ExpertCache::Entry* a = c.insert(0, 0, 2 * pg, false);
  a->state = State::ready;
  uint8_t* buf = a->buf;
  const uint64_t g0 = host_buffer_generation(buf + 5);
  EXPECT_NE(g0, 0u);
  EXPECT_EQ(host_buffer_generation(buf + 2 * pg), 0u) << "one past the slot is not in it";
  ExpertCache::Entry* b = c.insert(0, 1, 2 * pg, false);  // evicts (0,0), reuses its slot
  ASSERT_EQ(b->buf, buf);
  EXPECT_EQ(c.find(0, 0), nullptr);
  const uint64_t g1 = host_buffer_generation(buf);
  EXPECT_NE(g1, 0u);
  EXPECT_NE(g1, g0);
  c.erase(b);
  EXPECT_EQ(host_buffer_generation(buf), 0u);
  int stable = 0;
  EXPECT_EQ(host_buffer_generation(&stable), 0u);
}

}  // namespace
}  // namespace sluice
