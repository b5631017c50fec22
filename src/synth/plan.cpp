// synth/plan: tensor names and shapes per architecture, exactly as llama.cpp's loader
// (llama-model.cpp, create_tensors) and Sluice's (models/model.cpp) bind them, and the
// distribution of each tensor's values.
#include "synth/plan.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/quant.h"
#include "synth/rng.h"

namespace sluice::synth_plan {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Weight scales (see synth.h): σ = gain / sqrt(fan_in), fan_in = ne[0] (y = W·x contracts ne[0]).
float gain_of(const std::string& name, uint32_t gating_func, int64_t n_layer) {
  if (name == "output.weight") return 4.0f;
  // Conv taps N(0, 1/K): each channel's K-tap causal filter keeps its input's scale.
  if (contains(name, "ssm_conv1d")) return 1.0f;
  if (contains(name, "ffn_gate_inp")) return gating_func == 2 ? 1.5f : 4.0f;
  // The query/key path: gain 1 gives q·k/sqrt(d) a spread of ~1, so attention is not uniform.
  for (const char* qk : {".attn_q.", ".attn_k.", ".attn_q_a.", ".attn_q_b.", ".attn_kv_a_mqa.", ".attn_k_b."})
    if (contains(name, qk)) return 1.0f;
  // The residual writers (GPT-2's depth-scaled init): each layer adds 1/sqrt(n_layer) of a
  // one-layer model's output, so the sum over all layers stays about as large as one layer's and
  // the token embedding keeps its share of the residual at every depth. Without it the layers'
  // outputs pile up into a component every token shares (attention writes running means of the
  // context), and deep routers all pick the same few experts: 48 unscaled qwen3-30b-a3b layers
  // sent 64-70% of their routing to 8 of 128 experts at layers 40-47 (16-20% at layer 0), which
  // no trained, load-balanced model does and which makes any expert cache look perfect.
  // In the hybrids ssm_out is the DeltaNet layers' output projection, the same residual writer.
  if (contains(name, ".attn_output.") || contains(name, ".ffn_down") || contains(name, ".ssm_out."))
    return 0.5f / std::sqrt(static_cast<float>(std::max<int64_t>(1, n_layer)));
  return 0.5f;
}

}  // namespace

