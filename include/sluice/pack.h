// sluice/pack.h: the expert-bundled layout for streaming (`sluice pack`): each (layer, expert)
// one aligned region, read in one request. A packed file is Sluice-only; unpacking restores the
// stacked tensors llama.cpp reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace sluice {

struct PackSummary {
  int moe_layers = 0;      // layers whose experts were rewritten
  int64_t experts = 0;     // (layer, expert) bundles
  uint64_t bytes_in = 0;   // input file size
  uint64_t bytes_out = 0;  // output file size
  double seconds = 0;
};

// progress(done, total): tensors written so far. Throws Error naming the file and the problem
// (not an MoE model, already packed, I/O errors; a partly written output is removed).
PackSummary pack_model(const std::string& in_path, const std::string& out_path, bool unpack,
                       const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace sluice
