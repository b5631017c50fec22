// tests/unit/test_sampling: the sampler chain on hand-made logits: greedy, seeding, each
// filter's kept set, temperature, penalties, and an empirical check of the final distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "runtime/session.h"
#include "sampling/sampler.h"

namespace sluice {
namespace {

SamplerParams plain(uint64_t seed = 1) {
  // Every filter off, temperature 1: sampling from softmax(logits) exactly.
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<double> softmax(const std::vector<float>& l, double temp = 1.0) {
  double mx = -INFINITY;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - mx) / temp);
  for (double& x : p) x /= s;
  return p;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits.data(), static_cast<int32_t>(logits.size()))];
  return h;
}

std::set<int32_t> kept_ids(const Candidates& c) {
  std::set<int32_t> s;
  for (const auto& t : c.data) s.insert(t.id);
  return s;
}

Candidates make(const std::vector<float>& logits) {
  Candidates c;
  for (size_t i = 0; i < logits.size(); ++i) c.data.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
  return c;
}

TEST(SamplingRng, DeterministicAndUniform) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs = differs || x != c.next_u64();
  }
  EXPECT_TRUE(differs);
  // Pinned outputs: the stream is part of the reproducibility contract (a seed must give the
  // same text on every platform), so a change here must be deliberate. Values from an
  // independent Python transcription of SplitMix64 + xoshiro256** (prng.di.unimi.it); its
  // SplitMix64(0) first output 0xe220a8397b1dcdaf matches the published reference.
  Rng z(0);
  EXPECT_EQ(z.next_u64(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(z.next_u64(), 0xbf6e1f784956452aull);
  EXPECT_EQ(z.next_u64(), 0x1a5f849d4933e6e0ull);
  double sum = 0, mn = 1, mx = 0;
  Rng u(7);
  for (int i = 0; i < 100000; ++i) {
    const double d = u.next_double();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    sum += d;
    mn = std::min(mn, d);
    mx = std::max(mx, d);
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // stderr of the mean = 0.29/sqrt(1e5) ~ 0.0009
  EXPECT_LT(mn, 1e-3);
  EXPECT_GT(mx, 1 - 1e-3);
}

TEST(SamplingGreedy, ArgmaxLowestIdOnTies) {
  SamplerParams p = plain();
  p.temp = 0.0f;
  Sampler s(p);
  const std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l.data(), 5), 1);
  p.temp = -1.0f;
  Sampler s2(p);
  const std::vector<float> all_equal(7, 0.5f);
  EXPECT_EQ(s2.sample(all_equal.data(), 7), 0);
}

TEST(SamplingGreedy, TopK1EqualsGreedy) {
  SamplerParams p = plain(123);
  p.top_k = 1;
  Sampler s(p);
  SamplerParams g = plain();
  g.temp = 0.0f;
  Sampler greedy(g);
  Rng r(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> l(32);
    for (float& x : l) x = static_cast<float>(r.next_double() * 10 - 5);
    EXPECT_EQ(s.sample(l.data(), 32), greedy.sample(l.data(), 32));
  }
}

