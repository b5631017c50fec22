// tests/models/test_bailingmoe3: the Ling 3 model of tests/data/golden/bailingmoe3 (4 KDA layers
// with the safe decay gate, 1 MLA layer with RoPE and a head-wise sigmoid output gate,
// group-limited sigmoid MoE); its golden is checked with the others in test_repo_goldens.cpp.
// Here: the memory layout; a prompt in one batch equals the same prompt
// token by token (ref: bitwise) and a split prefill equals the whole; and negative controls
// that must fail the golden: no head-wise attention gate, softmax instead of sigmoid routing,
// no group limit, MLA without RoPE, another gate lower bound. The variant golden
// tests/data/golden/bailingmoe3-clamp (SwiGLU clamps per layer, mrope sections) fails without
// either clamp or with NORM instead of NEOX pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "memory/memory.h"
#include "models/bailingmoe3.h"
#include "models/model.h"
#include "models/session_eval_util.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_bailingmoe3 {
namespace {

const std::string kGolden = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/bailingmoe3";
const std::string kClampGolden = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/bailingmoe3-clamp";
const std::vector<int32_t> kPromptIds = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428,
                                         395, 392, 412, 444, 263, 415, 414, 401, 396, 267, 352, 379};

using test::eval_all;
using test::token_by_token;

double max_abs_vs_golden(const Model& m) { return test::max_abs_vs_golden(m, kGolden, kPromptIds, "bailingmoe3"); }

// The golden itself is checked by tests/models/test_repo_goldens.cpp (every backend).


TEST(BailingMoe3, MemoryLayoutHasStatesForKdaAndRowsForMla) {
  auto m = Model::load(kGolden + "/model.gguf");
  const MemoryLayout lay = m->memory_layout();
  ASSERT_EQ(lay.layers.size(), 5u);
  const int64_t window = 3 * 128;  // (K-1) * n_head * head_dim
  for (int l : {0, 1, 2, 4}) {
    EXPECT_EQ(lay.layers[l].kind, LayerMemoryKind::recurrent) << "layer " << l;
    EXPECT_EQ(lay.layers[l].state_floats, (std::vector<int64_t>{window, window, window, 4 * 32 * 32}));
  }
  EXPECT_EQ(lay.layers[3].kind, LayerMemoryKind::kv);
  EXPECT_EQ(lay.kv.n_layer, 1);
  EXPECT_EQ(lay.kv.head_dim_k, 64 + 16);  // [kv_lora | k_rope]
  EXPECT_EQ(lay.kv.head_dim_v, 64);       // kv_lora
  EXPECT_EQ(m->hparams().moe.n_group, 4);
  EXPECT_EQ(m->hparams().moe.n_group_used, 2);
  EXPECT_EQ(m->hparams().n_ff_shexp, 64);
}

class BailingMoe3Batch : public ::testing::TestWithParam<std::string> {};

// ref: per-row ops and a float32 state between tokens, so the split cannot show: bitwise.
// cpu: batched matmul tiles vs the one-token paths (the per-channel delta rule has no chunked
// form, so it is the recurrence either way); 1e-9 NMSE as test_hybrid's bound.
TEST_P(BailingMoe3Batch, PromptInOneBatchEqualsTokenByTokenAndSplitPrefill) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto be = make_backend(GetParam(), 2);
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < 100; ++i)
    prompt.push_back(i == 0 ? 1 : static_cast<int32_t>(3 + (i * 131 + i * i * 7) % 509));
  Session a(*m, *be, KvCacheOptions{.n_ctx = 128}), b(*m, *be, KvCacheOptions{.n_ctx = 128});
  const std::vector<float> batch = eval_all(a, prompt), steps = token_by_token(b, prompt);
  const double bound = GetParam() == "ref" ? 1e-10 : 1e-9;
  const double e = test::nmse(steps, batch);
  std::printf("[ %s ] bailingmoe3 100 tokens, one batch vs token by token: NMSE %.2e\n", GetParam().c_str(), e);
  EXPECT_LE(e, bound);
  if (GetParam() == "ref") {
    EXPECT_EQ(batch, steps) << "ref: bitwise";
  }
  Session c(*m, *be, KvCacheOptions{.n_ctx = 128});
  std::vector<float> split = eval_all(c, std::span(prompt).first(37));
  const std::vector<float> rest = eval_all(c, std::span(prompt).subspan(37));
  split.insert(split.end(), rest.begin(), rest.end());
  EXPECT_LE(test::nmse(batch, split), bound) << "prefill split at 37";
}

