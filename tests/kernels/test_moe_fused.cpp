// tests/kernels/test_moe_fused: Backend::moe_ffn_token, the one-token MoE FFN (decode), and
// Backend::moe_ffn_batch, the same for a few tokens (sequences decoding together; the checks
// at the end of the file: bitwise the default, every token equal to its own moe_ffn_token
// on ref, against ref, negative controls).
//   * the cpu backend's fused three-phase pass against its own default (matmul + swiglu per
//     expert, then the weighted sum in the given order): bitwise equal, for every ISA level,
//     1 and 2 threads, int8 activations on and off, every weight type mix the models use;
//   * against the ref oracle: the exact path within the matmul tolerance of
//     test_backend_parity.cpp, the int8 path within the activation-rounding tolerance of
//     test_q8_matmul.cpp;
//   * negative controls: swapped routing weights, a dropped expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "kernels/kernel_test_util.h"
#include "quant/quant.h"

namespace sluice::test_moe_fused {
namespace {

using test::available_isas;
using test::nmse;
using test::randn;

// Exact path (weights decoded to float): float32 dots vs float64 in ref, three chained
// matmuls and a k-term weighted sum; observed ≤ 1e-13. Same headroom policy as kTolMatmul.
constexpr double kTolExact = 1e-10;
// int8 path: x and h are each rounded to 8 bits per block (NMSE ~4e-5 per matmul for Gaussian
// input, see kTolQ8Loose in test_q8_matmul.cpp), and h = silu(g)·u is heavier-tailed than a
// Gaussian, so its block maxima — and its rounding steps — are larger. Observed ≤ 3.3e-4;
// dropping one of 8 experts gives ~3e-2 (NegativeControls below).
constexpr double kTolQ8 = 1e-3;

// Experts' matrices at scale 0.05 (weights of a trained FFN's magnitude, so SwiGLU is not saturated).
struct Matrix : test::RandomMatrix {
  Matrix(DType t, int64_t n_in, int64_t n_out, uint32_t seed) : RandomMatrix(t, n_in, n_out, seed, 0.05f) {}
};

struct Experts {
  std::vector<Matrix> m;  // gate, up, down per expert
  std::vector<FfnExpert> ex;
  Experts(DType gate_up, DType down, int64_t E, int64_t F, int n, uint32_t seed) {
    m.reserve(static_cast<size_t>(3 * n));
    for (int j = 0; j < n; ++j) {
      m.emplace_back(gate_up, E, F, seed + 3 * j);
      m.emplace_back(gate_up, E, F, seed + 3 * j + 1);
      m.emplace_back(down, F, E, seed + 3 * j + 2);
    }
    const std::vector<float> w = randn(static_cast<size_t>(n), seed + 999);
    for (int j = 0; j < n; ++j)
      ex.push_back(
          {&m[3 * j].view, &m[3 * j + 1].view, &m[3 * j + 2].view, 0.1f + std::abs(w[static_cast<size_t>(j)])});
  }
};

std::vector<float> fused(Backend& b, std::span<const FfnExpert> ex, const std::vector<float>& x, int64_t E) {
  std::vector<float> y(static_cast<size_t>(E), NAN);
  b.moe_ffn_token(ex, x.data(), y.data(), E);
  return y;
}
std::vector<float> composed(Backend& b, std::span<const FfnExpert> ex, const std::vector<float>& x, int64_t E) {
  std::vector<float> y(static_cast<size_t>(E), NAN);
  b.Backend::moe_ffn_token(ex, x.data(), y.data(), E);  // the default: matmul + swiglu per expert
  return y;
}

struct Mix {
  DType gate_up, down;
  int64_t E, F;
};
// qwen3moe Q4_K_M (Q4_K gate/up, Q6_K down), pure K types, the Q8_0/Q4_0 int8 paths, float
// types, a type without an int8 path (Q5_0: float path inside the int8 backend), and MLX affine.
const Mix kMixes[] = {{DType::Q4_K, DType::Q6_K, 512, 256},
                      {DType::Q4_K, DType::Q4_K, 256, 512},
                      {DType::Q5_K, DType::Q6_K, 256, 256},
                      {DType::Q8_0, DType::Q8_0, 256, 96},
                      {DType::Q4_0, DType::Q8_0, 128, 64},
                      {DType::F16, DType::F16, 128, 72},
                      {DType::F32, DType::BF16, 64, 40},
                      {DType::Q5_0, DType::Q4_K, 256, 256},
                      // MLX folders' affine experts read in place (groups of 64, bf16 scales).
                      {DType::MLX_A4, DType::MLX_A4, 256, 192},
                      {DType::MLX_A8, DType::MLX_A3, 128, 64}};

TEST(MoeFused, BitwiseEqualToPerExpertMatmuls) {
  for (const Mix& mx : kMixes) {
    for (int n : {1, 8}) {
      Experts e(mx.gate_up, mx.down, mx.E, mx.F, n, 11);
      const std::vector<float> x = randn(static_cast<size_t>(mx.E), 5);
      for (CpuIsa isa : available_isas())
        for (bool q8 : {false, true})
          for (int threads : {1, 2}) {
            SCOPED_TRACE(std::string(dtype_name(mx.gate_up)) + "/" + std::string(dtype_name(mx.down)) +
                         " n=" + std::to_string(n) + " " + std::string(cpu_isa_name(isa)) + (q8 ? " q8" : " exact") +
                         " t" + std::to_string(threads));
            auto b = make_cpu_backend(threads, isa, CpuBackendOptions{.q8_activations = q8});
            const auto a = fused(*b, e.ex, x, mx.E), c = composed(*b, e.ex, x, mx.E);
            ASSERT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
          }
    }
  }
}

TEST(MoeFused, MatchesRef) {
  auto ref = make_ref_backend();
  double worst_exact = 0, worst_q8 = 0;
  for (const Mix& mx : kMixes) {
    Experts e(mx.gate_up, mx.down, mx.E, mx.F, 8, 21);
    const std::vector<float> x = randn(static_cast<size_t>(mx.E), 6);
    const auto want = fused(*ref, e.ex, x, mx.E);
    for (CpuIsa isa : available_isas()) {
      SCOPED_TRACE(std::string(dtype_name(mx.gate_up)) + "/" + std::string(dtype_name(mx.down)) + " " +
                   std::string(cpu_isa_name(isa)));
      auto exact = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = false});
      auto q8 = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = true});
      const double ee = nmse(want, fused(*exact, e.ex, x, mx.E)), eq = nmse(want, fused(*q8, e.ex, x, mx.E));
      EXPECT_LT(ee, kTolExact);
      EXPECT_LT(eq, kTolQ8);
      worst_exact = std::max(worst_exact, ee);
      worst_q8 = std::max(worst_q8, eq);
    }
  }
  std::printf("[  NMSE    ] moe_ffn_token exact max %.3g, int8 max %.3g\n", worst_exact, worst_q8);
}

