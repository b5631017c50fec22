// synth/mlx_folder: `sluice synth --format mlx` — the synth model as the folder mlx_lm.convert
// would write for it: config.json in the architecture's Hugging Face form (with MLX's
// "quantization"), model.safetensors under mlx-lm's tensor names and layouts (affine-quantized
// matrices as uint32 codes + bf16 scales and biases, routers at 8 bits; norms, convs and decays
// as floats), and the tokenizer files of a folder. The weights are the GGUF synth's of the same
// seed (synth_plan::fill_rows), moved into the folder's conventions, so the two files hold one
// model: Llama's Q/K rows back in the rotate-half order llama.cpp's converter permutes away,
// Qwen3.5's value heads back in key-head groups (llama.cpp tiles them), Qwen3-Next's q/k/v/z
// rows fused into in_proj_qkvz, ssm_a back to A_log (log(-a), Ling 3's log(a)). Float folders
// (--type f32) load to the same logits as the f32 GGUF (tests/models/test_synth_mlx.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "format/hf_folder.h"
#include "format/safetensors.h"
#include "quant/mlx_affine.h"
#include "synth/plan.h"
#include "synth/rng.h"
#include "synth/synth.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using synth_plan::TensorPlan;
using Clock = std::chrono::steady_clock;

// --type for a folder: f32 / f16 / bf16 floats, or q2..q8 (MLX affine bits). 0 bits: float.
int type_bits(const std::string& t) {
  if (t == "f32" || t == "f16" || t == "bf16") return 0;
  if (t.size() == 2 && t[0] == 'q' && std::string_view("234568").find(t[1]) != std::string_view::npos)
    return t[1] - '0';
  fail("synth --format mlx: type '", t, "' is not a folder type (f32, f16, bf16, or MLX's q2, q3, q4, q5, q6, q8)");
}

enum class Value { same, log_neg, log };  // A_log from ssm_a: log(-a), or Ling 3's log(a)

// One tensor of the folder: its data as `rows` rows of `cols` (cols: the axis MLX quantizes),
// each row drawn from a row of a plan tensor.
struct HfTensor {
  std::string name;            // "model.layers.0.mlp.gate.weight"
  std::vector<int64_t> shape;  // as a float tensor, outermost first
  int64_t rows = 0, cols = 0;
  std::vector<const TensorPlan*> src;            // one, or two (Qwen3-Next's in_proj_qkvz)
  std::vector<std::pair<int, int64_t>> row_src;  // row -> (src, its row); empty: src[0]'s rows in order
  std::vector<int64_t> col_src;                  // column -> source column; empty: the same
  Value value = Value::same;
  int bits = 0;  // > 0: MLX affine codes
  StDtype float_type = StDtype::F32;
};