INSTANTIATE_TEST_SUITE_P(BailingMoe3, BailingMoe3Batch, ::testing::Values("ref", "cpu"));

// Metadata the module reads beyond the golden's: SwiGLU clamps (one value or one per layer;
// an all-zero list, what the converter writes for layers without a limit, is none) and mrope
// sections load; what it does not implement or cannot mean is refused naming the key: a
// fourth (vision) mrope section, sections wider than the rope dims, a clamp list of the wrong
// length or a negative clamp, a non-safe KDA gate.
TEST(BailingMoe3, ReadsClampsAndSectionsAndRefusesWhatItCannotRun) {
  GgufFile in(kGolden + "/model.gguf");
  auto load = [&](const std::function<void(GgufWriter&)>& extra, std::string* err) -> std::unique_ptr<Model> {
    GgufWriter w;
    for (const auto& [k, v] : in.metadata()) w.set(k, v);
    extra(w);
    for (const auto& t : in.tensors())
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
    const std::string path = (test::scratch_dir() / "sluice_bailingmoe3_variant.gguf").string();
    w.write(path);
    std::unique_ptr<Model> m;
    try {
      m = Model::load(path);  // maps the file; the tests below read hparams only
    } catch (const Error& e) {
      *err = e.what();
    }
    std::filesystem::remove(path);
    return m;
  };
  auto error = [&](const std::function<void(GgufWriter&)>& extra) {
    std::string err;
    load(extra, &err);
    return err;
  };
  std::string err;
  auto m = load(
      [](GgufWriter& w) {
        w.set_f32_array("bailingmoe3.swiglu_clamp_exp", {0, 7, 6, 5, 1e-7f});
        w.set_f32("bailingmoe3.swiglu_clamp_shexp", 7.0f);
        w.set_i32_array("bailingmoe3.rope.dimension_sections", {4, 2, 2, 0});
      },
      &err);
  ASSERT_TRUE(m) << err;
  const Hparams& hp = m->hparams();
  EXPECT_EQ(hp.swiglu_limit_exp, (std::vector<float>{0, 7, 6, 5, 0}));  // 1e-7: none, as llama.cpp's 1e-6 test
  EXPECT_EQ(hp.swiglu_limit_shexp, std::vector<float>(5, 7.0f));
  EXPECT_EQ(hp.rope_mode, RopeMode::neox);
  m = load([](GgufWriter& w) { w.set_i32_array("bailingmoe3.rope.dimension_sections", {4, 0, 2, 0}); }, &err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->hparams().rope_mode, RopeMode::normal) << "s[1] = 0: llama.cpp's use_mrope() is false";
  EXPECT_EQ(m->hparams().swiglu_limit_exp, std::vector<float>{});

  EXPECT_NE(error([](GgufWriter& w) {
              w.set_i32_array("bailingmoe3.rope.dimension_sections", {3, 2, 2, 1});
            }).find("dimension_sections[3]"),
            std::string::npos);
  EXPECT_NE(error([](GgufWriter& w) {
              w.set_i32_array("bailingmoe3.rope.dimension_sections", {8, 8, 4, 0});
            }).find("rope.dimension_sections sum to 20"),
            std::string::npos);
  EXPECT_NE(error([](GgufWriter& w) {
              w.set_f32_array("bailingmoe3.swiglu_clamp_exp", {7, 7, 7});
            }).find("swiglu_clamp_exp has 3 values for 5 blocks"),
            std::string::npos);
  EXPECT_NE(error([](GgufWriter& w) {
              w.set_f32("bailingmoe3.swiglu_clamp_shexp", -1.0f);
            }).find("swiglu_clamp_shexp = -1"),
            std::string::npos);
  EXPECT_NE(error([](GgufWriter& w) { w.set_bool("bailingmoe3.kda.safe_gate", false); }).find("safe_gate"),
            std::string::npos);
}

