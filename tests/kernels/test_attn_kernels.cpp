// tests/kernels/test_attn_kernels: the fused attention kernels of backends/cpu/attn_kernels.h
// (scores and V sums read straight from f16 / q8_0 / q4_0 / tq2..tq8 / tq2g..tq4g / tq3s heads) at every ISA
// level this machine has, against (1) the path they replaced at the same level — decode the
// head (quant/'s dequantize_row or TqCodec::decode_head_rotated), then Kernels::dot_f32 /
// axpy_f32 — which they must match bit for bit (attn_kernels.h's contract), and (2) their
// generic twin, within float rounding. Negative controls: a one-position shift and a
// corrupted index byte must be caught. Legend: P positions, G query heads, D head dim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/attn_kernels.h"
#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/kernel_test_util.h"
#include "kvcodec/kvcodec.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::test_attn_kernels {
namespace {

using cpu::AttnKernels;
using cpu::AttnKvOps;
using cpu::Kernels;
using test::available_isas;
using test::nmse;
using test::randn;

// SIMD vs the generic twin: the same decoded values, dots of D <= 256 products summed in a
// different lane order (W 8 vs 16) and with fused vs unfused multiply-adds, so each score is
// off by float rounding of its products' scale. Scores are compared relative to that scale,
// Σ(s - s')² / Σ(γ·|k|·|q|)², not to their own size: one score that nearly cancels (P = G = 1)
// would otherwise read as a large relative error (tq3 at D = 32: 4e-10 NMSE). Observed
// ~1e-16 that way, V sums ~2e-14 plain NMSE. 1e-10 is the kernel-parity policy
// (test_backend_parity.cpp); the negative controls below give > 1e-3.
constexpr double kTol = 1e-10;

const DType kTypes[] = {DType::F16, DType::Q8_0, DType::Q4_0, kKvTq2,  kKvTq3, kKvTq4,
                        kKvTq8,     kKvTq2g,     kKvTq3g,     kKvTq4g, kKvTq3s};

// P positions of one KV head each, stored as the middle head of a 3-head row (so the stride is
// not the head size and neighbouring heads hold other data), plus the decoded heads.
struct Heads {
  DType type;
  int64_t D = 0;
  std::unique_ptr<TqCodec> tq;  // tq types: 1 head of D, the codebook the kernels get
  size_t head_bytes = 0, stride = 0;
  std::vector<uint8_t> bytes;  // P rows of `stride` bytes
  std::vector<float> dec;      // P × D decoded values (rotated centroids for tq)
  std::vector<float> gamma;    // P: tq's γ, else 1

  const uint8_t* head(int64_t j) const { return bytes.data() + j * stride + head_bytes; }
  const float* cb() const { return tq ? (tq->bits_lo() ? cpu::tq_split_codebook() : tq->codebook().data()) : nullptr; }
};

Heads make_heads(DType t, int64_t P, int64_t D, uint32_t seed) {
  Heads h;
  h.type = t;
  h.D = D;
  if (kv_type_is_tq(t)) {
    h.tq = std::make_unique<TqCodec>(TqCodec::for_type(t, 1, D, 77));
    h.head_bytes = h.tq->head_bytes();
  } else {
    h.head_bytes = kv_type_row_bytes(t, 1, D);
  }
  h.stride = 3 * h.head_bytes;
  h.bytes.assign(static_cast<size_t>(P) * h.stride + 64, 0xA5);  // + slack: reads must stay in the head
  h.dec.resize(static_cast<size_t>(P * D));
  h.gamma.assign(static_cast<size_t>(P), 1.0f);
  const std::vector<float> x = randn(static_cast<size_t>(P * D), seed, 1.5f);
  for (int64_t j = 0; j < P; ++j) {
    uint8_t* dst = h.bytes.data() + j * h.stride + h.head_bytes;
    const float* xj = x.data() + j * D;
    float* dj = h.dec.data() + j * D;
    if (h.tq) {
      h.tq->encode_row(xj, dst);
      h.gamma[j] = h.tq->decode_head_rotated(dst, dj);
    } else if (t == DType::F16) {
      for (int64_t i = 0; i < D; ++i) reinterpret_cast<uint16_t*>(dst)[i] = fp32_to_fp16(xj[i]);
      dequantize_row(t, dst, dj, D);
    } else {
      quantize_row(t, xj, dst, D);
      dequantize_row(t, dst, dj, D);
    }
  }
  return h;
}

// q8_0 K is scored on int8 outside these kernels (attn_kernels.h; test_attention_kv.cpp
// checks it against the ref backend, which quantizes the query the same way).
bool has_scores(DType t) { return t != DType::Q8_0; }

const AttnKvOps& ops_of(const AttnKernels& ak, DType t) {
  const AttnKvOps* o = ak.get(t);
  EXPECT_NE(o, nullptr) << kv_type_name(t);
  return *o;
}

// The replaced path: s[g][j] = γ_j·dot_f32(decoded_j, q_g) (plain dot for non-tq types).
std::vector<float> scores_ref(const Kernels& k, const Heads& h, int64_t P, const std::vector<float>& q, int64_t G,
                              size_t lds) {
  std::vector<float> s(static_cast<size_t>(G) * lds, 0.0f);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < P; ++j) {
      const float d = k.dot_f32(h.dec.data() + j * h.D, q.data() + g * h.D, h.D);
      s[g * lds + j] = h.tq ? h.gamma[j] * d : d;
    }
  return s;
}

