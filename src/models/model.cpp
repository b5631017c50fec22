// models/model: loading — hyperparameters from metadata (one function per family), weights
// bound by name with their shapes checked so the forward never meets a tensor of the wrong
// size — and the dispatch to each family's forward.
#include "models/model.h"

#include <algorithm>

#include "core/error.h"
#include "models/moe_ffn.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "models/predictor.h"

namespace sluice {
namespace {

enum class Family { llama_like, deepseek2 };

Family family_of(const std::string& path, const std::string& arch) {
  if (arch == "llama" || arch == "qwen3" || arch == "qwen3moe" || arch == "olmoe") return Family::llama_like;
  if (arch == "deepseek2") return Family::deepseek2;
  fail(path, ": architecture '", arch, "' is not supported (supported: llama, qwen3, qwen3moe, olmoe, deepseek2)");
}

int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t max = int64_t{1} << 24) {
  if (v <= 0 || v > max) fail(f.path(), ": ", key, " = ", v, " is out of range (1..", max, ")");
  return v;
}

// The shared core: dims, heads, rope, experts. Per-family keys are read below.
Hparams read_hparams(const GgufFile& f) {
  Hparams hp;
  hp.arch = f.get_string("general.architecture");
  const Family fam = family_of(f.path(), hp.arch);
  const std::string a = hp.arch + ".";
  hp.n_ctx_train = f.get_u32(a + "context_length");
  hp.n_embd = positive(f, a + "embedding_length", f.get_u32(a + "embedding_length"));
  hp.n_layer = positive(f, a + "block_count", f.get_u32(a + "block_count"), 4096);
  // Head counts may be per-layer arrays in real files; Sluice needs them uniform for now.
  auto heads = f.get_u32_per_layer(a + "attention.head_count", hp.n_layer);
  for (size_t l = 1; l < heads.size(); ++l)
    if (heads[l] != heads[0]) fail(f.path(), ": per-layer ", a, "attention.head_count values differ (not supported)");
  hp.n_head = positive(f, a + "attention.head_count", heads[0], 4096);
  hp.n_head_kv = f.has(a + "attention.head_count_kv") ? f.get_u32_per_layer(a + "attention.head_count_kv", hp.n_layer)[0]
                                                       : hp.n_head;
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    fail(f.path(), ": head_count ", hp.n_head, " must be a positive multiple of head_count_kv ", hp.n_head_kv);
  if (!f.has(a + "attention.key_length") && hp.n_embd % hp.n_head != 0)
    fail(f.path(), ": embedding_length ", hp.n_embd, " is not a multiple of head_count and key_length is absent");
  hp.head_dim_k = positive(f, a + "attention.key_length", f.get_u32_or(a + "attention.key_length", hp.n_embd / hp.n_head));
  hp.head_dim_v = positive(f, a + "attention.value_length", f.get_u32_or(a + "attention.value_length", hp.head_dim_k));
  for (uint32_t v : f.get_u32_per_layer(a + "feed_forward_length", hp.n_layer)) hp.n_ff.push_back(v);
  hp.rms_eps = f.get_f32(a + "attention.layer_norm_rms_epsilon");
  hp.rope_base = f.get_f32_or(a + "rope.freq_base", 10000.0f);
  hp.n_rot = f.get_u32_or(a + "rope.dimension_count", static_cast<uint32_t>(hp.head_dim_k));
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
    fail(f.path(), ": ", a, "rope.dimension_count = ", hp.n_rot, " must be even and <= head dim ", hp.head_dim_k);
  // RoPE scaling (YaRN, linear) changes every angle and the attention scale; computing plain
  // RoPE on such a file would give silently wrong text, so refuse it until it is implemented.
  const std::string scaling = f.get_string_or(a + "rope.scaling.type", "none");
  if (scaling != "none" && !(scaling == "linear" && f.get_f32_or(a + "rope.scaling.factor", 1.0f) == 1.0f))
    fail(f.path(), ": ", a, "rope.scaling.type = '", scaling, "' is not supported yet (only unscaled RoPE)");
  if (hp.arch == "qwen3" || hp.arch == "qwen3moe") {
    hp.rope_mode = RopeMode::neox;
    hp.qk_norm_per_head = true;
  }
  if (hp.arch == "olmoe") {
    hp.rope_mode = RopeMode::neox;
    hp.qk_norm_full = true;
  }

  // Experts. llama with expert_count is the Mixtral layout; its feed_forward_length is the
  // per-expert width. qwen3moe has expert_feed_forward_length (llama.cpp falls back to
  // n_ff / n_expert_used without it).
  MoeOptions& moe = hp.moe;
  moe.n_expert = f.get_u32_or(a + "expert_count", 0);
  if (moe.n_expert > 0) {
    positive(f, a + "expert_count", moe.n_expert, 65536);
    moe.n_expert_used = f.get_u32(a + "expert_used_count");
    if (moe.n_expert_used <= 0 || moe.n_expert_used > moe.n_expert)
      fail(f.path(), ": ", a, "expert_used_count = ", moe.n_expert_used, " must be in 1..expert_count (", moe.n_expert, ")");
    hp.n_ff_exp = f.get_u32_or(a + "expert_feed_forward_length",
                               static_cast<uint32_t>(hp.arch == "qwen3moe" ? hp.n_ff[0] / moe.n_expert_used : hp.n_ff[0]));
    positive(f, a + "expert_feed_forward_length", hp.n_ff_exp);
    moe.norm_weights = hp.arch != "olmoe";  // olmoe uses the softmax probabilities as they are
    const uint32_t gating = f.get_u32_or(a + "expert_gating_func", 1);
    if (gating != 1 && gating != 2) fail(f.path(), ": ", a, "expert_gating_func = ", gating, " is not 1 (softmax) or 2 (sigmoid)");
    moe.gating = gating == 2 ? MoeGating::sigmoid : MoeGating::softmax;
  } else if (hp.arch == "qwen3moe" || hp.arch == "olmoe" || hp.arch == "deepseek2") {
    fail(f.path(), ": missing key '", a, "expert_count' (", hp.arch, " is a mixture-of-experts architecture)");
  }

  if (fam == Family::deepseek2) {
    // Without expert_gating_func llama.cpp assumes softmax; the goldens' README requires it.
    if (!f.has(a + "expert_gating_func")) fail(f.path(), ": missing key '", a, "expert_gating_func'");
    hp.rope_mode = RopeMode::normal;
    hp.n_layer_dense_lead = f.get_u32_or(a + "leading_dense_block_count", 0);
    hp.n_expert_shared = f.get_u32_or(a + "expert_shared_count", 0);
    moe.norm_weights = f.get_bool_or(a + "expert_weights_norm", false);
    moe.weights_scale = f.get_f32_or(a + "expert_weights_scale", 1.0f);
    moe.n_group = f.get_u32_or(a + "expert_group_count", 1);
    moe.n_group_used = f.get_u32_or(a + "expert_group_used_count", static_cast<uint32_t>(moe.n_group));
    if (moe.n_group <= 0 || moe.n_expert % moe.n_group != 0 || moe.n_group_used <= 0 || moe.n_group_used > moe.n_group)
      fail(f.path(), ": expert groups ", moe.n_group, " (used ", moe.n_group_used, ") do not divide ", moe.n_expert, " experts");
    MlaHparams& mla = hp.mla;
    mla.q_lora_rank = f.get_u32_or(a + "attention.q_lora_rank", 0);
    mla.kv_lora_rank = positive(f, a + "attention.kv_lora_rank", f.get_u32(a + "attention.kv_lora_rank"));
    if (!f.has(a + "attention.key_length_mla"))
      fail(f.path(), ": missing key '", a, "attention.key_length_mla' (files with the legacy unsplit attn_kv_b are not supported)");
    const int64_t k_mla = f.get_u32(a + "attention.key_length_mla");
    mla.qk_nope = k_mla - hp.n_rot;
    mla.v_head = positive(f, a + "attention.value_length_mla", f.get_u32(a + "attention.value_length_mla"));
    if (mla.qk_nope <= 0) fail(f.path(), ": key_length_mla ", k_mla, " must exceed rope.dimension_count ", hp.n_rot);
    if (hp.n_head_kv != 1 || hp.head_dim_k != mla.kv_lora_rank + hp.n_rot || hp.head_dim_v != mla.kv_lora_rank)
      fail(f.path(), ": MLA expects head_count_kv 1, key_length = kv_lora_rank + rope dims (", mla.kv_lora_rank + hp.n_rot,
           ") and value_length = kv_lora_rank (", mla.kv_lora_rank, "); got ", hp.n_head_kv, ", ", hp.head_dim_k, ", ",
           hp.head_dim_v);
  }
  return hp;
}

// Binds a tensor by name and checks its shape; throws naming the tensor, expected and actual shape.
const TensorView* bind(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> shape,
                       bool required = true) {
  const TensorView* t = f.find_tensor(name);
  if (!t) {
    if (required) fail(f.path(), ": missing tensor '", name, "'");
    return nullptr;
  }
  bool ok = t->n_dims == static_cast<int>(shape.size());
  int i = 0;
  for (int64_t d : shape) ok = ok && t->ne[i++] == d;
  if (!ok) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int j = 0; j < t->n_dims; ++j) got += (j ? ", " : "") + std::to_string(t->ne[j]);
    fail(f.path(), ": tensor '", name, "' has shape [", got, "], expected [", want, "]");
  }
  return t;
}

}  // namespace

