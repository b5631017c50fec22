// models/mla: multi-head latent attention (MLA, arXiv:2405.04434 §2.1) in its "absorbed" form,
// as llama.cpp runs files with split attn_k_b / attn_v_b; shared by deepseek2 (with RoPE on the
// k_rope/q_rope dims) and kimi-linear (whose MLA layers have no RoPE: the same dims, unrotated).
// The cache keeps one latent row per token, [c_kv | k_rope], c_kv = RMSNorm(W_kv_a·x)[:kv_lora].
// Per head, q_nope is mapped into the latent space by W_k_b (so q·k = q_nope·(W_k_b^T c) +
// q_rope·k_rope), attention runs over the latent rows with V = c_kv, and W_v_b maps the latent
// output back to the head's value space.
#pragma once
#include <cstdint>
#include <vector>

#include "format/gguf.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"

namespace sluice {

// The KV cache holds one latent "head" per token: [compressed kv (kv_lora) | shared k_rope
// (n_rot)], so head_count_kv = 1, key_length = kv_lora + n_rot and value_length = kv_lora in
// the metadata.
struct MlaHparams {
  int64_t q_lora_rank = 0;   // {arch}.attention.q_lora_rank (0: q comes from one attn_q matrix)
  int64_t kv_lora_rank = 0;  // {arch}.attention.kv_lora_rank: width of the compressed kv latent
  int64_t qk_nope = 0;       // key_length_mla - n_rot: per-head q/k dims without position
  int64_t v_head = 0;        // {arch}.attention.value_length_mla: per-head value dims
  bool rope = true;          // rotate the n_rot position dims (deepseek2); kimi-linear: false
};

struct MlaWeights final : ArchLayerWeights {
  const TensorView* wq = nullptr;         // [n_embd, n_head*(qk_nope+n_rot)] (no q_lora)
  const TensorView* wq_a = nullptr;       // [n_embd, q_lora]
  const TensorView* q_a_norm = nullptr;   // [q_lora]
  const TensorView* wq_b = nullptr;       // [q_lora, n_head*(qk_nope+n_rot)], each head [nope | rope]
  const TensorView* wkv_a = nullptr;      // [n_embd, kv_lora+n_rot]: [compressed kv | k_rope]
  const TensorView* kv_a_norm = nullptr;  // [kv_lora]
  const TensorView* wk_b = nullptr;       // [qk_nope, kv_lora, n_head]: per head a [kv_lora][nope] matrix
  const TensorView* wv_b = nullptr;       // [kv_lora, v_head, n_head]: per head a [v_head][kv_lora] matrix
};

// Reads and checks the MLA keys against the core hyperparameters (head_count_kv 1, key_length
// = kv_lora + n_rot, value_length = kv_lora); throws naming the file and the key.
MlaHparams mla_read_hparams(const GgufFile& f, const Hparams& hp);
// Layer l's MLA tensors; also binds attn_output into lw.wo.
void mla_bind(const GgufFile& f, const Hparams& hp, const MlaHparams& mla, int64_t l, LayerWeights& lw);

// Buffers of one forward step's MLA layers, sized once for T tokens.
struct MlaScratch {
  ActBuf<float> qa, q, kv_a, q_pe, k_pe, k_lat, c_kv, q_lat, head_in, head_out, attn_lat;
  void alloc(Backend& be, const Hparams& hp, const MlaHparams& mla, int64_t n_tok);
};

// Layer l's attention on normed input h [T][n_embd] -> attn [T][n_head*v_head] (before W_o).
void mla_attention(const Hparams& hp, const MlaHparams& mla, const MlaWeights& w, Backend& be, Memory& mem,
                   const Batch& b, const std::vector<BatchRun>& runs, int64_t l, const float* h, float* attn,
                   MlaScratch& s, const TensorHook* hook);

}  // namespace sluice