// The folder name of blk.L.<leaf> in an architecture's mlx-lm module tree ("" for one that
// folds into another tensor: Qwen3-Next's attn_gate, written inside in_proj_qkvz).
std::string hf_leaf(const SynthShape& s, int64_t l, const std::string& leaf) {
  const std::string& a = s.gguf_arch;
  const bool kda = s.kda(), ling = a == "bailingmoe3";
  static const std::map<std::string, std::string> ffn = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_exps.weight", "mlp.switch_mlp.gate_proj.weight"},
      {"ffn_up_exps.weight", "mlp.switch_mlp.up_proj.weight"},
      {"ffn_down_exps.weight", "mlp.switch_mlp.down_proj.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
  };
  static const std::map<std::string, std::string> attn = {
      {"attn_q.weight", "q_proj.weight"},
      {"attn_k.weight", "k_proj.weight"},
      {"attn_v.weight", "v_proj.weight"},
      {"attn_output.weight", "o_proj.weight"},
      {"attn_q_norm.weight", "q_norm.weight"},
      {"attn_k_norm.weight", "k_norm.weight"},
      // MLA
      {"attn_q_a.weight", "q_a_proj.weight"},
      {"attn_q_a_norm.weight", "q_a_layernorm.weight"},
      {"attn_q_b.weight", "q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "kv_a_layernorm.weight"},
      {"attn_k_b.weight", "embed_q.weight"},
      {"attn_v_b.weight", "unembed_out.weight"},
      {"attn_gate.weight", "g_proj.weight"},  // Ling 3's head-wise MLA gate
      // KDA
      {"ssm_f_b.weight", "f_b_proj.weight"},
      {"ssm_g_b.weight", "g_b_proj.weight"},
      {"ssm_beta.weight", "b_proj.weight"},
      {"ssm_a", "A_log"},
      {"ssm_dt.bias", "dt_bias"},
      {"ssm_norm.weight", "o_norm.weight"},
  };
  static const std::map<std::string, std::string> deltanet = {
      {"attn_qkv.weight", "in_proj_qkv.weight"},
      {"attn_gate.weight", "in_proj_z.weight"},
      {"ssm_beta.weight", "in_proj_b.weight"},
      {"ssm_alpha.weight", "in_proj_a.weight"},
      {"ssm_ba.weight", "in_proj_ba.weight"},
      {"ssm_conv1d.weight", "conv1d.weight"},
      {"ssm_dt.bias", "dt_bias"},
      {"ssm_a", "A_log"},
      {"ssm_norm.weight", "norm.weight"},
      {"ssm_out.weight", "out_proj.weight"},
  };
  if (s.arch == "mixtral" && (leaf == "ffn_gate_inp.weight" || leaf.ends_with("_exps.weight")))
    return "block_sparse_moe." + ffn.at(leaf).substr(4);
  if (s.hybrid() && leaf.starts_with("ffn_") && leaf.find("shexp") != std::string::npos)
    return std::string(leaf == "ffn_gate_inp_shexp.weight"
                           ? "mlp.shared_expert_gate.weight"
                           : "mlp.shared_expert." + ffn.at(leaf).substr(std::string("mlp.shared_experts.").size()));
  if (leaf == "exp_probs_b.bias")
    return a == "kimi-linear" ? "mlp.e_score_correction_bias"
           : ling             ? "mlp.gate.expert_bias"
                              : "mlp.gate.e_score_correction_bias";
  if (const auto it = ffn.find(leaf); it != ffn.end()) return it->second;
  if (s.hybrid() && !s.is_attention_layer(l)) {
    if (a == "qwen3next" && leaf == "attn_gate.weight") return "";
    if (a == "qwen3next" && leaf == "attn_qkv.weight") return "linear_attn.in_proj_qkvz.weight";
    return "linear_attn." + deltanet.at(leaf);
  }
  const std::string at = ling ? "attention." : "self_attn.";
  if (kda && leaf.starts_with("ssm_conv1d_")) {  // q / k / v
    const std::string x = leaf.substr(11, 1);
    return at + (ling ? x + "_conv1d.weight" : x + "_conv.conv.weight");
  }
  if (kda && leaf == "ssm_f_a.weight") return at + (ling ? "f_proj.weight" : "f_a_proj.weight");
  if (kda && leaf == "ssm_g_a.weight") return at + (ling ? "g_proj.weight" : "g_a_proj.weight");
  if (ling && leaf == "attn_output.weight" && s.is_mla_layer(l)) return at + "dense.weight";
  if (const auto it = attn.find(leaf); it != attn.end()) return at + it->second;
  fail("synth --format mlx: no folder name for ", s.gguf_arch, " tensor blk.", l, ".", leaf);
}

// Row j of Llama's HF Q/K (rotate-half order within each head of hd) is row g of the GGUF,
// which llama.cpp's converter permuted to interleaved pairs: HF [h][half][i] = GGUF [h][i][half].
std::vector<std::pair<int, int64_t>> unpermute_rows(int64_t rows, int64_t hd) {
  std::vector<std::pair<int, int64_t>> m(static_cast<size_t>(rows));
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t h = j / hd, rem = j % hd, t = rem / (hd / 2), i = rem % (hd / 2);
    m[static_cast<size_t>(j)] = {0, h * hd + 2 * i + t};
  }
  return m;
}

