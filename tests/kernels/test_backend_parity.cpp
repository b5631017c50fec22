// tests/kernels/test_backend_parity: every cpu op against the ref oracle, on random inputs,
// for every ISA level this machine can run (generic, avx2, avx512), plus negative controls
// (the comparison must fail when the computation is wrong) and determinism across thread
// counts.
//
// Metric: NMSE = Σ(cpu - ref)² / Σ ref², as llama.cpp's test-backend-ops. For reference,
// float32 has ε = 2^-24 ≈ 6e-8 (ε² ≈ 3.6e-15); a result that is correct to a few float32
// ulps per element has NMSE around 1e-14..1e-13. Each tolerance below says where its
// headroom comes from. Legend: T = tokens, H = query heads, Hkv = KV heads, D = head dim,
// N = cached positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "backends/ref/ref_backend.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/attention_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/parity_tolerances.h"
#include "quant/quant.h"

namespace sluice::test_backend_parity {
namespace {

using test::available_isas;
using test::nmse;
using test::randn;

// ---- tolerances: kernels/parity_tolerances.h (shared with the cuda parity tests) ----


// The largest NMSE seen per (op, dtype, isa), printed at the end of the run so tolerances
// can be judged against what is actually observed.
std::map<std::string, double>& worst_nmse() {
  static std::map<std::string, double> m;
  return m;
}
double track(const std::string& key, double e) {
  double& w = worst_nmse()[key];
  w = std::max(w, e);
  return e;
}
class PrintWorstNmse : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [k, v] : worst_nmse()) std::printf("[  NMSE    ] %-28s max %.3g\n", k.c_str(), v);
  }
};
const auto* const kPrintWorstNmse = ::testing::AddGlobalTestEnvironment(new PrintWorstNmse);

std::string key(std::string_view op, std::string_view type, CpuIsa isa) {
  return std::string(op) + " " + std::string(type) + " " + std::string(cpu_isa_name(isa));
}


// The cpu backends under test: every available ISA level, 2 threads each (so the
// threaded paths run; determinism across thread counts is tested separately).
struct Backends {
  std::unique_ptr<Backend> ref = make_ref_backend();
  std::vector<std::pair<CpuIsa, std::unique_ptr<Backend>>> cpu;
  Backends() {
    for (CpuIsa i : available_isas()) cpu.emplace_back(i, make_cpu_backend(2, i));
  }
};

// A weight matrix of type t with ne = [n_in, n_out], from random floats.
using Weights = test::RandomMatrix;

std::vector<float> run_matmul(Backend& b, const TensorView& w, const std::vector<float>& x, int64_t T) {
  std::vector<float> y(static_cast<size_t>(T * w.ne[1]), NAN);
  b.matmul(w, x.data(), y.data(), T);
  return y;
}

const DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16,   DType::Q8_0,  DType::Q4_0, DType::Q4_1,
                                 DType::Q5_0, DType::Q5_1, DType::Q8_A,   DType::Q2_K,  DType::Q3_K, DType::Q4_K,
                                 DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

// ---- matmul ----------------------------------------------------------------------------

TEST(BackendParity, MatmulAllTypes) {
  Backends be;
  struct Shape {
    int64_t n_in, n_out;
  };
  for (DType t : kAllWeightTypes) {
    if (!quant_supported(t)) {
      std::printf("[  SKIP    ] matmul %s: quant_supported() says not yet\n", std::string(dtype_name(t)).c_str());
      continue;
    }
    const int64_t bs = dtype_traits(t).block_size;
    std::vector<Shape> shapes;
    if (bs == 1)
      shapes = {{1, 1}, {7, 3}, {17, 33}, {67, 70}, {300, 19}, {1024, 64}};
    else if (bs == 32)
      shapes = {{32, 1}, {32, 9}, {96, 33}, {288, 70}, {1024, 64}};
    else
      shapes = {{256, 1}, {256, 13}, {512, 40}, {768, 67}};
    for (const Shape& s : shapes) {
      Weights w(t, s.n_in, s.n_out, 1234 + static_cast<uint32_t>(s.n_in * 7 + s.n_out));
      for (int64_t T : {1, 2, 5, 7, 16}) {
        const auto x = randn(static_cast<size_t>(T * s.n_in), 99 + static_cast<uint32_t>(T));
        const auto yr = run_matmul(*be.ref, w.view, x, T);
        for (auto& [isa, cpu] : be.cpu) {
          const double e = track(key("matmul", dtype_name(t), isa), nmse(yr, run_matmul(*cpu, w.view, x, T)));
          EXPECT_LE(e, kTolMatmul) << dtype_name(t) << " isa=" << cpu_isa_name(isa) << " in=" << s.n_in
                                   << " out=" << s.n_out << " T=" << T;
        }
      }
    }
  }
}

