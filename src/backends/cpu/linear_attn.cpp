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
// so S is read three times per chunk instead of twice per token, and every step is a dense
// product on whole vectors (chunk_pass). Every exponent is ≤ 0 (γ is non-increasing), so
// nothing overflows.
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

// Scratch of one thread's chunked pass. Matrices over the chunk's tokens have rows of np
// floats (the chunk length rounded up to whole vector pairs, zero past it), so their products
// run on whole vectors. gam: γ_t (scalar decay) or Γ_t[j] (per channel, [n][Dk]).
struct ChunkScratch {
  int64_t np = 0;
  std::vector<float> st, gam, kc, qc, kh, kt, kk, qk, tri, rhs, u, row;
  std::vector<double> acc;
  void size(int64_t n, int64_t Dk, int64_t Dv, int lanes, bool per_channel) {
    np = (n + 2 * lanes - 1) / (2 * lanes) * (2 * lanes);
    st.resize(static_cast<size_t>(Dk * Dv)), gam.resize(static_cast<size_t>(n * (per_channel ? Dk : 1)));
    kt.resize(static_cast<size_t>(Dk * np)), kc.resize(static_cast<size_t>(n * Dk)), qc.resize(kc.size());
    kk.resize(static_cast<size_t>(n * np)), qk.resize(kk.size()), tri.resize(kk.size());
    rhs.resize(static_cast<size_t>(n * Dv)), u.resize(rhs.size()), row.resize(static_cast<size_t>(std::max(np, Dk)));
    if (per_channel) kh.resize(kc.size()), acc.resize(static_cast<size_t>(Dk));
  }
};

// y[j·ldy + r] = x[r·cols + j]: 16 × 16 tiles, so that neither side walks a column of a
// power-of-two stride through one cache set.
void transpose(const float* x, int64_t rows, int64_t cols, size_t ldy, float* y) {
  constexpr int64_t B = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t j0 = 0; j0 < cols; j0 += B)
      for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
        for (int64_t j = j0; j < std::min(cols, j0 + B); ++j) y[j * static_cast<int64_t>(ldy) + r] = x[r * cols + j];
}

// y[j] = e^{sign·g[j]}, through the level's vector exp.
void exp_of(const Kernels& kk, const float* g, float sign, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = sign * g[j];
  kk.exp_sub_sum(y, 0.0f, n);
}

// The per-channel decay's factorization (below) scales keys by e^{−Γ}: a chunk is cut where a
// channel's cumulative log-decay would pass −kMaxLogRange, so no factor passes e^30 (float
// keeps its relative precision there; the products it forms are each ≤ 1 where used).
constexpr float kMaxLogRange = 30.0f;

// The cumulative per-channel log-decays Γ_t of up to n tokens from t0 into c.gam; returns how
// many tokens keep every channel's −Γ within kMaxLogRange.
int64_t per_channel_chunk(const HeadIo& io, int64_t t0, int64_t n, ChunkScratch& c) {
  const int64_t Dk = io.a.dim_k;
  std::fill(c.acc.begin(), c.acc.end(), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* g = io.g_channels(t0 + t);
    float* gam = c.gam.data() + t * Dk;
    for (int64_t j = 0; j < Dk; ++j) {
      gam[j] = static_cast<float>(c.acc[static_cast<size_t>(j)] += g[j]);
      if (gam[j] < -kMaxLogRange) return t;
    }
  }
  return n;
}