TEST(SamplingSeed, SameSeedSameSequenceDifferentSeedDiffers) {
  const std::vector<float> l = {1.0f, 1.2f, 0.8f, 1.1f, 0.9f, 1.0f, 1.05f, 0.95f};
  const auto run = [&](uint64_t seed) {
    Sampler s(plain(seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l.data(), 8));
    return out;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
  // reset() restarts the stream.
  Sampler s(plain(9));
  std::vector<int32_t> a, b;
  for (int i = 0; i < 32; ++i) a.push_back(s.sample(l.data(), 8));
  s.reset();
  for (int i = 0; i < 32; ++i) b.push_back(s.sample(l.data(), 8));
  EXPECT_EQ(a, b);
}

TEST(SamplingTopK, KeepsKLargest) {
  Candidates c = make({0.0f, 5.0f, 1.0f, 4.0f, 3.0f, 2.0f});
  TopKStage(3).apply(c);
  EXPECT_EQ(kept_ids(c), (std::set<int32_t>{1, 3, 4}));
  Candidates all = make({1.0f, 2.0f});
  TopKStage(0).apply(all);
  EXPECT_EQ(all.data.size(), 2u);
  // Through the sampler: excluded ids never appear, kept ones do.
  SamplerParams p = plain(3);
  p.top_k = 3;
  Sampler s(p);
  const auto h = histogram(s, {0.0f, 5.0f, 1.0f, 4.0f, 3.0f, 2.0f}, 20000);
  EXPECT_EQ(h.size(), 3u);
  for (int32_t id : {1, 3, 4}) EXPECT_GT(h.count(id) ? h.at(id) : 0, 0) << id;
}

// keep_top (selection, then a sort of the kept) against the full sort truncated, on a
// vocabulary-sized row with many exact ties, for several k; and a stage after it sees the
// same sorted entries.
TEST(SamplingTopK, SelectionEqualsFullSortWithTies) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(-50, 50);  // few distinct values: ties everywhere
  std::vector<float> l(151936);
  for (auto& v : l) v = static_cast<float>(coarse(rng)) * 0.25f;
  for (size_t k : {size_t{1}, size_t{2}, size_t{40}, size_t{1000}, l.size() - 1, l.size(), l.size() + 5}) {
    Candidates fast = make(l), full = make(l);
    fast.keep_top(k);
    full.sort_desc();
    full.data.erase(full.data.begin() + static_cast<std::ptrdiff_t>(std::min(k, full.data.size())), full.data.end());
    ASSERT_EQ(fast.data.size(), full.data.size()) << k;
    EXPECT_TRUE(fast.sorted);
    for (size_t i = 0; i < full.data.size(); ++i) {
      ASSERT_EQ(fast.data[i].id, full.data[i].id) << "k " << k << " entry " << i;
      ASSERT_EQ(fast.data[i].logit, full.data[i].logit);
    }
  }
  // Negative control: a selection without the id tie-break keeps other ids among the ties.
  Candidates c = make(l);
  std::nth_element(c.data.begin(), c.data.begin() + 40, c.data.end(),
                   [](const TokenCandidate& a, const TokenCandidate& b) { return a.logit > b.logit; });
  Candidates want = make(l);
  want.keep_top(40);
  std::set<int32_t> got_ids, want_ids;
  for (int i = 0; i < 40; ++i) got_ids.insert(c.data[static_cast<size_t>(i)].id);
  for (const auto& t : want.data) want_ids.insert(t.id);
  EXPECT_NE(got_ids, want_ids);
}

// assign_top writes only the threshold pass's survivors; keep_top then gives what it gives from
// the whole vocabulary (ties everywhere, and a smooth distribution), and the sampler's draws
// with top-k first (no penalties) are those of the same chain over the whole vocabulary.
TEST(SamplingTopK, AssignTopEqualsTheWholeVocabulary) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> coarse(-50, 50);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (bool ties : {true, false}) {
    std::vector<float> l(151936);
    for (auto& v : l) v = ties ? static_cast<float>(coarse(rng)) * 0.25f : nd(rng);
    for (size_t k : {size_t{1}, size_t{40}, size_t{1000}, l.size() / 8, l.size() + 5}) {
      SCOPED_TRACE("ties " + std::to_string(ties) + " k " + std::to_string(k));
      Candidates fast, full = make(l);
      fast.assign_top(l.data(), l.size(), k);
      if (8 * k + 512 < l.size()) {
        EXPECT_LE(fast.data.size(), 4 * k + 64);  // the pass ran: survivors only
      }
      fast.keep_top(k);
      full.keep_top(k);
      ASSERT_EQ(fast.data.size(), full.data.size());
      for (size_t i = 0; i < full.data.size(); ++i) {
        ASSERT_EQ(fast.data[i].id, full.data[i].id) << "entry " << i;
        ASSERT_EQ(fast.data[i].logit, full.data[i].logit);
      }
    }
  }
}