// Qwen3.5's value head h of the folder (grouped: key head h / r) is the GGUF's tiled head
// (h % r)·Hk + h / r (key head (that) % Hk): the same head under llama.cpp's order.
int64_t tiled_head(const SynthShape& s, int64_t h) {
  const int64_t hk = s.ssm_n_group, r = s.ssm_dt_rank / hk;
  return (h % r) * hk + h / r;
}

// Index i of a run of value heads of `per` rows (or columns) each, starting at `first`.
int64_t regroup(const SynthShape& s, int64_t i, int64_t first, int64_t per) {
  if (i < first) return i;
  const int64_t k = i - first;
  return first + tiled_head(s, k / per) * per + k % per;
}

std::vector<HfTensor> folder_tensors(const SynthShape& s, const std::vector<TensorPlan>& plan, int bits, int group,
                                     StDtype float_type) {
  std::map<std::string, const TensorPlan*> by_name;
  for (const TensorPlan& t : plan) by_name[t.name] = &t;
  const std::string prefix = s.gguf_arch == "qwen35moe" ? "language_model." : "";
  const bool regrouped = s.gguf_arch == "qwen35moe" && s.ssm_dt_rank != s.ssm_n_group;
  std::vector<HfTensor> out;
  for (const TensorPlan& t : plan) {
    HfTensor h;
    h.src = {&t};
    h.rows = t.n_rows(), h.cols = t.ne[0];
    std::string leaf = t.name;
    int64_t l = -1;
    if (t.name == "token_embd.weight") {
      h.name = s.gguf_arch == "bailingmoe3" ? "model.word_embeddings.weight" : "model.embed_tokens.weight";
    } else if (t.name == "output_norm.weight") {
      h.name = "model.norm.weight";
    } else if (t.name == "output.weight") {
      h.name = "lm_head.weight";
    } else {
      const size_t dot = t.name.find('.', 4);
      l = std::stoll(t.name.substr(4, dot - 4));
      leaf = t.name.substr(dot + 1);
      const std::string n = hf_leaf(s, l, leaf);
      if (n.empty()) continue;
      h.name = "model.layers." + std::to_string(l) + "." + n;
    }
    h.name = prefix + h.name;
    h.shape.assign(t.ne.rbegin(), t.ne.rend());  // GGUF's ne is the row-major shape reversed
    const bool conv = leaf.starts_with("ssm_conv1d");
    if (conv) h.shape = {h.rows, h.cols, 1};  // mlx-lm's [C, K, 1]
    if (leaf == "ssm_a") {
      h.value = s.gguf_arch == "bailingmoe3" ? Value::log : Value::log_neg;
      const int64_t n = h.rows * h.cols;
      h.shape = s.gguf_arch == "kimi-linear" ? std::vector<int64_t>{1, 1, n, 1} : std::vector<int64_t>{n};
    }
    if (leaf == "ffn_gate_inp_shexp.weight") h.shape = {1, h.cols};
    if ((s.arch == "llama" || s.arch == "mixtral") && (leaf == "attn_q.weight" || leaf == "attn_k.weight"))
      h.row_src = unpermute_rows(h.rows, s.head_dim);
    if (regrouped && l >= 0 && !s.is_attention_layer(l)) {
      const int64_t dv = s.ssm_d_inner / s.ssm_dt_rank, qk = 2 * s.ssm_n_group * s.ssm_d_state;
      auto rows_by = [&](int64_t first, int64_t per) {
        for (int64_t j = 0; j < h.rows; ++j) h.row_src.push_back({0, regroup(s, j, first, per)});
      };
      if (leaf == "attn_qkv.weight" || leaf == "ssm_conv1d.weight") rows_by(qk, dv);
      if (leaf == "attn_gate.weight") rows_by(0, dv);
      if (leaf == "ssm_beta.weight" || leaf == "ssm_alpha.weight") rows_by(0, 1);
      if (leaf == "ssm_a" || leaf == "ssm_dt.bias")
        for (int64_t c = 0; c < h.cols; ++c) h.col_src.push_back(regroup(s, c, 0, 1));
      if (leaf == "ssm_out.weight")
        for (int64_t c = 0; c < h.cols; ++c) h.col_src.push_back(regroup(s, c, 0, dv));
    }
    if (s.gguf_arch == "qwen3next" && leaf == "attn_qkv.weight") {
      // in_proj_qkvz: stored row order[i] is row i of [attn_qkv; attn_gate] (the loader's split).
      const TensorPlan* z = by_name.at("blk." + std::to_string(l) + ".attn_gate.weight");
      const int64_t hv = s.ssm_dt_rank, hk = s.ssm_n_group, dk = s.ssm_d_state, dv = s.ssm_d_inner / hv;
      const std::vector<int64_t> order = qkvz_split_rows(hk, hv, dk, dv);
      h.src.push_back(z);
      h.rows = t.n_rows() + z->n_rows();
      h.shape = {h.rows, h.cols};
      h.row_src.assign(static_cast<size_t>(h.rows), {0, 0});
      for (size_t i = 0; i < order.size(); ++i) {
        const int64_t r = static_cast<int64_t>(i);
        h.row_src[static_cast<size_t>(order[i])] = r < t.n_rows() ? std::pair<int, int64_t>{0, r}
                                                                  : std::pair<int, int64_t>{1, r - t.n_rows()};
      }
    }
    // mlx-lm quantizes the matrices (Linear, Embedding, stacked experts, per-head MultiLinear)
    // whose rows are whole groups; norms, convs, decays and biases stay floats. Routers at 8 bits.
    const bool matrix = leaf.ends_with(".weight") && leaf.find("norm") == std::string::npos && !conv &&
                        (t.ne.size() >= 2 || leaf == "ffn_gate_inp_shexp.weight");
    if (bits > 0 && matrix && h.cols % group == 0) h.bits = leaf.starts_with("ffn_gate_inp") ? 8 : bits;
    h.float_type = h.value != Value::same || leaf == "ssm_dt.bias" ? StDtype::F32 : float_type;
    out.push_back(std::move(h));
  }
  return out;
}

