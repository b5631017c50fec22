// tests/kernels/test_linear_attn: the cpu backend's linear-attention ops against the ref
// oracle (float64 recurrence), on every kernel level this CPU has: the causal short
// convolution with its carried window, L2 normalization, the Gated DeltaNet gates, and the
// gated delta rule by recurrence (decode) and in chunks (prefill), with a scalar decay per
// head and with one per key channel (KDA). Inputs have the models' ranges: q and k
// L2-normalized, log-decays in [-2, 0), β in (0, 1). Negative controls: the wrong key-head
// mapping, a dropped convolution window, and a chunk that forgets its entering state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/linear_attn.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"

namespace sluice::test_linear_attn {
namespace {

using test::nmse;
using test::randn;

// float32 recurrence vs float64: each token's state update rounds Dk·Dv products once; the
// error grows with the tokens a state has absorbed, observed ≤ 2e-13 over 150 tokens. The
// chunked form reassociates the same sums: observed ≤ 1e-12. 1e-10 is the matmul policy's
// headroom (parity_tolerances.h); the negative controls land at 1e-3 and above.
constexpr double kTolDelta = 1e-10;

struct DeltaCase {
  int64_t T, Hk, Hv, Dk, Dv;
  bool per_channel;
};
// What gtest prints for a case (ctest's test list, failures), instead of its bytes.
void PrintTo(const DeltaCase& c, std::ostream* os) {
  *os << "T=" << c.T << " Hk=" << c.Hk << " Hv=" << c.Hv << " Dk=" << c.Dk << " Dv=" << c.Dv
      << (c.per_channel ? " per-channel (KDA)" : " per-head (GDN)");
}

struct DeltaData {
  std::vector<float> qk, v, g, beta, state;
  int64_t qk_stride, v_stride;
  DeltaData(const DeltaCase& c, uint32_t seed) {
    qk_stride = 2 * c.Hk * c.Dk + 3;  // rows wider than q|k, as in the models' conv output
    v_stride = c.Hv * c.Dv + 5;
    qk = randn(static_cast<size_t>(c.T * qk_stride), seed);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < 2 * c.Hk; ++h) {
        float* x = qk.data() + t * qk_stride + h * c.Dk;
        double ss = 0;
        for (int64_t i = 0; i < c.Dk; ++i) ss += x[i] * x[i];
        for (int64_t i = 0; i < c.Dk; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(ss));
      }
    v = randn(static_cast<size_t>(c.T * v_stride), seed + 1);
    std::mt19937 rng(seed + 2);
    std::uniform_real_distribution<float> ug(-2.0f, -0.01f), ub(0.05f, 0.95f);
    g.resize(static_cast<size_t>(c.T * c.Hv * (c.per_channel ? c.Dk : 1)));
    for (auto& x : g) x = ug(rng);
    beta.resize(static_cast<size_t>(c.T * c.Hv));
    for (auto& x : beta) x = ub(rng);
    state = randn(static_cast<size_t>(c.Hv * c.Dv * c.Dk), seed + 3, 0.3f);
  }
  DeltaRuleArgs args(const DeltaCase& c, float* st, float* out, int64_t t0, int64_t n) const {
    DeltaRuleArgs a;
    a.q = qk.data() + t0 * qk_stride;
    a.k = a.q + c.Hk * c.Dk;
    a.qk_stride = qk_stride;
    a.v = v.data() + t0 * v_stride;
    a.v_stride = v_stride;
    a.g = g.data() + t0 * c.Hv * (c.per_channel ? c.Dk : 1);
    a.beta = beta.data() + t0 * c.Hv;
    a.state = st;
    a.out = out + t0 * c.Hv * c.Dv;
    a.n_tok = n;
    a.n_head_k = c.Hk;
    a.n_head_v = c.Hv;
    a.dim_k = c.Dk;
    a.dim_v = c.Dv;
    a.per_channel_decay = c.per_channel;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.Dk));
    return a;
  }
};

// Runs the rule over all T tokens in one call; returns outputs then the final state.
std::vector<float> run(Backend& be, const DeltaCase& c, const DeltaData& d, bool grouped = false) {
  std::vector<float> st = d.state, out(static_cast<size_t>(c.T * c.Hv * c.Dv));
  DeltaRuleArgs a = d.args(c, st.data(), out.data(), 0, c.T);
  a.grouped_heads = grouped;
  be.delta_rule(a);
  out.insert(out.end(), st.begin(), st.end());
  return out;
}

