// tests/models/test_session: Session::eval's batching of long prompts (chunks of kMaxBatch
// tokens): the chunked result equals evaluating the same chunks by hand, the last-token
// logits equal the all-logits row, a prompt that cannot fit is refused before anything runs,
// and a long prompt's logits stay within float rounding of token-by-token evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "kernels/kernel_test_util.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_session {
namespace {

std::vector<int32_t> prompt(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  t[0] = 1;  // BOS
  for (int64_t i = 1; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 37) % 500);
  return t;
}

TEST(Session, LongPromptRunsInBatches) {
  SLUICE_REQUIRE_SHARED();
  auto m = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  const int64_t n = Session::kMaxBatch + 88, V = m->hparams().n_vocab;
  const auto toks = prompt(n);
  const KvCacheOptions kv{.n_ctx = 1024};

  Session whole(*m, *be, kv);
  const auto all = whole.eval(toks, /*all_logits=*/true);
  const std::vector<float> all_v(all.begin(), all.end());
  ASSERT_EQ(static_cast<int64_t>(all_v.size()), n * V);
  EXPECT_EQ(whole.n_past(), n);

  // The same two batches by hand.
  Session by_hand(*m, *be, kv);
  const auto a = by_hand.eval(std::span(toks).first(Session::kMaxBatch), true);
  ASSERT_EQ(std::memcmp(a.data(), all_v.data(), a.size_bytes()), 0);
  const auto b = by_hand.eval(std::span(toks).subspan(Session::kMaxBatch), true);
  ASSERT_EQ(std::memcmp(b.data(), all_v.data() + Session::kMaxBatch * V, b.size_bytes()), 0);

  // Last-token logits only: the last all-logits row (the earlier batch skips its output head).
  Session last(*m, *be, kv);
  const auto l = last.eval(toks);
  ASSERT_EQ(static_cast<int64_t>(l.size()), V);
  EXPECT_EQ(std::memcmp(l.data(), all_v.data() + (n - 1) * V, l.size_bytes()), 0);

  // Token by token (decode path): equal up to float rounding.
  Session step(*m, *be, kv);
  std::vector<float> got;
  for (int64_t i = 0; i < n; ++i) {
    const auto o = step.eval(std::span(toks).subspan(static_cast<size_t>(i), 1));
    if (i == n - 1) got.assign(o.begin(), o.end());
  }
  const std::vector<float> want(all_v.end() - V, all_v.end());
  EXPECT_LT(test::nmse(want, got), 1e-8);
}

TEST(Session, PromptThatDoesNotFitIsRefusedWhole) {
  SLUICE_REQUIRE_SHARED();
  auto m = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  Session s(*m, *be, KvCacheOptions{.n_ctx = 600});
  EXPECT_THROW(s.eval(prompt(700)), Error);
  EXPECT_EQ(s.n_past(), 0) << "a refused prompt must not advance the session";
  s.eval(prompt(10));
  EXPECT_EQ(s.n_past(), 10);
}

}  // namespace
}  // namespace sluice::test_session
