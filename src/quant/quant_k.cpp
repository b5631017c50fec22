// quant/quant_k: the 256-element "K-quant" super-blocks Q2_K..Q6_K and Q8_K: reference
// quantize (ggml's quantize_row_*_ref, i.e. what llama-quantize writes without an
// importance matrix) and dequantize. The scale searches (make_qx_quants, make_q3_quants,
// make_qkx2_quants) are ggml's; their float expressions are kept in ggml's order and
// rounding goes through nearest_int, because any reordering changes which candidate scale
// wins on near-ties and so changes the bytes.
//
// Dequantization is exact by construction: every product (fp16 scale x 6/8-bit sub-scale x
// small int quant) fits in float's 24-bit significand, so the only rounding is the final
// subtraction of the min, the same single rounding ggml and numpy do.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant.h"
#include "quant/quant_impl.h"

namespace sluice::quant_detail {
namespace {

// A group whose largest |x| is below this is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Symmetric scale search for signed quants in -nmax..nmax-1 (ggml make_qx_quants with
// rmse_type 1 and no importance weights: weight w_i = x_i^2). Tries iscale = -(nmax +
// 0.1*is)/max for is in -9..9 and keeps the one maximising (sum w x l)^2 / sum w l^2,
// i.e. minimising the weighted squared error with the least-squares scale. L gets l + nmax.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  auto quant = [&](float iscale, int i) { return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = quant(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = quant(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + quant(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's sub-block search (ggml make_q3_quants, do_rmse = true): start from the max-based
// scale, then up to 5 passes of coordinate descent, moving one quant at a time when that
// raises (sum w x l)^2 / sum w l^2 (w = x^2). L gets l + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          const float nl = static_cast<float>(new_l);
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric scale + min search for unsigned quants 0..nmax (ggml make_qkx2_quants):
// x ~ scale*l - the_min. Starts from the min/max range, then for nstep+1 candidate
// iscales (rmin + rdelta*is + nmax)/(max-min) solves weighted least squares for
// (scale, min) given the rounded l, keeping the candidate with the lowest weighted error
// (absolute if use_mad, else squared). The min is clamped to <= 0 throughout, so the
// returned *the_min (= -min) is >= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.f;
  }
  auto err = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += weights[i] * err(diff);
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        cur_error += weights[i] * err(diff);
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Pack 256 2-bit values (0..3): per 128-element half, byte l holds elements l, l+32, l+64,
// l+96 at bit offsets 0, 2, 4, 6. Shared by q2_K and the low bits of q3_K.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

// The 16 signed sub-block scales of a q3_K block (stored 6-bit values minus 32).
// Scale j: low 4 bits in scales[j % 8] (low nibble for j < 8, high nibble for j >= 8),
// high 2 bits in scales[8 + j % 4] at bit offset 2 * (j / 4).
inline int q3_K_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Store 6-bit scale ls (0..63) and min lm (0..63) of sub-block j in the q4_K/q5_K 12-byte
// packing (inverse of get_scale_min_k4 in blocks.h). scales must start zeroed for j >= 4's
// OR into bytes 0..7, which the j < 4 stores provide since j runs upwards.
inline void set_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales) {
  if (j < 4) {
    scales[j] = ls;
    scales[j + 4] = lm;
  } else {
    scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((ls >> 4) << 6));
    scales[j] = static_cast<uint8_t>(scales[j] | ((lm >> 4) << 6));
  }
}

