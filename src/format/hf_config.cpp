// format/hf_config: a folder's config.json as the GGUF metadata llama.cpp's converter would
// write, per architecture, and the input widths of its quantizable matrices.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "format/hf_common.h"

namespace sluice::hf {
namespace {

constexpr uint64_t k2p32 = uint64_t{1} << 32;

// The keys every architecture writes the same way.
struct Common {
  std::string a;  // "<arch>."
  uint64_t n_embd = 0, n_layer = 0, n_head = 0;
};

Common common_keys(const fs::path& dir, const json& c, const std::string& arch, const char* ctx_key, Kv& kv) {
  const fs::path cfg_path = dir / "config.json";
  Common k;
  k.a = arch + ".";
  k.n_embd = positive(c, "hidden_size", cfg_path);
  k.n_head = positive(c, "num_attention_heads", cfg_path);
  k.n_layer = positive(c, "num_hidden_layers", cfg_path);
  if (k.n_embd > k2p32 || k.n_layer > 4096) fail(cfg_path.string(), ": hidden_size past 2^32 or more than 4096 layers");
  kv.emplace_back("general.architecture", str(arch));
  kv.emplace_back("general.name", str(dir.filename().string()));
  kv.emplace_back(k.a + "context_length", u32(positive(c, ctx_key, cfg_path)));
  kv.emplace_back(k.a + "embedding_length", u32(k.n_embd));
  kv.emplace_back(k.a + "block_count", u32(k.n_layer));
  kv.emplace_back(k.a + "attention.layer_norm_rms_epsilon", f32(c.value("rms_norm_eps", 1e-6)));
  return k;
}

// llama, mistral, mixtral, qwen3, qwen3_moe, and the Gated DeltaNet hybrids qwen3_5_moe and
// config.json's rope_scaling as llama.cpp's convert writes it (models/model.cpp derives the
// angles and scales): linear {factor}, or YaRN {factor, original_max_position_embeddings,
// mscale_all_dim -> yarn_log_multiplier·0.1} with beta_fast 32 and beta_slow 1 (what llama.cpp
// uses). mscale must be 1, or equal to mscale_all_dim where mscale_is_all_dim_ok (DeepSeek-V2's
// configs; llama.cpp's special case for deepseek2). Other types are refused by name.
void rope_scaling_keys(const json& r, const fs::path& cfg_path, const std::string& a, bool mscale_is_all_dim_ok,
                       Kv& kv) {
  if (r.is_null()) return;
  const std::string where = "rope_scaling " + r.dump();
  if (!r.is_object()) fail(cfg_path.string(), ": ", where, " is not an object");
  const std::string type = r.value("type", r.value("rope_type", std::string("default")));
  const auto number = [&](const char* key, double def) {
    if (!r.contains(key)) return def;
    if (!r[key].is_number()) fail(cfg_path.string(), ": ", where, ": '", key, "' is not a number");
    return r[key].get<double>();
  };
  if (type == "default") return;
  if (type != "linear" && type != "yarn" && type != "deepseek_yarn")
    fail(cfg_path.string(), ": ", where, " is not supported (types linear and yarn)");
  const double factor = number("factor", 0.0);
  if (!(factor >= 1.0) || !std::isfinite(factor)) fail(cfg_path.string(), ": ", where, ": 'factor' must be >= 1");
  kv.emplace_back(a + "rope.scaling.type", str(type == "linear" ? "linear" : "yarn"));
  kv.emplace_back(a + "rope.scaling.factor", f32(factor));
  if (type == "linear") return;
  if (number("beta_fast", 32.0) != 32.0 || number("beta_slow", 1.0) != 1.0 || r.contains("attention_factor"))
    fail(cfg_path.string(), ": ", where, " is not supported (beta_fast 32, beta_slow 1, no attention_factor)");
  const double orig = number("original_max_position_embeddings", 0.0);
  if (!(orig >= 1.0) || orig > 4294967295.0)
    fail(cfg_path.string(), ": ", where, ": 'original_max_position_embeddings' is missing or out of range");
  kv.emplace_back(a + "rope.scaling.original_context_length", u32(static_cast<uint64_t>(orig)));
  const double all_dim = number("mscale_all_dim", 0.0), mscale = number("mscale", 1.0);
  if (mscale != 1.0 && !(mscale_is_all_dim_ok && mscale == all_dim))
    fail(cfg_path.string(), ": ", where, ": mscale ", mscale, " is not supported (1",
         mscale_is_all_dim_ok ? ", or mscale_all_dim's value)" : ")");
  if (all_dim != 0.0) kv.emplace_back(a + "rope.scaling.yarn_log_multiplier", f32(0.1 * all_dim));
}

// qwen3_next.
void llama_like(const fs::path& dir, const json& c, FolderConfig& fc) {
  const fs::path cfg_path = dir / "config.json";
  const std::string& arch = fc.arch;
  // HF keeps Llama's (and Mistral's, Mixtral's) Q/K in the rotate-half layout; mlx-lm's
  // rope_traditional says otherwise.
  const bool neox = arch == "llama" && !(c.contains("rope_traditional") && c["rope_traditional"] == true);
  const bool mixtral = c.value("model_type", std::string()) == "mixtral";
  const bool hybrid = fc.hybrid;
  // Qwen3.5 keeps its RoPE settings in rope_parameters (rope_scaling may repeat them): type
  // "default" with M-RoPE sections, which text positions make one plain rotation.
  json rope = arch == "qwen35moe" ? c.value("rope_parameters", json()) : json();
  if (arch == "qwen35moe") {
    if (rope.is_null()) rope = c.value("rope_scaling", json());
    const std::string type = rope.is_object() ? rope.value("type", rope.value("rope_type", "default")) : "default";
    if (!rope.is_null() && (!rope.is_object() || type != "default"))
      fail(cfg_path.string(), ": rope_parameters ", rope.dump(), " is not supported yet (type \"default\" only)");
  }
  auto rope_value = [&](const char* key, double def) {
    if (rope.is_object() && rope.contains(key) && rope[key].is_number()) return rope[key].get<double>();
    return c.contains(key) && c[key].is_number() ? c[key].get<double>() : def;
  };

  Kv& kv = fc.kv;
  const Common k = common_keys(dir, c, arch, "max_position_embeddings", kv);
  const std::string& a = k.a;
  if (arch != "qwen35moe") rope_scaling_keys(c.value("rope_scaling", json()), cfg_path, a, false, kv);
  const uint64_t n_embd = k.n_embd, n_head = k.n_head;
  const uint64_t head_dim = c.contains("head_dim") ? positive(c, "head_dim", cfg_path) : n_embd / n_head;
  // Qwen3.5-MoE has no dense FFN: its config may leave intermediate_size out.
  const std::string ff_key = arch == "qwen35moe" && !c.contains("intermediate_size") ? "moe_intermediate_size"
                                                                                     : "intermediate_size";
  const int64_t n_ff = static_cast<int64_t>(positive(c, ff_key, cfg_path));
  kv.emplace_back(a + "feed_forward_length", u32(static_cast<uint64_t>(n_ff)));
  kv.emplace_back(a + "attention.head_count", u32(n_head));
  kv.emplace_back(a + "attention.head_count_kv",
                  u32(c.contains("num_key_value_heads") ? positive(c, "num_key_value_heads", cfg_path) : n_head));
  kv.emplace_back(a + "attention.key_length", u32(head_dim));
  kv.emplace_back(a + "attention.value_length", u32(head_dim));
  kv.emplace_back(a + "rope.freq_base", f32(rope_value("rope_theta", 10000.0)));
  const double partial = rope_value("partial_rotary_factor", 1.0);
  const uint64_t n_rot = static_cast<uint64_t>(static_cast<double>(head_dim) * partial);
  if (!(partial > 0 && partial <= 1) || n_rot == 0 || n_rot % 2)
    fail(cfg_path.string(), ": partial_rotary_factor ", partial, " gives ", n_rot, " rotated dims of ", head_dim,
         " (want an even number > 0)");
  kv.emplace_back(a + "rope.dimension_count", u32(n_rot));
  if (neox) kv.emplace_back("sluice.rope_neox", boolean(true));
  int64_t n_ff_exp = 0, n_ff_shexp = 0, ssm_value = 0;
  if (arch == "qwen35moe") {
    // M-RoPE sections (4 as llama.cpp writes them; with text positions every section turns by
    // the same position).
    std::vector<int32_t> sections;
    if (rope.is_object() && rope.contains("mrope_section") && rope["mrope_section"].is_array())
      for (const auto& v : rope["mrope_section"]) sections.push_back(v.is_number_integer() ? v.get<int32_t>() : -1);
    if (sections.empty()) sections = {static_cast<int32_t>(n_rot / 2)};
    int64_t sum = 0;
    for (int32_t v : sections) sum += v;
    if (sections.size() > 4 || sum != static_cast<int64_t>(n_rot / 2) ||
        std::any_of(sections.begin(), sections.end(), [](int32_t v) { return v < 0; }))
      fail(cfg_path.string(), ": mrope_section ", json(sections).dump(), " must be at most 4 sizes summing to ",
           n_rot / 2, " (the rotated dims / 2)");
    sections.resize(4, 0);
    kv.emplace_back(a + "rope.dimension_sections", i32_array(sections));
  }
  if (hybrid) {  // the Gated DeltaNet shapes and the shared expert
    const uint64_t hk = positive(c, "linear_num_key_heads", cfg_path);
    const uint64_t hv = positive(c, "linear_num_value_heads", cfg_path);
    const uint64_t dk = positive(c, "linear_key_head_dim", cfg_path);
    const uint64_t dv = positive(c, "linear_value_head_dim", cfg_path);
    if (hv % hk != 0)
      fail(cfg_path.string(), ": linear_num_value_heads ", hv, " is not a multiple of linear_num_key_heads ", hk);
    if (hv * dv > k2p32 || hk * dk > k2p32) fail(cfg_path.string(), ": linear attention heads x head dims past 2^32");
    fc.ssm_hk = static_cast<int64_t>(hk), fc.ssm_hv = static_cast<int64_t>(hv);
    fc.ssm_dk = static_cast<int64_t>(dk), fc.ssm_dv = static_cast<int64_t>(dv);
    ssm_value = static_cast<int64_t>(hv * dv);
    kv.emplace_back(a + "ssm.conv_kernel", u32(positive(c, "linear_conv_kernel_dim", cfg_path)));
    kv.emplace_back(a + "ssm.group_count", u32(hk));
    kv.emplace_back(a + "ssm.time_step_rank", u32(hv));
    kv.emplace_back(a + "ssm.state_size", u32(dk));
    kv.emplace_back(a + "ssm.inner_size", u32(hv * dv));
    kv.emplace_back(a + "full_attention_interval", u32(positive(c, "full_attention_interval", cfg_path)));
    // HF's value heads are in key-head groups (value head h reads key head h / (Hv/Hk), as
    // mlx-lm's repeat does); llama.cpp's converter reorders them to tile instead.
    kv.emplace_back("sluice.ssm_grouped_heads", boolean(true));
    n_ff_shexp = static_cast<int64_t>(positive(c, "shared_expert_intermediate_size", cfg_path));
    kv.emplace_back(a + "expert_shared_feed_forward_length", u32(static_cast<uint64_t>(n_ff_shexp)));
  }
  if (arch == "qwen3moe" || hybrid) {
    // Every layer sparse, top-k weights renormalized: what llama.cpp's qwen3moe graph runs.
    n_ff_exp = static_cast<int64_t>(positive(c, "moe_intermediate_size", cfg_path));
    const uint64_t n_expert = positive(c, "num_experts", cfg_path),
                   n_used = positive(c, "num_experts_per_tok", cfg_path);
    if (n_used > n_expert)
      fail(cfg_path.string(), ": num_experts_per_tok ", n_used, " is more than num_experts ", n_expert);
    if (c.value("decoder_sparse_step", 1) != 1 || !c.value("mlp_only_layers", json::array()).empty())
      fail(cfg_path.string(), ": decoder_sparse_step other than 1 or mlp_only_layers (dense layers among the MoE ",
           "layers) are not supported yet");
    if (!c.value("norm_topk_prob", false))
      fail(cfg_path.string(), ": norm_topk_prob false is not supported yet (Qwen3-MoE checkpoints set it true; ",
           "llama.cpp's qwen3moe always renormalizes)");
    kv.emplace_back(a + "expert_count", u32(n_expert));
    kv.emplace_back(a + "expert_used_count", u32(n_used));
    kv.emplace_back(a + "expert_feed_forward_length", u32(static_cast<uint64_t>(n_ff_exp)));
    fc.n_expert = static_cast<int64_t>(n_expert);
  }
  if (mixtral) {
    // Every layer sparse: the experts as wide as intermediate_size, the top-k router logits
    // softmaxed (llama.cpp's llama graph with experts: softmax, then the chosen renormalized).
    const uint64_t n_expert = positive(c, "num_local_experts", cfg_path),
                   n_used = positive(c, "num_experts_per_tok", cfg_path);
    if (n_used > n_expert)
      fail(cfg_path.string(), ": num_experts_per_tok ", n_used, " is more than num_local_experts ", n_expert);
    kv.emplace_back(a + "expert_count", u32(n_expert));
    kv.emplace_back(a + "expert_used_count", u32(n_used));
    fc.n_expert = static_cast<int64_t>(n_expert);
    n_ff_exp = n_ff;
  }
  if (n_head * head_dim > k2p32 || n_ff > int64_t{1} << 32 || n_ff_exp > int64_t{1} << 32 ||
      n_ff_shexp > int64_t{1} << 32)
    fail(cfg_path.string(), ": heads x head_dim, intermediate_size or an expert width past 2^32");
  fc.n_embd = static_cast<int64_t>(n_embd);
  fc.n_ff_exp = n_ff_exp;
  MatrixWidths& w = fc.widths;
  w.n_embd = fc.n_embd, w.n_q = static_cast<int64_t>(n_head * head_dim), w.n_ff = n_ff, w.n_ff_exp = n_ff_exp;
  w.n_ff_shexp = n_ff_shexp, w.ssm_value = ssm_value;
}

// A non-negative integer of config object c, else def where it is absent (or null).
uint64_t count_or(const json& c, const std::string& key, uint64_t def, const fs::path& file) {
  if (!c.contains(key) || c[key].is_null()) return def;
  if (!c[key].is_number_integer() || c[key].get<int64_t>() < 0)
    fail(file.string(), ": '", key, "' is not a non-negative integer");
  return c[key].get<uint64_t>();
}

// The KDA + MLA hybrids' attention: which layers are KDA, the KDA head dim and conv, and the
// absorbed MLA's widths, written as llama.cpp's kimi-linear and bailingmoe3 converters write
// them: head_count_kv a per-layer array (0 KDA, 1 MLA), one latent kv head of [kv_lora | rope]
// keys and kv_lora values.
struct KdaMla {
  std::vector<bool> kda;  // per layer
  uint64_t head_dim = 0, conv = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v_head = 0;
};

// The absorbed MLA's keys (deepseek2, and the KDA hybrids' MLA layers) and its matrices' widths.
void mla_keys(const fs::path& cfg_path, const Common& k, const KdaMla& s, FolderConfig& fc) {
  if (s.kv_lora == 0 || s.nope == 0 || s.rope == 0 || s.v_head == 0)
    fail(cfg_path.string(), ": kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be positive");
  if (s.kv_lora > 65536 || s.nope + s.rope > 65536 || s.v_head > 65536 || s.head_dim > 65536 || s.q_lora > 65536 ||
      k.n_head > 65536)
    fail(cfg_path.string(), ": an attention width past 65536");
  const std::string& a = k.a;
  Kv& kv = fc.kv;
  if (s.q_lora > 0) kv.emplace_back(a + "attention.q_lora_rank", u32(s.q_lora));
  kv.emplace_back(a + "attention.kv_lora_rank", u32(s.kv_lora));
  kv.emplace_back(a + "attention.key_length", u32(s.kv_lora + s.rope));
  kv.emplace_back(a + "attention.value_length", u32(s.kv_lora));
  kv.emplace_back(a + "attention.key_length_mla", u32(s.nope + s.rope));
  kv.emplace_back(a + "attention.value_length_mla", u32(s.v_head));
  kv.emplace_back(a + "rope.dimension_count", u32(s.rope));
  MatrixWidths& w = fc.widths;
  w.n_embd = static_cast<int64_t>(k.n_embd);
  w.n_q = static_cast<int64_t>(k.n_head * s.v_head);
  w.mla_nope = static_cast<int64_t>(s.nope), w.kv_lora = static_cast<int64_t>(s.kv_lora);
  w.q_lora = static_cast<int64_t>(s.q_lora);
  fc.mla_heads = static_cast<int64_t>(k.n_head), fc.mla_v = static_cast<int64_t>(s.v_head);
}

// MLA's widths as DeepSeek-V3 and Ling 3 configs name them (mlx-lm's defaults where absent; a
// null q_lora_rank: one q_proj).
void read_mla_dims(const json& c, const fs::path& cfg_path, uint64_t q_lora_default, KdaMla& s) {
  s.q_lora = c.contains("q_lora_rank") && c["q_lora_rank"].is_null()
                 ? 0
                 : count_or(c, "q_lora_rank", q_lora_default, cfg_path);
  s.kv_lora = count_or(c, "kv_lora_rank", 512, cfg_path);
  s.nope = count_or(c, "qk_nope_head_dim", 128, cfg_path);
  s.rope = count_or(c, "qk_rope_head_dim", 64, cfg_path);
  s.v_head = count_or(c, "v_head_dim", 128, cfg_path);
  if (s.rope % 2) fail(cfg_path.string(), ": qk_rope_head_dim ", s.rope, " is odd");
}

void kda_mla_keys(const fs::path& cfg_path, const Common& k, const KdaMla& s, FolderConfig& fc) {
  if (s.head_dim == 0) fail(cfg_path.string(), ": the KDA head_dim must be positive");
  if (s.conv < 1 || s.conv > 64) fail(cfg_path.string(), ": short_conv_kernel_size ", s.conv, " is not 1..64");
  mla_keys(cfg_path, k, s, fc);
  const std::string& a = k.a;
  auto arr = std::make_shared<GgufArray>();
  arr->elem_type = GgufType::UINT32;
  std::vector<int64_t> out_in(k.n_layer);  // attn_output's input: the KDA inner width or the MLA heads' values
  for (uint64_t l = 0; l < k.n_layer; ++l) {
    arr->items.push_back(u32(s.kda[l] ? 0 : 1));
    out_in[l] = static_cast<int64_t>(k.n_head * (s.kda[l] ? s.head_dim : s.v_head));
  }
  Kv& kv = fc.kv;
  kv.emplace_back(a + "attention.head_count", u32(k.n_head));
  kv.emplace_back(a + "attention.head_count_kv", GgufValue{GgufType::ARRAY, arr});
  kv.emplace_back(a + "ssm.conv_kernel", u32(s.conv));
  kv.emplace_back(a + "kda.head_dim", u32(s.head_dim));
  fc.widths.attn_out_in = std::move(out_in);
  fc.mla_layer.resize(k.n_layer);
  for (uint64_t l = 0; l < k.n_layer; ++l) fc.mla_layer[l] = !s.kda[l];
}

// Their MoE FFN: leading dense layers, then routed experts (in groups, with a selection bias)
// renormalized and scaled, plus shared experts of n_ff_shexp in all.
struct HybridMoe {
  uint64_t n_ff = 0, n_expert = 0, n_used = 0, n_ff_exp = 0, n_shared = 0, n_ff_shexp = 0, n_group = 1, group_used = 1,
           dense_lead = 0;
  double scale = 1.0;
  bool sigmoid = true, norm = true, write_shexp_width = false;
};

void hybrid_moe_keys(const fs::path& cfg_path, const Common& k, const HybridMoe& m, FolderConfig& fc) {
  if (m.n_used < 1 || m.n_used > m.n_expert)
    fail(cfg_path.string(), ": experts per token ", m.n_used, " is not 1..num_experts (", m.n_expert, ")");
  if (m.n_ff > k2p32 || m.n_ff_exp > k2p32 || m.n_ff_shexp > k2p32 || m.n_expert > 65536)
    fail(cfg_path.string(), ": intermediate_size, an expert width or num_experts too large");
  if (m.n_group < 1 || m.n_expert % m.n_group != 0 || m.group_used < 1 || m.group_used > m.n_group)
    fail(cfg_path.string(), ": expert groups ", m.n_group, " / used ", m.group_used, " do not split num_experts ",
         m.n_expert, " into groups");
  const std::string& a = k.a;
  Kv& kv = fc.kv;
  kv.emplace_back(a + "feed_forward_length", u32(m.n_ff));
  kv.emplace_back(a + "expert_count", u32(m.n_expert));
  kv.emplace_back(a + "expert_used_count", u32(m.n_used));
  kv.emplace_back(a + "expert_feed_forward_length", u32(m.n_ff_exp));
  kv.emplace_back(a + "expert_shared_count", u32(m.n_shared));
  if (m.write_shexp_width) kv.emplace_back(a + "expert_shared_feed_forward_length", u32(m.n_ff_shexp));
  kv.emplace_back(a + "leading_dense_block_count", u32(std::min(m.dense_lead, k.n_layer)));
  kv.emplace_back(a + "expert_weights_scale", f32(m.scale));
  kv.emplace_back(a + "expert_weights_norm", boolean(m.norm));
  kv.emplace_back(a + "expert_gating_func", u32(m.sigmoid ? 2 : 1));
  if (m.n_group > 1) {
    kv.emplace_back(a + "expert_group_count", u32(m.n_group));
    kv.emplace_back(a + "expert_group_used_count", u32(m.group_used));
  }
  fc.n_embd = static_cast<int64_t>(k.n_embd);
  fc.n_expert = static_cast<int64_t>(m.n_expert);
  fc.n_ff_exp = static_cast<int64_t>(m.n_ff_exp);
  MatrixWidths& w = fc.widths;
  w.n_ff = static_cast<int64_t>(m.n_ff), w.n_ff_exp = fc.n_ff_exp, w.n_ff_shexp = static_cast<int64_t>(m.n_ff_shexp);
}

// DeepSeek-V3 (model_type deepseek_v3; mlx-lm's deepseek_v3) as llama.cpp's deepseek2: MLA with
// NORM RoPE on the qk_rope dims (q_lora or one q_proj), leading dense layers, then sigmoid
// routing in groups with a selection bias (noaux_tc), renormalized where norm_topk_prob says,
// scaled, plus n_shared_experts shared experts.
void deepseek_v3(const fs::path& dir, const json& c, FolderConfig& fc) {
  const fs::path cfg_path = dir / "config.json";
  const Common k = common_keys(dir, c, fc.arch, "max_position_embeddings", fc.kv);
  const std::string& a = k.a;
  rope_scaling_keys(c.value("rope_scaling", json()), cfg_path, a, true, fc.kv);
  if (c.value("topk_method", std::string("noaux_tc")) != "noaux_tc")
    fail(cfg_path.string(), ": topk_method ", c["topk_method"].dump(), " is not supported (noaux_tc, as mlx-lm)");
  if (count_or(c, "moe_layer_freq", 1, cfg_path) != 1)
    fail(cfg_path.string(), ": moe_layer_freq other than 1 is not supported");
  if (c.value("attention_bias", false)) fail(cfg_path.string(), ": attention_bias true is not supported");
  KdaMla s;
  read_mla_dims(c, cfg_path, 1536, s);
  fc.kv.emplace_back(a + "attention.head_count", u32(k.n_head));
  fc.kv.emplace_back(a + "attention.head_count_kv", u32(1));  // one latent head
  mla_keys(cfg_path, k, s, fc);
  fc.kv.emplace_back(a + "rope.freq_base", f32(c.value("rope_theta", 10000.0)));

  HybridMoe m;
  m.n_ff = count_or(c, "intermediate_size", 11008, cfg_path);
  m.n_expert = positive(c, "n_routed_experts", cfg_path);
  m.n_ff_exp = count_or(c, "moe_intermediate_size", 1407, cfg_path);
  m.n_used = count_or(c, "num_experts_per_tok", 1, cfg_path);
  m.n_shared = count_or(c, "n_shared_experts", 0, cfg_path);
  if (m.n_shared > 64) fail(cfg_path.string(), ": n_shared_experts ", m.n_shared, " is more than 64");
  m.n_ff_shexp = m.n_ff_exp * m.n_shared;
  m.n_group = count_or(c, "n_group", 1, cfg_path);
  m.group_used = count_or(c, "topk_group", 1, cfg_path);
  m.dense_lead = count_or(c, "first_k_dense_replace", 0, cfg_path);
  m.scale = c.value("routed_scaling_factor", 1.0);
  m.norm = c.value("norm_topk_prob", true);
  if (m.n_ff == 0 || m.n_ff_exp == 0)
    fail(cfg_path.string(), ": intermediate_size and moe_intermediate_size must be positive");
  hybrid_moe_keys(cfg_path, k, m, fc);
}

// Kimi Linear (model_type kimi_linear): KDA layers (linear_attn_config.kda_layers, 1-based)
// with low-rank gates, MLA layers without RoPE (no q_lora), as llama.cpp's kimi-linear
// converter writes them; sigmoid (or softmax) routing with a selection bias.
void kimi_linear(const fs::path& dir, const json& c, FolderConfig& fc) {
  const fs::path cfg_path = dir / "config.json";
  const char* ctx = c.contains("model_max_length") ? "model_max_length" : "max_position_embeddings";
  const Common k = common_keys(dir, c, fc.arch, ctx, fc.kv);
  if (!c.contains("linear_attn_config") || !c["linear_attn_config"].is_object())
    fail(cfg_path.string(), ": 'linear_attn_config' missing or not an object");
  const json& lin = c["linear_attn_config"];
  const std::string lc = "linear_attn_config.";
  KdaMla s;
  const uint64_t kda_heads = positive(lin, "num_heads", cfg_path);
  s.head_dim = positive(lin, "head_dim", cfg_path);
  s.conv = count_or(lin, "short_conv_kernel_size", 4, cfg_path);
  if (kda_heads != k.n_head)
    fail(cfg_path.string(), ": ", lc, "num_heads ", kda_heads, " differs from num_attention_heads ", k.n_head,
         " (llama.cpp's kimi-linear takes one head count for both layer kinds)");
  if (!lin.contains("kda_layers") || !lin["kda_layers"].is_array())
    fail(cfg_path.string(), ": ", lc, "kda_layers missing or not an array");
  s.kda.assign(k.n_layer, false);
  for (const json& v : lin["kda_layers"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<uint64_t>() > k.n_layer)
      fail(cfg_path.string(), ": ", lc, "kda_layers holds ", v.dump(), " (want layer numbers 1..", k.n_layer, ")");
    s.kda[v.get<uint64_t>() - 1] = true;
  }
  if (c.contains("q_lora_rank") && !c["q_lora_rank"].is_null())
    fail(cfg_path.string(), ": q_lora_rank is set: Kimi Linear's MLA has one q_proj (mlx-lm reads no q_lora)");
  const uint64_t head_dim = positive(c, "head_dim", cfg_path);
  s.kv_lora = positive(c, "kv_lora_rank", cfg_path);
  s.nope = count_or(c, "qk_nope_head_dim", head_dim, cfg_path);
  s.rope = count_or(c, "qk_rope_head_dim", 0, cfg_path);
  s.v_head = count_or(c, "v_head_dim", head_dim, cfg_path);
  kda_mla_keys(cfg_path, k, s, fc);
  fc.widths.low_rank = static_cast<int64_t>(s.head_dim);  // the gates' f_a/g_a -> f_b/g_b rank

  HybridMoe m;
  m.n_ff = positive(c, "intermediate_size", cfg_path);
  m.n_expert = positive(c, "num_experts", cfg_path);
  m.n_ff_exp = positive(c, "moe_intermediate_size", cfg_path);
  m.n_used = count_or(c, "num_experts_per_token", 1, cfg_path);
  m.n_shared = count_or(c, "num_shared_experts", 0, cfg_path);
  m.n_ff_shexp = m.n_ff_exp * m.n_shared;
  m.n_group = count_or(c, "num_expert_group", 1, cfg_path);
  m.group_used = count_or(c, "topk_group", 1, cfg_path);
  m.dense_lead = count_or(c, "first_k_dense_replace", 0, cfg_path);
  m.scale = c.value("routed_scaling_factor", 1.0);
  if (m.n_shared > 64) fail(cfg_path.string(), ": num_shared_experts ", m.n_shared, " is more than 64");
  if (count_or(c, "moe_layer_freq", 1, cfg_path) != 1)
    fail(cfg_path.string(), ": moe_layer_freq other than 1 is not supported (llama.cpp's kimi-linear: every layer ",
         "after the leading dense ones is sparse)");
  if (!c.value("moe_renormalize", true) && m.n_used > 1)
    fail(cfg_path.string(), ": moe_renormalize false is not supported (llama.cpp's kimi-linear renormalizes)");
  const std::string act = c.value("moe_router_activation_func", std::string("sigmoid"));
  if (act != "sigmoid" && act != "softmax")
    fail(cfg_path.string(), ": moe_router_activation_func '", act, "' is not sigmoid or softmax");
  m.sigmoid = act == "sigmoid";
  hybrid_moe_keys(cfg_path, k, m, fc);
}

// Ling 3 (model_type bailing_hybrid with BailingMoeV3ForCausalLM; mlx-lm's bailing_moe_v3):
// KDA layers with the safe gate and full-rank gates, MLA layers (q_lora, NORM RoPE on the
// last qk_rope dims, a head-wise output gate) every layer_group_size-th layer and after the
// last whole group; sigmoid routing in groups with a selection bias, always renormalized;
// shared experts of moe_shared_expert_intermediate_size each. No SwiGLU clamps: mlx-lm has none.
void bailing_moe_v3(const fs::path& dir, const json& c, FolderConfig& fc) {
  const fs::path cfg_path = dir / "config.json";
  const Common k = common_keys(dir, c, fc.arch, "max_position_embeddings", fc.kv);
  const std::string& a = k.a;
  for (const char* key : {"kda_safe_gate", "no_kda_lora", "rope_interleave"})
    if (c.contains(key) && !(c[key].is_boolean() && c[key].get<bool>()))
      fail(cfg_path.string(), ": ", key, " ", c[key].dump(), " is not supported (Ling 3 and mlx-lm: true)");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    fail(cfg_path.string(), ": rope_scaling ", c["rope_scaling"].dump(), " is not supported yet");
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
      c["rope_parameters"].value("rope_type", std::string("default")) != "default")
    fail(cfg_path.string(), ": rope_parameters ", c["rope_parameters"].dump(), " is not supported yet");
  if (c.value("gated_attention_proj_granularity_type", std::string("head_wise")) != "head_wise")
    fail(cfg_path.string(), ": gated_attention_proj_granularity_type ",
         c["gated_attention_proj_granularity_type"].dump(), " is not supported (head_wise only)");
  for (const char* key : {"expert_swiglu_limit_list", "share_expert_swiglu_limit_list"})
    if (c.contains(key) && !c[key].is_null())
      fail(cfg_path.string(), ": ", key, " is set: SwiGLU clamps in a folder are not supported yet (mlx-lm ignores ",
           "them; a GGUF from llama.cpp's converter keeps them)");
  const std::string score = c.value("score_function", std::string("sigmoid"));
  if (score != "sigmoid") fail(cfg_path.string(), ": score_function '", score, "' is not sigmoid");
  KdaMla s;
  const uint64_t group = count_or(c, "layer_group_size", 4, cfg_path);
  if (group < 1) fail(cfg_path.string(), ": layer_group_size 0");
  s.kda.assign(k.n_layer, false);
  for (uint64_t l = 0; l < k.n_layer; ++l) s.kda[l] = (l + 1) % group != 0 && l < k.n_layer / group * group;
  s.head_dim = count_or(c, "head_dim", 128, cfg_path);
  s.conv = count_or(c, "short_conv_kernel_size", 4, cfg_path);
  read_mla_dims(c, cfg_path, 256, s);
  kda_mla_keys(cfg_path, k, s, fc);
  fc.kv.emplace_back(a + "rope.freq_base", f32(c.value("rope_theta", 6e6)));
  const double lower = c.value("kda_lower_bound", -5.0);
  if (!(lower < 0)) fail(cfg_path.string(), ": kda_lower_bound ", lower, " must be negative");
  fc.kv.emplace_back(a + "kda.safe_gate", boolean(true));
  fc.kv.emplace_back(a + "kda.gate_lower_bound", f32(lower));

