// tests/unit/test_kvcodec: the KV codec table, the Lloyd-Max codebooks, the Walsh-Hadamard
// rotation and the tq round trip (error per bit width, norm preserved), and the cache policy
// (auto-asymmetric K, fallbacks for head dims the codecs cannot take).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "kvcodec/kvcodec.h"
#include "memory/kv_cache.h"
#include "quant/quant.h"

namespace sluice {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(KvCodec, TypeTableRoundTrips) {
  for (const char* n :
       {"f32", "f16", "bf16", "q8_0", "q4_0", "tq2", "tq3", "tq4", "tq8", "tq2g", "tq3g", "tq4g", "tq3s"}) {
    auto t = kv_type_from_name(n);
    ASSERT_TRUE(t) << n;
    EXPECT_EQ(kv_type_name(*t), n);
    EXPECT_TRUE(kv_type_supported(*t));
  }
  EXPECT_FALSE(kv_type_from_name("q4_K"));
  EXPECT_FALSE(kv_type_from_name("tq5"));
  EXPECT_EQ(kv_type_tq_bits(kKvTq3), 3);
  EXPECT_EQ(kv_type_tq_bits(DType::Q8_0), 0);
  // tq ids are outside ggml's range: core/dtype must not know them.
  EXPECT_FALSE(dtype_traits_of(static_cast<uint32_t>(kKvTq4)));
  EXPECT_FALSE(quant_supported(kKvTq4));
  // Bytes: tq4 at D = 128 is 2 + 64 bytes per head = 4.125 bits per element.
  EXPECT_EQ(kv_type_row_bytes(kKvTq4, 2, 128), 2u * 66u);
  EXPECT_EQ(kv_type_row_bytes(kKvTq3, 1, 128), 50u);
  EXPECT_EQ(kv_type_row_bytes(DType::Q8_0, 4, 8), 34u);
  // tqNg: per group of 32 an fp16 scale and 32·N bits: tq4g is q4_0's 4.5 bits per element.
  EXPECT_EQ(kv_type_tq_group(kKvTq4g), kTqGroup);
  EXPECT_EQ(kv_type_tq_group(kKvTq4), 0);
  EXPECT_EQ(kv_type_tq_bits(kKvTq3g), 3);
  EXPECT_EQ(kv_type_row_bytes(kKvTq4g, 3, 64), kv_type_row_bytes(DType::Q4_0, 3, 64));
  EXPECT_EQ(kv_type_row_bytes(kKvTq3g, 1, 64), 28u);
  EXPECT_EQ(kv_type_row_bytes(kKvTq2g, 2, 128), 2u * 40u);
  EXPECT_EQ(TqCodec::for_type(kKvTq3g, 2, 128, 1).row_bytes(), kv_type_row_bytes(kKvTq3g, 2, 128));
  EXPECT_EQ(TqCodec::for_type(kKvTq3g, 2, 128, 1).type(), kKvTq3g);
  // tq3s: half the head in 4-bit groups, half in 2-bit ones: tq3g's 3.5 bits per element.
  EXPECT_EQ(kv_type_row_bytes(kKvTq3s, 1, 64), 28u);
  EXPECT_EQ(kv_type_row_bytes(kKvTq3s, 2, 128), 2u * 56u);
  EXPECT_EQ(TqCodec::for_type(kKvTq3s, 2, 128, 1).row_bytes(), kv_type_row_bytes(kKvTq3s, 2, 128));
  EXPECT_EQ(TqCodec::for_type(kKvTq3s, 2, 128, 1).type(), kKvTq3s);
  EXPECT_EQ(kv_type_tq_bits_lo(kKvTq3s), 2);
  EXPECT_TRUE(kv_type_k_only(kKvTq3s));
  EXPECT_FALSE(kv_type_k_only(kKvTq3g));
}

// tq3s: each half rotated on its own (the halves do not mix: a row that is zero in its second
// half decodes to zero there), the first half coded as tq4g, the second as tq2g (their
// relative squared errors on Gaussian rows: 0.0055-0.0057 and 0.106-0.108, as tq4g's and
// tq2g's at D = 32..64), and the decoded rotated head is the rotation of the decoded row.
TEST(KvCodec, SplitHeadsCodeTheirHalvesApart) {
  for (int64_t D : {64, 128}) {
    const int64_t Hkv = 2, half = D / 2;
    TqCodec c = TqCodec::for_type(kKvTq3s, Hkv, D, 42);
    EXPECT_EQ(c.rotation_block(), half);
    std::vector<uint8_t> buf(c.row_bytes());
    std::vector<float> out(Hkv * D), y(D), ry(D);
    double err[2] = {0, 0}, ref[2] = {0, 0};
    for (int64_t r = 0; r < 40; ++r) {
      auto x = randn(Hkv * D, 500 + r);
      c.encode_row(x.data(), buf.data());
      c.decode_row(buf.data(), out.data());
      for (int64_t i = 0; i < Hkv * D; ++i) {
        const int side = i % D >= half;
        err[side] += (x[i] - double(out[i])) * (x[i] - double(out[i]));
        ref[side] += double(x[i]) * x[i];
      }
      EXPECT_EQ(c.decode_head_rotated(buf.data() + c.head_bytes(), y.data()), 1.0f);
      c.rotate(out.data() + D, ry.data());
      for (int64_t i = 0; i < D; ++i) EXPECT_NEAR(y[i], ry[i], 1e-4 * (1 + std::fabs(ry[i]))) << i;
    }
    std::printf("[  MSE     ] tq3s D %3lld: first half %.3g, second half %.3g\n", static_cast<long long>(D),
                err[0] / ref[0], err[1] / ref[1]);
    EXPECT_LT(err[0] / ref[0], 0.0075) << D;
    EXPECT_LT(err[1] / ref[1], 0.13) << D;
    EXPECT_GT(err[1] / ref[1], 0.05) << D;  // the second half really is 2-bit
    auto x = randn(D, 7);
    std::fill(x.begin() + half, x.end(), 0.0f);
    TqCodec one = TqCodec::for_type(kKvTq3s, 1, D, 3);
    std::vector<uint8_t> b1(one.row_bytes());
    std::vector<float> o1(D);
    one.encode_row(x.data(), b1.data());
    one.decode_row(b1.data(), o1.data());
    for (int64_t i = half; i < D; ++i) EXPECT_EQ(o1[i], 0.0f) << i;
  }
}

// The tqNg codebooks: symmetric, ascending, largest centroid 1 (the encoder's scale search
// assumes it), 2^bits of them.
TEST(KvCodec, GroupCodebooksAreSymmetric) {
  for (int bits : {2, 3, 4}) {
    const auto& c = tq_group_codebook(bits);
    ASSERT_EQ(c.size(), size_t{1} << bits);
    EXPECT_EQ(c.back(), 1.0f);
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], -c[c.size() - 1 - i]) << bits;
    for (size_t i = 1; i < c.size(); ++i) EXPECT_LT(c[i - 1], c[i]) << bits;
  }
  EXPECT_THROW(tq_group_codebook(8), Error);
}