TEST(MoeFused, NegativeControls) {
  const Mix mx = kMixes[0];
  Experts e(mx.gate_up, mx.down, mx.E, mx.F, 8, 31);
  const std::vector<float> x = randn(static_cast<size_t>(mx.E), 7);
  auto ref = make_ref_backend();
  auto q8 = make_cpu_backend(2, cpu_isa_select(), CpuBackendOptions{.q8_activations = true});
  const auto want = fused(*ref, e.ex, x, mx.E);
  // Routing weights of two experts swapped (made clearly different first).
  auto swapped = e.ex;
  swapped[0].weight = 0.2f, swapped[1].weight = 1.5f;
  auto base = swapped;
  std::swap(swapped[0].weight, swapped[1].weight);
  EXPECT_GT(nmse(fused(*ref, base, x, mx.E), fused(*q8, swapped, x, mx.E)), 10 * kTolQ8);
  // One expert dropped.
  std::vector<FfnExpert> seven(e.ex.begin(), e.ex.end() - 1);
  EXPECT_GT(nmse(want, fused(*q8, seven, x, mx.E)), 10 * kTolQ8);
}

// A small batch's routing: n_tok tokens, each sent to k of the experts (some shared), with
// each expert's tokens ascending (what moe_ffn.cpp builds).
struct BatchRouting {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<float>> weights;
  std::vector<FfnExpertRows> rows;
  BatchRouting(const Experts& e, int64_t n_tok, int k, uint32_t seed) {
    const size_t n = e.ex.size();
    tokens.resize(n);
    weights.resize(n);
    const std::vector<float> w = randn(static_cast<size_t>(n_tok * k), seed);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int j = 0; j < k; ++j) {
        const size_t ex = static_cast<size_t>((t * 3 + j * 5 + seed) % n);  // tokens overlap on some experts
        if (!tokens[ex].empty() && tokens[ex].back() == t) continue;
        tokens[ex].push_back(t);
        weights[ex].push_back(0.1f + std::abs(w[static_cast<size_t>(t * k + j)]));
      }
    for (size_t j = 0; j < n; ++j)
      if (!tokens[j].empty())
        rows.push_back({e.ex[j].gate, e.ex[j].up, e.ex[j].down, tokens[j].data(), weights[j].data(),
                        static_cast<int64_t>(tokens[j].size()), 0, static_cast<int32_t>(j)});
  }
  // Token t's experts as moe_ffn_token takes them, in the same (ascending expert) order.
  std::vector<FfnExpert> of_token(int64_t t) const {
    std::vector<FfnExpert> out;
    for (const FfnExpertRows& r : rows)
      for (int64_t i = 0; i < r.n; ++i)
        if (r.tokens[i] == t) out.push_back({r.gate, r.up, r.down, r.weights[i], r.layer, r.expert});
    return out;
  }
};

