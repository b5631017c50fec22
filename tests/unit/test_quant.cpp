// tests/unit/test_quant: src/quant/ against (1) exhaustive/known fp16 and bf16 values,
// (2) hand-built blocks decoded from the format description, (3) round-trip error bounds
// per type, and (4) an independent oracle: gguf-py's numpy (de)quantizers and the bytes
// llama-quantize wrote into the golden models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_TEST_HAVE_F16C_ORACLE 1
#endif

namespace sluice {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent decode of a half from its fields, in double.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

std::vector<uint8_t> quant(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}
std::vector<float> dequant(DType t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

// ||y - x|| / ||x||.
double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    s += double(x[i]) * x[i];
  }
  return s > 0 ? std::sqrt(e / s) : std::sqrt(e);
}

// Index of the first element whose float bits differ, or -1.
int64_t first_bit_mismatch(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (bits(a[i]) != bits(b[i])) return static_cast<int64_t>(i);
  return -1;
}

const std::vector<DType> kQuantTypes = {DType::Q4_0, DType::Q4_1, DType::Q5_0,   DType::Q5_1,  DType::Q8_0,
                                        DType::Q8_A, DType::Q2_K, DType::Q3_K,   DType::Q4_K,  DType::Q5_K,
                                        DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};

// ======================================================================================
// fp16 / bf16
// ======================================================================================

TEST(Fp16, ExhaustiveDecodeMatchesFieldFormula) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) {
      if (m == 0) {
        EXPECT_TRUE(std::isinf(f)) << h;
        EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0);
      } else {
        EXPECT_TRUE(std::isnan(f)) << h;
      }
      continue;
    }
    ASSERT_EQ(double(f), half_value(static_cast<uint16_t>(h))) << "h=" << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;  // -0 stays -0
  }
}

TEST(Fp16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h)));
    const bool nan = ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    if (nan)  // NaN stays NaN with its sign; the payload gains the quiet bit (0x200)
      ASSERT_EQ(back, h | 0x200u) << h;
    else
      ASSERT_EQ(back, h) << h;
  }
}

// Every midpoint between two adjacent halves (exact in float: 12 significant bits) must
// round to the even one; one float ulp either side must round to the nearer one. Covers
// subnormals, the normal/subnormal boundary and the overflow threshold 65520.
TEST(Fp16, RoundToNearestEvenAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const uint16_t lo = static_cast<uint16_t>(h | sign), hi = static_cast<uint16_t>((h + 1) | sign);
      const float a = fp16_to_fp32(lo);
      // hi is 0x7c00 (inf) for h = 0x7bff: the "midpoint" is then 65520.
      const double b = (h + 1 == 0x7c00) ? (sign ? -65536.0 : 65536.0) : double(fp16_to_fp32(hi));
      const float mid = static_cast<float>((double(a) + b) / 2);
      ASSERT_EQ(double(mid), (double(a) + b) / 2) << "midpoint not exact for h=" << h;
      const uint16_t even = (h & 1) ? hi : lo;
      ASSERT_EQ(fp32_to_fp16(mid), even) << "h=" << h;
      const float toward_lo = std::nextafter(mid, a), toward_hi = std::nextafter(mid, float(b) * 2);
      ASSERT_EQ(fp32_to_fp16(toward_lo), lo) << "h=" << h;
      ASSERT_EQ(fp32_to_fp16(toward_hi), hi) << "h=" << h;
    }
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2e66);  // 0.0999755859375
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // tie between 65504 and 2^16 -> even = inf
  EXPECT_EQ(fp32_to_fp16(1e9f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> 2
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(from_bits(1)), 0x0000);  // float subnormal
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(NAN) & 0x7fff, 0x7e00);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
}

#ifdef SLUICE_TEST_HAVE_F16C_ORACLE
__attribute__((target("f16c"))) uint16_t f16c_encode(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
#endif

// ggml encodes with F16C's vcvtps2ph when it has it: compare on random float bit
// patterns, including NaN payloads.
TEST(Fp16, MatchesF16CHardware) {
#ifdef SLUICE_TEST_HAVE_F16C_ORACLE
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU has no F16C";
  std::mt19937 rng(7);
  for (int i = 0; i < 4'000'000; ++i) {
    uint32_t u = rng();
    if (i % 2) u = (u & 0x87ffffffu) | 0x30000000u;  // half of them in/near the half range
    const float f = from_bits(u);
    ASSERT_EQ(fp32_to_fp16(f), f16c_encode(f)) << std::hex << "bits 0x" << u;
  }
#else
  GTEST_SKIP() << "not x86";
#endif
}

TEST(Bf16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits(f), h << 16);
    const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    if (nan)  // NaN: bit 6 (the quiet bit) forced on, rest kept
      ASSERT_EQ(fp32_to_bf16(f), h | 0x40u) << h;
    else
      ASSERT_EQ(fp32_to_bf16(f), h) << h;
  }
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie -> even, not flushed
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f800001)), 0x7fc0);  // sNaN -> quiet, not inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0xffc00000)), 0xffc0);
  EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
  // Random finite floats: the result is a nearest bf16 (checked by distance, in double).
  std::mt19937 rng(3);
  for (int i = 0; i < 1'000'000; ++i) {
    const float f = from_bits(rng());
    if (!std::isfinite(f) || std::fabs(f) > 3.38e38f) continue;
    const uint16_t r = fp32_to_bf16(f);
    const double err = std::fabs(double(bf16_to_fp32(r)) - f);
    for (const int d : {-1, 1}) {
      const float other = bf16_to_fp32(static_cast<uint16_t>(r + d));
      if (std::isfinite(other) && (bits(other) >> 31) == (bits(f) >> 31)) {
        ASSERT_LE(err, std::fabs(double(other) - f)) << std::hex << bits(f);
      }
    }
  }
}

