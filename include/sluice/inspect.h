// sluice/inspect.h: what a GGUF file holds (`sluice inspect`): its header, metadata and tensor
// table, and the shape of the model it describes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

struct GgufTensorInfo {
  std::string name;
  std::string type;            // "q4_K", "f32", ...
  std::vector<int64_t> shape;  // ggml order (ne[0] first)
  size_t nbytes = 0;
  int64_t n_elements = 0;
};

struct GgufInfo {
  bool folder = false;  // a Hugging Face / MLX folder, read as the GGUF it maps to (no header of its own)
  uint32_t version = 0;
  size_t alignment = 0, data_offset = 0;
  std::vector<std::pair<std::string, std::string>> metadata;  // key -> value as text, in file order
  std::vector<GgufTensorInfo> tensors;
};

// Reads the header of a GGUF file, or a model folder's config.json and safetensors headers as
// their GGUF metadata and tensors; throws Error naming the file and what is wrong.
GgufInfo gguf_info(const std::string& path);

// Loads the model to describe it; throws Error when it cannot run (unsupported architecture,
// missing tensors, ...).
ModelInfo model_info(const std::string& path);

}  // namespace sluice
