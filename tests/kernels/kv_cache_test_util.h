// tests/kernels/kv_cache_test_util: one layer's attention over a memory/kv_cache KvCache, as
// models/blocks' attend_batch runs it (for the rotation and mean-removal tests).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "memory/kv_cache.h"

namespace sluice::test {

// N positions of one layer: queries [N][H·D], keys and values [N][Hkv·D].
struct KvProblem {
  int64_t N = 48, H = 6, Hkv = 2, D = 64;
  std::vector<float> q, k, v;
};

// All N queries attending causally over the rows already stored in kv: the queries rotated
// into K's space, the output rotated back from V's. rotate_q = false skips the query
// rotation (a negative control).
inline std::vector<float> attend_stored(Backend& be, const KvProblem& p, const KvCache& kv, bool rotate_q = true) {
  std::vector<float> out(static_cast<size_t>(p.N * p.H * p.D)), q_rot;
  AttentionArgs a = kv.attention_args(0);
  a.q = rotate_q ? kv.query_for_cache(be, 0, p.q.data(), p.N * p.H * p.D, &q_rot) : p.q.data();
  a.out = out.data();
  a.n_tok = p.N;
  a.n_head = p.H;
  a.n_kv = p.N;
  a.pos0 = 0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(p.D));
  be.attention(a);
  kv.output_from_cache(be, out.data(), p.N * p.H * p.D);
  return out;
}

// max |a_i - b_i|; +inf when the sizes differ.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace sluice::test
