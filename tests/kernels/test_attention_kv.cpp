// tests/kernels/test_attention_kv: cpu attention over every KV codec (f16, bf16, q8_0, q4_0,
// tq2/3/4/8, tq2g/3g/4g, asymmetric K/V, GQA, split-KV decode) against the ref oracle on the same stored
// cache, plus a loose check of each codec against attention over the unquantized cache, a
// negative control, and bitwise determinism across thread counts. Legend: T tokens, H query
// heads, Hkv KV heads, D head dim, N cached positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/ref/ref_backend.h"
#include "core/cpu_features.h"
#include "kernels/kernel_test_util.h"
#include "kvcodec/kvcodec.h"
#include "memory/kv_cache.h"

namespace sluice::test_attention_kv {
namespace {

using test::available_isas;
using test::nmse;
using test::randn;

// cpu vs ref on the same stored rows: both see the same decoded values up to float rounding.
// For tq the cpu works in the rotated space (query rotated in float32, V rotated back in
// float32: a few ulps per element for log2(D) butterfly stages) while ref decodes each row
// in double; observed ≤ 1e-12. Split-KV merges (m, l, acc) of 128/512-position splits with one
// extra exp per split. 1e-10 is the kernel-parity policy (test_backend_parity.cpp), and a
// one-position causal shift gives > 1e-4 (negative control below).
constexpr double kTol = 1e-10;


struct Case {
  int64_t T, H, Hkv, D, N, pos0;
};

// A cache of N positions filled through KvCache::store (the path the models use), and q.
struct AttnSetup {
  std::unique_ptr<KvCache> kv;
  std::vector<float> q, kf, vf;
  AttentionArgs args;
};

AttnSetup make(const Case& c, DType kt, DType vt, uint32_t seed, Backend& store_be) {
  AttnSetup s;
  KvCacheOptions o;
  o.n_ctx = c.N;
  o.type_k = kt;
  o.type_v = vt;
  o.auto_asymmetric = false;
  // The kernels over the rows as stored: q8_0/q4_0 rows unrotated, so q needs no rotation and
  // the error against the f32 cache is the codec's alone (rotation: test_kv_rotation.cpp).
  o.rotation = KvCacheOptions::Rotation::off;
  o.k_mean = KvCacheOptions::KMean::off;  // likewise: K rows as given (mean removal: test_kv_rotation.cpp)
  s.kv = std::make_unique<KvCache>(KvGeometry{1, c.H, c.Hkv, c.D, c.D}, o);
  EXPECT_EQ(s.kv->type_k(), kt);
  EXPECT_EQ(s.kv->type_v(), vt);
  s.kf = randn(static_cast<size_t>(c.N * c.Hkv * c.D), seed + 1);
  s.vf = randn(static_cast<size_t>(c.N * c.Hkv * c.D), seed + 2);
  for (int64_t p = 0; p < c.N; ++p)
    s.kv->store(store_be, 0, p, s.kf.data() + p * c.Hkv * c.D, s.vf.data() + p * c.Hkv * c.D);
  s.q = randn(static_cast<size_t>(c.T * c.H * c.D), seed, 2.0f);  // ×2: sharper softmax
  AttentionArgs& a = s.args;
  a = s.kv->attention_args(0);
  a.q = s.q.data();
  a.n_tok = c.T;
  a.n_head = c.H;
  a.n_kv = c.N;
  a.pos0 = c.pos0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  return s;
}

std::vector<float> run(Backend& b, AttentionArgs a) {
  std::vector<float> out(static_cast<size_t>(a.n_tok * a.n_head * a.head_dim_v), NAN);
  a.out = out.data();
  b.attention(a);
  return out;
}


const Case kCases[] = {
    {1, 8, 2, 64, 37, 36},        // decode, GQA 4
    {5, 4, 4, 32, 70, 65},        // small prefill continuation
    {1, 16, 2, 128, 1300, 1299},  // decode, split-KV (11 splits of 128: few KV groups), GQA 8
    {3, 6, 1, 128, 600, 597},     // T·H < 256: split-KV on a 3-token batch, MQA
    {4, 32, 8, 64, 1100, 1096},   // T·Hkv = 32 KV groups: splits of 512, GQA 4
    {2, 8, 4, 8, 40, 38},         // stories260K-like: D = 8 (q8_0/q4_0 blocks span heads)
};

const std::pair<DType, DType> kTypePairs[] = {
    {DType::F16, DType::F16}, {DType::BF16, DType::BF16}, {DType::Q8_0, DType::Q8_0}, {DType::Q4_0, DType::Q4_0},
    {kKvTq2, kKvTq2},         {kKvTq3, kKvTq3},           {kKvTq4, kKvTq4},           {kKvTq8, kKvTq8},
    {DType::Q8_0, kKvTq4},    {DType::Q8_0, kKvTq3},      {kKvTq4, DType::F16},       {DType::F32, kKvTq2},
    {kKvTq4g, kKvTq4g},       {kKvTq3g, kKvTq3g},         {kKvTq2g, kKvTq2g},         {kKvTq4g, kKvTq3g},
    {DType::Q8_0, kKvTq4g},   {kKvTq3g, DType::F16},      {kKvTq3s, kKvTq3},
};

TEST(AttentionKv, CpuMatchesRefForEveryCodec) {
  auto ref = make_ref_backend();
  std::vector<std::pair<CpuIsa, std::unique_ptr<Backend>>> cpus;
  for (CpuIsa isa : available_isas()) cpus.emplace_back(isa, make_cpu_backend(2, isa));
  for (const auto& c : kCases)
    for (auto [kt, vt] : kTypePairs) {
      if ((kt == DType::Q8_0 || kt == DType::Q4_0) && (c.Hkv * c.D) % 32) continue;
      if (kv_type_tq_group(kt) > c.D || kv_type_tq_group(vt) > c.D) continue;  // tqNg needs D >= 32
      if (kv_type_k_only(kt) && c.D < 2 * kTqGroup) continue;                  // tq3s: D >= 64
      // The oracle once per case (the float64 ref is most of this test's time), each ISA against it.
      const AttnSetup s = make(c, kt, vt, 11, *ref);
      const std::vector<float> want = run(*ref, s.args);
      for (const auto& [isa, cpu] : cpus) {
        const double e = nmse(want, run(*cpu, s.args));
        EXPECT_LE(e, test::attention_tol(isa, vt))
            << cpu_isa_name(isa) << " K " << kv_type_name(kt) << " V " << kv_type_name(vt) << " T=" << c.T
            << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " N=" << c.N;
      }
    }
}

// Each codec against attention over the f32 cache of the same values: the codec's own
// error. Observed (seeded, so stable): f16 2e-7, q8_0 1.2e-4, tq8 1.3e-4, q4_0 0.024,
// tq4 0.033, tq3 0.12, tq2 0.40; bounds ~2.5x those. On iid Gaussian rows q4_0 (4.5 bits,
// one absmax scale per 32) beats tq4 (4.125 bits, one norm per 128-dim head), as in the
// issue's KLD figures (q4_0 0.0081 vs turbo4 0.0096); tq's rotation pays off on rows with
// outlier channels, which iid data does not have.
TEST(AttentionKv, CodecErrorIsOrderedByBits) {
  auto ref = make_ref_backend();
  auto cpu = make_cpu_backend(2);
  const Case c{2, 8, 2, 128, 300, 298};
  const AttnSetup base = make(c, DType::F32, DType::F32, 5, *ref);
  const auto y0 = run(*ref, base.args);
  const struct {
    DType k, v;
    double bound;
  } cases[] = {{DType::F16, DType::F16, 1e-6}, {DType::Q8_0, DType::Q8_0, 5e-4}, {kKvTq8, kKvTq8, 5e-4},
               {kKvTq4, kKvTq4, 0.08},         {DType::Q4_0, DType::Q4_0, 0.06}, {kKvTq3, kKvTq3, 0.3},
               {kKvTq2, kKvTq2, 0.8}};
  double prev = 0;
  for (const auto& cs : cases) {
    const AttnSetup s = make(c, cs.k, cs.v, 5, *ref);
    const double e = nmse(y0, run(*cpu, s.args));
    std::printf("[  NMSE    ] attention vs f32 cache, %-5s %.3g\n", std::string(kv_type_name(cs.k)).c_str(), e);
    EXPECT_LE(e, cs.bound) << kv_type_name(cs.k);
    if (kv_type_is_tq(cs.k) && kv_type_tq_bits(cs.k) < 8) {
      EXPECT_GT(e, prev) << "fewer bits, larger error";
    }
    if (kv_type_is_tq(cs.k)) prev = e;
  }
  // The grouped codecs on the same data: fewer bits, larger error, and each tqNg (one scale
  // per 32 rotated coordinates, 0.375 bits more per element at D = 128) below tqN. Observed:
  // tq4g 0.0225, tq3g 0.0888, tq2g 0.317 (tq4 0.033, tq3 0.12, tq2 0.40); bounds ~1.5x those.
  const struct {
    DType grouped, plain;
    double bound;
  } grouped[] = {{kKvTq4g, kKvTq4, 0.035}, {kKvTq3g, kKvTq3, 0.13}, {kKvTq2g, kKvTq2, 0.45}};
  prev = 0;
  for (const auto& cs : grouped) {
    const double eg = nmse(y0, run(*cpu, make(c, cs.grouped, cs.grouped, 5, *ref).args));
    const double ep = nmse(y0, run(*cpu, make(c, cs.plain, cs.plain, 5, *ref).args));
    std::printf("[  NMSE    ] attention vs f32 cache, %-5s %.3g\n", std::string(kv_type_name(cs.grouped)).c_str(), eg);
    EXPECT_LE(eg, cs.bound) << kv_type_name(cs.grouped);
    EXPECT_LT(eg, ep) << kv_type_name(cs.grouped);
    EXPECT_GT(eg, prev) << "fewer bits, larger error";
    prev = eg;
  }
}

TEST(AttentionKv, NegativeControlCausalShift) {
  auto ref = make_ref_backend();
  auto cpu = make_cpu_backend(2);
  const AttnSetup s = make({1, 16, 2, 128, 1300, 1299}, kKvTq4, kKvTq3, 3, *ref);
  AttentionArgs shifted = s.args;
  shifted.pos0 -= 1;
  EXPECT_GT(nmse(run(*ref, s.args), run(*cpu, shifted)), 1e4 * kTol);
}

TEST(AttentionKv, SplitKvIsDeterministicAcrossThreads) {
  auto ref = make_ref_backend();
  auto c1 = make_cpu_backend(1), c2 = make_cpu_backend(2), c3 = make_cpu_backend(3);
  for (auto [kt, vt] : {std::pair{DType::F16, DType::F16}, std::pair{DType::Q8_0, kKvTq4}}) {
    const AttnSetup s = make({1, 16, 2, 128, 1300, 1299}, kt, vt, 9, *ref);
    const auto y1 = run(*c1, s.args), y2 = run(*c2, s.args), y3 = run(*c3, s.args);
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
    EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4));
  }
}