json config_json(const SynthShape& s, int bits, int group, const std::vector<HfTensor>& tensors, StDtype float_type) {
  json c;
  const std::string& a = s.gguf_arch;
  auto common = [&](json& x) {
    x["vocab_size"] = s.n_vocab;
    x["hidden_size"] = s.n_embd;
    x["num_hidden_layers"] = s.n_layer;
    x["num_attention_heads"] = s.n_head;
    x["rms_norm_eps"] = s.rms_eps;
    x["max_position_embeddings"] = s.n_ctx_train;
    x["tie_word_embeddings"] = false;
  };
  auto mla = [&](json& x) {
    x["q_lora_rank"] = s.q_lora_rank > 0 ? json(s.q_lora_rank) : json(nullptr);
    x["kv_lora_rank"] = s.kv_lora_rank;
    x["qk_nope_head_dim"] = s.qk_nope;
    x["qk_rope_head_dim"] = s.qk_rope;
    x["v_head_dim"] = s.v_head;
  };
  if (s.arch == "llama" || s.arch == "mixtral" || a == "qwen3" || a == "qwen3moe") {
    const char* type = s.arch == "llama"     ? "llama"
                       : s.arch == "mixtral" ? "mixtral"
                       : a == "qwen3"        ? "qwen3"
                                             : "qwen3_moe";
    const char* cls = s.arch == "llama"     ? "LlamaForCausalLM"
                      : s.arch == "mixtral" ? "MixtralForCausalLM"
                      : a == "qwen3"        ? "Qwen3ForCausalLM"
                                            : "Qwen3MoeForCausalLM";
    c["model_type"] = type;
    c["architectures"] = {cls};
    common(c);
    c["num_key_value_heads"] = s.n_head_kv;
    c["head_dim"] = s.head_dim;
    c["intermediate_size"] = s.arch == "mixtral" ? s.n_ff_exp : s.n_ff;
    c["rope_theta"] = s.rope_base;
    if (s.arch == "mixtral") {
      c["num_local_experts"] = s.n_expert;
      c["num_experts_per_tok"] = s.n_expert_used;
    }
    if (a == "qwen3moe") {
      c["num_experts"] = s.n_expert;
      c["num_experts_per_tok"] = s.n_expert_used;
      c["moe_intermediate_size"] = s.n_ff_exp;
      c["norm_topk_prob"] = true;
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = json::array();
    }
  } else if (a == "deepseek2") {
    if (s.gating_func != 2)
      fail("synth --format mlx: deepseek2 preset '", s.preset, "' routes by softmax (DeepSeek-V2); a deepseek_v3 ",
           "folder routes by sigmoid with a selection bias (use --preset tiny-v3)");
    c["model_type"] = "deepseek_v3";
    c["architectures"] = {"DeepseekV3ForCausalLM"};
    common(c);
    c["num_key_value_heads"] = s.n_head;
    c["intermediate_size"] = s.n_ff;
    c["moe_intermediate_size"] = s.n_ff_exp;
    c["n_routed_experts"] = s.n_expert;
    c["num_experts_per_tok"] = s.n_expert_used;
    c["n_shared_experts"] = s.n_expert_shared;
    c["routed_scaling_factor"] = s.expert_weights_scale;
    mla(c);
    c["topk_method"] = "noaux_tc";
    c["scoring_func"] = "sigmoid";
    c["norm_topk_prob"] = s.expert_weights_norm;
    c["n_group"] = s.n_group;
    c["topk_group"] = s.n_group_used;
    c["first_k_dense_replace"] = s.n_layer_dense_lead;
    c["moe_layer_freq"] = 1;
    c["rope_theta"] = s.rope_base;
  } else if (s.hybrid()) {
    json t;
    common(t);
    t["num_key_value_heads"] = s.n_head_kv;
    t["head_dim"] = s.head_dim;
    t["linear_num_key_heads"] = s.ssm_n_group;
    t["linear_num_value_heads"] = s.ssm_dt_rank;
    t["linear_key_head_dim"] = s.ssm_d_state;
    t["linear_value_head_dim"] = s.ssm_d_inner / s.ssm_dt_rank;
    t["linear_conv_kernel_dim"] = s.ssm_conv_kernel;
    t["full_attention_interval"] = s.full_attention_interval;
    t["num_experts"] = s.n_expert;
    t["num_experts_per_tok"] = s.n_expert_used;
    t["moe_intermediate_size"] = s.n_ff_exp;
    t["shared_expert_intermediate_size"] = s.n_ff_shexp;
    t["norm_topk_prob"] = true;
    const double partial = static_cast<double>(s.n_rot > 0 ? s.n_rot : s.head_dim) / static_cast<double>(s.head_dim);
    if (a == "qwen35moe") {
      t["model_type"] = "qwen3_5_moe_text";
      json sections = json::array();
      for (size_t i = 0; i < 3 && i < s.rope_sections.size(); ++i) sections.push_back(s.rope_sections[i]);
      t["rope_parameters"] = {{"type", "default"},
                              {"rope_theta", s.rope_base},
                              {"partial_rotary_factor", partial},
                              {"mrope_section", sections}};
      c["model_type"] = "qwen3_5_moe";
      c["architectures"] = {"Qwen3_5MoeForConditionalGeneration"};
      c["tie_word_embeddings"] = false;
      c["text_config"] = t;
    } else {
      c["model_type"] = "qwen3_next";
      c["architectures"] = {"Qwen3NextForCausalLM"};
      t["intermediate_size"] = s.n_ff;
      t["rope_theta"] = s.rope_base;
      t["partial_rotary_factor"] = partial;
      t["decoder_sparse_step"] = 1;
      t["mlp_only_layers"] = json::array();
      c.update(t);
    }
  } else if (a == "kimi-linear") {
    c["model_type"] = "kimi_linear";
    c["architectures"] = {"KimiLinearForCausalLM"};
    common(c);
    c["num_key_value_heads"] = s.n_head;
    c["head_dim"] = s.kda_head_dim;
    c["intermediate_size"] = s.n_ff;
    c["rope_theta"] = s.rope_base;
    json kda_layers = json::array(), full = json::array();
    for (int64_t l = 0; l < s.n_layer; ++l) (s.is_mla_layer(l) ? full : kda_layers).push_back(l + 1);
    c["linear_attn_config"] = {{"num_heads", s.n_head},
                               {"head_dim", s.kda_head_dim},
                               {"short_conv_kernel_size", s.ssm_conv_kernel},
                               {"kda_layers", kda_layers},
                               {"full_attn_layers", full}};
    mla(c);
    c["mla_use_nope"] = true;
    c["num_experts"] = s.n_expert;
    c["num_experts_per_token"] = s.n_expert_used;
    c["num_shared_experts"] = s.n_expert_shared;
    c["moe_intermediate_size"] = s.n_ff_exp;
    c["moe_router_activation_func"] = s.gating_func == 2 ? "sigmoid" : "softmax";
    c["moe_renormalize"] = s.expert_weights_norm;
    c["routed_scaling_factor"] = s.expert_weights_scale;
    c["first_k_dense_replace"] = s.n_layer_dense_lead;
    c["moe_layer_freq"] = 1;
    c["use_grouped_topk"] = s.n_group > 1;
    c["num_expert_group"] = s.n_group;
    c["topk_group"] = s.n_group_used;
  } else if (a == "bailingmoe3") {
    // mlx-lm places the MLA layers by its own rule (every layer_group_size-th and those after
    // the last whole group); a shape that disagrees has no folder form.
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const bool mlx_mla = !((l + 1) % s.mla_interval != 0 && l < s.n_layer / s.mla_interval * s.mla_interval);
      if (mlx_mla != s.is_mla_layer(l))
        fail("synth --format mlx: bailingmoe3 preset '", s.preset, "' with ", s.n_layer, " layers makes layer ", l,
             s.is_mla_layer(l) ? " MLA" : " KDA", ", but mlx-lm's rule (MLA every ", s.mla_interval,
             "th layer and after the last whole group) makes it", mlx_mla ? " MLA" : " KDA",
             "; pick --layers as a multiple of ", s.mla_interval);
    }
    c["model_type"] = "bailing_hybrid";
    c["architectures"] = {"BailingMoeV3ForCausalLM"};
    common(c);
    c["layer_group_size"] = s.mla_interval;
    c["head_dim"] = s.kda_head_dim;
    c["short_conv_kernel_size"] = s.ssm_conv_kernel;
    c["kda_safe_gate"] = true;
    c["kda_lower_bound"] = s.kda_gate_lower_bound;
    c["no_kda_lora"] = true;
    mla(c);
    c["rope_theta"] = s.rope_base;
    c["rope_interleave"] = true;
    c["first_k_dense_replace"] = s.n_layer_dense_lead;
    c["intermediate_size"] = s.n_ff;
    c["num_experts"] = s.n_expert;
    c["num_experts_per_tok"] = s.n_expert_used;
    c["n_group"] = s.n_group;
    c["topk_group"] = s.n_group_used;
    c["moe_intermediate_size"] = s.n_ff_exp;
    c["num_shared_experts"] = s.n_expert_shared;
    c["moe_shared_expert_intermediate_size"] = s.n_ff_shexp / std::max<int64_t>(1, s.n_expert_shared);
    c["routed_scaling_factor"] = s.expert_weights_scale;
    c["norm_topk_prob"] = true;
    c["score_function"] = "sigmoid";
    c["gated_attention_proj_granularity_type"] = "head_wise";
  } else {
    fail("synth --format mlx: ", s.arch, " has no folder form in Sluice's loader yet (write it as GGUF)");
  }
  c["torch_dtype"] = float_type == StDtype::F32 ? "float32" : float_type == StDtype::F16 ? "float16" : "bfloat16";
  if (bits > 0) {
    // As mlx_lm.convert writes it: the defaults, and the modules quantized otherwise by path.
    json q = {{"group_size", group}, {"bits", bits}, {"mode", "affine"}};
    for (const HfTensor& t : tensors)
      if (t.bits > 0 && t.bits != bits)
        q[t.name.substr(0, t.name.size() - 7)] = {{"group_size", group}, {"bits", t.bits}};
    c["quantization"] = q;
    c["quantization_config"] = q;
  }
  return c;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f.flush()) fail(p.string(), ": cannot write");
}

}  // namespace

