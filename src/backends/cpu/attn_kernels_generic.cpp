// backends/cpu/attn_kernels_generic: attn_kernels.h in plain C++ with no ISA flags — the
// scalar twin the AVX2 and AVX-512 levels are tested against — plus the dispatch. Emulates
// an 8-lane vector with the generic Kernels' reduction tree and unfused multiply-adds, so its
// scores equal kernels_generic()'s dot_f32 on the decoded head.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backends/cpu/attn_kernels.h"
#include "kvcodec/kvcodec.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace generic_attn {

constexpr const char* kAttnName = "generic";
// q8_0 K scores: Q8Ops::gemm's scalar twin (attn_kernels.h).
constexpr decltype(AttnKernels::q8_0_scores) kQ8Scores = nullptr;

// attn_kernels.h's V sum on integers, as its contract states it, one element at a time: the
// twin of AVX-512's vpdpwssd kernel (attn_v_i16_impl.h); not this level's V sum (float).
template <bool kQ4>
void axpy_i16(const float* a, size_t lda, const uint8_t* v, size_t vs, int64_t P, int64_t G, int64_t D, float* y) {
  const int64_t nb = D / 32;
  const size_t bb = kQ4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
  constexpr int32_t kOff = kQ4 ? 8 : 0;
  auto code = [&](int64_t j, int64_t b, int64_t i) -> int32_t {
    const uint8_t* qs = v + static_cast<size_t>(j) * vs + static_cast<size_t>(b) * bb + 2;
    if constexpr (kQ4) return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
    return static_cast<int8_t>(qs[i]);
  };
  for (int64_t j0 = 0; j0 < P; j0 += kAxpyI16Chunk) {
    const int64_t np = std::min(kAxpyI16Chunk, P - j0);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        float w[kAxpyI16Chunk];
        float mx = 0.0f;
        for (int64_t j = 0; j < np; ++j) {
          uint16_t d;
          std::memcpy(&d, v + static_cast<size_t>(j0 + j) * vs + static_cast<size_t>(b) * bb, 2);
          w[j] = a[g * lda + j0 + j] * fp16_to_fp32(d);
          mx = std::max(mx, std::fabs(w[j]));
        }
        if (!(mx >= kAxpyI16MinScale)) continue;
        const float inv = 32767.0f / mx, sc = mx / 32767.0f;
        int32_t S[32] = {}, Z = 0;
        for (int64_t j = 0; j < np; ++j) {
          const auto q = static_cast<int32_t>(std::clamp(std::nearbyint(w[j] * inv), -32767.0f, 32767.0f));
          Z += q;
          for (int64_t i = 0; i < 32; ++i) S[i] += q * code(j0 + j, b, i);
        }
        float* yb = y + g * D + b * 32;
        for (int64_t i = 0; i < 32; ++i) yb[i] = std::fma(static_cast<float>(S[i] - kOff * Z), sc, yb[i]);
      }
  }
}
constexpr AttnAxpyI16 kAxpyI16Q8 = nullptr, kAxpyI16Q4 = nullptr;  // float V sums here (attn_kernels.h)
constexpr bool kAxpyI16NeedsVnni = false;

