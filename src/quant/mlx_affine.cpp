// quant/mlx_affine: the reference dequantizer of MLX's affine format.
#include "quant/mlx_affine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
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

// Code i of a row: bits [i*bits, i*bits + bits) of the LSB-first stream.
uint32_t code_at(const uint32_t* codes, int bits, int64_t i) {
  const int64_t bit = i * bits, word = bit / 32, shift = bit % 32;
  uint32_t lo;
  std::memcpy(&lo, codes + word, 4);  // the file promises no alignment
  uint64_t v = lo >> shift;
  if (shift + bits > 32) {  // the code continues in the next word
    uint32_t hi;
    std::memcpy(&hi, codes + word + 1, 4);
    v |= static_cast<uint64_t>(hi) << (32 - shift);
  }
  return static_cast<uint32_t>(v & ((uint64_t{1} << bits) - 1));
}

// The fp16 bits of x, or nullopt when x is not exactly an fp16 value.
std::optional<uint16_t> exact_fp16(float x) {
  const uint16_t h = fp32_to_fp16(x);
  const float back = fp16_to_fp32(h);
  if (back != x || (back == 0.0f && std::signbit(back) != std::signbit(x))) return std::nullopt;
  return h;
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
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / f.group_size;
    // As mx.dequantize: in the scales' type, so with f16/bf16 scales the product is rounded to
    // it and so is the sum (two roundings; float arithmetic with one would differ by an ulp).
    out[i] = to_scale_type(f.scale_type, to_scale_type(f.scale_type, static_cast<float>(code_at(codes, f.bits, i)) *
                                                                         scale_at(f.scale_type, scales, g)) +
                                             scale_at(f.scale_type, biases, g));
  }
}

void mlx_affine_dequantize_row_f32(const MlxAffineFormat& f, const uint32_t* codes, const void* scales,
                                   const void* biases, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / f.group_size;
    out[i] = static_cast<float>(code_at(codes, f.bits, i)) * scale_at(f.scale_type, scales, g) +
             scale_at(f.scale_type, biases, g);
  }
}

void mlx_affine_quantize_row(const MlxAffineFormat& f, const float* x, int64_t n, uint32_t* codes, void* scales,
                             void* biases) {
  mlx_affine_check(f, n);
  const int top = (1 << f.bits) - 1;
  std::memset(codes, 0, static_cast<size_t>(mlx_affine_row_words(f, n)) * 4);
  // fp16-exact first, then the stored type: bf16 keeps an fp16 value of normal range exactly.
  auto stored = [&](float v) { return to_scale_type(f.scale_type, fp16_to_fp32(fp32_to_fp16(v))); };
  auto put = [&](void* p, int64_t i, float v) {
    if (f.scale_type == DType::F32) return std::memcpy(static_cast<uint8_t*>(p) + 4 * i, &v, 4), void();
    const uint16_t h = f.scale_type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
    std::memcpy(static_cast<uint8_t*>(p) + 2 * i, &h, 2);
  };
  for (int64_t g = 0; g < n / f.group_size; ++g) {
    const float* xg = x + g * f.group_size;
    float lo = xg[0], hi = xg[0];
    for (int64_t i = 1; i < f.group_size; ++i) lo = std::min(lo, xg[i]), hi = std::max(hi, xg[i]);
    // Rounded so that [bias, bias + top·scale] still covers [lo, hi]: the bias down and the scale
    // up where rounding to nearest went the other way (a few steps at most).
    float bias = stored(lo), scale = stored((hi - lo) / static_cast<float>(top));
    // Steps from below an fp16 ulp, doubling: the first one that rounds elsewhere is the
    // neighbouring value.
    for (float step = 1.0f / 4096; bias > lo && step < 1; step *= 2)
      bias = stored(bias - std::abs(bias) * step - 1e-30f);
    for (float step = 1.0f / 4096; bias + scale * static_cast<float>(top) < hi && step < 1; step *= 2)
      scale = stored(scale * (1.0f + step));
    put(scales, g, scale);
    put(biases, g, bias);
    for (int64_t i = 0; i < f.group_size; ++i) {
      const float q = scale > 0 ? std::nearbyint((xg[i] - bias) / scale) : 0.0f;
      const uint64_t code = static_cast<uint64_t>(std::clamp(q, 0.0f, static_cast<float>(top)));
      const int64_t bit = (g * f.group_size + i) * f.bits, word = bit / 32, shift = bit % 32;
      codes[word] |= static_cast<uint32_t>(code << shift);
      if (shift + f.bits > 32) codes[word + 1] |= static_cast<uint32_t>(code >> (32 - shift));
    }
  }
}

