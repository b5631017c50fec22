// models/moe_ffn: routing (gating, group-limited top-k, weight normalisation) and the
// grouped expert computation, following llama.cpp's build_moe_ffn semantics.
#include "models/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace sluice {

MoeRouting moe_route(Backend& be, const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                     const float* selection_bias) {
  const int64_t n = opt.n_expert, k = opt.n_expert_used;
  if (k <= 0 || k > n) fail("moe: expert_used_count ", k, " must be in 1..expert_count ", n);
  MoeRouting r;
  r.k = k;
  r.experts.resize(static_cast<size_t>(n_tok * k));
  r.weights.resize(static_cast<size_t>(n_tok * k));
  be.moe_route(opt, logits, probs, n_tok, selection_bias, r.experts.data(), r.weights.data());
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
void moe_experts_small_batch(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x,
                             float* out, int64_t n_tok, int64_t n_embd) {
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

void moe_experts(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd) {
  if (n_tok == 1 && batch.views_outlive_next()) return moe_experts_one_token(be, batch, layer, r, x, out, n_embd);
  if (n_tok <= kMoeSmallBatch && batch.views_outlive_next())
    return moe_experts_small_batch(be, batch, layer, r, x, out, n_tok, n_embd);
  // Invert the routing: for each expert, the tokens sent to it and their weights.
  int32_t n_expert = 0;
  for (int32_t e : r.experts) n_expert = std::max(n_expert, e + 1);
  std::vector<std::vector<int64_t>> toks(static_cast<size_t>(n_expert));
  std::vector<std::vector<float>> wts(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < r.k; ++j) {
      const auto e = static_cast<size_t>(r.experts[t * r.k + j]);
      toks[e].push_back(t);
      wts[e].push_back(r.weights[t * r.k + j]);
    }

  // Expert e's output rows (in toks[e] order) start at row first[e] of one buffer.
  std::vector<int64_t> first(static_cast<size_t>(n_expert) + 1, 0);
  for (int32_t i = 0; i < n_expert; ++i) first[i + 1] = first[i] + static_cast<int64_t>(toks[i].size());
  float* y = grown(t_scratch.y, first[n_expert] * n_embd);
  std::vector<bool> served(static_cast<size_t>(n_expert), false);
  int32_t e = 0;
  ExpertWeights w;
  while (batch.next(&e, &w)) {
    if (e < 0 || e >= n_expert || toks[e].empty() || served[e])
      fail("moe: the expert store served expert ", e, ", which this batch did not ask for (or twice)");
    served[e] = true;
    const int64_t m = static_cast<int64_t>(toks[e].size());
    float* xg = grown(t_scratch.xg, m * n_embd);
    be.gather_rows(x, n_embd, toks[e].data(), m, xg);
    ffn_swiglu(be, w, xg, y + first[e] * n_embd, m);
  }
  be.fill(out, n_tok * n_embd, 0.0f);
  for (e = 0; e < n_expert; ++e) {
    if (toks[e].empty()) continue;
    if (!served[e]) fail("moe: the expert store never served expert ", e);
    be.add_rows_weighted(y + first[e] * n_embd, n_embd, toks[e].data(), wts[e].data(),
                         static_cast<int64_t>(toks[e].size()), out);
  }
}

void moe_experts(Backend& be, ExpertSource& experts, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd) {
  auto batch = experts.acquire(layer, moe_expert_uses(r));
  moe_experts(be, *batch, layer, r, x, out, n_tok, n_embd);
}

}  // namespace sluice
