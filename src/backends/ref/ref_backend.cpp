// backends/ref: implementation of the oracle. Each op is the most obvious loop that matches
// the contract in backends/backend.h; weights and cache rows are decoded with quant/'s
// reference dequantize_row, and every sum (dot products, norms, softmax, attention) is
// accumulated in double so the oracle's own rounding error is far below any tolerance.
// Legend: T = tokens, H = query heads, Hkv = KV heads, D = head dim, N = visible positions.
#include "backends/ref/ref_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kvcodec/kvcodec.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice {
namespace {

// Decode n elements of type t at src into dst (F32 copied, everything else via quant/).
void decode_row(DType t, const void* src, float* dst, int64_t n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (!quant_supported(t)) fail("ref backend: no decoder for dtype ", dtype_name(t));
  dequantize_row(t, src, dst, n);
}

// Row r of a weight (an MLX affine one from its planes).
void weight_row(const TensorView& w, int64_t r, float* dst) {
  if (dtype_is_affine(w.type)) return dequantize_weight_row(w, r, dst);
  decode_row(w.type, w.row(r), dst, w.ne[0]);
}

// A tq cache type comes with its codec, shaped like the attention's heads.
void check_tq(DType t, const TqCodec* c, int64_t Hkv, int64_t D) {
  if (kv_type_is_tq(t) != (c != nullptr) || (c && c->type() != t))
    fail("attention: cache type ", kv_type_name(t), " and its codec disagree");
  if (c && (c->n_head() != Hkv || c->head_dim() != D))
    fail("attention: tq codec is for ", c->n_head(), " heads of ", c->head_dim(), ", attention has ", Hkv, " of ", D);
}

// One f16 sink row of Hkv heads (AttentionArgs::k_sink) -> x, unrotated by the tq codec
// (R^T·y in double, as TqCodec::decode_row) when the side has one.
void sink_row(const uint16_t* src, const TqCodec* tq, int64_t Hkv, int64_t D, float* x) {
  std::vector<double> y(static_cast<size_t>(D));
  for (int64_t h = 0; h < Hkv; ++h) {
    for (int64_t i = 0; i < D; ++i) y[i] = fp16_to_fp32(src[h * D + i]);
    if (tq) {
      fwht(y.data(), D);
      for (int64_t i = 0; i < D; ++i) y[i] *= tq->signs()[i] / std::sqrt(static_cast<double>(D));
    }
    for (int64_t i = 0; i < D; ++i) x[h * D + i] = static_cast<float>(y[i]);
  }
}

class RefBackend final : public Backend {
 public:
  std::string_view name() const override { return "ref"; }

  void matmul_weights(const TensorView& w, const float* x, float* y, int64_t n_tok) override {
    const int64_t n_in = w.ne[0], n_out = w.n_rows();
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      weight_row(w, o, row.data());
      for (int64_t t = 0; t < n_tok; ++t) {
        const float* xt = x + t * n_in;
        double s = 0.0;
        for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(row[i]) * xt[i];
        y[t * n_out + o] = static_cast<float>(s);
      }
    }
  }

