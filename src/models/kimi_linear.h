// models/kimi_linear: the Kimi Linear module's hyperparameters (models/kimi_linear.cpp),
// visible so tools can print them and tests can perturb them for negative controls.
#pragma once
#include <cstdint>
#include <vector>

#include "models/mla.h"
#include "models/model.h"

namespace sluice {

struct KimiLinearHparams final : ArchHparams {
  MlaHparams mla;                 // the full-attention layers (rope = false: Kimi's MLA has none)
  int64_t conv_kernel = 0;        // {arch}.ssm.conv_kernel: taps of the short convs on q, k and v
  int64_t head_dim = 0;           // {arch}.kda.head_dim: KDA key = value head dim (n_head heads)
  std::vector<bool> kda;          // per layer: a KDA layer (head_count_kv 0), else MLA
  bool per_channel_decay = true;  // tests: false decays each head by its first channel's gate (negative control)
  int64_t inner = 0;              // n_head * head_dim: width of q, k, v and the decay and output gates
};

}  // namespace sluice
