// tests/models/test_host_guard: every architecture's forward keeps its activations to the
// backend (backends/backend.h ActBuf): run on HostGuardBackend, whose buffers fault on any
// host access outside an op or Backend::host_view, a prompt (past the batched MoE path's
// threshold) and decode steps give logits bitwise equal to the same backend unguarded — with
// hooks reading every intermediate, compressed KV sides whose codecs do host math (q8_0
// rotated, tq4 with the K mean and sinks), and the expert predictor's guess. Negative
// controls: a host write to a guarded buffer, and a host read of one, each die with SIGSEGV.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "host_guard_backend.h"
#include "kvcodec/kvcodec.h"
#include "models/model.h"
#include "models/predictor.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_host_guard {
namespace {

struct Case {
  std::string model;    // a path under ../shared/golden (or the repo's tests/data/golden)
  std::string backend;  // ref, cpu
};

std::string model_path(const std::string& name) {
  const std::string repo = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/" + name + "/model.gguf";
  if (std::filesystem::exists(repo)) return repo;
  if (name == "stories260K") return test::shared_dir() + "/models/stories260K.gguf";
  return test::shared_dir() + "/golden/" + name + "/model.gguf";
}

struct Run {
  std::vector<std::vector<float>> logits;  // after the prompt, then after each decoded token
  std::vector<double> hook_sums;           // every hooked intermediate's sum, in call order
};

// 12 prompt tokens, then 3 greedy tokens one step at a time.
Run run(const Model& m, Backend& be, const KvCacheOptions& kv, bool hook) {
  Run r;
  TensorHook h = [&](std::string_view, int, const float* d, int64_t rows, int64_t cols) {
    double s = 0;
    for (int64_t i = 0; i < rows * cols; ++i) s += d[i];
    r.hook_sums.push_back(s);
  };
  Session s(m, be, kv);
  if (hook) s.set_hook(h);
  const int64_t V = m.hparams().n_vocab;
  std::vector<int32_t> prompt{1};
  for (int i = 1; i < 12; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 37) % (V - 3)));
  auto l = s.eval(prompt);
  for (int step = 0; step < 4; ++step) {
    r.logits.emplace_back(l.begin(), l.end());
    if (step == 3) break;
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (l[i] > l[best]) best = static_cast<int32_t>(i);
    l = s.eval(std::span(&best, 1));
  }
  return r;
}

void expect_same(const Run& a, const Run& b) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) {
    ASSERT_EQ(a.logits[i].size(), b.logits[i].size());
    EXPECT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)), 0)
        << "step " << i;
  }
  EXPECT_EQ(a.hook_sums, b.hook_sums);
}

class HostGuard : public ::testing::TestWithParam<Case> {};

TEST_P(HostGuard, ForwardTouchesActivationsOnlyThroughOps) {
  SLUICE_REQUIRE_SHARED();
  const Case& c = GetParam();
  const std::string path = model_path(c.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  auto m = Model::load(path);
  auto be = make_backend(c.backend, 2);
  test::HostGuardBackend guard(*be);
  const KvCacheOptions plain{.n_ctx = 64};
  expect_same(run(*m, *be, plain, false), run(*m, guard, plain, false));
  EXPECT_GT(guard.ops(), 0);

  // Every intermediate read by a hook (the parity tool's way): through host_view.
  const int64_t reads = guard.host_reads();
  expect_same(run(*m, *be, plain, true), run(*m, guard, plain, true));
  EXPECT_GT(guard.host_reads(), reads);

  // Codecs with host math on the K/V rows and the queries (attention layers only).
  KvCacheOptions q8{.n_ctx = 64, .type_k = DType::Q8_0, .type_v = DType::Q8_0};
  expect_same(run(*m, *be, q8, false), run(*m, guard, q8, false));
  if (m->hparams().head_dim_k % 32 == 0 && m->hparams().head_dim_v % 32 == 0) {
    KvCacheOptions tq{.n_ctx = 64, .type_k = kKvTq4, .type_v = kKvTq4};
    tq.n_sink_k = tq.n_sink_v = 2;
    expect_same(run(*m, *be, tq, false), run(*m, guard, tq, false));
  }
}

TEST_P(HostGuard, PredictorGuessReadsThroughHostView) {
  SLUICE_REQUIRE_SHARED();
  const Case& c = GetParam();
  const std::string path = model_path(c.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  auto m = Model::load(path);
  if (m->hparams().moe.n_expert == 0) GTEST_SKIP() << c.model << " has no experts";
  m->set_predictor(std::make_unique<RouterLookahead>(*m, 2));
  auto be = make_backend(c.backend, 2);
  test::HostGuardBackend guard(*be);
  const KvCacheOptions plain{.n_ctx = 64};
  expect_same(run(*m, *be, plain, false), run(*m, guard, plain, false));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* model :
       {"stories260K", "llama_dense", "llama_dense-Q4_K_M", "qwen3_dense", "qwen3moe", "qwen3moe-Q4_K_M", "mixtral",
        "olmoe", "deepseek2", "qwen35moe", "qwen35", "qwen3next", "kimi-linear", "bailingmoe3", "bailingmoe3-clamp"})
    for (const char* backend : {"cpu", "ref"}) out.push_back({model, backend});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, HostGuard, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& i) {
  return test::test_name_part(i.param.model + "_" + i.param.backend);
});

// The guard can fail: a host write to, or read of, an activation outside an op faults.
TEST(HostGuardNegative, HostTouchOutsideAnOpDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_backend("ref");
  test::HostGuardBackend guard(*be);
  ActBuf<float> x = guard.alloc<float>(16);
  guard.fill(x.data(), 16, 2.0f);  // inside an op: fine
  EXPECT_EQ(guard.host_view(x.data(), 16)[3], 2.0f);
  EXPECT_DEATH(x.data()[0] = 1.0f, "");
  guard.fill(x.data(), 16, 3.0f);  // the view ended with this op
  EXPECT_DEATH(
      {
        volatile float v = x.data()[1];
        (void)v;
      },
      "");
}

}  // namespace
}  // namespace sluice::test_host_guard
