// quant/mlx_affine: the reference dequantizer of MLX's affine format.
#include "quant/mlx_affine.h"

#include <cstring>

#include "core/error.h"
#include "quant/quant.h"

namespace sluice {
namespace {

float scale_at(DType t, const void* p, int64_t i) {
  if (t == DType::F32) {
    float v;
    std::memcpy(&v, static_cast<const uint8_t*>(p) + 4 * i, 4);  // the file promises no alignment
    return v;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2);
  return t == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

float to_scale_type(DType t, float x) {
  return t == DType::F16 ? fp16_to_fp32(fp32_to_fp16(x)) : t == DType::BF16 ? bf16_to_fp32(fp32_to_bf16(x)) : x;
}

}  // namespace

void mlx_affine_check(const MlxAffineFormat& f, int64_t n) {
  if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 5 && f.bits != 6 && f.bits != 8)
    fail("MLX affine quantization: ", f.bits, " bits is not one MLX writes (2, 3, 4, 5, 6, 8)");
  if (f.group_size != 32 && f.group_size != 64 && f.group_size != 128)
    fail("MLX affine quantization: group size ", f.group_size, " is not one MLX writes (32, 64, 128)");
  if (f.scale_type != DType::F16 && f.scale_type != DType::BF16 && f.scale_type != DType::F32)
    fail("MLX affine quantization: scales of type ", dtype_name(f.scale_type), " (want f16, bf16 or f32)");
  if (n <= 0 || n % f.group_size != 0)
    fail("MLX affine quantization: a row of ", n, " elements is not a whole number of groups of ", f.group_size);
}

int64_t mlx_affine_row_words(const MlxAffineFormat& f, int64_t n) { return n * f.bits / 32; }

void mlx_affine_dequantize_row(const MlxAffineFormat& f, const uint32_t* codes, const void* scales, const void* biases,
                               int64_t n, float* out) {
  const uint64_t mask = (uint64_t{1} << f.bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * f.bits, word = bit / 32, shift = bit % 32;
    uint32_t lo;
    std::memcpy(&lo, codes + word, 4);
    uint64_t v = lo >> shift;
    if (shift + f.bits > 32) {  // the code continues in the next word
      uint32_t hi;
      std::memcpy(&hi, codes + word + 1, 4);
      v |= static_cast<uint64_t>(hi) << (32 - shift);
    }
    const int64_t g = i / f.group_size;
    // As mx.dequantize: in the scales' type, so with f16/bf16 scales the product is rounded to
    // it and so is the sum (two roundings; float arithmetic with one would differ by an ulp).
    out[i] = to_scale_type(f.scale_type, to_scale_type(f.scale_type, static_cast<float>(v & mask) *
                                                                         scale_at(f.scale_type, scales, g)) +
                                             scale_at(f.scale_type, biases, g));
  }
}

}  // namespace sluice
