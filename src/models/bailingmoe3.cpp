// models/bailingmoe3: the Ling 3 forward (GGUF bailingmoe3, HF BailingMoeV3ForCausalLM). A
// hybrid of Kimi Delta Attention layers (models/kda.h) and multi-head latent attention layers
// (models/mla.h) with RoPE and a head-wise sigmoid output gate; the converter marks them by
// head_count_kv 0 (KDA) or 1 (MLA). Every layer ends in a SwiGLU FFN: dense for the
// leading_dense_block_count first layers, else a sigmoid-gated, group-limited MoE with a
// selection bias (exp_probs_b), weights renormalised when expert_weights_norm and scaled by
// expert_weights_scale, plus shared experts (models/model.cpp). Tensor names, layouts and the
// math as llama.cpp's converter (conversion/bailingmoe3.py) and graph (src/models/bailingmoe3.cpp)
// at commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f; the multi-token-prediction (NextN) layers
// are not run.
//
// KDA layer (per token x, normed; H heads of dim D; I = H·D):
//   q, k, v = silu(short_conv(W_q·x)), … ; q, k l2-normed per head     (as kimi-linear)
//   g       = lower_bound · sigmoid(A_h · (W_f·x + dt_bias))  per key channel: the "safe gate",
//             a log-decay in (lower_bound, 0); W_f is full rank [E→I], the converter stores
//             A_h = exp(A_log) (> 0) per head in ssm_a, dt_bias per channel
//   β       = sigmoid(W_β·x) per head
//   o       = the delta rule with a per-channel decay, scale 1/√D
//   out     = W_o · (rms_norm(o) per head ⊙ sigmoid(W_g·x))             (W_g full rank [E→I])
// MLA layer: the absorbed MLA of models/mla.h with RoPE (NORM, adjacent pairs; NEOX where the
// file gives mrope sections, as the VL model's do) and scale 1/√(qk_nope + rope), then each
// head's output times sigmoid(W_gate·x)_h (attn_gate [E→H]) before W_o.
// SwiGLU clamps (swiglu_clamp_exp/shexp): min(silu(gate), L) · clamp(up, -L, L) per layer.
#include "models/bailingmoe3.h"

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
  KdaQkvWeights qkv;                    // q, k, v projections and their short convs
  const TensorView* f = nullptr;        // [n_embd, I]: decay gate (full rank)
  const TensorView* dt_bias = nullptr;  // [I]
  const TensorView* a = nullptr;        // [1, n_head] (f32): exp(A_log)
  const TensorView* wbeta = nullptr;    // [n_embd, n_head]
  const TensorView* g = nullptr;        // [n_embd, I]: output gate (full rank)
  const TensorView* norm = nullptr;     // [D]: the per-head output RMSNorm
};

struct GatedMlaWeights final : ArchLayerWeights {
  MlaWeights mla;
  const TensorView* gate = nullptr;  // [n_embd, n_head]: head-wise output gate logits
};

// A key llama.cpp reads with get_key_or_arr: one f32 or an array of f32s.
std::vector<float> f32_or_array(const GgufFile& f, const std::string& key) {
  if (!f.has(key)) return {};
  try {
    return f.get_f32_array(key);
  } catch (const Error&) {
    return {f.get_f32(key)};
  }
}

