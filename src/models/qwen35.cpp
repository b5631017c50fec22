// models/qwen35: the Qwen3.5 hybrid forward (GGUF qwen35moe, dense qwen35, and Qwen3-Next's
// qwen3next, which differs in the three details marked below): three of every
// four layers are Gated DeltaNet linear attention with a fixed-size state, the fourth is
// gated full attention; every layer ends in a SwiGLU FFN (MoE + a sigmoid-gated shared
// expert, or dense). Tensor names and layouts as llama.cpp's converter writes them.
//
// Gated DeltaNet layer (arXiv:2412.06464), per token x (normed):
//   [q | k | v] = silu(causal_conv1d(W_qkv·x))   (kernel K over time, per channel, with state)
//   q, k = l2_norm per key head;  z = W_gate·x
//   g = −exp(A_log) ⊙ softplus(W_alpha·x + dt_bias) (per value head), β = sigmoid(W_beta·x)
//   o = gated delta rule (backend.h, DeltaRuleArgs), value head h reading key head h % H_k
//   out = W_out · (rms_norm(o) per value head ⊙ silu(z))
// Gated attention layer: W_q gives [q | gate] per head; q and k get a per-head RMSNorm, then
// NEOX RoPE on the first rope.dimension_count dims (the multi-section "IMROPE" of Qwen3.5
// equals it while every section sees the same text position); the attention output is
// multiplied by sigmoid(gate) before W_o.
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "memory/memory.h"
#include "models/arch.h"
#include "models/blocks.h"
#include "models/model.h"
#include "models/qwen35.h"

