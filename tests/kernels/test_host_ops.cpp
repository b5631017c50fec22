// tests/kernels/test_host_ops: the data-movement and routing ops of Backend (copy_2d,
// gather_rows, add_rows_weighted, fill, moe_route) on every backend this machine runs,
// against loops written here and against routing decisions worked out by hand (softmax and
// sigmoid gating, the selection bias, group-limited selection, ties, renormalisation and
// scaling). Negative controls: a wrong index or order shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "kernels/kernel_test_util.h"

namespace sluice::test_host_ops {
namespace {

std::vector<std::unique_ptr<Backend>> backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(make_backend("ref"));
  v.push_back(make_backend("cpu", 2));
  v.push_back(make_backend("cpu-exact", 2));
  return v;
}

TEST(HostOps, Copy2dGatherAddFillMatchLoops) {
  const int64_t rows = 5, w = 7;
  const std::vector<float> src = test::randn(static_cast<size_t>(rows * 11), 3);
  for (auto& be : backends()) {
    SCOPED_TRACE(std::string(be->name()));
    // A column window of rows 11 wide into rows 9 wide at offset 2.
    std::vector<float> dst(static_cast<size_t>(rows * 9), -1.0f), want = dst;
    be->copy_2d(src.data() + 3, 11, dst.data() + 2, 9, rows, w);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c)
        want[static_cast<size_t>(r * 9 + 2 + c)] = src[static_cast<size_t>(r * 11 + 3 + c)];
    EXPECT_EQ(dst, want);

    const std::vector<int64_t> idx{4, 0, 4, 2};
    std::vector<float> g(4 * 11);
    be->gather_rows(src.data(), 11, idx.data(), 4, g.data());
    for (size_t i = 0; i < idx.size(); ++i)
      EXPECT_EQ(0, std::memcmp(g.data() + i * 11, src.data() + idx[i] * 11, 11 * sizeof(float))) << "row " << i;

    // Two updates of row 4 in order: out4 = (out4 + w0*y0) + w2*y2, bit for bit.
    std::vector<float> out(static_cast<size_t>(rows * 11), 0.5f), expect = out;
    const std::vector<float> wts{0.25f, 2.0f, -1.5f, 0.75f};
    be->add_rows_weighted(g.data(), 11, idx.data(), wts.data(), 4, out.data());
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t c = 0; c < 11; ++c)
        expect[static_cast<size_t>(idx[i] * 11 + c)] += wts[i] * g[i * 11 + static_cast<size_t>(c)];
    EXPECT_EQ(out, expect);
    // Negative control: one wrong index shows.
    std::vector<float> wrong(static_cast<size_t>(rows * 11), 0.5f);
    const std::vector<int64_t> bad{4, 1, 4, 2};
    be->add_rows_weighted(g.data(), 11, bad.data(), wts.data(), 4, wrong.data());
    EXPECT_NE(wrong, expect);

    std::vector<float> f(13, 1.0f);
    be->fill(f.data() + 2, 9, -3.0f);
    for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], i >= 2 && i < 11 ? -3.0f : 1.0f) << i;
  }
}

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights, probs;
};

Routed route(Backend& be, const MoeOptions& o, const std::vector<float>& logits,
             const std::vector<float>* bias = nullptr) {
  const int64_t T = static_cast<int64_t>(logits.size()) / o.n_expert;
  Routed r;
  r.probs.resize(logits.size());
  r.experts.resize(static_cast<size_t>(T * o.n_expert_used));
  r.weights.resize(r.experts.size());
  be.moe_route(o, logits.data(), r.probs.data(), T, bias ? bias->data() : nullptr, r.experts.data(), r.weights.data());
  return r;
}

TEST(HostOps, MoeRouteSoftmaxTopKNormalised) {
  MoeOptions o{.n_expert = 4, .n_expert_used = 2, .gating = MoeGating::softmax, .norm_weights = true};
  // Token 0: logits 0, ln2, ln4, ln2 -> probs 1/9, 2/9, 4/9, 2/9: top-2 = {2, 1} (tie 1 vs 3
  // to the lower id), weights renormalised to 4/6, 2/6. Token 1: the reverse order.
  const float l2 = std::log(2.0f), l4 = std::log(4.0f);
  const std::vector<float> logits{0, l2, l4, l2, l4, l2, 0, 0};
  for (auto& be : backends()) {
    SCOPED_TRACE(std::string(be->name()));
    const Routed r = route(*be, o, logits);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1, 0, 1}));
    EXPECT_NEAR(r.probs[2], 4.0f / 9, 1e-6);
    EXPECT_NEAR(r.weights[0], 4.0f / 6, 1e-6);
    EXPECT_NEAR(r.weights[1], 2.0f / 6, 1e-6);
    EXPECT_NEAR(r.weights[2], 4.0f / 6, 1e-6);
    o.norm_weights = false;
    EXPECT_NEAR(route(*be, o, logits).weights[0], 4.0f / 9, 1e-6);  // not renormalised: the probability
    o.norm_weights = true;
  }
}

TEST(HostOps, MoeRouteSigmoidBiasGroupsAndScale) {
  auto be = make_backend("ref");
  // 8 experts in 4 groups of 2, keep 2 groups, choose 2; sigmoid gating, scale 2.5.
  MoeOptions o{.n_expert = 8,
               .n_expert_used = 2,
               .gating = MoeGating::sigmoid,
               .norm_weights = false,
               .weights_scale = 2.5f,
               .n_group = 4,
               .n_group_used = 2};
  // Expert 7 is the single best, but its group (6, 7) sums lower than groups (0, 1) and (2, 3).
  const std::vector<float> logits{1.0f, 1.0f, 0.8f, 0.9f, -3.0f, -3.0f, -3.0f, 2.0f};
  const Routed r = route(*be, o, logits);
  const auto sig = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  // Group scores: g0 = 2 sig(1), g1 = sig(.8) + sig(.9), g3 = sig(-3) + sig(2) (< g1): 0 and 1 kept.
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1}));  // tie of 0 and 1 to the lower id
  EXPECT_NEAR(r.weights[0], 2.5f * sig(1.0f), 1e-6);
  // A selection bias picks expert 3 over 1, but the weight stays its unbiased probability.
  const std::vector<float> bias{0, 0, 0, 0.5f, 0, 0, 0, 0};
  const Routed b = route(*be, o, logits, &bias);
  EXPECT_EQ(b.experts, (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(b.weights[0], 2.5f * sig(0.9f), 1e-6);
  // Without groups expert 7 wins (the negative control of the group rule).
  o.n_group = o.n_group_used = 1;
  EXPECT_EQ(route(*be, o, logits).experts[0], 7);
  // Every backend routes alike.
  for (auto& other : backends()) EXPECT_EQ(route(*other, o, logits).experts, route(*be, o, logits).experts);
}

}  // namespace
}  // namespace sluice::test_host_ops