  HybridMoe m;
  m.n_ff = count_or(c, "intermediate_size", 4608, cfg_path);
  m.n_expert = count_or(c, "num_experts", 128, cfg_path);
  m.n_ff_exp = count_or(c, "moe_intermediate_size", 512, cfg_path);
  m.n_used = count_or(c, "num_experts_per_tok", 8, cfg_path);
  m.n_shared = count_or(c, "num_shared_experts", 1, cfg_path);
  if (m.n_shared < 1 || m.n_shared > 64)
    fail(cfg_path.string(), ": num_shared_experts ", m.n_shared, " is not 1..64 (Ling 3 always has one)");
  m.n_ff_shexp = count_or(c, "moe_shared_expert_intermediate_size", 512, cfg_path) * m.n_shared;
  m.write_shexp_width = true;
  m.n_group = count_or(c, "n_group", 8, cfg_path);
  m.group_used = count_or(c, "topk_group", 4, cfg_path);
  m.dense_lead = count_or(c, "first_k_dense_replace", 1, cfg_path);
  m.scale = c.value("routed_scaling_factor", 2.5);
  if (m.n_ff == 0 || m.n_expert == 0 || m.n_ff_exp == 0 || m.n_ff_shexp == 0)
    fail(cfg_path.string(), ": intermediate_size, num_experts and the expert widths must be positive");
  hybrid_moe_keys(cfg_path, k, m, fc);
}

}  // namespace

