// core/dtype: element/block types of weights and caches, with ggml's numeric ids so GGUF
// type fields map 1:1, and the traits table (block size, bytes per block) all code uses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

// Values are ggml's `enum ggml_type` ids as stored in GGUF tensor infos, then Sluice's own
// types from kFirstSluiceDType on: formats that loaders build in memory and that no file
// written by ggml holds (GGUF reading refuses them; dtype_is_ggml).
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  // 32 unsigned 8-bit codes with an fp16 scale and offset (quant/blocks.h block_q8_a): MLX's
  // 6- and 8-bit affine groups, held exactly (format/hf_folder).
  Q8_A = 1024,
};
constexpr uint32_t kFirstSluiceDType = 1024;
// True for ggml's own ids (what a GGUF file may name).
constexpr bool dtype_is_ggml(DType t) { return static_cast<uint32_t>(t) < kFirstSluiceDType; }

struct DTypeTraits {
  DType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", ...
  int64_t block_size;     // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool quantized;         // needs quant/ to (de)quantize
};

// Traits for a ggml type id, or nullopt if Sluice does not know the id. GGUF parsing uses
// this to reject unknown types with a clear error instead of guessing sizes.
std::optional<DTypeTraits> dtype_traits_of(uint32_t id);
// Traits of a known type (never fails).
const DTypeTraits& dtype_traits(DType t);
inline std::string_view dtype_name(DType t) { return dtype_traits(t).name; }
// Parse a name like "q4_K" / "Q4_K" / "f16"; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers
// that read files; asserted here).
size_t dtype_row_bytes(DType t, int64_t n);

}  // namespace sluice
