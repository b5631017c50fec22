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
  // MLX affine codes as MLX stores them (quant/mlx_affine.h): `bits`-bit codes packed LSB-first
  // in uint32 words, 32 elements in 4·bits bytes; the per-group scales and biases live in their
  // own arrays (TensorView::affine), so these types are read in place, never converted.
  MLX_A2 = 1025,
  MLX_A3 = 1026,
  MLX_A4 = 1027,
  MLX_A5 = 1028,
  MLX_A6 = 1029,
  MLX_A8 = 1030,
};
constexpr uint32_t kFirstSluiceDType = 1024;
// True for ggml's own ids (what a GGUF file may name).
constexpr bool dtype_is_ggml(DType t) { return static_cast<uint32_t>(t) < kFirstSluiceDType; }
// The MLX affine code types, and their bits per code (0 for every other type).
constexpr int dtype_affine_bits(DType t) {
  switch (t) {
    case DType::MLX_A2: return 2;
    case DType::MLX_A3: return 3;
    case DType::MLX_A4: return 4;
    case DType::MLX_A5: return 5;
    case DType::MLX_A6: return 6;
    case DType::MLX_A8: return 8;
    default: return 0;
  }
}
constexpr bool dtype_is_affine(DType t) { return dtype_affine_bits(t) != 0; }
// The code type of `bits`-bit MLX affine groups (2, 3, 4, 5, 6 or 8).
constexpr DType dtype_affine_of_bits(int bits) {
  return bits == 2   ? DType::MLX_A2
         : bits == 3 ? DType::MLX_A3
         : bits == 4 ? DType::MLX_A4
         : bits == 5 ? DType::MLX_A5
         : bits == 6 ? DType::MLX_A6
                     : DType::MLX_A8;
}

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
