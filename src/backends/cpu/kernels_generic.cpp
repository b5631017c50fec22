// backends/cpu/kernels_generic: the kernel table for CPUs without AVX2, in plain C++ with no
// ISA flags. Emulates an 8-lane vector so its accumulation order matches the contract of
// kernels.h (and the compiler may still auto-vectorize the lane loops with SSE2).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/quant.h"

// No quantized fast paths here: this level exists for correctness on old CPUs, where
// dequantize_row itself is the right code.
#define SLUICE_CPU_QUANT_FAST_PATHS 0

namespace sluice::cpu {
namespace generic_isa {

// All 65536 half values decoded once (256 KiB): a table load instead of a bit-fiddling call
// per element, which made F16 weights ~20x slower than F32 at this level.
const float* half_table() {
  static const float* const table = [] {
    static float t[1 << 16];
    for (uint32_t h = 0; h < (1u << 16); ++h) t[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return table;
}

constexpr CpuIsa kIsa = CpuIsa::generic;

struct Simd {
  static constexpr int W = 8;
  static constexpr int kTileTok = 1;
  struct V {
    float v[W];
  };
  static V zero() { return set1(0.0f); }
  static V set1(float a) {
    V r;
    for (float& e : r.v) e = a;
    return r;
  }
  static V load(const float* p) {
    V r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static void store(float* p, V a) { std::memcpy(p, a.v, sizeof a.v); }
  static V load_f16(const uint16_t* p) {
    const float* t = half_table();
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = t[p[i]];
    return r;
  }
  static void store_f16(uint16_t* p, V a) {
    for (int i = 0; i < W; ++i) p[i] = fp32_to_fp16(a.v[i]);
  }
  static V load_bf16(const uint16_t* p) {
    V r;
    for (int i = 0; i < W; ++i) {
      const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
      std::memcpy(&r.v[i], &bits, sizeof bits);
    }
    return r;
  }
  template <class F>
  static V map2(V a, V b, F f) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = f(a.v[i], b.v[i]);
    return r;
  }
  static V add(V a, V b) {
    return map2(a, b, [](float x, float y) { return x + y; });
  }
  static V sub(V a, V b) {
    return map2(a, b, [](float x, float y) { return x - y; });
  }
  static V mul(V a, V b) {
    return map2(a, b, [](float x, float y) { return x * y; });
  }
  static V div(V a, V b) {
    return map2(a, b, [](float x, float y) { return x / y; });
  }
  static V max(V a, V b) {
    return map2(a, b, [](float x, float y) { return x > y ? x : y; });
  }
  // Not fused without FMA hardware (two roundings); consistent within this level.
  static V fma(V a, V b, V c) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  static float reduce_add(V a) {  // the same tree as the AVX2 reduction
    return ((a.v[0] + a.v[4]) + (a.v[2] + a.v[6])) + ((a.v[1] + a.v[5]) + (a.v[3] + a.v[7]));
  }
  static float reduce_max(V a) {
    float m = a.v[0];
    for (int i = 1; i < W; ++i) m = a.v[i] > m ? a.v[i] : m;
    return m;
  }
  static V exp(V a) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = std::exp(a.v[i]);
    return r;
  }
};

#include "backends/cpu/kernels_impl.h"

}  // namespace generic_isa

namespace generic_q8 {
inline float q8_half(uint16_t h) { return fp16_to_fp32(h); }
#define SLUICE_Q8_SIMD 0
#define SLUICE_Q8_VNNI 0
#define SLUICE_Q8_AVX512 0
#include "backends/cpu/kernels_q8_impl.h"
#undef SLUICE_Q8_SIMD
#undef SLUICE_Q8_VNNI
#undef SLUICE_Q8_AVX512
constexpr Q8Kernels kTable = q8_table("generic");
}  // namespace generic_q8

const Kernels& kernels_generic() { return generic_isa::kTable; }
const Q8Kernels& q8_kernels_generic() { return generic_q8::kTable; }

const Q8Kernels& q8_kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return q8_kernels_avx512();
    case CpuIsa::avx2: return q8_kernels_avx2();
    case CpuIsa::generic: break;
  }
  return q8_kernels_generic();
}

const Kernels& kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return kernels_avx512();
    case CpuIsa::avx2: return kernels_avx2();
    case CpuIsa::generic: break;
  }
  return kernels_generic();
}

}  // namespace sluice::cpu
