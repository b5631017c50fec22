// format/hf_names: Hugging Face / MLX tensor names as llama.cpp's GGUF names, per architecture.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/hf_common.h"
#include "format/hf_folder.h"

namespace sluice {
namespace hf {

std::string strip_prefix(std::string n) {
  for (const char* prefix : {"language_model.model.", "model.language_model.", "language_model."})
    if (n.rfind(prefix, 0) == 0) n = "model." + n.substr(std::string(prefix).size());
  return n;
}

std::optional<std::pair<std::string, std::string>> split_layer(const std::string& n) {
  const std::string layers = "model.layers.";
  const size_t dot = n.find('.', layers.size());
  if (n.rfind(layers, 0) != 0 || dot == std::string::npos || dot == layers.size() ||
      n.find_first_not_of("0123456789", layers.size()) != dot)
    return std::nullopt;
  return std::make_pair(n.substr(layers.size(), dot - layers.size()), n.substr(dot + 1));
}

std::optional<ExpertSlice> per_expert(const std::string& hf_name) {
  const auto lr = split_layer(strip_prefix(hf_name));
  // Qwen's mlp.experts.E.{gate,up,down}_proj, Mixtral's block_sparse_moe.experts.E.w{1,3,2}.
  const std::string experts = lr && lr->second.rfind("block_sparse_moe.experts.", 0) == 0 ? "block_sparse_moe.experts."
                                                                                          : "mlp.experts.";
  if (!lr || lr->second.rfind(experts, 0) != 0) return std::nullopt;
  const std::string& rest = lr->second;
  const size_t dot = rest.find('.', experts.size());
  if (dot == std::string::npos || dot == experts.size() || dot - experts.size() > 6 ||
      rest.find_first_not_of("0123456789", experts.size()) != dot)
    return std::nullopt;
  static const std::map<std::string, std::string> projs = {
      {"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
      {"down_proj.weight", "ffn_down_exps.weight"}, {"w1.weight", "ffn_gate_exps.weight"},
      {"w3.weight", "ffn_up_exps.weight"},          {"w2.weight", "ffn_down_exps.weight"},
  };
  const auto it = projs.find(rest.substr(dot + 1));
  if (it == projs.end()) return std::nullopt;
  return ExpertSlice{"blk." + lr->first + "." + it->second,
                     std::stoll(rest.substr(experts.size(), dot - experts.size()))};
}

std::string gguf_name(const std::string& hf_name, const fs::path& file, const std::string& arch,
                      const std::vector<bool>& mla_layer, int64_t n_layer) {
  const std::string n = strip_prefix(hf_name);
  if (n == "model.embed_tokens.weight" || n == "model.word_embeddings.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight" || n == "model.lm_head.weight")
    return "output.weight";                                           // the latter: language_model.lm_head
  if (n.find("rotary_emb.inv_freq") != std::string::npos) return "";  // recomputed from rope_theta
  // Multi-token-prediction heads (Qwen3.5 checkpoints carry them; mlx-lm drops them too).
  if (n.rfind("mtp.", 0) == 0 || n.rfind("model.mtp.", 0) == 0) return "";
  const auto lr = split_layer(n);
  if (!lr) fail(file.string(), ": tensor '", n, "' is not one this architecture has");
  const auto& [index, rest] = *lr;
  if (arch == "qwen35moe" || arch == "qwen3next") {
    // The Gated DeltaNet layers, the norm after attention and the shared expert of Qwen3.5-MoE
    // and Qwen3-Next, under llama.cpp's names (A_log and conv1d are converted as they are read,
    // Qwen3-Next's fused in_proj_qkvz split: see there).
    static const std::map<std::string, std::string> q35 = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
        {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
        {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
        {"linear_attn.dt_bias", "ssm_dt.bias"},
        {"linear_attn.A_log", "ssm_a"},
        {"linear_attn.norm.weight", "ssm_norm.weight"},
        {"linear_attn.out_proj.weight", "ssm_out.weight"},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
        // Qwen3-Next: per key-head group [q | k | v | z] rows, split at load into attn_qkv and
        // attn_gate; and [beta | alpha], which the qwen3next graph reads fused as it is.
        {"linear_attn.in_proj_qkvz.weight", "attn_qkvz.weight"},
        {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},
    };
    if (const auto it = q35.find(rest); it != q35.end()) return "blk." + index + "." + it->second;
    // Qwen3.5-MoE as transformers writes it: the experts stacked, gate and up fused
    // ([E, 2·n_ff_exp, n_embd], gate rows first: split at load) and down ([E, n_embd, n_ff_exp]).
    if (arch == "qwen35moe" && rest == "mlp.experts.gate_up_proj") return "blk." + index + ".ffn_gate_up_exps.weight";
    if (arch == "qwen35moe" && rest == "mlp.experts.down_proj") return "blk." + index + ".ffn_down_exps.weight";
  }
  if (arch == "kimi-linear" || arch == "bailingmoe3" || arch == "deepseek2") {
    // The KDA + MLA hybrids as mlx-lm saves them, Kimi Linear's attention under self_attn.,
    // Ling 3's under attention.: the KDA layers' convs, gates, decay and output norm; the MLA
    // layers' absorbed per-head matrices (MultiLinear embed_q / unembed_out, what llama.cpp's
    // converters split kv_b_proj into); the router's selection bias; shared experts. Ling 3's
    // g_proj is the KDA output gate or, in an MLA layer, the head-wise gate.
    if (arch != "kimi-linear" && n_layer > 0 && std::stoull(index) >= static_cast<uint64_t>(n_layer))
      return "";  // multi-token-prediction layers past num_hidden_layers (mlx-lm drops them too)
    const std::string attn = arch == "bailingmoe3" ? "attention." : "self_attn.";
    static const std::map<std::string, std::string> hybrid = {
        {"q_proj.weight", "attn_q.weight"},
        {"k_proj.weight", "attn_k.weight"},
        {"v_proj.weight", "attn_v.weight"},
        {"q_a_proj.weight", "attn_q_a.weight"},
        {"q_a_layernorm.weight", "attn_q_a_norm.weight"},
        {"q_b_proj.weight", "attn_q_b.weight"},
        {"kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
        {"kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
        {"embed_q.weight", "attn_k_b.weight"},
        {"unembed_out.weight", "attn_v_b.weight"},
        {"kv_b_proj.weight", "attn_kv_b.weight"},  // transformers' form: split at load
        {"o_proj.weight", "attn_output.weight"},
        {"dense.weight", "attn_output.weight"},
        {"q_conv.conv.weight", "ssm_conv1d_q.weight"},  // Kimi
        {"k_conv.conv.weight", "ssm_conv1d_k.weight"},
        {"v_conv.conv.weight", "ssm_conv1d_v.weight"},
        {"q_conv1d.weight", "ssm_conv1d_q.weight"},  // Ling 3, and Kimi's transformers checkpoints
        {"k_conv1d.weight", "ssm_conv1d_k.weight"},
        {"v_conv1d.weight", "ssm_conv1d_v.weight"},
        {"f_a_proj.weight", "ssm_f_a.weight"},  // Kimi's low-rank gates
        {"f_b_proj.weight", "ssm_f_b.weight"},
        {"g_a_proj.weight", "ssm_g_a.weight"},
        {"g_b_proj.weight", "ssm_g_b.weight"},
        {"f_proj.weight", "ssm_f_a.weight"},  // Ling 3's full-rank decay gate input
        {"b_proj.weight", "ssm_beta.weight"},
        {"A_log", "ssm_a"},
        {"dt_bias", "ssm_dt.bias"},
        {"o_norm.weight", "ssm_norm.weight"},
    };
    if (rest.rfind(attn, 0) == 0) {
      const std::string leaf = rest.substr(attn.size());
      if (arch == "bailingmoe3" && leaf == "g_proj.weight") {
        const size_t l = std::stoull(index);
        return "blk." + index + (l < mla_layer.size() && mla_layer[l] ? ".attn_gate.weight" : ".ssm_g_a.weight");
      }
      if (const auto it = hybrid.find(leaf); it != hybrid.end()) return "blk." + index + "." + it->second;
    }
    static const std::map<std::string, std::string> mlp = {
        {"mlp.e_score_correction_bias", "exp_probs_b.bias"},  // Kimi
        // Kimi's transformers checkpoints: the MoE layers under block_sparse_moe (the router is
        // in the table below; the experts, one by one as w1 / w3 / w2, are per_expert's).
        {"block_sparse_moe.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"block_sparse_moe.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"block_sparse_moe.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"block_sparse_moe.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.gate.expert_bias", "exp_probs_b.bias"},              // Ling 3
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},  // DeepSeek-V3
        {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    };
    if (const auto it = mlp.find(rest); it != mlp.end()) return "blk." + index + "." + it->second;
  }
  static const std::map<std::string, std::string> names = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      // Mixture-of-experts layers (qwen3_moe): the router, and MLX's stacked experts [E, out, in].
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.switch_mlp.gate_proj.weight", "ffn_gate_exps.weight"},
      {"mlp.switch_mlp.up_proj.weight", "ffn_up_exps.weight"},
      {"mlp.switch_mlp.down_proj.weight", "ffn_down_exps.weight"},
      // Mixtral's block_sparse_moe (mlx-lm stacks its experts as switch_mlp too).
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.switch_mlp.gate_proj.weight", "ffn_gate_exps.weight"},
      {"block_sparse_moe.switch_mlp.up_proj.weight", "ffn_up_exps.weight"},
      {"block_sparse_moe.switch_mlp.down_proj.weight", "ffn_down_exps.weight"},
  };
  auto it = names.find(rest);
  if (it == names.end()) fail(file.string(), ": tensor '", n, "' is not one this architecture has");
  return "blk." + index + "." + it->second;
}

}  // namespace hf


std::string hf_tensor_gguf_name(const std::string& hf_name, const std::string& file, const GgufFile& base) {
  // The KDA + MLA hybrids' layer kinds, as the folder reader (or llama.cpp's converter) wrote
  // them: head_count_kv per layer, 1 for MLA.
  const std::string arch = base.get_string_or("general.architecture", "");
  std::vector<bool> mla_layer;
  const int64_t n_layer = base.get_u32_or(arch + ".block_count", 0);
  if (arch == "kimi-linear" || arch == "bailingmoe3")
    for (uint32_t v : base.get_u32_per_layer(arch + ".attention.head_count_kv", base.get_u32(arch + ".block_count")))
      mla_layer.push_back(v != 0);
  return hf::gguf_name(hf_name, file, arch, mla_layer, n_layer);
}

}  // namespace sluice
