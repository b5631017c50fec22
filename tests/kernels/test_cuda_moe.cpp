// tests/kernels/test_cuda_moe: the cuda backend's moe_ffn_token (decode MoE in one round trip)
// and its VRAM expert tier.
//   Without a device (always run): the host-side plan of a call (backends/cuda/moe_plan.h:
//   scratch layout, launch grouping, shape errors) and the residency bookkeeping the backend
//   relies on (held experts survive eviction, the budget holds, a budget below one call's
//   experts refuses instead of evicting a held one), over a fake device allocator.
//   With a device: against ref's moe_ffn_token for the weight-type mixes models use (fused down
//   path and the mixed-down-types path); against the cuda backend's own default composition;
//   results bitwise identical with and without an expert budget, including budgets that force
//   evictions and one below k experts; experts stay out of the weight cache when tiered;
//   negative controls. Without a device these report "skipped: no device".
//
// Tolerance: as test_moe_fused.cpp's exact path, 1e-10 — decoded weights are bit-identical to
// quant/'s, only float32 accumulation (three chained matvecs and a k-term sum) differs from
// ref's float64; observed on the cpu backend ≤ 1e-13. Against the cuda default (same kernels
// for gate/up/swiglu/down dots, the weighted sum on the host, where the compiler may contract
// `out += w*y` into an FMA): 1e-12, i.e. at most an ulp per term.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/moe_plan.h"
#include "backends/ref/ref_backend.h"
#include "core/error.h"
#include "core/expert_cache.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "quant/quant.h"
#include "test_util.h"

#ifdef SLUICE_HAVE_CUDA
#include "backends/cuda/expert_tier.h"
#endif