// A row's result does not depend on its batch: a 39-token batch (312 rows: tiles of 4 tokens,
// each row folding its 9 splits as it goes, the last tile short) against each token alone (8
// rows: the splits run in parallel and are folded after), bitwise. Before the splits had one order for both, the batch's rows attended
// in one pass and differed from the token alone in the last bits, so a prompt-cache hit (a few
// new tokens) and the same prompt evaluated whole could pick different greedy tokens.
TEST(AttentionKv, ARowGivesTheSameBitsInAnyBatch) {
  auto ref = make_ref_backend();
  auto cpu = make_cpu_backend(2);
  for (auto [kt, vt] : {std::pair{DType::F16, DType::F16}, std::pair{DType::Q8_0, kKvTq4},
                        std::pair{DType::F32, DType::F32}, std::pair{DType::Q4_0, DType::Q8_0}}) {
    const Case c{39, 8, 2, 64, 1100, 1061};
    const AttnSetup s = make(c, kt, vt, 17, *ref);
    const auto batch = run(*cpu, s.args);
    const size_t row = static_cast<size_t>(c.H * c.D);
    for (int64_t t : {0, 21, 36, 38}) {
      AttentionArgs one = s.args;
      one.n_tok = 1;
      one.q = s.args.q + t * c.H * c.D;
      one.pos0 = s.args.pos0 + t;
      const auto alone = run(*cpu, one);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * row, row * 4))
          << kv_type_name(kt) << "/" << kv_type_name(vt) << " token " << t;
    }
  }
}

TEST(AttentionKv, TqWithoutCodecIsRejected) {
  auto ref = make_ref_backend();
  auto cpu = make_cpu_backend(1);
  AttnSetup s = make({1, 4, 2, 64, 10, 9}, kKvTq4, kKvTq4, 1, *ref);
  s.args.k_tq = nullptr;
  std::vector<float> out(4 * 64);
  s.args.out = out.data();
  EXPECT_ANY_THROW(cpu->attention(s.args));
  EXPECT_ANY_THROW(ref->attention(s.args));
}

}  // namespace
}  // namespace sluice::test_attention_kv
