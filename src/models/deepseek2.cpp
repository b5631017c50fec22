// models/deepseek2: the DeepSeek-V2 forward — multi-head latent attention (MLA) in its
// "absorbed" form, as llama.cpp runs files with split attn_k_b / attn_v_b — then a dense FFN
// for the leading layers and sigmoid-gated, group-limited MoE with a shared expert after.
// MLA (arXiv:2405.04434, §2.1): the cache keeps one latent row per token, [c_kv | k_rope],
// c_kv = RMSNorm(W_kv_a·x)[:kv_lora]. Per head, q_nope is mapped into the latent space by
// W_k_b (so q·k = q_nope·(W_k_b^T c) + q_rope·k_rope), attention runs over the latent rows
// with V = c_kv, and W_v_b maps the latent output back to the head's value space.
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "memory/memory.h"
#include "models/arch.h"
#include "models/blocks.h"
#include "models/model.h"

namespace sluice {
namespace {

// The KV cache holds one latent "head" per token: [compressed kv (kv_lora) | shared k_rope
// (n_rot)], so head_count_kv = 1, key_length = kv_lora + n_rot and value_length = kv_lora in
// the metadata.
struct MlaHparams final : ArchHparams {
  int64_t q_lora_rank = 0;   // {arch}.attention.q_lora_rank (0: q comes from one attn_q matrix)
  int64_t kv_lora_rank = 0;  // {arch}.attention.kv_lora_rank: width of the compressed kv latent
  int64_t qk_nope = 0;       // key_length_mla - n_rot: per-head q/k dims without position
  int64_t v_head = 0;        // {arch}.attention.value_length_mla: per-head value dims
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

void read_hparams(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  MoeOptions& moe = hp.moe;
  if (moe.n_expert == 0)
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  // Without expert_gating_func llama.cpp assumes softmax; the goldens' README requires it.
  if (!f.has(a + "expert_gating_func")) fail(f.path(), ": missing key '", a, "expert_gating_func'");
  hp.rope_mode = RopeMode::normal;
  hp.n_ff_exp = f.get_u32_or(a + "expert_feed_forward_length", static_cast<uint32_t>(hp.n_ff[0]));
  hp.n_layer_dense_lead = f.get_u32_or(a + "leading_dense_block_count", 0);
  hp.n_expert_shared = f.get_u32_or(a + "expert_shared_count", 0);
  moe.norm_weights = f.get_bool_or(a + "expert_weights_norm", false);
  moe.weights_scale = f.get_f32_or(a + "expert_weights_scale", 1.0f);
  moe.n_group = f.get_u32_or(a + "expert_group_count", 1);
  moe.n_group_used = f.get_u32_or(a + "expert_group_used_count", static_cast<uint32_t>(moe.n_group));
  if (moe.n_group <= 0 || moe.n_expert % moe.n_group != 0 || moe.n_group_used <= 0 || moe.n_group_used > moe.n_group)
    fail(f.path(), ": expert groups ", moe.n_group, " (used ", moe.n_group_used, ") do not divide ", moe.n_expert,
         " experts");
  auto mla = std::make_shared<MlaHparams>();
  mla->q_lora_rank = f.get_u32_or(a + "attention.q_lora_rank", 0);
  mla->kv_lora_rank = positive_key(f, a + "attention.kv_lora_rank", f.get_u32(a + "attention.kv_lora_rank"));
  if (!f.has(a + "attention.key_length_mla"))
    fail(f.path(), ": missing key '", a,
         "attention.key_length_mla' (files with the legacy unsplit attn_kv_b are not supported)");
  const int64_t k_mla = f.get_u32(a + "attention.key_length_mla");
  mla->qk_nope = k_mla - hp.n_rot;
  mla->v_head = positive_key(f, a + "attention.value_length_mla", f.get_u32(a + "attention.value_length_mla"));
  if (mla->qk_nope <= 0) fail(f.path(), ": key_length_mla ", k_mla, " must exceed rope.dimension_count ", hp.n_rot);
  if (hp.n_head_kv != 1 || hp.head_dim_k != mla->kv_lora_rank + hp.n_rot || hp.head_dim_v != mla->kv_lora_rank)
    fail(f.path(), ": MLA expects head_count_kv 1, key_length = kv_lora_rank + rope dims (",
         mla->kv_lora_rank + hp.n_rot, ") and value_length = kv_lora_rank (", mla->kv_lora_rank, "); got ",
         hp.n_head_kv, ", ", hp.head_dim_k, ", ", hp.head_dim_v);
  hp.ext = std::move(mla);
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& lw) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const MlaHparams& mla = hp.ext_as<MlaHparams>();
  const int64_t E = hp.n_embd, H = hp.n_head, q_w = H * (mla.qk_nope + hp.n_rot);
  auto w = std::make_shared<MlaWeights>();
  if (mla.q_lora_rank > 0) {
    w->wq_a = bind_tensor(f, p + "attn_q_a.weight", {E, mla.q_lora_rank});
    w->q_a_norm = bind_tensor(f, p + "attn_q_a_norm.weight", {mla.q_lora_rank});
    w->wq_b = bind_tensor(f, p + "attn_q_b.weight", {mla.q_lora_rank, q_w});
  } else {
    w->wq = bind_tensor(f, p + "attn_q.weight", {E, q_w});
  }
  w->wkv_a = bind_tensor(f, p + "attn_kv_a_mqa.weight", {E, mla.kv_lora_rank + hp.n_rot});
  w->kv_a_norm = bind_tensor(f, p + "attn_kv_a_norm.weight", {mla.kv_lora_rank});
  w->wk_b = bind_tensor(f, p + "attn_k_b.weight", {mla.qk_nope, mla.kv_lora_rank, H});
  w->wv_b = bind_tensor(f, p + "attn_v_b.weight", {mla.kv_lora_rank, mla.v_head, H});
  lw.wo = bind_tensor(f, p + "attn_output.weight", {H * mla.v_head, E});
  lw.ext = std::move(w);
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const MlaHparams& mla = hp.ext_as<MlaHparams>();
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

