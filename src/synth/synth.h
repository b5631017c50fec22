// synth/synth: `sluice synth` as a library. Writes random-weight GGUF models of every supported
// architecture (llama dense, mixtral = llama + experts, qwen3, qwen3moe, olmoe, deepseek2, the
// Gated DeltaNet + gated attention hybrids qwen35moe and qwen3next, and the Kimi Delta Attention
// + MLA hybrids kimi-linear and bailingmoe3) with
// llama.cpp's metadata keys, value types, tensor names and layouts, a tokenizer copied from
// another GGUF, deterministic weights (seed, tensor name, index) and llama-quantize-like
// output types. Data is generated, quantized and written one tensor at a time (row chunks
// spread over threads), so a many-GB model never sits in memory.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "sluice/synth.h"

namespace sluice {

// One model shape: a row of the preset table, after --layers / --vocab overrides. Field names
// follow models/model.h's Hparams and llama.cpp's metadata keys ({arch} = gguf_arch).
struct SynthShape {
  std::string arch;         // synth's name: llama | mixtral | qwen3 | qwen3moe | olmoe | deepseek2 | qwen35moe |
                            // qwen3next | kimi-linear | bailingmoe3
  std::string preset;       // "tiny", "qwen3-30b-a3b", ...
  std::string gguf_arch;    // general.architecture (mixtral is written as "llama" with experts)
  std::string note;         // one line for --list-presets
  int64_t n_vocab = 0;      // rows of token_embd/output; 0 in a preset: the tokenizer's size
  int64_t n_ctx_train = 0;  // {arch}.context_length
  int64_t n_embd = 0;       // {arch}.embedding_length
  int64_t n_layer = 0;      // {arch}.block_count
  int64_t n_head = 0;       // {arch}.attention.head_count
  int64_t n_head_kv = 0;    // {arch}.attention.head_count_kv (MLA: written as 1)
  int64_t head_dim = 0;     // {arch}.attention.key_length = value_length (non-MLA)
  int64_t n_ff = 0;         // {arch}.feed_forward_length: dense FFN width (mixtral/olmoe: the expert width)
  float rms_eps = 1e-5f;    // {arch}.attention.layer_norm_rms_epsilon
  float rope_base = 1e4f;   // {arch}.rope.freq_base
  // Experts (n_expert == 0: dense).
  int64_t n_expert = 0;                   // {arch}.expert_count
  int64_t n_expert_used = 0;              // {arch}.expert_used_count
  int64_t n_ff_exp = 0;                   // width of one expert ({arch}.expert_feed_forward_length where written)
  int64_t n_expert_shared = 0;            // deepseek2: {arch}.expert_shared_count
  int64_t n_layer_dense_lead = 0;         // deepseek2: {arch}.leading_dense_block_count
  uint32_t gating_func = 1;               // deepseek2: {arch}.expert_gating_func (1 softmax, 2 sigmoid + exp_probs_b)
  bool expert_weights_norm = false;       // deepseek2: {arch}.expert_weights_norm
  float expert_weights_scale = 1.0f;      // deepseek2: {arch}.expert_weights_scale
  int64_t n_group = 1, n_group_used = 1;  // deepseek2: {arch}.expert_group_count / expert_group_used_count
  // DeepSeek MLA (deepseek2, and the MLA layers of kimi-linear / bailingmoe3).
  int64_t q_lora_rank = 0;  // 0: q comes from one attn_q matrix (V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;  // {arch}.rope.dimension_count
  int64_t v_head = 0;
  // Qwen3.5 / Qwen3-Next hybrid (qwen35moe, qwen3next): Gated DeltaNet layers with every
  // full_attention_interval-th layer (l + 1 divisible by it) a gated full-attention layer.
  int64_t n_rot = 0;                    // {arch}.rope.dimension_count (0: head_dim; partial rotary below it)
  std::vector<int32_t> rope_sections;   // {arch}.rope.dimension_sections (4 ints; empty: not written)
  int64_t n_ff_shexp = 0;               // {arch}.expert_shared_feed_forward_length (one sigmoid-gated shared expert)
  int64_t full_attention_interval = 0;  // {arch}.full_attention_interval (0: not a hybrid)
  int64_t ssm_conv_kernel = 0;          // {arch}.ssm.conv_kernel: causal conv taps K
  int64_t ssm_n_group = 0;              // {arch}.ssm.group_count: key heads H_k
  int64_t ssm_dt_rank = 0;              // {arch}.ssm.time_step_rank: value heads H_v (a multiple of H_k)
  int64_t ssm_d_state = 0;              // {arch}.ssm.state_size: key head dim D_k
  int64_t ssm_d_inner = 0;              // {arch}.ssm.inner_size: H_v * D_v
  bool hybrid() const { return full_attention_interval > 0; }
  bool is_attention_layer(int64_t l) const { return !hybrid() || (l + 1) % full_attention_interval == 0; }
  int64_t ssm_conv_dim() const { return 2 * ssm_n_group * ssm_d_state + ssm_d_inner; }  // [q | k | v] channels
  // Qwen3-Next writes beta and alpha as one ssm_ba [n_embd, 2·H_v] (rows per key-head group:
  // beta of its H_v/H_k value heads, then their alpha); Qwen3.5 as ssm_beta + ssm_alpha.
  bool fused_beta_alpha() const { return gguf_arch == "qwen3next"; }
  // Kimi Delta Attention hybrids (kimi-linear, bailingmoe3; models/kda.h): KDA layers of n_head
  // heads x kda_head_dim with short convs of ssm_conv_kernel taps, and MLA layers (the MLA fields
  // above) where is_mla_layer says; llama.cpp's converter marks them by the per-layer array
  // {arch}.attention.head_count_kv (0 KDA, 1 MLA). MoE as deepseek2's (gating_func, groups,
  // exp_probs_b, shared experts, leading dense layers).
  int64_t kda_head_dim = 0;           // {arch}.kda.head_dim (> 0: a KDA hybrid)
  int64_t mla_interval = 0;           // layer l is MLA when (l + 1) % mla_interval == 0, and per mla_tail
  int mla_tail = 0;                   // 0: nothing more; 1: the last layer is MLA too (Kimi's full_attn_layers
                                      // end with the last layer); 2: the layers after the last whole group of
                                      // mla_interval are MLA (mlx-lm bailing_moe_v3.py, _is_kda_layer)
  float kda_gate_lower_bound = 0.0f;  // bailingmoe3: {arch}.kda.gate_lower_bound (the safe gate; < 0)
  bool kda() const { return kda_head_dim > 0; }
  bool is_mla_layer(int64_t l) const {
    if ((l + 1) % mla_interval == 0) return true;
    if (mla_tail == 1) return l == n_layer - 1;
    if (mla_tail == 2) return l >= n_layer / mla_interval * mla_interval;
    return false;
  }
  // Kimi's decay and output gates are low rank (ssm_f_a/f_b, ssm_g_a/g_b through kda_head_dim);
  // Ling 3's are full rank (ssm_f_a, ssm_g_a [n_embd, n_head·kda_head_dim]: "no_kda_lora").
  bool kda_low_rank() const { return gguf_arch == "kimi-linear"; }
};

// The preset table (tiny presets first, one per arch, then full-size shapes of real models).
const std::vector<SynthShape>& synth_presets();
// Parameters of a model of shape `s` (n_vocab must be set).
int64_t synth_param_count(const SynthShape& s);
// The output types `--type` accepts, in --help order: f32 f16 q8_0 q4_0 q4_k q6_k q4_k_m.
const std::vector<std::string>& synth_type_names();

// Progress of synth_write (reported after every row chunk and once more at the end, done) and
// its options are the public API's (sluice/synth.h): one definition, no copying between them.
using SynthProgress = SynthStatus;
using SynthOptions = SynthConfig;

struct SynthResult {
  SynthShape shape;  // as written (overrides applied, n_vocab resolved)
  uint64_t file_bytes = 0;
  uint64_t data_bytes = 0;  // tensor data only
  int64_t n_params = 0;
  int n_tensors = 0;
  double seconds = 0;
  std::map<std::string, int> type_counts;  // "q4_K" -> number of tensors
};

// The shape synth_write would use: the preset row for (arch, preset) with --layers/--vocab
// applied and a 0 vocab replaced by `tokenizer_vocab`. Throws Error for an unknown arch,
// preset or a mismatch, and for overrides that make no model (layers below the dense lead,
// a vocab smaller than the tokenizer's, a hybrid with fewer layers than its attention interval).
SynthShape synth_resolve_shape(const SynthOptions& opt, int64_t tokenizer_vocab);

// The tensor type of weight `name` (ggml shape `ne`) in a model of `n_layer` layers and
// `n_expert` experts written with output type `type` (a synth_type_names() entry):
//  - 1-D tensors, *_norm.weight, biases and ffn_gate_inp routers stay F32 (llama.cpp never
//    quantizes them, and Sluice's ops read them as floats);
//  - f32/f16: every other tensor in that type; q8_0, q4_0, q2_k, q3_k, q4_k, q6_k, iq4_nl,
//    iq4_xs: every other tensor in that type, as `llama-quantize --pure` does;
//  - q4_k_m: llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M rule (src/llama-quant.cpp,
//    llama_tensor_get_type_impl): Q4_K, except output.weight Q6_K; attn_v and every ffn_down*
//    Q6_K in the layers use_more_bits picks (the first and last eighth of the layers and every
//    third one between); with exactly 8 experts attn_v and attn_k Q8_0 and attn_output Q5_K;
//  - then llama.cpp's fallback for rows that are not a whole number of blocks
//    (tensor_type_fallback): Q2_K, Q3_K -> Q4_0, Q4_K -> Q5_0, Q6_K -> Q8_0, Q5_K -> Q5_1, IQ4_XS -> IQ4_NL, and F16 when even that
//    block (32) does not divide the row; output.weight falls back to Q8_0 directly. Q4_0/Q8_0
//    rows that 32 does not divide become F16 (llama.cpp has no fallback for them and refuses).
//  - ssm_conv1d.weight (Mamba / Gated DeltaNet conv taps) stays F32 in every type: llama-quantize
//    never quantizes it (is_quantizable) and Sluice's conv1d_causal reads it as floats.
//  - q4_k_m: attn_qkv (the hybrids' DeltaNet [q|k|v] projection) Q5_K, llama.cpp's attn_qkv
//    rule; on a hybrid (attn_interval > 1, qwen35moe/qwen3next) llama.cpp's attn_v counter i_attention_wv
//    counts only the attention layers' attn_v (layer l is the l/attn_interval-th), while
//    n_attention_wv counts attn_v and attn_qkv alike (n_layer), so use_more_bits(l / interval,
//    n_layer) picks attn_v's Q6_K layers.
//  - ssm_ba (qwen3next's fused beta/alpha), like qwen35moe's ssm_beta/ssm_alpha, has no rule of
//    its own in llama-quant.cpp (no tensor category; its ssm_beta exclusion is GLM5_NEXT's only),
//    so it gets the type's default: Q4_K in q4_k_m (Q5_0 where 256 does not divide n_embd).
//  - the KDA hybrids (kimi-linear, bailingmoe3): every ssm_conv1d* tensor (ssm_conv1d_q/k/v) F32,
//    llama.cpp's is_quantizable ("Mamba/Kimi's small conv1d weights": name.find("ssm_conv1d"));
//    attn_v exists only in the KDA layers, so llama.cpp's i_attention_wv / n_attention_wv are the
//    index among the KDA layers and their count: pass them as attn_v_index / n_attn_v (>= 0
//    overrides the layer / attn_interval rule). ssm_f_*, ssm_g_*, ssm_beta, attn_gate have no rule
//    of their own (the type's default).
DType synth_tensor_type(std::string_view type, std::string_view name, const std::vector<int64_t>& ne, int64_t n_layer,
                        int64_t n_expert, int64_t attn_interval = 1, int64_t attn_v_index = -1, int64_t n_attn_v = -1);

// Writes the model to `path`. Weights are N(0, σ²) from a counter-based generator keyed by
// (seed, tensor name, element index), σ = gain/sqrt(fan_in) with fan_in = ne[0]:
//   gain 0.5 for most matrices, 0.5/sqrt(n_layer) for the residual writers (attn_output,
//   ffn_down*: depth-scaled, so deep models keep token-driven, spread routing); 1 for the query/key path (attn_q, attn_k, attn_q_a, attn_q_b,
//   attn_kv_a_mqa, attn_k_b) so attention is not uniform; 4 for output.weight and softmax
//   routers (logit std ≈ 4, as in the goldens); 1.5 for sigmoid routers (deepseek2 gating 2);
//   token_embd N(0, 0.5²); norm weights 1 + N(0, 0.05²); exp_probs_b N(0, 0.1²) (about a third
//   of the spread of the sigmoid probabilities it is added to, so it tilts the selection
//   without deciding it). With a padded vocabulary the output.weight rows of the padding ids
//   are zero, so their logit is exactly 0 and decoding yields the tokenizer's real tokens.
//   qwen35moe/qwen3next (see plan.cpp): ssm_out is a residual writer like attn_output; ssm_a = −U(1, 16)
//   (−exp(A_log), A_log ~ log U(1, 16)); ssm_dt.bias N(0, 0.1²); ssm_conv1d N(0, 1/K);
//   ffn_gate_inp_shexp (the shared expert's sigmoid gate) N(0, 1/n_embd).
//   kimi-linear/bailingmoe3 (see plan.cpp): ssm_a U(−4, −1) (−exp(A_log)) / U(1, 2) (exp(A_log));
//   ssm_dt.bias U(−4.6, −2.25) / U(−4, −2), so each token keeps ~0.6-0.99 of the KDA state;
//   bailingmoe3's attn_gate gain 2; conv taps N(0, 1/K).
// routing_locality X in [0, 1] gives MoE routers temporal structure; see plan.cpp for the
// exact construction. X = 0 writes the plain model (same bytes as without the option).
// Memory: tensors are produced one at a time in chunks of ~4M elements spread over `threads`
// (one float row of scratch per thread); GgufWriter takes a whole tensor per call, so the
// peak is the largest encoded tensor (e.g. 175 MB for qwen3-30b-a3b's Q4_K token_embd, 940 MB
// for mixtral-8x7b's F16 ffn_*_exps), never the model.
// Throws Error (tokenizer missing or unreadable, bad options, I/O failure: a partly written
// file is removed).
SynthResult synth_write(const SynthOptions& opt, const std::string& path);

// The same model (the same seed's weights) as the folder mlx_lm.convert would write for it
// (synth/mlx_folder.cpp): config.json, model.safetensors (opt.type f32 / f16 / bf16, or q2..q8:
// MLX affine with opt.group_size, routers at 8 bits), the tokenizer files of the folder
// opt.tokenizer. Every architecture the folder loader reads (not olmoe); Throws Error naming
// what cannot be written.
SynthResult synth_write_mlx(const SynthOptions& opt, const std::string& dir);

}  // namespace sluice
