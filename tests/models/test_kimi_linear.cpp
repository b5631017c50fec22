// tests/models/test_kimi_linear: the Kimi Linear model of tests/data/golden/kimi-linear (3 KDA
// layers, 1 MLA layer without RoPE); its golden is checked with the others in
// test_repo_goldens.cpp. Here: the memory layout (recurrent state for KDA layers only, KV rows
// for the MLA layer only); converter variants; a prompt in one batch equals the same prompt
// token by token, and a split prefill equals the whole; and negative controls that must fail
// the golden: the KDA decay per head instead of per key channel, RoPE on the MLA position
// dims, no selection bias, a state that is not carried.
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
#include "format/gguf.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "memory/memory.h"
#include "models/kimi_linear.h"
#include "models/model.h"
#include "models/session_eval_util.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_kimi_linear {
namespace {

const std::string kGolden = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/kimi-linear";
const std::vector<int32_t> kPromptIds = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428,
                                         395, 392, 412, 444, 263, 415, 414, 401, 396, 267, 352, 379};

using test::eval_all;
using test::token_by_token;

double max_abs_vs_golden(const Model& m) { return test::max_abs_vs_golden(m, kGolden, kPromptIds, "kimi-linear"); }

// The golden itself is checked by tests/models/test_repo_goldens.cpp (every backend).


TEST(KimiLinear, MemoryLayoutHasStatesForKdaAndRowsForMla) {
  auto m = Model::load(kGolden + "/model.gguf");
  const MemoryLayout lay = m->memory_layout();
  ASSERT_EQ(lay.layers.size(), 4u);
  const int64_t window = 3 * 128;  // (K-1) * n_head * head_dim
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(lay.layers[l].kind, LayerMemoryKind::recurrent) << "layer " << l;
    EXPECT_EQ(lay.layers[l].state_floats, (std::vector<int64_t>{window, window, window, 4 * 32 * 32}));
  }
  EXPECT_EQ(lay.layers[3].kind, LayerMemoryKind::kv);
  EXPECT_EQ(lay.kv.n_layer, 1);
  EXPECT_EQ(lay.kv.n_head_kv, 1);
  EXPECT_EQ(lay.kv.head_dim_k, 64 + 16);  // [kv_lora | k_rope]
  EXPECT_EQ(lay.kv.head_dim_v, 64);       // kv_lora
  Memory mem(lay, MemoryOptions{.kv = KvCacheOptions{.n_ctx = 16}});
  EXPECT_EQ(mem.kv_slot(3), 0);
  EXPECT_EQ(mem.kv_slot(0), -1);
}

// What llama.cpp's converter and quantizer may also write: no attention.value_length (the
// latent value rows are then kv_lora wide), conv taps without the trailing 1 ([K, 1, I]) and
// ssm_a as [1, H]. Same numbers, so the same logits bit for bit.
TEST(KimiLinear, ConverterVariantsGiveTheSameLogits) {
  GgufFile in(kGolden + "/model.gguf");
  GgufWriter w;
  for (const auto& [k, v] : in.metadata())
    if (k != "kimi-linear.attention.value_length") w.set(k, v);
  for (const auto& t : in.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name.find("ssm_conv1d") != std::string::npos || t.name.find("ssm_a") != std::string::npos) ne.pop_back();
    if (t.name.find("ssm_a") != std::string::npos) ne.pop_back();
    w.add_tensor(t.name, t.type, ne, t.data, t.nbytes);
  }
  const std::string path = (test::scratch_dir() / "sluice_kimi_linear_variant.gguf").string();
  w.write(path);
  auto a = Model::load(kGolden + "/model.gguf");
  auto b = Model::load(path);
  EXPECT_EQ(b->hparams().head_dim_v, 64);
  auto be = make_backend("cpu", 2);
  Session sa(*a, *be, KvCacheOptions{.n_ctx = 64}), sb(*b, *be, KvCacheOptions{.n_ctx = 64});
  EXPECT_EQ(eval_all(sa, kPromptIds), eval_all(sb, kPromptIds));
  std::filesystem::remove(path);
}