std::optional<DType> mlx_affine_repack_type(const MlxAffineFormat& f) {
  if (f.group_size % 32 != 0) return std::nullopt;
  if (f.bits <= 4) return DType::Q4_1;
  if (f.bits == 5) return DType::Q5_1;
  return DType::Q8_A;  // 6 and 8 bits
}

bool mlx_affine_groups_fp16_exact(const MlxAffineFormat& f, const void* scales, const void* biases, int64_t n_groups) {
  if (f.scale_type == DType::F16) return true;
  for (int64_t g = 0; g < n_groups; ++g)
    if (!exact_fp16(scale_at(f.scale_type, scales, g)) || !exact_fp16(scale_at(f.scale_type, biases, g))) return false;
  return true;
}

bool mlx_affine_repack_row(const MlxAffineFormat& f, DType type, const uint32_t* codes, const void* scales,
                           const void* biases, int64_t n, void* dst) {
  if (mlx_affine_repack_type(f) != type) fail("MLX affine ", f.bits, "-bit: cannot repack into ", dtype_name(type));
  // A group's fp16 scale and bias, once per group: f16 scales are their own bits; bf16 and f32
  // ones go through exact_fp16.
  std::optional<uint16_t> d, m;
  int64_t g_done = -1;
  for (int64_t b = 0; b < n / 32; ++b) {
    const int64_t g = b * 32 / f.group_size, i0 = b * 32;
    if (g != g_done) {
      g_done = g;
      if (f.scale_type == DType::F16) {
        uint16_t hd, hm;
        std::memcpy(&hd, static_cast<const uint8_t*>(scales) + 2 * g, 2);
        std::memcpy(&hm, static_cast<const uint8_t*>(biases) + 2 * g, 2);
        d = hd, m = hm;
      } else {
        d = exact_fp16(scale_at(f.scale_type, scales, g)), m = exact_fp16(scale_at(f.scale_type, biases, g));
      }
    }
    if (!d || !m) return false;
    if (f.bits == 4) {  // the common case: codes 32b.. are words 4b..4b+3, eight a word, LSB first
      uint64_t lo, hi;
      std::memcpy(&lo, codes + 4 * b, 8);
      std::memcpy(&hi, codes + 4 * b + 2, 8);
      block_q4_1 blk{*d, *m, {}};
      for (int j = 0; j < 16; ++j)
        blk.qs[j] = static_cast<uint8_t>(((lo >> (4 * j)) & 0xF) | ((hi >> (4 * j)) & 0xF) << 4);
      std::memcpy(static_cast<block_q4_1*>(dst) + b, &blk, sizeof blk);
      continue;
    }
    if (f.bits == 8) {  // byte j of the block's 8 words is code j
      block_q8_a blk{*d, *m, {}};
      std::memcpy(blk.qs, codes + 8 * b, 32);
      std::memcpy(static_cast<block_q8_a*>(dst) + b, &blk, sizeof blk);
      continue;
    }
    if (type == DType::Q8_A) {
      block_q8_a blk{*d, *m, {}};
      for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<uint8_t>(code_at(codes, f.bits, i0 + j));
      std::memcpy(static_cast<block_q8_a*>(dst) + b, &blk, sizeof blk);
      continue;
    }
    uint8_t qs[16];
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = code_at(codes, f.bits, i0 + j), hi = code_at(codes, f.bits, i0 + j + 16);
      qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= ((lo >> 4) & 1u) << j | ((hi >> 4) & 1u) << (j + 16);
    }
    if (type == DType::Q4_1) {
      block_q4_1 blk{*d, *m, {}};
      std::memcpy(blk.qs, qs, sizeof qs);
      std::memcpy(static_cast<block_q4_1*>(dst) + b, &blk, sizeof blk);
    } else {
      block_q5_1 blk{*d, *m, {}, {}};
      std::memcpy(blk.qh, &qh, sizeof qh);  // little-endian, as ggml reads it
      std::memcpy(blk.qs, qs, sizeof qs);
      std::memcpy(static_cast<block_q5_1*>(dst) + b, &blk, sizeof blk);
    }
  }
  return true;
}

}  // namespace sluice