// Shared by q4_K (nmax 15) and q5_K (nmax 31): per 32-element sub-block, fit scale and min
// with make_qkx2_quants (weights av_x + |x|), quantize the 8 scales and 8 mins to 6 bits
// against their maxima, store d = max_scale/63 and dmin = max_min/63, then requantize the
// elements with the scales as actually stored. L gets 0..nmax.
void quantize_k_scale_min(const float* x, int nmax, float rmin, float rdelta, int nstep, uint16_t* d_out,
                          uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float mins[QK_K / 32], scales[QK_K / 32], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;  // scales are >= 0 because the min is deducted
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, K_SCALE_SIZE);
  for (int j = 0; j < QK_K / 32; ++j) {
    // ggml stores nearest_int into a uint8_t before the MIN: keep that wrap-around.
    const auto ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const auto lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    set_scale_min_k4(j, ls, lm, scales_out);
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  const float d_all = fp16_to_fp32(*d_out), dmin_all = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = d_all * sc;
    if (d == 0.0f) continue;  // keep the search's L (their scale is zero anyway)
    const float dm = dmin_all * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

// ---- Q2_K ------------------------------------------------------------------------------

void dequantize_q2_K(const block_q2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        // Two sub-blocks of 16 per shift: bytes 0..15 then 16..31 of this half's 32.
        for (int k = 0; k < 2; ++k, ++is) {
          const uint8_t sc = x[i].scales[is];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * k + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void quantize_q2_K(const float* x, block_q2_K* y, int64_t n) {
  constexpr float q4scale = 15.f;  // sub-block scales and mins are 4-bit
  uint8_t L[QK_K], Laux[16];
  float weights[16], mins[QK_K / 16], scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / q4scale);
    } else {
      std::memset(y[i].scales, 0, sizeof y[i].scales);
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) {
        const unsigned l = static_cast<unsigned>(nearest_int(iscale * mins[j]));
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (l << 4));
      }
      y[i].dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    // Requantize against the scales as stored (4-bit, fp16 super-scale).
    const float d_all = fp16_to_fp32(y[i].d), dmin_all = fp16_to_fp32(y[i].dmin);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = d_all * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

// ---- Q3_K ------------------------------------------------------------------------------

void dequantize_q3_K(const block_q3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d_all = fp16_to_fp32(x[i].d);
    float dl[QK_K / 16];
    for (int j = 0; j < QK_K / 16; ++j) dl[j] = d_all * static_cast<float>(q3_K_scale(x[i].scales, j));
    for (int e = 0; e < QK_K; ++e) {
      // Element e: half h = e/128, 2-bit plane p = (e%128)/32 (shift 2p), byte l = e%32 of
      // that half's qs; sub-block e/16; high bit = bit e/32 of hmask[e%32]. A clear high
      // bit means q - 4 (the stored bit is "q >= 4").
      const int h = e / 128, p = (e % 128) / 32, l = e % 32;
      const int low = (x[i].qs[32 * h + l] >> (2 * p)) & 3;
      const int high_set = (x[i].hmask[l] >> (e / 32)) & 1;
      y[e] = dl[e / 16] * static_cast<float>(low - (high_set ? 0 : 4));
    }
  }
}

void quantize_q3_K(const float* x, block_q3_K* y, int64_t n) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, amax = 0;  // signed scale of largest magnitude
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        // ggml: int8_t l = nearest_int(..); l = MAX(-32, MIN(31, l)) + 32;
        int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8)
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        else
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    const float d_all = fp16_to_fp32(y[i].d);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = d_all * static_cast<float>(q3_K_scale(y[i].scales, j));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // High bit of element j -> bit j/32 of hmask[j%32]; keep the low 2 bits in L.
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    uint8_t Lu[QK_K];
    for (int j = 0; j < QK_K; ++j) {
      int l = L[j];
      if (l > 3) {
        y[i].hmask[j % 32] = static_cast<uint8_t>(y[i].hmask[j % 32] | (1u << (j / 32)));
        l -= 4;
      }
      Lu[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(Lu, y[i].qs);
  }
}

// ---- Q4_K ------------------------------------------------------------------------------

void dequantize_q4_K(const block_q4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < QK_K / 32; j += 2, q += 32) {
      // Sub-blocks j (low nibbles) and j+1 (high nibbles) share these 32 bytes.
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void quantize_q4_K(const float* x, block_q4_K* y, int64_t n) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    quantize_k_scale_min(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// ---- Q5_K ------------------------------------------------------------------------------

void dequantize_q5_K(const block_q5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int j = 0; j < QK_K / 32; j += 2, ql += 32) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << j), u2 = static_cast<uint8_t>(2u << j);  // qh bits j, j+1
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void quantize_q5_K(const float* x, block_q5_K* y, int64_t n) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    quantize_k_scale_min(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    uint8_t* ql = y[i].qs;
    for (int c = 0; c < QK_K / 64; ++c, ql += 32) {
      const uint8_t m1 = static_cast<uint8_t>(1u << (2 * c)), m2 = static_cast<uint8_t>(2u << (2 * c));
      for (int j = 0; j < 32; ++j) {
        int l1 = L[64 * c + j], l2 = L[64 * c + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

// ---- Q6_K ------------------------------------------------------------------------------

void dequantize_q6_K(const block_q6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;  // sub-blocks of 16: elements l, l+32, l+64, l+96 use is, is+2, is+4, is+6
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void quantize_q6_K(const float* x, block_q6_K* y, int64_t n) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof y[i]);  // all-zero block: every byte zero, d = +0
      continue;
    }
    // The largest-magnitude scale maps to -128 (8-bit signed sub-scales).
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = fp16_to_fp32(y[i].d);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = d_all * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

// ---- Q8_K ------------------------------------------------------------------------------

void dequantize_q8_K(const block_q8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K)
    for (int j = 0; j < QK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
}

void quantize_q8_K(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      // ggml leaves bsums unwritten here; zero them so the output is deterministic
      // (they are all zero for an all-zero block anyway).
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    // -127 (not -128) so that the quants are symmetric, as ggml does for its SIMD dots.
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace sluice::quant_detail