// The replaced path: y_g += (a[g][j]·γ_j)·decoded_j, positions in order, via axpy_f32.
std::vector<float> axpy_ref(const Kernels& k, const Heads& h, int64_t P, const std::vector<float>& a, size_t lda,
                            int64_t G, std::vector<float> y) {
  for (int64_t j = 0; j < P; ++j)
    for (int64_t g = 0; g < G; ++g) {
      const float w = h.tq ? a[g * lda + j] * h.gamma[j] : a[g * lda + j];
      k.axpy_f32(w, h.dec.data() + j * h.D, y.data() + g * h.D, h.D);
    }
  return y;
}

// Σ(got - ref)² / Σ scale², scale[g][j] = γ_j·|decoded_j|·|q_g|.
double score_err(const Heads& h, int64_t P, const std::vector<float>& q, int64_t G, const std::vector<float>& ref,
                 const std::vector<float>& got) {
  double num = 0, den = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < P; ++j) {
      double kk = 0, qq = 0;
      for (int64_t i = 0; i < h.D; ++i) {
        kk += static_cast<double>(h.dec[j * h.D + i]) * h.dec[j * h.D + i];
        qq += static_cast<double>(q[g * h.D + i]) * q[g * h.D + i];
      }
      const double d = static_cast<double>(got[g * P + j]) - ref[g * P + j];
      num += d * d;
      den += static_cast<double>(h.gamma[j]) * h.gamma[j] * kk * qq;
    }
  return std::isfinite(num) && den > 0 ? num / den : INFINITY;
}

std::vector<float> run_scores(const AttnKvOps& o, const Heads& h, int64_t P, const std::vector<float>& q, int64_t G,
                              size_t lds, int64_t shift = 0) {
  std::vector<float> s(static_cast<size_t>(G) * lds, 0.0f);
  o.scores(h.head(shift), h.stride, P, q.data(), G, h.D, h.cb(), s.data(), lds);
  return s;
}

std::vector<float> run_axpy(const AttnKvOps& o, const Heads& h, int64_t P, const std::vector<float>& a, size_t lda,
                            int64_t G, std::vector<float> y, int64_t shift = 0) {
  o.axpy(a.data(), lda, h.head(shift), h.stride, P, G, h.D, h.cb(), y.data());
  return y;
}

struct Shape {
  int64_t P, G, D;
};
// G: 1 (MHA), 3 and 5 (odd tile remainders), 4, 8 (qwen3-30b-a3b), 16; P: 1, partial tiles,
// one attention block (64) and more than the V kernel's 64-position chunk.
const Shape kShapes[] = {{1, 1, 32}, {5, 3, 64}, {64, 8, 128}, {67, 16, 128}, {13, 5, 256}, {130, 4, 128}};

