// backends/cuda/common: device helpers shared by the .cu files — fp16/bf16 loads, warp sums,
// and the block decoders of every weight type, mirroring quant/'s reference dequantizers
// (quant.cpp, quant_k.cpp, quant_iq4.cpp) operation for operation so a decoded value is bit-identical to
// dequantize_row's.
//
// Bit-exactness: nvcc contracts a*b - c into an FMA by default (one rounding instead of two),
// which would make decoded weights differ from quant/ in the last bit. The decoders therefore
// spell every product and sum with __fmul_rn/__fadd_rn/__fsub_rn, which are never contracted.
// Accumulations (dot products) may use FMA freely: only their tolerance is tested.
//
// Blocks are read byte by byte (ld_u16 etc.): GGUF block structs are packed (18, 22, 34, 110,
// 210 bytes), so wider loads would need alignment the format does not promise.
//
// Host emulation: with SLUICE_CUDA_HOST_EMULATION defined (and __fmul_rn/__fadd_rn/__fsub_rn,
// __uint_as_float and sluice::cuda::h2f provided by the includer), the decoders compile as
// plain C++, so tests/kernels/test_cuda_decoders.cpp checks this very source against quant/
// on machines without a GPU.
//
// Legend: QK = elements per block, BB = bytes per block, j8 = index of a group of 8
// consecutive elements inside a block (0..QK/8-1).
#pragma once
#ifndef SLUICE_CUDA_HOST_EMULATION
#include <cuda_fp16.h>
#define SLUICE_DEV __device__ __forceinline__
#define SLUICE_UNROLL _Pragma("unroll")
#else
#define SLUICE_DEV inline
#define SLUICE_UNROLL
#endif

#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace sluice::cuda {

