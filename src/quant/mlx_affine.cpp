// quant/mlx_affine: the reference dequantizer of MLX's affine format.
#include "quant/mlx_affine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// A bf16 value's fp16 bits when it is exactly an fp16 value, by its fields alone (what
// exact_fp16(bf16_to_fp32(h)) gives; 2.5x faster, and a 4-bit folder's load checks two a group).
inline std::optional<uint16_t> bf16_exact_fp16(uint16_t h) {
  const uint16_t sign = h & 0x8000;
  const int e = (h >> 7) & 0xFF, m = h & 0x7F;
  // The common case first: a normal fp16 value (2^-14..2^15), whose 7 mantissa bits fit in 10.
  if (static_cast<unsigned>(e - 113) <= 29u) return static_cast<uint16_t>(sign | (e - 112) << 10 | m << 3);
  if (e == 0) return m == 0 ? std::optional<uint16_t>(sign) : std::nullopt;  // ±0; bf16 subnormals are far below fp16's
  if (e == 255) return m == 0 ? std::optional<uint16_t>(sign | 0x7C00) : std::nullopt;  // ±inf; NaN is no value
  const int u = e - 127;                                                                // 1.m x 2^u
  if (u > 15) return std::nullopt;
  // fp16 subnormal: (128 + m) x 2^(u - 7) = M x 2^-24, exact when no set bit falls below 2^-24.
  const int shift = u + 17, sig = 128 + m;
  if (shift >= 0) return static_cast<uint16_t>(sign | sig << shift);
  if (shift < -7 || (sig & ((1 << -shift) - 1)) != 0) return std::nullopt;
  return static_cast<uint16_t>(sign | sig >> -shift);
}

// Group g's scale (or bias) of type t as fp16 bits, when it is exactly an fp16 value.
std::optional<uint16_t> group_fp16(DType t, const void* p, int64_t g) {
  uint16_t h;
  switch (t) {
    case DType::F16: std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * g, 2); return h;
    case DType::BF16: std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * g, 2); return bf16_exact_fp16(h);
    default: return exact_fp16(scale_at(t, p, g));
  }
}

}  // namespace

std::optional<uint16_t> mlx_bf16_exact_fp16(uint16_t h) { return bf16_exact_fp16(h); }

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
  if (f.scale_type == DType::BF16) {
    // A real model's scales and biases are normal fp16 values or ±0: checked by the exponent
    // alone, a loop GCC vectorizes (a 30B-class folder has ~10^8 groups); anything else (a
    // subnormal, out of range) takes the exact test below.
    auto normal_or_zero = [n_groups](const void* p) {
      const auto* b = static_cast<const uint8_t*>(p);
      unsigned bad = 0;
      for (int64_t g = 0; g < n_groups; ++g) {
        const unsigned h = b[2 * g] | unsigned{b[2 * g + 1]} << 8, e = (h >> 7) & 0xFF;
        bad |= (e - 113u > 29u) & ((h & 0x7FFF) != 0);  // biased exponents 113..142: 2^-14..2^15
      }
      return bad == 0;
    };
    if (normal_or_zero(scales) && normal_or_zero(biases)) return true;
  }
  for (int64_t g = 0; g < n_groups; ++g)
    if (!group_fp16(f.scale_type, scales, g) || !group_fp16(f.scale_type, biases, g)) return false;
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
      d = group_fp16(f.scale_type, scales, g), m = group_fp16(f.scale_type, biases, g);
    }
    if (!d || !m) return false;
    if (f.bits == 4) {  // the common case: codes 32b.. are words 4b..4b+3, eight a word, LSB first
      block_q4_1 blk{*d, *m, {}};
#if defined(__SSE2__)
      // Byte k of the 16 holds codes 2k (low nibble) and 2k + 1: split the nibbles, interleave
      // them back into one code a byte (codes 0-15, 16-31), then code j | code j+16 << 4. Five
      // times the scalar loop's speed: this is most of a 4-bit folder's load time.
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 4 * b)), m4 = _mm_set1_epi8(0x0F);
      const __m128i even = _mm_and_si128(v, m4), odd = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
      const __m128i first = _mm_unpacklo_epi8(even, odd), second = _mm_unpackhi_epi8(even, odd);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs), _mm_or_si128(first, _mm_slli_epi16(second, 4)));
#else
      uint64_t lo, hi;
      std::memcpy(&lo, codes + 4 * b, 8);
      std::memcpy(&hi, codes + 4 * b + 2, 8);
      for (int j = 0; j < 16; ++j)
        blk.qs[j] = static_cast<uint8_t>(((lo >> (4 * j)) & 0xF) | ((hi >> (4 * j)) & 0xF) << 4);
#endif
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