// ======================================================================================
// Row API: plain types, errors
// ======================================================================================

TEST(QuantRow, PlainTypes) {
  const std::vector<float> x = {0.0f, -1.5f, 3.14159f, 65504.f, 1e-6f, -7.25e-3f, 1e5f, 2.0f};
  EXPECT_EQ(dequant(DType::F32, quant(DType::F32, x), x.size()), x);
  const auto h = dequant(DType::F16, quant(DType::F16, x), x.size());
  const auto b = dequant(DType::BF16, quant(DType::BF16, x), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], fp16_to_fp32(fp32_to_fp16(x[i])));
    EXPECT_EQ(b[i], bf16_to_fp32(fp32_to_bf16(x[i])));
  }
  EXPECT_EQ(h[6], INFINITY);  // 1e5 overflows half
}

TEST(QuantRow, SupportedSet) {
  for (DType t : kQuantTypes) EXPECT_TRUE(quant_supported(t)) << dtype_name(t);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_TRUE(quant_supported(t));
  for (DType t : {DType::Q8_1, DType::I8, DType::I32, DType::F64}) EXPECT_FALSE(quant_supported(t));
}

TEST(QuantRow, ErrorsNameTheType) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> buf(1024);
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { dequantize_row(DType::Q8_1, buf.data(), x.data(), 32); }, "q8_1");
  expect_error([&] { quantize_row(DType::I32, x.data(), buf.data(), 32); }, "i32");
  expect_error([&] { quantize_row(DType::Q4_0, x.data(), buf.data(), 33); }, "q4_0");
  expect_error([&] { dequantize_row(DType::Q4_K, buf.data(), x.data(), 64); }, "q4_K");
  expect_error([&] { dequantize_row(static_cast<DType>(99), buf.data(), x.data(), 32); }, "99");
  EXPECT_NO_THROW(quantize_row(DType::Q4_K, x.data(), buf.data(), 0));
}

// ======================================================================================
// Hand-built blocks: bytes laid out in the test straight from the format description
// (element-indexed, unlike the library's loops), values computed by hand.
// ======================================================================================

template <class Block>
std::vector<uint8_t> as_bytes(const Block& b) {
  std::vector<uint8_t> v(sizeof b);
  std::memcpy(v.data(), &b, sizeof b);
  return v;
}

TEST(QuantBlocks, Q8_0) {
  block_q8_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j < 16 ? -128 + j : 127 - (j - 16));
  const auto y = dequant(DType::Q8_0, as_bytes(b), 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], -63.5f);
  EXPECT_EQ(y[15], -56.5f);
  EXPECT_EQ(y[16], 63.5f);
  EXPECT_EQ(y[31], 56.0f);
}

TEST(QuantBlocks, Q4_0AndQ4_1) {
  block_q4_0 a{};
  a.d = 0x4000;  // 2.0
  block_q4_1 c{};
  c.d = 0x3400;  // 0.25
  c.m = 0xbc00;  // -1.0
  for (int j = 0; j < 16; ++j) a.qs[j] = c.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto ya = dequant(DType::Q4_0, as_bytes(a), 32);
  const auto yc = dequant(DType::Q4_1, as_bytes(c), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(ya[j], 2.0f * (j - 8));       // element j: low nibble of byte j
    EXPECT_EQ(ya[j + 16], 2.0f * (7 - j));  // element j+16: high nibble of byte j
    EXPECT_EQ(yc[j], 0.25f * j - 1.0f);
    EXPECT_EQ(yc[j + 16], 0.25f * (15 - j) - 1.0f);
  }
}

TEST(QuantBlocks, Q5_0AndQ5_1) {
  block_q5_0 a{};
  a.d = 0x3c00;  // 1.0
  block_q5_1 c{};
  c.d = 0x3800;  // 0.5
  c.m = 0x4200;  // 3.0
  // 5-bit values v_j = (7*j + 3) % 32; bit 4 of element j is bit j of qh (little endian).
  int v[32];
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) {
    v[j] = (7 * j + 3) % 32;
    if (v[j] & 16) qh |= 1u << j;
  }
  for (int j = 0; j < 16; ++j) a.qs[j] = c.qs[j] = static_cast<uint8_t>((v[j] & 15) | ((v[j + 16] & 15) << 4));
  for (int k = 0; k < 4; ++k) a.qh[k] = c.qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  const auto ya = dequant(DType::Q5_0, as_bytes(a), 32);
  const auto yc = dequant(DType::Q5_1, as_bytes(c), 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(ya[j], float(v[j] - 16)) << j;
    EXPECT_EQ(yc[j], 0.5f * v[j] + 3.0f) << j;
  }
}

