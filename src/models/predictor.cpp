// models/predictor: the router-lookahead predictor (see predictor.h).
#include "models/predictor.h"

#include <algorithm>
#include <numeric>

#include "models/moe_ffn.h"

namespace sluice {

RouterLookahead::RouterLookahead(const Model& model, int extra) : model_(model) {
  const Hparams& hp = model.hparams();
  const int64_t k = hp.moe.n_expert_used;
  const int64_t m = extra >= 0 ? extra : std::max<int64_t>(1, k / 4);
  k_plus_m_ = std::min(hp.moe.n_expert, k + m);
  const auto& layers = model.layers();
  next_moe_.assign(layers.size(), -1);
  int next = -1;
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    next_moe_[l] = next;
    if (layers[l].is_moe()) next = l;
  }
}

int RouterLookahead::predict(Backend& be, int layer, const float* h, int64_t n_tok, std::vector<int32_t>* experts) {
  experts->clear();
  if (layer < 0 || static_cast<size_t>(layer) >= next_moe_.size() || next_moe_[layer] < 0) return -1;
  const int nl = next_moe_[layer];
  const Hparams& hp = model_.hparams();
  const LayerWeights& cur = model_.layers()[layer];
  const LayerWeights& nxt = model_.layers()[nl];
  const int64_t E = hp.n_embd, n_exp = hp.moe.n_expert;
  const float* w_cur = static_cast<const float*>(cur.ffn_norm->data);
  const float* w_nxt = static_cast<const float*>(nxt.ffn_norm->data);

  // Re-weight the normed input for the next layer's norm (a zero weight hides its channel;
  // the guess then does without it).
  // The guess is host math: h read through host_view, x handed to the router as host memory.
  const float* hh = be.host_view(h, n_tok * E);
  std::vector<float> x(n_tok * E);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < E; ++c) x[t * E + c] = w_cur[c] != 0.0f ? hh[t * E + c] / w_cur[c] * w_nxt[c] : 0.0f;
  std::vector<float> logits(n_tok * n_exp), probs(n_tok * n_exp);
  be.matmul(*nxt.ffn_gate_inp, x.data(), logits.data(), n_tok);
  MoeOptions opt = hp.moe;
  opt.n_expert_used = k_plus_m_;
  const float* bias = nxt.exp_probs_b ? static_cast<const float*>(nxt.exp_probs_b->data) : nullptr;
  MoeRouting r = moe_route(be, opt, logits.data(), probs.data(), n_tok, bias);

  // Rank by votes over the batch (a token's own order breaks ties: its j-th choice scores less).
  std::vector<double> score(n_exp, 0.0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < r.k; ++j) score[r.experts[t * r.k + j]] += 1.0 + 1e-3 * double(r.k - j);
  std::vector<int32_t> order(n_exp);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  for (int32_t e : order)
    if (score[e] > 0) experts->push_back(e);
  return nl;
}

}  // namespace sluice
