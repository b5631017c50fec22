// sluice/parity.h: two backends side by side over the same model and tokens (`sluice parity`):
// every named intermediate compared, the first that diverges reported.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

struct ParityConfig {
  std::string backend_b = "cpu-exact";  // the backend under test (the Engine's is the reference)
  int n_threads = 0;
  std::string cache_type = "f16";  // KV cache type of both sides
  int n_decode = 4;                // greedy decode steps compared after the prompt
  // Called before the run for each side that multiplies quantized weights by int8 activations
  // (which: 0 the Engine's backend, 1 backend_b), with that path's level.
  std::function<void(int which, const std::string& int8_level)> on_int8_backend{};
};

struct ParityRow {
  std::string name;
  int layer = -1;
  int64_t n = 0;
  double nmse = 0;     // Σ(a-b)² / Σ b² (b = the reference)
  double max_abs = 0;  // max |a-b|
  double tolerance = 0;
  bool ok = true;  // nmse <= tolerance
};

struct ParitySummary {
  std::vector<ParityRow> rows;  // in forward order
  int first_divergence = -1;    // index into rows; -1: none
};

// Runs `tokens` through the Engine's model on its backend and on backend_b. Throws Error for
// an unknown backend or cache type.
ParitySummary parity(Engine& reference, const std::vector<int32_t>& tokens, const ParityConfig& cfg);

}  // namespace sluice