// Tokens [t0, t0 + n) of one head in the chunked form, as dense products
// (Kernels::matmul_acc_f32) on ST = Sᵀ [Dk][Dv], the head's state transposed for the pass.
// Scalar decay (γ_t, c.gam filled here): SK = K·ST, SQ = Q·ST [n][Dv]; KK = K·Kᵀ, QK = Q·Kᵀ
//   [n][n]; E[t][s] = e^{γ_t−γ_s} (s ≤ t); the forward substitution as U = T·R with
//   T = (I + A)⁻¹, A[t][s] = β_t E[t][s] KK[t][s] (s < t; T unit lower triangular, built row
//   by row), R[t] = β_t (v_t − e^{γ_t} SK[t]); O = e^{γ} SQ + M·U, M[t][s] = E[t][s] QK[t][s]
//   (s ≤ t); ST ← e^{γ_n} ST + Kᵀ·(E[n][s] U[s]).
// Per-channel decay (Γ_t[j], c.gam filled by per_channel_chunk): the decays go into the rows,
//   K̃ = K ⊙ e^{Γ}, Q̃ = Q ⊙ e^{Γ}, K̂ = K ⊙ e^{−Γ}: SK = K̃·ST, SQ = Q̃·ST, KK = K̃·K̂ᵀ,
//   QK = Q̃·K̂ᵀ (each entry Σ_j k_t[j] k_s[j] e^{Γ_t[j]−Γ_s[j]}), E = 1, R[t] = β_t (v_t − SK[t]),
//   O = SQ + M·U, ST[j] ← e^{Γ_n[j]} ST[j] + Σ_s k_s[j] e^{Γ_n[j]−Γ_s[j]} U[s].
void chunk_pass(const Kernels& kk, const HeadIo& io, float* ST, int64_t t0, int64_t n, ChunkScratch& c) {
  const DeltaRuleArgs& a = io.a;
  const bool pc = a.per_channel_decay;
  const int64_t Dk = a.dim_k, Dv = a.dim_v, np = c.np;
  const size_t ldo = static_cast<size_t>(a.n_head_v * Dv);
  float* row = c.row.data();
  auto gam_row = [&](int64_t t) { return c.gam.data() + t * Dk; };
  if (!pc) {
    double acc = 0;
    for (int64_t t = 0; t < n; ++t) c.gam[t] = static_cast<float>(acc += io.g(t0 + t));
  }
  // The chunk's k and q rows packed (decayed per channel): the model's rows lie a power of two
  // of bytes apart, so reading a column of them would hit one cache set.
  float *kc = c.kc.data(), *qc = c.qc.data();
  for (int64_t t = 0; t < n; ++t) {
    if (pc) {  // e^{Γ_t} once for k and q, e^{−Γ_t} for the pair partner
      exp_of(kk, gam_row(t), 1.0f, row, Dk);
      kk.scale_mul(io.k(t0 + t), 1.0f, row, kc + t * Dk, Dk);
      kk.scale_mul(io.q(t0 + t), 1.0f, row, qc + t * Dk, Dk);
      exp_of(kk, gam_row(t), -1.0f, row, Dk);
      kk.scale_mul(io.k(t0 + t), 1.0f, row, c.kh.data() + t * Dk, Dk);
    } else {
      std::copy_n(io.k(t0 + t), Dk, kc + t * Dk);
      std::copy_n(io.q(t0 + t), Dk, qc + t * Dk);
    }
  }
  const size_t ld = static_cast<size_t>(Dk), ldv = static_cast<size_t>(Dv), ldn = static_cast<size_t>(np);
  float* sk = c.rhs.data();  // SK, then R in place
  std::fill_n(sk, n * Dv, 0.0f);
  kk.matmul_acc_f32(kc, ld, ST, ldv, sk, ldv, n, Dv, Dk);
  for (int64_t t = 0; t < n; ++t) std::fill_n(io.out(t0 + t), Dv, 0.0f);
  kk.matmul_acc_f32(qc, ld, ST, ldv, io.out(t0), ldo, n, Dv, Dk);
  std::fill(c.kt.begin(), c.kt.end(), 0.0f);
  transpose(pc ? c.kh.data() : kc, n, Dk, ldn, c.kt.data());
  // Only s <= t of KK and QK is used: rows in blocks of 8 stop at their last column's vector pair.
  const int64_t pair = 2 * kk.lanes;
  std::fill(c.kk.begin(), c.kk.end(), 0.0f);
  std::fill(c.qk.begin(), c.qk.end(), 0.0f);
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t r1 = std::min(n, r0 + 8), cols = std::min(np, (r1 + pair - 1) / pair * pair);
    kk.matmul_acc_f32(kc + r0 * Dk, ld, c.kt.data(), ldn, c.kk.data() + r0 * np, ldn, r1 - r0, cols, Dk);
    kk.matmul_acc_f32(qc + r0 * Dk, ld, c.kt.data(), ldn, c.qk.data() + r0 * np, ldn, r1 - r0, cols, Dk);
  }
  std::fill(c.tri.begin(), c.tri.end(), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    if (pc) {
      std::fill_n(row, t + 1, 1.0f);
    } else {
      for (int64_t s = 0; s <= t; ++s) row[s] = -c.gam[s];
      kk.exp_sub_sum(row, -c.gam[t], t + 1);  // row[s] = E[t][s]
    }
    float* at = c.kk.data() + t * np;  // KK[t] becomes −A[t], the coefficients of T's row
    const float beta = io.beta(t0 + t);
    for (int64_t s = 0; s < t; ++s) at[s] = -beta * row[s] * at[s];
    float* tt = c.tri.data() + t * np;
    if (t > 0) kk.axpy_rows_f32(at, c.tri.data(), static_cast<size_t>(np), t, tt, t);
    tt[t] = 1.0f;
    float* mt = c.qk.data() + t * np;
    for (int64_t s = 0; s <= t; ++s) mt[s] *= row[s];
    std::fill(mt + t + 1, mt + np, 0.0f);
    const float* v = io.v(t0 + t);
    const float e = pc ? 1.0f : std::exp(c.gam[t]);
    float* rt = sk + t * Dv;
    for (int64_t i = 0; i < Dv; ++i) rt[i] = beta * (v[i] - e * rt[i]);
    if (!pc) kk.scale_mul(io.out(t0 + t), e, nullptr, io.out(t0 + t), Dv);  // O starts as e^{γ_t} SQ[t]
  }
  // U = T·R and O += M·U, 8 rows at a time: T and M are zero past the diagonal, so a block of
  // rows needs only the first r1 entries of each.
  std::fill(c.u.begin(), c.u.end(), 0.0f);
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t r1 = std::min(n, r0 + 8);
    kk.matmul_acc_f32(c.tri.data() + r0 * np, ldn, sk, ldv, c.u.data() + r0 * Dv, ldv, r1 - r0, Dv, r1);
  }
  for (int64_t r0 = 0; r0 < n; r0 += 8) {
    const int64_t r1 = std::min(n, r0 + 8);
    kk.matmul_acc_f32(c.qk.data() + r0 * np, ldn, c.u.data(), ldv, io.out(t0 + r0), ldo, r1 - r0, Dv, r1);
  }
  for (int64_t t = 0; t < n; ++t) kk.scale_mul(io.out(t0 + t), a.scale, nullptr, io.out(t0 + t), Dv);
  // The state leaving the chunk: the decay of ST, then Kᵀ·W (R's rows reused for W).
  if (pc) {
    const float* gn = gam_row(n - 1);
    for (int64_t s = 0; s < n; ++s) {  // K̂'s rows become k_s ⊙ e^{Γ_n−Γ_s}
      const float* gs = gam_row(s);
      for (int64_t j = 0; j < Dk; ++j) row[j] = gn[j] - gs[j];
      kk.exp_sub_sum(row, 0.0f, Dk);
      kk.scale_mul(io.k(t0 + s), 1.0f, row, c.kh.data() + s * Dk, Dk);
    }
    exp_of(kk, gn, 1.0f, row, Dk);
    for (int64_t j = 0; j < Dk; ++j) kk.scale_mul(ST + j * Dv, row[j], nullptr, ST + j * Dv, Dv);
    transpose(c.kh.data(), n, Dk, ldn, c.kt.data());
    kk.matmul_acc_f32(c.kt.data(), ldn, c.u.data(), ldv, ST, ldv, Dk, Dv, n);
    return;
  }
  for (int64_t s = 0; s < n; ++s) row[s] = -c.gam[s];
  kk.exp_sub_sum(row, -c.gam[n - 1], n);
  for (int64_t s = 0; s < n; ++s) kk.scale_mul(c.u.data() + s * Dv, row[s], nullptr, sk + s * Dv, Dv);
  kk.scale_mul(ST, std::exp(c.gam[n - 1]), nullptr, ST, Dk * Dv);
  kk.matmul_acc_f32(c.kt.data(), ldn, sk, ldv, ST, ldv, Dk, Dv, n);
}

}  // namespace

