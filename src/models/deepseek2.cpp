// models/deepseek2: the DeepSeek-V2 forward — multi-head latent attention (MLA, models/mla.h,
// with RoPE on its position dims) — then a dense FFN for the leading layers and sigmoid-gated,
// group-limited MoE with a shared expert after.
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "memory/memory.h"
#include "models/arch.h"
#include "models/mla.h"
#include "models/model.h"

namespace sluice {
namespace {

struct Deepseek2Hparams final : ArchHparams {
  MlaHparams mla;
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
  read_expert_groups(f, hp);
  auto ext = std::make_shared<Deepseek2Hparams>();
  ext->mla = mla_read_hparams(f, hp);
  hp.ext = std::move(ext);
}

void bind_attention(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& lw) {
  mla_bind(f, hp, hp.ext_as<Deepseek2Hparams>().mla, l, lw);
}

void forward(const Model& m, Backend& be, Memory& mem, const Batch& b, const std::vector<BatchRun>& runs, float* logits,
             const TensorHook* hook) {
  const Hparams& hp = m.hparams();
  const MlaHparams& mla = hp.ext_as<Deepseek2Hparams>().mla;
  const int64_t T = b.size(), E = hp.n_embd;
  ActBuf<float> x = be.alloc<float>(T * E), h = be.alloc<float>(T * E), o = be.alloc<float>(T * E),
                attn = be.alloc<float>(T * hp.n_head * mla.v_head);
  MlaScratch s;
  s.alloc(be, hp, mla, T);

  m.embed(be, b.tokens.data(), T, x.data(), hook);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& lw = m.layers()[static_cast<size_t>(l)];
    be.rms_norm(x.data(), static_cast<const float*>(lw.attn_norm->data), h.data(), T, E, hp.rms_eps);
    report_to(hook, be, "attn_norm", static_cast<int>(l), h.data(), T, E);
    mla_attention(hp, mla, lw.ext_as<MlaWeights>(), be, mem, b, runs, l, h.data(), attn.data(), s, hook);
    m.attn_output_and_ffn(be, l, attn.data(), x.data(), h.data(), o.data(), T, hook);
  }
  m.output_head(be, x.data(), b, logits, hook);
}

constexpr Arch kArchs[] = {{"deepseek2", read_hparams, bind_attention, attention_memory_layout, forward}};

}  // namespace

std::span<const Arch> deepseek2_archs() { return kArchs; }

}  // namespace sluice