// Negative control: one weight row scaled by 1.01 must push NMSE far past the tolerance, or
// the tolerance would be blind to a broken row.
TEST(BackendParity, MatmulNegativeControlPerturbedRow) {
  Backends be;
  Weights w(DType::F32, 256, 64, 7);
  const auto x = randn(256 * 3, 8);
  const auto yr = run_matmul(*be.ref, w.view, x, 3);
  auto* rows = reinterpret_cast<float*>(w.bytes.data());
  for (int i = 0; i < 256; ++i) rows[17 * 256 + i] *= 1.01f;
  for (auto& [isa, cpu] : be.cpu) {
    const double e = track(key("NEG matmul-row", "f32", isa), nmse(yr, run_matmul(*cpu, w.view, x, 3)));
    EXPECT_GT(e, 100 * kTolMatmul) << cpu_isa_name(isa);
  }
}

// A token's output must not depend on the batch it came in: T tokens at once equal T
// single-token calls bitwise (prefill and decode agree exactly).
TEST(BackendParity, MatmulBatchInvariant) {
  for (CpuIsa isa : available_isas()) {
    auto cpu = make_cpu_backend(2, isa);
    for (DType t :
         {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_A,
          DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS}) {
      if (!quant_supported(t)) continue;
      Weights w(t, 512, 37, 5);
      const int64_t T = 7;
      const auto x = randn(static_cast<size_t>(T * 512), 6);
      const auto yb = run_matmul(*cpu, w.view, x, T);
      for (int64_t tok = 0; tok < T; ++tok) {
        std::vector<float> xt(x.begin() + tok * 512, x.begin() + (tok + 1) * 512);
        const auto y1 = run_matmul(*cpu, w.view, xt, 1);
        ASSERT_EQ(0, std::memcmp(y1.data(), yb.data() + tok * 37, 37 * sizeof(float)))
            << dtype_name(t) << " isa=" << cpu_isa_name(isa) << " tok=" << tok;
      }
    }
  }
}

