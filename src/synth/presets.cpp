// synth/presets: the table of model shapes `sluice synth` can write (a tiny one per
// architecture for tests, and full-size shapes of real models), and their resolution with
// the --layers / --vocab overrides.
#include <algorithm>

#include "core/error.h"
#include "synth/synth.h"

namespace sluice {
namespace {

SynthShape dense(std::string arch, std::string preset, std::string gguf_arch, std::string note) {
  SynthShape s;
  s.arch = std::move(arch);
  s.preset = std::move(preset);
  s.gguf_arch = std::move(gguf_arch);
  s.note = std::move(note);
  return s;
}

// Qwen3.5 MoE hybrid: rms eps 1e-6, rope base 1e7, a gated attention layer every 4th layer, one
// sigmoid-gated shared expert (the rest set per preset).
SynthShape qwen35(std::string preset, std::string note, std::string arch = "qwen35moe") {
  SynthShape s = dense(arch, std::move(preset), arch, std::move(note));
  s.rms_eps = 1e-6f, s.rope_base = 1e7f, s.full_attention_interval = 4, s.n_expert_shared = 1;
  return s;
}

// Qwen3-Next: the same hybrid with ssm_ba fused, grouped key heads and plain NEOX RoPE (no
// rope.dimension_sections); see models/qwen35.cpp.
SynthShape qwen3next(std::string preset, std::string note) {
  return qwen35(std::move(preset), std::move(note), "qwen3next");
}

// Kimi Delta Attention + MLA hybrids (kimi-linear, bailingmoe3): sigmoid routing with a selection
// bias, the chosen weights renormalised (both models always renormalise), MLA every 4th layer.
SynthShape kda_hybrid(std::string arch, std::string preset, std::string note) {
  SynthShape s = dense(arch, std::move(preset), arch, std::move(note));
  s.gating_func = 2, s.expert_weights_norm = true, s.mla_interval = 4, s.ssm_conv_kernel = 4;
  return s;
}

// Full-size shapes are from the models' public config.json (Hugging Face): hidden_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
// moe_intermediate_size, num_experts(_per_tok), vocab_size, rope_theta, rms_norm_eps,
// max_position_embeddings. Tiny shapes mirror ../shared/golden's generator presets where one
// exists; their vocabulary is the tokenizer's (n_vocab 0).
std::vector<SynthShape> make_presets() {
  std::vector<SynthShape> p;
  {
    SynthShape s = dense("llama", "tiny", "llama", "dense llama: n_embd 256, 2 layers, 4x64 heads, 2 kv, FFN 512");
    s.n_ctx_train = 2048, s.n_embd = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_ff = 512;
    s.rms_eps = 1e-5f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("mixtral", "tiny", "llama",
                         "llama + 8 experts top-2: n_embd 128, 2 layers, 2x64 heads, 1 kv, expert FFN 256");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 2, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 64;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff = s.n_ff_exp = 256;
    s.rms_eps = 1e-5f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("qwen3", "tiny", "qwen3",
                         "dense qwen3: n_embd 128, 3 layers, 4x64 heads (q width 256), 2 kv, FFN 256");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 3, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_ff = 256;
    s.rms_eps = 1e-6f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("qwen3moe", "tiny", "qwen3moe",
                         "n_embd 256, 2 layers, 4x64 heads, 2 kv, 16 experts top-4, expert FFN 128");
    s.n_ctx_train = 2048, s.n_embd = 256, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
    s.n_expert = 16, s.n_expert_used = 4, s.n_ff_exp = 128, s.n_ff = 512;
    s.rms_eps = 1e-6f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("olmoe", "tiny", "olmoe", "n_embd 128, 2 layers, 2x64 heads, 8 experts top-2, expert FFN 128");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 2, s.n_head = 2, s.n_head_kv = 2, s.head_dim = 64;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff = s.n_ff_exp = 128;
    s.rms_eps = 1e-5f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    // The V2-Lite code path (q from one attn_q, softmax gating, no groups, 2 shared experts)
    // in miniature, so the tests cover what the full-size preset writes.
    SynthShape s =
        dense("deepseek2", "tiny", "deepseek2",
              "V2-Lite style: n_embd 128, 3 layers (1 dense, FFN 256), 4 heads, kv_lora 64, nope 32, rope 32, "
              "v 64, 16 experts top-4 + 2 shared (FFN 64), softmax");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 3, s.n_head = 4, s.n_ff = 256;
    s.n_layer_dense_lead = 1, s.n_expert = 16, s.n_expert_used = 4, s.n_expert_shared = 2, s.n_ff_exp = 64;
    s.kv_lora_rank = 64, s.qk_nope = 32, s.qk_rope = 32, s.v_head = 64;
    s.rms_eps = 1e-6f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    // The V3 routing path: q through a low-rank q_a/q_b, sigmoid gating with exp_probs_b,
    // group-limited routing, renormalised and scaled weights (the golden deepseek2's config).
    SynthShape s = dense("deepseek2", "tiny-v3", "deepseek2",
                         "V3 style: n_embd 128, 3 layers, q_lora 96, kv_lora 96, 16 experts top-4 + 1 shared, sigmoid, "
                         "4 groups (2 used), norm, scale 2.5");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 3, s.n_head = 4, s.n_ff = 256;
    s.n_layer_dense_lead = 1, s.n_expert = 16, s.n_expert_used = 4, s.n_expert_shared = 1, s.n_ff_exp = 64;
    s.q_lora_rank = 96, s.kv_lora_rank = 96, s.qk_nope = 32, s.qk_rope = 32, s.v_head = 64;
    s.gating_func = 2, s.n_group = 4, s.n_group_used = 2, s.expert_weights_norm = true, s.expert_weights_scale = 2.5f;
    s.rms_eps = 1e-6f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    // The golden qwen35moe's config (../shared/golden/manifest.json): 3 Gated DeltaNet layers and
    // one gated attention layer, H_v = 2·H_k (value head h reads key head h % H_k), partial rotary.
    SynthShape s = qwen35("tiny",
                          "hybrid: n_embd 128, 4 layers (attention every 4th), 2x64 heads, 1 kv, rope 32; DeltaNet "
                          "2 k / 4 v heads, state 32; 8 experts top-2 + shared (FFN 64)");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 4, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 64, s.n_ff = 256;
    s.n_rot = 32, s.rope_sections = {6, 5, 5, 0};
    s.ssm_conv_kernel = 4, s.ssm_n_group = 2, s.ssm_dt_rank = 4, s.ssm_d_state = 32, s.ssm_d_inner = 4 * 32;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff_exp = 64, s.n_ff_shexp = 64;
    p.push_back(s);
  }
  {
    // The qwen35moe tiny shape in Qwen3-Next's layout, as tests/data/golden/qwen3next/model.gguf
    // (scripts/golden/derive_hybrid_models.py derives it from the qwen35moe golden): ssm_ba for
    // ssm_beta + ssm_alpha, no rope.dimension_sections.
    SynthShape s = qwen3next("tiny",
                             "hybrid: n_embd 128, 4 layers (attention every 4th), 2x64 heads, 1 kv, rope 32; DeltaNet "
                             "2 k / 4 v heads, state 32, fused ssm_ba; 8 experts top-2 + shared (FFN 64)");
    s.n_ctx_train = 2048, s.n_embd = 128, s.n_layer = 4, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 64, s.n_ff = 256;
    s.n_rot = 32;
    s.ssm_conv_kernel = 4, s.ssm_n_group = 2, s.ssm_dt_rank = 4, s.ssm_d_state = 32, s.ssm_d_inner = 4 * 32;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff_exp = 64, s.n_ff_shexp = 64;
    p.push_back(s);
  }
  {
    // The golden kimi-linear (tests/data/golden/kimi-linear, scripts/golden/make_kimi_linear.py):
    // 3 KDA layers (4 heads x 32, low-rank gates) and one MLA layer without RoPE (kv_lora 64,
    // nope 32, rope 16, v 32), a dense first layer, 8 experts top-2 + 1 shared, scale 2.5.
    SynthShape s = kda_hybrid("kimi-linear", "tiny",
                              "KDA + MLA: n_embd 128, 4 layers (MLA last), KDA 4x32 heads, kv_lora 64; 1 dense (FFN "
                              "256), 8 experts top-2 + 1 shared (FFN 64), sigmoid");
    s.n_ctx_train = 512, s.n_embd = 128, s.n_layer = 4, s.n_head = 4, s.n_ff = 256, s.rms_eps = 1e-5f;
    s.kda_head_dim = 32, s.mla_tail = 1;
    s.kv_lora_rank = 64, s.qk_nope = 32, s.qk_rope = 16, s.v_head = 32;
    s.n_layer_dense_lead = 1, s.n_expert = 8, s.n_expert_used = 2, s.n_expert_shared = 1, s.n_ff_exp = 64;
    s.expert_weights_scale = 2.5f;
    p.push_back(s);
  }
  {
    // The golden bailingmoe3 (tests/data/golden/bailingmoe3, scripts/golden/make_bailingmoe3.py):
    // layers 0-2 and 4 KDA (4 heads x 32, full-rank safe gate, lower bound -5), layer 3 MLA with
    // NORM RoPE and a head-wise output gate; a dense first layer, 16 experts in 4 groups (2 used)
    // top-4 + 1 shared (64 wide), scale 2.5. Its fifth layer is KDA (mla_tail 0), unlike
    // ling3-8b's rule, which would make it MLA.
    SynthShape s = kda_hybrid("bailingmoe3", "tiny",
                              "KDA + gated MLA: n_embd 128, 5 layers (MLA at 3), KDA 4x32 heads, kv_lora 64; 1 dense "
                              "(FFN 256), 16 experts top-4 in 4 groups (2 used) + shared (FFN 64), sigmoid");
    s.n_ctx_train = 512, s.n_embd = 128, s.n_layer = 5, s.n_head = 4, s.n_ff = 256, s.rms_eps = 1e-6f;
    s.rope_base = 1e4f, s.kda_head_dim = 32, s.mla_tail = 0, s.kda_gate_lower_bound = -5.0f;
    s.kv_lora_rank = 64, s.qk_nope = 32, s.qk_rope = 16, s.v_head = 32;
    s.n_layer_dense_lead = 1, s.n_expert = 16, s.n_expert_used = 4, s.n_expert_shared = 1, s.n_ff_exp = 32;
    s.n_ff_shexp = 64, s.n_group = 4, s.n_group_used = 2, s.expert_weights_scale = 2.5f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("llama", "llama2-7b", "llama",
                         "Llama-2-7B: n_embd 4096, 32 layers, 32 heads, FFN 11008, vocab 32000");
    s.n_vocab = 32000, s.n_ctx_train = 4096, s.n_embd = 4096, s.n_layer = 32, s.n_head = 32, s.n_head_kv = 32;
    s.head_dim = 128, s.n_ff = 11008, s.rms_eps = 1e-5f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    SynthShape s =
        dense("mixtral", "mixtral-8x7b", "llama",
              "Mixtral-8x7B: n_embd 4096, 32 layers, 32 heads, 8 kv, 8 experts top-2, FFN 14336, vocab 32000");
    s.n_vocab = 32000, s.n_ctx_train = 32768, s.n_embd = 4096, s.n_layer = 32, s.n_head = 32, s.n_head_kv = 8;
    s.head_dim = 128, s.n_expert = 8, s.n_expert_used = 2, s.n_ff = s.n_ff_exp = 14336;
    s.rms_eps = 1e-5f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s = dense("qwen3", "qwen3-0.6b", "qwen3",
                         "Qwen3-0.6B: n_embd 1024, 28 layers, 16 heads x 128, 8 kv, FFN 3072, vocab 151936");
    s.n_vocab = 151936, s.n_ctx_train = 40960, s.n_embd = 1024, s.n_layer = 28, s.n_head = 16, s.n_head_kv = 8;
    s.head_dim = 128, s.n_ff = 3072, s.rms_eps = 1e-6f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s =
        dense("qwen3moe", "qwen3-30b-a3b", "qwen3moe",
              "Qwen3-30B-A3B: n_embd 2048, 48 layers, 32 heads x 128, 4 kv, 128 experts top-8, expert FFN 768, "
              "vocab 151936");
    s.n_vocab = 151936, s.n_ctx_train = 40960, s.n_embd = 2048, s.n_layer = 48, s.n_head = 32, s.n_head_kv = 4;
    s.head_dim = 128, s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768, s.n_ff = 6144;
    s.rms_eps = 1e-6f, s.rope_base = 1e6f;
    p.push_back(s);
  }
  {
    SynthShape s =
        dense("olmoe", "olmoe-1b-7b", "olmoe",
              "OLMoE-1B-7B: n_embd 2048, 16 layers, 16 heads, 64 experts top-8, expert FFN 1024, vocab 50304");
    s.n_vocab = 50304, s.n_ctx_train = 4096, s.n_embd = 2048, s.n_layer = 16, s.n_head = 16, s.n_head_kv = 16;
    s.head_dim = 128, s.n_expert = 64, s.n_expert_used = 8, s.n_ff = s.n_ff_exp = 1024;
    s.rms_eps = 1e-5f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    // Qwen3.5-35B-A3B (config.json text_config): layer_types linear_attention x3 + full_attention,
    // full_attention_interval 4; attention 16 heads x 256, 2 kv, partial_rotary_factor 0.25 (64
    // dims), mrope_section [11, 11, 10]; linear_num_key_heads 16, linear_num_value_heads 32,
    // linear_key/value_head_dim 128, linear_conv_kernel_dim 4; 256 experts top-8,
    // moe_intermediate_size 512, shared_expert_intermediate_size 512; vocab_size 248320. The
    // config has no dense intermediate_size; feed_forward_length is written as the shared
    // expert's width (Sluice reads the key; llama.cpp's qwen35moe path does not use it).
    SynthShape s =
        qwen35("qwen3.5-35b-a3b",
               "Qwen3.5-35B-A3B: n_embd 2048, 40 layers (attention every 4th), 16 heads x 256, 2 kv; DeltaNet "
               "16 k / 32 v heads x 128; 256 experts top-8 + shared (FFN 512), vocab 248320");
    s.n_vocab = 248320, s.n_ctx_train = 262144, s.n_embd = 2048, s.n_layer = 40, s.n_head = 16, s.n_head_kv = 2;
    s.head_dim = 256, s.n_ff = 512, s.n_rot = 64, s.rope_sections = {11, 11, 10, 0};
    s.ssm_conv_kernel = 4, s.ssm_n_group = 16, s.ssm_dt_rank = 32, s.ssm_d_state = 128, s.ssm_d_inner = 32 * 128;
    s.n_expert = 256, s.n_expert_used = 8, s.n_ff_exp = 512, s.n_ff_shexp = 512;
    p.push_back(s);
  }
  {
    // Qwen3-Next-80B-A3B (config.json): 48 layers, full_attention_interval 4; attention 16 heads
    // x 256, 2 kv, partial_rotary_factor 0.25 (64 dims), rope_theta 1e7, plain RoPE (no mrope);
    // linear_num_key_heads 16, linear_num_value_heads 32, linear_key/value_head_dim 128,
    // linear_conv_kernel_dim 4; 512 experts top-10, moe_intermediate_size 512,
    // shared_expert_intermediate_size 512; intermediate_size 5120 (feed_forward_length, read by
    // neither engine here: both take the expert widths from their own keys); vocab_size 151936
    // (the Qwen3 tokenizer's; Qwen3.5's 248320 is a newer one); max_position_embeddings 262144.
    SynthShape s =
        qwen3next("qwen3-next-80b-a3b",
                  "Qwen3-Next-80B-A3B: n_embd 2048, 48 layers (attention every 4th), 16 heads x 256, 2 kv; DeltaNet "
                  "16 k / 32 v heads x 128; 512 experts top-10 + shared (FFN 512), vocab 151936");
    s.n_vocab = 151936, s.n_ctx_train = 262144, s.n_embd = 2048, s.n_layer = 48, s.n_head = 16, s.n_head_kv = 2;
    s.head_dim = 256, s.n_ff = 5120, s.n_rot = 64;
    s.ssm_conv_kernel = 4, s.ssm_n_group = 16, s.ssm_dt_rank = 32, s.ssm_d_state = 128, s.ssm_d_inner = 32 * 128;
    s.n_expert = 512, s.n_expert_used = 10, s.n_ff_exp = 512, s.n_ff_shexp = 512;
    p.push_back(s);
  }
  {
    // YaRN rope scaling of the real model (factor 40 over 4096) is not written: decode speed
    // does not depend on it, and both engines then run plain RoPE on this file (YaRN itself is
    // checked on tests/data/golden/deepseek2-yarn).
    SynthShape s = dense("deepseek2", "deepseek-v2-lite", "deepseek2",
                         "DeepSeek-V2-Lite: n_embd 2048, 27 layers (1 dense, FFN 10944), 16 heads, kv_lora 512, "
                         "64 experts top-6 + 2 shared (FFN 1408), vocab 102400");
    s.n_vocab = 102400, s.n_ctx_train = 163840, s.n_embd = 2048, s.n_layer = 27, s.n_head = 16, s.n_ff = 10944;
    s.n_layer_dense_lead = 1, s.n_expert = 64, s.n_expert_used = 6, s.n_expert_shared = 2, s.n_ff_exp = 1408;
    s.kv_lora_rank = 512, s.qk_nope = 128, s.qk_rope = 64, s.v_head = 128;
    s.rms_eps = 1e-6f, s.rope_base = 1e4f;
    p.push_back(s);
  }
  {
    // Kimi-Linear-48B-A3B-Instruct (config.json, as given in the Sluice issue 14 brief; the file
    // itself is not reachable here): hidden_size 2304, 27 layers; linear_attn_config
    // full_attn_layers (1-based) [4, 8, 12, 16, 20, 24, 27] = MLA at 0-based 3, 7, ..., 23 and the
    // last layer 26 (mla_interval 4, mla_tail 1; mlx-lm kimi_linear.py: a layer is KDA when
    // (idx + 1) is in kda_layers), KDA num_heads 32 x head_dim 128, short_conv_kernel_size 4;
    // MLA 32 heads, q_lora_rank null (one attn_q), kv_lora_rank 512, qk_nope 128, qk_rope 64,
    // v_head 128, no RoPE (llama.cpp's kimi-linear graph; no rope.freq_base written, as its
    // converter's golden); num_experts 256, num_experts_per_token 8, moe_intermediate_size 1024,
    // num_shared_experts 1, first_k_dense_replace 1 with intermediate_size 9216,
    // moe_router_activation_func sigmoid, moe_renormalize; vocab_size 163840.
    // Not knowable here (no config.json, no network): routed_scaling_factor (2.446 is written,
    // the value recalled for this model; mlx-lm's default is 1.0), rms_norm_eps (1e-5, as the
    // golden), the context length (1048576, the 1M context the model card
    // advertises); expert groups are not written (num_expert_group 1, as the converter).
    SynthShape s = kda_hybrid("kimi-linear", "kimi-linear-48b-a3b",
                              "Kimi-Linear-48B-A3B: n_embd 2304, 27 layers (MLA at 3, 7, ..., 23, 26), KDA 32x128 "
                              "heads, kv_lora 512; 1 dense (FFN 9216), 256 experts top-8 + 1 shared (FFN 1024), vocab "
                              "163840");
    s.n_vocab = 163840, s.n_ctx_train = 1048576, s.n_embd = 2304, s.n_layer = 27, s.n_head = 32, s.n_ff = 9216;
    s.rms_eps = 1e-5f, s.kda_head_dim = 128, s.mla_tail = 1;
    s.kv_lora_rank = 512, s.qk_nope = 128, s.qk_rope = 64, s.v_head = 128;
    s.n_layer_dense_lead = 1, s.n_expert = 256, s.n_expert_used = 8, s.n_expert_shared = 1, s.n_ff_exp = 1024;
    s.expert_weights_scale = 2.446f;
    p.push_back(s);
  }
  {
    // Ling 3 8B "tiny" hybrid (HF BailingMoeV3ForCausalLM): the defaults of mlx-lm 0.32.2's
    // bailing_moe_v3.py ModelArgs, which llama.cpp (src/models/bailingmoe3.cpp at 0c1e5709) names
    // LLM_TYPE_7_9B_A1_3B for exactly 24 layers, n_embd 1536 and 128 experts: hidden_size 1536,
    // 24 layers, layer_group_size 4 (MLA at 3, 7, ..., 23; _is_kda_layer also makes the layers
    // after the last whole group MLA: mla_tail 2), 16 heads, KDA head_dim 128,
    // short_conv_kernel_size 4, kda_safe_gate, kda_lower_bound -5, no_kda_lora (full-rank
    // gates); MLA q_lora_rank 256, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128,
    // rope_interleave (NORM RoPE), rope_theta 6e6; 128 experts top-8, moe_intermediate_size 512,
    // 1 shared expert of 512 (moe_shared_expert_intermediate_size), first_k_dense_replace 1 with
    // intermediate_size 4608, n_group 8, topk_group 4, routed_scaling_factor 2.5, always
    // renormalised; rms_norm_eps 1e-6; vocab_size 157184; max_position_embeddings 131072.
    // Not knowable here: whether the released config.json differs from these defaults, and its
    // rope_scaling (none written; Sluice refuses YaRN for bailingmoe3 until a golden pins how
    // llama.cpp scales its MLA) and SwiGLU clamps (none written; models/bailingmoe3 runs files that have them).
    SynthShape s = kda_hybrid("bailingmoe3", "ling3-8b",
                              "Ling 3 8B (A1.3B): n_embd 1536, 24 layers (MLA every 4th), KDA 16x128 heads, q_lora "
                              "256, kv_lora 512; 1 dense (FFN 4608), 128 experts top-8 in 8 groups (4 used) + shared "
                              "(FFN 512), vocab 157184");
    s.n_vocab = 157184, s.n_ctx_train = 131072, s.n_embd = 1536, s.n_layer = 24, s.n_head = 16, s.n_ff = 4608;
    s.rms_eps = 1e-6f, s.rope_base = 6e6f, s.kda_head_dim = 128, s.mla_tail = 2, s.kda_gate_lower_bound = -5.0f;
    s.q_lora_rank = 256, s.kv_lora_rank = 512, s.qk_nope = 128, s.qk_rope = 64, s.v_head = 128;
    s.n_layer_dense_lead = 1, s.n_expert = 128, s.n_expert_used = 8, s.n_expert_shared = 1, s.n_ff_exp = 512;
    s.n_ff_shexp = 512, s.n_group = 8, s.n_group_used = 4, s.expert_weights_scale = 2.5f;
    p.push_back(s);
  }
  return p;
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

const std::vector<SynthShape>& synth_presets() {
  static const std::vector<SynthShape> presets = make_presets();
  return presets;
}

const std::vector<std::string>& synth_type_names() {
  static const std::vector<std::string> names = {"f32",  "f16",  "q8_0",   "q4_0",   "q2_k",  "q3_k",
                                                 "q4_k", "q6_k", "q4_k_m", "iq4_nl", "iq4_xs"};
  return names;
}

SynthShape synth_resolve_shape(const SynthOptions& opt, int64_t tokenizer_vocab) {
  const auto& presets = synth_presets();
  std::vector<std::string> arches, preset_names;
  for (const auto& s : presets) {
    if (std::find(arches.begin(), arches.end(), s.arch) == arches.end()) arches.push_back(s.arch);
    if (std::find(preset_names.begin(), preset_names.end(), s.preset) == preset_names.end())
      preset_names.push_back(s.preset);
  }
  if (!opt.arch.empty() && std::find(arches.begin(), arches.end(), opt.arch) == arches.end())
    fail("synth: unknown architecture '", opt.arch, "' (known: ", join_names(arches), ")");
  const SynthShape* found = nullptr;
  int matches = 0;
  for (const auto& s : presets) {
    if (s.preset != opt.preset || (!opt.arch.empty() && s.arch != opt.arch)) continue;
    found = &s;
    ++matches;
  }
  if (!found) {
    for (const auto& s : presets)
      if (s.preset == opt.preset)
        fail("synth: preset '", opt.preset, "' is a ", s.arch, " model, not ", opt.arch, " (see --list-presets)");
    fail("synth: unknown preset '", opt.preset, "' (known: ", join_names(preset_names), "; see --list-presets)");
  }
  if (matches > 1)
    fail("synth: preset '", opt.preset, "' exists for several architectures; pass --arch (", join_names(arches), ")");

  SynthShape s = *found;
  if (opt.layers < 0) fail("synth: --layers ", opt.layers, " must be positive");
  if (opt.layers > 0) {
    if (opt.layers <= s.n_layer_dense_lead)
      fail("synth: --layers ", opt.layers, " leaves no MoE layer (", s.preset, " has ", s.n_layer_dense_lead,
           " leading dense layer", s.n_layer_dense_lead == 1 ? "" : "s", ")");
    // Sluice (like llama.cpp, whose recurrent_layer_arr would mark every layer) wants at least
    // one attention layer: the interval must not exceed block_count.
    if (s.hybrid() && opt.layers < s.full_attention_interval)
      fail("synth: --layers ", opt.layers, " leaves no attention layer (", s.preset, " has one every ",
           s.full_attention_interval, " layers)");
    s.n_layer = opt.layers;
    if (s.kda()) {
      bool any_mla = false;
      for (int64_t l = 0; l < s.n_layer; ++l) any_mla = any_mla || s.is_mla_layer(l);
      if (!any_mla)
        fail("synth: --layers ", opt.layers, " leaves no attention layer (", s.preset, " has an MLA layer every ",
             s.mla_interval, " layers)");
    }
  }
  if (tokenizer_vocab <= 0) fail("synth: the tokenizer has no tokens");
  if (opt.vocab < 0) fail("synth: --vocab ", opt.vocab, " must be positive");
  if (opt.vocab > 0) s.n_vocab = opt.vocab;
  if (s.n_vocab == 0) s.n_vocab = tokenizer_vocab;
  if (s.n_vocab < tokenizer_vocab)
    fail("synth: the tokenizer has ", tokenizer_vocab, " tokens, more than the model's vocabulary of ", s.n_vocab,
         " (a vocabulary can be padded, never cut; pass --vocab ", tokenizer_vocab, " or a smaller tokenizer)");
  if (s.n_vocab > (int64_t{1} << 24)) fail("synth: vocabulary ", s.n_vocab, " is too large");
  return s;
}

}  // namespace sluice