// Routing locality X (MoE models only; X = 0 leaves every scale at 1).
//
// A router reads ffn_norm(x) of the current token, and in a random model x is dominated by
// the token's own embedding, so consecutive tokens route nearly independently: the chance that
// an expert chosen for token t is chosen again for t+1 is about k/n_expert. Real models reuse
// experts across neighbouring tokens more than that. To get this, the last quarter of the
// residual channels (the "context channels" C, ctx_begin = n_embd - n_embd/4) is given over,
// as X grows, to what attention writes — a weighted average over earlier tokens — and the
// routers are made to read mostly C:
//   token_embd       columns in C  × (1 - X)        (the token itself writes less into C)
//   ffn_down*        rows in C     × (1 - X)        (FFN outputs write less into C)
//   attn_output      rows in C     × (1 + 3X)       (attention writes more into C; 3 makes an
//                                                    average of ~10 value vectors about as large
//                                                    as an embedding, std 0.5)
//   ffn_gate_inp     columns not in C × (1 - X), columns in C × (1 + X)
//                                                   (at X = 1 the router reads only C, with
//                                                    sqrt(n_embd / |C|) = 2 times the gain, so
//                                                    its logits keep their spread)
//   query side       × (1 - 0.75X): attn_q (llama, deepseek2 V2-Lite), attn_q_b (deepseek2
//                    with q_lora), attn_q_norm (qwen3/qwen3moe/olmoe, whose q RMSNorm cancels
//                    any scale of attn_q), so every q·k score shrinks by that factor.
// Why the last one: with the full-gain q/k path each query weighs the earlier tokens by its own
// content, so two neighbours average the same tokens with unrelated weights and their context
// vectors correlate only ~e^-1 (measured reuse at X = 1 without it: 0.39-0.63). Flatter scores
// make the average nearly a running mean, which moves by O(1/t) per token.
// Measured on the tiny MoE presets (qwen3moe, mixtral, deepseek2), seed 1, over a 47-token
// story (the fraction of a token's experts that the previous token also used;
// tests/models/test_synth.cpp, RoutingLocalityRaisesReuse):
//   X = 0: 0.235-0.247 (chance k/n_expert = 0.25), X = 0.5: 0.271-0.288, X = 1: 0.699-0.820.
// Because the context is a running mean, reuse at X near 1 grows with the position in the
// sequence; X = 0.5 keeps the router mostly token-driven with a context bias.
std::vector<TensorPlan> plan_tensors(const SynthShape& s, const std::string& type, float routing_locality,
                                     int64_t n_real_vocab) {
  if (!(routing_locality >= 0.0f && routing_locality <= 1.0f))
    fail("synth: --routing-locality ", routing_locality, " is outside 0..1");
  const float X = s.n_expert > 0 ? routing_locality : 0.0f;
  const int64_t E = s.n_embd, H = s.n_head, V = s.n_vocab;
  const int64_t ctx_begin = X > 0 ? E - E / 4 : -1;
  const bool mla = s.gguf_arch == "deepseek2";

  // KDA hybrids: attn_v is in the KDA layers only, and llama.cpp's q4_k_m counters count those.
  int64_t n_kda = 0, kda_index = -1;
  if (s.kda())
    for (int64_t l = 0; l < s.n_layer; ++l) n_kda += !s.is_mla_layer(l);

  std::vector<TensorPlan> out;
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    TensorPlan t;
    t.name = name;
    t.ne = std::move(ne);
    const bool kda_v = s.kda() && contains(name, ".attn_v.weight");
    t.type = synth_tensor_type(type, name, t.ne, s.n_layer, s.n_expert, std::max<int64_t>(1, s.full_attention_interval),
                               kda_v ? kda_index : -1, kda_v ? n_kda : -1);
    const bool is_ssm_a = name.size() > 6 && name.compare(name.size() - 6, 6, ".ssm_a") == 0;  // not ssm_alpha
    if (s.kda() && is_ssm_a) {
      // KDA per-head A (the scripts/golden generators' ranges): kimi-linear stores −exp(A_log),
      // A_log in log 1..log 4, so A in [−4, −1]; bailingmoe3 stores exp(A_log) in [1, 2], the
      // slope of the safe gate's sigmoid.
      t.init.uniform = true;
      t.init.lo = s.kda_low_rank() ? -4.0f : 1.0f, t.init.hi = s.kda_low_rank() ? -1.0f : 2.0f;
    } else if (s.kda() && contains(name, ".ssm_dt.bias")) {
      // kimi-linear: dt_bias = softplus⁻¹(0.01..0.1) ≈ −4.6..−2.25, so softplus(f_b(f_a(x)) + dt_bias)
      // ~0.03 and a step keeps exp(A·0.03) ≈ 0.9 of the state (0.6-0.99 over the ranges);
      // bailingmoe3: U(−4, −2), so the log-decay −5·sigmoid(A·(W_f·x + dt_bias)) ≈ −0.2 per step
      // (exp ≈ 0.6..0.97). Without this the state would forget most of itself every token (or,
      // with a large dt, overflow its decays), as qwen35's ssm_a/ssm_dt.bias care avoids.
      t.init.uniform = true;
      t.init.lo = s.kda_low_rank() ? -4.6f : -4.0f, t.init.hi = s.kda_low_rank() ? -2.25f : -2.0f;
    } else if (s.kda() && contains(name, ".attn_gate.")) {
      // bailingmoe3's head-wise MLA output gate [n_embd, n_head]: gain 2 (as the golden), so the
      // heads' sigmoid gates differ (logit std 1).
      t.init.std = 2.0f / std::sqrt(static_cast<float>(t.ne[0]));
    } else if (is_ssm_a) {
      // ssm_a = −exp(A_log), A_log ~ log U(1, 16) (the HF init draws A ~ U(0, 16)): per value
      // head decay rates from 1 to 16, so the state forgets at e^{−A·softplus(·)} per token.
      t.init.uniform = true, t.init.lo = -16.0f, t.init.hi = -1.0f;
    } else if (contains(name, ".ssm_dt.bias")) {
      // Small: softplus(alpha + dt_bias) stays near ln 2 and the decay is set by ssm_a.
      t.init.mean = 0.0f, t.init.std = 0.1f;
    } else if (contains(name, "ffn_gate_inp_shexp")) {
      // The shared expert's sigmoid gate, a 1-D router: logit std ~1, gates spread over 0.27-0.73.
      t.init.mean = 0.0f, t.init.std = 1.0f / std::sqrt(static_cast<float>(t.ne[0]));
    } else if (t.ne.size() == 1) {
      // Norm weights 1 + N(0, 0.05²); exp_probs_b, the only 1-D bias, N(0, 0.1²).
      t.init.mean = contains(name, "exp_probs_b") ? 0.0f : 1.0f;
      t.init.std = contains(name, "exp_probs_b") ? 0.1f : 0.05f;
    } else if (name == "token_embd.weight") {
      t.init.std = 0.5f;
    } else {
      t.init.std = gain_of(name, s.gating_func, s.n_layer) / std::sqrt(static_cast<float>(t.ne[0]));
    }
    // Padding tokens (ids the tokenizer does not have) get all-zero LM-head rows, so their logit
    // is exactly 0 while real tokens' logits spread with std ~4: sampling and greedy decoding
    // then produce real tokens (a random head would pick one of the ~150k padding ids almost
    // every time, which render as nothing), and the head keeps its full size and cost. Their
    // embedding rows stay random; they are never fed in.
    if (name == "output.weight" && n_real_vocab < V) t.init.zero_rows_from = n_real_vocab;
    if (ctx_begin >= 0) {
      TensorInit& in = t.init;
      // Flatter attention: the query side scaled by 1 - 0.75X scales every q·k score by it.
      // With q/k RMSNorm (qwen3, olmoe) the query matrix's scale cancels, so the q norm
      // weights carry it; with a low-rank q (deepseek2 V3 style) attn_q_b does.
      const bool qk_norm = s.gguf_arch == "qwen3" || s.gguf_arch == "qwen3moe" || s.gguf_arch == "olmoe" || s.hybrid();
      const bool q_side = qk_norm ? contains(name, "attn_q_norm.")
                                  : contains(name, s.q_lora_rank > 0 ? "attn_q_b." : "attn_q.");
      if (q_side) in.mean *= 1.0f - 0.75f * X, in.std *= 1.0f - 0.75f * X;
      if (name == "token_embd.weight") {
        in.ctx_begin = ctx_begin, in.col_scale_ctx = 1.0f - X;
      } else if (contains(name, "ffn_down")) {
        in.ctx_begin = ctx_begin, in.row_scale_ctx = 1.0f - X;
      } else if (contains(name, "attn_output") || contains(name, "ssm_out")) {  // ssm_out: DeltaNet's context read-out
        in.ctx_begin = ctx_begin, in.row_scale_ctx = 1.0f + 3.0f * X;
      } else if (contains(name, "ffn_gate_inp")) {
        in.ctx_begin = ctx_begin, in.col_scale = 1.0f - X, in.col_scale_ctx = 1.0f + X;
      }
    }
    out.push_back(std::move(t));
  };

  // One layer's MLA attention (deepseek2, and the MLA layers of the KDA hybrids), with
  // bailingmoe3's head-wise output gate where asked.
  auto add_mla_attention = [&](const std::string& p, bool head_gate) {
    const int64_t q_w = H * (s.qk_nope + s.qk_rope);
    if (s.q_lora_rank > 0) {
      add(p + "attn_q_a.weight", {E, s.q_lora_rank});
      add(p + "attn_q_a_norm.weight", {s.q_lora_rank});
      add(p + "attn_q_b.weight", {s.q_lora_rank, q_w});
    } else {
      add(p + "attn_q.weight", {E, q_w});
    }
    add(p + "attn_kv_a_mqa.weight", {E, s.kv_lora_rank + s.qk_rope});
    add(p + "attn_kv_a_norm.weight", {s.kv_lora_rank});
    add(p + "attn_k_b.weight", {s.qk_nope, s.kv_lora_rank, H});
    add(p + "attn_v_b.weight", {s.kv_lora_rank, s.v_head, H});
    if (head_gate) add(p + "attn_gate.weight", {E, H});
    add(p + "attn_output.weight", {H * s.v_head, E});
  };

  add("token_embd.weight", {E, V});
  add("output_norm.weight", {E});
  add("output.weight", {E, V});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (s.kda()) {
      // kimi-linear, bailingmoe3 (models/kimi_linear.cpp, models/bailingmoe3.cpp; llama.cpp's
      // converters' order, as scripts/golden/make_kimi_linear.py and make_bailingmoe3.py).
      const int64_t D = s.kda_head_dim, I = H * D, K = s.ssm_conv_kernel;
      add(p + "attn_norm.weight", {E});
      if (!s.is_mla_layer(l)) {
        ++kda_index;
        add(p + "attn_q.weight", {E, I});
        add(p + "attn_k.weight", {E, I});
        add(p + "attn_v.weight", {E, I});
        for (const char* n : {"q", "k", "v"}) add(p + "ssm_conv1d_" + n + ".weight", {K, 1, I, 1});
        if (s.kda_low_rank()) {
          add(p + "ssm_f_a.weight", {E, D});  // decay gate, low rank through D
          add(p + "ssm_f_b.weight", {D, I});
          add(p + "ssm_beta.weight", {E, H});
          add(p + "ssm_a", {1, H, 1, 1});  // −exp(A_log)
          add(p + "ssm_dt.bias", {I});
          add(p + "ssm_g_a.weight", {E, D});  // output gate, low rank
          add(p + "ssm_g_b.weight", {D, I});
        } else {
          add(p + "ssm_f_a.weight", {E, I});  // the safe gate's full-rank input
          add(p + "ssm_beta.weight", {E, H});
          add(p + "ssm_a", {1, H});  // exp(A_log)
          add(p + "ssm_dt.bias", {I});
          add(p + "ssm_g_a.weight", {E, I});  // output gate, full rank
        }
        add(p + "ssm_norm.weight", {D});
        add(p + "attn_output.weight", {I, E});
      } else {
        add_mla_attention(p, !s.kda_low_rank());  // bailingmoe3's head-wise gate
      }
      add(p + "ffn_norm.weight", {E});
      if (l < s.n_layer_dense_lead) {
        add(p + "ffn_gate.weight", {E, s.n_ff});
        add(p + "ffn_up.weight", {E, s.n_ff});
        add(p + "ffn_down.weight", {s.n_ff, E});
      } else {
        const int64_t ne = s.n_expert, fe = s.n_ff_exp;
        const int64_t fs = s.n_ff_shexp > 0 ? s.n_ff_shexp : fe * s.n_expert_shared;
        add(p + "ffn_gate_inp.weight", {E, ne});
        add(p + "exp_probs_b.bias", {ne});
        add(p + "ffn_gate_exps.weight", {E, fe, ne});
        add(p + "ffn_up_exps.weight", {E, fe, ne});
        add(p + "ffn_down_exps.weight", {fe, E, ne});
        add(p + "ffn_gate_shexp.weight", {E, fs});
        add(p + "ffn_up_shexp.weight", {E, fs});
        add(p + "ffn_down_shexp.weight", {fs, E});
      }
      continue;
    }
    if (s.hybrid()) {
      // qwen35moe, qwen3next (models/qwen35.cpp; llama.cpp's converter order): post_attention_norm is the
      // pre-FFN norm; a Gated DeltaNet or a gated attention block; MoE + one gated shared expert.
      add(p + "attn_norm.weight", {E});
      add(p + "post_attention_norm.weight", {E});
      if (s.is_attention_layer(l)) {
        const int64_t q_w = H * s.head_dim, kv_w = s.n_head_kv * s.head_dim;
        add(p + "attn_q.weight", {E, 2 * q_w});  // [q | gate] per head
        add(p + "attn_k.weight", {E, kv_w});
        add(p + "attn_v.weight", {E, kv_w});
        add(p + "attn_output.weight", {q_w, E});
        add(p + "attn_q_norm.weight", {s.head_dim});
        add(p + "attn_k_norm.weight", {s.head_dim});
      } else {
        const int64_t Hv = s.ssm_dt_rank, vd = s.ssm_d_inner, C = s.ssm_conv_dim();
        add(p + "attn_qkv.weight", {E, C});    // [q | k | v] into the conv
        add(p + "attn_gate.weight", {E, vd});  // z
        add(p + "ssm_conv1d.weight", {s.ssm_conv_kernel, C});
        add(p + "ssm_dt.bias", {Hv});
        add(p + "ssm_a", {Hv});
        if (s.fused_beta_alpha()) {
          add(p + "ssm_ba.weight", {E, 2 * Hv});  // per key-head group [beta | alpha] of its value heads
        } else {
          add(p + "ssm_beta.weight", {E, Hv});
          add(p + "ssm_alpha.weight", {E, Hv});
        }
        add(p + "ssm_norm.weight", {vd / Hv});
        add(p + "ssm_out.weight", {vd, E});
      }
      const int64_t ne = s.n_expert, fe = s.n_ff_exp, fs = s.n_ff_shexp;
      add(p + "ffn_gate_inp.weight", {E, ne});
      add(p + "ffn_gate_exps.weight", {E, fe, ne});
      add(p + "ffn_up_exps.weight", {E, fe, ne});
      add(p + "ffn_down_exps.weight", {fe, E, ne});
      add(p + "ffn_gate_inp_shexp.weight", {E});
      add(p + "ffn_gate_shexp.weight", {E, fs});
      add(p + "ffn_up_shexp.weight", {E, fs});
      add(p + "ffn_down_shexp.weight", {fs, E});
      continue;
    }
    add(p + "attn_norm.weight", {E});
    if (mla) {
      add_mla_attention(p, false);
    } else {
      const int64_t q_w = H * s.head_dim, kv_w = s.n_head_kv * s.head_dim;
      add(p + "attn_q.weight", {E, q_w});
      add(p + "attn_k.weight", {E, kv_w});
      add(p + "attn_v.weight", {E, kv_w});
      add(p + "attn_output.weight", {q_w, E});
      if (s.gguf_arch == "qwen3" || s.gguf_arch == "qwen3moe") {  // per-head q/k RMSNorm
        add(p + "attn_q_norm.weight", {s.head_dim});
        add(p + "attn_k_norm.weight", {s.head_dim});
      } else if (s.gguf_arch == "olmoe") {  // RMSNorm over the whole projected q and k
        add(p + "attn_q_norm.weight", {q_w});
        add(p + "attn_k_norm.weight", {kv_w});
      }
    }
    add(p + "ffn_norm.weight", {E});
    if (s.n_expert > 0 && l >= s.n_layer_dense_lead) {
      const int64_t ne = s.n_expert, fe = s.n_ff_exp;
      add(p + "ffn_gate_inp.weight", {E, ne});
      if (mla && s.gating_func == 2) add(p + "exp_probs_b.bias", {ne});
      add(p + "ffn_gate_exps.weight", {E, fe, ne});
      add(p + "ffn_up_exps.weight", {E, fe, ne});
      add(p + "ffn_down_exps.weight", {fe, E, ne});
      if (s.n_expert_shared > 0) {
        const int64_t fs = fe * s.n_expert_shared;
        add(p + "ffn_gate_shexp.weight", {E, fs});
        add(p + "ffn_up_shexp.weight", {E, fs});
        add(p + "ffn_down_shexp.weight", {fs, E});
      }
    } else {
      add(p + "ffn_gate.weight", {E, s.n_ff});
      add(p + "ffn_up.weight", {E, s.n_ff});
      add(p + "ffn_down.weight", {s.n_ff, E});
    }
  }
  return out;
}