// The cpu level's quantized fast paths (SIMD decoders and the fused one-token product) must
// reproduce quant/'s dequantize_row bit for bit, and the fused product must equal gemm_f32
// on the decoded rows bit for bit. Blocks are random bytes (every bit pattern of the packed
// quants and scales) with finite random fp16 scales. Both sides are built without
// -ffp-contract tricks: if quant/ were ever compiled so that it fuses d·q - m into an FMA,
// this test is the one that would say so.
TEST(KernelQuant, FastPathsBitExact) {
  std::mt19937 rng(5);
  for (CpuIsa isa : available_isas()) {
    const cpu::Kernels& k = cpu::kernels_for(isa);
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q8_A, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                    DType::Q5_K, DType::Q6_K}) {
      const cpu::QuantOps* q = k.quant(t);
      if (!q) {
        std::printf("[  INFO    ] %s: no %s fast path (uses dequantize_row)\n", std::string(cpu_isa_name(isa)).c_str(),
                    std::string(dtype_name(t)).c_str());
        continue;
      }
      if (!quant_supported(t)) continue;
      const auto& tr = dtype_traits(t);
      const int64_t n = tr.block_size == 256 ? 1024 : 160, rows = 6;
      const size_t rb = dtype_row_bytes(t, n);
      std::vector<uint8_t> w(rb * rows);
      for (auto& b : w) b = static_cast<uint8_t>(rng());
      // Overwrite the fp16 scale fields with finite values (their offsets per type).
      std::normal_distribution<float> nd(0.0f, 0.01f);
      for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
        uint8_t* b = w.data() + blk * tr.block_bytes;
        auto put = [&](size_t off) {
          const uint16_t h = fp32_to_fp16(nd(rng));
          std::memcpy(b + off, &h, 2);
        };
        switch (t) {
          case DType::Q6_K:
          case DType::Q3_K: put(tr.block_bytes - 2); break;                           // d last
          case DType::Q2_K: put(tr.block_bytes - 4), put(tr.block_bytes - 2); break;  // d, dmin last
          case DType::Q4_1:
          case DType::Q8_A:
          case DType::Q4_K:
          case DType::Q5_K: put(0), put(2); break;  // d, m/dmin first
          default: put(0);
        }
      }
      std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t, w.data() + r * rb, want.data() + r * n, n);
        q->decode(w.data() + r * rb, got.data() + r * n, n);
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << dtype_name(t) << " " << cpu_isa_name(isa);
      const auto x = randn(static_cast<size_t>(n), 6);
      std::vector<float> y_gemm(rows), y_gemv(rows);
      k.gemm_f32(want.data(), static_cast<size_t>(n), rows, x.data(), static_cast<size_t>(n), 1, n, y_gemm.data(),
                 rows);
      q->gemv(w.data(), rb, rows, x.data(), n, y_gemv.data());
      EXPECT_EQ(0, std::memcmp(y_gemm.data(), y_gemv.data(), rows * 4)) << dtype_name(t) << " " << cpu_isa_name(isa);
    }
  }
}

// ---- small ops -------------------------------------------------------------------------

TEST(BackendParity, RmsNorm) {
  Backends be;
  for (int64_t n : {1, 7, 16, 67, 288, 4096}) {
    for (int64_t rows : {1, 7}) {
      const auto x = randn(static_cast<size_t>(rows * n), 11, 3.0f);
      const auto w = randn(static_cast<size_t>(n), 12);
      for (bool with_w : {true, false}) {
        std::vector<float> yr(x.size());
        be.ref->rms_norm(x.data(), with_w ? w.data() : nullptr, yr.data(), rows, n, 1e-6f);
        for (auto& [isa, cpu] : be.cpu) {
          std::vector<float> y = x;  // in place: y aliases x
          cpu->rms_norm(y.data(), with_w ? w.data() : nullptr, y.data(), rows, n, 1e-6f);
          EXPECT_LE(track(key("rms_norm", "f32", isa), nmse(yr, y)), kTolRmsNorm)
              << cpu_isa_name(isa) << " n=" << n << " rows=" << rows;
        }
      }
    }
  }
}

struct RopeCase {
  int64_t T, H, D, n_rot;
  int32_t pos0;
};

// Plain RoPE at two bases, linear scaling, and YaRN (factor 40 over an original context of
// 4096, DeepSeek-V3's; the ramp's ends as models/model.cpp derives them at n_rot 64).
std::vector<Rope> rope_scalings(int64_t n_rot) {
  Rope plain{n_rot, 10000.0f, RopeMode::normal};
  Rope big = plain, linear = plain, yarn = plain;
  big.base = 1000000.0f;
  linear.freq_scale = 0.25f;
  yarn.freq_scale = 1.0f / 40, yarn.ext_factor = 1.0f, yarn.corr_lo = 10, yarn.corr_hi = 23, yarn.mscale = 1.3689f;
  return {plain, big, linear, yarn};
}