Model::~Model() = default;

void Model::set_predictor(std::unique_ptr<Predictor> p) { predictor_ = std::move(p); }

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& opt) {
  auto m = std::unique_ptr<Model>(new Model());
  const bool read = opt.read_weights && opt.experts.policy == ExpertPolicy::resident;
  m->file_ = std::make_unique<GgufFile>(path, read ? GgufFile::Load::read : GgufFile::Load::map, opt.progress);
  const GgufFile& f = *m->file_;
  m->hp_ = read_hparams(f);
  Hparams& hp = m->hp_;
  const Family fam = family_of(path, hp.arch);
  m->tokenizer_ = std::make_unique<Tokenizer>(vocab_from_gguf(f));

  const TensorView* emb = f.find_tensor("token_embd.weight");
  if (!emb) fail(path, ": missing tensor 'token_embd.weight'");
  hp.n_vocab = emb->ne[1];
  if (hp.n_vocab != m->tokenizer_->n_vocab())
    fail(path, ": token_embd.weight has ", hp.n_vocab, " rows but the tokenizer has ", m->tokenizer_->n_vocab(), " tokens");
  m->tok_embd_ = bind(f, "token_embd.weight", {hp.n_embd, hp.n_vocab});
  m->output_norm_ = bind(f, "output_norm.weight", {hp.n_embd});
  m->output_ = bind(f, "output.weight", {hp.n_embd, hp.n_vocab}, /*required=*/false);
  if (!m->output_) m->output_ = m->tok_embd_;  // tied embeddings

  const int64_t E = hp.n_embd, H = hp.n_head;
  ExpertLayout expert_layout;
  expert_layout.bundled = gguf_has_bundled_experts(f);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = bind(f, p + "attn_norm.weight", {E});
    if (fam == Family::deepseek2) {
      const MlaHparams& mla = hp.mla;
      const int64_t q_w = H * (mla.qk_nope + hp.n_rot);
      if (mla.q_lora_rank > 0) {
        w.wq_a = bind(f, p + "attn_q_a.weight", {E, mla.q_lora_rank});
        w.q_a_norm = bind(f, p + "attn_q_a_norm.weight", {mla.q_lora_rank});
        w.wq_b = bind(f, p + "attn_q_b.weight", {mla.q_lora_rank, q_w});
      } else {
        w.wq = bind(f, p + "attn_q.weight", {E, q_w});
      }
      w.wkv_a = bind(f, p + "attn_kv_a_mqa.weight", {E, mla.kv_lora_rank + hp.n_rot});
      w.kv_a_norm = bind(f, p + "attn_kv_a_norm.weight", {mla.kv_lora_rank});
      w.wk_b = bind(f, p + "attn_k_b.weight", {mla.qk_nope, mla.kv_lora_rank, H});
      w.wv_b = bind(f, p + "attn_v_b.weight", {mla.kv_lora_rank, mla.v_head, H});
      w.wo = bind(f, p + "attn_output.weight", {H * mla.v_head, E});
    } else {
      const int64_t q_w = H * hp.head_dim_k, k_w = hp.n_head_kv * hp.head_dim_k, v_w = hp.n_head_kv * hp.head_dim_v;
      w.wq = bind(f, p + "attn_q.weight", {E, q_w});
      w.wk = bind(f, p + "attn_k.weight", {E, k_w});
      w.wv = bind(f, p + "attn_v.weight", {E, v_w});
      w.wo = bind(f, p + "attn_output.weight", {H * hp.head_dim_v, E});
      if (hp.qk_norm_per_head) {
        w.q_norm = bind(f, p + "attn_q_norm.weight", {hp.head_dim_k});
        w.k_norm = bind(f, p + "attn_k_norm.weight", {hp.head_dim_k});
      }
      if (hp.qk_norm_full) {
        w.q_norm = bind(f, p + "attn_q_norm.weight", {q_w});
        w.k_norm = bind(f, p + "attn_k_norm.weight", {k_w});
      }
    }
    w.ffn_norm = bind(f, p + "ffn_norm.weight", {E});
    if (hp.moe.n_expert > 0 && l >= hp.n_layer_dense_lead) {
      const int64_t ne = hp.moe.n_expert, fe = hp.n_ff_exp;
      w.ffn_gate_inp = bind(f, p + "ffn_gate_inp.weight", {E, ne});
      if (!expert_layout.bundled) {
        w.ffn_gate_exps = bind(f, p + "ffn_gate_exps.weight", {E, fe, ne});
        w.ffn_up_exps = bind(f, p + "ffn_up_exps.weight", {E, fe, ne});
        w.ffn_down_exps = bind(f, p + "ffn_down_exps.weight", {fe, E, ne});
      }
      if (fam == Family::deepseek2) w.exp_probs_b = bind(f, p + "exp_probs_b.bias", {ne}, /*required=*/false);
      if (hp.n_expert_shared > 0) {
        const int64_t fs = fe * hp.n_expert_shared;
        w.ffn_gate_shexp = bind(f, p + "ffn_gate_shexp.weight", {E, fs});
        w.ffn_up_shexp = bind(f, p + "ffn_up_shexp.weight", {E, fs});
        w.ffn_down_shexp = bind(f, p + "ffn_down_shexp.weight", {fs, E});
      }
      expert_layout.layers.push_back(expert_layer_from_gguf(f, l, E, fe, ne));
    } else {
      w.ffn_gate = bind(f, p + "ffn_gate.weight", {E, hp.n_ff[l]});
      w.ffn_up = bind(f, p + "ffn_up.weight", {E, hp.n_ff[l]});
      w.ffn_down = bind(f, p + "ffn_down.weight", {hp.n_ff[l], E});
      expert_layout.layers.emplace_back();
    }
    m->layers_.push_back(w);
  }
  // Norms, biases and routers are read as float arrays by the ops: insist on F32.
  for (const auto& t : f.tensors())
    if ((t.n_dims == 1 || t.name.find("ffn_gate_inp") != std::string::npos) && t.type != DType::F32)
      fail(path, ": tensor '", t.name, "' has type ", dtype_name(t.type), "; norms, biases and routers must be f32");
  // Experts: the store chosen in `opt` (resident by default); dense weights stay in the mapping.
  m->experts_ = make_expert_store(f, std::move(expert_layout), opt.experts);
  if (hp.moe.n_expert > 0 && opt.experts.prefetch && m->experts_->wants_prefetch())
    m->predictor_ = std::make_unique<RouterLookahead>(*m, opt.experts.prefetch_extra);
  return m;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& t : file_->tensors()) n += t.nbytes;
  return n;
}