TEST(SamplingTopP, KeepsSmallestPrefixReachingP) {
  // probs 0.5, 0.25, 0.125, 0.0625, 0.0625 (logits = ln p).
  const std::vector<float> l = {std::log(0.0625f), std::log(0.5f), std::log(0.125f), std::log(0.25f),
                                std::log(0.0625f)};
  const auto kept = [&](float top_p) {
    Candidates c = make(l);
    TopPStage(top_p).apply(c);
    return kept_ids(c);
  };
  EXPECT_EQ(kept(0.45f), (std::set<int32_t>{1}));             // 0.5 alone reaches 0.45
  EXPECT_EQ(kept(0.6f), (std::set<int32_t>{1, 3}));           // 0.75
  EXPECT_EQ(kept(0.8f), (std::set<int32_t>{1, 3, 2}));        // 0.875
  EXPECT_EQ(kept(0.1f), (std::set<int32_t>{1}));              // at least one
  EXPECT_EQ(kept(1.0f), (std::set<int32_t>{0, 1, 2, 3, 4}));  // off
  SamplerParams p = plain(4);
  p.top_p = 0.8f;
  Sampler s(p);
  const auto h = histogram(s, l, 20000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.count(0) + h.count(4), 0u);
  for (int32_t id : {1, 2, 3}) EXPECT_GT(h.count(id), 0u) << id;
}

// The full-sort reference of the nucleus and the draw: every entry sorted (descending logit,
// ties by id), p in double over all of them, then the running sums.
std::vector<int32_t> sorted_ids(const std::vector<float>& l) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  return ids;
}

// Over a vocabulary-sized row (where the nucleus and the draw sort only as far as they walk),
// the kept set and the drawn tokens equal the full-sort reference's, for nuclei of one entry to
// thousands, with ties; and a draw's u picks the entry whose running sum first passes it.
TEST(SamplingTopP, PartialWalkEqualsFullSortOnAVocabulary) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> l(151936);
  for (float sigma : {0.5f, 3.0f, 12.0f}) {
    for (auto& v : l) v = std::round(n01(rng) * sigma * 8.0f) / 8.0f;  // coarse: ties everywhere
    const auto ids = sorted_ids(l);
    const auto p = softmax(l);
    for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f}) {
      double cum = 0;
      size_t keep = ids.size();
      for (size_t i = 0; i < ids.size(); ++i)
        if ((cum += static_cast<float>(p[static_cast<size_t>(ids[i])])) >= top_p) {
          keep = i + 1;
          break;
        }
      Candidates c = make(l);
      TopPStage(top_p).apply(c);
      ASSERT_EQ(c.data.size(), keep) << "sigma " << sigma << " top_p " << top_p;
      EXPECT_TRUE(c.sorted);
      for (size_t i = 0; i < keep; ++i) ASSERT_EQ(c.data[i].id, ids[i]) << i;
    }
    // The draw with every filter off walks the whole row: the same u gives the reference's pick.
    Sampler s(plain(5));
    Rng r(5);
    for (int d = 0; d < 20; ++d) {
      const double u = r.next_double();
      double cum = 0;
      int32_t want = ids.back();
      for (int32_t id : ids)
        if (u < (cum += static_cast<float>(p[static_cast<size_t>(id)]))) {
          want = id;
          break;
        }
      ASSERT_EQ(s.sample(l.data(), static_cast<int32_t>(l.size())), want) << "sigma " << sigma << " draw " << d;
    }
  }
  // Negative control: the reference's cut moves when one entry of the nucleus is dropped.
  for (auto& v : l) v = n01(rng) * 3.0f;
  Candidates c = make(l);
  TopPStage(0.5f).apply(c);
  std::vector<float> l2 = l;
  l2[static_cast<size_t>(c.data[0].id)] = -1e9f;
  Candidates c2 = make(l2);
  TopPStage(0.5f).apply(c2);
  EXPECT_NE(c.data.size(), c2.data.size());
}