int64_t matrix_in(const std::string& gguf, const MatrixWidths& w) {
  if (gguf == "token_embd.weight" || gguf == "output.weight") return w.n_embd;
  const size_t dot = gguf.find('.', 4);
  if (gguf.rfind("blk.", 0) != 0 || dot == std::string::npos) return 0;
  const std::string rest = gguf.substr(dot + 1);
  if (rest == "attn_output.weight") {
    // Per layer where the layer kinds differ (Kimi Linear: KDA or MLA).
    const size_t l = std::stoul(gguf.substr(4, dot - 4));
    return w.attn_out_in.empty() ? w.n_q : l < w.attn_out_in.size() ? w.attn_out_in[l] : 0;
  }
  if (rest == "ffn_down.weight") return w.n_ff;
  if (rest == "ffn_down_exps.weight") return w.n_ff_exp;
  if (rest == "ffn_down_shexp.weight") return w.n_ff_shexp;
  if (rest == "ssm_out.weight") return w.ssm_value;
  if (rest == "ssm_f_b.weight" || rest == "ssm_g_b.weight") return w.low_rank;
  if (rest == "attn_q_b.weight") return w.q_lora;
  if (rest == "attn_k_b.weight") return w.mla_nope;
  if (rest == "attn_v_b.weight" || rest == "attn_kv_b.weight") return w.kv_lora;
  for (const char* t : {"attn_q.weight",
                        "attn_k.weight",
                        "attn_v.weight",
                        "ffn_gate.weight",
                        "ffn_up.weight",
                        "ffn_gate_inp.weight",
                        "ffn_gate_exps.weight",
                        "ffn_up_exps.weight",
                        "ffn_gate_shexp.weight",
                        "ffn_up_shexp.weight",
                        "ffn_gate_inp_shexp.weight",
                        "attn_qkv.weight",
                        "attn_gate.weight",
                        "ssm_beta.weight",
                        "ssm_alpha.weight",
                        "attn_qkvz.weight",
                        "ssm_ba.weight",
                        "attn_kv_a_mqa.weight",
                        "ssm_f_a.weight",
                        "ssm_g_a.weight",
                        "attn_q_a.weight"})
    if (rest == t) return w.n_embd;
  return 0;
}

