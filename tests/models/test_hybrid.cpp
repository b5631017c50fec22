// tests/models/test_hybrid: the hybrid models' recurrent state (qwen35moe golden model: 3
// Gated DeltaNet layers, 1 gated attention layer). A 300-token prompt in one batch (the
// chunked delta rule on cpu) equals the same prompt one token at a time (the recurrence);
// a prefill split anywhere and continued, or resumed from a checkpoint after a rewind, gives
// the same logits; a rewind lands on the latest checkpoint at or before the position asked.
// Negative control: a state that is not carried between steps changes the logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "kernels/kernel_test_util.h"
#include "memory/memory.h"
#include "models/model.h"
#include "models/session_eval_util.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_hybrid {
namespace {

constexpr int64_t kPrompt = 300;

std::vector<int32_t> long_prompt(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> p{1};
  for (int64_t i = 1; i < n; ++i) p.push_back(static_cast<int32_t>(3 + (i * 131 + i * i * 7) % (n_vocab - 3)));
  return p;
}

using test::eval_all;
using test::token_by_token;

std::vector<int32_t> argmaxes(const std::vector<float>& logits, int64_t n_vocab) {
  std::vector<int32_t> a;
  for (size_t r = 0; r * n_vocab < logits.size(); ++r)
    a.push_back(argmax(std::span(logits).subspan(r * n_vocab, n_vocab)));
  return a;
}

class Hybrid : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_SHARED();
    m_ = Model::load(test::shared_dir() + "/golden/qwen35moe/model.gguf");
    be_ = make_backend(GetParam(), 2);
    prompt_ = long_prompt(kPrompt, m_->hparams().n_vocab);
  }
  Session session() { return Session(*m_, *be_, KvCacheOptions{.n_ctx = 512}); }
  // ref: every op is per row and the recurrent state is float32 between tokens, so a row
  // cannot tell how its run was split: bitwise (checked separately), within the issue's
  // 1e-10 here. cpu: the chunked rule and the batched matmul tiles vs the one-token paths;
  // observed NMSE 2.6e-13 (AMD EPYC Zen 4); 1e-9 leaves room for other kernel levels.
  double bound() const { return GetParam() == "ref" ? 1e-10 : 1e-9; }
  std::unique_ptr<Model> m_;
  std::unique_ptr<Backend> be_;
  std::vector<int32_t> prompt_;
};

TEST_P(Hybrid, PromptInOneBatchEqualsTokenByToken) {
  Session a = session(), b = session();
  const std::vector<float> batch = eval_all(a, prompt_), steps = token_by_token(b, prompt_);
  const double e = test::nmse(steps, batch);
  std::printf("[ %s ] 300-token prompt, one batch vs token by token: NMSE %.2e\n", GetParam().c_str(), e);
  EXPECT_LE(e, bound());
  if (GetParam() == "ref") {
    EXPECT_EQ(batch, steps) << "ref: bitwise";
  }
  EXPECT_EQ(argmaxes(batch, m_->hparams().n_vocab), argmaxes(steps, m_->hparams().n_vocab));
}

TEST_P(Hybrid, SplitPrefillAndCheckpointResumeGiveTheSameLogits) {
  const int64_t V = m_->hparams().n_vocab;
  Session whole = session();
  const std::vector<float> want = eval_all(whole, prompt_);
  for (int64_t cut : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{137}, int64_t{299}}) {
    Session s = session();
    std::vector<float> got = eval_all(s, std::span(prompt_).first(cut));
    s.memory().seq_checkpoint(s.seq());
    const std::vector<float> rest = eval_all(s, std::span(prompt_).subspan(cut));
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_LE(test::nmse(want, got), bound()) << "split at " << cut;
    // Rewind past the checkpoint: the sequence lands on it and re-evaluates from there.
    const int64_t reached = s.memory().seq_rewind(s.seq(), std::min<int64_t>(cut + 20, kPrompt - 1));
    ASSERT_EQ(reached, cut) << "the latest checkpoint at or before the position asked";
    const std::vector<float> again = eval_all(s, std::span(prompt_).subspan(cut));
    ASSERT_EQ(again.size(), rest.size());
    if (GetParam() == "ref") {
      EXPECT_EQ(0, std::memcmp(again.data(), rest.data(), rest.size() * sizeof(float))) << "split at " << cut;
    } else {
      EXPECT_LE(test::nmse(rest, again), bound()) << "split at " << cut;
    }
    EXPECT_EQ(argmaxes(again, V), argmaxes(rest, V));
  }
}

TEST_P(Hybrid, RewindWithoutCheckpointRestartsFromZero) {
  Session s = session();
  eval_all(s, std::span(prompt_).first(50));
  EXPECT_EQ(s.memory().seq_rewind(s.seq(), 30), 0) << "no checkpoint: only the zero state at position 0";
  EXPECT_EQ(s.n_past(), 0);
}

TEST_P(Hybrid, NegativeControlStateNotCarried) {
  // Zeroing every recurrent buffer between steps (a state that is not carried) must show.
  Session a = session(), b = session();
  const std::vector<float> want = token_by_token(a, std::span(prompt_).first(40));
  std::vector<float> got;
  Memory& mem = b.memory();
  const MemoryLayout& lay = mem.layout();
  for (int64_t t = 0; t < 40; ++t) {
    for (size_t l = 0; l < lay.layers.size(); ++l)
      for (size_t i = 0; i < lay.layers[l].state_floats.size(); ++i)
        std::memset(mem.state(b.seq(), static_cast<int64_t>(l), static_cast<int>(i)), 0,
                    static_cast<size_t>(lay.layers[l].state_floats[i]) * sizeof(float));
    auto l = b.eval(std::span(&prompt_[static_cast<size_t>(t)], 1));
    got.insert(got.end(), l.begin(), l.end());
  }
  EXPECT_GT(test::nmse(want, got), 1e-3);
}

// A compressed KV cache on the attention layer: the golden within its README's q8_0 allowance
// (F16 bound 0.03 + 0.15), and the recurrent layers untouched by the cache type.
TEST_P(Hybrid, Q8KvCacheStaysWithinTheGoldensAllowance) {
  const std::string g = test::shared_dir() + "/golden/qwen35moe";
  const std::vector<float> want = test::read_f32_file(g + "/logits.f32.bin");
  const std::vector<int32_t> ids = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 400, 428,
                                    395, 392, 412, 444, 263, 415, 414, 401, 396, 267, 352, 379};
  Session f16(*m_, *be_, KvCacheOptions{.n_ctx = 64});
  auto lf = f16.eval(ids, true);
  const std::vector<float> base(lf.begin(), lf.end());
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    Session s(*m_, *be_, KvCacheOptions{.n_ctx = 64, .type_k = t, .type_v = t});
    auto l = s.eval(ids, true);
    ASSERT_EQ(l.size(), want.size());
    double mx = 0;
    for (size_t i = 0; i < want.size(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(l[i]) - want[i]));
    std::printf("[ %s ] KV %s: max |Δlogit| vs golden %.4f\n", GetParam().c_str(), dtype_name(t).data(), mx);
    if (t == DType::Q8_0) {
      EXPECT_LE(mx, 0.03 + 0.15);
    }
    EXPECT_NE(std::vector<float>(l.begin(), l.end()), base) << "the cache type must reach the attention layer";
  }
}

INSTANTIATE_TEST_SUITE_P(Qwen35Moe, Hybrid, ::testing::Values("ref", "cpu"));

}  // namespace
}  // namespace sluice::test_hybrid
