// runtime/expert_store: where expert weights live. Model code asks for ExpertHandle{layer,
// expert} and gets three 2-D weight views; the policy behind it (all resident in the mmap
// now; a bounded streaming cache later) is invisible to it.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace sluice {

struct ExpertHandle {
  int32_t layer = 0;
  int32_t expert = 0;
};

// One expert's SwiGLU weights, ggml order [in, out]: gate/up [n_embd, n_ff_exp], down [n_ff_exp, n_embd].
struct ExpertWeights {
  TensorView gate, up, down;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual ExpertWeights get(ExpertHandle h) = 0;
};

// Experts read in place from stacked [in, out, n_expert] tensors (the GGUF mmap).
class ResidentExperts : public ExpertSource {
 public:
  struct LayerTensors {
    const TensorView* gate = nullptr;  // [n_embd, n_ff_exp, n_expert]
    const TensorView* up = nullptr;    // [n_embd, n_ff_exp, n_expert]
    const TensorView* down = nullptr;  // [n_ff_exp, n_embd, n_expert]
  };
  explicit ResidentExperts(std::vector<LayerTensors> layers) : layers_(std::move(layers)) {}
  ExpertWeights get(ExpertHandle h) override {
    const LayerTensors& l = layers_[h.layer];
    return {l.gate->slice2d(h.expert), l.up->slice2d(h.expert), l.down->slice2d(h.expert)};
  }

 private:
  std::vector<LayerTensors> layers_;  // indexed by layer; entries of dense layers stay null
};

}  // namespace sluice
