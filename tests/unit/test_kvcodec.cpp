// tests/unit/test_kvcodec: the KV codec table, the Lloyd-Max codebooks, the Walsh-Hadamard
// rotation and the tq round trip (error per bit width, norm preserved), and the cache policy
// (auto-asymmetric K, fallbacks for head dims the codecs cannot take).
#include <gtest/gtest.h>

#include <cmath>
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
  for (const char* n : {"f32", "f16", "bf16", "q8_0", "q4_0", "tq2", "tq3", "tq4", "tq8"}) {
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
// 0.03454 (3), 0.009497 (4) and ~2.5e-5 (8, Panter-Dite 2.72·4^-8 would be 4.1e-5); the matched
// norm adds a little on top. Bounds: those values + ~25% headroom for D = 128 sampling noise.
// The norm is kept up to γ's fp16 rounding (2^-11 relative) and float rounding.
TEST(KvCodec, TqRoundTripErrorAndNorm) {
  const struct {
    int bits;
    double max_rel_mse;
  } cases[] = {{2, 0.15}, {3, 0.045}, {4, 0.013}, {8, 1e-4}};
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

TEST(KvCodec, TqZeroRowDecodesToZero) {
  TqCodec c(3, 2, 32, 1);
  std::vector<float> x(64, 0.0f), out(64, 1.0f);
  std::vector<uint8_t> buf(c.row_bytes());
  c.encode_row(x.data(), buf.data());
  c.decode_row(buf.data(), out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(KvCodec, TqRejectsBadGeometry) {
  EXPECT_THROW(TqCodec(4, 1, 96, 0), Error);
  EXPECT_THROW(TqCodec(4, 1, 4, 0), Error);
  EXPECT_THROW(TqCodec(5, 1, 64, 0), Error);
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
