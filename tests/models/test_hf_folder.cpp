// tests/models/test_hf_folder: Hugging Face model folders (format/hf_folder.h) against MLX-LM
// loading the same folders (tests/data/hf/{llama,qwen3}, scripts/golden/make_hf_folders.py):
// tokenizer.json gives the ids `tokenizers` gives, the logits match MLX's float32 run on the
// bf16 weights, and greedy continues alike. Negative controls: Llama without the NEOX RoPE
// the HF layout needs, and Qwen3 with its q/k norms dropped, miss the golden. Unsupported or
// broken folders are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::string folder(const std::string& arch) { return std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/" + arch; }

nlohmann::json golden(const std::string& arch) {
  std::ifstream in(folder(arch) + "/golden.json");
  return nlohmann::json::parse(in);
}

double max_logit_diff(const Model& m, Backend& be, const nlohmann::json& g) {
  KvCacheOptions kv;
  kv.n_ctx = 128;
  Session s(m, be, kv);
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  auto logits = s.eval(ids, true);
  const int64_t V = m.hparams().n_vocab;
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(double(logits[t * V + v]) - g["logits"][t][v].get<double>()));
  return worst;
}

std::vector<int32_t> greedy(const Model& m, Backend& be, const std::vector<int32_t>& ids, int n) {
  KvCacheOptions kv;
  kv.n_ctx = 128;
  Session s(m, be, kv);
  auto l = s.eval(ids);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(l));
    const int32_t one[1] = {out.back()};
    l = s.eval(one);
  }
  return out;
}

class HfFolder : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFolder, MatchesMlxLm) {
  const std::string arch = GetParam();
  const nlohmann::json g = golden(arch);
  auto m = Model::load(folder(arch));
  EXPECT_EQ(m->hparams().arch, arch);
  EXPECT_EQ(m->hparams().rope_mode, RopeMode::neox);
  // The tokenizer: `tokenizers`' ids, with and without special tokens in the text.
  EXPECT_EQ(m->tokenizer().encode(g["text"].get<std::string>(), true), g["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(m->tokenizer().encode("<|im_start|>user\nHi<|im_end|>\n", true, true),
            g["chat_ids"].get<std::vector<int32_t>>());
  EXPECT_TRUE(m->tokenizer().is_eog(m->tokenizer().text_to_token("<|im_end|>")));
  EXPECT_FALSE(m->file().get_string_or("tokenizer.chat_template", "").empty());
  for (const char* backend : {"ref", "cpu", "cpu-exact"}) {
    auto be = make_backend(backend, 2);
    const double d = max_logit_diff(*m, *be, g);
    EXPECT_LT(d, 2e-3) << arch << " on " << backend;
    EXPECT_EQ(greedy(*m, *be, g["ids"].get<std::vector<int32_t>>(), 16), g["greedy"].get<std::vector<int32_t>>())
        << arch << " on " << backend;
  }
  // Negative controls.
  auto be = make_backend("ref", 2);
  if (arch == "llama") {
    m->mutable_hparams().rope_mode = RopeMode::normal;  // as a GGUF llama would run: wrong for HF's layout
  } else {
    m->mutable_hparams().rope_base *= 4;  // qwen3 has no layout quirk: a wrong rope base must show
  }
  EXPECT_GT(max_logit_diff(*m, *be, g), 0.05) << arch << ": the negative control passes the golden";
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFolder, ::testing::Values("llama", "qwen3"));

// A copy of the llama folder with one file changed: each breakage is refused by name.
std::string broken_folder(const std::string& name, const std::function<void(const fs::path&)>& edit) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("sluice_hf_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(folder("llama"))) fs::copy(e.path(), dir / e.path().filename());
  edit(dir);
  return dir.string();
}

void edit_json(const fs::path& p, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j;
  {
    std::ifstream in(p);
    j = nlohmann::json::parse(in);
  }
  f(j);
  std::ofstream(p) << j.dump();
}

TEST(HfFolderErrors, RefusedByName) {
  const std::pair<std::string, std::function<void(const fs::path&)>> cases[] = {
      {"model_type 'gpt_neox' is not supported",
       [](const fs::path& d) { edit_json(d / "config.json", [](auto& j) { j["model_type"] = "gpt_neox"; }); }},
      {"rope_scaling",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; });
       }},
      {"quantized checkpoints",
       [](const fs::path& d) {
         edit_json(d / "config.json", [](auto& j) { j["quantization"] = {{"group_size", 64}, {"bits", 4}}; });
       }},
      {"'hidden_size' missing",
       [](const fs::path& d) { edit_json(d / "config.json", [](auto& j) { j.erase("hidden_size"); }); }},
      {"tokenizer.json: cannot open", [](const fs::path& d) { fs::remove(d / "tokenizer.json"); }},
      {"no model.safetensors", [](const fs::path& d) { fs::remove(d / "model.safetensors"); }},
      {"pre_tokenizer",
       [](const fs::path& d) {
         edit_json(d / "tokenizer.json", [](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
       }},
  };
  for (const auto& [want, edit] : cases) {
    const std::string dir = broken_folder(std::to_string(&want - &cases[0].first), edit);
    try {
      Model::load(dir);
      ADD_FAILURE() << "accepted a folder that should fail with: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// The CLI takes a folder where it takes a GGUF file.
TEST(HfFolderErrors, RunTakesAFolder) {
  int rc = 0;
  const std::string out = test::run_command(std::string(SLUICE_CLI_PATH) + " run -m " + folder("llama") +
                                                " -p 'Once upon' -n 4 --temp 0 2>&1",
                                            &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("loaded"), std::string::npos) << out;
  const std::string stream = test::run_command(std::string(SLUICE_CLI_PATH) + " run -m " + folder("llama") +
                                                   " --experts stream -n 1 2>&1",
                                               &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(stream.find("--experts stream needs a GGUF file"), std::string::npos) << stream;
}

}  // namespace
}  // namespace sluice
