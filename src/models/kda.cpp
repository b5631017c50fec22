// models/kda: the KDA pieces kimi-linear and bailingmoe3 share (see kda.h).
#include "models/kda.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "models/arch.h"

namespace sluice {

const TensorView* kda_bind_f32(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> full,
                               std::initializer_list<int64_t> trimmed) {
  const TensorView* t = f.find_tensor(name);
  const TensorView* b = t && t->n_dims == static_cast<int>(trimmed.size()) ? bind_tensor(f, name, trimmed)
                                                                           : bind_tensor(f, name, full);
  if (b->type != DType::F32) fail(f.path(), ": tensor '", name, "' must be f32");
  return b;
}

KdaQkvWeights kda_bind_qkv(const GgufFile& f, const std::string& arch, const std::string& p, int64_t E,
                           const KdaShape& s) {
  const int64_t I = s.inner(), K = s.conv_kernel;
  if (f.find_tensor(p + "attn_qkv.weight"))
    fail(f.path(), ": tensor '", p, "attn_qkv.weight': a fused q/k/v projection is not supported for ", arch);
  KdaQkvWeights w;
  w.wq = bind_tensor(f, p + "attn_q.weight", {E, I});
  w.wk = bind_tensor(f, p + "attn_k.weight", {E, I});
  w.wv = bind_tensor(f, p + "attn_v.weight", {E, I});
  w.conv_q = kda_bind_f32(f, p + "ssm_conv1d_q.weight", {K, 1, I, 1}, {K, 1, I});
  w.conv_k = kda_bind_f32(f, p + "ssm_conv1d_k.weight", {K, 1, I, 1}, {K, 1, I});
  w.conv_v = kda_bind_f32(f, p + "ssm_conv1d_v.weight", {K, 1, I, 1}, {K, 1, I});
  return w;
}

LayerMemorySpec kda_memory_spec(const KdaShape& s) {
  LayerMemorySpec spec;
  spec.kind = LayerMemoryKind::recurrent;
  const int64_t window = (s.conv_kernel - 1) * s.inner();
  spec.state_floats = {window, window, window, s.n_head * s.head_dim * s.head_dim};
  return spec;
}

MemoryLayout kda_mla_memory_layout(const Hparams& hp, const std::vector<bool>& kda, const KdaShape& s) {
  MemoryLayout m;
  m.kv = KvGeometry{0, hp.n_head, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v};  // the MLA latent rows
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    LayerMemorySpec spec;
    if (kda[static_cast<size_t>(l)])
      spec = kda_memory_spec(s);
    else
      ++m.kv.n_layer;
    m.layers.push_back(spec);
  }
  return m;
}

void kda_qkv(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t l, const KdaShape& s,
             const KdaQkvWeights& w, const float* h, int64_t T, float eps, float* proj, float* q, float* k, float* v,
             const KdaReport& report) {
  const int64_t H = s.n_head, D = s.head_dim, I = s.inner(), K = s.conv_kernel;
  const std::pair<const TensorView*, const TensorView*> qkv[] = {{w.wq, w.conv_q}, {w.wk, w.conv_k}, {w.wv, w.conv_v}};
  float* out[] = {q, k, v};
  for (int i = 0; i < 3; ++i) {
    be.matmul(*qkv[i].first, h, proj, T);
    for (const BatchRun& r : runs)
      be.conv1d_causal(proj + r.first * I, static_cast<const float*>(qkv[i].second->data), mem.state(r.seq, l, i),
                       out[i] + r.first * I, r.n, I, K, /*silu=*/true);
  }
  report("q_conv", q, T, I);
  report("k_conv", k, T, I);
  report("v_conv", v, T, I);
  // llama.cpp normalizes by 1/sqrt(‖x‖² + eps), l2_norm by 1/max(‖x‖, eps): with eps ~1e-5 and
  // ‖x‖² of order 0.1-1 the two differ by ~1e-5 relative, far below the goldens' tolerance.
  be.l2_norm(q, q, T * H, D, eps);
  be.l2_norm(k, k, T * H, D, eps);
}

void kda_recur(Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t l, const KdaShape& s,
               const float* q, const float* k, const float* v, const float* g, bool per_channel, const float* beta,
               float* out) {
  const int64_t H = s.n_head, D = s.head_dim, I = s.inner();
  for (const BatchRun& r : runs) {
    DeltaRuleArgs a;
    a.q = q + r.first * I;
    a.k = k + r.first * I;
    a.v = v + r.first * I;
    a.qk_stride = a.v_stride = I;
    a.per_channel_decay = per_channel;
    a.g = per_channel ? g + r.first * I : g + r.first * H;
    a.beta = beta + r.first * H;
    a.state = mem.state(r.seq, l, 3);
    a.out = out + r.first * I;
    a.n_tok = r.n;
    a.n_head_k = a.n_head_v = H;
    a.dim_k = a.dim_v = D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    be.delta_rule(a);
  }
}

}  // namespace sluice