namespace sluice {
namespace {

struct DeltaNetWeights final : ArchLayerWeights {
  const TensorView* wqkv = nullptr;     // [n_embd, conv_dim]: [q | k | v]
  const TensorView* wgate = nullptr;    // [n_embd, H_v*D_v]: z
  const TensorView* conv = nullptr;     // [K, conv_dim] (f32)
  const TensorView* dt_bias = nullptr;  // [H_v]
  const TensorView* a = nullptr;        // [H_v]: −exp(A_log)
  const TensorView* wbeta = nullptr;    // [n_embd, H_v]
  const TensorView* walpha = nullptr;   // [n_embd, H_v]
  // Qwen3-Next fuses the two: [n_embd, 2·H_v], per key-head group [beta (H_v/H_k) | alpha (H_v/H_k)].
  const TensorView* wbeta_alpha = nullptr;
  const TensorView* norm = nullptr;  // [D_v]
};

void read_hparams(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  hp.rope_mode = RopeMode::neox;
  hp.qk_norm_per_head = true;
  // Qwen3.5 rotates by sections (llama.cpp requires them; with text positions they do not
  // change the rotation); Qwen3-Next by plain NEOX RoPE.
  const bool next = hp.arch == "qwen3next";
  if (!next && f.get_i32_array(a + "rope.dimension_sections").size() != 4)
    fail(f.path(), ": ", a, "rope.dimension_sections must hold 4 integers");
  if (hp.moe.n_expert > 0) {
    hp.n_ff_exp = f.get_u32_or(a + "expert_feed_forward_length",
                               static_cast<uint32_t>(hp.n_ff[0] / hp.moe.n_expert_used));
    hp.n_ff_shexp = f.get_u32_or(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(hp.n_ff[0]));
    hp.n_expert_shared = 1;
    hp.moe.norm_weights = true;
  } else if (hp.arch != "qwen35") {
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  }
  auto dn = std::make_shared<DeltaNetHparams>();
  dn->conv_kernel = positive_key(f, a + "ssm.conv_kernel", f.get_u32(a + "ssm.conv_kernel"), 64);
  dn->n_head_k = positive_key(f, a + "ssm.group_count", f.get_u32(a + "ssm.group_count"), 4096);
  dn->n_head_v = positive_key(f, a + "ssm.time_step_rank", f.get_u32(a + "ssm.time_step_rank"), 4096);
  dn->dim_k = positive_key(f, a + "ssm.state_size", f.get_u32(a + "ssm.state_size"), 4096);
  const int64_t inner = positive_key(f, a + "ssm.inner_size", f.get_u32(a + "ssm.inner_size"));
  if (dn->n_head_v % dn->n_head_k != 0 || inner % dn->n_head_v != 0)
    fail(f.path(), ": ", a, "ssm.time_step_rank (value heads) ", dn->n_head_v,
         " must be a multiple of ssm.group_count (key heads) ", dn->n_head_k, " and divide ssm.inner_size ", inner);
  dn->dim_v = inner / dn->n_head_v;
  const int64_t interval = positive_key(f, a + "full_attention_interval",
                                        f.get_u32_or(a + "full_attention_interval", 4), hp.n_layer);
  for (int64_t l = 0; l < hp.n_layer; ++l) dn->linear.push_back((l + 1) % interval != 0);
  // Qwen3-Next repeats each key head for its group of value heads (repeat-interleave);
  // Qwen3.5's converter orders the value heads so that they tile.
  // A Hugging Face / MLX folder keeps Qwen3.5's heads grouped as well (format/hf_folder).
  dn->grouped_heads = next || f.get_bool_or("sluice.ssm_grouped_heads", false);
  hp.ext = std::move(dn);
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& w) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const DeltaNetHparams& dn = hp.ext_as<DeltaNetHparams>();
  const int64_t E = hp.n_embd;
  w.ffn_norm = bind_tensor(f, p + "post_attention_norm.weight", {E});
  if (!dn.linear[l]) {
    const int64_t H = hp.n_head, Dk = hp.head_dim_k;
    w.wq = bind_tensor(f, p + "attn_q.weight", {E, 2 * H * Dk});  // [q | gate] per head
    w.wk = bind_tensor(f, p + "attn_k.weight", {E, hp.n_head_kv * Dk});
    w.wv = bind_tensor(f, p + "attn_v.weight", {E, hp.n_head_kv * hp.head_dim_v});
    w.wo = bind_tensor(f, p + "attn_output.weight", {H * hp.head_dim_v, E});
    w.q_norm = bind_tensor(f, p + "attn_q_norm.weight", {Dk});
    w.k_norm = bind_tensor(f, p + "attn_k_norm.weight", {Dk});
    return;
  }
  const int64_t Hv = dn.n_head_v, vd = Hv * dn.dim_v;
  auto d = std::make_shared<DeltaNetWeights>();
  if (f.find_tensor(p + "ssm_in.weight"))
    fail(f.path(), ": tensor '", p, "ssm_in.weight' is the legacy fused q/k/v/z layout; convert the model again ",
         "with a current llama.cpp (attn_qkv + attn_gate)");
  d->wqkv = bind_tensor(f, p + "attn_qkv.weight", {E, dn.conv_dim()});
  d->wgate = bind_tensor(f, p + "attn_gate.weight", {E, vd});
  d->conv = bind_tensor(f, p + "ssm_conv1d.weight", {dn.conv_kernel, dn.conv_dim()});
  d->dt_bias = bind_tensor(f, p + "ssm_dt.bias", {Hv});
  d->a = bind_tensor(f, p + "ssm_a", {Hv});
  if (f.find_tensor(p + "ssm_ba.weight")) {
    d->wbeta_alpha = bind_tensor(f, p + "ssm_ba.weight", {E, 2 * Hv});
  } else {
    d->wbeta = bind_tensor(f, p + "ssm_beta.weight", {E, Hv});
    d->walpha = bind_tensor(f, p + "ssm_alpha.weight", {E, Hv});
  }
  d->norm = bind_tensor(f, p + "ssm_norm.weight", {dn.dim_v});
  if (d->conv->type != DType::F32) fail(f.path(), ": tensor '", d->conv->name, "' must be f32");
  w.wo = bind_tensor(f, p + "ssm_out.weight", {vd, E});  // the layer's output projection
  w.ext = std::move(d);
}

MemoryLayout memory_layout(const Hparams& hp) {
  const DeltaNetHparams& dn = hp.ext_as<DeltaNetHparams>();
  MemoryLayout m;
  m.kv = KvGeometry{0, hp.n_head, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v};
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    LayerMemorySpec spec;
    if (dn.linear[l]) {
      spec.kind = LayerMemoryKind::recurrent;
      // The conv window (the last K-1 inputs) and the delta-rule state, per value head [D_v][D_k].
      spec.state_floats = {(dn.conv_kernel - 1) * dn.conv_dim(), dn.n_head_v * dn.dim_v * dn.dim_k};
    } else {
      ++m.kv.n_layer;
    }
    m.layers.push_back(spec);
  }
  return m;
}

// Buffers of one forward step, sized once for its T tokens.
struct Scratch {
  ActBuf<float> x, h, o, attn;
  // Gated attention.
  ActBuf<float> qg, q, gate, k, v;
  // Gated DeltaNet.
  ActBuf<float> mixed, conv, qk, z, ba, alpha, beta_logit, g, beta;
};

