// tests/models/test_hf_layouts: model folders in layouts other than mlx-lm's own, against MLX-LM
// loading the same folders: experts stored one by one (qwen3moe, mixtral), Qwen3.5-MoE /
// Qwen3-Next / Kimi Linear as transformers writes them (tests/data/hf/*-hf: mlx-lm's sanitize
// maps each back), and config.json's rope_scaling (YaRN) on the deepseek2 and qwen3 folders.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/backend.h"
#include "hf_folder_util.h"
#include "models/model.h"
#include "models/qwen35.h"

namespace sluice::test_hf_layouts {
namespace {

using namespace test_hf;

// Experts stored one by one (transformers' layout) are stacked at load: the same weights as
// the stacked qwen3moe folder, so its MLX-LM golden.
TEST(HfFolder, PerExpertLayoutMatchesTheStackedGolden) {
  const nlohmann::json g = golden("qwen3moe");
  const std::string dir = broken_folder(
      "per_expert",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors", [](auto& h) { unstack_experts(h, [](int64_t e) { return e; }); });
      },
      "qwen3moe");
  auto m = Model::load(dir);
  expect_golden(*m, g, {"ref", "cpu"});
  // Negative control: experts stacked in another order (expert e given e + 1's matrices).
  const std::string rotated = broken_folder(
      "per_expert_rotated",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors",
                       [](auto& h) { unstack_experts(h, [](int64_t e) { return (e + 1) % 8; }); });
      },
      "qwen3moe");
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(rotated), *be, g), 0.05);
  // Mixtral's own names (w1 gate, w3 up, w2 down).
  const std::string mixtral = broken_folder(
      "per_expert_mixtral",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors", [](auto& h) {
          unstack_experts(
              h, [](int64_t e) { return e; }, /*mixtral=*/true);
        });
      },
      "mixtral");
  expect_golden(*Model::load(mixtral), golden("mixtral"), {"ref"});
}

// A Qwen3.5 checkpoint as transformers writes it: conv1d [C, 1, K] and RMSNorm weights as the
// offset from 1. mlx-lm's sanitize tells it by the conv1d's shape and adds the 1; so must the
// loader (the same bytes under an HF-shaped conv1d give every layer and q/k norm + 1, and leave
// the gated norm of the DeltaNet, which multiplies by w itself, and the conv weights as they are).
TEST(HfFolder, Qwen35HfLayoutAddsOneToItsNorms) {
  const std::string hf = broken_folder(
      "qwen35_hf_layout",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors", [](auto& h) {
          for (auto& [name, v] : h.items())
            if (name.ends_with("conv1d.weight")) v["shape"] = {v["shape"][0], 1, v["shape"][1]};
        });
      },
      "qwen35moe");
  auto mlx = Model::load(folder("qwen35moe")), raw = Model::load(hf);
  auto values = [](const Model& m, const std::string& name) {
    const TensorView* t = m.file().find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t ? t->type : DType::F32, DType::F32) << name;
    const float* p = t ? static_cast<const float*>(t->data) : nullptr;
    return p ? std::vector<float>(p, p + t->ne[0] * t->ne[1]) : std::vector<float>();
  };
  int checked = 0;
  for (const std::string name : {"blk.0.attn_norm.weight", "blk.2.post_attention_norm.weight", "output_norm.weight",
                                 "blk.3.attn_q_norm.weight", "blk.3.attn_k_norm.weight"}) {
    const auto a = values(*mlx, name), b = values(*raw, name);
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i, ++checked) EXPECT_EQ(b[i], a[i] + 1.0f) << name << "[" << i << "]";
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(values(*mlx, "blk.1.ssm_norm.weight"), values(*raw, "blk.1.ssm_norm.weight"));
  EXPECT_EQ(values(*mlx, "blk.1.ssm_conv1d.weight"), values(*raw, "blk.1.ssm_conv1d.weight"));
}

// Qwen3.5-MoE and Qwen3-Next as transformers writes them (tests/data/hf/qwen35moe-hf:
// model.language_model. keys and fused experts.gate_up_proj; qwen3next-hf: experts one by one;
// both: conv1d [C, 1, K], RMSNorm weights as the offset from 1), against MLX-LM loading the
// same folder (its sanitize undoes each of these).
class HfTransformersLayout : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(HfTransformersLayout, MatchesMlxLm) {
  const auto [dir, arch] = GetParam();
  const nlohmann::json g = golden(dir);
  auto m = Model::load(folder(dir));
  EXPECT_EQ(m->hparams().arch, arch);
  expect_golden(*m, g, {"ref", "cpu"});
  // Negative control: the conv1d shaped as mlx-lm saves it ([C, K, 1], the same bytes), so the
  // norms are taken as multipliers and miss their 1.
  const std::string as_mlx = broken_folder(
      std::string(dir) + "_as_mlx",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors", [](auto& h) {
          for (auto& [name, v] : h.items())
            if (name.ends_with("conv1d.weight")) v["shape"] = {v["shape"][0], v["shape"][2], 1};
        });
      },
      dir);
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(as_mlx), *be, g), 0.05);
}

