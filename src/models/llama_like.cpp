// models/llama_like: the forward of the llama-like decoder family (llama incl. Mixtral,
// qwen3, qwen3moe, olmoe): pre-norm attention with RoPE and grouped-query heads, then a
// SwiGLU FFN (dense, or a mixture of experts), each added to the residual stream. Reads top
// to bottom like the paper; every block reports its output through the hook under llama.cpp's
// callback names so backends can be diffed layer by layer.
#include <cmath>
#include <vector>

#include "models/blocks.h"
#include "models/model.h"
#include "memory/memory.h"

namespace sluice {

void Model::forward_llama_like(Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs,
                               float* logits, const TensorHook* hook) const {
  const Hparams& hp = hp_;
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, Hkv = hp.n_head_kv, Dk = hp.head_dim_k, Dv = hp.head_dim_v;
  auto report = [&](std::string_view name, int layer, const float* data, int64_t rows, int64_t cols) {
    if (hook && *hook) (*hook)(name, layer, data, rows, cols);
  };
  std::vector<float> x(T * E), h(T * E), q(T * H * Dk), k(T * Hkv * Dk), v(T * Hkv * Dv), attn(T * H * Dv), o(T * E);
  const int32_t* pos = b.pos.data();
  const AttendShape shape{H, Hkv, Dk, Dv, 1.0f / std::sqrt(static_cast<float>(Dk))};

  embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& w = layers_[l];
    const int il = static_cast<int>(l);

    // Attention: norm -> q, k, v projections -> (q/k norm) -> RoPE -> causal GQA over the cache.
    be.rms_norm(x.data(), static_cast<const float*>(w.attn_norm->data), h.data(), T, E, hp.rms_eps);
    report("attn_norm", il, h.data(), T, E);
    be.matmul(*w.wq, h.data(), q.data(), T);
    be.matmul(*w.wk, h.data(), k.data(), T);
    be.matmul(*w.wv, h.data(), v.data(), T);
    report("Qcur", il, q.data(), T, H * Dk);
    report("Kcur", il, k.data(), T, Hkv * Dk);
    report("Vcur", il, v.data(), T, Hkv * Dv);
    if (hp.qk_norm_full) {  // olmoe: one norm over all heads
      be.rms_norm(q.data(), static_cast<const float*>(w.q_norm->data), q.data(), T, H * Dk, hp.rms_eps);
      be.rms_norm(k.data(), static_cast<const float*>(w.k_norm->data), k.data(), T, Hkv * Dk, hp.rms_eps);
      report("Qcur_normed", il, q.data(), T, H * Dk);
      report("Kcur_normed", il, k.data(), T, Hkv * Dk);
    }
    if (hp.qk_norm_per_head) {  // qwen3: one norm per head
      be.rms_norm(q.data(), static_cast<const float*>(w.q_norm->data), q.data(), T * H, Dk, hp.rms_eps);
      be.rms_norm(k.data(), static_cast<const float*>(w.k_norm->data), k.data(), T * Hkv, Dk, hp.rms_eps);
      report("Qcur_normed", il, q.data(), T * H, Dk);
      report("Kcur_normed", il, k.data(), T * Hkv, Dk);
    }
    be.rope(q.data(), pos, T, H, Dk, hp.n_rot, hp.rope_base, hp.rope_mode);
    be.rope(k.data(), pos, T, Hkv, Dk, hp.n_rot, hp.rope_base, hp.rope_mode);
    report("Qcur_rope", il, q.data(), T * H, Dk);
    report("Kcur_rope", il, k.data(), T * Hkv, Dk);
    attend_batch(be, mem, runs, l, shape, q.data(), k.data(), v.data(), attn.data());
    report("kqv_out", il, attn.data(), T, H * Dv);
    attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  output_head(be, x.data(), b, logits, hook);
}

}  // namespace sluice
