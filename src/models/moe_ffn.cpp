// models/moe_ffn: routing (gating, group-limited top-k, weight normalisation) and the
// grouped expert computation, following llama.cpp's build_moe_ffn semantics.
#include "models/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace sluice {

MoeRouting moe_route(const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                     const float* selection_bias) {
  const int64_t n = opt.n_expert, k = opt.n_expert_used;
  if (k <= 0 || k > n) fail("moe: expert_used_count ", k, " must be in 1..expert_count ", n);
  MoeRouting r;
  r.k = k;
  r.experts.resize(n_tok * k);
  r.weights.resize(n_tok * k);
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
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      r.experts[t * k + j] = order[j];
      r.weights[t * k + j] = p[order[j]];
      sum += p[order[j]];
    }
    if (opt.norm_weights)
      for (int64_t j = 0; j < k; ++j) r.weights[t * k + j] /= std::max(sum, 6.103515625e-5f);
    if (opt.weights_scale != 0.0f && opt.weights_scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) r.weights[t * k + j] *= opt.weights_scale;
  }
  return r;
}

namespace {

// Buffers of the batched FFN paths, kept per thread across calls and only ever grown: a
// prompt batch sends 512 x 8 token rows through the experts of every layer (33 MB of rows at
// n_embd 2048), and vectors allocated per layer and per expert were fresh pages every time —
// faults and zeroing on the calling thread while the pool waited: 13% of a pp512 before.
struct FfnScratch {
  std::vector<float> gate, up;  // ffn_swiglu
  std::vector<float> xg, y;     // moe_experts: gathered token rows, every expert's outputs
};
thread_local FfnScratch t_scratch;

float* grown(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

void ffn_swiglu(Backend& be, const ExpertWeights& w, const float* x, float* out, int64_t n_tok) {
  const int64_t F = w.gate.ne[1];
  float* gate = grown(t_scratch.gate, n_tok * F);
  float* up = grown(t_scratch.up, n_tok * F);
  be.matmul(w.gate, x, gate, n_tok);
  be.matmul(w.up, x, up, n_tok);
  be.swiglu(gate, up, gate, n_tok * F);
  be.matmul(w.down, gate, out, n_tok);
}

std::vector<ExpertUse> moe_expert_uses(const MoeRouting& r) {
  std::vector<int32_t> n;
  for (int32_t e : r.experts) {
    if (e >= static_cast<int32_t>(n.size())) n.resize(e + 1, 0);
    ++n[e];
  }
  std::vector<ExpertUse> uses;
  for (int32_t e = 0; e < static_cast<int32_t>(n.size()); ++e)
    if (n[e] > 0) uses.push_back({e, n[e]});
  return uses;
}

namespace {

// Decode (one token) with views that outlive next(): every chosen expert in one backend call,
// in ascending expert order (the order of the sum below, so the result is the same).
void moe_experts_one_token(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                           int64_t n_embd) {
  std::vector<std::pair<int32_t, float>> chosen(static_cast<size_t>(r.k));
  for (int64_t j = 0; j < r.k; ++j) chosen[static_cast<size_t>(j)] = {r.experts[j], r.weights[j]};
  std::sort(chosen.begin(), chosen.end());
  std::vector<ExpertWeights> w(chosen.size());
  std::vector<bool> got(chosen.size(), false);
  int32_t e = 0;
  ExpertWeights ew;
  while (batch.next(&e, &ew)) {
    auto it = std::lower_bound(chosen.begin(), chosen.end(), std::pair{e, -INFINITY});
    const size_t i = static_cast<size_t>(it - chosen.begin());
    if (it == chosen.end() || it->first != e || got[i])
      fail("moe: the expert store served expert ", e, ", which this batch did not ask for (or twice)");
    w[i] = ew;
    got[i] = true;
  }
  std::vector<FfnExpert> ex(chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (!got[i]) fail("moe: the expert store never served expert ", chosen[i].first);
    ex[i] = {&w[i].gate, &w[i].up, &w[i].down, chosen[i].second, layer, chosen[i].first};
  }
  be.moe_ffn_token(ex, x, out, n_embd);
}

// A few tokens (several sequences decoding together) with views that outlive next(): all
// chosen experts with their tokens in one backend call, in ascending expert order (the order
// of the grouped path's sum below, so the result is the same).
void moe_experts_small_batch(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                             int64_t n_tok, int64_t n_embd) {
  struct Routed {
    ExpertWeights w;
    std::vector<int64_t> tokens;
    std::vector<float> weights;
    bool served = false;
  };
  std::map<int32_t, Routed> by_expert;  // ascending expert id
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < r.k; ++j) {
      Routed& e = by_expert[r.experts[t * r.k + j]];
      e.tokens.push_back(t);
      e.weights.push_back(r.weights[t * r.k + j]);
    }
  int32_t id = 0;
  ExpertWeights ew;
  while (batch.next(&id, &ew)) {
    auto it = by_expert.find(id);
    if (it == by_expert.end() || it->second.served)
      fail("moe: the expert store served expert ", id, ", which this batch did not ask for (or twice)");
    it->second.w = ew;
    it->second.served = true;
  }
  std::vector<FfnExpertRows> rows;
  for (auto& [e, ro] : by_expert) {
    if (!ro.served) fail("moe: the expert store never served expert ", e);
    rows.push_back({&ro.w.gate, &ro.w.up, &ro.w.down, ro.tokens.data(), ro.weights.data(),
                    static_cast<int64_t>(ro.tokens.size()), layer, e});
  }
  be.moe_ffn_batch(rows, x, out, n_tok, n_embd);
}

}  // namespace

void moe_experts(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out, int64_t n_tok,
                 int64_t n_embd) {
  if (n_tok == 1 && batch.views_outlive_next()) return moe_experts_one_token(be, batch, layer, r, x, out, n_embd);
  if (n_tok <= kMoeSmallBatch && batch.views_outlive_next())
    return moe_experts_small_batch(be, batch, layer, r, x, out, n_tok, n_embd);
  // Invert the routing: for each expert, the (token, weight) pairs sent to it.
  int32_t n_expert = 0;
  for (int32_t e : r.experts) n_expert = std::max(n_expert, e + 1);
  std::vector<std::vector<std::pair<int64_t, float>>> routed(n_expert);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < r.k; ++j) routed[r.experts[t * r.k + j]].push_back({t, r.weights[t * r.k + j]});

