// tests/models/test_synth_mlx: `sluice synth --format mlx` — every architecture the folder loader
// reads, written as the folder mlx_lm.convert would write it, loads strictly and is the SAME model
// as the GGUF synth of that seed: float folders give the f32 GGUF's logits (cpu-exact, within
// float reordering) and its greedy tokens. That checks every convention the writer inverts (Llama's
// rotate-half Q/K, Qwen3.5's grouped value heads, Qwen3-Next's fused in_proj_qkvz, A_log, the
// [C, K, 1] convs, mlx-lm's names) against the GGUF path, which the llama.cpp goldens check.
// Negative control: the GGUF of another seed is far from the folder. MLX 4- and 8-bit folders
// (repacked to Q4_1 / Q8_A at load) stay near the float folder, and the CLI writes one that
// `inspect` and `run` read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "models/model.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "test_util.h"

namespace sluice::test_synth_mlx {
namespace {

namespace fs = std::filesystem;

// Ids below the folder tokenizer's 400 (tests/data/hf/qwen3; the GGUF's is stories260K's 512).
const std::vector<int32_t> kPrompt = {1, 203, 207, 261, 378, 132, 383, 286, 261, 376, 300, 128};
// Both models have 512 rows (--vocab 512); synth zeroes the LM-head rows past its tokenizer's
// tokens, which are 400 in the folder, so logits and argmax compare on the first 400.
constexpr int64_t kReal = 400, kVocab = 512;

int32_t argmax_real(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.begin() + kReal) - l.begin());
}

const fs::path& tmp_dir() { return test::scratch_dir(); }

struct Case {
  std::string arch, preset;
  int64_t layers = 0;  // bailingmoe3: a layer count on which mlx-lm's MLA rule agrees with the preset's
};
std::string case_name(const Case& c) { return c.arch + (c.preset == "tiny" ? "" : "_" + c.preset); }
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

const std::vector<Case> kCases = {{"llama", "tiny"},     {"mixtral", "tiny"},      {"qwen3", "tiny"},
                                  {"qwen3moe", "tiny"},  {"deepseek2", "tiny-v3"}, {"qwen35moe", "tiny"},
                                  {"qwen3next", "tiny"}, {"kimi-linear", "tiny"},  {"bailingmoe3", "tiny", 4}};

SynthOptions options(const Case& c, const std::string& format, const std::string& type, uint64_t seed) {
  SynthOptions o;
  o.arch = c.arch;
  o.preset = c.preset;
  o.layers = c.layers;
  o.vocab = 512;
  o.type = type;
  o.seed = seed;
  o.threads = 2;
  o.format = format;
  o.tokenizer = format == "mlx" ? std::string(SLUICE_SOURCE_DIR) + "/tests/data/hf/qwen3"
                                : test::shared_dir() + "/models/stories260K.gguf";
  return o;
}

std::string write_gguf(const Case& c, uint64_t seed) {
  const std::string path = (tmp_dir() / (case_name(c) + "-s" + std::to_string(seed) + ".gguf")).string();
  synth_write(options(c, "gguf", "f32", seed), path);
  return path;
}

std::string write_folder(const Case& c, const std::string& type) {
  const std::string dir = (tmp_dir() / (case_name(c) + "-" + type)).string();
  synth_write_mlx(options(c, "mlx", type, 1), dir);
  return dir;
}

std::vector<float> logits(const Model& m) {
  auto be = make_backend("cpu-exact", 2);
  Session s(m, *be, KvCacheOptions{.n_ctx = 64});
  const auto l = s.eval(kPrompt, /*all_logits=*/true);
  return {l.begin(), l.end()};
}

std::vector<int32_t> greedy(const Model& m, int n) {
  auto be = make_backend("cpu-exact", 2);
  Session s(m, *be, KvCacheOptions{.n_ctx = 64});
  int32_t next = argmax_real(s.eval(kPrompt));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    const int32_t one[1] = {next};
    next = argmax_real(s.eval(one));
  }
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (static_cast<int64_t>(i) % kVocab < kReal) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i)
    num += double(got[i] - want[i]) * (got[i] - want[i]), den += double(want[i]) * want[i];
  return num / den;
}

class SynthMlx : public ::testing::TestWithParam<Case> {};

