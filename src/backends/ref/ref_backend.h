// backends/ref: the oracle backend. Scalar loops, float64 accumulation, no SIMD, no threads.
// Every other backend is tested against it (tests/kernels), so clarity beats speed here.
#pragma once
#include <memory>

#include "backends/backend.h"

namespace sluice {

std::unique_ptr<Backend> make_ref_backend();

}  // namespace sluice
