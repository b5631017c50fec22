// quant/quant: the row-level entry points (type dispatch, argument checks), the plain
// float types, and the 32-element "legacy" blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Sluice's
// own Q8_A, in their style). Each
// routine mirrors ggml-quants.c's quantize_row_*_ref / dequantize_row_* operation for
// operation (same float expression order, same casts), because the goal is byte-identical
// output, not merely a good quantizer. The K-quants live in quant_k.cpp, IQ4_NL/IQ4_XS in
// quant_iq4.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/quant.h"

#include "quant/mlx_affine.h"
#include "quant/quant_impl.h"

namespace sluice {
namespace quant_detail {

// ---- Q4_0: 32 x 4-bit, symmetric, x = d * (q - 8) ------------------------------------

void dequantize_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + QK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* x, block_q4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    // The scale maps the value of largest magnitude, with its sign, to -8, so the
    // asymmetric range -8..7 spends its extra level on the side of that value.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      // +8.5 then truncate = round half up into 0..16; 16 (only x == max) clamps to 15.
      const int q0 = std::clamp(trunc_to_int(x[j] * id + 8.5f), 0, 15);
      const int q1 = std::clamp(trunc_to_int(x[j + QK4_0 / 2] * id + 8.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// The smallest and largest of x[0..n) (ggml's loop: first-seen order, no NaN handling), the
// range the offset types (Q4_1, Q5_1, Q8_A) quantize over.
static void block_min_max(const float* x, int n, float& min, float& max) {
  min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// ---- Q4_1: 32 x 4-bit with offset, x = d * q + m --------------------------------------

void dequantize_q4_1(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + QK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* x, block_q4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
    float min = 0.0f, max = 0.0f;
    block_min_max(x, 32, min, max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int q0 = std::clamp(trunc_to_int((x[j] - min) * id + 0.5f), 0, 15);
      const int q1 = std::clamp(trunc_to_int((x[j + QK4_1 / 2] - min) * id + 0.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q8_A: 32 x 8-bit with offset, x = d * q + m (Sluice's own; no ggml twin) -------------

void dequantize_q8_a(const block_q8_a* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d + m;
  }
}

// Q4_1's min/max rule with 255 steps (tests and synthetic weights; loaders repack MLX's codes).
void quantize_q8_a(const float* x, block_q8_a* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float min = 0.0f, max = 0.0f;
    block_min_max(x, 32, min, max);
    const float d = (max - min) / 255;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < 32; ++j)
      y[i].qs[j] = static_cast<uint8_t>(std::clamp(trunc_to_int((x[j] - min) * id + 0.5f), 0, 255));
  }
}

// ---- Q5_0: 32 x 5-bit, symmetric, x = d * (q - 16) ------------------------------------

namespace {
// The 5th bit of element j (0..31) of a q5_0/q5_1 block.
inline int q5_high_bit(const uint8_t qh_bytes[4], int j) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);  // little-endian on every target we build for
  return static_cast<int>((qh >> j) & 1u) << 4;
}
}  // namespace

void dequantize_q5_0(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int q0 = ((x[i].qs[j] & 0x0F) | q5_high_bit(x[i].qh, j)) - 16;
      const int q1 = ((x[i].qs[j] >> 4) | q5_high_bit(x[i].qh, j + QK5_0 / 2)) - 16;
      y[j] = static_cast<float>(q0) * d;
      y[j + QK5_0 / 2] = static_cast<float>(q1) * d;
    }
  }
}

void quantize_q5_0(const float* x, block_q5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
    float amax = 0.0f, max = 0.0f;  // same sign convention as q4_0: max -> -16
    for (int j = 0; j < QK5_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int q0 = std::clamp(trunc_to_int(x[j] * id + 16.5f), 0, 31);
      const int q1 = std::clamp(trunc_to_int(x[j + QK5_0 / 2] * id + 16.5f), 0, 31);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

// ---- Q5_1: 32 x 5-bit with offset, x = d * q + m --------------------------------------

void dequantize_q5_1(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0x0F) | q5_high_bit(x[i].qh, j);
      const int q1 = (x[i].qs[j] >> 4) | q5_high_bit(x[i].qh, j + QK5_1 / 2);
      y[j] = static_cast<float>(q0) * d + m;
      y[j + QK5_1 / 2] = static_cast<float>(q1) * d + m;
    }
  }
}

void quantize_q5_1(const float* x, block_q5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
    float min = 0.0f, max = 0.0f;
    block_min_max(x, 32, min, max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      // ggml casts straight to uint8_t without clamping (the value is 0..31 for finite
      // input); keep the same bits: low nibble to qs, bit 4 to qh.
      const int q0 = static_cast<uint8_t>(trunc_to_int((x[j] - min) * id + 0.5f));
      const int q1 = static_cast<uint8_t>(trunc_to_int((x[j + QK5_1 / 2] - min) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + QK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

// ---- Q8_0: 32 x int8, x = d * q ------------------------------------------------------

void dequantize_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void quantize_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    // roundf: ties away from zero (not nearest_int's ties-to-even), as ggml.
    for (int j = 0; j < QK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::clamp(trunc_to_int(std::round(x[j] * id)), -128, 127));
  }
}

}  // namespace quant_detail

using namespace quant_detail;

bool quant_supported(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q8_A:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q8_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS: return true;
    default: return false;
  }
}

namespace {
void check_row(const char* what, DType t, int64_t n) {
  if (!quant_supported(t)) {
    // dtype_traits_of, not dtype_name: t may be a value cast from an unchecked file field.
    const auto tr = dtype_traits_of(static_cast<uint32_t>(t));
    if (tr) fail(what, ": type ", tr->name, " is not supported by quant/");
    fail(what, ": unknown type id ", static_cast<uint32_t>(t));
  }
  const int64_t bs = dtype_traits(t).block_size;
  if (n < 0 || n % bs != 0)
    fail(what, ": type ", dtype_name(t), ": n = ", n, " is not a multiple of the block size ", bs);
}
}  // namespace

void dequantize_weight_row(const TensorView& w, int64_t r, float* out) {
  if (!dtype_is_affine(w.type)) return dequantize_row(w.type, w.row(r), out, w.ne[0]);
  MlxAffineFormat f;
  f.bits = dtype_affine_bits(w.type);
  f.group_size = w.affine.group_size;
  f.scale_type = w.affine.scale_type;
  const size_t g = static_cast<size_t>(r) * w.affine.group_row_bytes;
  mlx_affine_dequantize_row_f32(f, reinterpret_cast<const uint32_t*>(w.row(r)), w.affine.scales + g,
                                w.affine.biases + g, w.ne[0], out);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_row("dequantize_row", t, n);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case DType::Q4_0: return dequantize_q4_0(static_cast<const block_q4_0*>(src), dst, n);
    case DType::Q4_1: return dequantize_q4_1(static_cast<const block_q4_1*>(src), dst, n);
    case DType::Q5_0: return dequantize_q5_0(static_cast<const block_q5_0*>(src), dst, n);
    case DType::Q5_1: return dequantize_q5_1(static_cast<const block_q5_1*>(src), dst, n);
    case DType::Q8_0: return dequantize_q8_0(static_cast<const block_q8_0*>(src), dst, n);
    case DType::Q8_A: return dequantize_q8_a(static_cast<const block_q8_a*>(src), dst, n);
    case DType::Q2_K: return dequantize_q2_K(static_cast<const block_q2_K*>(src), dst, n);
    case DType::Q3_K: return dequantize_q3_K(static_cast<const block_q3_K*>(src), dst, n);
    case DType::Q4_K: return dequantize_q4_K(static_cast<const block_q4_K*>(src), dst, n);
    case DType::Q5_K: return dequantize_q5_K(static_cast<const block_q5_K*>(src), dst, n);
    case DType::Q6_K: return dequantize_q6_K(static_cast<const block_q6_K*>(src), dst, n);
    case DType::Q8_K: return dequantize_q8_K(static_cast<const block_q8_K*>(src), dst, n);
    case DType::IQ4_NL: return dequantize_iq4_nl(static_cast<const block_iq4_nl*>(src), dst, n);
    case DType::IQ4_XS: return dequantize_iq4_xs(static_cast<const block_iq4_xs*>(src), dst, n);
    default: break;  // unreachable: check_row rejected it
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_row("quantize_row", t, n);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0: return quantize_q4_0(src, static_cast<block_q4_0*>(dst), n);
    case DType::Q4_1: return quantize_q4_1(src, static_cast<block_q4_1*>(dst), n);
    case DType::Q5_0: return quantize_q5_0(src, static_cast<block_q5_0*>(dst), n);
    case DType::Q5_1: return quantize_q5_1(src, static_cast<block_q5_1*>(dst), n);
    case DType::Q8_0: return quantize_q8_0(src, static_cast<block_q8_0*>(dst), n);
    case DType::Q8_A: return quantize_q8_a(src, static_cast<block_q8_a*>(dst), n);
    case DType::Q2_K: return quantize_q2_K(src, static_cast<block_q2_K*>(dst), n);
    case DType::Q3_K: return quantize_q3_K(src, static_cast<block_q3_K*>(dst), n);
    case DType::Q4_K: return quantize_q4_K(src, static_cast<block_q4_K*>(dst), n);
    case DType::Q5_K: return quantize_q5_K(src, static_cast<block_q5_K*>(dst), n);
    case DType::Q6_K: return quantize_q6_K(src, static_cast<block_q6_K*>(dst), n);
    case DType::Q8_K: return quantize_q8_K(src, static_cast<block_q8_K*>(dst), n);
    case DType::IQ4_NL: return quantize_iq4_nl(src, static_cast<block_iq4_nl*>(dst), n);
    case DType::IQ4_XS: return quantize_iq4_xs(src, static_cast<block_iq4_xs*>(dst), n);
    default: break;
  }
}

}  // namespace sluice