  m.embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& lw = m.layers()[static_cast<size_t>(l)];
    const MlaWeights& w = lw.ext_as<MlaWeights>();
    const int il = static_cast<int>(l);
    be.rms_norm(x.data(), static_cast<const float*>(lw.attn_norm->data), h.data(), T, E, hp.rms_eps);
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
    be.copy_2d(kv_a.data(), L + R, c_kv.data(), L, T, L);
    be.rms_norm(c_kv.data(), static_cast<const float*>(w.kv_a_norm->data), c_kv.data(), T, L, hp.rms_eps);
    be.copy_2d(kv_a.data() + L, L + R, k_pe.data(), R, T, R);
    be.rope(k_pe.data(), pos, T, 1, R, R, hp.rope_base, hp.rope_mode);
    be.copy_2d(c_kv.data(), L, k_lat.data(), L + R, T, L);
    be.copy_2d(k_pe.data(), R, k_lat.data() + L, L + R, T, R);
    report("kv_cmpr", il, c_kv.data(), T, L);
    report("k_pe", il, k_pe.data(), T, R);

    // Per head: q_rope rotated; q_nope absorbed into the latent space through W_k_b.
    be.copy_2d(q.data() + N, N + R, q_pe.data(), R, T * H, R);
    be.rope(q_pe.data(), pos, T, H, R, R, hp.rope_base, hp.rope_mode);
    report("q_pe", il, q_pe.data(), T * H, R);
    for (int64_t hh = 0; hh < H; ++hh) {
      be.copy_2d(q.data() + hh * (N + R), H * (N + R), head_in.data(), N, T, N);
      be.matmul(w.wk_b->slice2d(hh), head_in.data(), head_out.data(), T);  // [N] -> [L]
      be.copy_2d(head_out.data(), L, q_lat.data() + hh * (L + R), H * (L + R), T, L);
      be.copy_2d(q_pe.data() + hh * R, H * R, q_lat.data() + hh * (L + R) + L, H * (L + R), T, R);
    }
    report("q_absorbed", il, q_lat.data(), T * H, L + R);

    // Attention over the latent cache: K row = [c_kv | k_rope], V row = c_kv.
    attend_batch(be, mem, runs, l, shape, q_lat.data(), k_lat.data(), c_kv.data(), attn_lat.data());
    report("kqv_latent", il, attn_lat.data(), T * H, L);
    for (int64_t hh = 0; hh < H; ++hh) {
      be.copy_2d(attn_lat.data() + hh * L, H * L, head_in.data(), L, T, L);
      be.matmul(w.wv_b->slice2d(hh), head_in.data(), head_out.data(), T);  // [L] -> [V]
      be.copy_2d(head_out.data(), V, attn.data() + hh * V, H * V, T, V);
    }
    report("kqv_out", il, attn.data(), T, H * V);
    m.attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  m.output_head(be, x.data(), b, logits, hook);
}

constexpr Arch kArchs[] = {{"deepseek2", read_hparams, bind_attention, attention_memory_layout, forward}};

}  // namespace

std::span<const Arch> deepseek2_archs() { return kArchs; }

}  // namespace sluice
