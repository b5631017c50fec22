// tests/kernels/test_kv_rotation: the KV cache's Hadamard rotation (kvcodec.h KvRotation,
// memory/kv_cache.h) — the reference is the normalized Walsh-Hadamard matrix and orthogonal,
// the cpu kernels at every ISA level equal it to float rounding, a rotated f32 cache gives
// the unrotated result (in attention and through a whole model), a rotated q4_0 cache is
// closer to the exact result than an unrotated one on keys with outlier channels, and
// rotating K without the queries breaks attention (the negative control).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kv_cache_test_util.h"
#include "kvcodec/kvcodec.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "test_util.h"

namespace sluice::test_kv_rotation {
namespace {

using test::nmse;
using test::randn;
using Rotation = KvCacheOptions::Rotation;

// Sylvester's H_n: H[i][j] = (-1)^popcount(i & j).
double hadamard_entry(int64_t i, int64_t j) { return std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0; }

TEST(KvRotation, RefIsTheNormalizedHadamardMatrix) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{7}}) {
    const int64_t B = 16;
    const KvRotation r = kv_rotation_make(B, seed);
    EXPECT_EQ(r.signs.empty(), seed == 0);
    const auto x = randn(2 * B, 3);
    std::vector<float> y = x, z = x;
    kv_rotate_ref(r, y.data(), 2 * B, false);
    kv_rotate_ref(r, z.data(), 2 * B, true);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < B; ++i) {
        double fwd = 0, inv = 0;  // (H·diag(s)·x)_i / sqrt(B) and (diag(s)·H·x)_i / sqrt(B)
        for (int64_t j = 0; j < B; ++j) {
          const double s_j = r.signs.empty() ? 1.0 : r.signs[j], s_i = r.signs.empty() ? 1.0 : r.signs[i];
          fwd += hadamard_entry(i, j) * s_j * x[b * B + j];
          inv += s_i * hadamard_entry(i, j) * x[b * B + j];
        }
        // Float outputs of a double computation: within one float rounding of |x|·sqrt(B).
        EXPECT_NEAR(y[b * B + i], fwd / std::sqrt(double(B)), 1e-6) << "seed " << seed << " i " << i;
        EXPECT_NEAR(z[b * B + i], inv / std::sqrt(double(B)), 1e-6) << "seed " << seed << " i " << i;
      }
  }
}

TEST(KvRotation, RoundTripAndNormArePreserved) {
  for (int64_t B : {2, 8, 64, 256})
    for (uint64_t seed : {uint64_t{0}, uint64_t{11}}) {
      const KvRotation r = kv_rotation_make(B, seed);
      const auto x = randn(static_cast<size_t>(4 * B), 5);
      std::vector<float> y = x;
      kv_rotate_ref(r, y.data(), 4 * B, false);
      double nx = 0, ny = 0;
      for (size_t i = 0; i < x.size(); ++i) nx += double(x[i]) * x[i], ny += double(y[i]) * y[i];
      EXPECT_NEAR(ny / nx, 1.0, 1e-6) << "B " << B;  // orthonormal, up to the float outputs
      kv_rotate_ref(r, y.data(), 4 * B, true);
      EXPECT_LT(nmse(x, y), 1e-13) << "B " << B << " seed " << seed;  // R^T·R = I
    }
  EXPECT_ANY_THROW(kv_rotation_make(48, 0));
  const KvRotation r = kv_rotation_make(64, 0);
  std::vector<float> x(96);
  EXPECT_ANY_THROW(kv_rotate_ref(r, x.data(), 96, false));  // not whole blocks
}

