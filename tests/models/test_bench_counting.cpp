// tests/models/test_bench_counting: bench's CountingBackend must forward every op to the
// backend it wraps — an op it forgot would run Backend's float64 host default instead, and
// bench would time the wrong code. So logits through the wrapper equal the wrapped cpu
// backend's bit for bit, on a hybrid model that uses every op family (attention, Gated
// DeltaNet, MoE, shared experts); and the weights land in the stage their names say.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "bench/bench.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_bench_counting {
namespace {

TEST(CountingBackend, ForwardsEveryOpBitwise) {
  SLUICE_REQUIRE_SHARED();
  auto m = Model::load(test::shared_dir() + "/golden/qwen35moe/model.gguf");
  auto cpu = make_backend("cpu", 2);
  CountingBackend counting(*cpu, /*profile=*/true);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(1 + (i * 17) % 500);
  Session a(*m, *cpu, KvCacheOptions{.n_ctx = 64}), b(*m, counting, KvCacheOptions{.n_ctx = 64});
  auto la = a.eval(prompt, true);
  std::vector<float> want(la.begin(), la.end());
  auto lb = b.eval(prompt, true);
  ASSERT_EQ(want.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(want.data(), lb.data(), want.size() * sizeof(float)));
  const BenchCounters& c = counting.counters();
  EXPECT_GT(c.bytes[static_cast<size_t>(BenchStage::linear_attn)], 0u);
  EXPECT_GT(c.seconds[static_cast<size_t>(BenchStage::linear_attn)], 0.0);
  EXPECT_GT(c.bytes[static_cast<size_t>(BenchStage::attention)], 0u);  // the projections
  EXPECT_GT(c.bytes[static_cast<size_t>(BenchStage::attend)], 0u);     // the KV rows read
  EXPECT_GT(c.seconds[static_cast<size_t>(BenchStage::attend)], 0.0);
  EXPECT_EQ(c.stage_macs[static_cast<size_t>(BenchStage::attend)], 0u);
}

TEST(CountingBackend, StagesFromTensorNames) {
  EXPECT_EQ(bench_stage_of("blk.0.attn_qkv.weight"), BenchStage::linear_attn);
  EXPECT_EQ(bench_stage_of("blk.0.attn_gate.weight"), BenchStage::linear_attn);
  EXPECT_EQ(bench_stage_of("blk.0.ssm_out.weight"), BenchStage::linear_attn);
  EXPECT_EQ(bench_stage_of("blk.3.attn_q.weight"), BenchStage::attention);
  EXPECT_EQ(bench_stage_of("blk.3.ffn_gate_inp_shexp.weight"), BenchStage::router);
  EXPECT_EQ(bench_stage_of("blk.3.ffn_up_exps.weight"), BenchStage::experts);
  EXPECT_EQ(bench_stage_of("blk.3.ffn_up_shexp.weight"), BenchStage::dense_ffn);
}

}  // namespace
}  // namespace sluice::test_bench_counting