namespace sluice::test_cuda_moe {
namespace {

using test::nmse;
using test::randn;

// ---- host side: the plan -----------------------------------------------------------------

using cuda::MoeLaunchKind;
using cuda::MoeMatrix;

std::vector<MoeMatrix> matrices(const std::vector<std::pair<DType, DType>>& types, int64_t E, int64_t F) {
  std::vector<MoeMatrix> m;
  for (const auto& [gu, d] : types) {
    m.push_back({gu, E, F});
    m.push_back({gu, E, F});
    m.push_back({d, F, E});
  }
  return m;
}

TEST(CudaMoePlan, UniformTypesOneGateUpLaunchAndFusedDown) {
  const auto m = matrices({{DType::Q4_K, DType::Q6_K}, {DType::Q4_K, DType::Q6_K}, {DType::Q4_K, DType::Q6_K}}, 256,
                          512);
  const cuda::MoePlan p = cuda::moe_plan(m, 256);
  EXPECT_EQ(p.h_off, (std::vector<int64_t>{0, 512, 1024}));
  EXPECT_EQ(p.h_floats, 1536);
  EXPECT_EQ(p.y_floats, 0);
  EXPECT_EQ(p.job_matrix, (std::vector<int>{0, 1, 3, 4, 6, 7, 2, 5, 8}));
  ASSERT_EQ(p.launches.size(), 2u);
  EXPECT_EQ(p.launches[0].kind, MoeLaunchKind::gate_up);
  EXPECT_EQ(p.launches[0].type, DType::Q4_K);
  EXPECT_EQ(p.launches[0].first, 0);
  EXPECT_EQ(p.launches[0].count, 6);
  EXPECT_EQ(p.launches[0].max_out, 512);
  EXPECT_EQ(p.launches[1].kind, MoeLaunchKind::down_fused);
  EXPECT_EQ(p.launches[1].type, DType::Q6_K);
  EXPECT_EQ(p.launches[1].first, 6);
  EXPECT_EQ(p.launches[1].count, 3);
  EXPECT_EQ(p.launches[1].max_out, 256);
}

TEST(CudaMoePlan, HiddenRowsAre256ByteAligned) {
  const auto m = matrices({{DType::Q8_0, DType::Q8_0}, {DType::Q8_0, DType::Q8_0}}, 96, 160);
  const cuda::MoePlan p = cuda::moe_plan(m, 96);
  EXPECT_EQ(p.h_off, (std::vector<int64_t>{0, 192}));
  EXPECT_EQ(p.h_floats, 384);
  for (int64_t o : p.h_off) EXPECT_EQ(o % 64, 0);
}

TEST(CudaMoePlan, MixedTypesGroupStablyAndCombineInExpertOrder) {
  // Expert 0: Q8_0 gate/up, Q6_K down; expert 1: F16 / Q8_0; expert 2: Q8_0 / Q6_K.
  const auto m = matrices({{DType::Q8_0, DType::Q6_K}, {DType::F16, DType::Q8_0}, {DType::Q8_0, DType::Q6_K}}, 256,
                          256);
  const cuda::MoePlan p = cuda::moe_plan(m, 256);
  ASSERT_EQ(p.job_matrix.size(), 12u);
  // Gate/up: grouped by type, expert order kept inside a group, each group one launch.
  int n_gate_up = 0, n_part = 0, n_combine = 0, n_fused = 0;
  for (const auto& l : p.launches) {
    for (int i = l.first; i < l.first + l.count; ++i) {
      if (l.kind != MoeLaunchKind::combine) {
        EXPECT_EQ(m[p.job_matrix[i]].type, l.type) << "job " << i;
      }
      if (i > l.first && l.kind != MoeLaunchKind::combine) {
        EXPECT_LT(p.job_matrix[i - 1], p.job_matrix[i]);
      }
    }
    n_gate_up += l.kind == MoeLaunchKind::gate_up;
    n_part += l.kind == MoeLaunchKind::down_part;
    n_combine += l.kind == MoeLaunchKind::combine;
    n_fused += l.kind == MoeLaunchKind::down_fused;
  }
  EXPECT_EQ(n_gate_up, 2);
  EXPECT_EQ(n_part, 2);
  EXPECT_EQ(n_combine, 1);
  EXPECT_EQ(n_fused, 0);
  // The combine runs last, over the downs in expert order.
  const auto& c = p.launches.back();
  EXPECT_EQ(c.kind, MoeLaunchKind::combine);
  EXPECT_EQ(c.count, 3);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(p.job_matrix[c.first + j], 3 * j + 2);
  EXPECT_EQ(p.y_stride, 256);
  EXPECT_EQ(p.y_floats, 3 * 256);
  // Every gate/up launch comes before every down launch (swiglu runs between them).
  bool seen_down = false;
  for (const auto& l : p.launches) {
    if (l.kind != MoeLaunchKind::gate_up) {
      seen_down = true;
    } else {
      EXPECT_FALSE(seen_down);
    }
  }
}

TEST(CudaMoePlan, ShapeErrorsNameTheExpert) {
  auto m = matrices({{DType::F16, DType::F16}, {DType::F16, DType::F16}}, 64, 32);
  m[5].n_out = 63;  // expert 1's down has the wrong output size
  try {
    cuda::moe_plan(m, 64);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert 1"), std::string::npos) << e.what();
  }
  auto q = matrices({{DType::Q4_K, DType::Q4_K}}, 128, 256);  // 128 is not whole 256-blocks
  EXPECT_THROW(cuda::moe_plan(q, 128), Error);
  EXPECT_TRUE(cuda::moe_plan(std::vector<MoeMatrix>{}, 64).launches.empty());
}

TEST(CudaMoePlan, RoutedExpertNames) {
  for (const char* yes : {"blk.0.ffn_gate_exps.weight", "blk.47.ffn_down_exps.weight", "blk.3.ffn_up.12.weight"})
    EXPECT_TRUE(cuda::routed_expert_name(yes)) << yes;
  for (const char* no : {"blk.0.ffn_gate.weight", "blk.0.ffn_gate_shexp.weight", "blk.0.ffn_gate_inp.weight",
                         "blk.0.attn_q.weight", "token_embd.weight", "blk.1.ffn_down.7.bias", "w"})
    EXPECT_FALSE(cuda::routed_expert_name(no)) << no;
}

// ---- host side: residency bookkeeping over a fake device allocator ------------------------

class FakeVram final : public ExpertSlotAllocator {
 public:
  static constexpr size_t kGrain = size_t{64} << 10;  // as the cuda slot allocator
  size_t live = 0, peak = 0;
  size_t slot_bytes(size_t bytes) const override { return (bytes + kGrain - 1) / kGrain * kGrain; }
  uint8_t* allocate(size_t bytes) override {
    live += bytes;
    peak = std::max(peak, live);
    next_ += bytes;
    return reinterpret_cast<uint8_t*>(next_);
  }
  void release(uint8_t*, size_t bytes) override { live -= bytes; }
  bool host_visible() const override { return false; }