class KimiLinearBatch : public ::testing::TestWithParam<std::string> {};

// ref: per-row ops and a float32 state between tokens, so the split cannot show: bitwise.
// cpu: batched matmul tiles vs the one-token paths (the per-channel delta rule has no chunked
// form, so it is the recurrence either way); 1e-9 NMSE as test_hybrid's bound.
TEST_P(KimiLinearBatch, PromptInOneBatchEqualsTokenByTokenAndSplitPrefill) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto be = make_backend(GetParam(), 2);
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < 100; ++i)
    prompt.push_back(i == 0 ? 1 : static_cast<int32_t>(3 + (i * 131 + i * i * 7) % 509));
  Session a(*m, *be, KvCacheOptions{.n_ctx = 128}), b(*m, *be, KvCacheOptions{.n_ctx = 128});
  const std::vector<float> batch = eval_all(a, prompt), steps = token_by_token(b, prompt);
  const double bound = GetParam() == "ref" ? 1e-10 : 1e-9;
  const double e = test::nmse(steps, batch);
  std::printf("[ %s ] kimi-linear 100 tokens, one batch vs token by token: NMSE %.2e\n", GetParam().c_str(), e);
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

INSTANTIATE_TEST_SUITE_P(KimiLinear, KimiLinearBatch, ::testing::Values("ref", "cpu"));

TEST(KimiLinearNegative, BaselinePasses) {
  auto m = Model::load(kGolden + "/model.gguf");
  EXPECT_LE(max_abs_vs_golden(*m), 0.03);
}

TEST(KimiLinearNegative, DecayPerHeadInsteadOfPerChannelFails) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto kh = std::make_shared<KimiLinearHparams>(m->hparams().ext_as<KimiLinearHparams>());
  kh->per_channel_decay = false;
  m->mutable_hparams().ext = kh;
  EXPECT_GT(max_abs_vs_golden(*m), 0.03);
}

TEST(KimiLinearNegative, MlaWithRopeFails) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto kh = std::make_shared<KimiLinearHparams>(m->hparams().ext_as<KimiLinearHparams>());
  kh->mla.rope = true;
  m->mutable_hparams().ext = kh;
  EXPECT_GT(max_abs_vs_golden(*m), 0.03);
}

TEST(KimiLinearNegative, WithoutSelectionBiasFails) {
  auto m = Model::load(kGolden + "/model.gguf");
  for (auto& l : m->mutable_layers()) l.exp_probs_b = nullptr;
  EXPECT_GT(max_abs_vs_golden(*m), 0.03);
}

TEST(KimiLinearNegative, StateNotCarriedFails) {
  auto m = Model::load(kGolden + "/model.gguf");
  auto be = make_backend("cpu", 2);
  Session a(*m, *be, KvCacheOptions{.n_ctx = 64}), b(*m, *be, KvCacheOptions{.n_ctx = 64});
  const std::vector<float> want = token_by_token(a, kPromptIds);
  std::vector<float> got;
  Memory& mem = b.memory();
  const MemoryLayout& lay = mem.layout();
  for (const int32_t& t : kPromptIds) {
    for (size_t l = 0; l < lay.layers.size(); ++l)
      for (size_t i = 0; i < lay.layers[l].state_floats.size(); ++i)
        std::memset(mem.state(b.seq(), static_cast<int64_t>(l), static_cast<int>(i)), 0,
                    static_cast<size_t>(lay.layers[l].state_floats[i]) * sizeof(float));
    auto l = b.eval(std::span(&t, 1));
    got.insert(got.end(), l.begin(), l.end());
  }
  EXPECT_GT(test::nmse(want, got), 1e-3);
}

}  // namespace
}  // namespace sluice::test_kimi_linear