void read_hparams(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  MoeOptions& moe = hp.moe;
  if (moe.n_expert == 0)
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  // llama.cpp requires expert_gating_func for bailingmoe3 (Ling 3's router is a sigmoid).
  if (!f.has(a + "expert_gating_func")) fail(f.path(), ": missing key '", a, "expert_gating_func'");
  hp.rope_mode = RopeMode::normal;  // NEOX where mrope sections are given (below)
  hp.n_ff_exp = f.get_u32(a + "expert_feed_forward_length");
  hp.n_expert_shared = f.get_u32(a + "expert_shared_count");
  hp.n_ff_shexp = f.get_u32_or(a + "expert_shared_feed_forward_length", 0);
  hp.n_layer_dense_lead = f.get_u32(a + "leading_dense_block_count");
  moe.norm_weights = f.get_bool_or(a + "expert_weights_norm", false);
  moe.weights_scale = f.get_f32_or(a + "expert_weights_scale", 1.0f);
  read_expert_groups(f, hp);
  // SwiGLU clamps (HF expert_swiglu_limit_list): one value for every layer or one per layer;
  // swiglu_clamp_exp for the routed experts, swiglu_clamp_shexp for the shared experts and the
  // leading dense FFNs (llama.cpp's build_ffn reads it for both); <= 1e-6: none.
  for (auto [key, out] :
       {std::pair{"swiglu_clamp_exp", &hp.swiglu_limit_exp}, std::pair{"swiglu_clamp_shexp", &hp.swiglu_limit_shexp}}) {
    std::vector<float> v = f32_or_array(f, a + key);
    const int64_t n_block = hp.n_layer + hp.n_layer_nextn;
    if (v.size() == 1) v.assign(static_cast<size_t>(n_block), v[0]);
    if (!v.empty() && static_cast<int64_t>(v.size()) != n_block)
      fail(f.path(), ": ", a, key, " has ", v.size(), " values for ", n_block, " blocks");
    v = hp.per_layer(std::move(v));
    for (float& x : v) {
      if (!std::isfinite(x) || x < 0) fail(f.path(), ": ", a, key, " = ", x, " (want a finite limit >= 0)");
      if (x <= 1e-6f) x = 0.0f;
    }
    *out = std::move(v);
  }
  // mrope sections (the VL model's files): llama.cpp then uses MROPE, i.e. NEOX pairs, with
  // text positions (p, p, p, 0) over the sections; with s[3] = 0 every pair of the first
  // sections gets position p, which is NEOX RoPE. Sections with s[0] or s[1] = 0 are ignored
  // (llama.cpp's use_mrope()).
  if (f.has(a + "rope.dimension_sections")) {
    const std::vector<int32_t> s = f.get_i32_array(a + "rope.dimension_sections");
    if (s.size() != 4) fail(f.path(), ": ", a, "rope.dimension_sections must hold 4 integers, has ", s.size());
    for (int32_t v : s)
      if (v < 0) fail(f.path(), ": ", a, "rope.dimension_sections: negative section ", v);
    if (s[0] > 0 && s[1] > 0) {
      if (s[3] != 0)
        fail(f.path(), ": ", a, "rope.dimension_sections[3] = ", s[3],
             ": a fourth (vision) section keeps text pairs at position 0; not supported");
      if (int64_t{s[0]} + s[1] + s[2] > hp.n_rot)
        fail(f.path(), ": ", a, "rope.dimension_sections sum to ", int64_t{s[0]} + s[1] + s[2],
             ", more than rope.dimension_count ", hp.n_rot);
      hp.rope_mode = RopeMode::neox;
    }
  }

  auto bh = std::make_shared<BailingMoe3Hparams>();
  if (!f.has(a + "attention.value_length"))
    hp.head_dim_v = positive_key(f, a + "attention.kv_lora_rank", f.get_u32(a + "attention.kv_lora_rank"));
  bh->mla = mla_read_hparams(f, hp);
  bh->mla.rope = true;
  // llama.cpp asserts a safe gate with a negative lower bound (the only kind the converter writes).
  if (!f.get_bool_or(a + "kda.safe_gate", true))
    fail(f.path(), ": ", a, "kda.safe_gate = false: only the safe KDA gate is supported");
  bh->gate_lower_bound = f.get_f32(a + "kda.gate_lower_bound");
  if (!(bh->gate_lower_bound < 0.0f))
    fail(f.path(), ": ", a, "kda.gate_lower_bound = ", bh->gate_lower_bound, " must be negative");
  bh->kda_shape.n_head = hp.n_head;
  bh->kda_shape.head_dim = positive_key(f, a + "kda.head_dim", f.get_u32(a + "kda.head_dim"), 4096);
  bh->kda_shape.conv_kernel = positive_key(f, a + "ssm.conv_kernel", f.get_u32(a + "ssm.conv_kernel"), 64);
  for (int64_t l = 0; l < hp.n_layer; ++l) bh->kda.push_back(hp.n_head_kv_layer[static_cast<size_t>(l)] == 0);
  hp.ext = std::move(bh);
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& lw) {
  const BailingMoe3Hparams& bh = hp.ext_as<BailingMoe3Hparams>();
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t E = hp.n_embd, H = hp.n_head, D = bh.kda_shape.head_dim, I = bh.kda_shape.inner();
  if (!bh.kda[l]) {
    mla_bind(f, hp, bh.mla, l, lw);
    auto w = std::make_shared<GatedMlaWeights>();
    w->mla = lw.ext_as<MlaWeights>();
    w->gate = bind_tensor(f, p + "attn_gate.weight", {E, H});
    lw.ext = std::move(w);
    return;
  }
  auto w = std::make_shared<KdaWeights>();
  w->qkv = kda_bind_qkv(f, hp.arch, p, E, bh.kda_shape);
  w->f = bind_tensor(f, p + "ssm_f_a.weight", {E, I});
  w->dt_bias = kda_bind_f32(f, p + "ssm_dt.bias", {I}, {I});
  w->a = kda_bind_f32(f, p + "ssm_a", {1, H}, {H});
  w->wbeta = bind_tensor(f, p + "ssm_beta.weight", {E, H});
  w->g = bind_tensor(f, p + "ssm_g_a.weight", {E, I});
  w->norm = bind_tensor(f, p + "ssm_norm.weight", {D});
  lw.wo = bind_tensor(f, p + "attn_output.weight", {I, E});
  lw.ext = std::move(w);
}