// Kimi Linear as transformers writes it (tests/data/hf/kimi-linear-hf: q/k/v_conv1d [C, 1, K],
// dt_bias [H, D], MLA's kv_b_proj, the MoE layers under block_sparse_moe with experts one by one
// as w1 / w3 / w2), against MLX-LM loading that folder (its sanitize maps every name back: the
// golden equals kimi-linear's own). Negative control: the experts' w1 (gate) and w3 (up) swapped.
TEST(HfTransformersLayoutKimi, MatchesMlxLm) {
  const nlohmann::json g = golden("kimi-linear-hf");
  auto m = Model::load(folder("kimi-linear-hf"));
  EXPECT_EQ(m->hparams().arch, "kimi-linear");
  expect_golden(*m, g, {"ref", "cpu-exact"});
  const std::string swapped = broken_folder(
      "kimi_hf_w1w3",
      [](const fs::path& d) {
        edit_st_header(d / "model.safetensors", [](auto& h) {
          nlohmann::json out;
          for (auto& [name, v] : h.items()) {
            std::string n = name;
            if (n.ends_with(".w1.weight"))
              n.replace(n.size() - 9, 2, "w3");
            else if (n.ends_with(".w3.weight"))
              n.replace(n.size() - 9, 2, "w1");
            out[n] = v;
          }
          h = out;
        });
      },
      "kimi-linear-hf");
  auto be = make_backend("ref", 2);
  EXPECT_GT(max_logit_diff(*Model::load(swapped), *be, g), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HfTransformersLayout,
                         ::testing::Values(std::make_pair("qwen35moe-hf", "qwen35moe"),
                                           std::make_pair("qwen3next-hf", "qwen3next")),
                         [](const auto& info) {
                           std::string n = info.param.first;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// RoPE scaling from config.json's rope_scaling, against MLX-LM's run of the same weights with it
// (<folder>/golden-yarn.json, scripts/golden/make_hf_folders.py --yarn-only): DeepSeek-V3's YaRN
// (factor 40 over 4096; the attention scale times (0.1·ln 40 + 1)²) and Qwen3's (factor 4; cos
// and sin times 0.1·ln 4 + 1). Negative controls: plain linear interpolation (no YaRN ramp),
// and the YaRN magnitude left out.
class HfYarn : public ::testing::TestWithParam<std::string> {};

TEST_P(HfYarn, MatchesMlxLm) {
  const std::string arch = GetParam();
  std::ifstream in(folder(arch) + "/golden-yarn.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  const std::string dir = broken_folder(
      "yarn_" + arch,
      [&](const fs::path& d) { edit_json(d / "config.json", [&](auto& j) { j["rope_scaling"] = g["rope_scaling"]; }); },
      arch);
  auto m = Model::load(dir);
  const Hparams& hp = m->hparams();
  EXPECT_EQ(hp.rope_ext_factor, 1.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f / g["rope_scaling"]["factor"].get<float>());
  for (const char* backend : {"ref", "cpu", "cpu-exact"}) {
    auto be = make_backend(backend, 2);
    EXPECT_LT(max_logit_diff(*m, *be, g), 2e-3) << arch << " on " << backend;
    EXPECT_LT(max_logit_diff(*m, *be, g, /*chunks=*/true), 2e-3) << arch << " on " << backend << ", 7+6+rest";
    EXPECT_EQ(greedy(*m, *be, g["ids"].get<std::vector<int32_t>>(), 16), g["greedy"].get<std::vector<int32_t>>())
        << arch << " on " << backend;
  }
  auto be = make_backend("ref", 2);
  const Hparams keep = hp;
  m->mutable_hparams().rope_ext_factor = 0.0f;  // every pair interpolated
  EXPECT_GT(max_logit_diff(*m, *be, g), 0.05) << arch << ": without the YaRN ramp";
  m->mutable_hparams() = keep;
  if (arch == "deepseek2") {
    EXPECT_GT(hp.kq_scale_mul, 1.5f);
    m->mutable_hparams().kq_scale_mul = 1.0f;
  } else {
    EXPECT_GT(hp.rope_mscale, 1.1f);
    m->mutable_hparams().rope_mscale = 1.0f;
  }
  EXPECT_GT(max_logit_diff(*m, *be, g), 0.05) << arch << ": without the YaRN magnitude";
}

INSTANTIATE_TEST_SUITE_P(Archs, HfYarn, ::testing::Values("deepseek2", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sluice::test_hf_layouts
