// tests/kernels/test_cuda_parity: every op of the cuda backend against the ref oracle on
// random inputs, with the NMSE metric and tolerance policy of test_backend_parity.cpp, plus
// negative controls, the KV-mirror bookkeeping across decode steps and rewinds, and the weight
// cache's refill detection for streamed expert buffers. Without a device every test but the
// factory's error message reports "skipped: no device".
//
// Tolerances (NMSE = Σ(cuda - ref)² / Σ ref²; float32 ε² ≈ 3.6e-15):
//  * matmul: decoded weights are bit-identical to quant/'s (get_rows proves it), so only the
//    float32 accumulation differs from ref's float64: the matvec kernel sums K/256 groups of 8
//    per lane and then across 32 lanes (~ε²·K/32), the tiled GEMM sums K terms sequentially per
//    output (~ε²·K ≈ 4e-12 for K = 1024). 1e-10 is the cpu backend's bound and keeps >25x
//    headroom over the GEMM estimate; a 1% error in one row of 64 gives ~1e-7.
//  * rms_norm, rope: 1e-12 as cpu (rope's angle and rotation are in double here: ~1e-30).
//  * softmax/swiglu/gelu: CUDA's expf/tanhf are within 2 ulp (CUDA C Programming Guide,
//    "Mathematical Functions", full-precision versions), then a division: 1e-11 as cpu.
//  * attention: float32 dot products, online-softmax rescaling per position and a merge of
//    128-position splits; 1e-10 as cpu.
//  * add, get_rows, store_row (F16/BF16/Q8_0/Q4_0): bitwise — the kernels use exactly
//    rounded operations in ref's order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/ref/ref_backend.h"
#include "core/error.h"
#include "core/expert_cache.h"
#include "kernels/attention_test_util.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/parity_tolerances.h"
#include "kvcodec/kvcodec.h"
#include "quant/quant.h"
#include "runtime/session.h"

namespace sluice::test_cuda_parity {
namespace {

using test::nmse;
using test::randn;

TEST(CudaBackendFactory, NoDeviceGivesAClearError) {
  std::string why;
  if (test::cuda_device_present(&why)) {
    auto b = make_backend("cuda");
    EXPECT_EQ(b->name(), "cuda");
    GTEST_SKIP() << "a device is present (" << why << "): the no-device message cannot be shown here";
  }
  try {
    make_backend("cuda");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
#ifdef SLUICE_HAVE_CUDA
    EXPECT_NE(msg.find("cuda backend: no CUDA device found ("), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("not built"), std::string::npos) << msg;
#endif
  }
}

#ifdef SLUICE_HAVE_CUDA


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
    for (const auto& [k, v] : worst_nmse()) std::printf("[  NMSE    ] cuda %-26s max %.3g\n", k.c_str(), v);
  }
};
const auto* const kPrintWorstNmse = ::testing::AddGlobalTestEnvironment(new PrintWorstNmse);

struct Both {
  std::unique_ptr<Backend> ref = make_ref_backend();
  std::unique_ptr<CudaBackend> cuda;
  explicit Both(CudaBackendOptions opt = {}) : cuda(std::make_unique<CudaBackend>(opt)) {}
};

using Weights = test::RandomMatrix;

std::vector<float> run_matmul(Backend& b, const TensorView& w, const std::vector<float>& x, int64_t T) {
  std::vector<float> y(static_cast<size_t>(T * w.ne[1]), NAN);
  b.matmul(w, x.data(), y.data(), T);
  return y;
}

const DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                 DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                                 DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

// ---- matmul ----------------------------------------------------------------------------

TEST(CudaParity, MatmulAllTypes) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  struct Shape {
    int64_t n_in, n_out;
  };
  for (DType t : kAllWeightTypes) {
    const int64_t bs = dtype_traits(t).block_size;
    std::vector<Shape> shapes;
    if (bs == 1)
      shapes = {{1, 1}, {7, 3}, {17, 33}, {67, 70}, {300, 19}, {1024, 64}};
    else if (bs == 32)
      shapes = {{32, 1}, {32, 9}, {96, 33}, {288, 70}, {1024, 130}};
    else
      shapes = {{256, 1}, {256, 13}, {512, 40}, {768, 67}, {1024, 130}};
    for (const Shape& s : shapes) {
      Weights w(t, s.n_in, s.n_out, 1234 + static_cast<uint32_t>(s.n_in * 7 + s.n_out));
      // 1..8: the matrix-vector kernel; 9 and up: the tiled GEMM (70: two token tiles).
      for (int64_t T : {1, 2, 5, 8, 9, 16, 70}) {
        const auto x = randn(static_cast<size_t>(T * s.n_in), 99 + static_cast<uint32_t>(T));
        const auto yr = run_matmul(*be.ref, w.view, x, T);
        const double e = track(str_cat("matmul ", dtype_name(t), T <= 8 ? " matvec" : " gemm"),
                               nmse(yr, run_matmul(*be.cuda, w.view, x, T)));
        EXPECT_LE(e, kTolMatmul) << dtype_name(t) << " in=" << s.n_in << " out=" << s.n_out << " T=" << T;
      }
    }
  }
}