// q4_K/q5_K 12-byte scale packing, written from the format description: 6-bit scale s_j
// and min m_j for 8 sub-blocks of 32.
void pack_k4_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(QuantBlocks, Q4_KAndQ5_K) {
  const int sc[8] = {1, 17, 33, 63, 5, 21, 47, 60};
  const int mn[8] = {0, 9, 40, 63, 16, 31, 48, 2};
  block_q4_K a{};
  block_q5_K c{};
  a.d = c.d = 0x3c00;        // 1.0
  a.dmin = c.dmin = 0x3800;  // 0.5
  pack_k4_scales(sc, mn, a.scales);
  pack_k4_scales(sc, mn, c.scales);
  int q4[256], q5[256];
  for (int e = 0; e < 256; ++e) {
    q4[e] = (e * 7 + e / 32) % 16;
    q5[e] = (e * 13 + 5) % 32;
    // chunk = e/64: its 32 qs bytes hold elements 0..31 of the chunk in low nibbles and
    // 32..63 in high nibbles. q5's bit 4: qh[e%32] bit (2*chunk + (e%64 >= 32)).
    const int chunk = e / 64, r = e % 64, byte = 32 * chunk + r % 32, hi = r >= 32;
    a.qs[byte] = static_cast<uint8_t>(a.qs[byte] | (q4[e] << (4 * hi)));
    c.qs[byte] = static_cast<uint8_t>(c.qs[byte] | ((q5[e] & 15) << (4 * hi)));
    if (q5[e] & 16) c.qh[r % 32] = static_cast<uint8_t>(c.qh[r % 32] | (1 << (2 * chunk + hi)));
  }
  const auto ya = dequant(DType::Q4_K, as_bytes(a), 256);
  const auto yc = dequant(DType::Q5_K, as_bytes(c), 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(ya[e], float(1.0 * sc[j] * q4[e] - 0.5 * mn[j])) << e;
    EXPECT_EQ(yc[e], float(1.0 * sc[j] * q5[e] - 0.5 * mn[j])) << e;
  }
  EXPECT_EQ(ya[3 * 32 + 1], 63.0f * q4[97] - 31.5f);  // one spelled out: scale 63, min 63
}

TEST(QuantBlocks, Q6_K) {
  block_q6_K b{};
  b.d = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s == 0 ? -128 : s * 9 - 70);
  int q[256];
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 11 + 1) % 64;  // stored value; element = q - 32
    // half h = e/128; within it group g = (e%128)/32, l = e%32. Low nibble: g 0/1 -> low
    // nibble of ql[64h + 32*(g&1) + l], g 2/3 -> high nibble of the same bytes.
    // Top 2 bits: qh[32h + l] at bit 2g.
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int ql_i = 64 * h + 32 * (g & 1) + l;
    b.ql[ql_i] = static_cast<uint8_t>(b.ql[ql_i] | ((q[e] & 15) << (g >= 2 ? 4 : 0)));
    b.qh[32 * h + l] = static_cast<uint8_t>(b.qh[32 * h + l] | ((q[e] >> 4) << (2 * g)));
  }
  const auto y = dequant(DType::Q6_K, as_bytes(b), 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], float(0.25 * b.scales[e / 16] * (q[e] - 32))) << e;
  EXPECT_EQ(y[0], 0.25f * -128 * (1 - 32));
}

TEST(QuantBlocks, Q3_KAndQ2_K) {
  block_q3_K a{};
  block_q2_K c{};
  a.d = 0x3800;     // 0.5
  c.d = 0x3c00;     // 1.0
  c.dmin = 0x3400;  // 0.25
  int s3[16];
  for (int j = 0; j < 16; ++j) {
    s3[j] = (j * 5) % 64 - 32;  // signed 6-bit scale, stored + 32
    const int st = s3[j] + 32;
    // low 4 bits: byte j%8, low nibble for j<8, high for j>=8; high 2 bits: byte 8 + j%4
    // at bit 2*(j/4).
    a.scales[j % 8] = static_cast<uint8_t>(a.scales[j % 8] | ((st & 15) << (j < 8 ? 0 : 4)));
    a.scales[8 + j % 4] = static_cast<uint8_t>(a.scales[8 + j % 4] | ((st >> 4) << (2 * (j / 4))));
    c.scales[j] = static_cast<uint8_t>((j % 16) | (((15 - j) % 16) << 4));  // scale j, min 15-j
  }
  int q3[256], q2[256];
  for (int e = 0; e < 256; ++e) {
    q3[e] = (e * 3 + e / 16) % 8;  // element = q3 - 4
    q2[e] = (e * 5 + 2) % 4;
    // 2-bit plane: half h = e/128, plane p = (e%128)/32, byte 32h + e%32, bits 2p.
    const int byte = 32 * (e / 128) + e % 32, shift = 2 * ((e % 128) / 32);
    a.qs[byte] = static_cast<uint8_t>(a.qs[byte] | ((q3[e] & 3) << shift));
    c.qs[byte] = static_cast<uint8_t>(c.qs[byte] | (q2[e] << shift));
    // q3's third bit ("q >= 4"): bit e/32 of hmask[e%32].
    if (q3[e] & 4) a.hmask[e % 32] = static_cast<uint8_t>(a.hmask[e % 32] | (1 << (e / 32)));
  }
  const auto ya = dequant(DType::Q3_K, as_bytes(a), 256);
  const auto yc = dequant(DType::Q2_K, as_bytes(c), 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    EXPECT_EQ(ya[e], float(0.5 * s3[j] * (q3[e] - 4))) << e;
    EXPECT_EQ(yc[e], float(1.0 * j * q2[e] - 0.25 * (15 - j))) << e;
  }
}

