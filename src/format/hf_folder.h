// format/hf_folder: a Hugging Face / MLX model folder opened as if it were a GGUF file
// (`sluice run -m DIR`). config.json (plain, or with the language model's settings in
// `text_config`) becomes the GGUF metadata llama.cpp's converter would write; the tensors of
// model.safetensors (or the shards model.safetensors.index.json names) keep their bytes in
// place (mmap) under GGUF names and shapes — HF's [out, in] row-major matrix is GGUF's
// ne = [in, out] with the same bytes — and only the small 1-D tensors (norms, biases) are
// converted to f32, as the ops read them; tokenizer.json (byte-level BPE, or SentencePiece-style
// BPE with byte fallback, which runs as llama.cpp's SPM tokenizer) becomes
// tokenizer.ggml.*, tokenizer_config.json gives BOS/EOS and the chat template,
// generation_config.json more end-of-generation ids.
//
// Conventions that would corrupt the output silently are handled, not ignored: Llama's HF
// checkpoints keep Q/K in the rotate-half RoPE layout that llama.cpp's converter permutes
// away, so they run with NEOX RoPE (metadata sluice.rope_neox) instead of a copy; RMSNorm
// weights are the multiplier as stored; `language_model.` prefixes (MLX) are dropped.
// Qwen3-MoE's experts are MLX's stacked switch_mlp.{gate,up,down}_proj [E, out, in], which is
// GGUF's ffn_*_exps [in, out, E] byte for byte (quantized: E·out rows of groups); its router
// mlp.gate (mlx-lm quantizes it at 8 bits) is ffn_gate_inp. Hugging Face's own layout stores
// the experts one by one (mlp.experts.N.{gate,up,down}_proj [out, in], float): they are copied
// once into the stacked tensor, every index 0..num_experts-1, dtype and shape checked.
//
// Qwen3.5-MoE (model_type qwen3_5_moe, its settings in text_config, RoPE in rope_parameters)
// maps to llama.cpp's qwen35moe: the DeltaNet's in_proj_{qkv,z,b,a}, conv1d, dt_bias, A_log,
// norm and out_proj to attn_qkv/attn_gate/ssm_beta/ssm_alpha/ssm_conv1d/ssm_dt.bias/ssm_a/
// ssm_norm/ssm_out, A_log read as -exp(A_log) (llama.cpp's ssm_a) and conv1d as f32; the value
// heads stay in HF's key-head groups (sluice.ssm_grouped_heads: llama.cpp's converter reorders
// them to tile instead). A transformers checkpoint (conv1d [C, 1, K]) stores its RMSNorm weights
// as the offset from 1 and gets the 1 added, as mlx-lm's sanitize does; an mlx-lm folder
// ([C, K, 1]) stores the multiplier. transformers' fused experts.gate_up_proj [E, 2·n_ff_exp,
// n_embd] is copied once into the stacked gate and up (experts.down_proj maps in place); mtp.*
// weights are skipped. Qwen3-Next (model_type qwen3_next, a flat config)
// is the same but for two fused projections: in_proj_qkvz, whose rows per key-head group [q | k
// | v | z] are copied once into attn_qkv and attn_gate as llama.cpp's converter splits them,
// and in_proj_ba, which the qwen3next graph reads fused (ssm_ba).
//
// Mixtral (model_type mixtral) is llama with experts: block_sparse_moe.gate is ffn_gate_inp, its
// switch_mlp (or transformers' experts.E.w1/w3/w2) the stacked experts.
//
// DeepSeek-V3 (model_type deepseek_v3) maps to deepseek2: MLA's q_a/q_b (or q_proj),
// kv_a_proj_with_mqa, and kv_b_proj as mlx-lm stores it, per head (embed_q / unembed_out, what
// llama.cpp's converter writes as attn_k_b / attn_v_b); NORM RoPE; mlp.gate's
// e_score_correction_bias; layers past num_hidden_layers (multi-token prediction) skipped.
// transformers' float kv_b_proj ([H·(N+V), L]) is split once into those per-head matrices.
//
// Kimi Linear (model_type kimi_linear) maps to llama.cpp's kimi-linear: linear_attn_config's
// kda_layers (1-based) become the per-layer head_count_kv array (0 KDA, 1 MLA); the KDA layers'
// q/k/v_conv.conv [C, K, 1] become ssm_conv1d_q/k/v [K, 1, C] (f32), A_log [1, 1, H, 1] -> ssm_a
// = -exp(A_log), f/g_a/b_proj the low-rank gates, b_proj ssm_beta, o_norm ssm_norm; the MLA
// layers' MultiLinear embed_q [H, kv_lora, nope] and unembed_out [H, v, kv_lora] are GGUF's
// attn_k_b / attn_v_b byte for byte (3-D when quantized, like stacked experts); the router's
// e_score_correction_bias is exp_probs_b. Ling 3 (model_type bailing_hybrid with
// BailingMoeV3ForCausalLM; without it mlx-lm reads Ling 2.5, refused) maps to bailingmoe3 the
// same way under attention.*, its layers MLA every layer_group_size-th and after the last whole
// group (mlx-lm's rule), A_log read as +exp(A_log) (the safe gate's), g_proj the KDA output gate
// (ssm_g_a) or the MLA head gate (attn_gate) by the layer's kind, mlp.gate.expert_bias
// exp_probs_b, and multi-token-prediction layers past num_hidden_layers skipped.
//
// MLX-quantized folders (config.json "quantization": bits, group_size, mode "affine", and
// per-module entries keyed by module path): X.weight (uint32 codes) with X.scales and X.biases
// becomes one GGUF tensor in memory the file owns — Q4_1 (2-4 bits), Q5_1 (5 bits) or Q8_A (6
// and 8 bits) blocks, exact (quant/mlx_affine.h), when every scale and bias is an fp16 value;
// float32 otherwise and for the routers — or, opened with affine_in_place (--mlx-in-place), one
// tensor read where the file keeps it: DType::MLX_A<bits> codes with the scales and biases as its
// planes (TensorView::affine), no conversion (routers still float32; a folder opened for `pack`
// always converts: GGUF has no planar type). Metadata sluice.folder.quantization says what was done. A module the config
// does not name takes the default, or the format its shapes give (as mlx-lm infers it); every
// shape and dtype is checked against the config's dimensions. What is not supported yet is
// refused by name: architectures other than llama / mistral / mixtral / deepseek_v3 / qwen3 /
// qwen3_moe / qwen3_5_moe / qwen3_next / kimi_linear / Ling 3, quantization modes other than
// affine and non-MLX quantization_config (quant_method), quantized norms, rope_scaling,
// tokenizers other than byte-level and SentencePiece-style BPE (Unigram, WordPiece).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "format/gguf.h"

