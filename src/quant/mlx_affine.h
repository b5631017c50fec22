// quant/mlx_affine: MLX's affine quantization as a weight format (mx.quantize): each row of n
// weights is coded in groups of G (32, 64 or 128) consecutive elements as w = code * scale +
// bias, code an unsigned `bits`-bit integer (2, 3, 4, 5, 6 or 8); the codes of a row form one
// little-endian bit stream packed LSB-first into uint32 words (element i at bits
// [i*bits, i*bits + bits) of the row), so a row is n*bits/32 words and a 3-, 5- or 6-bit code
// may straddle two words; each group has one scale and one bias (bf16, f16 or f32; the scale
// may be negative). This file is the reference dequantizer the kernels are checked against;
// checked against mx.dequantize itself in tests/unit/test_mlx_affine.cpp.
//
// Loading (format/hf_folder): by default (and always for `pack`) the groups are converted into
// blocks: 2-, 3- and 4-bit groups as GGUF Q4_1 blocks, 5-bit groups Q5_1, 6- and 8-bit groups
// Sluice's own Q8_A (8-bit codes, fp16 scale and offset), all exactly (w = d*q + m with d =
// scale, m = bias, q the code), when every scale and bias is an fp16 value; otherwise float32.
// With --mlx-in-place the codes are read where the folder keeps them (DType::MLX_A*, the scales
// and biases as TensorView::affine planes; the cpu backend's int8 kernels are
// backends/cpu/kernels_q8_affine_impl.h, every other reader goes through dequantize_weight_row).
// Both give mlx_affine_dequantize_row_f32's numbers: what MLX's quantized_matmul computes for
// float32 activations, not mx.dequantize's in f16/bf16, which rounds the product and the sum to
// the scales' type.
#pragma once
#include <cstdint>
#include <optional>

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
// The same row in float32 arithmetic, out[i] = float(code) * scale + bias with the scales
// widened to float: what mx.quantized_matmul and QuantizedEmbedding compute once the model's
// floats are float32 (mlx-lm's set_dtype(float32) widens scales and biases), and what MLX's
// kernels accumulate from in any dtype. The product is exact (≤ 8-bit code × ≤ 11-bit
// mantissa) for f16/bf16 scales, so only the sum rounds.
void mlx_affine_dequantize_row_f32(const MlxAffineFormat& f, const uint32_t* codes, const void* scales,
                                   const void* biases, int64_t n, float* out);

// The encoder (`sluice synth --format mlx`): one row of n floats into codes [row_words], scales
// and biases [n / group_size] of f. Per group scale = (max - min) / (2^bits - 1) and bias = min,
// each rounded to an fp16 value and then stored in f.scale_type (so the folder loader repacks the
// groups exactly; the bias rounded down and the scale up where needed, so [min, max] stays inside
// the code range), codes round((x - bias) / scale) clamped to it. Not mx.quantize's
// choice of scale and bias (MLX moves one edge so that 0 is exact); any codes decode through
// mlx_affine_dequantize_row, which is all a folder means. |x - decoded| <= stored scale / 2.
void mlx_affine_quantize_row(const MlxAffineFormat& f, const float* x, int64_t n, uint32_t* codes, void* scales,
                             void* biases);

// The block type that holds groups of f exactly: Q4_1 for 2, 3 and 4 bits, Q5_1 for 5, Q8_A for
// 6 and 8 (no GGUF type has an offset and 6+ bit codes); nullopt for a group size that is not a
// multiple of 32.
std::optional<DType> mlx_affine_repack_type(const MlxAffineFormat& f);
// Whether every one of `n_groups` scales and biases is exactly an fp16 value (always for f16
// ones): what mlx_affine_repack_row needs, decided before any row is converted (the folder
// loader converts the experts of `sluice pack DIR` only as it writes them).
bool mlx_affine_groups_fp16_exact(const MlxAffineFormat& f, const void* scales, const void* biases, int64_t n_groups);
// The fp16 bits of bf16 value h when it is exactly an fp16 value (±0, ±inf, normals in fp16's
// range, subnormals on its 2^-24 grid), else nullopt (NaN, out of range, bits below the grid).
std::optional<uint16_t> mlx_bf16_exact_fp16(uint16_t h);
// One row of n elements (n a multiple of the group size) into n/32 blocks of `type`
// (mlx_affine_repack_type(f)): each block gets its group's scale as d and bias as m (fp16), and
// the codes in ggml's order (qs[j]: element j in the low nibble, j+16 in the high one; Q5_1's
// fifth bits in qh; Q8_A's qs[j] the code of element j). Returns false, with dst partly written, when a scale or bias is not exactly
// an fp16 value (bf16/f32 scales outside fp16's range or precision): the caller falls back to
// dequantizing. The blocks' dequantize_row is then bit-identical to
// mlx_affine_dequantize_row_f32.
bool mlx_affine_repack_row(const MlxAffineFormat& f, DType type, const uint32_t* codes, const void* scales,
                           const void* biases, int64_t n, void* dst);

}  // namespace sluice
