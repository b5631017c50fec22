// models/qwen35: the Qwen3.5 hybrid module's hyperparameters (models/qwen35.cpp), visible so
// tools can print them and tests can perturb them for negative controls.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.h"

namespace sluice {

struct DeltaNetHparams final : ArchHparams {
  int64_t conv_kernel = 0;     // {arch}.ssm.conv_kernel
  int64_t n_head_k = 0;        // {arch}.ssm.group_count: key heads
  int64_t n_head_v = 0;        // {arch}.ssm.time_step_rank: value heads
  int64_t dim_k = 0;           // {arch}.ssm.state_size: key head dim
  int64_t dim_v = 0;           // {arch}.ssm.inner_size / n_head_v: value head dim
  std::vector<bool> linear;    // per layer: a Gated DeltaNet layer (else full attention)
  bool grouped_heads = false;  // value head h reads key head h / (H_v/H_k), not h % H_k (tests: negative control)
  int64_t conv_dim() const { return 2 * n_head_k * dim_k + n_head_v * dim_v; }
};

}  // namespace sluice