void fill_rows(const TensorPlan& t, uint64_t key, int64_t r0, int64_t r1, float* row, uint8_t* dst, size_t row_bytes) {
  const int64_t ne0 = t.ne[0], ne1 = t.ne.size() > 1 ? t.ne[1] : 1;
  const TensorInit& in = t.init;
  for (int64_t r = r0; r < r1; ++r) {
    if (in.uniform) {
      uniform_fill(key, static_cast<uint64_t>(r) * static_cast<uint64_t>(ne0), row, ne0);
      for (int64_t c = 0; c < ne0; ++c) row[c] = in.lo + (in.hi - in.lo) * row[c];
      quantize_row(t.type, row, dst + static_cast<size_t>(r - r0) * row_bytes, ne0);
      continue;
    }
    gauss_fill(key, static_cast<uint64_t>(r) * static_cast<uint64_t>(ne0), row, ne0);
    if (in.zero_rows_from >= 0 && r >= in.zero_rows_from) {
      std::fill(row, row + ne0, 0.0f);
    } else if (in.ctx_begin < 0) {
      for (int64_t c = 0; c < ne0; ++c) row[c] = in.mean + in.std * row[c];
    } else {
      // Routing locality: columns and rows in the context channels scale differently.
      const float rs = (r % ne1) >= in.ctx_begin ? in.row_scale_ctx : 1.0f;
      for (int64_t c = 0; c < ne0; ++c) {
        const float cs = c >= in.ctx_begin ? in.col_scale_ctx : in.col_scale;
        row[c] = in.mean + in.std * rs * cs * row[c];
      }
    }
    quantize_row(t.type, row, dst + static_cast<size_t>(r - r0) * row_bytes, ne0);
  }
}

}  // namespace sluice::synth_plan

namespace sluice {
int64_t synth_param_count(const SynthShape& s) {
  int64_t n = 0;
  for (const auto& t : synth_plan::plan_tensors(s, "f32", 0.0f, s.n_vocab)) n += t.ne[0] * t.n_rows();
  return n;
}
}  // namespace sluice