TEST(CudaParity, MatmulNegativeControlPerturbedRow) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  Weights w(DType::F32, 256, 64, 7);
  for (int64_t T : {3, 20}) {
    const auto x = randn(static_cast<size_t>(256 * T), 8);
    Weights w2 = w;
    w2.view.data = w2.bytes.data();
    const auto yr = run_matmul(*be.ref, w.view, x, T);
    auto* rows = reinterpret_cast<float*>(w2.bytes.data());
    for (int i = 0; i < 256; ++i) rows[17 * 256 + i] *= 1.01f;
    EXPECT_GT(track("NEG matmul-row", nmse(yr, run_matmul(*be.cuda, w2.view, x, T))), 100 * kTolMatmul) << "T=" << T;
  }
}

// Same call, same bits (no atomics, fixed reduction trees), and a weight changed in place in a
// streamed expert buffer is seen (the refill generation of core/expert_cache.h).
TEST(CudaParity, MatmulDeterministicAndSeesRefilledExpertBuffers) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  Weights a(DType::Q4_K, 512, 96, 21), b(DType::Q4_K, 512, 96, 22);
  const auto x = randn(512 * 3, 23);
  EXPECT_EQ(run_matmul(*be.cuda, a.view, x, 3), run_matmul(*be.cuda, a.view, x, 3));

  ExpertCache cache(size_t{1} << 20);  // host slots, as the streaming tier uses
  ExpertCache::Entry* e = cache.insert(0, 1, a.bytes.size(), false);
  ASSERT_NE(e, nullptr);
  std::memcpy(e->buf, a.bytes.data(), a.bytes.size());
  TensorView v = a.view;
  v.data = e->buf;
  EXPECT_LE(nmse(run_matmul(*be.ref, a.view, x, 3), run_matmul(*be.cuda, v, x, 3)), kTolMatmul);
  // Expert 1 leaves, expert 2 takes the same buffer (same address, same size).
  uint8_t* buf = e->buf;
  cache.erase(e);
  ExpertCache::Entry* e2 = nullptr;
  for (int i = 2; i < 64 && !e2; ++i) {  // mmap may or may not hand back the same address
    ExpertCache::Entry* n = cache.insert(0, i, b.bytes.size(), false);
    if (!n) break;
    if (n->buf == buf) e2 = n;
  }
  if (!e2) GTEST_SKIP() << "the allocator never reused the address; nothing to test";
  std::memcpy(e2->buf, b.bytes.data(), b.bytes.size());
  EXPECT_LE(nmse(run_matmul(*be.ref, b.view, x, 3), run_matmul(*be.cuda, v, x, 3)), kTolMatmul)
      << "stale weights served from VRAM after the host buffer was refilled";
}

// ---- small ops -------------------------------------------------------------------------

TEST(CudaParity, RmsNorm) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  for (int64_t n : {1, 7, 16, 67, 288, 4096}) {
    for (int64_t rows : {1, 7}) {
      const auto x = randn(static_cast<size_t>(rows * n), 11, 3.0f);
      const auto w = randn(static_cast<size_t>(n), 12);
      for (bool with_w : {true, false}) {
        std::vector<float> yr(x.size());
        be.ref->rms_norm(x.data(), with_w ? w.data() : nullptr, yr.data(), rows, n, 1e-6f);
        std::vector<float> y = x;
        be.cuda->rms_norm(y.data(), with_w ? w.data() : nullptr, y.data(), rows, n, 1e-6f);
        EXPECT_LE(track("rms_norm", nmse(yr, y)), kTolRmsNorm) << "n=" << n << " rows=" << rows;
      }
    }
  }
}