TEST(BackendParity, Rope) {
  Backends be;
  const RopeCase cases[] = {
      {1, 1, 8, 8, 0}, {7, 3, 64, 64, 5}, {5, 4, 128, 128, 4000}, {2, 2, 64, 32, 17}, {3, 5, 128, 64, 100000}};
  for (const RopeCase& c : cases) {
    std::vector<int32_t> pos(static_cast<size_t>(c.T));
    for (int64_t t = 0; t < c.T; ++t) pos[t] = c.pos0 + static_cast<int32_t>(t * 3);
    const auto x = randn(static_cast<size_t>(c.T * c.H * c.D), 21);
    for (RopeMode mode : {RopeMode::normal, RopeMode::neox}) {
      for (const Rope& scaling : rope_scalings(c.n_rot)) {
        Rope r = scaling;
        r.mode = mode;
        auto xr = x;
        be.ref->rope(xr.data(), pos.data(), c.T, c.H, c.D, r);
        for (auto& [isa, cpu] : be.cpu) {
          auto xc = x;
          cpu->rope(xc.data(), pos.data(), c.T, c.H, c.D, r);
          EXPECT_LE(track(key("rope", "f32", isa), nmse(xr, xc)), kTolRope)
              << cpu_isa_name(isa) << " D=" << c.D << " n_rot=" << c.n_rot << " pos0=" << c.pos0
              << " mode=" << static_cast<int>(mode) << " base=" << r.base << " freq_scale=" << r.freq_scale;
          // Dimensions past n_rot are untouched.
          for (int64_t r = 0; r < c.T * c.H; ++r)
            for (int64_t d = c.n_rot; d < c.D; ++d) ASSERT_EQ(xc[r * c.D + d], x[r * c.D + d]);
        }
      }
    }
  }
}

// Negative control: rope in the wrong pair layout must fail the comparison.
TEST(BackendParity, RopeNegativeControlWrongMode) {
  Backends be;
  const int64_t T = 3, H = 2, D = 64;
  const std::vector<int32_t> pos = {1, 2, 30};
  const auto x = randn(static_cast<size_t>(T * H * D), 22);
  auto xr = x;
  be.ref->rope(xr.data(), pos.data(), T, H, D, Rope{D, 10000.0f, RopeMode::normal});
  for (auto& [isa, cpu] : be.cpu) {
    auto xc = x;
    cpu->rope(xc.data(), pos.data(), T, H, D, Rope{D, 10000.0f, RopeMode::neox});
    EXPECT_GT(track(key("NEG rope-mode", "f32", isa), nmse(xr, xc)), 1e6 * kTolRope) << cpu_isa_name(isa);
  }
}

TEST(BackendParity, Softmax) {
  Backends be;
  for (int64_t n : {1, 2, 7, 16, 33, 300, 32000}) {
    for (float scale : {1.0f, 30.0f}) {  // 30: a peaked distribution with underflowing tails
      const int64_t rows = 3;
      const auto x = randn(static_cast<size_t>(rows * n), 31, scale);
      auto xr = x;
      be.ref->softmax(xr.data(), rows, n);
      for (auto& [isa, cpu] : be.cpu) {
        auto xc = x;
        cpu->softmax(xc.data(), rows, n);
        EXPECT_LE(track(key("softmax", "f32", isa), nmse(xr, xc)), kTolElementwise)
            << cpu_isa_name(isa) << " n=" << n << " scale=" << scale;
      }
    }
  }
}

// The SwiGLU clamp (Ling 3's swiglu_clamp_exp/shexp): min(silu(g), L) · clamp(u, -L, L) on
// every level against the ref twin, the limit active on a large share of the values; the
// unclamped result differs (negative control), and out may alias gate.
TEST(BackendParity, SwigluClampedMatchesRef) {
  Backends be;
  const float limit = 0.7f;
  for (int64_t n : {1, 7, 16, 17, 1000, 10007}) {
    const auto a = randn(static_cast<size_t>(n), 43, 2.0f);
    const auto b = randn(static_cast<size_t>(n), 44);
    std::vector<float> sr(a.size()), plain(a.size());
    be.ref->swiglu(a.data(), b.data(), sr.data(), n, limit);
    be.ref->swiglu(a.data(), b.data(), plain.data(), n, 0.0f);
    for (size_t i = 0; i < sr.size(); ++i) {
      const double s = a[i] / (1.0 + std::exp(-static_cast<double>(a[i])));
      ASSERT_NEAR(sr[i], std::min(s, 0.7) * std::clamp(static_cast<double>(b[i]), -0.7, 0.7), 1e-6) << i;
    }
    if (n >= 1000) {
      EXPECT_GT(nmse(sr, plain), 1e-2) << "the limit must be active in this test";
    }
    for (auto& [isa, cpu] : be.cpu) {
      std::vector<float> s = a;
      cpu->swiglu(s.data(), b.data(), s.data(), n, limit);  // in place
      EXPECT_LE(track(key("swiglu_clamp", "f32", isa), nmse(sr, s)), kTolElementwise)
          << cpu_isa_name(isa) << " n=" << n;
    }
  }
}