MemoryLayout Model::memory_layout() const {
  return MemoryLayout::all_attention(KvGeometry{hp_.n_layer, hp_.n_head, hp_.n_head_kv, hp_.head_dim_k, hp_.head_dim_v});
}

void Model::forward(Backend& be, Memory& mem, const Batch& b, float* logits, const TensorHook* hook) const {
  mem.check(b);
  for (int64_t t = 0; t < b.size(); ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= hp_.n_vocab)
      fail("token id ", b.tokens[t], " at batch index ", t, " is outside the vocabulary (", hp_.n_vocab, ")");
  if (static_cast<int64_t>(mem.layout().layers.size()) != hp_.n_layer)
    fail("forward: the memory has ", mem.layout().layers.size(), " layers, the model ", hp_.n_layer);
  if (!logits && b.n_outputs() > 0) fail("forward: ", b.n_outputs(), " tokens want logits but no logits buffer was given");
  mem.prepare(b);
  experts_->note_tokens(b.size());
  const std::vector<BatchRun> runs = batch_runs(b);
  if (hp_.arch == "deepseek2")
    forward_deepseek2(be, mem, b, runs, logits, hook);
  else
    forward_llama_like(be, mem, b, runs, logits, hook);
  mem.commit(b);
}

void Model::embed(Backend& be, const int32_t* tokens, int64_t n_tok, float* x, const TensorHook* hook) const {
  be.get_rows(*tok_embd_, tokens, n_tok, x);
  if (hook && *hook) (*hook)("inp_embd", -1, x, n_tok, hp_.n_embd);
}