TEST(CudaParity, Rope) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  struct C {
    int64_t T, H, D, n_rot;
    int32_t pos0;
  };
  for (const C& c :
       {C{1, 1, 8, 8, 0}, C{7, 3, 64, 64, 5}, C{5, 4, 128, 128, 4000}, C{2, 2, 64, 32, 17}, C{3, 5, 128, 64, 100000}}) {
    std::vector<int32_t> pos(static_cast<size_t>(c.T));
    for (int64_t t = 0; t < c.T; ++t) pos[t] = c.pos0 + static_cast<int32_t>(t * 3);
    const auto x = randn(static_cast<size_t>(c.T * c.H * c.D), 21);
    for (RopeMode mode : {RopeMode::normal, RopeMode::neox}) {
      // Plain at two bases, linear, and YaRN (as test_backend_parity's cases).
      Rope plain{c.n_rot, 10000.0f, mode};
      Rope big = plain, linear = plain, yarn = plain;
      big.base = 1000000.0f;
      linear.freq_scale = 0.25f;
      yarn.freq_scale = 1.0f / 40, yarn.ext_factor = 1.0f, yarn.corr_lo = 10, yarn.corr_hi = 23, yarn.mscale = 1.3689f;
      for (const Rope& r : {plain, big, linear, yarn}) {
        auto xr = x, xc = x;
        be.ref->rope(xr.data(), pos.data(), c.T, c.H, c.D, r);
        be.cuda->rope(xc.data(), pos.data(), c.T, c.H, c.D, r);
        EXPECT_LE(track("rope", nmse(xr, xc)), kTolRope) << "D=" << c.D << " mode=" << static_cast<int>(mode);
        for (int64_t r = 0; r < c.T * c.H; ++r)
          for (int64_t d = c.n_rot; d < c.D; ++d) ASSERT_EQ(xc[r * c.D + d], x[r * c.D + d]);
      }
    }
  }
  // Negative control: the wrong pair layout must fail.
  const std::vector<int32_t> pos = {1, 2, 30};
  const auto x = randn(3 * 2 * 64, 22);
  auto xr = x, xc = x;
  be.ref->rope(xr.data(), pos.data(), 3, 2, 64, Rope{64, 10000.0f, RopeMode::normal});
  be.cuda->rope(xc.data(), pos.data(), 3, 2, 64, Rope{64, 10000.0f, RopeMode::neox});
  EXPECT_GT(track("NEG rope-mode", nmse(xr, xc)), 1e6 * kTolRope);
}

TEST(CudaParity, SoftmaxSwigluGeluAdd) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  for (int64_t n : {1, 2, 7, 16, 33, 300, 32000}) {
    for (float scale : {1.0f, 30.0f}) {
      const auto x = randn(static_cast<size_t>(3 * n), 31, scale);
      auto xr = x, xc = x;
      be.ref->softmax(xr.data(), 3, n);
      be.cuda->softmax(xc.data(), 3, n);
      EXPECT_LE(track("softmax", nmse(xr, xc)), kTolElementwise) << "n=" << n << " scale=" << scale;
    }
  }
  for (int64_t n : {1, 7, 16, 17, 1000, 10007}) {
    const auto a = randn(static_cast<size_t>(n), 41, 4.0f);
    const auto b = randn(static_cast<size_t>(n), 42);
    std::vector<float> sr(a.size()), gr(a.size()), ar(a.size()), s(a.size()), g = a, ad = a;
    std::vector<float> src(a.size()), sc(a.size());  // clamped (limit 0.7)
    be.ref->swiglu(a.data(), b.data(), sr.data(), n, 0.0f);
    be.ref->swiglu(a.data(), b.data(), src.data(), n, 0.7f);
    be.ref->gelu(a.data(), gr.data(), n);
    be.ref->add(a.data(), b.data(), ar.data(), n);
    be.cuda->swiglu(a.data(), b.data(), s.data(), n, 0.0f);
    be.cuda->swiglu(a.data(), b.data(), sc.data(), n, 0.7f);
    be.cuda->gelu(g.data(), g.data(), n);
    be.cuda->add(ad.data(), b.data(), ad.data(), n);
    EXPECT_LE(track("swiglu", nmse(sr, s)), kTolElementwise) << n;
    EXPECT_LE(track("swiglu_clamp", nmse(src, sc)), kTolElementwise) << n;
    EXPECT_LE(track("gelu", nmse(gr, g)), kTolElementwise) << n;
    EXPECT_EQ(0, std::memcmp(ar.data(), ad.data(), ar.size() * sizeof(float))) << "add n=" << n;
  }
  const std::vector<float> x = {-200.0f, -90.0f, -20.0f, 0.0f, 20.0f, 90.0f, 200.0f};
  const std::vector<float> one(x.size(), 1.0f);
  std::vector<float> g(x.size()), s(x.size());
  be.cuda->gelu(x.data(), g.data(), static_cast<int64_t>(x.size()));
  be.cuda->swiglu(x.data(), one.data(), s.data(), static_cast<int64_t>(x.size()), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i]) && std::isfinite(s[i])) << x[i];
    if (x[i] >= 20) {
      EXPECT_FLOAT_EQ(g[i], x[i]);
    }
    if (x[i] <= -20) {
      EXPECT_NEAR(g[i], 0.0f, 1e-6f);
    }
  }
}

