// core/fp16: IEEE binary16 and bfloat16 <-> binary32 conversions, bit-exact with what
// ggml computes (F16C vcvtps2ph/vcvtph2ps, and ggml_compute_fp32_to_bf16). Integer-only,
// so the result never depends on the FP environment or on the compiler contracting ops.
#include <cstring>

#include "core/fp16.h"

namespace sluice {
namespace {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // inf / nan: payload moves up unchanged (quiet bit stays bit 22)
    return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp != 0)  // normal: rebias 15 -> 127
    return f32_from_bits(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // Subnormal half: value = mant * 2^-24, exactly representable as a normal float.
  // Normalise: shift the leading 1 up to bit 10, lowering the exponent each step.
  uint32_t e = 127 - 15 + 1;  // exponent of 2^-14 (the subnormal scale) in float bias
  uint32_t m = mant;
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --e;
  }
  return f32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {
    if (x == 0x7f800000u) return sign | 0x7c00u;  // inf
    // NaN: keep the top 10 payload bits and force quiet, as vcvtps2ph does
    // (0x7fc00000 -> 0x7e00). ggml's non-F16C fallback returns 0x7e00 for every NaN;
    // NaN weights are not meaningful, so the payload difference does not matter.
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is the midpoint between 65504 (max half) and 2^16: it and
  // everything above rounds to inf under round-to-nearest-even.
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x >= 0x38800000u) {
    // Normal half (|f| >= 2^-14). Rebias the exponent, then round the 13 dropped mantissa
    // bits to nearest even: add 0xfff plus the lowest kept bit, and let any carry ripple
    // into the exponent (which yields the correct next binade, or 0x7c00 just below 65520
    // is impossible because of the check above).
    const uint32_t lsb = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + lsb;
    return static_cast<uint16_t>(sign | (x >> 13));
  }
  // Subnormal or zero half: result = round_ne(|f| / 2^-24). |f| = m * 2^(e-150) with the
  // implicit bit in m, so the quotient is m >> (126 - e) with RNE on the shifted-out bits.
  const uint32_t e = x >> 23;
  if (e < 102) return sign;  // |f| < 2^-25: rounds to zero (2^-25 itself is handled below)
  const uint32_t m = (x & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry to 0x400 = min normal: correct
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  // NaN: truncate and set bit 6 of the bf16 (float bit 22, the quiet bit), exactly as
  // ggml_compute_fp32_to_bf16; truncation alone could turn a NaN into inf.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  // Round to nearest even on the low 16 bits. Subnormals are rounded, not flushed (current
  // ggml; old ggml versions flushed them). Overflow carries into inf, which is correct.
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace sluice
