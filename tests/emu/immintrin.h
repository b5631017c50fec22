// tests/emu/immintrin.h: the AVX-512 intrinsics the cpu kernels use, for a machine without
// AVX-512 (sluice_tests_avx512emu, CMakeLists.txt): SIMDe's portable implementations (Debian's
// libsimde-dev, 0.7.4) plus, written out lane by lane here, the ones it lacks or gets wrong for
// these kernels: roundscale's scale bits, fused multiply-adds rounded once (the kernels' float
// order is their contract: tests compare them bitwise with their scalar twins), the reductions
// in GCC's order. Correctness only: this runs the kernel tests, never a benchmark.
#pragma once
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
#include <cmath>
#include <cstdint>
#include <cstring>

typedef simde__mmask16 __mmask16;
typedef int _MM_PERM_ENUM;
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#ifndef _MM_FROUND_TO_NEAREST_INT
#define _MM_FROUND_TO_NEAREST_INT SIMDE_MM_FROUND_TO_NEAREST_INT
#endif

namespace emu {
using I = simde__m512i_private;
using F = simde__m512_private;
inline I pi(simde__m512i a) { return simde__m512i_to_private(a); }
inline simde__m512i vi(const I& r) { return simde__m512i_from_private(r); }
inline F pf(simde__m512 a) { return simde__m512_to_private(a); }
inline simde__m512 vf(const F& r) { return simde__m512_from_private(r); }
inline float h2f(uint16_t h) {
  const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0)
    v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(m | 0x400), static_cast<int>(e) - 25);
  return s ? -v : v;
}
inline uint16_t f2h(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
  if (ax >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to inf
  if (ax < 0x38800000) {                                              // subnormal half (or zero)
    const float a = std::fabs(f) * 16777216.0f;                       // units of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  const uint32_t e = ((ax >> 23) - 112) << 10, m = ax & 0x7fffff;
  uint32_t h = e | (m >> 13);
  const uint32_t rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}
}  // namespace emu

inline float _cvtsh_ss(unsigned short h) { return emu::h2f(h); }
inline unsigned short _cvtss_sh(float f, int) { return emu::f2h(f); }

inline simde__m256i _mm512_cvtepi32_epi16(simde__m512i a) {
  const auto x = emu::pi(a);
  simde__m256i_private r;
  for (int i = 0; i < 16; ++i) r.i16[i] = static_cast<int16_t>(x.i32[i]);
  return simde__m256i_from_private(r);
}
inline simde__m128i _mm512_cvtepi32_epi8(simde__m512i a) {
  const auto x = emu::pi(a);
  simde__m128i_private r;
  for (int i = 0; i < 16; ++i) r.i8[i] = static_cast<int8_t>(x.i32[i]);
  return simde__m128i_from_private(r);
}
inline simde__m512 _mm512_cvtepi32_ps(simde__m512i a) {
  const auto x = emu::pi(a);
  emu::F r;
  for (int i = 0; i < 16; ++i) r.f32[i] = static_cast<float>(x.i32[i]);
  return emu::vf(r);
}
inline simde__m512i _mm512_cvtps_epi32(simde__m512 a) {
  const auto x = emu::pf(a);
  emu::I r;
  for (int i = 0; i < 16; ++i) r.i32[i] = static_cast<int32_t>(std::nearbyint(x.f32[i]));
  return emu::vi(r);
}
inline simde__m512i _mm512_cvtepi8_epi32(simde__m128i a) {
  const auto x = simde__m128i_to_private(a);
  emu::I r;
  for (int i = 0; i < 16; ++i) r.i32[i] = x.i8[i];
  return emu::vi(r);
}
inline simde__m512i _mm512_cvtepu8_epi32(simde__m128i a) {
  const auto x = simde__m128i_to_private(a);
  emu::I r;
  for (int i = 0; i < 16; ++i) r.i32[i] = x.u8[i];
  return emu::vi(r);
}
inline simde__m512i _mm512_cvtepu16_epi32(simde__m256i a) {
  const auto x = simde__m256i_to_private(a);
  emu::I r;
  for (int i = 0; i < 16; ++i) r.i32[i] = x.u16[i];
  return emu::vi(r);
}
inline simde__m512 _mm512_cvtph_ps(simde__m256i a) {
  const auto x = simde__m256i_to_private(a);
  emu::F r;
  for (int i = 0; i < 16; ++i) r.f32[i] = emu::h2f(x.u16[i]);
  return emu::vf(r);
}
inline simde__m256i _mm512_cvtps_ph(simde__m512 a, int) {
  const auto x = emu::pf(a);
  simde__m256i_private r;
  for (int i = 0; i < 16; ++i) r.u16[i] = emu::f2h(x.f32[i]);
  return simde__m256i_from_private(r);
}
#undef _mm512_madd_epi16
inline simde__m512i _mm512_madd_epi16(simde__m512i a, simde__m512i b) {
  const auto x = emu::pi(a), y = emu::pi(b);
  emu::I r;
  for (int i = 0; i < 16; ++i)
    r.i32[i] = static_cast<int32_t>(static_cast<uint32_t>(x.i16[2 * i] * y.i16[2 * i]) +
                                    static_cast<uint32_t>(x.i16[2 * i + 1] * y.i16[2 * i + 1]));
  return emu::vi(r);
}
inline simde__m512i _mm512_mask_i32gather_epi32(simde__m512i src, __mmask16 k, simde__m512i idx, const void* base,
                                                int scale) {
  auto r = emu::pi(src);
  const auto ix = emu::pi(idx);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1)
      std::memcpy(&r.i32[i], static_cast<const char*>(base) + static_cast<int64_t>(ix.i32[i]) * scale, 4);
  return emu::vi(r);
}
inline simde__m512 _mm512_mul_round_ps(simde__m512 a, simde__m512 b, int) { return simde_mm512_mul_ps(a, b); }
inline int _mm512_reduce_add_epi32(simde__m512i a) {
  const auto x = emu::pi(a);
  uint32_t s = 0;
  for (int i = 0; i < 16; ++i) s += static_cast<uint32_t>(x.i32[i]);
  return static_cast<int>(s);
}
// GCC's order: halves of 256, then of 128, then lanes (0+2, 1+3), then the pair.
inline float _mm512_reduce_add_ps(simde__m512 a) {
  const auto x = emu::pf(a);
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = x.f32[i + 8] + x.f32[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  const float t80 = t6[0] + t6[2], t81 = t6[1] + t6[3];
  return t80 + t81;
}
inline float _mm512_reduce_max_ps(simde__m512 a) {
  const auto x = emu::pf(a);
  float m = x.f32[0];
  for (int i = 1; i < 16; ++i) m = x.f32[i] > m ? x.f32[i] : m;
  return m;
}
inline simde__m512i _mm512_shuffle_epi32(simde__m512i a, int imm) {
  const auto x = emu::pi(a);
  emu::I r;
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 4; ++i) r.i32[4 * l + i] = x.i32[4 * l + ((imm >> (2 * i)) & 3)];
  return emu::vi(r);
}
inline simde__m512i _mm512_srai_epi32(simde__m512i a, unsigned n) {
  const auto x = emu::pi(a);
  emu::I r;
  for (int i = 0; i < 16; ++i) r.i32[i] = x.i32[i] >> (n > 31 ? 31 : n);
  return emu::vi(r);
}
inline simde__m512i _mm512_zextsi256_si512(simde__m256i a) {
  emu::I r{};
  const auto x = simde__m256i_to_private(a);
  for (int i = 0; i < 8; ++i) r.i32[i] = x.i32[i];
  for (int i = 8; i < 16; ++i) r.i32[i] = 0;
  return emu::vi(r);
}
inline void _mm512_mask_storeu_ps(void* p, __mmask16 k, simde__m512 a) {
  const auto x = emu::pf(a);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) std::memcpy(static_cast<char*>(p) + 4 * i, &x.f32[i], 4);
}
inline simde__m512i _mm512_cvtepu8_epi16(simde__m256i a) {
  const auto x = simde__m256i_to_private(a);
  emu::I r;
  for (int i = 0; i < 32; ++i) r.i16[i] = x.u8[i];
  return emu::vi(r);
}
inline simde__m512 _mm512_i32gather_ps(simde__m512i idx, const void* base, int scale) {
  const auto ix = emu::pi(idx);
  emu::F r;
  for (int i = 0; i < 16; ++i)
    std::memcpy(&r.f32[i], static_cast<const char*>(base) + static_cast<int64_t>(ix.i32[i]) * scale, 4);
  return emu::vf(r);
}
inline simde__m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) {
  emu::F r;
  for (int i = 0; i < 16; ++i) {
    r.f32[i] = 0;
    if ((k >> i) & 1) std::memcpy(&r.f32[i], static_cast<const char*>(p) + 4 * i, 4);
  }
  return emu::vf(r);
}
inline simde__m512 _mm512_permute_ps(simde__m512 a, int imm) {
  const auto x = emu::pf(a);
  emu::F r;
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 4; ++i) r.f32[4 * l + i] = x.f32[4 * l + ((imm >> (2 * i)) & 3)];
  return emu::vf(r);
}
inline simde__m512 _mm512_shuffle_f32x4(simde__m512 a, simde__m512 b, int imm) {
  const auto x = emu::pf(a), y = emu::pf(b);
  emu::F r;
  for (int l = 0; l < 4; ++l) {
    const auto& s = l < 2 ? x : y;
    const int from = (imm >> (2 * l)) & 3;
    for (int i = 0; i < 4; ++i) r.f32[4 * l + i] = s.f32[4 * from + i];
  }
  return emu::vf(r);
}
// SIMDe 0.7.4's roundscale reads the scale bits wrongly (-3.9 truncated gave -3.875).
#undef _mm512_roundscale_ps
inline simde__m512 _mm512_roundscale_ps(simde__m512 a, int imm) {
  const auto x = emu::pf(a);
  emu::F r;
  const float s = std::ldexp(1.0f, (imm >> 4) & 15);
  for (int i = 0; i < 16; ++i) {
    const float v = x.f32[i] * s;
    float t;
    switch (imm & 4 ? 0 : imm & 3) {
      case 0: t = std::nearbyint(v); break;
      case 1: t = std::floor(v); break;
      case 2: t = std::ceil(v); break;
      default: t = std::trunc(v); break;
    }
    r.f32[i] = t / s;
  }
  return emu::vf(r);
}
// Fused multiply-adds rounded once, as the hardware does (SIMDe's portable ones may round twice).
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#undef _mm256_fmadd_ps
#undef _mm_fmadd_ps
#undef _mm_fnmadd_ps
inline simde__m512 _mm512_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
  const auto x = emu::pf(a), y = emu::pf(b), z = emu::pf(c);
  emu::F r;
  for (int i = 0; i < 16; ++i) r.f32[i] = std::fma(x.f32[i], y.f32[i], z.f32[i]);
  return emu::vf(r);
}
inline simde__m512 _mm512_fnmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
  const auto x = emu::pf(a), y = emu::pf(b), z = emu::pf(c);
  emu::F r;
  for (int i = 0; i < 16; ++i) r.f32[i] = std::fma(-x.f32[i], y.f32[i], z.f32[i]);
  return emu::vf(r);
}
inline simde__m256 _mm256_fmadd_ps(simde__m256 a, simde__m256 b, simde__m256 c) {
  const auto x = simde__m256_to_private(a), y = simde__m256_to_private(b), z = simde__m256_to_private(c);
  simde__m256_private r;
  for (int i = 0; i < 8; ++i) r.f32[i] = std::fma(x.f32[i], y.f32[i], z.f32[i]);
  return simde__m256_from_private(r);
}
inline simde__m128 _mm_fmadd_ps(simde__m128 a, simde__m128 b, simde__m128 c) {
  const auto x = simde__m128_to_private(a), y = simde__m128_to_private(b), z = simde__m128_to_private(c);
  simde__m128_private r;
  for (int i = 0; i < 4; ++i) r.f32[i] = std::fma(x.f32[i], y.f32[i], z.f32[i]);
  return simde__m128_from_private(r);
}
inline simde__m128 _mm_fnmadd_ps(simde__m128 a, simde__m128 b, simde__m128 c) {
  const auto x = simde__m128_to_private(a), y = simde__m128_to_private(b), z = simde__m128_to_private(c);
  simde__m128_private r;
  for (int i = 0; i < 4; ++i) r.f32[i] = std::fma(-x.f32[i], y.f32[i], z.f32[i]);
  return simde__m128_from_private(r);
}
inline simde__m512i _mm512_shuffle_i64x2(simde__m512i a, simde__m512i b, int imm) {
  return simde_mm512_castps_si512(_mm512_shuffle_f32x4(simde_mm512_castsi512_ps(a), simde_mm512_castsi512_ps(b), imm));
}