namespace sluice {

// True when `path` is a directory that holds config.json.
bool is_model_folder(const std::string& path);

// Throws sluice::Error naming the file and what is wrong (or unsupported).
// affine_in_place: MLX affine groups read where the folder keeps them (DType::MLX_A*) instead of
// converted into blocks (ModelOptions::mlx_in_place).
std::unique_ptr<GgufFile> open_model_folder(const std::string& dir, bool affine_in_place = false);
// A folder opened to be rewritten as a GGUF (`sluice pack DIR`): the stacked experts that
// loading converts (MLX affine groups into Q4_1/Q5_1/Q8_A blocks or float) are not converted
// here; fill(p, n) converts the rows that hold bytes [p, p + n) of one of `file`'s tensors and
// release(p, n) gives their memory and their source pages back, so a folder larger than memory
// is rewritten expert by expert in bounded memory. Both do nothing outside those tensors; every
// other tensor is as open_model_folder gives it.
struct FolderForRewrite {
  std::unique_ptr<GgufFile> file;
  std::function<void(const void*p, size_t n)> fill, release;
};
FolderForRewrite open_model_folder_for_rewrite(const std::string& dir);
// The folder's tokenizer files alone as tokenizer.ggml.* metadata (no config.json checks, no
// tensors): for tokenizing without the weights.
std::unique_ptr<GgufFile> open_folder_tokenizer(const std::string& dir);

// The GGUF name of a Hugging Face tensor ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight";
// "" for one that is recomputed, as rotary_emb.inv_freq) in `base`, a model folder's or a GGUF
// of the same architecture (its general.architecture, and the layer kinds of the KDA + MLA
// hybrids). Throws naming `file` for a tensor that architecture does not have.
std::string hf_tensor_gguf_name(const std::string& hf_name, const std::string& file, const GgufFile& base);

// Qwen3-Next's in_proj_qkvz: per key-head group g of hk, rows [q (dk) | k (dk) | v (r·dv) |
// z (r·dv)], r = hv/hk. llama.cpp's converter (and the folder loader, once) splits it into
// attn_qkv [every q | every k | every v] and attn_gate [every z]: the stored row of each row of
// that order, attn_qkv's 2·hk·dk + hv·dv rows first, then attn_gate's hv·dv. A LoRA adapter on
// in_proj_qkvz splits its B the same way (format/lora).
std::vector<int64_t> qkvz_split_rows(int64_t hk, int64_t hv, int64_t dk, int64_t dv);

}  // namespace sluice