// IQ4_NL: d·level[nibble]; IQ4_XS: the same per sub-block with d·(ls − 32), ls's low 4 bits
// from scales_l's nibbles and high 2 from scales_h.
TEST(QuantBlocks, Iq4NlAndIq4Xs) {
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  block_iq4_nl a{};
  a.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto ya = dequant(DType::IQ4_NL, as_bytes(a), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(ya[j], 0.5f * levels[j]) << j;
    EXPECT_EQ(ya[j + 16], 0.5f * levels[15 - j]) << j;
  }
  block_iq4_xs b{};
  b.d = 0x3c00;  // 1.0
  // ls: sub-block s gets 32 + (s − 4)·3 (from 20 to 41): low nibbles and high bits by hand.
  int ls[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = 32 + (s - 4) * 3;
    b.scales_l[s / 2] = static_cast<uint8_t>(b.scales_l[s / 2] | ((ls[s] & 0xF) << (s % 2 ? 4 : 0)));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls[s] >> 4) << (2 * s)));
  }
  for (int j = 0; j < 128; ++j) b.qs[j] = static_cast<uint8_t>((j % 16) | ((j * 7 % 16) << 4));
  const auto yb = dequant(DType::IQ4_XS, as_bytes(b), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, j = e % 32;
    const uint8_t q = b.qs[16 * s + j % 16];
    const int code = j < 16 ? q & 0xF : q >> 4;
    ASSERT_EQ(yb[e], float(ls[s] - 32) * levels[code]) << e;
  }
}

TEST(QuantBlocks, Q8_K) {
  block_q8_K b{};
  b.d = 0.1f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  const auto y = dequant(DType::Q8_K, as_bytes(b), 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.1f * float(j - 128));
  // quantize: bsums are the sums of 16 quants; d = max/-127 * -1 sign convention
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = float(j % 17) - 8.0f;
  x[5] = -12.7f;  // the largest |x|: maps to +/-127
  const auto q = quant(DType::Q8_K, x);
  block_q8_K r;
  std::memcpy(&r, q.data(), sizeof r);
  EXPECT_FLOAT_EQ(r.d, 0.1f);
  EXPECT_EQ(r.qs[5], -127);
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int k = 0; k < 16; ++k) s += r.qs[16 * g + k];
    EXPECT_EQ(r.bsums[g], s);
  }
}

// All-zero input gives all-zero output for every type, and a block of zeros between
// non-zero blocks stays exactly zero.
TEST(QuantBlocks, ZeroBlocksStayZero) {
  for (DType t : kQuantTypes) {
    std::vector<float> x(3 * 256, 0.0f);
    for (int i = 0; i < 256; ++i) x[i] = std::sin(0.1f * i), x[512 + i] = std::cos(0.3f * i) * 5;
    const auto y = dequant(t, quant(t, x), x.size());
    for (int i = 256; i < 512; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " i=" << i;
    const auto z = dequant(t, quant(t, std::vector<float>(256, 0.0f)), 256);
    for (float v : z) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// ======================================================================================
// Round-trip error per type
// ======================================================================================

struct Dist {
  const char* name;
  std::vector<float> x;
};

std::vector<Dist> make_dists(size_t n) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::exponential_distribution<float> ex(1.0f);
  std::vector<Dist> d;
  auto add = [&](const char* name, auto f) {
    Dist s{name, std::vector<float>(n)};
    for (size_t i = 0; i < n; ++i) s.x[i] = f(i);
    d.push_back(std::move(s));
  };
  add("gaussian", [&](size_t) { return g(rng); });
  add("uniform", [&](size_t) { return u(rng); });
  add("laplace", [&](size_t) { return (rng() & 1 ? 1.0f : -1.0f) * ex(rng); });
  // One 20-sigma outlier per 64 values: the block scale is set by it.
  add("outliers", [&](size_t i) { return i % 64 == 17 ? 20.0f * (rng() & 1 ? 1 : -1) : g(rng); });
  // Block magnitudes over 6 decades (fp16 scales must cope); the relative error is
  // measured over the whole row, so large blocks dominate, as in real matmuls.
  std::vector<float> mag(n / 256 + 1);
  for (auto& m : mag) m = std::pow(10.0f, 3.0f * u(rng));
  add("mixed_scale", [&](size_t i) { return mag[i / 256] * g(rng); });
  add("positive_offset", [&](size_t) { return 0.5f + std::fabs(g(rng)); });
  return d;
}

// Relative RMSE bounds (||deq(q(x)) - x|| / ||x||), set about 1.3x above the worst value
// measured over the distributions above (measured values in the comments; the test prints
// them). Where they come from: a b-bit uniform grid over a block's range has step
// ~range/2^b and RMS error step/sqrt(12). For 32 Gaussian values the symmetric types'
// range is 2*absmax ~ 4.2 sigma, so Q8_0 ~ 2.1/127/sqrt(12) = 0.5% (measured 0.53%);
// each bit less roughly doubles it. Q8_K's 256-element blocks have a larger absmax, hence
// worse than Q8_0. K-quants search the scale/min and beat legacy types of equal width.
// The "outliers" distribution (one 20-sigma value per 64) is its own regime: the outlier
// sets the block's scale, so the other 31 values get a coarse grid; it gets its own bound.
struct RmseBound {
  double typical;   // gaussian, uniform, laplace, mixed_scale, positive_offset
  double outliers;  // "outliers"
};
RmseBound rmse_bound(DType t) {
  switch (t) {
    case DType::Q8_0: return {0.0090, 0.016};  // 8-bit:  laplace 0.0066, outliers 0.0120
    case DType::Q8_K: return {0.013, 0.022};   // 8-bit over 256: laplace 0.0098, outliers 0.0168
    case DType::Q8_A: return {0.0075, 0.009};  // 8-bit with offset: laplace 0.0054, outliers 0.0065
    case DType::Q6_K: return {0.028, 0.043};   // 6-bit:  laplace 0.0213, outliers 0.0331
    case DType::Q5_0: return {0.070, 0.12};    // 5-bit:  laplace 0.0532, outliers 0.0943
    case DType::Q5_1: return {0.058, 0.070};   // 5-bit:  laplace 0.0443, outliers 0.0532
    case DType::Q5_K: return {0.055, 0.066};   // 5-bit:  laplace 0.0424, outliers 0.0510
    case DType::Q4_0: return {0.14, 0.24};     // 4-bit:  laplace 0.106,  outliers 0.183
    case DType::Q4_1: return {0.12, 0.145};    // 4-bit:  laplace 0.091,  outliers 0.110
    case DType::Q4_K: return {0.11, 0.135};    // 4-bit:  laplace 0.084,  outliers 0.102
    case DType::IQ4_NL: return {0.115, 0.18};  // 4-bit, non-linear levels: laplace 0.0875, outliers 0.136
    case DType::IQ4_XS: return {0.115, 0.18};  // the same over 6-bit sub-scales: laplace 0.0881, outliers 0.136
    case DType::Q3_K: return {0.23, 0.24};     // 3-bit:  laplace 0.174,  outliers 0.185
    case DType::Q2_K: return {0.45, 0.45};     // 2-bit:  laplace 0.346,  outliers 0.233
    default: return {0, 0};
  }
}

TEST(QuantRoundTrip, ErrorWithinBoundPerType) {
  const auto dists = make_dists(256 * 64);
  for (DType t : kQuantTypes) {
    std::ostringstream line;
    line << dtype_name(t) << ":";
    for (const auto& d : dists) {
      const double e = rel_rmse(d.x, dequant(t, quant(t, d.x), d.x.size()));
      const bool outl = std::string(d.name) == "outliers";
      line << " " << d.name << "=" << e;
      EXPECT_LT(e, outl ? rmse_bound(t).outliers : rmse_bound(t).typical) << dtype_name(t) << " on " << d.name;
    }
    std::printf("  [rel rmse] %s\n", line.str().c_str());
  }
}

// Q8_0, Q4_0 and Q5_0 are fixed points of quantize . dequantize: the element that set the
// scale decodes to exactly -8d (-16d, 127d), so the re-derived scale is the stored fp16 d
// and every quant maps back to itself. Checked bytewise.
TEST(QuantRoundTrip, RequantizeIsIdempotentForSymmetricLegacyTypes) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
    for (const auto& d : make_dists(256 * 16)) {
      const auto q1 = quant(t, d.x);
      const auto q2 = quant(t, dequant(t, q1, d.x.size()));
      EXPECT_EQ(q1, q2) << dtype_name(t) << " on " << d.name;
    }
  }
}