TEST(SamplingMinP, KeepsProbsAboveFractionOfMax) {
  // probs 0.4, 0.3, 0.2, 0.1 -> min_p 0.5 keeps p >= 0.2: ids with 0.4, 0.3, 0.2.
  const std::vector<float> l = {std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)};
  Candidates c = make(l);
  MinPStage(0.45f).apply(c);
  EXPECT_EQ(kept_ids(c), (std::set<int32_t>{1, 2, 3}));  // 0.45*0.4 = 0.18 <= 0.2
  Candidates c2 = make(l);
  MinPStage(0.6f).apply(c2);
  EXPECT_EQ(kept_ids(c2), (std::set<int32_t>{1, 3}));  // 0.24 <= 0.3
  Candidates c3 = make(l);
  MinPStage(0.0f).apply(c3);
  EXPECT_EQ(c3.data.size(), 4u);
  SamplerParams p = plain(5);
  p.min_p = 0.6f;
  Sampler s(p);
  const auto h = histogram(s, l, 20000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h.count(1), 0u);
  EXPECT_GT(h.count(3), 0u);
}

TEST(SamplingTemperature, ScalesLogitsAndSharpens) {
  Candidates c = make({1.0f, 2.0f, -3.0f});
  TemperatureStage(0.5f).apply(c);
  EXPECT_FLOAT_EQ(c.data[0].logit, 2.0f);
  EXPECT_FLOAT_EQ(c.data[1].logit, 4.0f);
  EXPECT_FLOAT_EQ(c.data[2].logit, -6.0f);
  // The sampled distribution after temperature T is softmax(logits / T).
  const std::vector<float> l = {1.0f, 1.5f, 0.5f, 0.0f};
  SamplerParams p = plain(6);
  p.temp = 0.5f;
  Sampler s(p);
  s.sample(l.data(), 4);
  const auto want = softmax(l, 0.5);
  for (const auto& t : s.last_candidates().data) EXPECT_NEAR(t.p, want[t.id], 1e-6);
  // Sharper: the top token's empirical frequency rises as T falls.
  Sampler cold(p);
  Sampler warm(plain(6));
  const int n = 20000;
  const int top_cold = histogram(cold, l, n)[1];
  const int top_warm = histogram(warm, l, n)[1];
  EXPECT_GT(top_cold, top_warm);
  EXPECT_NEAR(top_cold / double(n), want[1], 0.02);
  EXPECT_NEAR(top_warm / double(n), softmax(l)[1], 0.02);
}