// All 65536 halves decoded once (256 KiB), as kernels_generic.cpp does for its f16 loads: a
// table load instead of a bit-fiddling call per element (the call made the f16 cache 1.5x
// slower than the Kernels path at this level). fp16_to_fp32 is exact, so values are equal.
const float* half_table() {
  static const float* const table = [] {
    static float t[1 << 16];
    for (uint32_t h = 0; h < (1u << 16); ++h) t[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return table;
}

struct Simd {
  static constexpr int W = 8;
  static constexpr int kScoreTT = 4, kScoreAcc = 8, kAxpyTT = 4, kAxpyU = 2;
  struct V {
    float v[W];
  };
  static V set1(float a) {
    V r;
    for (float& e : r.v) e = a;
    return r;
  }
  static V zero() { return set1(0.0f); }
  static V load(const float* p) {
    V r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static void store(float* p, V a) { std::memcpy(p, a.v, sizeof a.v); }
  // Lanes i and i ^ L exchanged (L a power of two < W): the in-vector butterfly partner.
  template <int L>
  static V swap(V a) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i ^ L];
    return r;
  }
  static V add(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] += b.v[i];
    return a;
  }
  static V sub(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] -= b.v[i];
    return a;
  }
  static V mul(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] *= b.v[i];
    return a;
  }
  // Not fused (two roundings), as kernels_generic.cpp's fma.
  static V fma(V a, V b, V c) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  static float half(uint16_t h) { return fp16_to_fp32(h); }
  static V load_f16(const uint16_t* p) {
    const float* t = half_table();
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = t[p[i]];
    return r;
  }
  static V from_i8(const int8_t* p) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = static_cast<float>(p[i]);
    return r;
  }
  static V ubits(const uint8_t* p, int shift, int mask) {
    V r;
    for (int i = 0; i < W; ++i) r.v[i] = static_cast<float>((p[i] >> shift) & mask);
    return r;
  }
  static float reduce_add(V a) {  // the tree of kernels_generic.cpp (and AVX2)
    return ((a.v[0] + a.v[4]) + (a.v[2] + a.v[6])) + ((a.v[1] + a.v[5]) + (a.v[3] + a.v[7]));
  }
  static constexpr int kReduceN = 0;  // no transposed reduction: one reduce_add per dot
  static void reduce_n(const V*, float*) {}

  struct Tab {
    float t16[16];
    const float* cb;
  };
  static Tab tab(const float* t16, const float* cb) {
    Tab t;
    std::memcpy(t.t16, t16, sizeof t.t16);
    t.cb = cb;
    return t;
  }
  template <int B>
  static V lookup(const Tab& t, const uint8_t* p) {
    V r;
    if constexpr (B == 8) {
      for (int i = 0; i < W; ++i) r.v[i] = t.cb[p[i]];
    } else {
      uint32_t w = 0;  // 8 indices of B bits: B bytes, as whole loads (see the AVX2 level)
      for (int b = 0; b < B; ++b) w |= static_cast<uint32_t>(p[b]) << (8 * b);
      for (int i = 0; i < W; ++i) r.v[i] = t.t16[(w >> (B * i)) & ((1u << B) - 1)];
    }
    return r;
  }
};

#include "backends/cpu/attn_kernels_impl.h"

}  // namespace generic_attn

const AttnKvOps* AttnKernels::get(DType t) const {
  const std::pair<DType, const AttnKvOps*> ops[] = {
      {DType::F16, &f16}, {DType::Q8_0, &q8_0}, {DType::Q4_0, &q4_0}, {kKvTq2, &tq2},
      {kKvTq3, &tq3},     {kKvTq4, &tq4},       {kKvTq8, &tq8},       {kKvTq2g, &tq2g},
      {kKvTq3g, &tq3g},   {kKvTq4g, &tq4g},     {kKvTq3s, &tq3s},
  };
  for (const auto& [type, o] : ops)
    if (type == t) return o->axpy ? o : nullptr;
  return nullptr;
}

AttnAxpyI16 AttnKernels::axpy_i16(DType t) const {
  if (axpy_i16_needs_vnni && !cpu_features().avx512vnni) return nullptr;
  return t == DType::Q8_0 ? q8_0_axpy_i16 : t == DType::Q4_0 ? q4_0_axpy_i16 : nullptr;
}

AttnAxpyI16 attn_axpy_i16_twin(DType t) {
  return t == DType::Q8_0 ? generic_attn::axpy_i16<false> : t == DType::Q4_0 ? generic_attn::axpy_i16<true> : nullptr;
}

const float* tq_split_codebook() {
  static const std::array<float, 20> cb = [] {
    std::array<float, 20> c{};
    const auto &hi = tq_group_codebook(4), &lo = tq_group_codebook(2);
    std::copy(hi.begin(), hi.end(), c.begin());
    std::copy(lo.begin(), lo.end(), c.begin() + 16);
    return c;
  }();
  return cb.data();
}

const AttnKernels& attn_kernels_generic() { return generic_attn::kAttnTable; }

const AttnKernels& attn_kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return attn_kernels_avx512();
    case CpuIsa::avx2: return attn_kernels_avx2();
    case CpuIsa::generic: break;
  }
  return attn_kernels_generic();
}

}  // namespace sluice::cpu