// The fast kernels use the reference's butterflies in float, the reference double: NMSE
// 5e-15..7e-15 measured (B 64 and 256, every level); 1e-12 is a few float roundings per
// butterfly stage away from a wrong pairing, which gives ~1.
TEST(KvRotation, CpuMatchesRefAtEveryIsa) {
  auto ref = make_backend("ref", 1);
  for (CpuIsa isa : test::available_isas()) {
    auto cpu = make_cpu_backend(1, isa);
    for (int64_t B : {2, 4, 8, 16, 32, 64, 128, 256})
      for (uint64_t seed : {uint64_t{0}, uint64_t{9}})
        for (bool inverse : {false, true}) {
          const KvRotation r = kv_rotation_make(B, seed);
          const auto x = randn(static_cast<size_t>(3 * B), 17, 3.0f);
          std::vector<float> a = x, b = x;
          ref->kv_rotate(r, a.data(), 3 * B, inverse);
          cpu->kv_rotate(r, b.data(), 3 * B, inverse);
          EXPECT_LT(nmse(a, b), 1e-12) << cpu_isa_name(isa) << " B " << B << " seed " << seed << " inv " << inverse;
        }
  }
}

using Problem = test::KvProblem;

Problem outlier_problem(uint32_t seed) {
  Problem p;
  p.q = randn(static_cast<size_t>(p.N * p.H * p.D), seed, 0.5f);
  p.k = randn(static_cast<size_t>(p.N * p.Hkv * p.D), seed + 1);
  p.v = randn(static_cast<size_t>(p.N * p.Hkv * p.D), seed + 2);
  // Trained models' keys have a few channels far larger than the rest, at every position
  // (what the rotation is for): channels 5 and 38 of every KV head at ~15x, with an offset.
  for (int64_t i = 0; i < p.N * p.Hkv; ++i) {
    p.k[i * p.D + 5] = 15.0f + 4.0f * p.k[i * p.D + 5];
    p.k[i * p.D + 38] = -12.0f + 4.0f * p.k[i * p.D + 38];
    p.v[i * p.D + 20] *= 8.0f;
  }
  return p;
}

// One layer's attention as models/blocks' attend_batch runs it over a cache: store the rows
// one position at a time, then test::attend_stored.
std::vector<float> attend_cache(Backend& be, const Problem& p, const KvCacheOptions& opt, bool rotate_q = true) {
  KvCacheOptions o = opt;
  o.n_ctx = p.N;
  o.auto_asymmetric = false;
  KvCache kv(KvGeometry{1, p.H, p.Hkv, p.D, p.D}, o);
  for (int64_t t = 0; t < p.N; ++t) kv.store(be, 0, t, p.k.data() + t * p.Hkv * p.D, p.v.data() + t * p.Hkv * p.D);
  return test::attend_stored(be, p, kv, rotate_q);
}

KvCacheOptions cache(DType t, Rotation rot, bool signs = false) {
  KvCacheOptions o;
  o.type_k = o.type_v = t;
  o.rotation = rot;
  o.rotation_signs = signs;
  return o;
}