// For the other types ggml's algorithms do not promise a fixed point (the min/scale
// searches can pick a slightly different scale), but re-quantizing already-quantized data
// must not drift by more than a small part of the type's own error.
TEST(QuantRoundTrip, RequantizeIsNearlyStable) {
  for (DType t : kQuantTypes) {
    double worst = 0;
    for (const auto& d : make_dists(256 * 16)) {
      const auto y1 = dequant(t, quant(t, d.x), d.x.size());
      const auto y2 = dequant(t, quant(t, y1), d.x.size());
      const double drift = rel_rmse(y1, y2);
      worst = std::max(worst, drift);
      EXPECT_LT(drift, 0.5 * rmse_bound(t).typical) << dtype_name(t) << " on " << d.name;
    }
    std::printf("  [requantize drift] %s: worst %.5f\n", std::string(dtype_name(t)).c_str(), worst);
  }
}

// ======================================================================================
// Independent oracle: gguf-py and llama-quantize's bytes
// ======================================================================================

namespace fs = std::filesystem;

std::string oracle_python() { return std::string(SLUICE_SOURCE_DIR) + "/.venv/bin/python"; }
std::string oracle_script() { return std::string(SLUICE_SOURCE_DIR) + "/scripts/quant_oracle.py"; }

// Empty if usable, else why not.
std::string oracle_unavailable() {
  static const std::string why = [] {
    if (!fs::exists(oracle_python())) return "no " + oracle_python();
    int rc = 0;
    test::run_command(oracle_python() + " -c 'import numpy, gguf' 2>&1", &rc);
    if (rc != 0) return oracle_python() + " cannot import numpy and gguf";
    return std::string();
  }();
  return why;
}

