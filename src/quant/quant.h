// quant/: the block formats of every weight type, defined once. Reference (scalar)
// quantize and dequantize that all backends share and test against. Layouts and rounding
// follow ggml's reference implementations (ggml-quants.c: quantize_row_*_ref and
// dequantize_row_*), so bytes written here are what llama.cpp reads, and values decoded
// here are what llama.cpp decodes from the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/tensor.h"

namespace sluice {

// fp16_to_fp32, fp32_to_fp16, bf16_to_fp32, fp32_to_bf16: core/fp16.h.

// Decode n elements (n a multiple of the block size) of type t from src into dst.
// Supports F32, F16, BF16 and every quantized type of dtype.h except Q8_1.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Encode n elements (n a multiple of the block size) into dst (dtype_row_bytes(t, n) bytes),
// with ggml's reference algorithm for that type.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// True if dequantize_row/quantize_row handle t.
bool quant_supported(DType t);
// Row r of the weight w decoded to float (w.ne[0] elements): dequantize_row of its bytes, or an
// MLX affine row (DType::MLX_A*) from its codes and its planes' scale and bias
// (mlx_affine_dequantize_row_f32: the float32 numbers of MLX's quantized_matmul).
void dequantize_weight_row(const TensorView& w, int64_t r, float* out);
// Whether dequantize_weight_row decodes w's type.
inline bool weight_decodable(DType t) { return quant_supported(t) || dtype_is_affine(t); }

}  // namespace sluice