class DeltaRule : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRule, CpuMatchesRefOnEveryLevel) {
  const DeltaCase c = GetParam();
  const DeltaData d(c, 11);
  auto ref = make_backend("ref");
  const std::vector<float> want = run(*ref, c, d);
  for (CpuIsa isa : test::available_isas()) {
    auto cpu = make_cpu_backend(2, isa);
    const double e = nmse(want, run(*cpu, c, d));
    EXPECT_LE(e, kTolDelta) << cpu_isa_name(isa);
    std::printf("[ delta_rule T=%lld %s %s ] nmse %.2e\n", static_cast<long long>(c.T),
                c.per_channel ? "per-channel" : "scalar", std::string(cpu_isa_name(isa)).c_str(), e);
  }
}

TEST_P(DeltaRule, ChunkedEqualsRecurrence) {
  const DeltaCase c = GetParam();
  const DeltaData d(c, 12);
  const cpu::Kernels& k = cpu::kernels_for(cpu_isa_select());
  ThreadPool pool(2);
  auto once = [&](int64_t chunk) {
    std::vector<float> st = d.state, out(static_cast<size_t>(c.T * c.Hv * c.Dv));
    cpu::delta_rule(k, pool, 0, d.args(c, st.data(), out.data(), 0, c.T), chunk);
    out.insert(out.end(), st.begin(), st.end());
    return out;
  };
  const std::vector<float> rec = once(0);
  for (int64_t chunk : {int64_t{16}, int64_t{64}}) EXPECT_LE(nmse(rec, once(chunk)), kTolDelta) << "chunk " << chunk;
}

TEST_P(DeltaRule, SplitCallsCarryTheState) {
  const DeltaCase c = GetParam();
  const DeltaData d(c, 13);
  for (const char* name : {"ref", "cpu"}) {
    auto be = make_backend(name, 2);
    const std::vector<float> whole = run(*be, c, d);
    std::vector<float> st = d.state, out(static_cast<size_t>(c.T * c.Hv * c.Dv));
    const int64_t cut = c.T / 3;
    be->delta_rule(d.args(c, st.data(), out.data(), 0, cut));
    for (int64_t t = cut; t < c.T; ++t) be->delta_rule(d.args(c, st.data(), out.data(), t, 1));
    out.insert(out.end(), st.begin(), st.end());
    EXPECT_LE(nmse(whole, out), kTolDelta) << name;
  }
}

TEST_P(DeltaRule, NegativeControlGroupedHeadMapping) {
  const DeltaCase c = GetParam();
  if (c.Hk == c.Hv || c.Hk == 1) GTEST_SKIP() << "both mappings agree for these head counts";
  const DeltaData d(c, 14);
  auto ref = make_backend("ref");
  EXPECT_GT(nmse(run(*ref, c, d), run(*ref, c, d, /*grouped=*/true)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeltaRule,
                         ::testing::Values(DeltaCase{1, 2, 4, 32, 32, false}, DeltaCase{150, 2, 4, 32, 32, false},
                                           DeltaCase{70, 1, 2, 128, 128, false}, DeltaCase{40, 2, 2, 32, 16, true},
                                           DeltaCase{150, 1, 2, 64, 64, true}, DeltaCase{9, 2, 4, 32, 32, false}),
                         [](const ::testing::TestParamInfo<DeltaCase>& i) {
                           return "T" + std::to_string(i.param.T) + "_Hk" + std::to_string(i.param.Hk) + "_Hv" +
                                  std::to_string(i.param.Hv) + "_D" + std::to_string(i.param.Dk) + "x" +
                                  std::to_string(i.param.Dv) + (i.param.per_channel ? "_kda" : "_gdn");
                         });

// Kernels::matmul_acc_f32 (the chunked rule's products) on every level against a float64 product
// added to C's entries, at shapes with row and column tails and strided operands; negative
// control: B read transposed.
TEST(MatmulAccF32, EveryLevelMatchesFloat64) {
  for (CpuIsa isa : test::available_isas()) {
    const cpu::Kernels& k = cpu::kernels_for(isa);
    for (auto [m, n, kd] : {std::tuple<int64_t, int64_t, int64_t>{64, 128, 128}, {7, 37, 5}, {13, 16, 64}, {1, 3, 1}}) {
      const size_t lda = static_cast<size_t>(kd + 3), ldb = static_cast<size_t>(n + 5),
                   ldc = static_cast<size_t>(n + 2);
      const std::vector<float> a = randn(static_cast<size_t>(m) * lda, 31),
                               b = randn(static_cast<size_t>(kd) * ldb, 32);
      const std::vector<float> c = randn(static_cast<size_t>(m) * ldc, 33);
      std::vector<float> want = c, bad = c;  // the padding past n stays as it was
      auto product = [&](bool transposed, std::vector<float>& out) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = c[static_cast<size_t>(i) * ldc + j];
            for (int64_t p = 0; p < kd; ++p)
              acc += static_cast<double>(a[static_cast<size_t>(i) * lda + p]) *
                     b[transposed ? static_cast<size_t>(j % kd) * ldb + p % n : static_cast<size_t>(p) * ldb + j];
            out[static_cast<size_t>(i) * ldc + j] = static_cast<float>(acc);
          }
      };
      product(false, want);
      product(true, bad);
      std::vector<float> got = c;
      k.matmul_acc_f32(a.data(), lda, b.data(), ldb, got.data(), ldc, m, n, kd);
      EXPECT_LE(nmse(want, got), 1e-12) << cpu_isa_name(isa) << " " << m << "x" << n << "x" << kd;
      if (kd > 1) {
        EXPECT_GT(nmse(want, bad), 1e-3) << "negative control " << m << "x" << n << "x" << kd;
      }
    }
  }
}

