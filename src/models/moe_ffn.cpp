// models/moe_ffn: routing (gating, group-limited top-k, weight normalisation) and the
// grouped expert computation, following llama.cpp's build_moe_ffn semantics.
#include "models/moe_ffn.h"

#include <algorithm>
#include <cmath>
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

void ffn_swiglu(Backend& be, const ExpertWeights& w, const float* x, float* out, int64_t n_tok, float swiglu_limit) {
  const int64_t F = w.gate.ne[1];
  float* gate = grown(t_scratch.gate, n_tok * F);
  float* up = grown(t_scratch.up, n_tok * F);
  be.matmul(w.gate, x, gate, n_tok);
  be.matmul(w.up, x, up, n_tok);
  be.swiglu(gate, up, gate, n_tok * F, swiglu_limit);
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

// The routing inverted: each chosen expert (ascending id) with the tokens sent to it
// (ascending) and their weights, in flat arrays — group i is tokens[first[i]..first[i+1]).
// The order is the order of the weighted sum, the same for every path below.
struct ExpertGroups {
  std::vector<int32_t> expert;
  std::vector<int64_t> first{0};
  std::vector<int64_t> tokens;
  std::vector<float> weights;
  size_t size() const { return expert.size(); }
  int64_t count(size_t i) const { return first[i + 1] - first[i]; }
  // Group index of expert e, or -1.
  int64_t find(int32_t e) const {
    const auto it = std::lower_bound(expert.begin(), expert.end(), e);
    return it != expert.end() && *it == e ? it - expert.begin() : -1;
  }
};

ExpertGroups group_by_expert(const MoeRouting& r, int64_t n_tok) {
  ExpertGroups g;
  const std::vector<ExpertUse> uses = moe_expert_uses(r);  // ascending, with counts
  std::vector<int64_t> at(uses.empty() ? 0 : static_cast<size_t>(uses.back().expert) + 1, -1);
  for (const ExpertUse& u : uses) {
    at[static_cast<size_t>(u.expert)] = g.first.back();
    g.expert.push_back(u.expert);
    g.first.push_back(g.first.back() + u.n_tokens);
  }
  g.tokens.resize(static_cast<size_t>(g.first.back()));
  g.weights.resize(g.tokens.size());
  for (int64_t t = 0; t < n_tok; ++t)  // tokens ascending within each group
    for (int64_t j = 0; j < r.k; ++j) {
      int64_t& slot = at[static_cast<size_t>(r.experts[t * r.k + j])];
      g.tokens[static_cast<size_t>(slot)] = t;
      g.weights[static_cast<size_t>(slot)] = r.weights[t * r.k + j];
      ++slot;
    }
  return g;
}

// Takes every view `batch` serves into views[group]; fails on an expert it did not ask for,
// one served twice, or one never served.
void take_views(ExpertBatch& batch, const ExpertGroups& g, std::vector<ExpertWeights>& views) {
  views.assign(g.size(), ExpertWeights{});
  std::vector<bool> served(g.size(), false);
  int32_t e = 0;
  ExpertWeights w;
  while (batch.next(&e, &w)) {
    const int64_t i = g.find(e);
    if (i < 0 || served[static_cast<size_t>(i)])
      fail("moe: the expert store served expert ", e, ", which this batch did not ask for (or twice)");
    views[static_cast<size_t>(i)] = w;
    served[static_cast<size_t>(i)] = true;
  }
  for (size_t i = 0; i < g.size(); ++i)
    if (!served[i]) fail("moe: the expert store never served expert ", g.expert[i]);
}

// Experts with LoRA adapters (format/lora.h) take Backend's own MoE paths, which multiply
// through Backend::matmul and so add each expert's adapter; a backend's fused paths read the
// weights alone.
bool any_adapted(const std::vector<ExpertWeights>& views) {
  for (const ExpertWeights& v : views)
    for (const TensorView* t : {&v.gate, &v.up, &v.down})
      if (t->lora && !t->lora->empty()) return true;
  return false;
}

// Decode (one token) with views that outlive next(): every chosen expert in one backend call,
// in ascending expert order (the order of the sum below, so the result is the same).
void moe_experts_one_token(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                           int64_t n_embd, float limit) {
  const ExpertGroups g = group_by_expert(r, 1);
  std::vector<ExpertWeights> views;
  take_views(batch, g, views);
  std::vector<FfnExpert> ex(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    ex[i] = {&views[i].gate, &views[i].up, &views[i].down, g.weights[static_cast<size_t>(g.first[i])],
             layer,          g.expert[i],  limit};
  if (any_adapted(views))
    be.Backend::moe_ffn_token(ex, x, out, n_embd);
  else
    be.moe_ffn_token(ex, x, out, n_embd);
}

// Several tokens (sequences decoding together, a prompt) with views that outlive next(): all
// chosen experts with their tokens in one backend call, in ascending expert order (the order
// of the grouped path's sum below, so the result is the same).
void moe_experts_batched(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                         int64_t n_tok, int64_t n_embd, float limit) {
  const ExpertGroups g = group_by_expert(r, n_tok);
  std::vector<ExpertWeights> views;
  take_views(batch, g, views);
  std::vector<FfnExpertRows> rows(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    rows[i] = {&views[i].gate,
               &views[i].up,
               &views[i].down,
               g.tokens.data() + g.first[i],
               g.weights.data() + g.first[i],
               g.count(i),
               layer,
               g.expert[i],
               limit};
  if (any_adapted(views))
    be.Backend::moe_ffn_batch(rows, x, out, n_tok, n_embd);
  else
    be.moe_ffn_batch(rows, x, out, n_tok, n_embd);
}

}  // namespace

void moe_experts(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd, float swiglu_limit) {
  if (n_tok == 1 && batch.views_outlive_next())
    return moe_experts_one_token(be, batch, layer, r, x, out, n_embd, swiglu_limit);
  if (batch.views_outlive_next()) return moe_experts_batched(be, batch, layer, r, x, out, n_tok, n_embd, swiglu_limit);
  // Each expert's output rows (in its group's token order) start at row first[i] of one
  // buffer. Experts come in the order the store has them ready; the sum waits for all.
  const ExpertGroups g = group_by_expert(r, n_tok);
  float* y = grown(t_scratch.y, g.first.back() * n_embd);
  std::vector<bool> served(g.size(), false);
  int32_t e = 0;
  ExpertWeights w;
  while (batch.next(&e, &w)) {
    const int64_t i = g.find(e);
    if (i < 0 || served[static_cast<size_t>(i)])
      fail("moe: the expert store served expert ", e, ", which this batch did not ask for (or twice)");
    served[static_cast<size_t>(i)] = true;
    const int64_t m = g.count(static_cast<size_t>(i));
    float* xg = grown(t_scratch.xg, m * n_embd);
    be.gather_rows(x, n_embd, g.tokens.data() + g.first[i], m, xg);
    ffn_swiglu(be, w, xg, y + g.first[i] * n_embd, m, swiglu_limit);
  }
  be.fill(out, n_tok * n_embd, 0.0f);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!served[i]) fail("moe: the expert store never served expert ", g.expert[i]);
    be.add_rows_weighted(y + g.first[i] * n_embd, n_embd, g.tokens.data() + g.first[i], g.weights.data() + g.first[i],
                         g.count(i), out);
  }
}

void moe_experts(Backend& be, ExpertSource& experts, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd, float swiglu_limit) {
  auto batch = experts.acquire(layer, moe_expert_uses(r));
  moe_experts(be, *batch, layer, r, x, out, n_tok, n_embd, swiglu_limit);
}

}  // namespace sluice
