// models/blocks: building blocks shared by the forwards of several families.
#pragma once
#include <cstdint>

#include "backends/backend.h"
#include "memory/kv_cache.h"

namespace sluice {

// Writes a batch's K [T][Hkv*Dk] and V [T][Hkv*Dv] rows into the cache at positions
// pos0.., then attends causally: out [T][H*Dv] from q [T][H*Dk] over positions 0..pos0+T-1.
void attend_cached(Backend& be, KvCache& kv, int64_t layer, const float* q, const float* k, const float* v, float* out,
                   int64_t T, int64_t pos0, int64_t H, int64_t Hkv, int64_t Dk, int64_t Dv, float scale);

}  // namespace sluice