// A multi-token-prediction block (llama.cpp's converters append it: block_count counts it,
// {arch}.nextn_predict_layers says how many trailing blocks are MTP, per-layer arrays cover
// it) is not run: the golden's file with a sixth block (a copy of block 4 plus the nextn
// tensors) gives the golden's logits bit for bit on ref; read as a sixth layer it does not.
TEST(BailingMoe3, NextNBlocksAreNotRun) {
  GgufFile in(kGolden + "/model.gguf");
  const int64_t E = in.get_u32("bailingmoe3.embedding_length");
  auto write = [&](bool declare_nextn) {
    GgufWriter w;
    for (const auto& [k, v] : in.metadata()) w.set(k, v);
    w.set_u32("bailingmoe3.block_count", 6);
    w.set_i32_array("bailingmoe3.attention.head_count_kv", {0, 0, 0, 1, 0, 0});
    if (declare_nextn) w.set_u32("bailingmoe3.nextn_predict_layers", 1);
    for (const auto& t : in.tensors()) {
      const std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      w.add_tensor(t.name, t.type, ne, t.data, t.nbytes);
      if (std::string(t.name).rfind("blk.4.", 0) == 0)
        w.add_tensor("blk.5." + std::string(t.name).substr(6), t.type, ne, t.data, t.nbytes);
    }
    const std::vector<float> ones(static_cast<size_t>(E), 1.0f), eh(static_cast<size_t>(2 * E * E), 0.01f);
    w.add_tensor("blk.5.nextn.eh_proj.weight", DType::F32, {2 * E, E}, eh.data(), eh.size() * sizeof(float));
    for (const char* n : {"blk.5.nextn.enorm.weight", "blk.5.nextn.hnorm.weight", "blk.5.layer_output_norm.weight"})
      w.add_tensor(n, DType::F32, {E}, ones.data(), ones.size() * sizeof(float));
    const std::string path =
        (test::scratch_dir() / (declare_nextn ? "sluice_b3_mtp.gguf" : "sluice_b3_six.gguf")).string();
    w.write(path);
    return path;
  };
  auto logits = [&](const std::string& path) {
    auto m = Model::load(path);
    auto be = make_backend("ref", 1);
    Session s(*m, *be, KvCacheOptions{.n_ctx = 64});
    return std::make_pair(m->hparams().n_layer, eval_all(s, kPromptIds));
  };
  const std::string mtp = write(true), six = write(false);
  const auto [n_golden, want] = logits(kGolden + "/model.gguf");
  const auto [n_mtp, got] = logits(mtp);
  const auto [n_six, wrong] = logits(six);
  std::filesystem::remove(mtp);
  std::filesystem::remove(six);
  EXPECT_EQ(n_mtp, n_golden);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  EXPECT_EQ(n_six, n_golden + 1);
  EXPECT_GT(test::nmse(want, wrong), 1e-4) << "negative control: the sixth block run as a layer";
}

// How close the golden's routing comes to a tie, on ref over the prompt and the greedy tokens
// fed back: per MoE layer and token, the gap between the 2nd and 3rd group score (sum of a
// group's two best biased scores) and between the 4th and 5th biased expert score inside the
// kept groups. A backend whose router scores move by more than the gap could route otherwise.
TEST(BailingMoe3, RoutingMarginsOfTheGolden) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto be = make_backend("ref");
  const nlohmann::json greedy = nlohmann::json::parse(test::read_text_file(kGolden + "/greedy.json"));
  std::vector<int32_t> tokens = kPromptIds;
  const std::vector<int32_t> gen = greedy["generated"].get<std::vector<int32_t>>();
  tokens.insert(tokens.end(), gen.begin(), gen.end() - 1);
  const MoeOptions& moe = m->hparams().moe;
  const int64_t per = moe.n_expert / moe.n_group;
  double group_gap = 1e9, expert_gap = 1e9;
  Session s(*m, *be, KvCacheOptions{.n_ctx = 64});
  s.set_hook([&](std::string_view name, int layer, const float* d, int64_t rows, int64_t cols) {
    if (name != "ffn_moe_probs") return;
    const float* bias = static_cast<const float*>(m->layers()[static_cast<size_t>(layer)].exp_probs_b->data);
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<double> sc(cols);
      for (int64_t e = 0; e < cols; ++e) sc[e] = d[t * cols + e] + bias[e];
      std::vector<std::pair<double, int64_t>> gs;
      for (int64_t g = 0; g < moe.n_group; ++g) {
        std::vector<double> v(sc.begin() + g * per, sc.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({v[0] + v[1], g});
      }
      std::sort(gs.rbegin(), gs.rend());
      group_gap = std::min(group_gap, gs[moe.n_group_used - 1].first - gs[moe.n_group_used].first);
      std::vector<double> kept;
      for (int64_t j = 0; j < moe.n_group_used; ++j)
        kept.insert(kept.end(), sc.begin() + gs[j].second * per, sc.begin() + (gs[j].second + 1) * per);
      std::sort(kept.rbegin(), kept.rend());
      expert_gap = std::min(expert_gap, kept[moe.n_expert_used - 1] - kept[moe.n_expert_used]);
    }
  });
  eval_all(s, tokens);
  std::printf("[ bailingmoe3 / ref ] smallest routing gaps over %zu tokens: group %.5f, expert %.5f\n", tokens.size(),
              group_gap, expert_gap);
  EXPECT_GT(group_gap, 0.0);
  EXPECT_GT(expert_gap, 0.0);
}