  void get_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) override {
    const int64_t n_embd = table.ne[0], n_rows = table.n_rows();
    for (int64_t r = 0; r < n; ++r) {
      if (ids[r] < 0 || ids[r] >= n_rows)
        fail("get_rows: id ", ids[r], " outside ", table.name, " (", n_rows, " rows)");
      weight_row(table, ids[r], out + r * n_embd);
    }
  }

  void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) override {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      double ss = 0.0;
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
      for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<float>(xr[i] * scale * (w ? w[i] : 1.0f));
    }
  }

  void rope(float* x, const int32_t* pos, int64_t n_tok, int64_t n_head, int64_t head_dim, const Rope& r) override {
    const int64_t n_rot = r.n_rot;
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t h = 0; h < n_head; ++h) {
        float* v = x + (t * n_head + h) * head_dim;
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const double theta = r.angle(pos[t], i);
          const double c = std::cos(theta) * r.mscale, s = std::sin(theta) * r.mscale;
          const int64_t i0 = r.mode == RopeMode::normal ? 2 * i : i;
          const int64_t i1 = r.mode == RopeMode::normal ? 2 * i + 1 : i + n_rot / 2;
          const double a = v[i0], b = v[i1];
          v[i0] = static_cast<float>(a * c - b * s);
          v[i1] = static_cast<float>(a * s + b * c);
        }
      }
    }
  }

  void softmax(float* x, int64_t n_rows, int64_t n) override {
    for (int64_t r = 0; r < n_rows; ++r) {
      float* xr = x + r * n;
      const double m = *std::max_element(xr, xr + n);
      std::vector<double> e(static_cast<size_t>(n));
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += e[i] = std::exp(xr[i] - m);
      for (int64_t i = 0; i < n; ++i) xr[i] = static_cast<float>(e[i] / sum);
    }
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n, float limit) override {
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      double s = g / (1.0 + std::exp(-g)), u = up[i];
      if (limit > 0) s = std::min(s, double{limit}), u = std::clamp(u, -double{limit}, double{limit});
      out[i] = static_cast<float>(s * u);
    }
  }

  void gelu(const float* x, float* out, int64_t n) override {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      out[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
    }
  }

  void add(const float* a, const float* b, float* out, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }

  void store_row(const float* src, DType t, void* dst, int64_t n) override {
    if (t == DType::F32) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    if (!quant_supported(t)) fail("ref backend: no encoder for dtype ", dtype_name(t));
    quantize_row(t, src, dst, n);
  }

  void attention(const AttentionArgs& a) override {
    const int64_t T = a.n_tok, H = a.n_head, Hkv = a.n_head_kv, Dk = a.head_dim_k, Dv = a.head_dim_v, N = a.n_kv;
    if (Hkv <= 0 || H % Hkv != 0) fail("attention: n_head ", H, " is not a multiple of n_head_kv ", Hkv);
    // Decode the whole visible cache once: K as [N][Hkv][Dk], V as [N][Hkv][Dv] (tq rows with
    // their codec's reference decoder, back in the original space).
    check_tq(a.k_type, a.k_tq, Hkv, Dk);
    check_tq(a.v_type, a.v_tq, Hkv, Dv);
    std::vector<float> k(static_cast<size_t>(N * Hkv * Dk)), v(static_cast<size_t>(N * Hkv * Dv));
    for (int64_t p = 0; p < N; ++p) {
      const uint8_t* kr = static_cast<const uint8_t*>(a.k) + p * a.k_row_bytes;
      const uint8_t* vr = static_cast<const uint8_t*>(a.v) + p * a.v_row_bytes;
      a.k_tq ? a.k_tq->decode_row(kr, k.data() + p * Hkv * Dk)
             : decode_row(a.k_type, kr, k.data() + p * Hkv * Dk, Hkv * Dk);
      a.v_tq ? a.v_tq->decode_row(vr, v.data() + p * Hkv * Dv)
             : decode_row(a.v_type, vr, v.data() + p * Hkv * Dv, Hkv * Dv);
    }
    // Sink positions: their f16 rows instead, back from a tq codec's rotated space.
    if ((a.n_sink_k > 0 && !a.k_sink) || (a.n_sink_v > 0 && !a.v_sink)) fail("attention: sink positions without rows");
    for (int64_t p = 0; p < std::min(N, a.n_sink_k); ++p)
      sink_row(a.k_sink + p * Hkv * Dk, a.k_tq, Hkv, Dk, k.data() + p * Hkv * Dk);
    for (int64_t p = 0; p < std::min(N, a.n_sink_v); ++p)
      sink_row(a.v_sink + p * Hkv * Dv, a.v_tq, Hkv, Dv, v.data() + p * Hkv * Dv);
    const int64_t group = H / Hkv;
    // A q8_0 K (heads of whole blocks) is scored against the query quantized to Q8_0, as
    // llama.cpp (and the cpu backend's int8 scores) do: the query as that quantization decodes.
    // Sink positions (f16 rows) take the query as it is.
    const bool q_as_q8 = a.k_type == DType::Q8_0 && !a.k_tq && Dk % QK8_0 == 0;
    std::vector<block_q8_0> qq(q_as_q8 ? static_cast<size_t>(Dk / QK8_0) : 0);
    std::vector<float> qd(static_cast<size_t>(Dk));
    std::vector<double> score(static_cast<size_t>(N)), acc(static_cast<size_t>(Dv));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n_vis = std::min(N, a.pos0 + t + 1);  // causal: positions 0..pos0+t
      for (int64_t h = 0; h < H; ++h) {
        const int64_t hk = h / group;
        const float* q = a.q + (t * H + h) * Dk;
        if (q_as_q8) {
          quantize_row(DType::Q8_0, q, qq.data(), Dk);
          dequantize_row(DType::Q8_0, qq.data(), qd.data(), Dk);
        }
        float* out = a.out + (t * H + h) * Dv;
        std::fill(acc.begin(), acc.end(), 0.0);
        if (n_vis <= 0) {
          std::fill(out, out + Dv, 0.0f);
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t p = 0; p < n_vis; ++p) {
          const float* kr = k.data() + (p * Hkv + hk) * Dk;
          const float* qp = q_as_q8 && p >= a.n_sink_k ? qd.data() : q;
          double s = 0.0;
          for (int64_t d = 0; d < Dk; ++d) s += static_cast<double>(qp[d]) * kr[d];
          score[p] = s * a.scale;
          m = std::max(m, score[p]);
        }
        double sum = 0.0;
        for (int64_t p = 0; p < n_vis; ++p) {
          const double e = std::exp(score[p] - m);
          sum += e;
          const float* vr = v.data() + (p * Hkv + hk) * Dv;
          for (int64_t d = 0; d < Dv; ++d) acc[d] += e * vr[d];
        }
        for (int64_t d = 0; d < Dv; ++d) out[d] = static_cast<float>(acc[d] / sum);
      }
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace sluice