TEST(KvRotation, PolicyRotatesOnlyBlockQuantizedSidesWithWholeBlocks) {
  auto heads = [](DType k, DType v, int64_t D, Rotation rot) {
    KvCacheOptions o = cache(k, rot);
    o.type_v = v;
    o.n_ctx = 8;
    o.auto_asymmetric = false;
    KvCache kv(KvGeometry{1, 4, 4, D, D}, o);  // rows of 4·D: whole q4_0 blocks for every D below
    return std::pair{kv.k_rotation().block, kv.v_rotation().block};
  };
  EXPECT_EQ(heads(DType::Q4_0, DType::Q8_0, 64, Rotation::quantized), (std::pair<int64_t, int64_t>{64, 64}));
  EXPECT_EQ(heads(DType::Q4_0, DType::Q8_0, 128, Rotation::quantized), (std::pair<int64_t, int64_t>{64, 64}));
  EXPECT_EQ(heads(DType::Q8_0, DType::F16, 64, Rotation::quantized), (std::pair<int64_t, int64_t>{64, 0}));
  EXPECT_EQ(heads(DType::Q8_0, kKvTq4, 64, Rotation::quantized), (std::pair<int64_t, int64_t>{64, 0}));
  // Not a multiple of 64: the largest power-of-two block dividing D, down to 16.
  EXPECT_EQ(heads(DType::Q4_0, DType::Q4_0, 96, Rotation::quantized), (std::pair<int64_t, int64_t>{32, 32}));
  EXPECT_EQ(heads(DType::Q4_0, DType::Q4_0, 80, Rotation::quantized), (std::pair<int64_t, int64_t>{16, 16}));
  EXPECT_EQ(heads(DType::Q4_0, DType::Q4_0, 72, Rotation::quantized), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(heads(DType::Q4_0, DType::Q4_0, 64, Rotation::off), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(heads(DType::F16, kKvTq4, 64, Rotation::all), (std::pair<int64_t, int64_t>{64, 0}));
}

// Orthogonal, so exact in real arithmetic: an f32 cache differs from the unrotated one only
// by the float rounding of the rotations (NMSE measured 3.6e-15 ref, 4.7e-14 cpu), f16 by the
// f16 rounding of different stored values (1.0e-7..1.3e-7 rotated; the unrotated f16 cache is
// itself 1.1e-7 from f32).
TEST(KvRotation, UnquantizedCacheResultIsUnchanged) {
  const Problem p = outlier_problem(21);
  for (const char* name : {"ref", "cpu"}) {
    auto be = make_backend(name, 2);
    const auto base32 = attend_cache(*be, p, cache(DType::F32, Rotation::off));
    for (bool signs : {false, true}) {
      EXPECT_LT(nmse(base32, attend_cache(*be, p, cache(DType::F32, Rotation::all, signs))), 1e-12) << name;
      EXPECT_LT(nmse(base32, attend_cache(*be, p, cache(DType::F16, Rotation::all, signs))), 1e-6) << name;
    }
  }
}

// ref (the oracle: kvcodec's double rotation, decodes the cache, float64 sums) against cpu
// (float rotation, fused q4_0/q8_0 kernels, float32 sums) over caches each rotated by its own
// backend: NMSE 1.6e-14 measured for both types with float V sums (1.8e-10 with the integer
// ones, parity_tolerances.h's kTolAttentionIntV).
TEST(KvRotation, CpuMatchesRefOnRotatedCaches) {
  const Problem p = outlier_problem(33);
  auto ref = make_backend("ref", 1);
  auto cpu = make_backend("cpu", 2);
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    const auto a = attend_cache(*ref, p, cache(t, Rotation::quantized));
    const auto b = attend_cache(*cpu, p, cache(t, Rotation::quantized));
    EXPECT_LT(nmse(a, b), test::attention_tol(cpu_isa_select(), t)) << kv_type_name(t);
  }
}

// What the rotation is for. Measured NMSE against the f32 cache on this problem: q4_0
// unrotated 4.5e-2, rotated 9.4e-3 (9.2e-3 with the random signs), 4.8x better; q8_0 2.1e-4
// -> 4.0e-5 (3.8e-5), 5.3x. Asserted with a margin: rotated at most 1/3 of unrotated.
TEST(KvRotation, RotatedBlockQuantizedCacheIsCloserOnOutlierChannels) {
  const Problem p = outlier_problem(45);
  auto be = make_backend("cpu", 2);
  const auto exact = attend_cache(*be, p, cache(DType::F32, Rotation::off));
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    const double plain = nmse(exact, attend_cache(*be, p, cache(t, Rotation::off)));
    const double rot = nmse(exact, attend_cache(*be, p, cache(t, Rotation::quantized)));
    const double rot_signs = nmse(exact, attend_cache(*be, p, cache(t, Rotation::quantized, true)));
    EXPECT_LT(rot, plain / 3) << kv_type_name(t) << ": rotated " << rot << " unrotated " << plain;
    EXPECT_LT(rot_signs, plain / 3) << kv_type_name(t) << ": rotated with signs " << rot_signs;
  }
}