TEST(AttnKernels, EveryLevelMatchesTheDecodePathBitwise) {
  for (CpuIsa isa : available_isas()) {
    const Kernels& k = cpu::kernels_for(isa);
    const AttnKernels& ak = cpu::attn_kernels_for(isa);
    for (DType t : kTypes)
      for (const Shape& sh : kShapes) {
        if (kv_type_k_only(t) && sh.D < 64) continue;  // tq3s: two halves of >= 32
        const Heads h = make_heads(t, sh.P + 1, sh.D, 3);
        const std::vector<float> q = randn(static_cast<size_t>(sh.G * sh.D), 4);
        const size_t lds = static_cast<size_t>(sh.P + 3);
        if (has_scores(t)) {
          const auto s_ref = scores_ref(k, h, sh.P, q, sh.G, lds);
          const auto s = run_scores(ops_of(ak, t), h, sh.P, q, sh.G, lds);
          EXPECT_EQ(0, std::memcmp(s_ref.data(), s.data(), s.size() * sizeof(float)))
              << "scores " << cpu_isa_name(isa) << " " << kv_type_name(t) << " P=" << sh.P << " G=" << sh.G
              << " D=" << sh.D;
        }

        const std::vector<float> a = randn(static_cast<size_t>(sh.G) * lds, 5, 0.3f);
        const std::vector<float> y0 = randn(static_cast<size_t>(sh.G * sh.D), 6);
        const auto y_ref = axpy_ref(k, h, sh.P, a, lds, sh.G, y0);
        const auto y = run_axpy(ops_of(ak, t), h, sh.P, a, lds, sh.G, y0);
        EXPECT_EQ(0, std::memcmp(y_ref.data(), y.data(), y.size() * sizeof(float)))
            << "axpy " << cpu_isa_name(isa) << " " << kv_type_name(t) << " P=" << sh.P << " G=" << sh.G
            << " D=" << sh.D;
      }
  }
}

TEST(AttnKernels, SimdLevelsMatchTheGenericTwin) {
  const AttnKernels& gen = cpu::attn_kernels_generic();
  for (CpuIsa isa : available_isas()) {
    if (isa == CpuIsa::generic) continue;
    const AttnKernels& ak = cpu::attn_kernels_for(isa);
    for (DType t : kTypes) {
      double worst_s = 0, worst_y = 0;
      for (const Shape& sh : kShapes) {
        if (kv_type_k_only(t) && sh.D < 64) continue;
        const Heads h = make_heads(t, sh.P, sh.D, 8);
        const std::vector<float> q = randn(static_cast<size_t>(sh.G * sh.D), 9);
        const size_t lds = static_cast<size_t>(sh.P);
        const double es = has_scores(t) ? score_err(h, sh.P, q, sh.G, run_scores(ops_of(gen, t), h, sh.P, q, sh.G, lds),
                                                    run_scores(ops_of(ak, t), h, sh.P, q, sh.G, lds))
                                        : 0.0;
        const std::vector<float> a = randn(static_cast<size_t>(sh.G) * lds, 10, 0.3f);
        const std::vector<float> y0(static_cast<size_t>(sh.G * sh.D), 0.0f);
        const double ey = nmse(run_axpy(ops_of(gen, t), h, sh.P, a, lds, sh.G, y0),
                               run_axpy(ops_of(ak, t), h, sh.P, a, lds, sh.G, y0));
        EXPECT_LE(es, kTol) << "scores " << cpu_isa_name(isa) << " " << kv_type_name(t) << " P=" << sh.P
                            << " G=" << sh.G;
        EXPECT_LE(ey, kTol) << "axpy " << cpu_isa_name(isa) << " " << kv_type_name(t) << " P=" << sh.P << " G=" << sh.G;
        worst_s = std::max(worst_s, es);
        worst_y = std::max(worst_y, ey);
      }
      std::printf("[  NMSE    ] attn kernels %-6s %-5s vs generic: scores %.3g, V sum %.3g\n",
                  std::string(cpu_isa_name(isa)).c_str(), std::string(kv_type_name(t)).c_str(), worst_s, worst_y);
    }
  }
}