MemoryLayout memory_layout(const Hparams& hp) {
  const BailingMoe3Hparams& bh = hp.ext_as<BailingMoe3Hparams>();
  return kda_mla_memory_layout(hp, bh.kda, bh.kda_shape);
}

// Buffers of one forward step, sized once for its T tokens.
struct Scratch {
  ActBuf<float> proj, q, k, v, gate_in, g, beta;  // KDA
  std::vector<float> a_ch;                        // KDA: A per channel (from the weights: host memory)
  ActBuf<float> head_gate, head_gate_wide;        // MLA: [T][H], broadcast to [T][H*V]
};

void kda_layer(const Model& m, Backend& be, Memory& mem, const std::vector<BatchRun>& runs, int64_t l, int64_t T,
               const float* h, float* attn, Scratch& s, const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const BailingMoe3Hparams& bh = hp.ext_as<BailingMoe3Hparams>();
  const KdaShape& shape = bh.kda_shape;
  const KdaWeights& w = m.layers()[static_cast<size_t>(l)].ext_as<KdaWeights>();
  const int il = static_cast<int>(l);
  const int64_t H = hp.n_head, D = shape.head_dim, I = shape.inner();
  auto report = [&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, il, data, rows, cols);
  };
  // q, k, v: projection, short conv, silu; q and k l2-normed.
  kda_qkv(be, mem, runs, l, shape, w.qkv, h, T, hp.rms_eps, s.proj.data(), s.q.data(), s.k.data(), s.v.data(), report);

  // The safe decay gate per key channel: g = lower_bound · sigmoid(A_h · (W_f·x + dt_bias));
  // kda_safe_gate takes A per channel, so each head's A is repeated over its D channels.
  const float* a_head = static_cast<const float*>(w.a->data);
  for (int64_t c = 0; c < I; ++c) s.a_ch[c] = a_head[c / D];
  be.matmul(*w.f, h, s.gate_in.data(), T);
  be.kda_safe_gate(s.gate_in.data(), static_cast<const float*>(w.dt_bias->data), s.a_ch.data(), bh.gate_lower_bound,
                   s.g.data(), T, I);
  report("kda_gate", s.g.data(), T * H, D);
  be.matmul(*w.wbeta, h, s.beta.data(), T);
  be.sigmoid(s.beta.data(), s.beta.data(), T * H);
  report("kda_beta", s.beta.data(), T, H);

  kda_recur(be, mem, runs, l, shape, s.q.data(), s.k.data(), s.v.data(), s.g.data(), /*per_channel=*/true,
            s.beta.data(), attn);
  report("attn_output", attn, T * H, D);

  // Output: RMSNorm per head, times the sigmoid of the full-rank output gate.
  be.rms_norm(attn, static_cast<const float*>(w.norm->data), attn, T * H, D, hp.rms_eps);
  be.matmul(*w.g, h, s.gate_in.data(), T);
  be.sigmoid_mul(attn, s.gate_in.data(), attn, T * I);
  report("kda_gated", attn, T, I);
}