// Negative control: K stored rotated but the queries left as they are. The scores are then
// q·(R·k), unrelated to q·k: measured NMSE 0.47 against the exact result, where the whole
// path is 4.3e-14.
TEST(KvRotation, RotatingKWithoutTheQueriesBreaksAttention) {
  const Problem p = outlier_problem(57);
  auto be = make_backend("cpu", 2);
  const auto exact = attend_cache(*be, p, cache(DType::F32, Rotation::off));
  EXPECT_LT(nmse(exact, attend_cache(*be, p, cache(DType::F32, Rotation::all))), 1e-12);
  EXPECT_GT(nmse(exact, attend_cache(*be, p, cache(DType::F32, Rotation::all), /*rotate_q=*/false)), 0.05);
}

// Through a whole model (attend_batch in models/blocks.cpp, prefill then decode): stories260K
// has heads of D = 8, so a rotation block of 8 rotates every head; with f32 caches the logits
// equal the unrotated run's to float rounding (max |Δlogit| measured 1.0e-5; 1e-4 is ten
// times that).
TEST(KvRotation, ModelLogitsUnchangedWithUnquantizedCache) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  auto be = make_backend("cpu", 2);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 124, 300, 101, 338};
  auto logits = [&](Rotation rot) {
    KvCacheOptions o = cache(DType::F32, rot);
    o.n_ctx = 16;
    o.rotation_block = 8;
    Session s(*model, *be, o);
    EXPECT_EQ(s.kv_cache().k_rotation().on(), rot != Rotation::off);
    std::vector<float> all;
    const auto a = s.eval(prompt, true);
    all.assign(a.begin(), a.end());
    const int32_t next[] = {400};
    const auto b = s.eval(next, false);  // one decode step over the rotated cache
    all.insert(all.end(), b.begin(), b.end());
    return all;
  };
  const auto base = logits(Rotation::off), rot = logits(Rotation::all);
  EXPECT_LT(test::max_abs_diff(base, rot), 1e-4);
}

// The whole model, ref vs cpu, over rotated block-quantized caches (stories260K, blocks of 8):
// every named intermediate within the parity tolerance of the cache type, as unrotated.
TEST(KvRotation, ModelParityWithRotatedCaches) {
  SLUICE_REQUIRE_SHARED();
  auto model = Model::load(test::shared_dir() + "/models/stories260K.gguf");
  auto ref = make_backend("ref", 1), cpu = make_backend("cpu", 2);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 124, 300, 101, 338, 280, 117};
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    KvCacheOptions kv = cache(t, Rotation::quantized);
    kv.n_ctx = 32;
    kv.rotation_block = 8;
    const ParityReport rep = run_parity(*model, *ref, *model, *cpu, ids, 4, kv);
    const ParityEntry* e = rep.first_divergence();
    EXPECT_EQ(e, nullptr) << kv_type_name(t) << ": " << (e ? e->name : "") << " layer " << (e ? e->layer : 0)
                          << " nmse " << (e ? e->nmse : 0);
  }
}

// --no-kv-rotation parses on run, bench and perplexity.
TEST(KvRotation, CliTakesNoKvRotation) {
  SLUICE_REQUIRE_SHARED();
  const std::string cli = ::sluice::test::cli_path(), m = test::shared_dir() + "/models/stories260K.gguf";
  for (const std::string& args :
       {" run -m " + m + " -p Hello -n 2 --temp 0 --cache-type q4_0 --no-kv-rotation",
        " bench -m " + m + " -p 0 -n 2 -r 1 -t 1 --membw-mib 8 --cache-type q4_0 --no-kv-rotation",
        " perplexity -m " + m + " -f " + test::shared_dir() +
            "/corpus/stories-sampled.txt --ctx 64 --chunks 1 -t 1 --cache-type q4_0 --no-kv-rotation"}) {
    int st = 0;
    const std::string out = test::run_command(cli + args + " 2>&1", &st);
    EXPECT_EQ(st, 0) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace sluice::test_kv_rotation