std::vector<float> batch_fused(Backend& b, const BatchRouting& r, const std::vector<float>& x, int64_t n_tok,
                               int64_t E) {
  std::vector<float> y(static_cast<size_t>(n_tok * E), NAN);
  b.moe_ffn_batch(r.rows, x.data(), y.data(), n_tok, E);
  return y;
}
std::vector<float> batch_default(Backend& b, const BatchRouting& r, const std::vector<float>& x, int64_t n_tok,
                                 int64_t E) {
  std::vector<float> y(static_cast<size_t>(n_tok * E), NAN);
  b.Backend::moe_ffn_batch(r.rows, x.data(), y.data(), n_tok, E);
  return y;
}

// 40 tokens: ~13 per expert, past the tile threshold, so the fused path's tiles (and the
// 32-block types' activation sums) are held to the per-expert matmuls too.
TEST(MoeFusedBatch, BitwiseEqualToTheDefault) {
  for (const Mix& mx : kMixes) {
    const Experts e(mx.gate_up, mx.down, mx.E, mx.F, 12, 41);  // quantized once: most of the test's setup
    for (int64_t n_tok : {2, 4, 8, 40}) {
      const BatchRouting r(e, n_tok, 4, 3);
      const std::vector<float> x = randn(static_cast<size_t>(n_tok * mx.E), 9);
      for (CpuIsa isa : available_isas())
        for (bool q8 : {false, true}) {
          // The default path once, on 2 threads; the fused one on 1 and 2 must give its bits.
          const CpuBackendOptions o{.q8_activations = q8};
          const auto want = batch_default(*make_cpu_backend(2, isa, o), r, x, n_tok, mx.E);
          for (int threads : {1, 2}) {
            SCOPED_TRACE(std::string(dtype_name(mx.gate_up)) + "/" + std::string(dtype_name(mx.down)) +
                         " T=" + std::to_string(n_tok) + " " + std::string(cpu_isa_name(isa)) +
                         (q8 ? " q8" : " exact") + " t" + std::to_string(threads));
            const auto got = batch_fused(*make_cpu_backend(threads, isa, o), r, x, n_tok, mx.E);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
          }
        }
    }
  }
}

TEST(MoeFusedBatch, EachTokenEqualsItsOwnDecodeOnRefAndMatchesRef) {
  auto ref = make_ref_backend();
  double worst = 0;
  for (const Mix& mx : kMixes) {
    const int64_t n_tok = 5;
    Experts e(mx.gate_up, mx.down, mx.E, mx.F, 10, 51);
    const BatchRouting r(e, n_tok, 3, 7);
    const std::vector<float> x = randn(static_cast<size_t>(n_tok * mx.E), 10);
    const auto want = batch_fused(*ref, r, x, n_tok, mx.E);
    // ref: a token's row is bitwise what one-token decode gives it (what lets several
    // sequences decoding together match each alone).
    for (int64_t t = 0; t < n_tok; ++t) {
      const std::vector<float> xt(x.begin() + t * mx.E, x.begin() + (t + 1) * mx.E);
      const auto one = fused(*ref, r.of_token(t), xt, mx.E);
      ASSERT_EQ(std::memcmp(one.data(), want.data() + t * mx.E, one.size() * sizeof(float)), 0) << "token " << t;
    }
    for (CpuIsa isa : available_isas()) {
      auto q8 = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = true});
      const double err = nmse(want, batch_fused(*q8, r, x, n_tok, mx.E));
      EXPECT_LT(err, kTolQ8) << dtype_name(mx.gate_up) << "/" << dtype_name(mx.down) << " " << cpu_isa_name(isa);
      worst = std::max(worst, err);
    }
  }
  std::printf("[  NMSE    ] moe_ffn_batch int8 max %.3g\n", worst);
}

