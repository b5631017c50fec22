// tests/unit/test_expert_cache: the streaming cache's bookkeeping — the budget is never
// exceeded (counting page-rounded buffers), held / loading / pinned entries are never evicted,
// a request that cannot be met evicts nothing, and eviction is SLRU (used-once experts go first).
#include <gtest/gtest.h>

#include <random>

#include "runtime/expert_cache.h"

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
