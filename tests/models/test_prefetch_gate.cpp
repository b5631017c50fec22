// tests/models/test_prefetch_gate: the stream policy's prefetch cannot make things worse
// (memory/prefetch_policy.h). The store is driven directly with synthetic routing (a skewed,
// sticky choice of 4 of 16 experts per layer, the same sequence in every run) on a synth
// qwen3moe model of 8 layers, so the predictor's quality is set by the test:
//  * a predictor that is always wrong is throttled within a step or two: hits stay those of no
//    prefetch at all, and the bytes read barely grow;
//  * a predictor that is right raises the hit rate;
//  * with either, no prefetch ever evicts an expert the current or the previous step used.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "format/gguf.h"
#include "memory/expert_stream.h"
#include "models/model.h"
#include "synth/synth.h"
#include "test_util.h"

namespace sluice::test_prefetch_gate {
namespace {

namespace fs = std::filesystem;

constexpr int kLayers = 8, kExperts = 16, kUsed = 4, kSteps = 48;

const std::string& model_path() {
  static const std::string path = [] {
    const std::string p = fs::temp_directory_path() / ("sluice_prefetch_gate_" + std::to_string(::getpid()) + ".gguf");
    SynthOptions o;
    o.arch = "qwen3moe";
    o.preset = "tiny";
    o.layers = kLayers;
    o.type = "q8_0";
    o.threads = 2;
    o.tokenizer = test::shared_dir() + "/models/stories260K.gguf";
    synth_write(o, p);
    return p;
  }();
  return path;
}

struct ModelFileCleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    fs::remove(fs::temp_directory_path() / ("sluice_prefetch_gate_" + std::to_string(::getpid()) + ".gguf"), ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new ModelFileCleanup);

// routes[step][layer]: kUsed distinct experts. Each layer has its own popularity order
// (weights 1/(1+rank)), and an expert used by the previous step is kept with probability 1/2.
std::vector<std::vector<std::vector<int32_t>>> make_routes(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> weight(kLayers, std::vector<double>(kExperts));
  for (auto& w : weight) {
    std::vector<int> order(kExperts);
    for (int e = 0; e < kExperts; ++e) order[e] = e;
    std::shuffle(order.begin(), order.end(), rng);
    for (int r = 0; r < kExperts; ++r) w[order[r]] = 1.0 / (1 + r);
  }
  std::vector<std::vector<std::vector<int32_t>>> routes(kSteps, std::vector<std::vector<int32_t>>(kLayers));
  for (int s = 0; s < kSteps; ++s)
    for (int l = 0; l < kLayers; ++l) {
      auto& r = routes[s][l];
      if (s > 0)
        for (int32_t e : routes[s - 1][l])
          if (rng() % 2) r.push_back(e);
      while (r.size() < kUsed) {
        std::discrete_distribution<int> pick(weight[l].begin(), weight[l].end());
        const int32_t e = pick(rng);
        if (std::find(r.begin(), r.end(), e) == r.end()) r.push_back(e);
      }
    }
  return routes;
}

enum class Guess { none, wrong, right };

struct SimResult {
  ExpertStats stats;
  int violations = 0;  // experts of the current or previous step that a prefetch evicted
  size_t bundle = 0;
};

SimResult simulate(Guess guess, double budget_bundles) {
  const auto routes = make_routes(42);
  size_t bundle = 0;
  {
    ModelOptions mo;
    mo.experts.policy = ExpertPolicy::stream;
    mo.experts.cache_bytes = size_t{1} << 30;
    bundle = Model::load(model_path(), mo)->experts().stats().max_bundle_bytes;
  }
  ModelOptions mo;
  mo.experts.policy = ExpertPolicy::stream;
  mo.experts.cache_bytes = static_cast<size_t>(budget_bundles * double(bundle));
  mo.experts.prefetch = guess != Guess::none;
  auto m = Model::load(model_path(), mo);
  ExpertSource& src = m->experts();
  auto* st = dynamic_cast<StreamingExperts*>(&src);
  EXPECT_NE(st, nullptr);
  SimResult res;
  res.bundle = bundle;
  for (int s = 0; s < kSteps; ++s)
    for (int l = 0; l < kLayers; ++l) {
      std::vector<ExpertUse> uses;
      for (int32_t e : routes[s][l]) uses.push_back({e, 1});
      auto batch = src.acquire(l, uses);
      int32_t x = 0;
      ExpertWeights w;
      int served = 0;
      while (batch->next(&x, &w)) {
        EXPECT_NE(w.gate.data, nullptr);
        ++served;
      }
      EXPECT_EQ(served, kUsed);
      if (guess == Guess::none || l + 1 == kLayers) continue;
      // The next layer's guess: the truth plus one wrong expert, or five wrong experts.
      const auto& truth = routes[s][l + 1];
      std::vector<int32_t> wrong;
      for (int32_t e = 0; e < kExperts; ++e)
        if (std::find(truth.begin(), truth.end(), e) == truth.end()) wrong.push_back(e);
      std::rotate(wrong.begin(), wrong.begin() + (s * 3 + l) % wrong.size(), wrong.end());
      std::vector<int32_t> g;
      if (guess == Guess::right) {
        g = truth;
        g.push_back(wrong[0]);
      } else {
        g.assign(wrong.begin(), wrong.begin() + 5);
      }
      // The working set of this step so far and of the previous one: what is cached of it now
      // must still be cached after the prefetch (this layer's batch is drained, so every
      // eviction inside prefetch() is a prefetch's).
      std::vector<std::pair<int, int32_t>> keep;
      for (int ll = 0; ll < kLayers; ++ll) {
        if (s > 0)
          for (int32_t e : routes[s - 1][ll])
            if (st->cached(ll, e)) keep.push_back({ll, e});
        if (ll <= l)
          for (int32_t e : routes[s][ll])
            if (st->cached(ll, e)) keep.push_back({ll, e});
      }
      src.prefetch(l + 1, g);
      for (auto [ll, e] : keep)
        if (!st->cached(ll, e)) ++res.violations;
    }
  res.stats = src.stats();
  return res;
}

TEST(PrefetchGate, AWrongPredictorIsThrottledAndCostsNoHits) {
  SLUICE_REQUIRE_SHARED();
  for (double budget : {20.0, 40.0}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + " bundles");
    const SimResult none = simulate(Guess::none, budget);
    const SimResult wrong = simulate(Guess::wrong, budget);
    const double requests = double(none.stats.requests);
    ASSERT_EQ(wrong.stats.requests, none.stats.requests);
    EXPECT_EQ(wrong.violations, 0);
    // Each (layer, rank) is read at most until its first outcome: 7 layers x 5 ranks.
    EXPECT_LE(wrong.stats.prefetch_reads, 7u * 5u);
    EXPECT_GT(wrong.stats.prefetch_skipped, 4 * wrong.stats.prefetch_reads);
    std::printf(
        "budget %.0f bundles, a wrong predictor: %llu read ahead, %llu declined; hits %llu vs %llu without prefetch; "
        "read %.1f vs %.1f bundles\n",
        budget, static_cast<unsigned long long>(wrong.stats.prefetch_reads),
        static_cast<unsigned long long>(wrong.stats.prefetch_skipped),
        static_cast<unsigned long long>(wrong.stats.hits), static_cast<unsigned long long>(none.stats.hits),
        double(wrong.stats.bytes_read) / double(none.bundle), double(none.stats.bytes_read) / double(none.bundle));
    EXPECT_GE(double(wrong.stats.hits), double(none.stats.hits) - 0.01 * requests)
        << "hits " << wrong.stats.hits << " vs " << none.stats.hits << " of " << requests;
    EXPECT_LE(wrong.stats.bytes_read, none.stats.bytes_read + 7 * 5 * 3 * none.bundle)
        << wrong.stats.bytes_read << " vs " << none.stats.bytes_read;
    EXPECT_LE(wrong.stats.cache_peak_bytes, static_cast<size_t>(budget * double(none.bundle)));
  }
}

TEST(PrefetchGate, ARightPredictorRaisesTheHitRateWithoutEvictingTheWorkingSet) {
  SLUICE_REQUIRE_SHARED();
  for (double budget : {20.0, 40.0, 80.0}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + " bundles");
    const SimResult none = simulate(Guess::none, budget);
    const SimResult right = simulate(Guess::right, budget);
    EXPECT_EQ(right.violations, 0);
    EXPECT_GT(right.stats.prefetch_reads, 0u);
    EXPECT_GT(right.stats.prefetch_hits, 0u);
    EXPECT_GT(right.stats.hits, none.stats.hits) << "of " << none.stats.requests;
    EXPECT_LE(right.stats.cache_peak_bytes, static_cast<size_t>(budget * double(none.bundle)));
    std::printf(
        "budget %.0f bundles: hit rate %.1f%% without prefetch, %.1f%% with a right predictor (%llu read ahead, %llu declined)\n",
        budget, 100 * none.stats.hit_rate(), 100 * right.stats.hit_rate(),
        static_cast<unsigned long long>(right.stats.prefetch_reads),
        static_cast<unsigned long long>(right.stats.prefetch_skipped));
  }
}

}  // namespace
}  // namespace sluice::test_prefetch_gate