// The per-channel chunks cut where a channel's cumulative log-decay passes -30, and a token that
// alone passes it goes by the recurrence: decays of -12 and -45 in some channels (a channel
// that forgets everything) against the float64 recurrence.
TEST(DeltaRuleChunk, PerChannelStrongDecaysCutTheChunks) {
  const DeltaCase c{100, 1, 2, 32, 32, true};
  DeltaData d(c, 16);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.Hv; ++h) {
      float* g = d.g.data() + (t * c.Hv + h) * c.Dk;
      if (t % 7 == 3) g[t % c.Dk] = -12.0f;
      if (t % 23 == 5) g[(t + 3) % c.Dk] = -45.0f;
    }
  auto ref = make_backend("ref");
  const std::vector<float> want = run(*ref, c, d);
  const cpu::Kernels& k = cpu::kernels_for(cpu_isa_select());
  ThreadPool pool(2);
  std::vector<float> st = d.state, out(static_cast<size_t>(c.T * c.Hv * c.Dv));
  cpu::delta_rule(k, pool, 0, d.args(c, st.data(), out.data(), 0, c.T), 64);
  out.insert(out.end(), st.begin(), st.end());
  EXPECT_LE(nmse(want, out), kTolDelta);
}

TEST(DeltaRuleChunk, NegativeControlChunkWithoutEnteringState) {
  // A chunk that starts from a zero state instead of the carried one must be caught.
  const DeltaCase c{128, 2, 4, 32, 32, false};
  DeltaData d(c, 15);
  for (float& g : d.g) g *= 0.02f;  // slow decay: the entering state still matters at the chunk's end
  auto ref = make_backend("ref");
  const std::vector<float> want = run(*ref, c, d);
  const cpu::Kernels& k = cpu::kernels_for(cpu_isa_select());
  ThreadPool pool(1);
  std::vector<float> st = d.state, out(static_cast<size_t>(c.T * c.Hv * c.Dv));
  cpu::delta_rule(k, pool, 0, d.args(c, st.data(), out.data(), 0, 64), 64);
  std::fill(st.begin(), st.end(), 0.0f);
  cpu::delta_rule(k, pool, 0, d.args(c, st.data(), out.data(), 64, 64), 64);
  out.insert(out.end(), st.begin(), st.end());
  EXPECT_GT(nmse(want, out), 1e-3);
}

