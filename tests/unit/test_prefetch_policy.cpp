// tests/unit/test_prefetch_policy: the prefetch gate of the stream policy on its own — which
// cached experts a prefetch may evict, how the rolling precision per (layer, rank) and the
// regret of prefetch evictions are learned, and the resulting read-or-skip decision
// p·t·B > (1 − p)·(B + r·V) (memory/prefetch_policy.h).
#include <gtest/gtest.h>

#include <vector>

#include "memory/prefetch_policy.h"

namespace sluice {
namespace {

constexpr size_t kB = 1 << 20;  // one bundle

TEST(PrefetchPolicy, VictimsAreColdUsedOnceProbationaryEntriesOnly) {
  ExpertCache::Entry e;
  e.uses = 1;
  e.last_step = 10;
  EXPECT_FALSE(PrefetchPolicy::may_evict(e, 10)) << "used by the current step";
  EXPECT_FALSE(PrefetchPolicy::may_evict(e, 11)) << "used by the previous step";
  EXPECT_TRUE(PrefetchPolicy::may_evict(e, 12)) << "cold";
  e.uses = 2;
  EXPECT_FALSE(PrefetchPolicy::may_evict(e, 50)) << "reused: worth more than a guess";
  e.uses = 0;
  e.in_protected = true;
  EXPECT_FALSE(PrefetchPolicy::may_evict(e, 50)) << "protected";
  e.in_protected = false;
  e.last_step = 0;  // a wrong guess after its layer ran
  EXPECT_TRUE(PrefetchPolicy::may_evict(e, 2));
}

// The rule as the cache applies it: with the cache full of recent and reused experts a
// prefetch finds no room and evicts nothing; a cold used-once expert, or a wrong guess, is taken.
TEST(PrefetchPolicy, TheCacheTakesOnlyColdUsedOnceVictimsForAPrefetch) {
  const size_t pg = ExpertCache::slot_bytes(1);
  ExpertCache c(4 * pg);
  const uint64_t step = 10;
  auto add = [&](int expert, uint64_t last_step, int uses) {
    ExpertCache::Entry* e = c.insert(0, expert, pg, false);
    e->state = ExpertCache::State::ready;
    for (int i = 0; i < uses; ++i) c.mark_used(e);
    e->last_step = last_step;
    return e;
  };
  add(0, step - 1, 1);  // the previous step's
  add(1, step, 1);      // this step's
  add(2, 3, 2);         // old but reused (protected)
  ExpertCache::Entry* pinned = add(3, 0, 0);
  pinned->pinned = true;
  const auto rule = PrefetchPolicy::victim_rule(step);
  std::vector<ExpertCache::Entry*> victims;
  EXPECT_FALSE(c.plan_eviction(pg, rule, &victims));
  EXPECT_EQ(c.insert(1, 0, pg, rule), nullptr);
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.evictions(), 0u);
  // A demand load may evict (the least recently used probationary entry).
  ASSERT_NE(c.insert(1, 1, pg, false), nullptr);
  EXPECT_EQ(c.find(0, 0), nullptr);
  // Step 12: expert 1 (last used in step 10) is cold now; the demand-loaded (1, 1) is not held
  // but was stamped 0 (never used, e.g. a wrong guess): both are fair game, LRU first.
  const auto later = PrefetchPolicy::victim_rule(step + 2);
  ASSERT_TRUE(c.plan_eviction(pg, later, &victims));
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0]->expert, 1);
  ExpertCache::Entry* taken = c.insert(1, 2, pg, later);
  ASSERT_NE(taken, nullptr);
  taken->state = ExpertCache::State::ready;
  EXPECT_EQ(c.find(0, 1), nullptr);
  EXPECT_NE(c.find(0, 2), nullptr) << "protected";
  EXPECT_NE(c.find(0, 3), nullptr) << "pinned";
  // The scan is bounded: with max_scan 1 only the LRU-most probationary entry (the pinned one)
  // is looked at; with the default bound the scan reaches (1, 2), (1, 1) being held.
  ExpertCache::VictimRule one = later;
  one.max_scan = 1;
  c.find(1, 1)->holds = 1;
  EXPECT_FALSE(c.plan_eviction(pg, one, &victims));
  ASSERT_TRUE(c.plan_eviction(pg, later, &victims));
  ASSERT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims[0]->layer, 1);
  EXPECT_EQ(victims[0]->expert, 2);
}

TEST(PrefetchPolicy, PrecisionIsLearnedPerLayerAndRank) {
  PrefetchPolicy p(4, kB);
  EXPECT_DOUBLE_EQ(p.precision(1, 0), PrefetchPolicy::kPriorP);
  // Layer 1: rank 0 always right, rank 5 always wrong; layer 2 the other way round.
  for (int step = 0; step < 64; ++step) {
    const std::vector<int32_t> pred{7, 1, 2, 3, 4, 9};
    p.score(1, pred, std::vector<int32_t>{7, 1, 2, 3});
    p.score(2, std::vector<int32_t>{9, 1, 2, 3, 4, 7}, std::vector<int32_t>{1, 2, 3, 7});
  }
  EXPECT_GT(p.precision(1, 0), 0.95);
  EXPECT_LT(p.precision(1, 5), 0.05);
  EXPECT_LT(p.precision(2, 0), 0.05);
  EXPECT_GT(p.precision(2, 5), 0.95);
  EXPECT_DOUBLE_EQ(p.precision(3, 0), PrefetchPolicy::kPriorP) << "an unscored layer keeps the prior";
  // With free space (no victims) a guess is read when p > 1/2.
  EXPECT_TRUE(p.worth_it(1, 0, kB, 0));
  EXPECT_FALSE(p.worth_it(1, 5, kB, 0));
  // Ranks past kRanks share the last slot.
  EXPECT_DOUBLE_EQ(p.precision(1, PrefetchPolicy::kRanks + 3), p.precision(1, PrefetchPolicy::kRanks - 1));
}