#define SLUICE_REQUIRE_ORACLE()                                                                              \
  do {                                                                                                       \
    const std::string why = oracle_unavailable();                                                            \
    if (!why.empty())                                                                                        \
      GTEST_SKIP() << "\n*** gguf-py oracle unavailable (" << why << "): bit-exact comparison SKIPPED.\n"    \
                   << "*** create it with: python3 -m venv .venv && .venv/bin/pip install numpy gguf ***\n"; \
  } while (0)

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("sluice_quant_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

void write_bytes(const std::string& path, const void* p, size_t n) {
  std::ofstream o(path, std::ios::binary);
  o.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
}

// Runs the oracle on a jobs file; fails the test with the script's output on error.
bool run_oracle_batch(const TempDir& dir, const std::string& jobs) {
  const std::string jobs_path = dir / "jobs.tsv";
  std::ofstream(jobs_path) << jobs;
  int rc = 0;
  const std::string out = test::run_command(oracle_python() + " " + oracle_script() + " batch " + jobs_path + " 2>&1",
                                            &rc);
  EXPECT_EQ(rc, 0) << out;
  return rc == 0;
}

struct OracleTensor {
  std::string name;
  DType type;
  int64_t n;
  std::vector<uint8_t> raw;
  std::vector<float> f32;  // gguf-py's decode (empty if it has none)
};

// Dumps every tensor of a GGUF through the oracle (raw bytes + numpy decode). Cached per
// path: two tests read the same models and the Python run dominates their time.
const std::vector<OracleTensor>& oracle_dump_gguf(const std::string& model) {
  static std::map<std::string, std::vector<OracleTensor>> cache;
  if (const auto it = cache.find(model); it != cache.end()) return it->second;
  TempDir dir;
  static const std::vector<OracleTensor> kNone;
  if (!run_oracle_batch(dir, "gguf\t" + model + "\t" + dir.path.string() + "\n")) return kNone;
  std::vector<OracleTensor>& out = cache[model];
  std::istringstream idx(test::read_text_file(dir / "index.tsv"));
  std::string line;
  while (std::getline(idx, line)) {
    std::istringstream ls(line);
    std::string i, name, tname, id, n, has;
    std::getline(ls, i, '\t');
    std::getline(ls, name, '\t');
    std::getline(ls, tname, '\t');
    std::getline(ls, id, '\t');
    std::getline(ls, n, '\t');
    std::getline(ls, has, '\t');
    OracleTensor t{
        name, static_cast<DType>(std::stoul(id)), std::stoll(n), test::read_file_bytes(dir / (i + ".raw")), {}};
    if (has == "1") t.f32 = test::read_f32_file(dir / (i + ".f32"));
    out.push_back(std::move(t));
  }
  return out;
}

// Real llama-quantize output (Q4_K, Q5_K, Q6_K, Q5_0, Q8_0, plus F32/F16 sources):
// our decode must equal gguf-py's bit for bit on every tensor.
TEST(QuantOracle, GoldenModelsDecodeIdentically) {
  SLUICE_REQUIRE_SHARED();
  SLUICE_REQUIRE_ORACLE();
  std::map<std::string, int64_t> checked;  // type name -> elements compared
  for (const std::string& m :
       std::vector<std::string>{"llama_dense-Q4_K_M", "qwen3moe-Q4_K_M", "llama_dense-Q8_0", "qwen3moe-Q8_0",
                                "llama_dense", std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/qwen3moe-iq4_xs"}) {
    const std::string path = (m[0] == '/' ? m : test::shared_dir() + "/golden/" + m) + "/model.gguf";
    if (!fs::exists(path)) {
      ADD_FAILURE() << "missing " << path;
      continue;
    }
    const auto& tensors = oracle_dump_gguf(path);
    ASSERT_FALSE(tensors.empty()) << path;
    for (const auto& t : tensors) {
      ASSERT_TRUE(quant_supported(t.type)) << m << " " << t.name;
      ASSERT_EQ(t.f32.size(), size_t(t.n)) << m << " " << t.name;
      ASSERT_EQ(t.raw.size(), dtype_row_bytes(t.type, t.n)) << m << " " << t.name;
      const auto y = dequant(t.type, t.raw, size_t(t.n));
      const int64_t bad = first_bit_mismatch(y.data(), t.f32.data(), y.size());
      EXPECT_EQ(bad, -1) << m << " " << t.name << " (" << dtype_name(t.type) << ") element " << bad << ": ours "
                         << (bad >= 0 ? y[bad] : 0) << " gguf-py " << (bad >= 0 ? t.f32[bad] : 0);
      checked[std::string(dtype_name(t.type))] += t.n;
    }
  }
  for (const char* tn : {"q4_K", "q5_K", "q6_K", "q5_0", "q8_0", "iq4_xs", "iq4_nl", "f16", "f32"})
    EXPECT_GT(checked[tn], 0) << "no " << tn << " tensor seen in the golden models";
  for (const auto& [tn, n] : checked)
    std::printf("  [golden decode] %s: %lld elements bit-identical\n", tn.c_str(), (long long)n);
}

// Random blocks of every type gguf-py decodes: (a) our quantizer's output, (b) random
// bytes with finite fp16 scales (layouts our quantizer never emits, e.g. every bit
// pattern of the scale bytes). Decodes must match bit for bit.
TEST(QuantOracle, RandomBlocksDecodeIdentically) {
  SLUICE_REQUIRE_ORACLE();
  TempDir dir;
  std::mt19937 rng(99);
  const auto dists = make_dists(256 * 8);
  std::vector<std::pair<DType, std::vector<uint8_t>>> cases;
  for (DType t : kQuantTypes) {
    // gguf-py has no Q8_K decoder (it is never stored in files), and Q8_A is Sluice's own.
    if (t == DType::Q8_K || t == DType::Q8_A) continue;
    std::vector<uint8_t> all;
    for (const auto& d : dists) {
      const auto q = quant(t, d.x);
      all.insert(all.end(), q.begin(), q.end());
    }
    std::vector<uint8_t> rnd(dtype_row_bytes(t, 256 * 32));
    for (auto& b : rnd) b = static_cast<uint8_t>(rng());
    // Make every fp16 field finite (exponent < 31) so NaN payload conventions don't
    // matter: clear bit 14 of each half. Offsets of the half fields per block:
    std::vector<size_t> halves;
    switch (t) {
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0:
      case DType::IQ4_NL:
      case DType::IQ4_XS: halves = {0}; break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q8_A:
      case DType::Q4_K:
      case DType::Q5_K: halves = {0, 2}; break;
      case DType::Q2_K: halves = {80, 82}; break;
      case DType::Q3_K: halves = {108}; break;
      case DType::Q6_K: halves = {208}; break;
      default: FAIL();
    }
    const size_t bb = dtype_traits(t).block_bytes;
    for (size_t blk = 0; blk < rnd.size() / bb; ++blk)
      for (size_t off : halves) rnd[blk * bb + off + 1] &= 0xbf;
    all.insert(all.end(), rnd.begin(), rnd.end());
    cases.emplace_back(t, std::move(all));
  }
  // F16 and BF16: every non-NaN bit pattern.
  std::vector<uint16_t> h16, b16;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) != 31 || (h & 1023) == 0) h16.push_back(static_cast<uint16_t>(h));
    if ((h & 0x7f80) != 0x7f80 || (h & 0x7f) == 0) b16.push_back(static_cast<uint16_t>(h));
  }
  cases.emplace_back(DType::F16, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(h16.data()),
                                                      reinterpret_cast<uint8_t*>(h16.data() + h16.size())));
  cases.emplace_back(DType::BF16, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(b16.data()),
                                                       reinterpret_cast<uint8_t*>(b16.data() + b16.size())));
  std::string jobs;
  for (const auto& [t, bytes] : cases) {
    const std::string n(dtype_name(t));
    write_bytes(dir / (n + ".raw"), bytes.data(), bytes.size());
    jobs += "dequant\t" + n + "\t" + (dir / (n + ".raw")) + "\t" + (dir / (n + ".f32")) + "\n";
  }
  ASSERT_TRUE(run_oracle_batch(dir, jobs));
  for (const auto& [t, bytes] : cases) {
    const auto& tr = dtype_traits(t);
    const size_t n = bytes.size() / tr.block_bytes * size_t(tr.block_size);
    const auto want = test::read_f32_file(dir / (std::string(dtype_name(t)) + ".f32"));
    ASSERT_EQ(want.size(), n) << dtype_name(t);
    const auto y = dequant(t, bytes, n);
    const int64_t bad = first_bit_mismatch(y.data(), want.data(), n);
    EXPECT_EQ(bad, -1) << dtype_name(t) << " element " << bad << " (block " << bad / tr.block_size << "): ours "
                       << (bad >= 0 ? y[bad] : 0) << " gguf-py " << (bad >= 0 ? want[bad] : 0);
  }
}