TEST(MoeFusedBatch, NegativeControls) {
  const Mix mx = kMixes[0];
  const int64_t n_tok = 4;
  Experts e(mx.gate_up, mx.down, mx.E, mx.F, 8, 61);
  BatchRouting r(e, n_tok, 3, 5);
  const std::vector<float> x = randn(static_cast<size_t>(n_tok * mx.E), 11);
  auto ref = make_ref_backend();
  auto q8 = make_cpu_backend(2, cpu_isa_select(), CpuBackendOptions{.q8_activations = true});
  const auto want = batch_fused(*ref, r, x, n_tok, mx.E);
  // An expert's output added to the wrong token (its first token moved to another one).
  BatchRouting moved = r;
  std::vector<int64_t> toks(moved.rows[0].tokens, moved.rows[0].tokens + moved.rows[0].n);
  toks[0] = (toks[0] + 1) % n_tok == (toks.size() > 1 ? toks[1] : -1) ? (toks[0] + 2) % n_tok : (toks[0] + 1) % n_tok;
  moved.rows[0].tokens = toks.data();
  EXPECT_GT(nmse(want, batch_fused(*q8, moved, x, n_tok, mx.E)), 10 * kTolQ8);
  // The expert serving the most tokens dropped (~1/k of those tokens' sum).
  BatchRouting dropped = r;
  dropped.rows.erase(std::max_element(dropped.rows.begin(), dropped.rows.end(),
                                      [](const FfnExpertRows& a, const FfnExpertRows& b) { return a.n < b.n; }));
  EXPECT_GT(nmse(want, batch_fused(*q8, dropped, x, n_tok, mx.E)), 5 * kTolQ8);
}

// SwiGLU clamps (FfnExpert/FfnExpertRows::limit, Ling 3): the fused one-token and small-batch
// passes stay bitwise their defaults with a limit on some experts, match ref, and the limit
// is active (the unclamped result differs: negative control).
TEST(MoeFused, ClampedExpertsBitwiseTheDefaultAndMatchRef) {
  const Mix mx = kMixes[0];
  const int64_t n_tok = 4;
  Experts e(mx.gate_up, mx.down, mx.E, mx.F, 8, 71);
  const float limits[] = {0.2f, 0.0f, 0.3f, 0.25f, 0.2f, 0.0f, 0.4f, 0.2f};
  for (size_t j = 0; j < e.ex.size(); ++j) e.ex[j].limit = limits[j];
  BatchRouting r(e, n_tok, 3, 5);
  for (FfnExpertRows& row : r.rows) row.limit = limits[static_cast<size_t>(row.expert)];
  const std::vector<float> x1 = randn(static_cast<size_t>(mx.E), 12), xb = randn(static_cast<size_t>(n_tok * mx.E), 13);
  auto ref = make_ref_backend();
  const auto want1 = fused(*ref, e.ex, x1, mx.E), wantb = batch_fused(*ref, r, xb, n_tok, mx.E);
  for (CpuIsa isa : available_isas())
    for (bool q8 : {false, true}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + (q8 ? " q8" : " exact"));
      auto b = make_cpu_backend(2, isa, CpuBackendOptions{.q8_activations = q8});
      const auto a1 = fused(*b, e.ex, x1, mx.E), c1 = composed(*b, e.ex, x1, mx.E);
      ASSERT_EQ(std::memcmp(a1.data(), c1.data(), a1.size() * sizeof(float)), 0);
      const auto ab = batch_fused(*b, r, xb, n_tok, mx.E), cb = batch_default(*b, r, xb, n_tok, mx.E);
      ASSERT_EQ(std::memcmp(ab.data(), cb.data(), ab.size() * sizeof(float)), 0);
      EXPECT_LT(nmse(want1, a1), q8 ? kTolQ8 : kTolExact);
      EXPECT_LT(nmse(wantb, ab), q8 ? kTolQ8 : kTolExact);
    }
  auto unclamped = e.ex;
  for (FfnExpert& x : unclamped) x.limit = 0.0f;
  EXPECT_GT(nmse(want1, fused(*ref, unclamped, x1, mx.E)), 10 * kTolQ8);
}

}  // namespace
}  // namespace sluice::test_moe_fused