TEST(Conv1dCausal, CpuMatchesRefAndCarriesTheWindow) {
  const int64_t T = 13, C = 40, K = 4;
  const std::vector<float> x = randn(static_cast<size_t>(T * C), 21), w = randn(static_cast<size_t>(C * K), 22, 0.5f);
  const std::vector<float> st0 = randn(static_cast<size_t>((K - 1) * C), 23);
  auto run_conv = [&](Backend& be, std::vector<int64_t> cuts, bool drop_window = false) {
    std::vector<float> st = st0, out(static_cast<size_t>(T * C));
    int64_t t0 = 0;
    cuts.push_back(T);
    for (int64_t t1 : cuts) {
      if (drop_window && t0 > 0) std::fill(st.begin(), st.end(), 0.0f);
      be.conv1d_causal(x.data() + t0 * C, w.data(), st.data(), out.data() + t0 * C, t1 - t0, C, K, true);
      t0 = t1;
    }
    out.insert(out.end(), st.begin(), st.end());
    return out;
  };
  auto ref = make_backend("ref");
  const std::vector<float> want = run_conv(*ref, {});
  for (CpuIsa isa : test::available_isas()) {
    auto cpu = make_cpu_backend(2, isa);
    EXPECT_LE(nmse(want, run_conv(*cpu, {})), 1e-12) << cpu_isa_name(isa);
    // Token by token and in uneven pieces (one shorter than the window): the same outputs.
    EXPECT_LE(nmse(want, run_conv(*cpu, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})), 1e-12) << cpu_isa_name(isa);
    EXPECT_LE(nmse(want, run_conv(*cpu, {2, 9})), 1e-12) << cpu_isa_name(isa);
  }
  EXPECT_EQ(want, run_conv(*ref, {1, 5, 6}));
  EXPECT_GT(nmse(want, run_conv(*ref, {5}, /*drop_window=*/true)), 1e-4);  // negative control
}

TEST(LinearAttnElementwise, CpuMatchesRef) {
  const int64_t n = 4099;
  const std::vector<float> x = randn(n, 31, 3.0f), y = randn(n, 32, 3.0f);
  auto ref = make_backend("ref");
  auto cpu = make_backend("cpu", 2);
  auto both = [&](auto&& f) {
    std::vector<float> a(n), b(n);
    f(*ref, a.data());
    f(*cpu, b.data());
    return nmse(a, b);
  };
  EXPECT_LE(both([&](Backend& be, float* o) { be.l2_norm(x.data(), o, 17, 241, 1e-6f); }), 1e-12);
  EXPECT_LE(both([&](Backend& be, float* o) { be.sigmoid_mul(x.data(), y.data(), o, n); }), 1e-12);
  EXPECT_LE(both([&](Backend& be, float* o) { be.sigmoid(x.data(), o, n); }), 1e-12);
  const std::vector<float> bias = randn(29, 33), a_log = randn(29, 34);
  std::vector<float> a(29);
  for (size_t i = 0; i < a.size(); ++i) a[i] = -std::exp(a_log[i]);
  std::vector<float> g1(29 * 141), b1(29 * 141), g2(29 * 141), b2(29 * 141);
  ref->delta_gates(x.data(), y.data(), bias.data(), a.data(), g1.data(), b1.data(), 141, 29);
  cpu->delta_gates(x.data(), y.data(), bias.data(), a.data(), g2.data(), b2.data(), 141, 29);
  EXPECT_LE(nmse(g1, g2), 1e-12);
  EXPECT_LE(nmse(b1, b2), 1e-12);
  for (float v : g1) ASSERT_LE(v, 0.0f) << "a log-decay must not be positive";
}

// kda_safe_gate: cpu (float) against ref (double) on random logits; the log-decay stays in
// [lower_bound, 0]. Negative control: a ref gate with another lower bound is far off, so the
// comparison can fail.
TEST(LinearAttnElementwise, KdaSafeGateCpuMatchesRef) {
  const int64_t n = 29, n_tok = 141;
  const std::vector<float> x = randn(n * n_tok, 41, 3.0f), bias = randn(n, 42), a_log = randn(n, 43);
  std::vector<float> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = std::exp(a_log[i]);
  auto ref = make_backend("ref");
  auto cpu = make_backend("cpu", 2);
  std::vector<float> g1(n * n_tok), g2(n * n_tok), g3(n * n_tok);
  ref->kda_safe_gate(x.data(), bias.data(), a.data(), -5.0f, g1.data(), n_tok, n);
  cpu->kda_safe_gate(x.data(), bias.data(), a.data(), -5.0f, g2.data(), n_tok, n);
  EXPECT_LE(nmse(g1, g2), 1e-12);
  for (float v : g1) {
    ASSERT_LE(v, 0.0f);  // float sigmoid saturates to 0 or 1 at the ends
    ASSERT_GE(v, -5.0f);
  }
  ref->kda_safe_gate(x.data(), bias.data(), a.data(), -4.0f, g3.data(), n_tok, n);
  EXPECT_GT(nmse(g1, g3), 1e-3) << "negative control: another lower bound must not match";
}

}  // namespace
}  // namespace sluice::test_linear_attn