void Model::output_head(Backend& be, const float* x, const Batch& b, float* logits, const TensorHook* hook) const {
  const int64_t E = hp_.n_embd, n_out = b.n_outputs();
  if (n_out == 0) return;
  // The flagged rows, gathered unless they are already one contiguous stretch (all tokens, or
  // the last one: every single-sequence caller).
  int64_t first = 0;
  while (!b.logits[first]) ++first;
  const bool contiguous = std::all_of(b.logits.begin() + first, b.logits.begin() + first + n_out, [](uint8_t f) { return f; });
  std::vector<float> h(n_out * E);
  if (contiguous) {
    be.rms_norm(x + first * E, static_cast<const float*>(output_norm_->data), h.data(), n_out, E, hp_.rms_eps);
  } else {
    for (int64_t t = 0, o = 0; t < b.size(); ++t)
      if (b.logits[t]) std::copy_n(x + t * E, E, h.data() + (o++) * E);
    be.rms_norm(h.data(), static_cast<const float*>(output_norm_->data), h.data(), n_out, E, hp_.rms_eps);
  }
  if (hook && *hook) (*hook)("result_norm", -1, h.data(), n_out, E);
  be.matmul(*output_, h.data(), logits, n_out);
  if (hook && *hook) (*hook)("result_output", -1, logits, n_out, hp_.n_vocab);
}

