// quant/quant_iq4: the non-linear 4-bit types IQ4_NL (32-blocks, one fp16 scale) and IQ4_XS
// (256-blocks, 6-bit sub-block scales), whose 16 levels are kIq4nlValues (quant/blocks.h)
// rather than evenly spaced. Neither needs an importance matrix, so a file of either can come
// from any llama-quantize run. The encoder follows ggml's quantize_iq4_nl / quantize_iq4_xs
// without an importance matrix (what llama-quantize writes; its `_ref` variant for IQ4_NL
// skips the scale search and is not what files hold), operation for operation, so the bytes
// match llama.cpp's: per 32-block, the scale that maps the largest |x| to the end level,
// refined by least squares over x²-weighted errors and by 15 trial scales around it.
#include <cmath>

#include "quant/quant.h"
#include "quant/quant_impl.h"

namespace sluice::quant_detail {
namespace {

// The level nearest v (ties to the upper one), by bisection as ggml's best_index_int8.
int nearest_level(float v) {
  const int8_t* val = kIq4nlValues;
  if (v <= val[0]) return 0;
  if (v >= val[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < val[mid])
      hi = mid;
    else
      lo = mid;
  }
  return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

// Σ w·q·x and Σ w·q² of the levels chosen for x·inv_scale (w = x², the weighting without an
// importance matrix); writes the chosen levels to L when it is not null.
void level_sums(const float* x, float inv_scale, uint8_t* L, float& sumqx, float& sumq2) {
  sumqx = sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const int l = nearest_level(inv_scale * x[j]);
    if (L) L[j] = static_cast<uint8_t>(l);
    const float q = kIq4nlValues[l];
    const float w = x[j] * x[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
}

// The best scale of one 32-block (0 for an all-zero block): the trial scales are what map the
// block's largest-magnitude value to kIq4nlValues[0] + k, k in [-7, 7].
float block_scale(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < 1e-15f) return 0;
  const float v0 = kIq4nlValues[0];
  float sumqx, sumq2;
  level_sums(x, 1 / (-max / v0), nullptr, sumqx, sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int k = -7; k <= 7; ++k) {
    level_sums(x, static_cast<float>(k + kIq4nlValues[0]) / max, nullptr, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// The levels of x for the (unrounded) scale d, as nibbles: element j < 16 low, j + 16 high.
void pack_levels(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1 / d : 0.f;
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_level(id * x[j]));
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void dequantize_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIq4nlValues[x[i].qs[j] & 0xF];
      y[j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

void dequantize_iq4_xs(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int s = 0; s < QK_K / 32; ++s, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[i], s) - 32);
      const uint8_t* qs = x[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4nlValues[qs[j] & 0xF];
        y[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
    }
  }
}

void quantize_iq4_nl(const float* x, block_iq4_nl* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const float d = block_scale(x);
    y[i].d = fp32_to_fp16(d);
    pack_levels(x, d, y[i].qs);
  }
}

void quantize_iq4_xs(const float* x, block_iq4_xs* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float scales[8], max_scale = 0, amax_scale = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = block_scale(x + 32 * s);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    // The super-block scale maps the sub-block scale of largest magnitude to -32 (the 6-bit
    // range's end), each sub-block's to the nearest step, and its levels are chosen again for
    // that rounded scale (d itself unrounded, as ggml).
    const float d = -max_scale / 32;
    y[i].d = fp32_to_fp16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    y[i].scales_h = 0;
    for (int s = 0; s < 8; ++s) {
      int l = nearest_int(id * scales[s]);
      l = l < -32 ? -32 : l > 31 ? 31 : l;
      pack_levels(x + 32 * s, d * static_cast<float>(l), y[i].qs + 16 * s);
      l += 32;
      if (s % 2 == 0)
        y[i].scales_l[s / 2] = static_cast<uint8_t>(l & 0xF);
      else
        y[i].scales_l[s / 2] |= static_cast<uint8_t>((l & 0xF) << 4);
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((l >> 4) << 2 * s));
    }
  }
}

}  // namespace sluice::quant_detail
