// A llama.cpp LoRA GGUF merged at load (format/lora.h) against llama.cpp running the same base
// with the same adapter: tests/data/lora-gguf (adapters from scripts/golden/make_gguf_lora.py,
// alpha 16, rank 8; goldens from scripts/golden/llama_logits.cpp; its README has the commands).
// stories260K-lora-f32.gguf (F32 factors) is held to the stories260K goldens' tolerance
// (tests/models/test_goldens.cpp: F32 weights, 0.05). stories260K-lora.gguf holds the same
// factor values as F32, F16 and Q8_0 tensors: llama.cpp rounds its activations to F16 / Q8_0
// for those, which moves its own logits by 0.114 from the F32 adapter's, so against its golden
// the bound is 0.15; that the F16 and Q8_0 factors are decoded right is shown exactly instead:
// merged, they give the F32 adapter's logits bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_lora_gguf {
namespace {

std::string data_dir() { return std::string(SLUICE_SOURCE_DIR) + "/tests/data/lora-gguf"; }
std::string adapter() { return data_dir() + "/stories260K-lora-f32.gguf"; }
std::string adapter_mixed() { return data_dir() + "/stories260K-lora.gguf"; }
std::string base() { return test::shared_dir() + "/models/stories260K.gguf"; }

struct Golden {
  std::vector<int32_t> prompt, generated;
  std::vector<float> logits;  // [prompt][vocab]
};

Golden read_golden(const std::string& dir) {
  Golden g;
  const auto j = nlohmann::json::parse(test::read_text_file(data_dir() + "/" + dir + "/greedy.json"));
  g.prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  g.generated = j["generated"].get<std::vector<int32_t>>();
  const std::string bin = test::read_text_file(data_dir() + "/" + dir + "/logits.f32.bin");
  g.logits.resize(bin.size() / 4);
  std::memcpy(g.logits.data(), bin.data(), g.logits.size() * 4);
  return g;
}

std::vector<float> prompt_logits(const Model& m, Backend& be, const std::vector<int32_t>& ids) {
  Session s(m, be, KvCacheOptions{.n_ctx = 128});
  const auto l = s.eval(ids, true);
  return {l.begin(), l.end()};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = a.size() == b.size() ? 0 : 1e30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

std::vector<int32_t> greedy(const Model& m, Backend& be, const std::vector<int32_t>& ids, size_t n) {
  Session s(m, be, KvCacheOptions{.n_ctx = 128});
  auto l = s.eval(ids);
  std::vector<int32_t> out;
  while (out.size() < n) {
    out.push_back(argmax(l));
    const int32_t one[1] = {out.back()};
    l = s.eval(one);
  }
  return out;
}

std::unique_ptr<Model> load(const std::string& lora, bool merge = false) {
  ModelOptions o;
  o.lora = {lora};
  o.lora_merge = merge;
  return Model::load(base(), o);
}

TEST(LoraGguf, MatchesLlamaCppWithTheAdapter) {
  SLUICE_REQUIRE_SHARED();
  const Golden g = read_golden("golden-f32");
  for (const bool merge : {false, true}) {
    auto m = load(adapter(), merge);
    EXPECT_EQ(m->lora_summary(), merge ? "lora: 18 tensors merged (rank 8, scale 2)"
                                       : "lora: 18 tensors adapted at run time (rank 8, scale 2)");
    for (const char* backend : {"ref", "cpu", "cpu-exact"}) {
      auto be = make_backend(backend, 2);
      EXPECT_LT(max_diff(prompt_logits(*m, *be, g.prompt), g.logits), 0.05) << backend << (merge ? " merged" : "");
      EXPECT_EQ(greedy(*m, *be, g.prompt, g.generated.size()), g.generated) << backend << (merge ? " merged" : "");
    }
  }
  // Negative controls: the base alone, and the adapter at half its scale, miss the golden; at
  // scale 0 the output is the base's exactly.
  auto be = make_backend("cpu", 2);
  const auto plain = prompt_logits(*Model::load(base()), *be, g.prompt);
  EXPECT_GT(max_diff(plain, g.logits), 0.5);
  EXPECT_GT(max_diff(prompt_logits(*load(adapter() + ":0.5"), *be, g.prompt), g.logits), 0.2);
  EXPECT_EQ(max_diff(prompt_logits(*load(adapter() + ":0"), *be, g.prompt), plain), 0.0);
}

TEST(LoraGguf, F16AndQ8_0FactorsAreDecodedExactly) {
  SLUICE_REQUIRE_SHARED();
  const Golden g = read_golden("golden");
  auto mixed = load(adapter_mixed());
  EXPECT_EQ(mixed->lora_summary(), "lora: 18 tensors adapted at run time (rank 8, scale 2)");
  for (const char* backend : {"ref", "cpu"}) {
    auto be = make_backend(backend, 2);
    const auto got = prompt_logits(*mixed, *be, g.prompt);
    EXPECT_EQ(max_diff(got, prompt_logits(*load(adapter()), *be, g.prompt)), 0.0) << backend;
    EXPECT_LT(max_diff(got, g.logits), 0.15) << backend;
  }
}

// An adapter on the stacked experts (lora_a [in, r, E], lora_b [r, out, E], as llama.cpp's
// build_lora_mm_id reads them) and on one attn_q, on ../shared/golden/qwen3moe (F16): within
// that golden's tolerance (0.03, tests/models/test_goldens.cpp) of llama.cpp with the adapter,
// and the same 32 greedy tokens (min margin 0.087). Negative controls: the base alone, and the
// adapter without its expert factors, miss the golden; --lora-merge is refused on experts.
TEST(LoraGguf, ExpertFactorsMatchLlamaCpp) {
  SLUICE_REQUIRE_SHARED();
  const Golden g = read_golden("golden-experts");
  const std::string moe = test::shared_dir() + "/golden/qwen3moe/model.gguf",
                    ad = data_dir() + "/qwen3moe-lora-experts.gguf";
  auto with = [&](const std::string& path) {
    ModelOptions o;
    o.lora = {path};
    return Model::load(moe, o);
  };
  auto m = with(ad);
  EXPECT_EQ(m->lora_summary(), "lora: 7 tensors adapted at run time (rank 8, scale 2)");
  for (const char* backend : {"ref", "cpu", "cpu-exact"}) {
    auto be = make_backend(backend, 2);
    const double d = max_diff(prompt_logits(*m, *be, g.prompt), g.logits);
    std::printf("[ experts lora ] %s: max |dlogit| vs llama.cpp %.4f\n", backend, d);
    EXPECT_LT(d, 0.03) << backend;
    EXPECT_EQ(greedy(*m, *be, g.prompt, g.generated.size()), g.generated) << backend;
  }
  auto be = make_backend("cpu", 2);
  EXPECT_GT(max_diff(prompt_logits(*Model::load(moe), *be, g.prompt), g.logits), 0.3);
  // The adapter's attn_q pair alone.
  const GgufFile full(ad);
  GgufWriter w;
  for (const auto& [key, v] : full.metadata()) w.set(key, v);
  for (const TensorView& t : full.tensors())
    if (t.name.find("_exps.") == std::string::npos)
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
  const std::string attn_only = (test::scratch_dir() / "attn-only.gguf").string();
  w.write(attn_only);
  EXPECT_EQ(with(attn_only)->lora_summary(), "lora: 1 tensor adapted at run time (rank 8, scale 2)");
  EXPECT_GT(max_diff(prompt_logits(*with(attn_only), *be, g.prompt), g.logits), 0.3);
  ModelOptions merged;
  merged.lora = {ad};
  merged.lora_merge = true;
  try {
    Model::load(moe, merged);
    ADD_FAILURE() << "--lora-merge on experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lora-merge on experts is not supported"), std::string::npos) << e.what();
  }
}

