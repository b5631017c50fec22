// format/lora: LoRA adapters on a model's weights (`-m M --lora PATH[:SCALE]`, repeatable, SCALE
// multiplying the adapter's own), applied at run time (y = W·x + scale·B·(A·x): the factors
// attached to the adapted tensors, TensorView::lora, added by Backend::matmul; the base weights
// stay as the file has them) or, with --lora-merge, merged in memory. PATH is a llama.cpp LoRA GGUF (general.type "adapter",
// adapter.lora.alpha, NAME.lora_a [in, r] and NAME.lora_b [r, out] per adapted tensor NAME, or
// [in, r, E] and [r, out, E] on stacked experts, expert e's factors being slice e;
// llama.cpp adds SCALE·alpha/r·B·(A·x), SCALE without alpha; any tensor type dequantize_row
// reads), or an MLX-LM adapter folder, what `mlx_lm.lora` writes: adapter_config.json
// (fine_tune_type "lora", lora_parameters.scale) and adapters.safetensors with, per adapted
// linear (named by its Hugging Face module path, e.g. model.layers.1.self_attn.q_proj),
// lora_a [in, r] and lora_b [r, out]. MLX computes y = W·x + scale·(x·A)·B. Merged, each adapted
// weight becomes W' = W + scale·(A·B)ᵀ once, as f32 rows the file then owns (the base stays
// mapped; only the adapted tensors are copied).
//
// Checked before any merge: the config's fields, pairs complete (no lora_a without its lora_b),
// ranks equal within a pair, in/out equal to the base tensor's, dtypes float; what is not
// supported is refused by name (DoRA, full fine-tunes, adapters on embeddings, --lora-merge on
// stacked experts). Errors name the adapter's file and tensor.
#pragma once
#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace sluice {

struct LoraSummary {
  int64_t n_tensors = 0;  // weights adapted
  bool merged = false;
  int64_t rank = 0;  // the largest rank among them
  float scale = 0;
  std::string line() const;  // "lora: 3 tensors adapted at run time (rank 4, scale 2)" (or "merged")
};

// Applies the adapter `spec` (PATH or PATH:SCALE, see above) to f's tensors: attached for run
// time, or merged. Throws sluice::Error before changing anything.
LoraSummary apply_lora_adapter(GgufFile& f, const std::string& spec, bool merge = false);

}  // namespace sluice