TEST(SamplingPenalties, ChangeLogitsByDocumentedAmount) {
  // repeat 2, frequency 0.5, presence 0.25 on history {1, 1, 2} (window 64).
  PenaltiesStage pen(64, 2.0f, 0.5f, 0.25f);
  for (int32_t t : {1, 1, 2}) pen.accept(t);
  Candidates c = make({3.0f, 4.0f, -1.0f, 0.0f});
  pen.apply(c);
  EXPECT_FLOAT_EQ(c.data[0].logit, 3.0f);                          // never seen
  EXPECT_FLOAT_EQ(c.data[1].logit, 4.0f / 2 - 2 * 0.5f - 0.25f);   // positive: divided; count 2
  EXPECT_FLOAT_EQ(c.data[2].logit, -1.0f * 2 - 1 * 0.5f - 0.25f);  // negative: multiplied; count 1
  EXPECT_FLOAT_EQ(c.data[3].logit, 0.0f);
  // Entries out of id order (the lookup path): the same logits per id.
  Candidates shuffled = make({3.0f, 4.0f, -1.0f, 0.0f});
  std::reverse(shuffled.data.begin(), shuffled.data.end());
  pen.apply(shuffled);
  for (const auto& t : shuffled.data) EXPECT_EQ(t.logit, c.data[static_cast<size_t>(t.id)].logit) << t.id;
  // Window: with last_n = 2 the first "1" falls out, so count(1) = 1.
  PenaltiesStage win(2, 1.0f, 1.0f, 0.0f);
  for (int32_t t : {1, 1, 2}) win.accept(t);
  Candidates w = make({0.0f, 0.0f, 0.0f});
  win.apply(w);
  EXPECT_FLOAT_EQ(w.data[1].logit, -1.0f);
  EXPECT_FLOAT_EQ(w.data[2].logit, -1.0f);
  win.reset();
  Candidates w2 = make({0.0f, 0.0f, 0.0f});
  win.apply(w2);
  EXPECT_FLOAT_EQ(w2.data[1].logit, 0.0f);
  // Through the sampler: a repeat penalty flips the greedy choice away from a seen token.
  SamplerParams p = plain();
  p.temp = 0.0f;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<float> l = {2.0f, 1.6f};
  EXPECT_EQ(s.sample(l.data(), 2), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(l.data(), 2), 1);  // 2.0 / 1.5 = 1.33 < 1.6
  s.reset();
  EXPECT_EQ(s.sample(l.data(), 2), 0);
}

TEST(SamplingDist, EmpiricalMatchesSoftmax) {
  const std::vector<float> l = {0.0f, 1.0f, -0.5f, 2.0f, 0.3f, -2.0f};
  const auto want = softmax(l);
  Sampler s(plain(2024));
  const int n = 60000;
  const auto h = histogram(s, l, n);
  double chi2 = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double expected = want[i] * n;
    const double got = h.count(static_cast<int32_t>(i)) ? h.at(static_cast<int32_t>(i)) : 0;
    chi2 += (got - expected) * (got - expected) / expected;
  }
  // 5 degrees of freedom: P(chi2 > 20.5) = 0.001. The seed is fixed, so this either always
  // passes or always fails; a failure means the draw is biased, not bad luck.
  EXPECT_LT(chi2, 20.5) << "chi2 = " << chi2;
}

TEST(SamplingDist, DefaultChainOnlyReturnsKeptIds) {
  // Defaults: top_k 40, top_p 0.95, min_p 0.05, temp 0.8 on a 1000-token row with a clear head.
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = -static_cast<float>(i) * 0.05f;
  SamplerParams p;
  p.seed = 77;
  Sampler s(p);
  const auto h = histogram(s, l, 5000);
  // min_p 0.05 bounds the kept logits: logit >= max + ln 0.05 = -3.0 -> ids 0..59, then top_k 40.
  for (const auto& [id, n] : h) EXPECT_LT(id, 40) << n;
  EXPECT_THROW(s.sample(l.data(), 0), std::exception);
}

// argmax (greedy decoding: the Sampler without penalties, Session, the bench): the first index
// of the largest value, against the plain compare loop on random vocabularies of every tail
// length, ties, a NaN at 0 (returns 0) and NaNs elsewhere (never win).
TEST(SamplingArgmax, FirstLargestLikeThePlainLoop) {
  auto plain = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    return best;
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (size_t n : {1, 2, 7, 8, 9, 17, 100, 151936}) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    EXPECT_EQ(argmax(v), plain(v)) << n;
    if (n > 9) {
      v[n / 3] = v[n - 2] = 100.0f;  // a tie: the first one
      EXPECT_EQ(argmax(v), static_cast<int32_t>(n / 3));
      v[1] = NAN;
      EXPECT_EQ(argmax(v), static_cast<int32_t>(n / 3));
      v[0] = NAN;
      EXPECT_EQ(argmax(v), 0);
    }
  }
}

}  // namespace
}  // namespace sluice