// Adapters at run time leave the experts alone, so a model whose experts stream from disk takes
// them as the resident one does: an adapter on every layer's attn_q of the MoE stories260K
// gives the same logits with the experts resident or streamed, and not the base's.
TEST(LoraGguf, StreamedExpertsTakeAnAdapterAtRunTime) {
  SLUICE_REQUIRE_SHARED();
  const std::string moe = test::shared_dir() + "/models/stories260K-moe4-split.gguf";
  const std::string dir = (test::scratch_dir() / "sluice_lora_stream").string();
  std::filesystem::create_directories(dir);
  const GgufFile f(moe);
  const int64_t n = f.tensor("blk.0.attn_q.weight").ne[0], r = 4;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  w.set_f32("adapter.lora.alpha", 8.0f);
  std::vector<float> a(n * r), b(r * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.05f * std::sin(0.7f * i), b[i] = 0.05f * std::cos(1.3f * i);
  const int64_t n_layer = f.get_u32("llama.block_count");
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string t = "blk." + std::to_string(l) + ".attn_q.weight";
    w.add_tensor(t + ".lora_a", DType::F32, {n, r}, a.data(), a.size() * 4);
    w.add_tensor(t + ".lora_b", DType::F32, {r, n}, b.data(), b.size() * 4);
  }
  const std::string path = dir + "/attn_q.gguf";
  w.write(path);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 13, 29};
  auto logits = [&](ExpertPolicy policy, bool with_adapter) {
    ModelOptions o;
    o.experts.policy = policy;
    if (with_adapter) o.lora = {path};
    auto m = Model::load(moe, o);
    auto be = make_backend("cpu", 2);
    return prompt_logits(*m, *be, ids);
  };
  const auto resident = logits(ExpertPolicy::resident, true);
  EXPECT_EQ(max_diff(logits(ExpertPolicy::stream, true), resident), 0.0);
  EXPECT_GT(max_diff(logits(ExpertPolicy::resident, false), resident), 1e-3);
  std::filesystem::remove_all(dir);
}

