// tests/models/test_repo_goldens: goldens this project made with llama.cpp for architectures
// ../shared/golden does not cover (tests/data/golden/<arch>/, each with a README naming the
// llama.cpp commit and the commands). The same rules as the shared F16 goldens: all prompt
// logits in one batch within max |Δlogit| 0.03 and RMS 0.005 (0.35 and 0.06 for llama.cpp-quantized
// weights, as the shared quantized goldens), the argmax equal wherever the
// golden's top-2 margin is at least 0.05, and the greedy continuation (each token decoded
// alone) equal up to its first step with a margin under 0.05.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "format/gguf.h"
#include "kernels/cuda_test_util.h"
#include "models/model.h"
#include "models/qwen35.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_repo_goldens {
namespace {

using nlohmann::json;

std::string golden_dir(const std::string& name) {
  return std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/" + name;
}

// The golden's model: its model.gguf, or where it has a derive.json ({"from": a ../shared GGUF,
// "string"|"f32"|"u32": keys to add}), that GGUF with the keys added, written to a temp file by
// Sluice's GGUF writer (scripts/golden/gguf_with_keys.py made the same file for llama.cpp).
std::string golden_model(const std::string& name) {
  const std::string dir = golden_dir(name);
  if (!std::filesystem::exists(dir + "/derive.json")) return dir + "/model.gguf";
  const json spec = json::parse(test::read_text_file(dir + "/derive.json"));
  GgufFile in(test::shared_dir() + "/" + spec["from"].get<std::string>());
  GgufWriter w;
  for (const auto& [k, v] : in.metadata()) w.set(k, v);
  // Each group bound to a name: items() of a temporary would outlive it.
  const json strings = spec.value("string", json::object()), f32s = spec.value("f32", json::object()),
             u32s = spec.value("u32", json::object());
  for (const auto& [k, v] : strings.items()) w.set_string(k, v.get<std::string>());
  for (const auto& [k, v] : f32s.items()) w.set_f32(k, v.get<float>());
  for (const auto& [k, v] : u32s.items()) w.set_u32(k, v.get<uint32_t>());
  for (const auto& t : in.tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
  const std::string path = (test::scratch_dir() / ("sluice_golden_" + name + ".gguf")).string();
  w.write(path);
  return path;
}

float top2_margin(std::span<const float> l) {
  float a = -INFINITY, b = -INFINITY;
  for (float v : l) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

struct RepoGoldenCase {
  std::string name, backend;
  // Weights llama.cpp quantized (llama-quantize): ../shared/golden's rule for its quantized
  // variants (llama.cpp multiplies them with activations quantized to Q8; ref keeps floats).
  bool llama_quantized = false;
};
void PrintTo(const RepoGoldenCase& c, std::ostream* os) { *os << c.name << " on " << c.backend; }

class RepoGolden : public ::testing::TestWithParam<RepoGoldenCase> {};

TEST_P(RepoGolden, MatchesLlamaCpp) {
  const auto& [name, backend, quantized] = GetParam();
  if (backend == "cuda") SLUICE_REQUIRE_CUDA();
  const std::string dir = golden_dir(name);
  if (std::filesystem::exists(dir + "/derive.json")) SLUICE_REQUIRE_SHARED();
  auto model = Model::load(golden_model(name));
  auto be = make_backend(backend, 2);
  const json greedy = json::parse(test::read_text_file(dir + "/greedy.json"));
  const auto ids = greedy["prompt_tokens"].get<std::vector<int32_t>>();
  const int64_t V = model->hparams().n_vocab;
  const int n_gen = greedy["n_gen"];
  Session s(*model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(ids.size()) + n_gen + 1});
  auto logits = s.eval(ids, /*all_logits=*/true);
  const std::vector<float> ref = test::read_f32_file(dir + "/logits.f32.bin");
  ASSERT_EQ(ref.size(), logits.size());
  double mx = 0, sum2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(logits[i]) - ref[i]);
    mx = std::max(mx, d);
    sum2 += d * d;
  }
  const double rms = std::sqrt(sum2 / ref.size());
  std::printf("[ %s / %s ] max |Δlogit| %.5f  rms %.6f\n", name.c_str(), backend.c_str(), mx, rms);
  EXPECT_LE(mx, quantized ? 0.35 : 0.03);
  EXPECT_LE(rms, quantized ? 0.06 : 0.005);
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto want = std::span<const float>(ref).subspan(t * V, V);
    if (top2_margin(want) < 0.05f) continue;
    EXPECT_EQ(argmax(logits.subspan(t * V, V)), argmax(want)) << "argmax at position " << t;
  }
  const auto want = greedy["generated"].get<std::vector<int32_t>>();
  const auto margins = greedy["margins"].get<std::vector<double>>();
  int32_t next = argmax(logits.subspan(logits.size() - V));
  int safe = 0;
  for (int i = 0; i < n_gen && margins[i] >= 0.05; ++i, ++safe) {
    ASSERT_EQ(next, want[i]) << "greedy step " << i;
    next = argmax(s.eval(std::span(&next, 1)));
  }
  std::printf("[ %s / %s ] greedy %d/%d steps checked (the rest follow a margin < 0.05)\n", name.c_str(),
              backend.c_str(), safe, n_gen);
  EXPECT_GE(safe, 8) << "too few safe greedy steps to mean anything";
}

