// models/deepseek2: the DeepSeek-V2 forward — multi-head latent attention (MLA) in its
// "absorbed" form, as llama.cpp runs files with split attn_k_b / attn_v_b — then a dense FFN
// for the leading layers and sigmoid-gated, group-limited MoE with a shared expert after.
// MLA (arXiv:2405.04434, §2.1): the cache keeps one latent row per token, [c_kv | k_rope],
// c_kv = RMSNorm(W_kv_a·x)[:kv_lora]. Per head, q_nope is mapped into the latent space by
// W_k_b (so q·k = q_nope·(W_k_b^T c) + q_rope·k_rope), attention runs over the latent rows
// with V = c_kv, and W_v_b maps the latent output back to the head's value space.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "models/blocks.h"
#include "models/model.h"
#include "memory/memory.h"

namespace sluice {

void Model::forward_deepseek2(Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                              float* logits, const TensorHook* hook) const {
  const Hparams& hp = hp_;
  const MlaHparams& mla = hp.mla;
  // Legend: T tokens, E n_embd, H heads, N qk_nope, R rope dims, L kv_lora, V v_head.
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, N = mla.qk_nope, R = hp.n_rot, L = mla.kv_lora_rank,
                V = mla.v_head;
  auto report = [&](std::string_view name, int layer, const float* data, int64_t rows, int64_t cols) {
    if (hook && *hook) (*hook)(name, layer, data, rows, cols);
  };
  std::vector<float> x(T * E), h(T * E), o(T * E);
  std::vector<float> qa(T * std::max<int64_t>(mla.q_lora_rank, 1)), q(T * H * (N + R)), kv_a(T * (L + R));
  std::vector<float> q_pe(T * H * R), k_pe(T * R), k_lat(T * (L + R)), c_kv(T * L), q_lat(T * H * (L + R));
  std::vector<float> head_in(T * std::max(N, L)), head_out(T * std::max(L, V)), attn_lat(T * H * L), attn(T * H * V);
  const int32_t* pos = b.pos.data();
  // The latent cache has one "head" per position: K row = [c_kv | k_rope], V row = c_kv.
  const AttendShape shape{H, 1, L + R, L, 1.0f / std::sqrt(static_cast<float>(N + R))};

  embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& w = layers_[l];
    const int il = static_cast<int>(l);
    be.rms_norm(x.data(), static_cast<const float*>(w.attn_norm->data), h.data(), T, E, hp.rms_eps);
    report("attn_norm", il, h.data(), T, E);

    // Queries: low-rank (q_a -> norm -> q_b) or one matrix; each head is [nope | rope].
    if (w.wq_a) {
      be.matmul(*w.wq_a, h.data(), qa.data(), T);
      be.rms_norm(qa.data(), static_cast<const float*>(w.q_a_norm->data), qa.data(), T, mla.q_lora_rank, hp.rms_eps);
      be.matmul(*w.wq_b, qa.data(), q.data(), T);
    } else {
      be.matmul(*w.wq, h.data(), q.data(), T);
    }
    report("q", il, q.data(), T * H, N + R);

    // Latent kv: [c_kv | k_rope]; c_kv is normed, k_rope is one RoPE head shared by all heads.
    be.matmul(*w.wkv_a, h.data(), kv_a.data(), T);
    for (int64_t t = 0; t < T; ++t) std::copy_n(kv_a.data() + t * (L + R), L, c_kv.data() + t * L);
    be.rms_norm(c_kv.data(), static_cast<const float*>(w.kv_a_norm->data), c_kv.data(), T, L, hp.rms_eps);
    for (int64_t t = 0; t < T; ++t) std::copy_n(kv_a.data() + t * (L + R) + L, R, k_pe.data() + t * R);
    be.rope(k_pe.data(), pos, T, 1, R, R, hp.rope_base, hp.rope_mode);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(c_kv.data() + t * L, L, k_lat.data() + t * (L + R));
      std::copy_n(k_pe.data() + t * R, R, k_lat.data() + t * (L + R) + L);
    }
    report("kv_cmpr", il, c_kv.data(), T, L);
    report("k_pe", il, k_pe.data(), T, R);

    // Per head: q_rope rotated; q_nope absorbed into the latent space through W_k_b.
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) std::copy_n(q.data() + (t * H + hh) * (N + R) + N, R, q_pe.data() + (t * H + hh) * R);
    be.rope(q_pe.data(), pos, T, H, R, R, hp.rope_base, hp.rope_mode);
    report("q_pe", il, q_pe.data(), T * H, R);
    for (int64_t hh = 0; hh < H; ++hh) {
      for (int64_t t = 0; t < T; ++t) std::copy_n(q.data() + (t * H + hh) * (N + R), N, head_in.data() + t * N);
      be.matmul(w.wk_b->slice2d(hh), head_in.data(), head_out.data(), T);  // [N] -> [L]
      for (int64_t t = 0; t < T; ++t) {
        float* dst = q_lat.data() + (t * H + hh) * (L + R);
        std::copy_n(head_out.data() + t * L, L, dst);
        std::copy_n(q_pe.data() + (t * H + hh) * R, R, dst + L);
      }
    }
    report("q_absorbed", il, q_lat.data(), T * H, L + R);

    // Attention over the latent cache: K row = [c_kv | k_rope], V row = c_kv.
    attend_batch(be, mem, runs, l, shape, q_lat.data(), k_lat.data(), c_kv.data(), attn_lat.data());
    report("kqv_latent", il, attn_lat.data(), T * H, L);
    for (int64_t hh = 0; hh < H; ++hh) {
      for (int64_t t = 0; t < T; ++t) std::copy_n(attn_lat.data() + (t * H + hh) * L, L, head_in.data() + t * L);
      be.matmul(w.wv_b->slice2d(hh), head_in.data(), head_out.data(), T);  // [L] -> [V]
      for (int64_t t = 0; t < T; ++t) std::copy_n(head_out.data() + t * V, V, attn.data() + (t * H + hh) * V);
    }
    report("kqv_out", il, attn.data(), T, H * V);
    attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  output_head(be, x.data(), b, logits, hook);
}

}  // namespace sluice
