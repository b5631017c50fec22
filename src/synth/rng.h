// synth/rng: the counter-based Gaussian generator behind `sluice synth`. Element i of a tensor
// is a pure function of (seed, tensor name, i), so any row chunk can be generated on any
// thread in any order and the file is byte-identical for any thread count.
//
// Portability: only IEEE float adds, multiplies and divides and integer bit operations are
// used (no libm, whose log/sin/sqrt paths may differ by an ulp between versions or block
// vectorization), and the build has no -ffast-math; GCC contracts no a*b+c into FMA in ISO
// C++ mode and x86-64 baseline code has no FMA anyway, so the same seed gives the same bytes
// on every such build, vectorized or not. (A compiler that contracts by default on an FMA
// target, e.g. clang on aarch64, could change low bits; it would need -ffp-contract=off.)
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string_view>

namespace sluice::synth_plan {

// splitmix64's finalizer (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
// OOPSLA 2014): a bijective avalanche mix, good enough to turn a counter into 64 random bits.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream key of one tensor: FNV-1a of its name, mixed with the seed.
inline uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return mix64(mix64(seed) ^ h);
}

// ln(u) for u in (0, 1]: u = m·2^e with m in [√½, √2), ln m = 2·atanh(s), s = (m-1)/(m+1),
// |s| <= 0.172, series to s^9 (truncation < 3e-8 relative).
inline float ln_approx(float u) {
  uint32_t b = std::bit_cast<uint32_t>(u);
  int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  float m = std::bit_cast<float>((b & 0x7FFFFFu) | 0x3F800000u);  // [1, 2)
  const int big = m > 1.41421356f;  // 0 or 1, as arithmetic so the batch loop stays branch-free
  m *= 1.0f - 0.5f * static_cast<float>(big);
  e += big;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float p = s * (2.0f + s2 * (0.666666667f + s2 * (0.4f + s2 * (0.285714286f + s2 * 0.222222222f))));
  return p + static_cast<float>(e) * 0.693147181f;
}

// (cos 2πt, sin 2πt) for t in [0, 1): reduce to the nearest quarter turn q, so the rest
// a = 2π(t - q/4) lies in [-π/4, π/4], where Taylor series to a^8 / a^9 are within 3e-8, then
// rotate by q quarter turns. Branch-free (selects only) so batch loops vectorize.
inline void sincos_turns(float t, float* c_out, float* s_out) {
  const int q = static_cast<int>(t * 4.0f + 0.5f);  // 0..4
  const float a = (t - static_cast<float>(q) * 0.25f) * 6.28318531f, a2 = a * a;
  const float c = 1.0f + a2 * (-0.5f + a2 * (4.16666667e-2f + a2 * (-1.38888889e-3f + a2 * 2.48015873e-5f)));
  const float s = a *
                  (1.0f + a2 * (-0.166666667f + a2 * (8.33333333e-3f + a2 * (-1.98412698e-4f + a2 * 2.75573192e-6f))));
  // q = 0: (c, s); 1: (-s, c); 2: (-c, -s); 3: (s, -c): swap on odd q, then flip sign bits.
  const uint32_t swap = 0u - static_cast<uint32_t>(q & 1);
  const uint32_t cb = std::bit_cast<uint32_t>(c), sb = std::bit_cast<uint32_t>(s);
  const uint32_t bc = (sb & swap) | (cb & ~swap), bs = (cb & swap) | (sb & ~swap);
  *c_out = std::bit_cast<float>(bc ^ (static_cast<uint32_t>((q + 1) & 2) << 30));
  *s_out = std::bit_cast<float>(bs ^ (static_cast<uint32_t>(q & 2) << 30));
}

// The two 24-bit uniforms of pair counter p of stream `key`: counter-based SplitMix64
// (output p of the generator seeded with `key`); u1 in (0, 1) so ln(u1) is finite.
inline void uniform_pair(uint64_t key, uint64_t p, float* u1, float* u2) {
  const uint64_t x = mix64(key + p * 0x9E3779B97F4A7C15ull);
  *u1 = (static_cast<float>(x >> 40) + 0.5f) * (1.0f / 16777216.0f);
  *u2 = static_cast<float>((x >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
}

// sqrt(y) for y in [1e-8, 40]: the classic bit-trick estimate of 1/sqrt(y) refined by three
// Newton steps (relative error < 1e-6). Used instead of std::sqrt, whose errno path for
// negative inputs keeps GCC from vectorizing the batch loop without -fno-math-errno.
inline float sqrt_approx(float y) {
  float inv = std::bit_cast<float>(0x5F3759DFu - (std::bit_cast<uint32_t>(y) >> 1));
  inv = inv * (1.5f - 0.5f * y * inv * inv);
  inv = inv * (1.5f - 0.5f * y * inv * inv);
  inv = inv * (1.5f - 0.5f * y * inv * inv);
  return y * inv;
}

// Box-Muller: two independent N(0, 1) values from two uniforms (|z| <= sqrt(2·25·ln 2) ≈ 5.9).
inline void box_muller(float u1, float u2, float* z0, float* z1) {
  const float r = sqrt_approx(-2.0f * ln_approx(u1));
  float c, s;
  sincos_turns(u2, &c, &s);
  *z0 = r * c;
  *z1 = r * s;
}

// out[j] = N(0,1) element (first + j) of stream `key`, j in [0, n). Element i is member
// i & 1 of pair i >> 1, whatever `first` is, so any chunk can be generated on its own.
inline void gauss_fill(uint64_t key, uint64_t first, float* out, int64_t n) {
  // Pairs in batches: the 64-bit hashing is scalar, the float math runs as a separate loop
  // the compiler vectorizes (same IEEE operations either way, so the same bits).
  constexpr int B = 64;
  float u1[B], u2[B], z0[B], z1[B];
  uint64_t p = first >> 1;
  int64_t j = 0;
  bool odd = first & 1;  // the first element is the second member of its pair
  while (j < n) {
    const int64_t pairs = std::min<int64_t>(B, (n - j + (odd ? 1 : 0) + 1) / 2);
    for (int i = 0; i < pairs; ++i) uniform_pair(key, p + static_cast<uint64_t>(i), &u1[i], &u2[i]);
    for (int i = 0; i < pairs; ++i) box_muller(u1[i], u2[i], &z0[i], &z1[i]);
    for (int i = 0; i < pairs && j < n; ++i) {
      if (!odd) out[j++] = z0[i];
      odd = false;
      if (j < n) out[j++] = z1[i];
    }
    p += static_cast<uint64_t>(pairs);
  }
}

// out[j] = U(0, 1) element (first + j) of stream `key` (24-bit, never 0 or 1): a separate
// counter stream from gauss_fill's pairs, one 64-bit hash per element.
inline void uniform_fill(uint64_t key, uint64_t first, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t x = mix64(~key + (first + static_cast<uint64_t>(j)) * 0x9E3779B97F4A7C15ull);
    out[j] = (static_cast<float>(x >> 40) + 0.5f) * (1.0f / 16777216.0f);
  }
}

}  // namespace sluice::synth_plan