TEST(BackendParity, SwigluGeluAdd) {
  Backends be;
  for (int64_t n : {1, 7, 16, 17, 1000, 10007}) {
    const auto a = randn(static_cast<size_t>(n), 41, 4.0f);  // wide range: exp saturation paths
    const auto b = randn(static_cast<size_t>(n), 42);
    std::vector<float> sr(a.size()), gr(a.size()), ar(a.size());
    be.ref->swiglu(a.data(), b.data(), sr.data(), n, 0.0f);
    be.ref->gelu(a.data(), gr.data(), n);
    be.ref->add(a.data(), b.data(), ar.data(), n);
    for (auto& [isa, cpu] : be.cpu) {
      std::vector<float> s(a.size()), g = a, ad = a;
      cpu->swiglu(a.data(), b.data(), s.data(), n, 0.0f);
      cpu->gelu(g.data(), g.data(), n);  // in place
      cpu->add(ad.data(), b.data(), ad.data(), n);
      EXPECT_LE(track(key("swiglu", "f32", isa), nmse(sr, s)), kTolElementwise)
          << "swiglu " << cpu_isa_name(isa) << " n=" << n;
      EXPECT_LE(track(key("gelu", "f32", isa), nmse(gr, g)), kTolElementwise)
          << "gelu " << cpu_isa_name(isa) << " n=" << n;
      EXPECT_EQ(0, std::memcmp(ar.data(), ad.data(), ar.size() * sizeof(float))) << "add " << cpu_isa_name(isa);
    }
  }
  // Saturation: gelu of ±large is x or 0; swiglu of large negative gate is ~0, never NaN.
  // (The clamped swiglu: BackendParity.SwigluClampedMatchesRef.)
  for (auto& [isa, cpu] : be.cpu) {
    const std::vector<float> x = {-200.0f, -90.0f, -20.0f, 0.0f, 20.0f, 90.0f, 200.0f};
    const std::vector<float> one(x.size(), 1.0f);
    std::vector<float> g(x.size()), s(x.size());
    cpu->gelu(x.data(), g.data(), static_cast<int64_t>(x.size()));
    cpu->swiglu(x.data(), one.data(), s.data(), static_cast<int64_t>(x.size()), 0.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(g[i]) && std::isfinite(s[i])) << cpu_isa_name(isa) << " x=" << x[i];
      if (x[i] >= 20) {
        EXPECT_FLOAT_EQ(g[i], x[i]);
      }
      if (x[i] <= -20) {
        EXPECT_NEAR(g[i], 0.0f, 1e-6f);
      }
    }
  }
}

TEST(BackendParity, GetRowsAndStoreRow) {
  Backends be;
  const int32_t ids[] = {0, 5, 5, 2, 11};
  for (DType t : kAllWeightTypes) {
    if (!quant_supported(t)) continue;
    const int64_t n = dtype_traits(t).block_size == 256 ? 512 : (dtype_traits(t).block_size == 32 ? 96 : 67);
    Weights tab(t, n, 12, 51);
    std::vector<float> yr(static_cast<size_t>(5 * n));
    be.ref->get_rows(tab.view, ids, 5, yr.data());
    const auto src = randn(static_cast<size_t>(n), 52);
    std::vector<uint8_t> br(dtype_row_bytes(t, n));
    be.ref->store_row(src.data(), t, br.data(), n);
    for (auto& [isa, cpu] : be.cpu) {
      std::vector<float> y(yr.size());
      cpu->get_rows(tab.view, ids, 5, y.data());
      EXPECT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
          << dtype_name(t) << " " << cpu_isa_name(isa);
      std::vector<uint8_t> bc(br.size(), 0xAB);
      cpu->store_row(src.data(), t, bc.data(), n);
      EXPECT_EQ(br, bc) << "store_row " << dtype_name(t) << " " << cpu_isa_name(isa);
    }
  }
  // F16 rounding edge cases: halfway values, overflow, subnormals, signed zero.
  const std::vector<float> edge = {
      0.0f,     -0.0f,   1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-8f, 1e-5f,
      -2.5e-6f, 0.33333f};
  std::vector<uint16_t> hr(edge.size());
  be.ref->store_row(edge.data(), DType::F16, hr.data(), static_cast<int64_t>(edge.size()));
  for (auto& [isa, cpu] : be.cpu) {
    std::vector<uint16_t> hc(edge.size());
    cpu->store_row(edge.data(), DType::F16, hc.data(), static_cast<int64_t>(edge.size()));
    EXPECT_EQ(hr, hc) << cpu_isa_name(isa);
  }
}

