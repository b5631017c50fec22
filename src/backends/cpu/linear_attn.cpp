// backends/cpu/linear_attn: the gated delta rule and the causal short convolution on the cpu.
//
// The delta rule per value head keeps S [Dv][Dk] (row i: what the state returns in value
// channel i). Decode walks S twice per token (decay + S·k, then the rank-1 update + S·q),
// each row a Dk-long kernel call. Prefill uses the chunked form of the same recurrence
// (the WY/UT representation of DeltaNet, arXiv:2406.06484 §3, with the gated decay of
// arXiv:2412.06464): within a chunk of n tokens, with γ_t the cumulative log-decay and
// S0 the state entering the chunk,
//   u_t = β_t (v_t − e^{γ_t} S0·k_t) − Σ_{s<t} β_t e^{γ_t−γ_s} (k_t·k_s) u_s   (forward substitution)
//   o_t = e^{γ_t} S0·q_t + Σ_{s≤t} e^{γ_t−γ_s} (q_t·k_s) u_s
//   S_n = e^{γ_n} S0 + Σ_s e^{γ_n−γ_s} u_s k_sᵀ
// so S is read three times per chunk instead of twice per token. Every exponent is ≤ 0
// (γ is non-increasing), so nothing overflows.
#include "backends/cpu/linear_attn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace sluice::cpu {

namespace {

struct HeadIo {
  const DeltaRuleArgs& a;
  int64_t h, kh;
  const float* q(int64_t t) const { return a.q + t * a.qk_stride + kh * a.dim_k; }
  const float* k(int64_t t) const { return a.k + t * a.qk_stride + kh * a.dim_k; }
  const float* v(int64_t t) const { return a.v + t * a.v_stride + h * a.dim_v; }
  float beta(int64_t t) const { return a.beta[t * a.n_head_v + h]; }
  float g(int64_t t) const { return a.g[t * a.n_head_v + h]; }
  const float* g_channels(int64_t t) const { return a.g + (t * a.n_head_v + h) * a.dim_k; }
  float* out(int64_t t) const { return a.out + (t * a.n_head_v + h) * a.dim_v; }
};

// Tokens [t0, t1) of one head by the recurrence. u, d: Dv and Dk floats of scratch.
void recurrence(const Kernels& kk, const HeadIo& io, float* S, int64_t t0, int64_t t1, float* u, float* d) {
  const DeltaRuleArgs& a = io.a;
  const int64_t Dk = a.dim_k, Dv = a.dim_v;
  for (int64_t t = t0; t < t1; ++t) {
    const float *q = io.q(t), *k = io.k(t), *v = io.v(t);
    const float beta = io.beta(t);
    float s = 1.0f;
    const float* w = nullptr;
    if (a.per_channel_decay) {
      const float* g = io.g_channels(t);
      for (int64_t j = 0; j < Dk; ++j) d[j] = std::exp(g[j]);
      w = d;
    } else {
      s = std::exp(io.g(t));
    }
    for (int64_t i = 0; i < Dv; ++i) {
      float* row = S + i * Dk;
      kk.scale_mul(row, s, w, row, Dk);
      u[i] = beta * (v[i] - kk.dot_f32(row, k, Dk));
    }
    float* o = io.out(t);
    for (int64_t i = 0; i < Dv; ++i) {
      float* row = S + i * Dk;
      kk.axpy_f32(u[i], k, row, Dk);
      o[i] = a.scale * kk.dot_f32(row, q, Dk);
    }
  }
}

// Scratch of one thread's chunked pass.
struct ChunkScratch {
  std::vector<float> gam, sk, sq, U, coef, kk, qk, decay;
  void size(int64_t n, int64_t Dv) {
    gam.resize(n), sk.resize(n * Dv), sq.resize(n * Dv), U.resize(n * Dv), coef.resize(n);
    kk.resize(n * n), qk.resize(n * n), decay.resize(n);
  }
};

// Tokens [t0, t0 + n) of one head in the chunked form (scalar decay).
void chunk_pass(const Kernels& kk, const HeadIo& io, float* S, int64_t t0, int64_t n, ChunkScratch& c) {
  const DeltaRuleArgs& a = io.a;
  const int64_t Dk = a.dim_k, Dv = a.dim_v;
  double acc = 0;
  for (int64_t t = 0; t < n; ++t) c.gam[t] = static_cast<float>(acc += io.g(t0 + t));
  // The chunk's products as tiled matrix products (each entry one dot, kernels.h): S0·k_t and
  // S0·q_t [n][Dv], and every k_t·k_s and q_t·k_s [n][n] (only s <= t is used).
  const size_t ldk = static_cast<size_t>(a.qk_stride);
  kk.gemm_f32(S, Dk, Dv, io.k(t0), ldk, n, Dk, c.sk.data(), Dv);
  kk.gemm_f32(S, Dk, Dv, io.q(t0), ldk, n, Dk, c.sq.data(), Dv);
  kk.gemm_f32(io.k(t0), ldk, n, io.k(t0), ldk, n, Dk, c.kk.data(), n);  // kk[t][s] = k_s·k_t
  kk.gemm_f32(io.k(t0), ldk, n, io.q(t0), ldk, n, Dk, c.qk.data(), n);  // qk[t][s] = k_s·q_t
  for (int64_t t = 0; t < n; ++t) {
    const float* v = io.v(t0 + t);
    const float beta = io.beta(t0 + t), e = std::exp(c.gam[t]);
    float* ut = c.U.data() + t * Dv;
    for (int64_t i = 0; i < Dv; ++i) ut[i] = beta * (v[i] - e * c.sk[t * Dv + i]);
    for (int64_t s = 0; s < t; ++s) c.coef[s] = -beta * std::exp(c.gam[t] - c.gam[s]) * c.kk[t * n + s];
    if (t > 0) kk.axpy_rows_f32(c.coef.data(), c.U.data(), static_cast<size_t>(Dv), t, ut, Dv);
  }
  for (int64_t t = 0; t < n; ++t) {
    float* o = io.out(t0 + t);
    kk.scale_mul(c.sq.data() + t * Dv, std::exp(c.gam[t]), nullptr, o, Dv);
    for (int64_t s = 0; s <= t; ++s) c.coef[s] = std::exp(c.gam[t] - c.gam[s]) * c.qk[t * n + s];
    kk.axpy_rows_f32(c.coef.data(), c.U.data(), static_cast<size_t>(Dv), t + 1, o, Dv);
    kk.scale_mul(o, a.scale, nullptr, o, Dv);
  }
  // The state leaving the chunk: row i gets Σ_s e^{γ_n−γ_s} u_s[i] k_s.
  const float e_n = std::exp(c.gam[n - 1]);
  std::vector<float>& w = c.coef;
  std::vector<float>& decay = c.decay;
  for (int64_t s = 0; s < n; ++s) decay[s] = std::exp(c.gam[n - 1] - c.gam[s]);
  for (int64_t i = 0; i < Dv; ++i) {
    float* row = S + i * Dk;
    kk.scale_mul(row, e_n, nullptr, row, Dk);
    for (int64_t s = 0; s < n; ++s) w[s] = decay[s] * c.U[s * Dv + i];
    kk.axpy_rows_f32(w.data(), io.k(t0), ldk, n, row, Dk);
  }
}

}  // namespace