SynthResult synth_write_mlx(const SynthOptions& opt, const std::string& dir) {
  const auto t0 = Clock::now();
  const int bits = type_bits(opt.type);
  if (opt.group_size != 32 && opt.group_size != 64 && opt.group_size != 128)
    fail("synth --format mlx: group size ", opt.group_size, " is not one MLX writes (32, 64, 128)");
  if (opt.fast) fail("synth --format mlx: --fast is for GGUF files (a folder is written at generation speed)");
  const fs::path tok_dir(opt.tokenizer);
  if (opt.tokenizer.empty() || !fs::is_directory(tok_dir) ||
      !(fs::exists(tok_dir / "tokenizer.json") || fs::exists(tok_dir / "tiktoken.model")))
    fail("synth --format mlx: --tokenizer '", opt.tokenizer,
         "' is not a folder with tokenizer.json (a Hugging Face / MLX model folder's tokenizer files)");
  const fs::path out(dir);
  std::error_code ec;
  if (fs::exists(out / "config.json") && fs::equivalent(out, tok_dir, ec))
    fail("synth --format mlx: the output folder '", dir, "' is the tokenizer's folder; writing would overwrite it");
  const int64_t tok_vocab = static_cast<int64_t>(
      open_folder_tokenizer(opt.tokenizer)->get_string_array("tokenizer.ggml.tokens").size());

  SynthResult res;
  res.shape = synth_resolve_shape(opt, tok_vocab);
  const SynthShape& s = res.shape;
  const std::vector<TensorPlan> plan = synth_plan::plan_tensors(s, "f32", opt.routing_locality, tok_vocab);
  const StDtype float_type = opt.type == "f32" ? StDtype::F32 : opt.type == "f16" ? StDtype::F16 : StDtype::BF16;
  const std::vector<HfTensor> tensors = folder_tensors(s, plan, bits, opt.group_size, float_type);
  const json config = config_json(s, bits, opt.group_size, tensors, float_type);

  fs::create_directories(out, ec);
  if (ec) fail("synth --format mlx: cannot create folder '", dir, "': ", ec.message());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                        "tiktoken.model", "tokenizer.model"})
    if (fs::exists(tok_dir / f)) fs::copy_file(tok_dir / f, out / f, fs::copy_options::overwrite_existing);
  write_text(out / "config.json", config.dump(2) + "\n");

  SafetensorsWriter w;
  uint64_t total = 0;
  for (const HfTensor& t : tensors) {
    if (t.bits > 0) {
      std::vector<int64_t> codes = t.shape, groups = t.shape;
      codes.back() = t.cols * t.bits / 32;
      groups.back() = t.cols / opt.group_size;
      w.add(t.name, StDtype::U32, codes);
      w.add(t.name.substr(0, t.name.size() - 7) + ".scales", StDtype::BF16, groups);
      w.add(t.name.substr(0, t.name.size() - 7) + ".biases", StDtype::BF16, groups);
      total += static_cast<uint64_t>(t.rows) * static_cast<uint64_t>(t.cols * t.bits / 8 + 4 * t.cols / opt.group_size);
      ++res.type_counts["mlx" + std::to_string(t.bits)];
    } else {
      w.add(t.name, t.float_type, t.shape);
      total += static_cast<uint64_t>(t.rows * t.cols) * st_dtype_size(t.float_type);
      ++res.type_counts[std::string(st_dtype_name(t.float_type))];
    }
    res.n_params += t.rows * t.cols;
  }
  res.n_tensors = static_cast<int>(tensors.size());
  res.data_bytes = total;
  w.begin((out / "model.safetensors").string(), {{"format", "mlx"}});

  ThreadPool pool(opt.threads);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  std::vector<uint8_t> data, sc, bi;
  uint64_t done = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfTensor& t = tensors[i];
    const MlxAffineFormat f{t.bits, opt.group_size, DType::BF16};
    const size_t row_bytes = t.bits > 0 ? static_cast<size_t>(t.cols * t.bits / 8)
                                        : static_cast<size_t>(t.cols) * st_dtype_size(t.float_type);
    const size_t group_bytes = t.bits > 0 ? static_cast<size_t>(t.cols / opt.group_size) * 2 : 0;
    data.resize(row_bytes * static_cast<size_t>(t.rows));
    sc.resize(group_bytes * static_cast<size_t>(t.rows));
    bi.resize(sc.size());
    std::vector<uint64_t> keys;
    for (const TensorPlan* p : t.src) keys.push_back(synth_plan::tensor_key(opt.seed, p->name));
    pool.parallel_for(t.rows, [&](int64_t r0, int64_t r1, int th) {
      auto& buf = scratch[static_cast<size_t>(th)];
      buf.resize(static_cast<size_t>(3 * t.cols));
      float *x = buf.data(), *src = x + t.cols, *tmp = src + t.cols;
      for (int64_t r = r0; r < r1; ++r) {
        const auto [si, sr] = t.row_src.empty() ? std::pair<int, int64_t>{0, r} : t.row_src[static_cast<size_t>(r)];
        synth_plan::fill_rows(*t.src[static_cast<size_t>(si)], keys[static_cast<size_t>(si)], sr, sr + 1, tmp,
                              reinterpret_cast<uint8_t*>(src), static_cast<size_t>(t.cols) * 4);
        for (int64_t c = 0; c < t.cols; ++c) {
          float v = src[t.col_src.empty() ? c : t.col_src[static_cast<size_t>(c)]];
          if (t.value == Value::log_neg) v = std::log(-v);
          if (t.value == Value::log) v = std::log(v);
          x[c] = v;
        }
        uint8_t* dst = data.data() + static_cast<size_t>(r) * row_bytes;
        if (t.bits > 0) {
          mlx_affine_quantize_row(f, x, t.cols, reinterpret_cast<uint32_t*>(dst), sc.data() + r * group_bytes,
                                  bi.data() + r * group_bytes);
        } else if (t.float_type == StDtype::F32) {
          std::memcpy(dst, x, row_bytes);
        } else {
          for (int64_t c = 0; c < t.cols; ++c) {
            const uint16_t v = t.float_type == StDtype::F16 ? fp32_to_fp16(x[c]) : fp32_to_bf16(x[c]);
            std::memcpy(dst + 2 * c, &v, 2);
          }
        }
      }
    });
    w.write(data.data(), data.size());
    if (t.bits > 0) {
      w.write(sc.data(), sc.size());
      w.write(bi.data(), bi.size());
    }
    done += data.size() + sc.size() + bi.size();
    if (opt.progress) {
      SynthProgress p;
      p.tensor = static_cast<int>(i) + 1;
      p.n_tensors = res.n_tensors;
      p.name = t.name;
      p.bytes_done = done;
      p.bytes_total = total;
      p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      p.done = i + 1 == tensors.size();
      opt.progress(p);
    }
  }
  w.finish();
  for (const auto& e : fs::directory_iterator(out)) res.file_bytes += e.is_regular_file() ? e.file_size() : 0;
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

}  // namespace sluice