TEST_P(SynthMlx, FolderIsTheGgufModel) {
  SLUICE_REQUIRE_SHARED();
  const Case c = GetParam();
  auto gguf = Model::load(write_gguf(c, 1)), other = Model::load(write_gguf(c, 2));
  auto folder = Model::load(write_folder(c, "f32"));
  ASSERT_EQ(folder->hparams().n_vocab, kVocab);
  const std::vector<float> want = logits(*gguf), got = logits(*folder);
  ASSERT_EQ(got.size(), want.size());
  // The same weights; only summation orders differ (a head's dims in another order, A_log's
  // exp(log(a)) one ulp off), so float32 rounding: logits of std ~4 agreed to <= 1.2e-5.
  const double d = max_diff(got, want), control = max_diff(logits(*other), got);
  std::printf("[ %s ] folder vs GGUF max |dlogit| %.2e; another seed's GGUF %.2f\n", case_name(c).c_str(), d, control);
  EXPECT_LT(d, 1e-4);
  EXPECT_GT(control, 0.5) << "negative control: a different model must be far off";
  EXPECT_EQ(greedy(*folder, 12), greedy(*gguf, 12));

  // Quantized folders: 8-bit within a small NMSE of the float folder, 4-bit within a larger one
  // (MLX affine groups of 64: ~1% weight error per matrix at 4 bits, compounded over the layers
  // and the gain-4 head; the limits are test_synth's for q8_0 and q4_k_m).
  for (const auto& [type, limit] : {std::pair<const char*, double>{"q8", 5e-3}, {"q4", 6e-2}}) {
    auto q = Model::load(write_folder(c, type));
    const double e = nmse(logits(*q), got);
    std::printf("[ %s ] %s folder vs float folder: logit nmse %.2e\n", case_name(c).c_str(), type, e);
    EXPECT_LT(e, limit) << type;
    // Every matrix repacked exactly (scales and biases are fp16 values); only the routers dequantized.
    const std::string how = q->file().get_string_or("sluice.folder.quantization", "");
    const std::string bits = std::string(type).substr(1) + "-bit g64 bf16 → ";
    const DType repacked = type == std::string("q8") ? DType::Q8_A : DType::Q4_1;
    EXPECT_NE(how.find(bits + std::string(dtype_name(repacked)) + " (exact)"), std::string::npos) << how;
    if (type == std::string("q4")) {
      EXPECT_EQ(how.find(bits + "f32"), std::string::npos) << how;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arches, SynthMlx, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return test::test_name_part(case_name(info.param)); });

// Negative control for a convention the writer inverts: the same Llama folder read with
// rope_traditional (mlx-lm's switch for checkpoints whose Q/K are NOT in rotate-half order) is
// another model, so the test above would catch Q/K rows left in llama.cpp's order.
TEST(SynthMlx, LlamaRotateHalfOrderMatters) {
  SLUICE_REQUIRE_SHARED();
  const Case c{"llama", "tiny"};
  const std::string dir = write_folder(c, "f32"), edited = dir + "-traditional";
  fs::copy(dir, edited, fs::copy_options::recursive);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["rope_traditional"] = true;
  std::ofstream(edited + "/config.json") << cfg.dump();
  auto gguf = Model::load(write_gguf(c, 1)), right = Model::load(dir), wrong = Model::load(edited);
  const std::vector<float> want = logits(*gguf);
  EXPECT_LT(max_diff(logits(*right), want), 1e-4);
  EXPECT_GT(max_diff(logits(*wrong), want), 0.05);
}

// config.json says what mlx_lm.convert says: the default bits and group, the routers at 8 bits by
// module path; tensors under mlx-lm's names (stacked switch_mlp experts as uint32 codes).
TEST(SynthMlx, ConfigAndNamesAreMlxLms) {
  const std::string dir = write_folder({"qwen3moe", "tiny"}, "q4");
  std::ifstream in(dir + "/config.json");
  const auto cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg["model_type"], "qwen3_moe");
  EXPECT_EQ(cfg["quantization"]["bits"], 4);
  EXPECT_EQ(cfg["quantization"]["group_size"], 64);
  EXPECT_EQ(cfg["quantization"]["model.layers.0.mlp.gate"]["bits"], 8);
  EXPECT_TRUE(fs::exists(dir + "/tokenizer.json"));
}

// Shapes a folder cannot hold, and bad options, fail before anything is written, naming why.
TEST(SynthMlx, ClearErrors) {
  auto error_of = [](SynthOptions o) {
    try {
      synth_write_mlx(o, (tmp_dir() / "bad").string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(options({"olmoe", "tiny"}, "mlx", "q4", 1)).find("olmoe has no folder form"), std::string::npos);
  EXPECT_NE(error_of(options({"deepseek2", "tiny"}, "mlx", "q4", 1)).find("tiny-v3"), std::string::npos);
  EXPECT_NE(error_of(options({"bailingmoe3", "tiny"}, "mlx", "q4", 1)).find("mlx-lm's rule"), std::string::npos);
  EXPECT_NE(error_of(options({"qwen3", "tiny"}, "mlx", "q4_k", 1)).find("not a folder type"), std::string::npos);
  SynthOptions g = options({"qwen3", "tiny"}, "mlx", "q4", 1);
  g.group_size = 48;
  EXPECT_NE(error_of(g).find("group size 48"), std::string::npos);
  SynthOptions t = options({"qwen3", "tiny"}, "mlx", "q4", 1);
  t.tokenizer = test::shared_dir() + "/models/stories260K.gguf";
  EXPECT_NE(error_of(t).find("not a folder with tokenizer.json"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp_dir() / "bad" / "model.safetensors"));
}


// The CLI: --format mlx writes a folder (default tokenizer: tests/data/hf/qwen3, found from the
// binary) that `inspect` and `run` read.
TEST(SynthMlx, CliEndToEnd) {
  const std::string cli = ::sluice::test::cli_path(), out = (tmp_dir() / "cli-folder").string();
  int status = 0;
  std::string log = test::run_command(cli + " synth --format mlx --arch qwen35moe --type q4 --group-size 32 -o " + out +
                                          " 2>&1",
                                      &status);
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("wrote " + out), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors") && fs::exists(out + "/tokenizer_config.json")) << log;
  log = test::run_command(cli + " inspect " + out + " 2>&1", &status);
  EXPECT_EQ(status, 0) << log;
  EXPECT_NE(log.find("4-bit g32"), std::string::npos) << log;
  log = test::run_command(cli + " run -m " + out + " -p hi -n 8 --temp 0 2>&1", &status);
  EXPECT_EQ(status, 0) << log;
  log = test::run_command(cli + " synth --format mlx --arch olmoe -o " + out + "-olmoe 2>&1", &status);
  EXPECT_NE(status, 0) << log;
  EXPECT_NE(log.find("olmoe has no folder form"), std::string::npos) << log;
}

}  // namespace
}  // namespace sluice::test_synth_mlx