SLUICE_DEV uint16_t ld_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint32_t>(p[1]) << 8));
}
SLUICE_DEV uint32_t ld_u32(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
#ifndef SLUICE_CUDA_HOST_EMULATION
// IEEE half -> float is exact (subnormals included), as quant/'s fp16_to_fp32.
__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
#endif
SLUICE_DEV float bf2f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
SLUICE_DEV float ld_f16(const uint8_t* p) { return h2f(ld_u16(p)); }

#ifndef SLUICE_CUDA_HOST_EMULATION
// quant_impl.h trunc_to_int: C's float -> int truncation, 0 for NaN / out of range.
__device__ __forceinline__ int trunc_to_int(float f) {
  return (f > -2147483520.f && f < 2147483520.f) ? static_cast<int>(f) : 0;
}
__device__ __forceinline__ int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
// One 32-element block as quant/'s quantize_q8_0 encodes it (bit-exact: IEEE division, no
// contracted FMAs, roundf ties away from zero): the quants into qs, the fp16 scale returned.
__device__ __forceinline__ uint16_t q8_0_encode(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  for (int j = 0; j < 32; ++j)
    qs[j] = static_cast<int8_t>(clampi(trunc_to_int(roundf(__fmul_rn(x[j], id))), -128, 127));
  return f2h(d);
}

__device__ __forceinline__ float warp_sum(float v) {
  SLUICE_UNROLL
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  SLUICE_UNROLL
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#endif

// Block geometry of the quantized weight types (dtype.h's traits, as constants).
template <DType T>
struct QBlock;
template <>
struct QBlock<DType::Q4_0> {
  static constexpr int QK = 32, BB = 18;
};
template <>
struct QBlock<DType::Q4_1> {
  static constexpr int QK = 32, BB = 20;
};
template <>
struct QBlock<DType::Q5_0> {
  static constexpr int QK = 32, BB = 22;
};
template <>
struct QBlock<DType::Q5_1> {
  static constexpr int QK = 32, BB = 24;
};
template <>
struct QBlock<DType::Q8_0> {
  static constexpr int QK = 32, BB = 34;
};
template <>
struct QBlock<DType::Q2_K> {
  static constexpr int QK = 256, BB = 84;
};
template <>
struct QBlock<DType::Q3_K> {
  static constexpr int QK = 256, BB = 110;
};
template <>
struct QBlock<DType::Q4_K> {
  static constexpr int QK = 256, BB = 144;
};
template <>
struct QBlock<DType::Q5_K> {
  static constexpr int QK = 256, BB = 176;
};
template <>
struct QBlock<DType::Q6_K> {
  static constexpr int QK = 256, BB = 210;
};
template <>
struct QBlock<DType::Q8_K> {
  static constexpr int QK = 256, BB = 292;
};
template <>
struct QBlock<DType::IQ4_NL> {
  static constexpr int QK = 32, BB = 18;
};
template <>
struct QBlock<DType::IQ4_XS> {
  static constexpr int QK = 256, BB = 136;
};

// kIq4nlValues (quant/blocks.h) as the bytes of two words: device code cannot index a host
// array, and a __constant__ copy would be one more symbol per translation unit.
constexpr uint64_t kIq4LevelsLo = 0xF6EADDCFBFAD9881ull, kIq4LevelsHi = 0x7159453526190D01ull;
constexpr bool iq4_level_words_match() {
  for (int c = 0; c < 16; ++c)
    if (static_cast<int8_t>((c < 8 ? kIq4LevelsLo : kIq4LevelsHi) >> (8 * (c & 7))) != kIq4nlValues[c]) return false;
  return true;
}
static_assert(iq4_level_words_match());
SLUICE_DEV float iq4_level(int c) {
  return static_cast<float>(static_cast<int8_t>((c < 8 ? kIq4LevelsLo : kIq4LevelsHi) >> (8 * (c & 7))));
}

// The 4-bit element j (0..31) of a q4_0/q4_1/q5 block's qs: low nibbles hold 0..15, high 16..31.
SLUICE_DEV int nib32(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

// quant/blocks.h get_scale_min_k4, on the device.
SLUICE_DEV void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Elements 8*j8 .. 8*j8+7 of block b of type T, decoded exactly as quant/ does.
template <DType T>
SLUICE_DEV void dequant8(const uint8_t* b, int j8, float* y) {
  const int e0 = 8 * j8;
  if constexpr (T == DType::Q4_0) {  // d | qs[16]; x = (q - 8) * d
    const float d = ld_f16(b);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(static_cast<float>(nib32(b + 2, e0 + k) - 8), d);
  } else if constexpr (T == DType::Q4_1) {  // d | m | qs[16]; x = q * d + m
    const float d = ld_f16(b), m = ld_f16(b + 2);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fadd_rn(__fmul_rn(static_cast<float>(nib32(b + 4, e0 + k)), d), m);
  } else if constexpr (T == DType::Q5_0) {  // d | qh[4] | qs[16]; x = (q - 16) * d
    const float d = ld_f16(b);
    const uint32_t qh = ld_u32(b + 2);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int e = e0 + k;
      const int q = (nib32(b + 6, e) | static_cast<int>(((qh >> e) & 1u) << 4)) - 16;
      y[k] = __fmul_rn(static_cast<float>(q), d);
    }
  } else if constexpr (T == DType::Q5_1) {  // d | m | qh[4] | qs[16]; x = q * d + m
    const float d = ld_f16(b), m = ld_f16(b + 2);
    const uint32_t qh = ld_u32(b + 4);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int e = e0 + k;
      const int q = nib32(b + 8, e) | static_cast<int>(((qh >> e) & 1u) << 4);
      y[k] = __fadd_rn(__fmul_rn(static_cast<float>(q), d), m);
    }
  } else if constexpr (T == DType::Q8_0) {  // d | qs[32] int8; x = q * d
    const float d = ld_f16(b);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + e0 + k])), d);
  } else if constexpr (T == DType::Q2_K) {  // scales[16] | qs[64] | d | dmin
    const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    const int sc = b[e0 / 16];
    const float dl = __fmul_rn(d, static_cast<float>(sc & 0xF)), ml = __fmul_rn(dmin, static_cast<float>(sc >> 4));
    const int half = e0 / 128, shift = ((e0 % 128) / 32) * 2;
    const uint8_t* q = b + 16 + 32 * half;
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int l = (e0 + k) % 32;
      y[k] = __fsub_rn(__fmul_rn(dl, static_cast<float>((q[l] >> shift) & 3)), ml);
    }
  } else if constexpr (T == DType::Q3_K) {  // hmask[32] | qs[64] | scales[12] | d
    const float d_all = ld_f16(b + 108);
    const uint8_t* s = b + 96;
    const int j = e0 / 16;  // sub-block of 16
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    const float dl = __fmul_rn(d_all, static_cast<float>((lo | (hi << 4)) - 32));
    const int h = e0 / 128, p = (e0 % 128) / 32;
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int e = e0 + k, l = e % 32;
      const int low = (b[32 + 32 * h + l] >> (2 * p)) & 3;
      const int high_set = (b[l] >> (e / 32)) & 1;
      y[k] = __fmul_rn(dl, static_cast<float>(low - (high_set ? 0 : 4)));
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // Q4_K: d | dmin | scales[12] | qs[128];  Q5_K: d | dmin | scales[12] | qh[32] | qs[128].
    // x = d*sc * q - dmin*m; chunk c = e/64 holds sub-blocks 2c (low nibbles) and 2c+1 (high).
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    const int c = e0 / 64, r0 = e0 % 64, hi_nib = r0 >= 32;
    int sc, m;
    scale_min_k4(2 * c + hi_nib, b + 4, &sc, &m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const uint8_t* qs = b + (T == DType::Q4_K ? 16 : 48) + 32 * c;
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int l = (r0 + k) % 32;
      int q = hi_nib ? (qs[l] >> 4) : (qs[l] & 0xF);
      if constexpr (T == DType::Q5_K) q += (b[16 + l] & ((hi_nib ? 2u : 1u) << (2 * c))) ? 16 : 0;
      y[k] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
  } else if constexpr (T == DType::Q6_K) {  // ql[128] | qh[64] | scales[16] int8 | d
    const float d = ld_f16(b + 208);
    const int half = e0 / 128, r0 = e0 % 128, quad = r0 / 32;
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half;
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int l = (r0 + k) % 32, is = l / 16;
      const int low = quad & 1 ? ql[l + 32] : ql[l];
      const int q = ((quad >= 2 ? (low >> 4) : (low & 0xF)) | (((qh[l] >> (2 * quad)) & 3) << 4)) - 32;
      y[k] = __fmul_rn(__fmul_rn(d, static_cast<float>(scales[is + 2 * quad])), static_cast<float>(q));
    }
  } else if constexpr (T == DType::IQ4_NL) {  // d | qs[16]; x = d * level[q]
    const float d = ld_f16(b);
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(d, iq4_level(nib32(b + 2, e0 + k)));
  } else if constexpr (T == DType::IQ4_XS) {  // d | scales_h | scales_l[4] | qs[128]; x = d*(ls-32) * level[q]
    const int s = e0 / 32;
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((ld_u16(b + 2) >> (2 * s)) & 3) << 4);
    const float dl = __fmul_rn(ld_f16(b), static_cast<float>(ls - 32));
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(dl, iq4_level(nib32(b + 8 + 16 * s, (e0 + k) % 32)));
  } else if constexpr (T == DType::Q8_K) {  // d (float) | qs[256] int8 | bsums[16]
    const float d = __uint_as_float(ld_u32(b));
    SLUICE_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(b[4 + e0 + k])));
  }
}

