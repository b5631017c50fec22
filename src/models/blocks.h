// models/blocks: building blocks shared by the forwards of several families.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "memory/batch.h"
#include "memory/memory.h"

namespace sluice {

// Causal attention of layer `layer` over each sequence of the batch: for every run (memory/
// batch.h) its K [n][Hkv*Dk] and V [n][Hkv*Dv] rows are written into the run's sequence at
// pos0.., then its queries attend to that sequence's positions 0..pos0+n-1 only.
// q [T][H*Dk], k, v and out [T][H*Dv] are the whole batch's rows.
struct AttendShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  float scale = 1.0f;
};
void attend_batch(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t layer, const AttendShape& shape,
                  const float* q, const float* k, const float* v, float* out);

}  // namespace sluice
