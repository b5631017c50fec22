// tests/models/test_model_parity: ref vs cpu on every named intermediate of each golden
// model (prompt batch + decode steps), plus negative controls proving the comparison fails
// when the computation is wrong.
#include <gtest/gtest.h>

#include "backends/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_model_parity {
namespace {

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428};

class ModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParity, CpuMatchesRefOnEveryIntermediate) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(test::shared_dir() + "/" + GetParam());
  auto ref = make_backend("ref", 1);
  for (auto [threads, kv_type] : {std::pair{1, DType::F16}, std::pair{2, DType::F16}, std::pair{2, DType::F32}}) {
    auto cpu = make_backend("cpu-exact", threads);
    KvCacheOptions kv{.n_ctx = 32, .type_k = kv_type, .type_v = kv_type};
    ParityReport rep = run_parity(*model, *ref, *model, *cpu, kPrompt, /*n_decode=*/3, kv);
    ASSERT_GT(rep.entries.size(), 10u);
    double worst = 0;
    for (const auto& e : rep.entries) worst = std::max(worst, e.nmse);
    const ParityEntry* bad = rep.first_divergence();
    EXPECT_EQ(bad, nullptr) << "first divergence: " << bad->name << " layer " << bad->layer << " nmse " << bad->nmse;
    std::printf("[ %s, %d threads, kv %s ] %zu intermediates, worst nmse %.3e (limit %.0e)\n", GetParam().c_str(),
                threads, std::string(dtype_name(kv_type)).c_str(), rep.entries.size(), worst, rep.entries[0].tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, ModelParity,
                         ::testing::Values("models/stories260K.gguf", "golden/llama_dense/model.gguf",
                                           "golden/llama_dense-Q8_0/model.gguf", "golden/llama_dense-Q4_K_M/model.gguf",
                                           "golden/qwen3_dense/model.gguf", "golden/qwen3moe/model.gguf",
                                           "golden/qwen3moe-Q4_K_M/model.gguf", "golden/mixtral/model.gguf",
                                           "golden/olmoe/model.gguf", "golden/deepseek2/model.gguf",
                                           "models/stories260K-moe8top4-dup.gguf"),
                         [](const auto& info) { return test::test_name_part(info.param); });

// Negative control 1: the test model uses the wrong RoPE pair layout. The comparison must
// let everything before RoPE pass and flag the rotated queries of layer 0 first.
TEST(ModelParityNegative, WrongRopeLayoutIsCaughtAtQcurRope) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3_dense/model.gguf";
  auto good = Model::load(path);
  auto bad = Model::load(path);
  bad->mutable_hparams().rope_mode = RopeMode::normal;  // qwen3 needs neox
  auto ref = make_backend("ref", 1), cpu = make_backend("cpu-exact", 1);
  ParityReport rep = run_parity(*good, *ref, *bad, *cpu, kPrompt, 0, KvCacheOptions{.n_ctx = 16});
  const ParityEntry* e = rep.first_divergence();
  ASSERT_NE(e, nullptr) << "a wrong RoPE layout went unnoticed";
  EXPECT_EQ(e->name, "Qcur_rope");
  EXPECT_EQ(e->layer, 0);
  EXPECT_GT(e->nmse, 1e-3);
}

// Negative control 2: a dropped per-head q/k norm must be flagged at the first norm output.
TEST(ModelParityNegative, DroppedQkNormIsCaught) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/qwen3_dense/model.gguf";
  auto good = Model::load(path);
  auto bad = Model::load(path);
  bad->mutable_hparams().qk_norm_per_head = false;  // skips the norms and their hook names
  auto ref = make_backend("ref", 1), cpu = make_backend("cpu-exact", 1);
  // The intermediates no longer line up by name: run_parity must refuse, not compare garbage.
  EXPECT_THROW(run_parity(*good, *ref, *bad, *cpu, kPrompt, 0, KvCacheOptions{.n_ctx = 16}), Error);
}

// Negative control 3: the rope base is off by 1%; small but real, it must exceed the limit.
TEST(ModelParityNegative, SlightlyWrongRopeBaseIsCaught) {
  SLUICE_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/golden/llama_dense/model.gguf";
  auto good = Model::load(path);
  auto bad = Model::load(path);
  bad->mutable_hparams().rope_base *= 1.01f;
  auto ref = make_backend("ref", 1), cpu = make_backend("cpu-exact", 2);
  ParityReport rep = run_parity(*good, *ref, *bad, *cpu, kPrompt, 0, KvCacheOptions{.n_ctx = 16});
  const ParityEntry* e = rep.first_divergence();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, "Qcur_rope");
}

}  // namespace
}  // namespace sluice::test_model_parity

namespace sluice::test_model_parity {
namespace {

// Work is split by output rows only, never across a sum, so the default (int8) cpu backend
// gives the same greedy tokens — indeed the same logits bits — for any thread count.
TEST(ThreadDeterminism, GreedyTokensIdenticalFor1And2Threads) {
  SLUICE_REQUIRE_SHARED();
  for (const char* path : {"golden/qwen3moe-Q4_K_M/model.gguf", "golden/llama_dense-Q8_0/model.gguf"}) {
    auto model = Model::load(test::shared_dir() + "/" + path);
    std::vector<std::vector<int32_t>> runs;
    std::vector<std::vector<float>> last_logits;
    for (int threads : {1, 2}) {
      auto be = make_backend("cpu", threads);
      Session s(*model, *be, KvCacheOptions{.n_ctx = 64});
      auto logits = s.eval(kPrompt);
      std::vector<int32_t> ids;
      for (int i = 0; i < 24; ++i) {
        ids.push_back(argmax(logits));
        std::vector<int32_t> one{ids.back()};
        logits = s.eval(one);
      }
      runs.push_back(ids);
      last_logits.emplace_back(logits.begin(), logits.end());
    }
    EXPECT_EQ(runs[0], runs[1]) << path;
    EXPECT_EQ(last_logits[0], last_logits[1]) << path << ": logits differ in bits";
  }
}

}  // namespace
}  // namespace sluice::test_model_parity