// Lloyd-Max quantizer of N(0,1): Max (1960), Table I.
TEST(KvCodec, LloydMaxGaussianMatchesMax1960) {
  const auto& b1 = lloyd_max_gaussian(1);
  EXPECT_NEAR(b1[1], std::sqrt(2.0 / std::numbers::pi), 1e-9);
  const auto& b2 = lloyd_max_gaussian(2);
  EXPECT_NEAR(b2[2], 0.4528, 1e-4);
  EXPECT_NEAR(b2[3], 1.5104, 1e-4);
  const auto& b3 = lloyd_max_gaussian(3);
  EXPECT_NEAR(b3[4], 0.2451, 1e-4);
  EXPECT_NEAR(b3[5], 0.7560, 1e-4);
  EXPECT_NEAR(b3[6], 1.3439, 1e-4);
  EXPECT_NEAR(b3[7], 2.1519, 1e-4);
  for (int bits : {2, 3, 4, 8}) {
    const auto& b = lloyd_max_gaussian(bits);
    ASSERT_EQ(b.size(), size_t{1} << bits);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_NEAR(b[i], -b[b.size() - 1 - i], 1e-9) << "symmetric";
      if (i) {
        EXPECT_LT(b[i - 1], b[i]);
      }
    }
  }
}

TEST(KvCodec, RotationIsOrthonormal) {
  TqCodec c(4, 1, 64, 7);
  const auto x = randn(64, 1), y = randn(64, 2);
  std::vector<float> rx(64), ry(64), back(64);
  c.rotate(x.data(), rx.data());
  c.rotate(y.data(), ry.data());
  double d0 = 0, d1 = 0;
  for (int i = 0; i < 64; ++i) d0 += double(x[i]) * y[i], d1 += double(rx[i]) * ry[i];
  EXPECT_NEAR(d0, d1, 1e-4);
  c.unrotate(rx.data(), back.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(back[i], x[i], 1e-5);
}

// Relative MSE |x̂ - x|²/|x|² of the round trip. The Lloyd-Max MSE of N(0,1) is 0.1175 (2 bits),
// 0.03454 (3), 0.009497 (4) and ~2.5e-5 (8, Panter-Dite 2.72·4^-8 would be 4.1e-5). Coding
// y·sqrt(D)/|x| by its nearest centroids measured 0.110-0.115 / 0.031-0.033 / 0.0085-0.0093 at
// D 64..256 here; the searched divisor (2-4 bits) 0.092-0.113 / 0.025-0.032 / 0.0065-0.0083.
// Bounds at D >= 64: between the two for 3 and 4 bits (the plain coding fails the 4-bit one);
// 8 bits keeps the plain coding (3.6e-5-4.0e-5). The norm is kept up to γ's fp16 rounding
// (2^-11 relative) and float rounding.
TEST(KvCodec, TqRoundTripErrorAndNorm) {
  const struct {
    int bits;
    double max_rel_mse;
  } cases[] = {{2, 0.118}, {3, 0.0345}, {4, 0.009}, {8, 5e-5}};
  for (int64_t D : {8, 64, 128, 256}) {
    for (const auto& cs : cases) {
      const int64_t Hkv = 3, n_rows = 40;
      TqCodec c(cs.bits, Hkv, D, 42);
      std::vector<uint8_t> buf(c.row_bytes());
      std::vector<float> out(Hkv * D);
      double err = 0, ref = 0;
      for (int64_t r = 0; r < n_rows; ++r) {
        auto x = randn(Hkv * D, 100 + r);
        if (r % 4 == 0) x[r % D] *= 30.0f;  // an outlier channel, as real K rows have
        if (r % 5 == 0)
          for (auto& v : x) v *= 1e-3f;  // small rows: γ stays a normal fp16
        c.encode_row(x.data(), buf.data());
        c.decode_row(buf.data(), out.data());
        for (int64_t h = 0; h < Hkv; ++h) {
          double n0 = 0, n1 = 0;
          for (int64_t i = 0; i < D; ++i) {
            const double a = x[h * D + i], b = out[h * D + i];
            n0 += a * a;
            n1 += b * b;
            err += (a - b) * (a - b) / 1.0;
          }
          ref += n0;
          EXPECT_NEAR(std::sqrt(n1) / std::sqrt(n0), 1.0, 1e-3) << "norm: bits " << cs.bits << " D " << D;
        }
      }
      // D = 8 is far from the Gaussian limit (few coordinates): only a loose bound there.
      const double bound = D >= 64 ? cs.max_rel_mse : 2.5 * cs.max_rel_mse;
      EXPECT_LT(err / ref, bound) << "bits " << cs.bits << " D " << D;
    }
  }
}

// The one-norm encoder searches its divisor: every head's code is at least as close in angle
// to the rotated head as the nearest-centroid code of y·sqrt(D)/|x| (a divisor it tries), and
// closer on average (the negative control: the plain coding alone gains nothing).
TEST(KvCodec, TqCodeBeatsThePlainNearestCode) {
  for (int bits : {2, 3, 4}) {
    const int64_t Hkv = 2, D = 64;
    TqCodec c(bits, Hkv, D, 7);
    const std::vector<float>& cb = c.codebook();
    std::vector<uint8_t> buf(c.row_bytes());
    std::vector<float> y(D), code(D);
    double gain = 0;
    int heads = 0;
    for (int r = 0; r < 30; ++r) {
      auto x = randn(Hkv * D, 500 + r);
      if (r % 3 == 0) x[r % D] *= 20.0f;
      c.encode_row(x.data(), buf.data());
      for (int64_t h = 0; h < Hkv; ++h) {
        c.rotate(x.data() + h * D, y.data());
        c.decode_head_rotated(buf.data() + h * c.head_bytes(), code.data());
        double yy = 0;
        for (float v : y) yy += static_cast<double>(v) * v;
        auto cosine = [&](const std::vector<float>& k) {
          double yk = 0, kk = 0;
          for (int64_t i = 0; i < D; ++i)
            yk += static_cast<double>(y[i]) * k[i], kk += static_cast<double>(k[i]) * k[i];
          return yk / std::sqrt(yy * kk);
        };
        std::vector<float> plain(D);
        for (int64_t i = 0; i < D; ++i) {
          const double u = y[i] * std::sqrt(static_cast<double>(D) / yy);
          size_t best = 0;
          for (size_t k = 1; k < cb.size(); ++k)
            if (std::fabs(u - cb[k]) < std::fabs(u - cb[best])) best = k;
          plain[i] = cb[best];
        }
        const double cs = cosine(code), cp = cosine(plain);
        EXPECT_GE(cs, cp - 1e-6) << "bits " << bits << " row " << r << " head " << h;
        gain += cs - cp;
        ++heads;
      }
    }
    std::printf("[  COS     ] tq%d D 64: mean cosine gain over the plain code %.3g\n", bits, gain / heads);
    EXPECT_GT(gain / heads, 1e-4) << bits;
  }
}

// tqNg on Gaussian rows with outliers and tiny rows: below tqN's error at every width (the
// searched scale per 32 coordinates; measured at D = 128: 2 bits 0.090, 3 bits 0.023, 4 bits
// 0.0054 relative squared error, against tqN's 0.118 / 0.032 / 0.0086), and the decoded
// rotated head times γ = 1 is the rotation of the decoded row.
TEST(KvCodec, GroupedRoundTripBeatsOneNormPerHead) {
  const struct {
    int bits;
    double max_rel_mse;
  } cases[] = {{2, 0.12}, {3, 0.030}, {4, 0.0075}};
  for (int64_t D : {32, 64, 128}) {
    for (const auto& cs : cases) {
      const int64_t Hkv = 3, n_rows = 40;
      TqCodec g(cs.bits, Hkv, D, 42, kTqGroup), plain(cs.bits, Hkv, D, 42);
      std::vector<uint8_t> buf(g.row_bytes()), pbuf(plain.row_bytes());
      std::vector<float> out(Hkv * D), pout(Hkv * D), y(D), ry(D);
      double err = 0, perr = 0, ref = 0;
      for (int64_t r = 0; r < n_rows; ++r) {
        auto x = randn(Hkv * D, 300 + r);
        if (r % 4 == 0) x[r % D] *= 30.0f;
        if (r % 5 == 0)
          for (auto& v : x) v *= 1e-3f;
        g.encode_row(x.data(), buf.data());
        g.decode_row(buf.data(), out.data());
        plain.encode_row(x.data(), pbuf.data());
        plain.decode_row(pbuf.data(), pout.data());
        for (int64_t i = 0; i < Hkv * D; ++i) {
          err += (x[i] - double(out[i])) * (x[i] - double(out[i]));
          perr += (x[i] - double(pout[i])) * (x[i] - double(pout[i]));
          ref += double(x[i]) * x[i];
        }
        EXPECT_EQ(g.decode_head_rotated(buf.data() + g.head_bytes(), y.data()), 1.0f);
        g.rotate(out.data() + D, ry.data());
        for (int64_t i = 0; i < D; ++i) EXPECT_NEAR(y[i], ry[i], 1e-4 * (1 + std::fabs(ry[i]))) << i;
      }
      std::printf("[  MSE     ] tq%dg D %3lld: %.3g (tq%d %.3g)\n", cs.bits, static_cast<long long>(D), err / ref,
                  cs.bits, perr / ref);
      EXPECT_LT(err / ref, cs.max_rel_mse) << "bits " << cs.bits << " D " << D;
      EXPECT_LT(err, perr) << "bits " << cs.bits << " D " << D;
    }
  }
}

// Negative control: a group's scale is read where the encoder wrote it. Swapping the two
// groups' scales of a head (D = 64) must move the decoded row far more than coding did.
TEST(KvCodec, GroupScalesArePerGroup) {
  TqCodec g(4, 1, 64, 5, kTqGroup);
  auto x = randn(64, 9);
  std::vector<uint8_t> buf(g.row_bytes());
  g.encode_row(x.data(), buf.data());
  std::vector<float> a(64), b(64);
  g.decode_row(buf.data(), a.data());
  std::swap(buf[0], buf[18]);
  std::swap(buf[1], buf[19]);
  buf[19] ^= 0x08;  // and change the exponent, so equal scales cannot hide the swap
  g.decode_row(buf.data(), b.data());
  double e0 = 0, e1 = 0, n = 0;
  for (int64_t i = 0; i < 64; ++i) {
    e0 += (a[i] - double(x[i])) * (a[i] - double(x[i]));
    e1 += (b[i] - double(a[i])) * (b[i] - double(a[i]));
    n += double(x[i]) * x[i];
  }
  EXPECT_GT(e1, 10 * e0);
}

TEST(KvCodec, TqZeroRowDecodesToZero) {
  for (int64_t group : {int64_t{0}, kTqGroup}) {
    TqCodec c(3, 2, 32, 1, group);
    std::vector<float> x(64, 0.0f), out(64, 1.0f);
    std::vector<uint8_t> buf(c.row_bytes());
    c.encode_row(x.data(), buf.data());
    c.decode_row(buf.data(), out.data());
    for (float v : out) EXPECT_EQ(v, 0.0f);
  }
}

TEST(KvCodec, TqRejectsBadGeometry) {
  EXPECT_THROW(TqCodec(4, 1, 96, 0), Error);
  EXPECT_THROW(TqCodec(4, 1, 4, 0), Error);
  EXPECT_THROW(TqCodec(5, 1, 64, 0), Error);
  EXPECT_THROW(TqCodec(8, 1, 64, 0, kTqGroup), Error);     // no 8-bit grouped codebook
  EXPECT_THROW(TqCodec(4, 1, 16, 0, kTqGroup), Error);     // a head smaller than a group
  EXPECT_THROW(TqCodec(4, 1, 64, 0, 16), Error);           // only groups of kTqGroup
  EXPECT_THROW(TqCodec(4, 1, 64, 0, 0, 2), Error);         // split heads are grouped
  EXPECT_THROW(TqCodec(4, 1, 32, 0, kTqGroup, 2), Error);  // a half smaller than a group
  EXPECT_THROW(TqCodec(4, 1, 64, 0, kTqGroup, 8), Error);
  EXPECT_THROW(TqCodec::for_type(DType::Q4_0, 1, 64, 0), Error);
}

TEST(KvCodec, PolicyAutoAsymmetricAndFallbacks) {
  std::vector<std::string> notes;
  KvCacheOptions o;
  o.type_k = kKvTq4;
  o.type_v = kKvTq3;
  // GQA 8 -> K raised to q8_0, V kept.
  auto r = kv_cache_resolve(o, KvGeometry{2, 32, 4, 128, 128}, &notes);
  EXPECT_EQ(r.type_k, DType::Q8_0);
  EXPECT_EQ(r.type_v, kKvTq3);
  EXPECT_EQ(notes.size(), 1u);
  // Turned off: kept.
  o.auto_asymmetric = false;
  notes.clear();
  r = kv_cache_resolve(o, KvGeometry{2, 32, 4, 128, 128}, &notes);
  EXPECT_EQ(r.type_k, kKvTq4);
  EXPECT_TRUE(notes.empty());
  // GQA 4: no change.
  o.auto_asymmetric = true;
  r = kv_cache_resolve(o, KvGeometry{2, 16, 4, 128, 128}, &notes);
  EXPECT_EQ(r.type_k, kKvTq4);
  // q8_0 K is already 8 bits: no note.
  o.type_k = DType::Q8_0;
  notes.clear();
  r = kv_cache_resolve(o, KvGeometry{2, 32, 4, 128, 128}, &notes);
  EXPECT_TRUE(notes.empty());
  // Head dim 96 is not a power of two: tq -> q8_0; MLA's 576-wide K likewise.
  o.type_k = o.type_v = kKvTq4;
  notes.clear();
  r = kv_cache_resolve(o, KvGeometry{2, 4, 4, 96, 96}, &notes);
  EXPECT_EQ(r.type_k, DType::Q8_0);
  EXPECT_EQ(r.type_v, DType::Q8_0);
  EXPECT_EQ(notes.size(), 2u);
  // tqNg needs a head of at least one group of 32: D = 16 -> q8_0 (tqN keeps D = 16).
  o.type_k = kKvTq4g;
  o.type_v = kKvTq4;
  notes.clear();
  r = kv_cache_resolve(o, KvGeometry{2, 4, 4, 16, 16}, &notes);
  EXPECT_EQ(r.type_k, DType::Q8_0);
  EXPECT_EQ(r.type_v, kKvTq4);
  EXPECT_EQ(notes.size(), 1u);
  // tq3s is a K type: V takes tq3g (the same bits), with a note; it needs D >= 64 (two halves
  // of a group): D = 32 -> q8_0.
  o.type_k = o.type_v = kKvTq3s;
  notes.clear();
  r = kv_cache_resolve(o, KvGeometry{2, 4, 4, 64, 64}, &notes);
  EXPECT_EQ(r.type_k, kKvTq3s);
  EXPECT_EQ(r.type_v, kKvTq3g);
  EXPECT_EQ(notes.size(), 1u);
  r = kv_cache_resolve(o, KvGeometry{2, 4, 4, 32, 32}, &notes);
  EXPECT_EQ(r.type_k, DType::Q8_0);
  // A 24-element row cannot hold q8_0 blocks: -> f16.
  o.type_k = o.type_v = DType::Q4_0;
  r = kv_cache_resolve(o, KvGeometry{2, 2, 2, 12, 12}, &notes);
  EXPECT_EQ(r.type_k, DType::F16);
  EXPECT_EQ(r.type_v, DType::F16);
  // stories260K's geometry (H 8, Hkv 4, D 8): the 32-element row holds one q8_0 block.
  o.type_k = DType::Q8_0;
  o.type_v = kKvTq4;
  r = kv_cache_resolve(o, KvGeometry{5, 8, 4, 8, 8}, &notes);
  EXPECT_EQ(r.type_k, DType::Q8_0);
  EXPECT_EQ(r.type_v, kKvTq4);
}

TEST(KvCodec, CacheSizes) {
  KvCacheOptions o;
  o.n_ctx = 16;
  o.type_k = DType::Q8_0;
  o.type_v = kKvTq4;
  KvCache kv(KvGeometry{3, 16, 4, 128, 128}, o);
  EXPECT_EQ(kv.k_row_bytes(), 4u * 4u * 34u);
  EXPECT_EQ(kv.v_row_bytes(), 4u * 66u);
  EXPECT_EQ(kv.bytes_per_token(), 3u * (4u * 4u * 34u + 4u * 66u));
  ASSERT_NE(kv.v_codec(), nullptr);
  EXPECT_EQ(kv.k_codec(), nullptr);
}

}  // namespace
}  // namespace sluice