void Model::attn_output_and_ffn(Backend& be, int64_t l, const float* attn, float* x, float* h, float* o, int64_t T,
                                const TensorHook* hook) const {
  const LayerWeights& w = layers_[l];
  const int il = static_cast<int>(l);
  const int64_t E = hp_.n_embd;
  auto report = [&](std::string_view name, const float* d) {
    if (hook && *hook) (*hook)(name, il, d, T, E);
  };
  be.matmul(*w.wo, attn, o, T);
  report("attn_out", o);
  be.add(x, o, x, T * E);
  report("ffn_inp", x);
  // FFN: norm -> SwiGLU (dense, or routed to k experts) -> added to the residual stream.
  be.rms_norm(x, static_cast<const float*>(w.ffn_norm->data), h, T, E, hp_.rms_eps);
  report("ffn_norm", h);
  ffn_block(be, l, h, o, T, hook);
  report("ffn_out", o);
  be.add(x, o, x, T * E);
  report("l_out", x);
}

void Model::ffn_block(Backend& be, int64_t l, const float* h, float* out, int64_t T, const TensorHook* hook) const {
  const LayerWeights& w = layers_[l];
  const int il = static_cast<int>(l);
  const int64_t E = hp_.n_embd;
  auto report = [&](std::string_view name, const float* d, int64_t rows, int64_t cols) {
    if (hook && *hook) (*hook)(name, il, d, rows, cols);
  };
  if (!w.is_moe()) {
    ffn_swiglu(be, {*w.ffn_gate, *w.ffn_up, *w.ffn_down}, h, out, T);
    return;
  }
  const int64_t n_exp = hp_.moe.n_expert;
  std::vector<float> router(T * n_exp), probs(T * n_exp);
  be.matmul(*w.ffn_gate_inp, h, router.data(), T);
  report("ffn_moe_logits", router.data(), T, n_exp);
  const float* bias = w.exp_probs_b ? static_cast<const float*>(w.exp_probs_b->data) : nullptr;
  MoeRouting r = moe_route(hp_.moe, router.data(), probs.data(), T, bias);
  report("ffn_moe_probs", probs.data(), T, n_exp);
  std::vector<float> chosen(r.experts.begin(), r.experts.end());
  report("ffn_moe_topk", chosen.data(), T, r.k);
  report("ffn_moe_weights", r.weights.data(), T, r.k);
  // Ask for this layer's experts first (a streaming store starts reading the misses), then
  // guess the next MoE layer's and stage them while this layer computes.
  auto batch = experts_->acquire(il, moe_expert_uses(r));
  if (predictor_) {
    std::vector<int32_t> guess;
    const int next = predictor_->predict(be, il, h, T, &guess);
    if (next >= 0) experts_->prefetch(next, guess);
  }
  moe_experts(be, *batch, il, r, h, out, T, E);
  report("ffn_moe_out", out, T, E);
  if (w.ffn_gate_shexp) {
    // Shared experts: always on, weight 1.
    std::vector<float> sh(T * E);
    ffn_swiglu(be, {*w.ffn_gate_shexp, *w.ffn_up_shexp, *w.ffn_down_shexp}, h, sh.data(), T);
    report("ffn_shexp", sh.data(), T, E);
    be.add(out, sh.data(), out, T * E);
  }
}

}  // namespace sluice