// Each control perturbs one thing the golden depends on; each must move the logits past 0.03.
using Perturb = std::function<void(Model&, BailingMoe3Hparams&)>;
double perturbed(const Perturb& p) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto bh = std::make_shared<BailingMoe3Hparams>(m->hparams().ext_as<BailingMoe3Hparams>());
  p(*m, *bh);
  m->mutable_hparams().ext = bh;
  return max_abs_vs_golden(*m);
}

TEST(BailingMoe3Negative, BaselinePasses) {
  EXPECT_LE(perturbed([](Model&, BailingMoe3Hparams&) {}), 0.03);
}

TEST(BailingMoe3Negative, WithoutHeadWiseAttentionGateFails) {
  EXPECT_GT(perturbed([](Model&, BailingMoe3Hparams& bh) { bh.attn_head_gate = false; }), 0.03);
}

TEST(BailingMoe3Negative, SoftmaxInsteadOfSigmoidRoutingFails) {
  EXPECT_GT(perturbed([](Model& m, BailingMoe3Hparams&) { m.mutable_hparams().moe.gating = MoeGating::softmax; }),
            0.03);
}

TEST(BailingMoe3Negative, WithoutGroupLimitFails) {
  EXPECT_GT(perturbed([](Model& m, BailingMoe3Hparams&) { m.mutable_hparams().moe.n_group_used = 4; }), 0.03);
}

TEST(BailingMoe3Negative, MlaWithoutRopeFails) {
  EXPECT_GT(perturbed([](Model&, BailingMoe3Hparams& bh) { bh.mla.rope = false; }), 0.03);
}

TEST(BailingMoe3Negative, AnotherGateLowerBoundFails) {
  EXPECT_GT(perturbed([](Model&, BailingMoe3Hparams& bh) { bh.gate_lower_bound = -4.0f; }), 0.03);
}

// The clamp golden (its match on every backend: test_repo_goldens.cpp) fails without the
// routed experts' clamp, without the shared/dense clamp, or with NORM pairs for its mrope file.
double clamp_golden_error(const std::function<void(Hparams&)>& p) {
  auto m = Model::load(kClampGolden + "/model.gguf");
  p(m->mutable_hparams());
  return test::max_abs_vs_golden(*m, kClampGolden, kPromptIds, "bailingmoe3-clamp");
}

TEST(BailingMoe3Negative, ClampGoldenBaselinePasses) {
  EXPECT_LE(clamp_golden_error([](Hparams&) {}), 0.03);
}

TEST(BailingMoe3Negative, ClampGoldenWithoutExpertClampFails) {
  EXPECT_GT(clamp_golden_error([](Hparams& hp) { hp.swiglu_limit_exp.clear(); }), 0.03);
}

TEST(BailingMoe3Negative, ClampGoldenWithoutSharedClampFails) {
  EXPECT_GT(clamp_golden_error([](Hparams& hp) { hp.swiglu_limit_shexp.clear(); }), 0.03);
}

TEST(BailingMoe3Negative, ClampGoldenWithNormRopeFails) {
  EXPECT_GT(clamp_golden_error([](Hparams& hp) { hp.rope_mode = RopeMode::normal; }), 0.03);
}

}  // namespace
}  // namespace sluice::test_bailingmoe3
