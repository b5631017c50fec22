// quant/mlx_affine: MLX's affine quantization as a weight format (mx.quantize): each row of n
// weights is coded in groups of G (32, 64 or 128) consecutive elements as w = code * scale +
// bias, code an unsigned `bits`-bit integer (2, 3, 4, 5, 6 or 8); the codes of a row form one
// little-endian bit stream packed LSB-first into uint32 words (element i at bits
// [i*bits, i*bits + bits) of the row), so a row is n*bits/32 words and a 3-, 5- or 6-bit code
// may straddle two words; each group has one scale and one bias (bf16, f16 or f32; the scale
// may be negative). This file is the reference dequantizer the kernels are checked against;
// checked against mx.dequantize itself in tests/unit/test_mlx_affine.cpp.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace sluice {

struct MlxAffineFormat {
  int bits = 4;
  int group_size = 64;
  DType scale_type = DType::F16;  // of scales and biases: F16, BF16 or F32
};

// Throws sluice::Error for bits, group size or scale type MLX does not write, or a row
// length that is not a multiple of the group size.
void mlx_affine_check(const MlxAffineFormat& f, int64_t n);
// uint32 words of codes in one row of n elements.
int64_t mlx_affine_row_words(const MlxAffineFormat& f, int64_t n);
// One row: codes [row_words], scales and biases [n / group_size] of f.scale_type -> out [n],
// exactly mx.dequantize's numbers (computed in the scales' type).
void mlx_affine_dequantize_row(const MlxAffineFormat& f, const uint32_t* codes, const void* scales, const void* biases,
                               int64_t n, float* out);

}  // namespace sluice
