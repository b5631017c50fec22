// synth/type_rules: which ggml type each tensor gets for a `--type`, following llama.cpp's
// llama-quantize (src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type_impl,
// tensor_type_fallback), so a synth q4_k_m file has the tensor types a real Q4_K_M has.
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "synth/synth.h"

namespace sluice {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer
// in between, get the bigger type in the *_M mixes.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// "blk.12.ffn_down_exps.weight" -> 12; -1 for tensors outside the blocks.
int64_t layer_of(std::string_view name) {
  int layer = -1;
  if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// llama.cpp's tensor_type_fallback for rows that are not a whole number of blocks.
DType fallback(DType t, int64_t ne0) {
  if (ne0 % dtype_traits(t).block_size == 0) return t;
  DType f = DType::F16;
  switch (t) {
    case DType::Q4_K: f = DType::Q5_0; break;
    case DType::Q5_K: f = DType::Q5_1; break;
    case DType::Q6_K: f = DType::Q8_0; break;
    case DType::IQ4_XS: f = DType::IQ4_NL; break;
    case DType::Q2_K:
    case DType::Q3_K: f = DType::Q4_0; break;
    default: f = DType::F16; break;  // Q4_0/Q8_0/IQ4_NL: no smaller block; F16 as llama.cpp
  }
  if (ne0 % dtype_traits(f).block_size != 0) f = DType::F16;
  return f;
}

}  // namespace

DType synth_tensor_type(std::string_view type, std::string_view name, const std::vector<int64_t>& ne, int64_t n_layer,
                        int64_t n_expert, int64_t attn_interval, int64_t attn_v_index, int64_t n_attn_v) {
  // What llama-quantize never touches: 1-D tensors, anything not ending in "weight" (biases,
  // ssm_a), norms, routers and the conv taps (is_quantizable: "Mamba's small yet 2D weights";
  // llama.cpp's converter writes them F32 too, and Sluice requires it).
  if (ne.size() < 2 || !ends_with(name, "weight") || contains(name, "_norm.weight") ||
      contains(name, "ffn_gate_inp.weight") || contains(name, "ssm_conv1d"))
    return DType::F32;
  if (type == "f32") return DType::F32;
  if (type == "f16") return DType::F16;
  if (type == "q8_0") return fallback(DType::Q8_0, ne[0]);
  if (type == "q4_0") return fallback(DType::Q4_0, ne[0]);
  if (type == "q2_k") return fallback(DType::Q2_K, ne[0]);
  if (type == "q3_k") return fallback(DType::Q3_K, ne[0]);
  if (type == "q4_k") return fallback(DType::Q4_K, ne[0]);
  if (type == "q6_k") return fallback(DType::Q6_K, ne[0]);
  if (type == "iq4_nl") return fallback(DType::IQ4_NL, ne[0]);
  if (type == "iq4_xs") return fallback(DType::IQ4_XS, ne[0]);
  if (type != "q4_k_m") fail("synth: unknown type '", type, "'");

  // LLAMA_FTYPE_MOSTLY_Q4_K_M. Counters in llama.cpp (i_attention_wv, i_ffn_down) walk the
  // tensors in layer order, one attn_v / ffn_down per layer, so they equal the layer index;
  // for MoE models llama.cpp parses the layer from the name, as here.
  const int64_t layer = layer_of(name);
  DType t = DType::Q4_K;
  if (name == "output.weight") {
    // Untied output (synth always writes output.weight, so token_embd keeps the default).
    return ne[0] % 256 != 0 ? DType::Q8_0 : DType::Q6_K;
  } else if (contains(name, "attn_v.weight")) {
    // i_attention_wv: the index among the attn_v tensors (every attn_interval-th layer of a
    // hybrid); n_attention_wv counts attn_qkv too, so it stays n_layer.
    const bool more = attn_v_index >= 0 ? use_more_bits(attn_v_index, n_attn_v)
                                        : use_more_bits(layer / std::max<int64_t>(1, attn_interval), n_layer);
    if (more) t = DType::Q6_K;
    if (n_expert == 8) t = DType::Q8_0;  // "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
  } else if (contains(name, "attn_k.weight")) {
    if (n_expert == 8) t = DType::Q8_0;
  } else if (contains(name, "attn_output.weight")) {
    if (n_expert == 8) t = DType::Q5_K;
  } else if (contains(name, "attn_qkv.weight")) {
    t = DType::Q5_K;  // llama.cpp: "else if (ftype == LLAMA_FTYPE_MOSTLY_Q4_K_M) new_type = GGML_TYPE_Q5_K"
  } else if (contains(name, "ffn_down")) {
    // ffn_down, ffn_down_exps and ffn_down_shexp alike (llama.cpp matches the substring).
    if (use_more_bits(layer, n_layer)) t = DType::Q6_K;
  }
  return fallback(t, ne[0]);
}

}  // namespace sluice
