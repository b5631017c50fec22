// models/llama_like: the forward of the llama-like decoder family (llama incl. Mixtral,
// qwen3, qwen3moe, olmoe): pre-norm attention with RoPE and grouped-query heads, then a
// SwiGLU FFN (dense, or a mixture of experts), each added to the residual stream. Reads top
// to bottom like the paper; every block reports its output through the hook under llama.cpp's
// callback names so backends can be diffed layer by layer.
#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"
#include "memory/memory.h"
#include "models/arch.h"
#include "models/blocks.h"
#include "models/model.h"

namespace sluice {

namespace {

// The family's own keys: each name fixes the RoPE pair layout and the q/k norm; the experts'
// width and weight normalisation follow llama.cpp per name.
void read_hparams(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  const bool qwen3 = hp.arch == "qwen3" || hp.arch == "qwen3moe", olmoe = hp.arch == "olmoe";
  if (qwen3 || olmoe) hp.rope_mode = RopeMode::neox;
  hp.qk_norm_per_head = qwen3;
  hp.qk_norm_full = olmoe;
  MoeOptions& moe = hp.moe;
  if (moe.n_expert > 0) {
    // llama with expert_count is the Mixtral layout; its feed_forward_length is the per-expert
    // width. qwen3moe has expert_feed_forward_length (llama.cpp falls back to n_ff / n_expert_used).
    hp.n_ff_exp = f.get_u32_or(a + "expert_feed_forward_length",
                               static_cast<uint32_t>(hp.arch == "qwen3moe" ? hp.n_ff[0] / moe.n_expert_used
                                                                           : hp.n_ff[0]));
    moe.norm_weights = !olmoe;  // olmoe uses the softmax probabilities as they are
  } else if (hp.arch == "qwen3moe" || olmoe) {
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  }
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& w) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t E = hp.n_embd, q_w = hp.n_head * hp.head_dim_k, k_w = hp.n_head_kv * hp.head_dim_k,
                v_w = hp.n_head_kv * hp.head_dim_v;
  w.wq = bind_tensor(f, p + "attn_q.weight", {E, q_w});
  w.wk = bind_tensor(f, p + "attn_k.weight", {E, k_w});
  w.wv = bind_tensor(f, p + "attn_v.weight", {E, v_w});
  w.wo = bind_tensor(f, p + "attn_output.weight", {hp.n_head * hp.head_dim_v, E});
  if (hp.qk_norm_per_head) {
    w.q_norm = bind_tensor(f, p + "attn_q_norm.weight", {hp.head_dim_k});
    w.k_norm = bind_tensor(f, p + "attn_k_norm.weight", {hp.head_dim_k});
  }
  if (hp.qk_norm_full) {
    w.q_norm = bind_tensor(f, p + "attn_q_norm.weight", {q_w});
    w.k_norm = bind_tensor(f, p + "attn_k_norm.weight", {k_w});
  }
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const int64_t T = b.size(), E = hp.n_embd, H = hp.n_head, Hkv = hp.n_head_kv, Dk = hp.head_dim_k, Dv = hp.head_dim_v;
  auto report = [&](std::string_view name, int layer, const float* data, int64_t rows, int64_t cols) {
    report_to(hook, be, name, layer, data, rows, cols);
  };
  ActBuf<float> x = be.alloc<float>(T * E), h = be.alloc<float>(T * E), q = be.alloc<float>(T * H * Dk),
                k = be.alloc<float>(T * Hkv * Dk), v = be.alloc<float>(T * Hkv * Dv),
                attn = be.alloc<float>(T * H * Dv), o = be.alloc<float>(T * E);
  const int32_t* pos = b.pos.data();
  const AttendShape shape{H, Hkv, Dk, Dv, 1.0f / std::sqrt(static_cast<float>(Dk))};

  m.embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& w = m.layers()[static_cast<size_t>(l)];
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
    be.rope(q.data(), pos, T, H, Dk, hp.rope());
    be.rope(k.data(), pos, T, Hkv, Dk, hp.rope());
    report("Qcur_rope", il, q.data(), T * H, Dk);
    report("Kcur_rope", il, k.data(), T * Hkv, Dk);
    attend_batch(be, mem, runs, l, shape, q.data(), k.data(), v.data(), attn.data());
    report("kqv_out", il, attn.data(), T, H * Dv);
    m.attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  m.output_head(be, x.data(), b, logits, hook);
}

constexpr Arch entry(std::string_view name) {
  return {name, read_hparams, bind_attention, attention_memory_layout, forward};
}
constexpr Arch kArchs[] = {entry("llama"), entry("qwen3"), entry("qwen3moe"), entry("olmoe")};

}  // namespace

std::span<const Arch> llama_like_archs() { return kArchs; }

}  // namespace sluice