void delta_rule(const Kernels& kk, ThreadPool& pool, int64_t min_parallel_work, const DeltaRuleArgs& a, int64_t chunk) {
  const int64_t T = a.n_tok, Hk = a.n_head_k, Hv = a.n_head_v, Dk = a.dim_k, Dv = a.dim_v;
  if (Hk <= 0 || Hv % Hk != 0) fail("delta_rule: ", Hv, " value heads are not a multiple of ", Hk, " key heads");
  if (T <= 0) return;
  const bool chunked = chunk > 0 && T >= kDeltaChunkMinTokens;
  auto body = [&](int64_t h0, int64_t h1, int) {
    std::vector<float> u(Dv), d(Dk);
    ChunkScratch c;
    if (chunked) c.size(std::min(chunk, T), Dk, Dv, kk.lanes, a.per_channel_decay);
    for (int64_t h = h0; h < h1; ++h) {
      const HeadIo io{a, h, a.key_head(h)};
      float* S = a.state + h * Dv * Dk;
      if (!chunked) {
        recurrence(kk, io, S, 0, T, u.data(), d.data());
        continue;
      }
      float* ST = c.st.data();
      transpose(S, Dv, Dk, static_cast<size_t>(Dv), ST);
      for (int64_t t0 = 0; t0 < T;) {
        int64_t n = std::min(chunk, T - t0);
        if (a.per_channel_decay) n = per_channel_chunk(io, t0, n, c);
        if (n >= 2) {
          chunk_pass(kk, io, ST, t0, n, c);
        } else {  // a token that decays a channel past the factorization's range: by the recurrence
          n = 1;
          transpose(ST, Dk, Dv, static_cast<size_t>(Dk), S);
          recurrence(kk, io, S, t0, t0 + 1, u.data(), d.data());
          transpose(S, Dv, Dk, static_cast<size_t>(Dv), ST);
        }
        t0 += n;
      }
      transpose(ST, Dk, Dv, static_cast<size_t>(Dk), S);
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