 private:
  uintptr_t next_ = 1 << 20;
};

// The pattern of CudaBackend::moe_ffn_token over CudaExpertTier: request each of the k
// experts (insert on a miss, the copy "finishes" at once), hold them all for the call, release
// at the end. Held experts must never be evicted by the call's own later inserts.
TEST(CudaExpertResidency, HeldExpertsSurviveAndBudgetHolds) {
  auto alloc = std::make_unique<FakeVram>();
  FakeVram* vram = alloc.get();
  const size_t expert_bytes = 3 * 200000;  // a slot of 10 grains
  const size_t slot = vram->slot_bytes(expert_bytes);
  ExpertCache c(6 * slot, std::move(alloc));  // 6 experts, k = 4 per call, 32 experts per layer
  std::mt19937 rng(9);
  uint64_t hits = 0, misses = 0;
  for (int call = 0; call < 400; ++call) {
    const int layer = call % 2;
    std::vector<int> chosen;
    while (chosen.size() < 4) {  // skewed: experts 0..3 are routed to half the time
      const int e = static_cast<int>(rng() % 2 ? rng() % 4 : rng() % 32);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    std::vector<std::pair<ExpertCache::Entry*, uint8_t*>> held;
    for (int e : chosen) {
      ExpertCache::Entry* en = c.find(layer, e);
      if (en) {
        ++hits;
      } else {
        en = c.insert(layer, e, expert_bytes, /*probationary_only=*/false);
        ASSERT_NE(en, nullptr) << "room for 6, 3 held: a slot must be free";
        en->state = ExpertCache::State::ready;
        ++misses;
      }
      ++en->holds;
      c.mark_used(en);
      held.push_back({en, en->buf});
      ASSERT_LE(c.used(), c.budget());
    }
    for (auto& [en, buf] : held) {  // none of this call's experts moved or vanished
      EXPECT_EQ(c.find(en->layer, en->expert), en);
      EXPECT_EQ(en->buf, buf);
      --en->holds;
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(misses, 6u);
  EXPECT_GT(c.evictions(), 0u);
  EXPECT_LE(vram->peak, 6 * slot);
  EXPECT_EQ(vram->live, c.used());
}

TEST(CudaExpertResidency, BudgetBelowOneCallRefusesInsteadOfEvictingHeld) {
  auto alloc = std::make_unique<FakeVram>();
  const size_t slot = alloc->slot_bytes(100000);
  ExpertCache c(2 * slot, std::move(alloc));  // room for 2, a call wants 3
  std::vector<ExpertCache::Entry*> held;
  for (int e = 0; e < 3; ++e) {
    ExpertCache::Entry* en = c.insert(0, e, 100000, false);
    if (e < 2) {
      ASSERT_NE(en, nullptr);
      en->state = ExpertCache::State::ready;
      ++en->holds;
      held.push_back(en);
    } else {
      EXPECT_EQ(en, nullptr) << "the third expert must go to the overflow scratch";
    }
  }
  for (auto* en : held) --en->holds;
  EXPECT_NE(c.insert(0, 2, 100000, false), nullptr) << "released experts are evictable again";
  EXPECT_EQ(c.evictions(), 1u);
}

// ---- the CLI: --gpu-expert-cache ----------------------------------------------------------

// Without a device: the option's errors. With one: greedy text on an MoE model (8 experts of
// ~33 KB, 4 routed) is the same with a 320K budget (five 64 KiB slots: every layer evicts) as
// with every expert in VRAM, and the run ends with the tier's figures.
TEST(CudaMoeCli, GpuExpertCacheOption) {
  SLUICE_REQUIRE_SHARED();
  const std::string cli = ::sluice::test::cli_path(), m = test::shared_dir() + "/models/stories260K-moe8top4-dup.gguf";
  const std::string base = cli + " run -m " + m + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos";
  int rc = 0;
  std::string err = test::run_command(base + " --gpu-expert-cache 1G 2>&1 >/dev/null", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--gpu-expert-cache needs --backend cuda"), std::string::npos) << err;
  err = test::run_command(base + " --backend cuda --gpu-expert-cache 12Q 2>&1 >/dev/null", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("is not a size"), std::string::npos) << err;
  SLUICE_REQUIRE_CUDA();
  int rc_plain = 0, rc_tier = 0;
  const std::string plain = test::run_command(base + " --backend cuda 2>/dev/null", &rc_plain);
  const std::string dir = ::testing::TempDir();
  const std::string tier =
      test::run_command(base + " --backend cuda --gpu-expert-cache 320K 2>" + dir + "/gpu-tier.err", &rc_tier);
  ASSERT_EQ(rc_plain, 0);
  ASSERT_EQ(rc_tier, 0) << test::read_text_file(dir + "/gpu-tier.err");
  EXPECT_EQ(plain, tier);
  const std::string tier_err = test::read_text_file(dir + "/gpu-tier.err");
  const size_t at = tier_err.find("gpu expert cache:");
  ASSERT_NE(at, std::string::npos) << tier_err;
  std::printf("[  INFO    ] %s", tier_err.substr(at).c_str());
}

// ---- device ---------------------------------------------------------------------------------

#ifdef SLUICE_HAVE_CUDA

constexpr double kTolMoe = 1e-10;  // see the file comment
constexpr double kTolMoeVsDefault = 1e-12;

// Experts' matrices at scale 0.05 (weights of a trained FFN's magnitude, so SwiGLU is not saturated).
struct Matrix : test::RandomMatrix {
  Matrix(DType t, int64_t n_in, int64_t n_out, uint32_t seed) : RandomMatrix(t, n_in, n_out, seed, 0.05f) {}
};

// n_expert experts of one layer (gate, up, down each), with per-expert down types optional.
struct Layer {
  std::vector<Matrix> m;
  Layer(DType gate_up, std::vector<DType> downs, int64_t E, int64_t F, uint32_t seed) {
    m.reserve(3 * downs.size());
    for (size_t j = 0; j < downs.size(); ++j) {
      const uint32_t s = seed + 3 * static_cast<uint32_t>(j);
      m.emplace_back(gate_up, E, F, s);
      m.emplace_back(gate_up, E, F, s + 1);
      m.emplace_back(downs[j], F, E, s + 2);
    }
  }
  FfnExpert expert(int j, float weight, int layer) const {
    return {&m[3 * j].view, &m[3 * j + 1].view, &m[3 * j + 2].view, weight, layer, layer >= 0 ? j : -1};
  }
};

std::vector<float> run(Backend& b, std::span<const FfnExpert> ex, const std::vector<float>& x, int64_t E) {
  std::vector<float> y(static_cast<size_t>(E), NAN);
  b.moe_ffn_token(ex, x.data(), y.data(), E);
  return y;
}
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Mix {
  DType gate_up, down;
  int64_t E, F;
};
// qwen3moe Q4_K_M (Q4_K gate/up, Q6_K down), pure K types, legacy blocks, float types, and
// an F whose hidden rows need padding (96, 72, 40 floats).
const Mix kMixes[] = {{DType::Q4_K, DType::Q6_K, 512, 256}, {DType::Q4_K, DType::Q4_K, 256, 512},
                      {DType::Q5_K, DType::Q6_K, 256, 256}, {DType::Q8_0, DType::Q8_0, 256, 96},
                      {DType::Q4_0, DType::Q8_0, 128, 64},  {DType::F16, DType::F16, 128, 72},
                      {DType::F32, DType::BF16, 64, 40},    {DType::Q2_K, DType::Q3_K, 256, 256}};

TEST(CudaMoe, MatchesRefAndDefault) {
  SLUICE_REQUIRE_CUDA();
  auto ref = make_ref_backend();
  CudaBackend cu;
  double worst = 0, worst_default = 0;
  for (const Mix& mx : kMixes) {
    for (int k : {1, 8}) {
      SCOPED_TRACE(std::string(dtype_name(mx.gate_up)) + "/" + std::string(dtype_name(mx.down)) +
                   " k=" + std::to_string(k));
      Layer l(mx.gate_up, std::vector<DType>(static_cast<size_t>(k), mx.down), mx.E, mx.F, 40);
      const std::vector<float> w = randn(static_cast<size_t>(k), 41);
      std::vector<FfnExpert> ex;
      for (int j = 0; j < k; ++j) ex.push_back(l.expert(j, 0.1f + std::abs(w[static_cast<size_t>(j)]), -1));
      const std::vector<float> x = randn(static_cast<size_t>(mx.E), 42);
      const auto want = run(*ref, ex, x, mx.E);
      const auto got = run(cu, ex, x, mx.E);
      std::vector<float> dflt(static_cast<size_t>(mx.E), NAN);
      cu.Backend::moe_ffn_token(ex, x.data(), dflt.data(), mx.E);
      const double e = nmse(want, got), ed = nmse(dflt, got);
      EXPECT_LT(e, kTolMoe);
      EXPECT_LT(ed, kTolMoeVsDefault);
      worst = std::max(worst, e);
      worst_default = std::max(worst_default, ed);
    }
  }
  std::printf("[  NMSE    ] cuda moe_ffn_token vs ref max %.3g, vs cuda default max %.3g\n", worst, worst_default);
}

TEST(CudaMoe, MixedDownTypesMatchRef) {
  SLUICE_REQUIRE_CUDA();
  auto ref = make_ref_backend();
  CudaBackend cu;
  Layer l(DType::Q4_K, {DType::Q6_K, DType::Q8_0, DType::Q6_K, DType::Q4_K, DType::F16}, 256, 256, 50);
  std::vector<FfnExpert> ex;
  for (int j = 0; j < 5; ++j) ex.push_back(l.expert(j, 0.2f + 0.1f * j, -1));
  const std::vector<float> x = randn(256, 51);
  EXPECT_LT(nmse(run(*ref, ex, x, 256), run(cu, ex, x, 256)), kTolMoe);
  // A subset with one down type takes the fused path over the same (cached) weights.
  std::vector<FfnExpert> one{ex[1]};
  EXPECT_LT(nmse(run(*ref, one, x, 256), run(cu, one, x, 256)), kTolMoe);
}

// Many decode calls over a 16-expert layer pair, routed at random, k = 4: with a tier that
// holds all, 6, or 3 (below k: overflow) experts, results are bitwise those of the untiered
// backend, and the tier's figures add up.
TEST(CudaMoe, ExpertTierGivesIdenticalResults) {
  SLUICE_REQUIRE_CUDA();
  const int64_t E = 512, F = 256;
  const int n_expert = 16, k = 4;
  Layer layers[2] = {Layer(DType::Q4_K, std::vector<DType>(n_expert, DType::Q6_K), E, F, 60),
                     Layer(DType::Q4_K, std::vector<DType>(n_expert, DType::Q6_K), E, F, 160)};
  ExpertHostBytes hb;
  for (int i = 0; i < 3; ++i) hb.bytes[i] = layers[0].m[i].bytes.size();
  size_t total = 0;
  {
    size_t off[3];
    CudaExpertTier::slot_layout(hb, off, &total);
  }
  const size_t slot = (total + (64 << 10) - 1) / (64 << 10) * (64 << 10);
  CudaBackend plain;
  for (size_t budget_experts : {size_t{2 * n_expert}, size_t{6}, size_t{3}}) {
    SCOPED_TRACE("budget of " + std::to_string(budget_experts) + " experts");
    CudaBackend tiered(CudaBackendOptions{.expert_cache_bytes = budget_experts * slot});
    std::mt19937 rng(7);
    for (int call = 0; call < 60; ++call) {
      const int layer = call % 2;
      std::vector<int> chosen;
      // Skewed routing (experts 0..3 twice as likely), so the SLRU has something to keep.
      while (static_cast<int>(chosen.size()) < k) {
        const int e = static_cast<int>(rng() % 2 ? rng() % 4 : rng() % n_expert);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      std::sort(chosen.begin(), chosen.end());
      std::vector<FfnExpert> ex;
      for (int e : chosen) ex.push_back(layers[layer].expert(e, 0.1f + 0.05f * e, layer));
      const std::vector<float> x = randn(static_cast<size_t>(E), 100 + call);
      ASSERT_TRUE(bitwise_equal(run(plain, ex, x, E), run(tiered, ex, x, E))) << "call " << call;
    }
    const CudaExpertStats s = tiered.expert_stats();
    EXPECT_EQ(s.requests, 60u * k);
    EXPECT_EQ(s.requests, s.hits + s.copies + s.overflow);
    EXPECT_LE(s.peak, s.budget);
    // Below k experts the other layer's call evicts everything in between: no hits to expect.
    if (budget_experts >= 6) {
      EXPECT_GT(s.hits, 0u);
    }
    if (budget_experts < 2 * n_expert) {
      EXPECT_GT(s.evictions, 0u);
    }
    if (budget_experts < static_cast<size_t>(k)) {
      EXPECT_GT(s.overflow, 0u);
    }
    EXPECT_EQ(tiered.weight_stats().entries, 0u) << "tiered experts must not enter the weight cache";
    std::printf("[  INFO    ] %s\n", tiered.expert_stats_line().c_str());
  }
  EXPECT_GT(plain.weight_stats().entries, 0u);
}

// Prefill runs experts through matmul, which has no (layer, expert) ids: with a budget, a
// routed expert's matrix (by name) is uploaded per call, never cached; without one, cached.
TEST(CudaMoe, PrefillMatmulOfExpertsBypassesTheWeightCacheWithABudget) {
  SLUICE_REQUIRE_CUDA();
  Matrix w(DType::Q4_K, 512, 256, 80);
  w.view.name = "blk.0.ffn_gate_exps.weight";
  const std::vector<float> x = randn(512 * 16, 81);
  CudaBackend plain, tiered(CudaBackendOptions{.expert_cache_bytes = size_t{64} << 20});
  for (int64_t T : {1, 16}) {
    std::vector<float> a(static_cast<size_t>(T * 256)), b(a.size());
    plain.matmul(w.view, x.data(), a.data(), T);
    tiered.matmul(w.view, x.data(), b.data(), T);
    EXPECT_TRUE(bitwise_equal(a, b)) << "T = " << T;
  }
  EXPECT_EQ(plain.weight_stats().entries, 1u);
  EXPECT_EQ(tiered.weight_stats().entries, 0u);
  EXPECT_EQ(tiered.expert_stats().transient_uploads, 2u);
}

TEST(CudaMoe, NegativeControls) {
  SLUICE_REQUIRE_CUDA();
  auto ref = make_ref_backend();
  const int64_t E = 512, F = 256;
  Layer l(DType::Q4_K, std::vector<DType>(8, DType::Q6_K), E, F, 70);
  std::vector<FfnExpert> ex;
  for (int j = 0; j < 8; ++j) ex.push_back(l.expert(j, 0.1f + 0.1f * j, 0));
  const std::vector<float> x = randn(static_cast<size_t>(E), 71);
  const auto want = run(*ref, ex, x, E);
  CudaBackend cu(CudaBackendOptions{.expert_cache_bytes = size_t{256} << 20});
  EXPECT_LT(nmse(want, run(cu, ex, x, E)), kTolMoe);
  // Routing weights of two experts swapped.
  auto swapped = ex;
  std::swap(swapped[0].weight, swapped[7].weight);
  EXPECT_GT(nmse(want, run(cu, swapped, x, E)), 1e-4);
  // One expert dropped.
  std::vector<FfnExpert> seven(ex.begin(), ex.end() - 1);
  EXPECT_GT(nmse(want, run(cu, seven, x, E)), 1e-4);
  // The tier trusts (layer, expert): expert 1's matrices under expert 0's id are served as
  // expert 0 (already resident) — the comparison catches a tier serving the wrong expert.
  auto mislabeled = ex;
  mislabeled[1].expert = 0;
  EXPECT_GT(nmse(want, run(cu, mislabeled, x, E)), 1e-4);
}

#endif  // SLUICE_HAVE_CUDA

}  // namespace
}  // namespace sluice::test_cuda_moe