  // Expert e's output rows (in routed[e] order) start at row first[e] of one buffer.
  std::vector<int64_t> first(static_cast<size_t>(n_expert) + 1, 0);
  for (int32_t i = 0; i < n_expert; ++i) first[i + 1] = first[i] + static_cast<int64_t>(routed[i].size());
  float* y = grown(t_scratch.y, first[n_expert] * n_embd);
  std::vector<bool> served(static_cast<size_t>(n_expert), false);
  int32_t e = 0;
  ExpertWeights w;
  while (batch.next(&e, &w)) {
    if (e < 0 || e >= n_expert || routed[e].empty() || served[e])
      fail("moe: the expert store served expert ", e, ", which this batch did not ask for (or twice)");
    served[e] = true;
    const auto& toks = routed[e];
    const int64_t m = static_cast<int64_t>(toks.size());
    float* xg = grown(t_scratch.xg, m * n_embd);
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + toks[i].first * n_embd, n_embd, xg + i * n_embd);
    ffn_swiglu(be, w, xg, y + first[e] * n_embd, m);
  }
  std::fill(out, out + n_tok * n_embd, 0.0f);
  for (e = 0; e < n_expert; ++e) {
    const auto& toks = routed[e];
    if (toks.empty()) continue;
    if (!served[e]) fail("moe: the expert store never served expert ", e);
    for (size_t i = 0; i < toks.size(); ++i) {
      float* o = out + toks[i].first * n_embd;
      const float wt = toks[i].second;
      const float* yi = y + (first[e] + static_cast<int64_t>(i)) * n_embd;
      for (int64_t c = 0; c < n_embd; ++c) o[c] += wt * yi[c];
    }
  }
}

void moe_experts(Backend& be, ExpertSource& experts, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd) {
  auto batch = experts.acquire(layer, moe_expert_uses(r));
  moe_experts(be, *batch, layer, r, x, out, n_tok, n_embd);
}

}  // namespace sluice