FolderConfig read_folder_config(const fs::path& dir, const json& top, const json& c) {
  const fs::path cfg_path = dir / "config.json";
  const std::string model_type = top.value("model_type", c.value("model_type", ""));
  static const std::pair<const char*, const char*> archs[] = {
      {"llama", "llama"},           {"mistral", "llama"},        {"mixtral", "llama"},
      {"deepseek_v3", "deepseek2"}, {"qwen3", "qwen3"},          {"qwen3_moe", "qwen3moe"},
      {"qwen3_5_moe", "qwen35moe"}, {"qwen3_next", "qwen3next"}, {"kimi_linear", "kimi-linear"},
  };
  FolderConfig fc;
  for (const auto& [type, arch] : archs)
    if (model_type == type) fc.arch = arch;
  if (model_type == "bailing_hybrid") {
    // mlx-lm's rule: Ling 3 is bailing_hybrid with BailingMoeV3ForCausalLM among the
    // architectures; without it the same model_type is Ling 2.5 (lightning attention).
    bool v3 = false;
    const json archs_j = c.value("architectures", json());
    for (const json& x : archs_j.is_array() ? archs_j : json::array({archs_j}))
      v3 |= x.is_string() && x.get<std::string>() == "BailingMoeV3ForCausalLM";
    if (!v3)
      fail(cfg_path.string(), ": model_type 'bailing_hybrid' without BailingMoeV3ForCausalLM in architectures is ",
           "Ling 2.5 (lightning attention), which is not supported; Ling 3 names BailingMoeV3ForCausalLM");
    fc.arch = "bailingmoe3";
  }
  if (fc.arch.empty())
    fail(
        cfg_path.string(), ": model_type '", model_type,
        "' is not supported for folders yet (llama, mistral, mixtral, deepseek_v3, qwen3, qwen3_moe, qwen3_5_moe, qwen3_next, kimi_linear, ",
        "bailing_hybrid (Ling 3); convert others to GGUF)");
  fc.hybrid = fc.arch == "qwen35moe" || fc.arch == "qwen3next";
  fc.n_layer = static_cast<int64_t>(positive(c, "num_hidden_layers", cfg_path));
  if (fc.arch == "kimi-linear")
    kimi_linear(dir, c, fc);
  else if (fc.arch == "bailingmoe3")
    bailing_moe_v3(dir, c, fc);
  else if (fc.arch == "deepseek2")
    deepseek_v3(dir, c, fc);
  else
    llama_like(dir, c, fc);
  return fc;
}

}  // namespace sluice::hf