void delta_rule(const Kernels& kk, ThreadPool& pool, int64_t min_parallel_work, const DeltaRuleArgs& a, int64_t chunk) {
  const int64_t T = a.n_tok, Hk = a.n_head_k, Hv = a.n_head_v, Dk = a.dim_k, Dv = a.dim_v;
  if (Hk <= 0 || Hv % Hk != 0) fail("delta_rule: ", Hv, " value heads are not a multiple of ", Hk, " key heads");
  if (T <= 0) return;
  const bool chunked = chunk > 0 && !a.per_channel_decay && T >= kDeltaChunkMinTokens;
  auto body = [&](int64_t h0, int64_t h1, int) {
    std::vector<float> u(Dv), d(Dk);
    ChunkScratch c;
    if (chunked) c.size(std::min(chunk, T), Dv);
    for (int64_t h = h0; h < h1; ++h) {
      const HeadIo io{a, h, a.key_head(h)};
      float* S = a.state + h * Dv * Dk;
      if (!chunked) {
        recurrence(kk, io, S, 0, T, u.data(), d.data());
        continue;
      }
      for (int64_t t0 = 0; t0 < T; t0 += chunk) chunk_pass(kk, io, S, t0, std::min(chunk, T - t0), c);
    }
  };
  const int64_t work = 4 * T * Hv * Dv * Dk;
  if (work < min_parallel_work || pool.size() == 1 || Hv == 1)
    body(0, Hv, 0);
  else
    pool.parallel_for(Hv, body);
}

void conv1d_causal(const Kernels& kk, const float* x, const float* w, float* state, float* out, int64_t n_tok,
                   int64_t n_ch, int64_t kernel, bool silu) {
  if (kernel < 1) fail("conv1d_causal: kernel size ", kernel, " must be >= 1");
  const int64_t K = kernel, C = n_ch, S = K - 1;
  // Taps as rows [K][C], so every inner loop runs along the channels.
  std::vector<float> wt(static_cast<size_t>(K * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) wt[j * C + c] = w[c * K + j];
  auto xs = [&](int64_t r) { return r < S ? state + r * C : x + (r - S) * C; };
  for (int64_t t = 0; t < n_tok; ++t) {
    float* o = out + t * C;
    std::fill(o, o + C, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const float* xr = xs(t + j);
      const float* wr = wt.data() + j * C;
      for (int64_t c = 0; c < C; ++c) o[c] += wr[c] * xr[c];
    }
  }
  if (silu) {
    std::vector<float> ones(static_cast<size_t>(C), 1.0f);
    for (int64_t t = 0; t < n_tok; ++t) kk.swiglu(out + t * C, ones.data(), out + t * C, C);
  }
  std::vector<float> tail(static_cast<size_t>(S * C));
  for (int64_t r = 0; r < S; ++r) std::copy_n(xs(n_tok + r), C, tail.data() + r * C);
  std::copy(tail.begin(), tail.end(), state);
}

}  // namespace sluice::cpu
