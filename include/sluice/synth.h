// sluice/synth.h: seeded random-weight models of every supported architecture in llama.cpp's
// GGUF layout (`sluice synth`).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

// One row of the preset table.
struct SynthPreset {
  std::string arch, preset, note;
  int64_t n_vocab = 0;  // 0: the tokenizer's size
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0;
  int64_t kv_lora_rank = 0;  // > 0: MLA (one latent kv head)
  int64_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0;
  int64_t n_params = 0;  // with n_vocab 0 counted at a vocabulary of 512 (stories260K's)
};
std::vector<SynthPreset> synth_preset_table();
std::vector<std::string> synth_types();  // f32, f16, q8_0, ...

struct SynthStatus {
  int tensor = 0;  // 1-based index of the tensor being produced
  int n_tensors = 0;
  std::string_view name;
  uint64_t bytes_done = 0, bytes_total = 0;  // tensor data produced so far / of the whole file
  double seconds = 0;                        // since the write began
  bool done = false;                         // the file is complete and closed
};

struct SynthConfig {
  std::string arch{};  // may stay empty when `preset` names a full-size model
  std::string preset = "tiny";
  int64_t layers = 0;        // > 0: override n_layer
  int64_t vocab = 0;         // > 0: override n_vocab (must be >= the tokenizer's size)
  std::string type = "f16";  // one of synth_types(); for a folder f32, f16, bf16 or q2..q8 (MLX bits)
  // "gguf": one GGUF file in llama.cpp's layout; "mlx": a folder as mlx_lm.convert writes it
  // (config.json, model.safetensors, the tokenizer files of `tokenizer`, then a folder).
  std::string format = "gguf";
  int group_size = 64;  // mlx: the affine quantization's group (32, 64, 128)
  uint64_t seed = 1;
  std::string tokenizer{};        // GGUF whose tokenizer.* keys are copied, or (mlx) a folder with tokenizer.json
  float routing_locality = 0.0f;  // 0..1: consecutive tokens reuse experts
  int threads = 0;                // <= 0: all cores
  // Benchmark models: each large quantized matrix encodes a pool of rows for real and builds
  // the rest from randomly chosen pool blocks. Same types, sizes and bytes per weight, same
  // value distribution per block, written at disk speed instead of K-quant encoding speed
  // (~16M elements/s/thread); not the same weights as without it.
  bool fast = false;
  std::function<void(const SynthStatus&)> progress{};
};

struct SynthSummary {
  std::string arch, preset;  // as written
  int64_t n_layer = 0, n_vocab = 0;
  uint64_t file_bytes = 0;
  int64_t n_params = 0;
  int n_tensors = 0;
  double seconds = 0;
  std::vector<std::pair<std::string, int>> type_counts;  // "q4_K" -> tensors, by name
};

// Writes the model to `path` (a file, or the folder for format "mlx"); throws Error (tokenizer missing, bad options, I/O failure: a
// partly written file is removed).
SynthSummary synth(const SynthConfig& cfg, const std::string& path);

}  // namespace sluice