// Element i of a plain (F32/F16/BF16) row.
template <DType T>
SLUICE_DEV float load_plain(const uint8_t* row, int64_t i) {
  if constexpr (T == DType::F32)
    return reinterpret_cast<const float*>(row)[i];
  else if constexpr (T == DType::F16)
    return h2f(reinterpret_cast<const uint16_t*>(row)[i]);
  else
    return bf2f(reinterpret_cast<const uint16_t*>(row)[i]);
}

// Element i of a KV-cache row of a plain or 32-block type (attention reads single elements,
// because a head's slice need not start on a block boundary).
SLUICE_DEV float load_kv(DType t, const uint8_t* row, int64_t i) {
  switch (t) {
    case DType::F32: return __uint_as_float(ld_u32(row + 4 * i));
    case DType::F16: return ld_f16(row + 2 * i);
    case DType::BF16: return bf2f(ld_u16(row + 2 * i));
    case DType::Q8_0: {
      const uint8_t* b = row + (i / 32) * 34;
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i % 32])), ld_f16(b));
    }
    case DType::Q4_0: {
      const uint8_t* b = row + (i / 32) * 18;
      return __fmul_rn(static_cast<float>(nib32(b + 2, static_cast<int>(i % 32)) - 8), ld_f16(b));
    }
    default: return 0.0f;  // rejected on the host before launch
  }
}

}  // namespace sluice::cuda