// Where gguf-py can quantize (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; its Q8_0 is
// documented as bit-exact with ggml's reference) our bytes must equal its bytes.
TEST(QuantOracle, QuantizeMatchesGgufPy) {
  SLUICE_REQUIRE_ORACLE();
  TempDir dir;
  std::vector<float> x;
  for (const auto& d : make_dists(256 * 16)) x.insert(x.end(), d.x.begin(), d.x.end());
  // Edge blocks: all zero, constant, a single non-zero, ties on |max| with both signs,
  // values spanning the fp16 subnormal range and near the fp16 overflow.
  const auto block = [&](auto f) {
    for (int i = 0; i < 32; ++i) x.push_back(f(i));
  };
  block([](int) { return 0.0f; });
  block([](int) { return 3.0f; });
  block([](int) { return -3.0f; });
  block([](int i) { return i == 7 ? -1.0f : 0.0f; });
  block([](int i) { return i == 3 ? 2.0f : i == 9 ? -2.0f : 0.5f; });
  block([](int i) { return std::ldexp(float(i - 16), -22); });
  block([](int i) { return 60000.0f * std::sin(float(i)); });
  block([](int i) { return 1e-9f * float(i); });
  while (x.size() % 256) x.push_back(0.25f);
  write_bytes(dir / "x.f32", x.data(), x.size() * 4);
  const std::vector<DType> types = {DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                    DType::Q5_0, DType::Q5_1, DType::Q8_0};
  std::string jobs;
  for (DType t : types) {
    const std::string n(dtype_name(t));
    jobs += "quantize\t" + n + "\t" + (dir / "x.f32") + "\t" + (dir / (n + ".raw")) + "\n";
  }
  ASSERT_TRUE(run_oracle_batch(dir, jobs));
  for (DType t : types) {
    const auto want = test::read_file_bytes(dir / (std::string(dtype_name(t)) + ".raw"));
    const auto got = quant(t, x);
    ASSERT_EQ(want.size(), got.size()) << dtype_name(t);
    size_t bad = 0;
    while (bad < got.size() && got[bad] == want[bad]) ++bad;
    EXPECT_EQ(bad, got.size()) << dtype_name(t) << " first differing byte " << bad << " (block "
                               << bad / dtype_traits(t).block_bytes << ")";
  }
}

