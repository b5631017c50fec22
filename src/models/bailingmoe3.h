// models/bailingmoe3: the Ling 3 module's hyperparameters (models/bailingmoe3.cpp), visible so
// tests can perturb them for negative controls.
#pragma once
#include <cstdint>
#include <vector>

#include "models/kda.h"
#include "models/mla.h"
#include "models/model.h"

namespace sluice {

struct BailingMoe3Hparams final : ArchHparams {
  MlaHparams mla;                  // the full-attention layers (RoPE on; NORM pairs, NEOX with mrope sections)
  KdaShape kda_shape;              // {arch}.attention.head_count x {arch}.kda.head_dim, {arch}.ssm.conv_kernel taps
  std::vector<bool> kda;           // per layer: a KDA layer (head_count_kv 0), else MLA
  float gate_lower_bound = -5.0f;  // {arch}.kda.gate_lower_bound (< 0): the KDA log-decay lies in (it, 0)
  bool attn_head_gate = true;      // tests: false drops the MLA layers' head-wise sigmoid gate (negative control)
};

}  // namespace sluice
