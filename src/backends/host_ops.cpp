// backends/host_ops: the default data-movement and routing ops of Backend (backend.h) — plain
// host code, the twin every override is held to — and the default KV rotation (kvcodec's
// reference, which the cuda backend runs on its host-side activations as they are). Routing follows llama.cpp's build_moe_ffn:
// gating in float32, group-limited selection, top-k by score with ties to the lower id, the
// chosen probabilities renormalised and scaled as the model says.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "kvcodec/kvcodec.h"

namespace sluice {

void Backend::copy_2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                      int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_stride, cols, dst + r * dst_stride);
}

void Backend::gather_rows(const float* src, int64_t width, const int64_t* idx, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) std::copy_n(src + idx[i] * width, width, dst + i * width);
}

void Backend::add_rows_weighted(const float* y, int64_t width, const int64_t* idx, const float* w, int64_t n,
                                float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + idx[i] * width;
    const float* yi = y + i * width;
    const float wi = w[i];
    for (int64_t c = 0; c < width; ++c) o[c] += wi * yi[c];
  }
}

void Backend::kv_rotate(const KvRotation& r, float* x, int64_t n, bool inverse) { kv_rotate_ref(r, x, n, inverse); }

void Backend::fill(float* x, int64_t n, float v) { std::fill(x, x + n, v); }

void Backend::moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                        const float* selection_bias, int32_t* experts, float* weights) {
  const int64_t n = opt.n_expert, k = opt.n_expert_used;
  if (k <= 0 || k > n) fail("moe: expert_used_count ", k, " must be in 1..expert_count ", n);
  std::vector<float> score(n);
  std::vector<int32_t> order(n);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* l = logits + t * n;
    float* p = probs + t * n;
    // Gating: probabilities over all experts, in float32 like llama.cpp.
    if (opt.gating == MoeGating::softmax) {
      const float mx = *std::max_element(l, l + n);
      double sum = 0;
      for (int64_t e = 0; e < n; ++e) sum += p[e] = std::exp(l[e] - mx);
      for (int64_t e = 0; e < n; ++e) p[e] = static_cast<float>(p[e] / sum);
    } else {
      for (int64_t e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + std::exp(-l[e]));
    }
    for (int64_t e = 0; e < n; ++e) score[e] = p[e] + (selection_bias ? selection_bias[e] : 0.0f);

    // Group-limited routing: a group's score is the sum of its two best expert scores; only
    // the best n_group_used groups stay selectable.
    if (opt.n_group > 1 && opt.n_group_used < opt.n_group) {
      const int64_t per = n / opt.n_group;
      std::vector<std::pair<float, int64_t>> gs(opt.n_group);
      for (int64_t g = 0; g < opt.n_group; ++g) {
        std::vector<float> s(score.begin() + g * per, score.begin() + (g + 1) * per);
        std::partial_sort(s.begin(), s.begin() + std::min<int64_t>(2, per), s.end(), std::greater<>());
        gs[g] = {s[0] + (per > 1 ? s[1] : 0.0f), g};
      }
      std::stable_sort(gs.begin(), gs.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (int64_t j = opt.n_group_used; j < opt.n_group; ++j)
        for (int64_t e = gs[j].second * per; e < (gs[j].second + 1) * per; ++e) score[e] = -INFINITY;
    }

    // Top-k by score, descending; ties to the lower expert id.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      experts[t * k + j] = order[j];
      weights[t * k + j] = p[order[j]];
      sum += p[order[j]];
    }
    if (opt.norm_weights)
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] /= std::max(sum, 6.103515625e-5f);
    if (opt.weights_scale != 0.0f && opt.weights_scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] *= opt.weights_scale;
  }
}

}  // namespace sluice