void gated_attention(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                     int64_t l, Scratch& s, const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const LayerWeights& w = m.layers()[static_cast<size_t>(l)];
  const int il = static_cast<int>(l);
  const int64_t T = b.size(), H = hp.n_head, Hkv = hp.n_head_kv, Dk = hp.head_dim_k, Dv = hp.head_dim_v;
  auto report = [&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, il, data, rows, cols);
  };
  be.matmul(*w.wq, s.h.data(), s.qg.data(), T);
  be.matmul(*w.wk, s.h.data(), s.k.data(), T);
  be.matmul(*w.wv, s.h.data(), s.v.data(), T);
  report("Qcur_full", s.qg.data(), T, 2 * H * Dk);
  // Each head's row is [q (Dk) | gate (Dk)].
  be.copy_2d(s.qg.data(), 2 * Dk, s.q.data(), Dk, T * H, Dk);
  be.copy_2d(s.qg.data() + Dk, 2 * Dk, s.gate.data(), Dk, T * H, Dk);
  be.rms_norm(s.q.data(), static_cast<const float*>(w.q_norm->data), s.q.data(), T * H, Dk, hp.rms_eps);
  be.rms_norm(s.k.data(), static_cast<const float*>(w.k_norm->data), s.k.data(), T * Hkv, Dk, hp.rms_eps);
  report("Qcur_normed", s.q.data(), T * H, Dk);
  report("Kcur_normed", s.k.data(), T * Hkv, Dk);
  be.rope(s.q.data(), b.pos.data(), T, H, Dk, hp.rope());
  be.rope(s.k.data(), b.pos.data(), T, Hkv, Dk, hp.rope());
  report("Qcur", s.q.data(), T * H, Dk);
  report("Kcur", s.k.data(), T * Hkv, Dk);
  const AttendShape shape{H, Hkv, Dk, Dv, 1.0f / std::sqrt(static_cast<float>(Dk))};
  attend_batch(be, mem, runs, l, shape, s.q.data(), s.k.data(), s.v.data(), s.attn.data());
  report("attn_pregate", s.attn.data(), T, H * Dv);
  be.sigmoid_mul(s.attn.data(), s.gate.data(), s.attn.data(), T * H * Dv);
  report("attn_gated", s.attn.data(), T, H * Dv);
}