// ---- attention -------------------------------------------------------------------------

using test::AttnCase;
using test::AttnData;
using test::make_attention;
using test::run_attention;

const AttnCase kAttnCases[] = {
    {1, 1, 1, 8, 1, 0},
    {1, 4, 4, 64, 7, 6},
    {7, 4, 2, 64, 7, 0},
    {7, 8, 2, 128, 300, 293},
    {1, 8, 2, 128, 300, 299},
    {7, 8, 8, 64, 65, 58},
    {3, 4, 1, 8, 64, 61},
    {1, 16, 4, 128, 129, 128},
    {7, 4, 1, 64, 100, 40},
    {2, 2, 1, 64, 50, 200},  // pos0 past the cache: every token sees all N
    {5, 8, 4, 8, 40, 35},    // quantized caches: D = 8 is not a whole block, whole rows are decoded
    // Batches with too many rows to split (T·H >= 256) over more than one split's worth of
    // positions (> 512): each row must still see every visible position (a prompt batch at
    // position 512+ once attended to the first 512 only).
    {32, 8, 4, 8, 600, 568},
    {40, 8, 2, 64, 1100, 1060},
};

TEST(BackendParity, Attention) {
  Backends be;
  for (const AttnCase& c : kAttnCases) {
    for (auto [kt, vt] :
         {std::pair{DType::F16, DType::F16}, std::pair{DType::F32, DType::F32}, std::pair{DType::F16, DType::F32},
          std::pair{DType::Q8_0, DType::Q8_0}, std::pair{DType::Q4_0, DType::F16}}) {
      if ((c.Hkv * c.D) % dtype_traits(kt).block_size != 0 || (c.Hkv * c.D) % dtype_traits(vt).block_size != 0)
        continue;
      const AttnData d = make_attention(c, kt, vt, 61);
      const auto yr = run_attention(*be.ref, d.args);
      for (auto& [isa, cpu] : be.cpu) {
        const double e = track(key("attention", str_cat(dtype_name(kt), "/", dtype_name(vt)), isa),
                               nmse(yr, run_attention(*cpu, d.args)));
        EXPECT_LE(e, test::attention_tol(isa, vt))
            << cpu_isa_name(isa) << " T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " N=" << c.N
            << " pos0=" << c.pos0 << " k=" << dtype_name(kt) << " v=" << dtype_name(vt);
      }
    }
  }
}

// Negative control: an off-by-one in the causal limit (one extra visible position) must be
// caught.
TEST(BackendParity, AttentionNegativeControlCausalOffByOne) {
  Backends be;
  const AttnData d = make_attention({4, 4, 2, 64, 40, 20}, DType::F16, DType::F16, 71);
  const auto yr = run_attention(*be.ref, d.args);
  AttentionArgs shifted = d.args;
  shifted.pos0 += 1;
  for (auto& [isa, cpu] : be.cpu)
    EXPECT_GT(track(key("NEG attn-causal", "f16", isa), nmse(yr, run_attention(*cpu, shifted))), 1000 * kTolAttention)
        << cpu_isa_name(isa);
}

// ---- determinism -----------------------------------------------------------------------