TEST(CudaParity, GetRowsAndStoreRowBitExact) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  const int32_t ids[] = {0, 5, 5, 2, 11};
  for (DType t : kAllWeightTypes) {
    const int64_t bs = dtype_traits(t).block_size;
    const int64_t n = bs == 256 ? 512 : (bs == 32 ? 96 : 67);
    Weights tab(t, n, 12, 51);
    std::vector<float> yr(static_cast<size_t>(5 * n)), y(yr.size());
    be.ref->get_rows(tab.view, ids, 5, yr.data());
    be.cuda->get_rows(tab.view, ids, 5, y.data());
    EXPECT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float))) << "get_rows " << dtype_name(t);
    for (uint32_t seed : {52u, 53u, 54u}) {
      const auto src = randn(static_cast<size_t>(n), seed, seed == 54 ? 1e-3f : 1.0f);
      std::vector<uint8_t> br(dtype_row_bytes(t, n)), bc(br.size(), 0xAB);
      be.ref->store_row(src.data(), t, br.data(), n);
      be.cuda->store_row(src.data(), t, bc.data(), n);
      EXPECT_EQ(br, bc) << "store_row " << dtype_name(t) << " seed " << seed;
    }
  }
  int32_t bad = 12;
  std::vector<float> out(96);
  Weights tab(DType::Q8_0, 96, 12, 1);
  EXPECT_THROW(be.cuda->get_rows(tab.view, &bad, 1, out.data()), Error);
  // F16/BF16 rounding edges: halfway values, overflow, subnormals, signed zero.
  const std::vector<float> edge = {
      0.0f,  -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f,
      3e-8f, 1e-5f, -2.5e-6f,           0.33333f,           1e-40f};
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> hr(edge.size()), hc(edge.size());
    be.ref->store_row(edge.data(), t, hr.data(), static_cast<int64_t>(edge.size()));
    be.cuda->store_row(edge.data(), t, hc.data(), static_cast<int64_t>(edge.size()));
    EXPECT_EQ(hr, hc) << dtype_name(t);
  }
}

TEST(CudaParity, ArgmaxTiesToLowestIndex) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  for (int64_t n : {1, 5, 1000, 151936}) {
    auto x = randn(static_cast<size_t>(n), 61);
    EXPECT_EQ(be.cuda->argmax(x.data(), n), argmax(x)) << n;
    if (n > 10) {
      x[n - 3] = x[7] = 1e9f;  // a tie: the lower index wins
      EXPECT_EQ(be.cuda->argmax(x.data(), n), 7);
    }
  }
}

// ---- attention -------------------------------------------------------------------------

using test::AttnCase;
using test::AttnData;
using test::make_attention;
using test::run_attention;

const AttnCase kAttnCases[] = {
    {1, 1, 1, 8, 1, 0},       {1, 4, 4, 64, 7, 6},    {7, 4, 2, 64, 7, 0},  {7, 8, 2, 128, 300, 293},
    {1, 8, 2, 128, 300, 299}, {7, 8, 8, 64, 65, 58},  {3, 4, 1, 8, 64, 61}, {1, 16, 4, 128, 129, 128},
    {7, 4, 1, 64, 100, 40},   {2, 2, 1, 64, 50, 200}, {5, 8, 4, 8, 40, 35}, {1, 8, 1, 256, 1000, 999},
    {16, 4, 2, 64, 600, 584},
};

TEST(CudaParity, Attention) {
  SLUICE_REQUIRE_CUDA();
  for (bool mirror : {true, false}) {
    Both be(CudaBackendOptions{.kv_mirror = mirror});
    for (const AttnCase& c : kAttnCases) {
      for (auto [kt, vt] : {std::pair{DType::F16, DType::F16}, std::pair{DType::F32, DType::F32},
                            std::pair{DType::BF16, DType::F16}, std::pair{DType::Q8_0, DType::Q8_0},
                            std::pair{DType::Q4_0, DType::F16}, std::pair{DType::Q8_0, DType::Q4_0}}) {
        if ((c.Hkv * c.D) % dtype_traits(kt).block_size != 0 || (c.Hkv * c.D) % dtype_traits(vt).block_size != 0)
          continue;
        const AttnData d = make_attention(c, kt, vt, 61);
        const double e = track(str_cat("attention ", dtype_name(kt), "/", dtype_name(vt)),
                               nmse(run_attention(*be.ref, d.args), run_attention(*be.cuda, d.args)));
        EXPECT_LE(e, kTolAttention) << "T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " N=" << c.N
                                    << " pos0=" << c.pos0 << " k=" << dtype_name(kt) << " v=" << dtype_name(vt)
                                    << " mirror=" << mirror;
      }
    }
  }
}