// The same comparisons must fail when the kernel reads the wrong position (a stride or
// offset bug) or a stored index changes (a bit-unpacking bug that ignored those bits).
TEST(AttnKernels, NegativeControls) {
  for (CpuIsa isa : available_isas()) {
    const Kernels& k = cpu::kernels_for(isa);
    const AttnKernels& ak = cpu::attn_kernels_for(isa);
    for (DType t : kTypes) {
      const int64_t P = 20, G = 4, D = 128;
      Heads h = make_heads(t, P + 1, D, 12);
      const std::vector<float> q = randn(static_cast<size_t>(G * D), 13);
      const std::vector<float> a = randn(static_cast<size_t>(G * P), 14, 0.3f);
      const std::vector<float> y0(static_cast<size_t>(G * D), 0.0f);
      const auto y_ref = axpy_ref(k, h, P, a, P, G, y0);
      EXPECT_GT(nmse(y_ref, run_axpy(ops_of(ak, t), h, P, a, P, G, y0, 1)), 1e-3) << kv_type_name(t);
      if (!has_scores(t)) continue;
      const auto s_ref = scores_ref(k, h, P, q, G, P);
      EXPECT_GT(nmse(s_ref, run_scores(ops_of(ak, t), h, P, q, G, P, 1)), 1e-3) << kv_type_name(t);
      // Flip the high bits of one byte near the end of position 7's head (the last index
      // group a lookup reads): its score must move while the others stay bitwise equal.
      uint8_t* hb = const_cast<uint8_t*>(h.head(7));
      const size_t off = t == DType::F16 ? h.head_bytes - 1 : h.head_bytes - 2;
      hb[off] ^= 0xF0;
      const auto s = run_scores(ops_of(ak, t), h, P, q, G, P);
      int moved = 0;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < P; ++j) {
          const bool same = s[g * P + j] == s_ref[g * P + j];
          if (j == 7)
            moved += !same;
          else
            EXPECT_TRUE(same) << kv_type_name(t) << " position " << j;
        }
      EXPECT_GT(moved, 0) << cpu_isa_name(isa) << " " << kv_type_name(t) << ": a changed index byte was not read";
      // tqNg: the last group's scale (its fp16 exponent) at position 9 must move that score.
      if (kv_type_tq_group(t)) {
        uint8_t* h9 = const_cast<uint8_t*>(h.head(9));
        h9[h.head_bytes - (2 + kTqGroup * kv_type_tq_bits(t) / 8) + 1] ^= 0x04;
        const auto s9 = run_scores(ops_of(ak, t), h, P, q, G, P);
        int moved9 = 0;
        for (int64_t g = 0; g < G; ++g) moved9 += s9[g * P + 9] != s[g * P + 9];
        EXPECT_GT(moved9, 0) << cpu_isa_name(isa) << " " << kv_type_name(t) << ": a group's scale was not read";
      }
    }
  }
}

