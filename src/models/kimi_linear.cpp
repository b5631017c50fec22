// models/kimi_linear: the Kimi Linear forward (GGUF kimi-linear; arXiv:2510.26692). Most layers
// are Kimi Delta Attention (KDA: linear attention with a fixed-size state and a decay per key
// channel), the others multi-head latent attention (models/mla.h) without RoPE; the converter
// marks them by head_count_kv 0 (KDA) or 1 (MLA). Every layer ends in a SwiGLU FFN: dense for
// the leading_dense_block_count first layers, else sigmoid-gated MoE with a selection bias,
// renormalised and scaled by expert_weights_scale, plus shared experts (models/model.cpp).
// Tensor names and layouts as llama.cpp's converter writes them (conversion/kimi_linear.py).
//
// KDA layer (the paper's §3, per token x, normed; H heads of dim D, key dim = value dim):
//   q, k, v = silu(short_conv(W_q·x)), … (three depthwise causal convs of kernel K, each with
//             its own window of the last K-1 inputs)
//   q, k    = l2_norm per head
//   g       = A_h · softplus(W_f↑·W_f↓·x + dt_bias)   per key channel: a log-decay ≤ 0 (the
//             converter stores A_h = −exp(A_log) per head in ssm_a; dt_bias is per channel)
//   β       = sigmoid(W_β·x) per head
//   o       = the delta rule with a per-channel decay (backend.h DeltaRuleArgs), scale 1/√D
//   out     = W_o · (rms_norm(o) per head ⊙ sigmoid(W_g↑·W_g↓·x))
#include "models/kimi_linear.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "memory/memory.h"
#include "models/arch.h"
#include "models/kda.h"
#include "models/mla.h"
#include "models/model.h"

namespace sluice {
namespace {

// Shapes in ggml order; I = n_head * head_dim, D = head_dim.
struct KdaWeights final : ArchLayerWeights {
  KdaQkvWeights qkv;                    // q, k, v projections and their short convs (models/kda.h)
  const TensorView* f_a = nullptr;      // [n_embd, D]: decay gate, down
  const TensorView* f_b = nullptr;      // [D, I]: decay gate, up
  const TensorView* dt_bias = nullptr;  // [I]
  const TensorView* a = nullptr;        // [1, n_head(, 1, 1)] (f32): −exp(A_log)
  const TensorView* wbeta = nullptr;    // [n_embd, n_head]
  const TensorView* g_a = nullptr;      // [n_embd, D]: output gate, down
  const TensorView* g_b = nullptr;      // [D, I]: output gate, up
  const TensorView* norm = nullptr;     // [D]: the per-head output RMSNorm
};

void read_hparams(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  MoeOptions& moe = hp.moe;
  if (moe.n_expert == 0)
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  // llama.cpp requires expert_gating_func for kimi-linear (Kimi's router is a sigmoid).
  if (!f.has(a + "expert_gating_func")) fail(f.path(), ": missing key '", a, "expert_gating_func'");
  hp.n_ff_exp = f.get_u32(a + "expert_feed_forward_length");
  hp.n_expert_shared = f.get_u32(a + "expert_shared_count");
  hp.n_layer_dense_lead = f.get_u32_or(a + "leading_dense_block_count", 0);
  // The chosen weights are always renormalised (the HF config's moe_renormalize; llama.cpp's
  // kimi-linear graph passes true whatever expert_weights_norm says), then scaled.
  moe.norm_weights = true;
  moe.weights_scale = f.get_f32_or(a + "expert_weights_scale", 1.0f);
  read_expert_groups(f, hp);
  auto kh = std::make_shared<KimiLinearHparams>();
  // The converter writes no value_length: the latent cache's value rows are kv_lora wide.
  if (!f.has(a + "attention.value_length"))
    hp.head_dim_v = positive_key(f, a + "attention.kv_lora_rank", f.get_u32(a + "attention.kv_lora_rank"));
  kh->mla = mla_read_hparams(f, hp);
  kh->mla.rope = false;  // Kimi's MLA layers have no rotary embedding (the k_rope dims stay as projected)
  kh->conv_kernel = positive_key(f, a + "ssm.conv_kernel", f.get_u32(a + "ssm.conv_kernel"), 64);
  kh->head_dim = positive_key(f, a + "kda.head_dim", f.get_u32(a + "kda.head_dim"), 4096);
  kh->inner = hp.n_head * kh->head_dim;
  for (int64_t l = 0; l < hp.n_layer; ++l) kh->kda.push_back(hp.n_head_kv_layer[static_cast<size_t>(l)] == 0);
  hp.ext = std::move(kh);
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& lw) {
  const KimiLinearHparams& kh = hp.ext_as<KimiLinearHparams>();
  if (!kh.kda[l]) {
    mla_bind(f, hp, kh.mla, l, lw);
    return;
  }
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t E = hp.n_embd, H = hp.n_head, D = kh.head_dim, I = kh.inner;
  auto w = std::make_shared<KdaWeights>();
  w->qkv = kda_bind_qkv(f, hp.arch, p, E, KdaShape{H, D, kh.conv_kernel});
  w->f_a = bind_tensor(f, p + "ssm_f_a.weight", {E, D});
  w->f_b = bind_tensor(f, p + "ssm_f_b.weight", {D, I});
  w->dt_bias = bind_tensor(f, p + "ssm_dt.bias", {I});
  w->a = kda_bind_f32(f, p + "ssm_a", {1, H, 1, 1}, {1, H});
  w->wbeta = bind_tensor(f, p + "ssm_beta.weight", {E, H});
  w->g_a = bind_tensor(f, p + "ssm_g_a.weight", {E, D});
  w->g_b = bind_tensor(f, p + "ssm_g_b.weight", {D, I});
  w->norm = bind_tensor(f, p + "ssm_norm.weight", {D});
  lw.wo = bind_tensor(f, p + "attn_output.weight", {I, E});
  lw.ext = std::move(w);
}

MemoryLayout memory_layout(const Hparams& hp) {
  const KimiLinearHparams& kh = hp.ext_as<KimiLinearHparams>();
  return kda_mla_memory_layout(hp, kh.kda, KdaShape{hp.n_head, kh.head_dim, kh.conv_kernel});
}

// Buffers of one forward step's KDA layers, sized once for its T tokens.
struct KdaScratch {
  ActBuf<float> proj, q, k, v, low, gate_in, g, g_head, unused, beta;
  std::vector<float> a_ch;  // A per channel (from the weights: host memory, an op input)
};

void kda_layer(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, int64_t l,
               const float* h, float* attn, KdaScratch& s, const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const KimiLinearHparams& kh = hp.ext_as<KimiLinearHparams>();
  const KdaWeights& w = m.layers()[static_cast<size_t>(l)].ext_as<KdaWeights>();
  const int il = static_cast<int>(l);
  const int64_t T = b.size(), H = hp.n_head, D = kh.head_dim, I = kh.inner, K = kh.conv_kernel;
  auto report = [&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, il, data, rows, cols);
  };
  const KdaShape shape{H, D, K};
  // q, k, v: projection, then each its own short conv; q and k l2-normed (models/kda.h).
  kda_qkv(be, mem, runs, l, shape, w.qkv, h, T, hp.rms_eps, s.proj.data(), s.q.data(), s.k.data(), s.v.data(), report);

