// synth/plan: the list of tensors of a synth model — llama.cpp names, ggml shapes, output
// types — and how each one's values are drawn (distribution plus the routing-locality
// scaling). Internal to src/synth.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "synth/synth.h"

namespace sluice::synth_plan {

// Value of element (col c, row r) of a tensor: mean + std · scale(c, r) · z, z ~ N(0, 1), where
// r counts rows across all of ne[1..3] and scale is 1 except for the routing-locality terms:
// columns c >= ctx_begin get col_scale_ctx (others col_scale), rows whose r % ne[1] >=
// ctx_begin get row_scale_ctx (others 1).
struct TensorInit {
  float mean = 0.0f;
  float std = 1.0f;
  int64_t ctx_begin = -1;       // first context channel (-1: no locality scaling)
  float col_scale = 1.0f;       // applied to columns < ctx_begin
  float col_scale_ctx = 1.0f;   // applied to columns >= ctx_begin
  float row_scale_ctx = 1.0f;   // applied to rows (mod ne[1]) >= ctx_begin
  int64_t zero_rows_from = -1;  // rows >= this are all zero (-1: none)
  // uniform: values lo + (hi - lo)·u, u ~ U(0, 1), instead of the Gaussian (no scaling).
  bool uniform = false;
  float lo = 0.0f, hi = 1.0f;
};

struct TensorPlan {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  DType type = DType::F32;
  TensorInit init;
  int64_t n_rows() const {
    int64_t r = 1;
    for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
    return r;
  }
};

// Every tensor of the model in file order (token_embd, output_norm, output, then blk.0 ...).
// n_real_vocab: tokens the tokenizer really has; output.weight rows of the padding beyond it
// are zero (see plan.cpp).
std::vector<TensorPlan> plan_tensors(const SynthShape& s, const std::string& type, float routing_locality,
                                     int64_t n_real_vocab);

// Rows [r0, r1) of `t` (row r counts across ne[1..3]) drawn as TensorInit says, encoded in t.type
// into dst (row_bytes apart); `row` is ne[0] floats of scratch. The values depend only on (key,
// row, column), so a GGUF and an MLX folder of one seed hold the same weights.
void fill_rows(const TensorPlan& t, uint64_t key, int64_t r0, int64_t r1, float* row, uint8_t* dst, size_t row_bytes);

}  // namespace sluice::synth_plan
