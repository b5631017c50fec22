// runtime/parity: runs one model on two backends side by side over the same tokens and
// reports, for every named intermediate, the normalized error; the first name whose error
// exceeds its tolerance is the bug report.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace sluice {

struct ParityEntry {
  std::string name;
  int layer = -1;
  int64_t n = 0;
  double nmse = 0;       // Σ(a-b)² / Σ b²  (b = the reference backend)
  double max_abs = 0;    // max |a-b|
  double tolerance = 0;  // NMSE limit for this entry
  bool ok() const { return nmse <= tolerance; }
};

struct ParityReport {
  std::vector<ParityEntry> entries;  // in forward order
  const ParityEntry* first_divergence() const;
};

// NMSE limit for comparing two backends that both keep activations in float32 (any weight
// type, decoded to float) with a KV cache of type `kv`. See parity.cpp for how the values
// were chosen.
double parity_nmse_tolerance(DType kv);

// Evaluates `tokens` as one prompt batch, then `n_decode` greedy steps one token at a time
// (so the decode path is compared too), on `test` and on `reference` (a second Model may
// be given for `test`, e.g. with a perturbed config for negative controls).
ParityReport run_parity(const Model& reference_model, Backend& reference, const Model& test_model, Backend& test,
                        const std::vector<int32_t>& tokens, int n_decode, const KvCacheOptions& kv);

}  // namespace sluice
