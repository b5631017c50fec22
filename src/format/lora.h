// format/lora: LoRA adapters merged into a model's weights at load (`-m M --lora PATH[:SCALE]`,
// SCALE multiplying the adapter's own). PATH is a llama.cpp LoRA GGUF (general.type "adapter",
// adapter.lora.alpha, NAME.lora_a [in, r] and NAME.lora_b [r, out] per adapted tensor NAME;
// llama.cpp adds SCALE·alpha/r·B·(A·x), SCALE without alpha; any tensor type dequantize_row
// reads), or an MLX-LM adapter folder, what `mlx_lm.lora` writes: adapter_config.json
// (fine_tune_type "lora", lora_parameters.scale) and adapters.safetensors with, per adapted
// linear (named by its Hugging Face module path, e.g. model.layers.1.self_attn.q_proj),
// lora_a [in, r] and lora_b [r, out]. MLX computes y = W·x + scale·(x·A)·B; here each adapted
// weight becomes W' = W + scale·(A·B)ᵀ once, as f32 rows the file then owns (the base stays
// mapped; only the adapted tensors are copied), so every backend runs it unchanged.
//
// Checked before any merge: the config's fields, pairs complete (no lora_a without its lora_b),
// ranks equal within a pair, in/out equal to the base tensor's, dtypes float; what is not
// supported is refused by name (DoRA, full fine-tunes, adapters on embeddings or on stacked
// experts). Errors name the adapter's file and tensor.
#pragma once
#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace sluice {

struct LoraSummary {
  int64_t n_tensors = 0;  // weights merged
  int64_t rank = 0;       // the largest rank among them
  float scale = 0;
  std::string line() const;  // "lora: 3 tensors merged (rank 4, scale 2)"
};

// Merges the adapter `spec` (PATH or PATH:SCALE, see above) into f. Throws sluice::Error.
LoraSummary apply_lora_adapter(GgufFile& f, const std::string& spec);

}  // namespace sluice