// Greedy decoding must not change with --threads: 1 and 2 (and 3) threads give bitwise the
// same outputs, because work is split by output rows / (token, head) only.
TEST(BackendParity, DeterministicAcrossThreadCounts) {
  for (CpuIsa isa : available_isas()) {
    auto c1 = make_cpu_backend(1, isa);
    auto c2 = make_cpu_backend(2, isa);
    auto c3 = make_cpu_backend(3, isa);
    for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K}) {
      if (!quant_supported(t)) continue;
      Weights w(t, 1024, 301, 81);
      for (int64_t T : {1, 7}) {
        const auto x = randn(static_cast<size_t>(T * 1024), 82);
        const auto y1 = run_matmul(*c1, w.view, x, T);
        const auto y2 = run_matmul(*c2, w.view, x, T);
        const auto y3 = run_matmul(*c3, w.view, x, T);
        EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << dtype_name(t) << " T=" << T;
        EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << dtype_name(t) << " T=" << T;
      }
    }
    for (const AttnCase& c : {AttnCase{7, 8, 2, 128, 300, 293}, AttnCase{1, 16, 4, 64, 257, 256}}) {
      const AttnData d = make_attention(c, DType::F16, DType::F16, 83);
      const auto y1 = run_attention(*c1, d.args);
      const auto y2 = run_attention(*c2, d.args);
      const auto y3 = run_attention(*c3, d.args);
      EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << "attention T=" << c.T;
      EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << "attention T=" << c.T;
    }
    const auto x = randn(64 * 4096, 84);
    std::vector<float> r1(x.size()), r2(x.size());
    c1->rms_norm(x.data(), nullptr, r1.data(), 64, 4096, 1e-5f);
    c2->rms_norm(x.data(), nullptr, r2.data(), 64, 4096, 1e-5f);
    EXPECT_EQ(r1, r2);
    auto s1 = x, s2 = x;
    c1->softmax(s1.data(), 64, 4096);
    c2->softmax(s2.data(), 64, 4096);
    EXPECT_EQ(s1, s2);
  }
}

// ---- dispatch and factory --------------------------------------------------------------

TEST(KernelDispatch, IsaLevelsAndOverride) {
  EXPECT_TRUE(cpu_isa_available(CpuIsa::generic));
  if (cpu_isa_available(CpuIsa::avx512)) {
    EXPECT_TRUE(cpu_isa_available(CpuIsa::avx2));
  }
  const CpuFeatures& f = cpu_features();
  std::printf("[  INFO    ] cpu: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d dq=%d vnni=%d bf16=%d amx=%d/%d/%d\n",
              f.avx2, f.fma, f.f16c, f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512vnni, f.avx512bf16,
              f.amx_tile, f.amx_int8, f.amx_bf16);
  if (!f.amx_tile) {
    EXPECT_FALSE(cpu_request_amx());
  }

  // Restore whatever the environment had (a run may force a level for all tests).
  const char* env = std::getenv("SLUICE_CPU_ISA");
  struct Restore {
    std::string saved;
    bool had;
    ~Restore() { had ? setenv("SLUICE_CPU_ISA", saved.c_str(), 1) : unsetenv("SLUICE_CPU_ISA"); }
  } restore{env ? env : "", env != nullptr};
  for (CpuIsa isa : available_isas()) {
    ASSERT_EQ(setenv("SLUICE_CPU_ISA", std::string(cpu_isa_name(isa)).c_str(), 1), 0);
    auto b = make_backend("cpu", 1);
    ASSERT_TRUE(cpu_backend_isa(*b).has_value());
    EXPECT_EQ(*cpu_backend_isa(*b), isa);
  }
  ASSERT_EQ(setenv("SLUICE_CPU_ISA", "sse9", 1), 0);
  EXPECT_THROW(make_backend("cpu", 1), Error);
  unsetenv("SLUICE_CPU_ISA");
  auto best = make_backend("cpu", 1);
  EXPECT_EQ(*cpu_backend_isa(*best), available_isas().back());
}

TEST(BackendFactory, NamesAndErrors) {
  auto r = make_backend("ref");
  EXPECT_EQ(r->name(), "ref");
  auto c = make_backend("cpu", 2);
  EXPECT_EQ(c->name(), "cpu");
  EXPECT_EQ(c->n_threads(), 2);
  EXPECT_GE(make_backend("cpu", 0)->n_threads(), 1);
  try {
    make_backend("tpu");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ref"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace sluice::test_backend_parity