void gated_deltanet(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                    int64_t l, Scratch& s, const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const DeltaNetHparams& dn = hp.ext_as<DeltaNetHparams>();
  const LayerWeights& lw = m.layers()[static_cast<size_t>(l)];
  const DeltaNetWeights& w = lw.ext_as<DeltaNetWeights>();
  const int il = static_cast<int>(l);
  const int64_t T = b.size(), Hk = dn.n_head_k, Hv = dn.n_head_v, Dk = dn.dim_k, Dv = dn.dim_v, C = dn.conv_dim();
  auto report = [&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, il, data, rows, cols);
  };
  be.matmul(*w.wqkv, s.h.data(), s.mixed.data(), T);
  be.matmul(*w.wgate, s.h.data(), s.z.data(), T);
  if (w.wbeta_alpha) {
    be.matmul(*w.wbeta_alpha, s.h.data(), s.ba.data(), T);
    const int64_t r = Hv / Hk;  // value heads per key-head group
    for (int64_t g = 0; g < Hk; ++g) {
      be.copy_2d(s.ba.data() + g * 2 * r, 2 * Hv, s.beta_logit.data() + g * r, Hv, T, r);
      be.copy_2d(s.ba.data() + g * 2 * r + r, 2 * Hv, s.alpha.data() + g * r, Hv, T, r);
    }
  } else {
    be.matmul(*w.wbeta, s.h.data(), s.beta_logit.data(), T);
    be.matmul(*w.walpha, s.h.data(), s.alpha.data(), T);
  }
  report("linear_attn_qkv_mixed", s.mixed.data(), T, C);
  report("z", s.z.data(), T, Hv * Dv);
  be.delta_gates(s.alpha.data(), s.beta_logit.data(), static_cast<const float*>(w.dt_bias->data),
                 static_cast<const float*>(w.a->data), s.g.data(), s.beta.data(), T, Hv);
  report("gate", s.g.data(), T, Hv);
  report("beta_sigmoid", s.beta.data(), T, Hv);
  // The convolution runs along each sequence's own tokens, from its own window.
  for (const BatchRun& r : runs)
    be.conv1d_causal(s.mixed.data() + r.first * C, static_cast<const float*>(w.conv->data), mem.state(r.seq, l, 0),
                     s.conv.data() + r.first * C, r.n, C, dn.conv_kernel, /*silu=*/true);
  report("conv_output_silu", s.conv.data(), T, C);
  // q and k (the first 2·H_k heads of each row) normalized per head; v read in place.
  be.copy_2d(s.conv.data(), C, s.qk.data(), 2 * Hk * Dk, T, 2 * Hk * Dk);
  be.l2_norm(s.qk.data(), s.qk.data(), T * 2 * Hk, Dk, hp.rms_eps);
  report("qk_conv_normed", s.qk.data(), T * 2 * Hk, Dk);
  for (const BatchRun& r : runs) {
    DeltaRuleArgs a;
    a.q = s.qk.data() + r.first * 2 * Hk * Dk;
    a.k = a.q + Hk * Dk;
    a.qk_stride = 2 * Hk * Dk;
    a.v = s.conv.data() + r.first * C + 2 * Hk * Dk;
    a.v_stride = C;
    a.g = s.g.data() + r.first * Hv;
    a.beta = s.beta.data() + r.first * Hv;
    a.state = mem.state(r.seq, l, 1);
    a.out = s.attn.data() + r.first * Hv * Dv;
    a.n_tok = r.n;
    a.n_head_k = Hk;
    a.n_head_v = Hv;
    a.dim_k = Dk;
    a.dim_v = Dv;
    a.grouped_heads = dn.grouped_heads;
    a.scale = 1.0f / std::sqrt(static_cast<float>(Dk));
    be.delta_rule(a);
  }
  report("delta_out", s.attn.data(), T * Hv, Dv);
  // Gated RMSNorm per value head: rms_norm(o) ⊙ silu(z).
  be.rms_norm(s.attn.data(), static_cast<const float*>(w.norm->data), s.attn.data(), T * Hv, Dv, hp.rms_eps);
  be.swiglu(s.z.data(), s.attn.data(), s.attn.data(), T * Hv * Dv, 0.0f);
  report("final_output", s.attn.data(), T, Hv * Dv);
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const DeltaNetHparams& dn = hp.ext_as<DeltaNetHparams>();
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, Dk = hp.head_dim_k, Hkv = hp.n_head_kv;
  const int64_t C = dn.conv_dim(), Hv = dn.n_head_v, vd = Hv * dn.dim_v;
  Scratch s;
  auto a = [&](int64_t n) { return be.alloc<float>(n); };
  s.x = a(T * E), s.h = a(T * E), s.o = a(T * E);
  s.attn = a(T * std::max(H * hp.head_dim_v, vd));
  s.qg = a(T * 2 * H * Dk), s.q = a(T * H * Dk), s.gate = a(T * H * Dk);
  s.k = a(T * Hkv * Dk), s.v = a(T * Hkv * hp.head_dim_v);
  s.mixed = a(T * C), s.conv = a(T * C), s.qk = a(T * 2 * dn.n_head_k * dn.dim_k), s.z = a(T * vd);
  s.ba = a(T * 2 * Hv), s.alpha = a(T * Hv), s.beta_logit = a(T * Hv), s.g = a(T * Hv), s.beta = a(T * Hv);

  m.embed(be, b.tokens.data(), T, s.x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& w = m.layers()[static_cast<size_t>(l)];
    be.rms_norm(s.x.data(), static_cast<const float*>(w.attn_norm->data), s.h.data(), T, E, hp.rms_eps);
    report_to(hook, be, "attn_norm", static_cast<int>(l), s.h.data(), T, E);
    if (dn.linear[l])
      gated_deltanet(m, be, mem, b, runs, l, s, hook);
    else
      gated_attention(m, be, mem, b, runs, l, s, hook);
    m.attn_output_and_ffn(be, l, s.attn.data(), s.x.data(), s.h.data(), s.o.data(), T, hook);
  }
  m.output_head(be, s.x.data(), b, logits, hook);
}

constexpr Arch entry(std::string_view name) { return {name, read_hparams, bind_attention, memory_layout, forward}; }
constexpr Arch kArchs[] = {entry("qwen35moe"), entry("qwen35"), entry("qwen3next")};

}  // namespace

std::span<const Arch> qwen35_archs() { return kArchs; }

}  // namespace sluice
