// tests/models/session_eval_util: evaluating a prompt through a Session the ways the hybrid
// tests compare — every position's logits in one batch, token by token, and against a golden's
// logits.f32.bin — shared by test_hybrid, test_kimi_linear and test_bailingmoe3.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/backend.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test {

// Logits of every position of `tokens`, evaluated as one batch.
inline std::vector<float> eval_all(Session& s, std::span<const int32_t> tokens) {
  auto l = s.eval(tokens, /*all_logits=*/true);
  return {l.begin(), l.end()};
}

// The same logits, one token per step.
inline std::vector<float> token_by_token(Session& s, std::span<const int32_t> tokens) {
  std::vector<float> out;
  for (const int32_t& t : tokens) {
    auto l = s.eval(std::span(&t, 1));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// Max |Δlogit| of `ids` in one batch on the cpu backend against golden_dir/logits.f32.bin
// (printed with `label`); a size mismatch fails the calling test.
inline double max_abs_vs_golden(const Model& m, const std::string& golden_dir, std::span<const int32_t> ids,
                                const char* label) {
  auto be = make_backend("cpu", 2);
  Session s(m, *be, KvCacheOptions{.n_ctx = 64});
  const std::vector<float> got = eval_all(s, ids);
  const std::vector<float> want = read_f32_file(golden_dir + "/logits.f32.bin");
  EXPECT_EQ(got.size(), want.size());
  double mx = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    mx = std::max(mx, std::fabs(static_cast<double>(got[i]) - want[i]));
  std::printf("[ %s / cpu ] max |Δlogit| vs golden %.4f\n", label, mx);
  return mx;
}

}  // namespace sluice::test
