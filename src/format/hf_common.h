// format/hf_common: what the Hugging Face / MLX folder readers share (format/ only): JSON files,
// GGUF metadata values, config integers, config.json as metadata (hf_config.cpp), tokenizer.json as tokenizer.ggml.* metadata
// (hf_tokenizer.cpp), and Hugging Face tensor names as GGUF names (hf_names.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"

namespace sluice::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Kv = std::vector<std::pair<std::string, GgufValue>>;

inline json read_json(const fs::path& p, bool required) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    if (required) fail(p.string(), ": cannot open");
    return json();
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past double
    fail(p.string(), ": not valid JSON: ", e.what());
  }
}

inline GgufValue u32(uint64_t v) { return {GgufType::UINT32, static_cast<uint32_t>(v)}; }
inline GgufValue f32(double v) { return {GgufType::FLOAT32, static_cast<float>(v)}; }
inline GgufValue str(std::string v) { return {GgufType::STRING, std::move(v)}; }
inline GgufValue boolean(bool v) { return {GgufType::BOOL, v}; }
inline GgufValue str_array(const std::vector<std::string>& items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::STRING;
  for (const auto& s : items) a->items.push_back(str(s));
  return {GgufType::ARRAY, a};
}
inline GgufValue f32_array(const std::vector<float>& items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::FLOAT32;
  for (float v : items) a->items.push_back({GgufType::FLOAT32, v});
  return {GgufType::ARRAY, a};
}
inline GgufValue i32_array(const std::vector<int32_t>& items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::INT32;
  for (int32_t v : items) a->items.push_back({GgufType::INT32, v});
  return {GgufType::ARRAY, a};
}

// A config value that must be a positive integer.
inline uint64_t positive(const json& c, const std::string& key, const fs::path& file) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0)
    fail(file.string(), ": '", key, "' missing or not a positive integer");
  return c[key].get<uint64_t>();
}

// The input widths of the quantizable matrices, from the config's dimensions.
struct MatrixWidths {
  int64_t n_embd = 0, n_q = 0, n_ff = 0, n_ff_exp = 0, n_ff_shexp = 0, ssm_value = 0;
  std::vector<int64_t> attn_out_in;               // per layer where layer kinds differ (else n_q)
  int64_t low_rank = 0;                           // Kimi Linear's KDA gates: f_a/g_a -> f_b/g_b
  int64_t q_lora = 0, mla_nope = 0, kv_lora = 0;  // MLA: q_b's input, the absorbed matrices' inputs
};
// The input width of a quantizable matrix under its GGUF name (its row length); 0 for a tensor
// MLX does not quantize (norms, biases).
int64_t matrix_in(const std::string& gguf, const MatrixWidths& w);

// What config.json says (hf_config.cpp): the GGUF architecture and metadata (not the
// tokenizer's), and the shapes the tensor reader needs.
struct FolderConfig {
  std::string arch;
  bool hybrid = false;  // Gated DeltaNet layers (qwen35moe, qwen3next)
  Kv kv;
  MatrixWidths widths;
  int64_t n_embd = 0, n_expert = 0, n_ff_exp = 0;
  int64_t ssm_hk = 0, ssm_hv = 0, ssm_dk = 0, ssm_dv = 0;  // the Gated DeltaNet's heads and head dims
  std::vector<bool> mla_layer;       // KDA + MLA hybrids: per layer, MLA (else KDA); empty for the others
  int64_t n_layer = 0;               // num_hidden_layers
  int64_t mla_heads = 0, mla_v = 0;  // MLA: heads and value width (kv_b_proj's split)
};
// c: config.json with text_config's keys merged in (top: the file as it is).
FolderConfig read_folder_config(const fs::path& dir, const json& top, const json& c);

// tokenizer.json (byte-level BPE), tokenizer_config.json, generation_config.json and the chat
// template of folder dir as tokenizer.ggml.* metadata (hf_tokenizer.cpp).
void add_tokenizer(const fs::path& dir, const json& config, Kv& kv);
// A vocab_size above the tokenizer's count (Qwen's checkpoints round their embedding up past
// the tokens: 151936 rows for 151669 tokens) pads tokenizer.ggml.tokens to it with "[PAD<id>]"
// tokens of type UNUSED, scores 0, as llama.cpp's converter does, so the embedding's rows and
// the vocabulary agree; the model never produces or renders them.
void pad_vocab(Kv& kv, int64_t vocab_size);

// The name without MLX's language-model prefixes.
std::string strip_prefix(std::string n);
// model.layers.<digits>.<rest> -> (digits, rest); nullopt for any other name.
std::optional<std::pair<std::string, std::string>> split_layer(const std::string& n);
// One expert of Hugging Face's per-expert layout, model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight:
// the stacked GGUF tensor it belongs to and its index there.
struct ExpertSlice {
  std::string gguf;
  int64_t expert;
};
std::optional<ExpertSlice> per_expert(const std::string& hf_name);
// HF tensor name -> GGUF name (arch: the GGUF architecture; "" for the llama-like families;
// mla_layer: the KDA + MLA hybrids' layer kinds, FolderConfig's; n_layer: num_hidden_layers,
// past which the MLA models' multi-token-prediction layers are skipped); "" for a tensor to skip.
// Throws naming file for a tensor that architecture does not have.
std::string gguf_name(const std::string& hf_name, const fs::path& file, const std::string& arch = "",
                      const std::vector<bool>& mla_layer = {}, int64_t n_layer = 0);

}  // namespace sluice::hf
