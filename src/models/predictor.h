// models/predictor: guesses which experts the next MoE layer will use while the current one
// runs, so the expert store can start reading them early. An interface, so that learned
// per-layer heads can replace the first predictor without touching the forward.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "models/model.h"

namespace sluice {

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::string_view name() const = 0;
  // Called in layer `layer`'s FFN with its normed input h ([n_tok][n_embd], after ffn_norm).
  // Writes the guessed experts of the next MoE layer, best first, and returns that layer's
  // index, or -1 when there is nothing to predict (the last MoE layer).
  virtual int predict(Backend& be, int layer, const float* h, int64_t n_tok, std::vector<int32_t>* experts) = 0;
};

// The first predictor: layer l+1's router applied to layer l's FFN input. The residual stream
// changes little from one layer to the next (each block adds a small update), so routing it
// one layer early mostly picks the same experts. Pre-gated MoE (Hwang et al., ISCA 2024)
// trains such a one-layer-early gate; this uses the model's own next gate, untrained. On
// random-weight models (sluice synth) routing is not real routing and the recall says little.
// h = rms_norm(x) * w_l is turned
// into rms_norm(x) * w_{l+1} by dividing out layer l's norm weights — exactly layer l+1's
// ffn_norm of the same residual — then routed with layer l+1's gating and top-(k+m); over a
// batch the guesses are ranked by how many tokens chose them.
class RouterLookahead final : public Predictor {
 public:
  // extra = m; < 0 picks max(1, k/4). Each extra guess trades disk bandwidth for recall: on
  // a 48-layer qwen3-30b-a3b-shaped synth model (k = 8, 1.5 GB budget, 16 tokens) m = 0, 2, 4
  // gave recall 95.6 / 98.6 / 99.3% at precision 95.3 / 79.3 / 66.9%, and read 4.8 / 7.3 /
  // 11.1 GB (4.3 GB with no prefetch at all).
  RouterLookahead(const Model& model, int extra);
  std::string_view name() const override { return "router-lookahead"; }
  int predict(Backend& be, int layer, const float* h, int64_t n_tok, std::vector<int32_t>* experts) override;

 private:
  const Model& model_;
  int64_t k_plus_m_ = 0;
  std::vector<int> next_moe_;  // [layer]: the next MoE layer after it, or -1
};

}  // namespace sluice