// The quantized goldens were written by llama-quantize from the F16 goldens with no
// importance matrix, i.e. by ggml's quantize_row_*_ref. Re-quantizing the F16 source
// with our quantize_row must reproduce those bytes: a direct check of our K-quant
// encoders (which gguf-py does not implement) against ggml itself.
TEST(QuantOracle, RequantizingGoldenSourcesReproducesLlamaQuantize) {
  SLUICE_REQUIRE_SHARED();
  SLUICE_REQUIRE_ORACLE();
  // tests/data/golden/qwen3moe-iq4_xs: `llama-quantize --pure` IQ4_XS (IQ4_NL where 256 does not
  // divide a row) of the shared qwen3moe, by the llama.cpp of tests/data/golden/README.md.
  const std::string shared = test::shared_dir() + "/golden/",
                    repo = std::string(SLUICE_SOURCE_DIR) + "/tests/data/golden/";
  const std::pair<std::string, std::string> pairs[] = {{"llama_dense", "llama_dense-Q4_K_M"},
                                                       {"llama_dense", "llama_dense-Q8_0"},
                                                       {"qwen3moe", "qwen3moe-Q4_K_M"},
                                                       {"qwen3moe", "qwen3moe-Q8_0"},
                                                       {"qwen3moe", repo + "qwen3moe-iq4_xs"}};
  std::map<std::string, std::pair<int64_t, int64_t>> stats;  // type -> (blocks, differing blocks)
  for (const auto& [src_name, dst_name] : pairs) {
    const auto& src = oracle_dump_gguf(shared + src_name + "/model.gguf");
    const auto& dst = oracle_dump_gguf((dst_name[0] == '/' ? dst_name : shared + dst_name) + "/model.gguf");
    ASSERT_FALSE(src.empty());
    ASSERT_FALSE(dst.empty());
    std::map<std::string, const OracleTensor*> by_name;
    for (const auto& t : src) by_name[t.name] = &t;
    for (const auto& q : dst) {
      if (!dtype_traits(q.type).quantized) continue;
      const auto it = by_name.find(q.name);
      ASSERT_NE(it, by_name.end()) << q.name;
      const OracleTensor& s = *it->second;
      ASSERT_EQ(s.n, q.n);
      const auto x = dequant(s.type, s.raw, size_t(s.n));  // F16 -> F32, exact
      const auto got = quant(q.type, x);
      ASSERT_EQ(got.size(), q.raw.size());
      const size_t bb = dtype_traits(q.type).block_bytes;
      int64_t diff = 0;
      for (size_t b = 0; b < got.size() / bb; ++b)
        if (std::memcmp(got.data() + b * bb, q.raw.data() + b * bb, bb) != 0) ++diff;
      auto& st = stats[std::string(dtype_name(q.type))];
      st.first += int64_t(got.size() / bb);
      st.second += diff;
      EXPECT_EQ(diff, 0) << dst_name << " " << q.name << " (" << dtype_name(q.type) << "): " << diff << " of "
                         << got.size() / bb << " blocks differ";
    }
  }
  for (const auto& [tn, st] : stats)
    std::printf("  [requantize] %s: %lld blocks, %lld differ from llama-quantize\n", tn.c_str(), (long long)st.first,
                (long long)st.second);
  for (const char* tn : {"q4_K", "q6_K", "q8_0", "iq4_xs", "iq4_nl"})
    EXPECT_GT(stats[tn].first, 0) << "no " << tn << " tensor was compared";
}

// IQ4_NL and IQ4_XS, which gguf-py cannot encode: ggml's own encoders (quantize_iq4_nl /
// quantize_iq4_xs without an importance matrix, as llama-quantize runs them) on a fixed input,
// stored by scripts/golden/make_iq4_golden.sh. Our bytes must be theirs. Negative control: the
// scale without ggml's least-squares refinement and trial scales (the nearest levels for
// d = max/−127) must differ from them in many blocks, or the golden would not test the search.
TEST(QuantOracle, Iq4MatchesGgml) {
  const std::string dir = std::string(SLUICE_SOURCE_DIR) + "/tests/data/iq4/";
  const std::vector<float> x = test::read_f32_file(dir + "input.f32");
  ASSERT_EQ(x.size(), 32u * 256) << dir + "input.f32";
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
    const auto want = test::read_file_bytes(dir + std::string(dtype_name(t)) + ".bin");
    const auto got = quant(t, x);
    ASSERT_EQ(got.size(), want.size()) << dtype_name(t);
    const size_t bb = dtype_traits(t).block_bytes;
    int64_t diff = 0;
    for (size_t b = 0; b < got.size() / bb; ++b)
      if (std::memcmp(got.data() + b * bb, want.data() + b * bb, bb) != 0) {
        if (diff++ == 0) ADD_FAILURE() << dtype_name(t) << ": block " << b << " differs from ggml's";
      }
    EXPECT_EQ(diff, 0) << dtype_name(t) << ": " << diff << " of " << got.size() / bb << " blocks differ";
  }
  const auto want = test::read_file_bytes(dir + "iq4_nl.bin");
  std::vector<block_iq4_nl> naive(x.size() / 32);
  const int8_t* lv = kIq4nlValues;
  for (size_t b = 0; b < naive.size(); ++b) {
    const float* xb = x.data() + 32 * b;
    float max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(xb[j]) > std::fabs(max)) max = xb[j];
    const float d = max / lv[0], id = d != 0 ? 1 / d : 0.f;
    naive[b].d = fp32_to_fp16(d);
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) {
      int best = 0;
      for (int l = 1; l < 16; ++l)
        if (std::fabs(id * xb[j] - lv[l]) < std::fabs(id * xb[j] - lv[best])) best = l;
      L[j] = static_cast<uint8_t>(best);
    }
    for (int j = 0; j < 16; ++j) naive[b].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
  int64_t naive_diff = 0;
  for (size_t b = 0; b < naive.size(); ++b)
    if (std::memcmp(&naive[b], want.data() + b * sizeof(block_iq4_nl), sizeof(block_iq4_nl)) != 0) ++naive_diff;
  EXPECT_GT(naive_diff, int64_t(naive.size() / 4))
      << "the unrefined scale matches ggml's bytes: the golden is too weak";
  std::printf("  [iq4 negative control] unrefined IQ4_NL scale: %lld of %zu blocks differ from ggml's\n",
              (long long)naive_diff, naive.size());
}

}  // namespace
}  // namespace sluice
