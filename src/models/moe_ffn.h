// models/moe_ffn: the one feed-forward block of every architecture. A Mixture-of-Experts
// FFN routes each token to k of n experts (router -> gating -> top-k -> weights) and sums
// the chosen experts' SwiGLU outputs; a dense FFN is the same block with one always-on
// expert of weight 1. Experts are reached through ExpertHandle so the storage policy
// (resident, mmap, streamed) can change without touching this code or the models.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "memory/expert_store.h"
#include "models/model.h"

namespace sluice {

// The routing decision for one batch: for token t, experts[t*k + j] with weights[t*k + j],
// in descending selection score (llama.cpp's order).
struct MoeRouting {
  int64_t k = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// Computes router probabilities (written to `probs`, [T][n_expert]) and the top-k choice from
// router logits [T][n_expert] through Backend::moe_route (whose default every backend shares,
// so backends differ only in the arithmetic that produced the logits). selection_bias
// (deepseek2 exp_probs_b, [n_expert]) is added to the probs for choosing experts only; the
// weights stay the unbiased probs.
MoeRouting moe_route(Backend& be, const MoeOptions& opt, const float* logits, float* probs, int64_t n_tok,
                     const float* selection_bias = nullptr);

// The distinct experts a routing uses, ascending, with the number of tokens sent to each.
std::vector<ExpertUse> moe_expert_uses(const MoeRouting& r);

// out[t] = Σ_j w_tj · down_e(silu(gate_e·x_t) ⊙ up_e·x_t) over the chosen experts; the
// tokens routed to one expert are gathered and run as one batch (grouped GEMM). Experts come
// from `batch` in the order they become ready (a streaming store serves hits while misses
// load); each expert's output is kept and the sum runs in ascending expert order once all are
// done, so the result is bit-identical under every expert store policy. One token (decode)
// from a store whose views outlive next() (resident, mmap) goes to Backend::moe_ffn_token
// with the experts in ascending order instead: the same sum, in one pass.
// Batches of 2 or more tokens from such a store (several sequences decoding together, prompt
// chunks, prefill) go to Backend::moe_ffn_batch, all experts in one call: the cpu backend runs
// it as three parallel jobs where the grouped path wakes the pool about six times per expert
// (pp512 of a 256-expert Qwen3.5-MoE synth: experts 1075 -> 745 ms per batch, Zen 4). A
// streaming store keeps the grouped path, whose buffers are kept per thread for prefill.
// swiglu_limit > 0 clamps every expert's SwiGLU (Backend::swiglu); 0: none.
void moe_experts(Backend& be, ExpertBatch& batch, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd, float swiglu_limit);
// The same, acquiring the layer's experts from `experts` first.
void moe_experts(Backend& be, ExpertSource& experts, int layer, const MoeRouting& r, const float* x, float* out,
                 int64_t n_tok, int64_t n_embd, float swiglu_limit);

// A dense SwiGLU FFN: the single-expert case (swiglu_limit as Backend::swiglu's).
void ffn_swiglu(Backend& be, const ExpertWeights& w, const float* x, float* out, int64_t n_tok, float swiglu_limit);

}  // namespace sluice