TEST(PrefetchPolicy, AColdStartLearnsFromTheFirstOutcome) {
  PrefetchPolicy p(2, kB);
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0));
  p.score(0, std::vector<int32_t>{3}, std::vector<int32_t>{1, 2});  // one wrong guess
  EXPECT_FALSE(p.worth_it(0, 0, kB, 0)) << "precision " << p.precision(0, 0);
  // A throttled rank is still scored (predictions are scored whether read or not) and reopens.
  for (int i = 0; i < 4; ++i) p.score(0, std::vector<int32_t>{1}, std::vector<int32_t>{1, 2});
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0)) << "precision " << p.precision(0, 0);
}

TEST(PrefetchPolicy, EvictionsThatComeBackAsMissesStopPrefetch) {
  PrefetchPolicy p(2, kB);
  // A guess right 3 times in 5: worth reading into free space (p > 1/2), but not worth evicting
  // a bundle that comes back as a miss (r near 1 needs p > (1+r)/(2+r), about 2/3).
  const bool pattern[5] = {true, false, true, true, false};
  for (int s = 0; s < 80; ++s) p.score(0, std::vector<int32_t>{pattern[s % 5] ? 1 : 9}, std::vector<int32_t>{1, 2, 3});
  const double prec = p.precision(0, 0);
  ASSERT_GT(prec, 0.54);
  ASSERT_LT(prec, 0.64);
  EXPECT_DOUBLE_EQ(p.regret(), PrefetchPolicy::kPriorR);
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0));
  // Every victim is asked for again two steps later: r -> 1.
  uint64_t step = 2;
  for (int i = 0; i < 64; ++i, ++step) {
    p.new_step(step);
    ExpertCache::Entry v;
    v.layer = 1;
    v.expert = i % 16;
    v.bytes = kB;
    p.note_prefetch_victim(v, step);
    if (i >= 2) p.note_demand_miss(1, (i - 2) % 16, step);
  }
  EXPECT_GT(p.regret(), 0.8);
  EXPECT_GT(p.regretted_bytes(), 50 * kB);
  EXPECT_FALSE(p.worth_it(0, 0, kB, kB));
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0)) << "free space costs no victim";
  // A guess that is nearly always right still pays: its victim would have gone to the demand read.
  PrefetchPolicy good(2, kB);
  for (int s = 0; s < 40; ++s) good.score(0, std::vector<int32_t>{1}, std::vector<int32_t>{1, 2, 3});
  EXPECT_TRUE(good.worth_it(0, 0, kB, 4 * kB));
  // Victims nobody asks for again within kGhostSteps are judged harmless: r falls again.
  for (int i = 0; i < 200; ++i, ++step) {
    p.new_step(step);
    ExpertCache::Entry v;
    v.layer = 1;
    v.expert = 100 + i;
    v.bytes = kB;
    p.note_prefetch_victim(v, step);
  }
  EXPECT_LT(p.regret(), 0.15);  // the prior (1/2 over 8 bundles) against ~32 judged bundles
  EXPECT_TRUE(p.worth_it(0, 0, kB, kB));
}

TEST(PrefetchPolicy, ReadAheadsThatLandLateCloseTheGateForAWhile) {
  PrefetchPolicy p(2, kB);
  // Right 4 times in 5.
  for (int s = 0; s < 80; ++s) p.score(0, std::vector<int32_t>{s % 5 ? 1 : 9}, std::vector<int32_t>{1, 2, 3});
  ASSERT_GT(p.precision(0, 0), 0.7);
  ASSERT_LT(p.precision(0, 0), 0.9);
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0));
  // Right guesses, but still in flight when their layer asks: the forward waits for them anyway,
  // and the one wrong guess in five is pure waste.
  for (int i = 0; i < 64; ++i) p.note_prefetch_use(false);
  EXPECT_LT(p.timeliness(), 0.05);
  EXPECT_FALSE(p.worth_it(0, 0, kB, 0));
  // Nothing read ahead for a while: t drifts back and the gate tries again.
  uint64_t step = 2;
  for (int i = 0; i < 64; ++i) p.new_step(step++);
  EXPECT_TRUE(p.worth_it(0, 0, kB, 0)) << "t " << p.timeliness();
  for (int i = 0; i < 64; ++i) p.note_prefetch_use(true);
  EXPECT_GT(p.timeliness(), 0.95);
}

TEST(PrefetchPolicy, AMissLongAfterTheEvictionIsNoRegret) {
  PrefetchPolicy p(2, kB);
  ExpertCache::Entry v;
  v.layer = 0;
  v.expert = 5;
  v.bytes = kB;
  p.note_prefetch_victim(v, 10);
  p.note_demand_miss(0, 5, 10 + PrefetchPolicy::kGhostSteps + 1);
  EXPECT_EQ(p.regretted_bytes(), 0u);
  p.note_prefetch_victim(v, 30);
  p.note_demand_miss(0, 5, 31);
  EXPECT_EQ(p.regretted_bytes(), kB);
}

}  // namespace
}  // namespace sluice
