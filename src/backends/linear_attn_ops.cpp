// backends/linear_attn_ops: the default linear-attention ops of Backend (backend.h) — scalar
// host code with float64 accumulation, the ref twins every override is held to. The math is
// written from the papers: the short convolution of Mamba-style blocks, and the gated delta
// rule of Gated DeltaNet (arXiv:2412.06464, eq. 10) / Kimi Delta Attention (arXiv:2510.26692),
// evaluated as the plain recurrence, one token at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"

namespace sluice {

namespace {
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// As ggml_softplus: the identity above 20, where log1p(exp(x)) == x in float.
double softplus_d(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
}  // namespace

void Backend::conv1d_causal(const float* x, const float* w, float* state, float* out, int64_t n_tok, int64_t n_ch,
                            int64_t kernel, bool silu) {
  if (kernel < 1) fail("conv1d_causal: kernel size ", kernel, " must be >= 1");
  const int64_t K = kernel, C = n_ch, S = K - 1;
  // xs = state ++ x, addressed without copying: row r < S is state row r, else x row r - S.
  auto xs = [&](int64_t r, int64_t c) { return r < S ? state[r * C + c] : x[(r - S) * C + c]; };
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) acc += static_cast<double>(w[c * K + j]) * xs(t + j, c);
      out[t * C + c] = static_cast<float>(silu ? acc * sigmoid_d(acc) : acc);
    }
  // The new window: the last S rows of xs (which may still include old state rows).
  std::vector<float> tail(static_cast<size_t>(S * C));
  for (int64_t r = 0; r < S; ++r)
    for (int64_t c = 0; c < C; ++c) tail[r * C + c] = xs(n_tok + r, c);
  std::copy(tail.begin(), tail.end(), state);
}

void Backend::l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double s = 1.0 / std::max(std::sqrt(ss), static_cast<double>(eps));
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(x[r * n + i] * s);
  }
}

void Backend::delta_rule(const DeltaRuleArgs& a) {
  const int64_t T = a.n_tok, Hk = a.n_head_k, Hv = a.n_head_v, Dk = a.dim_k, Dv = a.dim_v;
  if (Hk <= 0 || Hv % Hk != 0) fail("delta_rule: ", Hv, " value heads are not a multiple of ", Hk, " key heads");
  std::vector<double> S(static_cast<size_t>(Dv * Dk)), sk(static_cast<size_t>(Dv));
  for (int64_t h = 0; h < Hv; ++h) {
    const int64_t kh = a.key_head(h);
    float* st = a.state + h * Dv * Dk;
    std::copy(st, st + Dv * Dk, S.begin());
    for (int64_t t = 0; t < T; ++t) {
      const float* q = a.q + t * a.qk_stride + kh * Dk;
      const float* k = a.k + t * a.qk_stride + kh * Dk;
      const float* v = a.v + t * a.v_stride + h * Dv;
      const double beta = a.beta[t * Hv + h];
      // Decay, then the delta against the decayed state.
      for (int64_t j = 0; j < Dk; ++j) {
        const double d = std::exp(
            static_cast<double>(a.per_channel_decay ? a.g[(t * Hv + h) * Dk + j] : a.g[t * Hv + h]));
        for (int64_t i = 0; i < Dv; ++i) S[i * Dk + j] *= d;
      }
      for (int64_t i = 0; i < Dv; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < Dk; ++j) acc += S[i * Dk + j] * k[j];
        sk[i] = beta * (v[i] - acc);
      }
      float* o = a.out + (t * Hv + h) * Dv;
      for (int64_t i = 0; i < Dv; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < Dk; ++j) {
          S[i * Dk + j] += sk[i] * k[j];
          acc += S[i * Dk + j] * q[j];
        }
        o[i] = static_cast<float>(acc * a.scale);
      }
      // The state is float32 between tokens, as it is between calls: so a token's result
      // does not depend on where its run was split into calls.
      for (double& x : S) x = static_cast<float>(x);
    }
    for (int64_t i = 0; i < Dv * Dk; ++i) st[i] = static_cast<float>(S[i]);
  }
}

void Backend::delta_gates(const float* alpha, const float* beta_logit, const float* bias, const float* a, float* g,
                          float* beta, int64_t n_tok, int64_t n) {
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < n; ++c) {
      const int64_t i = t * n + c;
      g[i] = static_cast<float>(a[c] * softplus_d(static_cast<double>(alpha[i]) + bias[c]));
      beta[i] = static_cast<float>(sigmoid_d(beta_logit[i]));
    }
}

void Backend::kda_safe_gate(const float* x, const float* bias, const float* a, float lower_bound, float* g,
                            int64_t n_tok, int64_t n) {
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < n; ++c) {
      const int64_t i = t * n + c;
      g[i] = static_cast<float>(lower_bound *
                                sigmoid_d(static_cast<double>(a[c]) * (static_cast<double>(x[i]) + bias[c])));
    }
}

void Backend::sigmoid_mul(const float* x, const float* gate, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * sigmoid_d(gate[i]));
}

void Backend::sigmoid(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(sigmoid_d(x[i]));
}

}  // namespace sluice