// q8_0 K scores: AttnKernels::q8_0_scores (query rows of a group in lanes) must give
// Q8Ops::gemm's bits (the generic twin's: every level's 32-block dots are bitwise equal),
// on shapes with partial groups (G 1, 3, 5, 12), more than 4 blocks per head (D 160, 256:
// the second round of lane accumulators) and a K byte of -128 (maddubs/vpdpbusd on |k|).
TEST(AttnKernels, Q8ScoresEqualTheQ8GemmBitwise) {
  const cpu::Q8Ops& gemm = *cpu::q8_kernels_generic().get(DType::Q8_0);
  const Shape shapes[] = {{1, 1, 32}, {5, 3, 64}, {64, 8, 128}, {67, 16, 128}, {13, 5, 256}, {9, 12, 160}};
  int checked = 0;
  for (CpuIsa isa : available_isas()) {
    const AttnKernels& ak = cpu::attn_kernels_for(isa);
    if (!ak.q8_0_scores) continue;
    for (const Shape& sh : shapes) {
      Heads h = make_heads(DType::Q8_0, sh.P + 1, sh.D, 21);
      reinterpret_cast<block_q8_0*>(const_cast<uint8_t*>(h.head(0)))->qs[3] = -128;
      const size_t qb = static_cast<size_t>(sh.D / 32) * sizeof(block_q8_0);
      std::vector<uint8_t> qq(static_cast<size_t>(sh.G) * qb);
      const std::vector<float> q = randn(static_cast<size_t>(sh.G * sh.D), 22);
      for (int64_t g = 0; g < sh.G; ++g) quantize_row(DType::Q8_0, q.data() + g * sh.D, qq.data() + g * qb, sh.D);
      const size_t lds = static_cast<size_t>(sh.P + 2);
      std::vector<float> want(static_cast<size_t>(sh.G) * lds, 0.0f), got = want;
      gemm.gemm(h.head(0), h.stride, sh.P, qq.data(), qb, sh.G, sh.D, want.data(), lds);
      ak.q8_0_scores(h.head(0), h.stride, sh.P, reinterpret_cast<const block_q8_0*>(qq.data()), sh.G, sh.D, got.data(),
                     lds);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << cpu_isa_name(isa) << " P=" << sh.P << " G=" << sh.G << " D=" << sh.D;
      // Negative control: one position over, the scores are other dots.
      ak.q8_0_scores(h.head(1), h.stride, sh.P, reinterpret_cast<const block_q8_0*>(qq.data()), sh.G, sh.D, got.data(),
                     lds);
      EXPECT_GT(nmse(want, got), 1e-3) << cpu_isa_name(isa) << " P=" << sh.P << " G=" << sh.G << " D=" << sh.D;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this CPU: q8_0 scores run on Q8Ops::gemm only";
}

// Integer V sums (attn_kernels.h's axpy_i16) with weights rounded to `steps` (32767: the
// contract) per (row, block, 64-position chunk), in double: the precision the contract
// claims, and with 127 the 8-bit weights it was chosen over (the negative control of its
// tolerance). A block's element is code·d, so its weight a·d is what is rounded.
std::vector<float> axpy_rounded(const Heads& h, int64_t P, const std::vector<float>& a, size_t lda, int64_t G,
                                std::vector<float> y, double steps) {
  const size_t bb = h.type == DType::Q4_0 ? sizeof(block_q4_0) : sizeof(block_q8_0);
  auto scale = [&](int64_t j, int64_t b) {
    uint16_t d;
    std::memcpy(&d, h.head(j) + b * bb, 2);
    return static_cast<double>(fp16_to_fp32(d));
  };
  for (int64_t g = 0; g < G; ++g)
    for (int64_t b = 0; b < h.D / 32; ++b)
      for (int64_t j0 = 0; j0 < P; j0 += cpu::kAxpyI16Chunk) {
        const int64_t j1 = std::min(P, j0 + cpu::kAxpyI16Chunk);
        double mx = 0;
        for (int64_t j = j0; j < j1; ++j) mx = std::max(mx, std::fabs(a[g * lda + j] * scale(j, b)));
        if (mx == 0) continue;
        for (int64_t j = j0; j < j1; ++j) {
          const double d = scale(j, b);
          if (d == 0) continue;
          const double wq = std::nearbyint(a[g * lda + j] * d / mx * steps) * mx / steps;  // ≈ a·d
          for (int64_t i = 0; i < 32; ++i)
            y[g * h.D + b * 32 + i] += static_cast<float>(wq / d * h.dec[j * h.D + b * 32 + i]);
        }
      }
  return y;
}

// attn_kernels.h's integer V sums: every level that has them gives the scalar twin's bits
// (P over the 64-position chunk, G with partial 8-row passes, odd P for the pair tail), they
// are within kTolAttentionIntV of the float decode path, and negative controls: a one-position
// shift, a changed code byte, and weights rounded to 8 bits instead of 16 (which the
// tolerance must reject).
TEST(AttnKernels, IntegerVSumsEqualTheirTwinBitwise) {
  const Kernels& kg = cpu::kernels_generic();
  int checked = 0;
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const cpu::AttnAxpyI16 twin = cpu::attn_axpy_i16_twin(t);
    ASSERT_NE(twin, nullptr) << kv_type_name(t);
    double worst = 0;
    for (const Shape& sh : kShapes) {
      const Heads h = make_heads(t, sh.P + 1, sh.D, 31);
      const size_t lds = static_cast<size_t>(sh.P + 3);
      std::vector<float> a = randn(static_cast<size_t>(sh.G) * lds, 32, 0.3f);
      for (float& x : a) x = std::exp(x);  // softmax weights: positive, one block can dominate
      if (sh.G > 1)
        for (int64_t j = 0; j < sh.P; ++j) a[j] = 0.0f;  // a row adding nothing (mx = 0)
      const std::vector<float> y0 = randn(static_cast<size_t>(sh.G * sh.D), 33);
      std::vector<float> want = y0;
      twin(a.data(), lds, h.head(0), h.stride, sh.P, sh.G, sh.D, want.data());
      const double e = nmse(axpy_ref(kg, h, sh.P, a, lds, sh.G, y0), want);
      worst = std::max(worst, e);
      EXPECT_LE(e, kTolAttentionIntV) << kv_type_name(t) << " P=" << sh.P << " G=" << sh.G;
      for (CpuIsa isa : available_isas()) {
        const cpu::AttnAxpyI16 f = cpu::attn_kernels_for(isa).axpy_i16(t);
        if (!f) continue;
        std::vector<float> got = y0;
        f(a.data(), lds, h.head(0), h.stride, sh.P, sh.G, sh.D, got.data());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)))
            << cpu_isa_name(isa) << " " << kv_type_name(t) << " P=" << sh.P << " G=" << sh.G << " D=" << sh.D;
        ++checked;
      }
    }
    std::printf("[  NMSE    ] integer V sums %-5s vs the float decode path: %.3g\n",
                std::string(kv_type_name(t)).c_str(), worst);
    // Negative controls (P = 64, G = 8, D = 128, best level).
    const cpu::AttnAxpyI16 f = cpu::attn_kernels_for(available_isas().back()).axpy_i16(t);
    const cpu::AttnAxpyI16 fz = f ? f : twin;
    Heads h = make_heads(t, 65, 128, 34);
    std::vector<float> a = randn(8 * 64, 35, 1.0f);
    for (float& x : a) x = std::exp(2.0f * x);
    const std::vector<float> y0(8 * 128, 0.0f);
    const auto ref = axpy_ref(kg, h, 64, a, 64, 8, y0);
    std::vector<float> y = y0;
    fz(a.data(), 64, h.head(0), h.stride, 64, 8, 128, y.data());
    EXPECT_LE(nmse(ref, y), kTolAttentionIntV) << kv_type_name(t);
    std::vector<float> ys = y0;
    fz(a.data(), 64, h.head(1), h.stride, 64, 8, 128, ys.data());
    EXPECT_GT(nmse(ref, ys), 1e-3) << kv_type_name(t) << ": a shifted position went unseen";
    EXPECT_GT(nmse(ref, axpy_rounded(h, 64, a, 64, 8, y0, 127.0)), kTolAttentionIntV)
        << kv_type_name(t) << ": 8-bit weights pass the 16-bit tolerance";
    EXPECT_LE(nmse(ref, axpy_rounded(h, 64, a, 64, 8, y0, 32767.0)), kTolAttentionIntV) << kv_type_name(t);
    uint8_t* p7 = const_cast<uint8_t*>(h.head(7)) + 2 + 5;  // block 0, a code byte of position 7
    *p7 ^= 0x33;
    std::vector<float> yc = y0;
    fz(a.data(), 64, h.head(0), h.stride, 64, 8, 128, yc.data());
    EXPECT_NE(0, std::memcmp(y.data(), yc.data(), y.size() * sizeof(float))) << kv_type_name(t);
  }
  if (checked == 0) std::printf("[  SKIP    ] no SIMD level with integer V sums on this CPU: the twin alone\n");
}

TEST(AttnKernels, TypesWithoutFusedOps) {
  for (CpuIsa isa : available_isas()) {
    const AttnKernels& ak = cpu::attn_kernels_for(isa);
    EXPECT_EQ(ak.get(DType::F32), nullptr);
    EXPECT_EQ(ak.get(DType::BF16), nullptr);
    EXPECT_EQ(ak.get(DType::Q4_K), nullptr);
    for (DType t : kTypes) {
      ASSERT_NE(ak.get(t), nullptr) << kv_type_name(t);
      EXPECT_EQ(ak.get(t)->scores != nullptr, has_scores(t)) << kv_type_name(t);
    }
  }
}

}  // namespace
}  // namespace sluice::test_attn_kernels