// A session's pattern on one cache buffer: prefill, decode steps that append one row each,
// then a rewind (a new prompt overwrites from position 0) — the device mirror must follow.
TEST(CudaParity, AttentionKvMirrorFollowsAppendsAndRewinds) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  const int64_t H = 8, Hkv = 2, D = 64, n_ctx = 300;
  size_t rb = dtype_row_bytes(DType::F16, Hkv * D);
  std::vector<uint8_t> k(rb * n_ctx), v(rb * n_ctx);
  auto write_rows = [&](int64_t p0, int64_t n, uint32_t seed) {
    const auto f = randn(static_cast<size_t>(2 * n * Hkv * D), seed);
    for (int64_t i = 0; i < n; ++i) {
      quantize_row(DType::F16, f.data() + i * Hkv * D, k.data() + (p0 + i) * rb, Hkv * D);
      quantize_row(DType::F16, f.data() + (n + i) * Hkv * D, v.data() + (p0 + i) * rb, Hkv * D);
    }
  };
  auto step = [&](int64_t pos0, int64_t T, uint32_t seed) {
    write_rows(pos0, T, seed);
    const auto q = randn(static_cast<size_t>(T * H * D), seed + 1000);
    AttentionArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.k_type = a.v_type = DType::F16;
    a.k_row_bytes = a.v_row_bytes = rb;
    a.n_tok = T;
    a.n_head = H;
    a.n_head_kv = Hkv;
    a.head_dim_k = a.head_dim_v = D;
    a.n_kv = pos0 + T;
    a.pos0 = pos0;
    a.scale = 0.125f;
    return nmse(run_attention(*be.ref, a), run_attention(*be.cuda, a));
  };
  EXPECT_LE(step(0, 20, 1), kTolAttention) << "prefill";
  for (int64_t p = 20; p < 150; ++p) ASSERT_LE(step(p, 1, static_cast<uint32_t>(p)), kTolAttention) << "decode " << p;
  EXPECT_LE(step(0, 10, 7), kTolAttention) << "rewind to 0";
  for (int64_t p = 10; p < 40; ++p)
    ASSERT_LE(step(p, 1, static_cast<uint32_t>(500 + p)), kTolAttention) << "after rewind " << p;
  EXPECT_LE(step(25, 3, 9), kTolAttention) << "partial rewind to 25";
  EXPECT_LE(step(28, 200, 10), kTolAttention) << "growth past the mirror's capacity";
}

TEST(CudaParity, AttentionNegativeControlCausalOffByOne) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  const AttnData d = make_attention({4, 4, 2, 64, 40, 20}, DType::F16, DType::F16, 71);
  const auto yr = run_attention(*be.ref, d.args);
  AttentionArgs shifted = d.args;
  shifted.pos0 += 1;
  EXPECT_GT(track("NEG attn-causal", nmse(yr, run_attention(*be.cuda, shifted))), 1000 * kTolAttention);
}

TEST(CudaParity, AttentionRefusesRotatedCodebookCaches) {
  SLUICE_REQUIRE_CUDA();
  Both be;
  AttnData d = make_attention({1, 4, 2, 64, 8, 7}, DType::F16, DType::F16, 81);
  d.args.k_type = kKvTq4;
  try {
    run_attention(*be.cuda, d.args);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported on cuda"), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, CopyBandwidthAndWeightCacheStats) {
  SLUICE_REQUIRE_CUDA();
  CudaBackend cuda;
  const double bw = cuda.copy_bandwidth(size_t{64} << 20, 3);
  std::printf("[  INFO    ] %s: %.0f GB/s device copy (read + write), %.1f GiB\n", cuda.device_name().c_str(), bw / 1e9,
              static_cast<double>(cuda.device_memory_bytes()) / (1u << 30));
  EXPECT_GT(bw, 1e9);
  Weights w(DType::Q8_0, 256, 32, 3);
  const auto x = randn(256, 4);
  run_matmul(cuda, w.view, x, 1);
  run_matmul(cuda, w.view, x, 1);
  const CudaWeightCacheStats s = cuda.weight_stats();
  EXPECT_EQ(s.uploads, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.bytes, w.bytes.size());
}

#endif  // SLUICE_HAVE_CUDA

}  // namespace
}  // namespace sluice::test_cuda_parity