  // Decay gate per key channel: g = A_h · softplus(f_b(f_a(x)) + dt_bias). delta_gates takes A
  // per channel, so each head's A is repeated over its D channels; it also computes a sigmoid
  // we do not use (β here is per head, not per channel), into `unused`.
  const float* a_head = static_cast<const float*>(w.a->data);
  for (int64_t c = 0; c < I; ++c) s.a_ch[c] = a_head[c / D];
  be.matmul(*w.f_a, h, s.low.data(), T);
  be.matmul(*w.f_b, s.low.data(), s.gate_in.data(), T);
  be.delta_gates(s.gate_in.data(), s.gate_in.data(), static_cast<const float*>(w.dt_bias->data), s.a_ch.data(),
                 s.g.data(), s.unused.data(), T, I);
  report("kda_g1", s.g.data(), T * H, D);
  be.matmul(*w.wbeta, h, s.beta.data(), T);
  be.sigmoid(s.beta.data(), s.beta.data(), T * H);
  report("kda_beta", s.beta.data(), T, H);
  // Negative control only: one decay per head (its first channel's), as Gated DeltaNet has.
  if (!kh.per_channel_decay) be.copy_2d(s.g.data(), D, s.g_head.data(), 1, T * H, 1);

  kda_recur(be, mem, runs, l, shape, s.q.data(), s.k.data(), s.v.data(),
            kh.per_channel_decay ? s.g.data() : s.g_head.data(), kh.per_channel_decay, s.beta.data(), attn);
  report("attn_output", attn, T * H, D);

  // Output: RMSNorm per head, times the sigmoid of the low-rank output gate.
  be.rms_norm(attn, static_cast<const float*>(w.norm->data), attn, T * H, D, hp.rms_eps);
  report("kda_normed", attn, T * H, D);
  be.matmul(*w.g_a, h, s.low.data(), T);
  be.matmul(*w.g_b, s.low.data(), s.gate_in.data(), T);
  be.sigmoid_mul(attn, s.gate_in.data(), attn, T * I);
  report("kda_gated", attn, T, I);
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const KimiLinearHparams& kh = hp.ext_as<KimiLinearHparams>();
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, I = kh.inner, D = kh.head_dim;
  ActBuf<float> x = be.alloc<float>(T * E), h = be.alloc<float>(T * E), o = be.alloc<float>(T * E),
                attn = be.alloc<float>(T * std::max(I, H * kh.mla.v_head));
  MlaScratch ms;
  ms.alloc(be, hp, kh.mla, T);
  KdaScratch ks;
  for (auto* v : {&ks.proj, &ks.q, &ks.k, &ks.v, &ks.gate_in, &ks.g, &ks.unused}) *v = be.alloc<float>(T * I);
  ks.low = be.alloc<float>(T * D), ks.g_head = be.alloc<float>(T * H), ks.beta = be.alloc<float>(T * H);
  ks.a_ch.resize(static_cast<size_t>(I));

  m.embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& lw = m.layers()[static_cast<size_t>(l)];
    be.rms_norm(x.data(), static_cast<const float*>(lw.attn_norm->data), h.data(), T, E, hp.rms_eps);
    report_to(hook, be, "attn_norm", static_cast<int>(l), h.data(), T, E);
    if (kh.kda[l])
      kda_layer(m, be, mem, b, runs, l, h.data(), attn.data(), ks, hook);
    else
      mla_attention(hp, kh.mla, lw.ext_as<MlaWeights>(), be, mem, b, runs, l, h.data(), attn.data(), ms, hook);
    m.attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  m.output_head(be, x.data(), b, logits, hook);
}

constexpr Arch kArchs[] = {{"kimi-linear", read_hparams, bind_attention, memory_layout, forward}};

}  // namespace

std::span<const Arch> kimi_linear_archs() { return kArchs; }

}  // namespace sluice