// Broken adapters are refused by name, before anything is merged.
TEST(LoraGguf, BrokenAdaptersAreRefusedByName) {
  SLUICE_REQUIRE_SHARED();
  const std::string dir = (test::scratch_dir() / "sluice_lora_gguf").string();
  std::filesystem::create_directories(dir);
  const std::vector<float> a(8 * 64, 0.01f), b(64 * 8, 0.01f);
  struct Case {
    std::string what, want;
    std::string type = "adapter", arch = "llama", name = "blk.0.attn_q.weight";
    std::vector<int64_t> a_ne{64, 8}, b_ne{8, 64};
    bool with_b = true;
  };
  const std::vector<Case> cases{
      {"a model, not an adapter", "general.type is 'model', not 'adapter'", "model"},
      {"another architecture", "an adapter for architecture 'qwen3'", "adapter", "qwen3"},
      {"a tensor the model lacks", "'blk.9.attn_q.weight' adapts a tensor", "adapter", "llama", "blk.9.attn_q.weight"},
      {"ranks differ", "(the ranks differ)", "adapter", "llama", "blk.0.attn_q.weight", {64, 8}, {4, 128}},
      {"wrong shape",
       "the factors make a [32, 64] update but the tensor is [64, 64]",
       "adapter",
       "llama",
       "blk.0.attn_q.weight",
       {32, 8},
       {8, 64}},
      {"lora_b missing",
       "'blk.0.attn_q.weight.lora_b' missing",
       "adapter",
       "llama",
       "blk.0.attn_q.weight",
       {64, 8},
       {8, 64},
       false},
  };
  for (const Case& c : cases) {
    GgufWriter w;
    w.set_string("general.architecture", c.arch);
    w.set_string("general.type", c.type);
    w.set_string("adapter.type", "lora");
    w.set_f32("adapter.lora.alpha", 8.0f);
    w.add_tensor(c.name + ".lora_a", DType::F32, c.a_ne, a.data(), c.a_ne[0] * c.a_ne[1] * 4);
    if (c.with_b) w.add_tensor(c.name + ".lora_b", DType::F32, c.b_ne, b.data(), c.b_ne[0] * c.b_ne[1] * 4);
    const std::string path = dir + "/broken.gguf";
    w.write(path);
    try {
      load(path);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << c.what << ": names the file: " << e.what();
    }
  }
  for (const auto& [spec, want] :
       std::vector<std::pair<std::string, std::string>>{{dir + "/none.gguf", "no such file or folder"},
                                                        {adapter() + ":x", "no such file or folder"},
                                                        {dir + "/none.gguf:0.5",
                                                         "no such file or folder '" + dir + "/none.gguf'"}}) {
    try {
      load(spec);
      ADD_FAILURE() << spec << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::test_lora_gguf