void gated_mla_layer(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                     int64_t l, const float* h, float* attn, MlaScratch& ms, Scratch& s, const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const BailingMoe3Hparams& bh = hp.ext_as<BailingMoe3Hparams>();
  const GatedMlaWeights& w = m.layers()[static_cast<size_t>(l)].ext_as<GatedMlaWeights>();
  const int64_t T = b.size(), H = hp.n_head, V = bh.mla.v_head;
  mla_attention(hp, bh.mla, w.mla, be, mem, b, runs, l, h, attn, ms, hook);
  if (!bh.attn_head_gate) return;  // negative control only
  // Head-wise gate: head hh of token t scaled by sigmoid((W_gate·x_t)_hh). The [T][H] logits
  // are repeated over each head's V values (a copy, no arithmetic: column j of every head's
  // row, one strided copy each) so sigmoid_mul can apply them.
  be.matmul(*w.gate, h, s.head_gate.data(), T);
  for (int64_t j = 0; j < V; ++j) be.copy_2d(s.head_gate.data(), 1, s.head_gate_wide.data() + j, V, T * H, 1);
  be.sigmoid_mul(attn, s.head_gate_wide.data(), attn, T * H * V);
  report_to(hook, be, "attn_gated", static_cast<int>(l), attn, T, H * V);
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const BailingMoe3Hparams& bh = hp.ext_as<BailingMoe3Hparams>();
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, I = bh.kda_shape.inner(), V = bh.mla.v_head;
  ActBuf<float> x = be.alloc<float>(T * E), h = be.alloc<float>(T * E), o = be.alloc<float>(T * E),
                attn = be.alloc<float>(T * std::max(I, H * V));
  MlaScratch ms;
  ms.alloc(be, hp, bh.mla, T);
  Scratch s;
  for (auto* v : {&s.proj, &s.q, &s.k, &s.v, &s.gate_in, &s.g}) *v = be.alloc<float>(T * I);
  s.beta = be.alloc<float>(T * H), s.head_gate = be.alloc<float>(T * H), s.head_gate_wide = be.alloc<float>(T * H * V);
  s.a_ch.resize(static_cast<size_t>(I));

  m.embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& lw = m.layers()[static_cast<size_t>(l)];
    be.rms_norm(x.data(), static_cast<const float*>(lw.attn_norm->data), h.data(), T, E, hp.rms_eps);
    report_to(hook, be, "attn_norm", static_cast<int>(l), h.data(), T, E);
    if (bh.kda[l])
      kda_layer(m, be, mem, runs, l, T, h.data(), attn.data(), s, hook);
    else
      gated_mla_layer(m, be, mem, b, runs, l, h.data(), attn.data(), ms, s, hook);
    m.attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  m.output_head(be, x.data(), b, logits, hook);
}

constexpr Arch kArchs[] = {{"bailingmoe3", read_hparams, bind_attention, memory_layout, forward}};

}  // namespace

std::span<const Arch> bailingmoe3_archs() { return kArchs; }

}  // namespace sluice