// Negative control: Qwen3-Next's grouped key heads read as Qwen3.5's tiled ones (the two
// differ only when 1 < H_k < H_v, as here: 2 key heads, 4 value heads) must fail the golden.
// max |Δlogit| of `model` (on the cpu backend) against golden `name`'s prompt logits.
double max_err(const Model& model, const std::string& name) {
  const std::string dir = golden_dir(name);
  const auto ids = json::parse(test::read_text_file(dir + "/greedy.json"))["prompt_tokens"].get<std::vector<int32_t>>();
  const std::vector<float> ref = test::read_f32_file(dir + "/logits.f32.bin");
  auto be = make_backend("cpu", 2);
  Session s(model, *be, KvCacheOptions{.n_ctx = 64});
  auto l = s.eval(ids, true);
  double mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(l[i]) - ref[i]));
  return mx;
}

TEST(RepoGoldenNegative, Qwen3NextWithTiledKeyHeadsFails) {
  auto model = Model::load(golden_model("qwen3next"));
  ASSERT_LE(max_err(*model, "qwen3next"), 0.03);
  auto dn = std::make_shared<DeltaNetHparams>(model->hparams().ext_as<DeltaNetHparams>());
  ASSERT_TRUE(dn->grouped_heads);
  dn->grouped_heads = false;
  model->mutable_hparams().ext = dn;
  EXPECT_GT(max_err(*model, "qwen3next"), 0.03);
}

// Negative controls of the YaRN goldens: every pair interpolated (no ramp), and the YaRN
// magnitude left out (DeepSeek2: of the attention scale; Qwen3: of cos and sin).
TEST(RepoGoldenNegative, YarnWithoutRampOrMagnitudeFails) {
  SLUICE_REQUIRE_SHARED();
  for (const std::string name : {"deepseek2-yarn", "qwen3-yarn"}) {
    auto model = Model::load(golden_model(name));
    ASSERT_LE(max_err(*model, name), 0.03) << name;
    const Hparams keep = model->hparams();
    EXPECT_EQ(keep.rope_ext_factor, 1.0f) << name;
    model->mutable_hparams().rope_ext_factor = 0.0f;
    EXPECT_GT(max_err(*model, name), 0.03) << name << ": without the ramp";
    model->mutable_hparams() = keep;
    if (name == "deepseek2-yarn")
      model->mutable_hparams().kq_scale_mul = 1.0f;
    else
      model->mutable_hparams().rope_mscale = 1.0f;
    EXPECT_GT(max_err(*model, name), 0.03) << name << ": without the magnitude";
  }
}

std::vector<RepoGoldenCase> cases() {
  std::vector<RepoGoldenCase> v;
  for (const char* n : {"qwen3next", "qwen35", "kimi-linear", "bailingmoe3", "bailingmoe3-clamp", "deepseek2-yarn",
                        "qwen3-yarn", "qwen3moe-iq4_xs"})
    for (const char* b : {"ref", "cpu", "cpu-exact", "cuda"})
      v.push_back({n, b, /*llama_quantized=*/std::string_view(n) == "qwen3moe-iq4_xs"});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Hybrids, RepoGolden, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<RepoGoldenCase>& i) {
                           return test::test_name_part(i.param.name + "_" + i.param.backend);
                         });

}  // namespace
}  // namespace sluice::test_repo_goldens
