// models/model: loading — the shared hyperparameters from metadata, then the architecture
// module's own (models/arch.h); weights bound by name with their shapes checked so the
// forward never meets a tensor of the wrong size — and the blocks every family shares.
#include "models/model.h"

#include "format/hf_folder.h"
#include "format/lora.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/anon_map.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "memory/pack.h"
#include "models/arch.h"
#include "models/moe_ffn.h"
#include "models/predictor.h"
#include "quant/rows16.h"

namespace sluice {

int64_t positive_key(const GgufFile& f, const std::string& key, int64_t v, int64_t max) {
  if (v <= 0 || v > max) fail(f.path(), ": ", key, " = ", v, " is out of range (1..", max, ")");
  return v;
}

void read_expert_groups(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  MoeOptions& moe = hp.moe;
  moe.n_group = f.get_u32_or(a + "expert_group_count", 1);
  moe.n_group_used = f.get_u32_or(a + "expert_group_used_count", static_cast<uint32_t>(moe.n_group));
  if (moe.n_group <= 0 || moe.n_expert % moe.n_group != 0 || moe.n_group_used <= 0 || moe.n_group_used > moe.n_group)
    fail(f.path(), ": expert groups ", moe.n_group, " (used ", moe.n_group_used, ") do not divide ", moe.n_expert,
         " experts");
}

namespace {

// --repack: an interleaved copy (quant/rows16.h) of every matrix whose type has the layout and
// whose rows come in whole 16-row groups, in one huge-page mapping the file keeps alive. The
// routed experts (the tensors `layout`'s views lie in) only when they stay where they are
// (`experts`: resident), since the mmap and stream stores move or evict an expert's bytes; their
// views, sliced before, get their part of the copy here. progress (optional) sees the bytes
// packed so far, from the calling thread. in_place: a matrix whose bytes are the file's own
// converted copy (GgufFile::writable_bytes: a folder's repacked MLX weights) is interleaved where
// it lies instead of copied, since no file keeps its rows to give back (its rows are then gone:
// TensorView::rows_interleaved). Returns the summary line.
std::string interleave_rows16(GgufFile& f, ExpertLayout& layout, bool experts, bool in_place,
                              const GgufFile::Progress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto before = [](const void* a, const void* b) { return std::less<const void*>()(a, b); };
  std::vector<TensorView*> views;
  for (auto& layer : layout.layers)
    for (ExpertLocation& e : layer)
      for (TensorView* v : {&e.views.gate, &e.views.up, &e.views.down}) views.push_back(v);
  std::sort(views.begin(), views.end(),
            [&](const TensorView* a, const TensorView* b) { return before(a->data, b->data); });
  // The expert views whose data lie in t (sorted by address: one range).
  auto views_in = [&](const TensorView& t) {
    const auto* lo = static_cast<const uint8_t*>(t.data);
    auto first = std::lower_bound(views.begin(), views.end(), lo,
                                  [&](const TensorView* v, const uint8_t* p) { return before(v->data, p); });
    auto last = first;
    while (last != views.end() && before((*last)->data, lo + t.nbytes)) ++last;
    return std::pair(first, last);
  };
  std::vector<const TensorView*> picked;
  std::vector<uint8_t*> own;  // per picked tensor: its bytes to interleave in place, or null (a copy)
  size_t bytes = 0, copied = 0;
  for (const TensorView& t : f.tensors()) {
    if (!rows16_supported(t.type) || t.n_dims < 2 || t.ne[1] % 16 != 0 || t.ne[3] != 1) continue;
    if (const auto [first, last] = views_in(t); !experts && first != last) continue;
    // The embedding table is read by rows (get_rows), unless it is also the output head.
    if (t.name == "token_embd.weight" && f.find_tensor("output.weight")) continue;
    uint8_t* here = in_place ? f.writable_bytes(t) : nullptr;
    picked.push_back(&t);
    own.push_back(here);
    bytes += t.nbytes;
    if (!here) copied += (t.nbytes + 63) / 64 * 64;
  }
  if (picked.empty())
    return "repack: no matrix has an interleaved layout (only Q4_0, Q4_1, Q4_K, Q5_K and Q6_K have one)";
  auto map = copied ? std::make_shared<AnonMap>(copied, AnonMap::Pages::huge) : nullptr;
  // Spans of 256 rows of every tensor, packed on all cores (the copy is bound by touching new pages).
  struct Span {
    size_t tensor;  // index in picked
    int64_t r0, nr;
    uint8_t* dst;
  };
  std::vector<Span> spans;
  // Per tensor, its spans not yet packed: whoever packs the last gives the rows' pages back to
  // the file (GgufFile::release_pages), so the copy never doubles the model in memory.
  std::vector<std::atomic<int64_t>> left(picked.size());
  size_t at = 0;
  for (size_t k = 0; k < picked.size(); ++k) {
    const TensorView* t = picked[k];
    uint8_t* dst = own[k] ? own[k] : map->data() + at;
    for (int64_t r0 = 0; r0 < t->n_rows(); r0 += 256, ++left[k])
      spans.push_back(
          {k, r0, std::min<int64_t>(256, t->n_rows() - r0), dst + static_cast<size_t>(r0) * t->row_bytes()});
    if (!own[k]) at += (t->nbytes + 63) / 64 * 64;
  }
  std::atomic<size_t> done{0}, released{0};
  ThreadPool pool(0);
  // In place, each span's rows are read from a copy (a span's groups fill exactly its rows' bytes).
  std::vector<std::vector<uint8_t>> rows_of(static_cast<size_t>(pool.size()));
  pool.parallel_for(static_cast<int64_t>(spans.size()), [&](int64_t i0, int64_t i1, int thread) {
    for (int64_t i = i0; i < i1; ++i) {
      const Span& sp = spans[static_cast<size_t>(i)];
      const TensorView* t = picked[sp.tensor];
      const uint8_t* src = t->row(sp.r0);
      if (own[sp.tensor]) {
        auto& tmp = rows_of[static_cast<size_t>(thread)];
        tmp.assign(src, src + static_cast<size_t>(sp.nr) * t->row_bytes());
        src = tmp.data();
      }
      rows16_pack(t->type, src, t->row_bytes(), sp.nr, t->ne[0], sp.dst);
      if (!own[sp.tensor] && left[sp.tensor].fetch_sub(1) == 1) released += f.release_pages(t->data, t->nbytes);
      const size_t now = done.fetch_add(static_cast<size_t>(sp.nr) * t->row_bytes()) +
                         static_cast<size_t>(sp.nr) * t->row_bytes();
      if (thread == 0 && progress) progress(now, bytes);
    }
  });
  if (progress) progress(bytes, bytes);
  // Only now the tensors point at their copies: the packing above read their rows.
  at = 0;
  for (size_t k = 0; k < picked.size(); ++k) {
    const TensorView* t = picked[k];
    f.set_rows16(t->name, own[k] ? own[k] : map->data() + at, own[k] ? nullptr : map);
    if (!own[k]) at += (t->nbytes + 63) / 64 * 64;
    const auto [first, last] = views_in(*t);
    for (auto v = first; v != last; ++v) {
      (*v)->rows16 = static_cast<const uint8_t*>(t->rows16) +
                     (static_cast<const uint8_t*>((*v)->data) - static_cast<const uint8_t*>(t->data));
      (*v)->rows_interleaved = t->rows_interleaved;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char line[160];
  std::snprintf(line, sizeof line, "repack: %zu tensors, %.2f GB interleaved for the int8 kernels in %.1f s",
                picked.size(), static_cast<double>(bytes) / 1e9, s);
  std::string summary = line;
  if (size_t here = 0; in_place) {
    for (size_t k = 0; k < picked.size(); ++k) here += own[k] ? picked[k]->nbytes : 0;
    if (here > 0) {
      std::snprintf(line, sizeof line, " (%.2f GB in place of the converted rows)", static_cast<double>(here) / 1e9);
      summary += line;
    }
  }
  if (released > 0) {
    std::snprintf(line, sizeof line, " (their rows, %.2f GB, left to the file's pages)",
                  static_cast<double>(released.load()) / 1e9);
    summary += line;
  }
  return summary;
}

// RoPE scaling as llama.cpp derives it (llama_context's yarn_attn_factor, the deepseek2 graph's
// kq_scale): linear divides every angle by the factor; YaRN keeps the pairs that turn more than
// beta_fast = 32 times over the original context, interpolates those under beta_slow = 1, ramps
// between, and scales cos/sin by 0.1·ln(factor) + 1 (DeepSeek2 moves that into the attention
// scale, with yarn_log_multiplier).
void read_rope_scaling(const GgufFile& f, Hparams& hp) {
  const std::string a = hp.arch + ".";
  const std::string type = f.get_string_or(a + "rope.scaling.type", "none");
  if (type != "none" && type != "linear" && type != "yarn")
    fail(f.path(), ": ", a, "rope.scaling.type = '", type, "' is not supported (none, linear or yarn)");
  float factor = f.get_f32_or(a + "rope.scaling.factor", 0.0f);
  if (factor == 0.0f) factor = 1.0f;  // llama.cpp's reading of 0 / absent
  if (!std::isfinite(factor) || factor < 1.0f)
    fail(f.path(), ": ", a, "rope.scaling.factor = ", factor, " must be a finite number >= 1");
  const float rope_attn = f.get_f32_or(a + "rope.scaling.attn_factor", 1.0f);
  if (!std::isfinite(rope_attn) || rope_attn <= 0.0f)
    fail(f.path(), ": ", a, "rope.scaling.attn_factor = ", rope_attn, " must be a positive number");
  if (type == "none") return;
  if (type == "yarn" && (hp.arch == "kimi-linear" || hp.arch == "bailingmoe3"))
    fail(f.path(), ": ", a, "rope.scaling.type = 'yarn' is not supported for ", hp.arch, " yet");
  hp.rope_freq_scale = 1.0f / factor;
  const float log_mul = f.get_f32_or(a + "rope.scaling.yarn_log_multiplier", 0.0f) / 0.1f;  // stored times 0.1
  if (!std::isfinite(log_mul)) fail(f.path(), ": ", a, "rope.scaling.yarn_log_multiplier is not finite");
  const auto get_mscale = [&](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * std::log(factor) + 1.0f; };
  float attn = 1.0f;
  if (type == "yarn") {
    hp.rope_ext_factor = 1.0f;
    const uint32_t n_orig = f.get_u32_or(a + "rope.scaling.original_context_length",
                                         f.get_u32_or(a + "context_length", 0));
    if (n_orig == 0) fail(f.path(), ": ", a, "rope.scaling.original_context_length (or context_length) is missing");
    // The pair index that turns `turns` times over the original context; the ramp's ends.
    const auto corr_dim = [&](float turns) {
      return static_cast<float>(hp.n_rot) * std::log(static_cast<float>(n_orig) / (turns * 2.0f * 3.14159265358979f)) /
             (2.0f * std::log(hp.rope_base));
    };
    hp.rope_corr_lo = std::max(0.0f, std::floor(corr_dim(32.0f)));
    hp.rope_corr_hi = std::min(static_cast<float>(hp.n_rot - 1), std::ceil(corr_dim(1.0f)));
    if (log_mul != 0.0f) {
      // DeepSeek-V2's mscale = mscale_all_dim (both in its config), else mscale 1.
      const float mscale = hp.arch == "deepseek2" && log_mul != 1.0f ? log_mul : 1.0f;
      attn = get_mscale(mscale) / get_mscale(log_mul);
    } else {
      attn = get_mscale(1.0f);
    }
    attn /= 1.0f + 0.1f * std::log(factor);  // rope_yarn multiplies it back
  }
  attn *= rope_attn;
  hp.rope_mscale = hp.rope_ext_factor != 0.0f ? attn * (1.0f + 0.1f * std::log(factor)) : attn;
  if (hp.arch == "deepseek2") {
    const float m = attn * (1.0f + 0.1f * std::log(factor)) * (1.0f + 0.1f * log_mul * std::log(factor));
    hp.kq_scale_mul = m * m;
  }
}

// The shared core: dims, heads, rope, experts. The module reads its own keys after it.
Hparams read_core_hparams(const GgufFile& f) {
  Hparams hp;
  hp.arch = f.get_string("general.architecture");
  hp.module = &find_arch(f.path(), hp.arch);
  const std::string a = hp.arch + ".";
  hp.n_ctx_train = f.get_u32(a + "context_length");
  hp.n_embd = positive_key(f, a + "embedding_length", f.get_u32(a + "embedding_length"));
  // Multi-token-prediction (NextN) blocks, which llama.cpp's converters now write by default
  // for Qwen3.5/Qwen3-Next, Ling 3 and DeepSeek-V3, are the last nextn_predict_layers of
  // block_count, and per-layer arrays cover them too. Decoding does not run them (llama.cpp's
  // n_layer()), so the model is the blocks before them; their tensors stay unread.
  const int64_t n_block = positive_key(f, a + "block_count", f.get_u32(a + "block_count"), 4096);
  hp.n_layer_nextn = f.get_u32_or(a + "nextn_predict_layers", 0);
  if (hp.n_layer_nextn >= n_block)
    fail(f.path(), ": ", a, "nextn_predict_layers = ", hp.n_layer_nextn, " leaves no layer of block_count ", n_block);
  hp.n_layer = n_block - hp.n_layer_nextn;
  // Head counts may be per-layer arrays in real files; Sluice needs them uniform for now.
  auto heads = hp.per_layer(f.get_u32_per_layer(a + "attention.head_count", static_cast<size_t>(n_block)));
  for (size_t l = 1; l < heads.size(); ++l)
    if (heads[l] != heads[0]) fail(f.path(), ": per-layer ", a, "attention.head_count values differ (not supported)");
  hp.n_head = positive_key(f, a + "attention.head_count", heads[0], 4096);
  // head_count_kv may be per layer, 0 marking a layer without attention (the linear-attention
  // layers of Kimi Linear and Ling 3); the attention layers must agree.
  if (f.has(a + "attention.head_count_kv")) {
    for (uint32_t v : hp.per_layer(f.get_u32_per_layer(a + "attention.head_count_kv", static_cast<size_t>(n_block)))) {
      hp.n_head_kv_layer.push_back(v);
      if (v == 0) continue;
      if (hp.n_head_kv != 0 && v != hp.n_head_kv)
        fail(f.path(), ": per-layer ", a, "attention.head_count_kv values differ (not supported)");
      hp.n_head_kv = v;
    }
  } else {
    hp.n_head_kv = hp.n_head;
    hp.n_head_kv_layer.assign(static_cast<size_t>(hp.n_layer), hp.n_head);
  }
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    fail(f.path(), ": head_count ", hp.n_head, " must be a positive multiple of head_count_kv ", hp.n_head_kv);
  if (!f.has(a + "attention.key_length") && hp.n_embd % hp.n_head != 0)
    fail(f.path(), ": embedding_length ", hp.n_embd, " is not a multiple of head_count and key_length is absent");
  hp.head_dim_k = positive_key(f, a + "attention.key_length",
                               f.get_u32_or(a + "attention.key_length", hp.n_embd / hp.n_head));
  hp.head_dim_v = positive_key(f, a + "attention.value_length",
                               f.get_u32_or(a + "attention.value_length", hp.head_dim_k));
  for (uint32_t v : hp.per_layer(f.get_u32_per_layer(a + "feed_forward_length", static_cast<size_t>(n_block))))
    hp.n_ff.push_back(v);
  hp.rms_eps = f.get_f32(a + "attention.layer_norm_rms_epsilon");
  hp.rope_base = f.get_f32_or(a + "rope.freq_base", 10000.0f);
  hp.n_rot = f.get_u32_or(a + "rope.dimension_count", static_cast<uint32_t>(hp.head_dim_k));
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
    fail(f.path(), ": ", a, "rope.dimension_count = ", hp.n_rot, " must be even and <= head dim ", hp.head_dim_k);
  read_rope_scaling(f, hp);

  // Experts: how many and how they are gated; the module reads the widths and its own rules.
  MoeOptions& moe = hp.moe;
  moe.n_expert = f.get_u32_or(a + "expert_count", 0);
  if (moe.n_expert > 0) {
    positive_key(f, a + "expert_count", moe.n_expert, 65536);
    moe.n_expert_used = f.get_u32(a + "expert_used_count");
    if (moe.n_expert_used <= 0 || moe.n_expert_used > moe.n_expert)
      fail(f.path(), ": ", a, "expert_used_count = ", moe.n_expert_used, " must be in 1..expert_count (", moe.n_expert,
           ")");
    const uint32_t gating = f.get_u32_or(a + "expert_gating_func", 1);
    if (gating != 1 && gating != 2)
      fail(f.path(), ": ", a, "expert_gating_func = ", gating, " is not 1 (softmax) or 2 (sigmoid)");
    moe.gating = gating == 2 ? MoeGating::sigmoid : MoeGating::softmax;
  }
  return hp;
}

// The layer's norms and FFN (dense, or router + experts + shared experts): the same tensor
// names in every family. Records the layer's expert slices in `layout`.
void bind_norms_and_ffn(const GgufFile& f, const Hparams& hp, int64_t l, LayerWeights& w, ExpertLayout& layout) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t E = hp.n_embd;
  w.attn_norm = bind_tensor(f, p + "attn_norm.weight", {E});
  if (!w.ffn_norm) w.ffn_norm = bind_tensor(f, p + "ffn_norm.weight", {E});
  if (hp.moe.n_expert > 0 && l >= hp.n_layer_dense_lead) {
    const int64_t ne = hp.moe.n_expert, fe = hp.n_ff_exp;
    w.ffn_gate_inp = bind_tensor(f, p + "ffn_gate_inp.weight", {E, ne});
    if (!layout.bundled) {
      w.ffn_gate_exps = bind_tensor(f, p + "ffn_gate_exps.weight", {E, fe, ne});
      w.ffn_up_exps = bind_tensor(f, p + "ffn_up_exps.weight", {E, fe, ne});
      w.ffn_down_exps = bind_tensor(f, p + "ffn_down_exps.weight", {fe, E, ne});
    }
    w.exp_probs_b = bind_tensor(f, p + "exp_probs_b.bias", {ne}, /*required=*/false);
    if (hp.n_expert_shared > 0) {
      const int64_t fs = hp.n_ff_shexp > 0 ? hp.n_ff_shexp : fe * hp.n_expert_shared;
      w.ffn_gate_shexp = bind_tensor(f, p + "ffn_gate_shexp.weight", {E, fs});
      w.ffn_up_shexp = bind_tensor(f, p + "ffn_up_shexp.weight", {E, fs});
      w.ffn_down_shexp = bind_tensor(f, p + "ffn_down_shexp.weight", {fs, E});
      w.ffn_gate_inp_shexp = bind_tensor(f, p + "ffn_gate_inp_shexp.weight", {E}, /*required=*/false);
    }
    layout.layers.push_back(expert_layer_from_gguf(f, l, E, fe, ne));
  } else {
    w.ffn_gate = bind_tensor(f, p + "ffn_gate.weight", {E, hp.n_ff[l]});
    w.ffn_up = bind_tensor(f, p + "ffn_up.weight", {E, hp.n_ff[l]});
    w.ffn_down = bind_tensor(f, p + "ffn_down.weight", {hp.n_ff[l], E});
    layout.layers.emplace_back();
  }
}

}  // namespace

Model::~Model() = default;

void Model::set_predictor(std::unique_ptr<Predictor> p) { predictor_ = std::move(p); }

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& opt) {
  auto m = std::unique_ptr<Model>(new Model());
  const bool read = opt.read_weights && opt.experts.policy == ExpertPolicy::resident;
  if (is_model_folder(path) && opt.experts.policy == ExpertPolicy::stream) {
    // Streaming reads experts by file offset from one GGUF; a folder's live in its shards, in
    // MLX's layout where loading converts them: they stream from the folder's packed copy,
    // written once (memory/pack.h). A dense folder has nothing to stream: loaded as it is.
    const std::string packed = folder_pack_path(path, opt.pack_dir);
    const auto note = [&](const std::string& line) {
      if (opt.on_note) opt.on_note(line);
    };
    if (std::filesystem::is_regular_file(packed)) {
      note("experts stream from " + packed + " (the packed copy of " + path + ", written by an earlier run)");
    } else {
      FolderForRewrite probe = open_model_folder_for_rewrite(path);  // the experts stay unconverted, packed from here
      const auto& ts = probe.file->tensors();
      if (std::none_of(ts.begin(), ts.end(), [](const TensorView& t) { return t.name.ends_with("_exps.weight"); })) {
        m->file_ = std::move(probe.file);
      } else {
        note("packing the experts of " + path + " into " + packed +
             " for --experts stream (once; streaming reads each expert in one request)");
        const PackResult r = write_folder_pack(path, std::move(probe), packed, opt.pack_progress);
        char line[160];
        std::snprintf(line, sizeof line, "packed %lld experts of %d layers (%.2f GB) in %.1f s",
                      static_cast<long long>(r.experts), r.moe_layers, r.bytes_out / 1e9, r.seconds);
        note(line);
      }
    }
    if (!m->file_) m->file_ = std::make_unique<GgufFile>(packed, GgufFile::Load::map, opt.progress);
  } else if (is_model_folder(path)) {
    m->file_ = open_model_folder(path, opt.mlx_in_place);
  } else {
    m->file_ = std::make_unique<GgufFile>(path, read ? GgufFile::Load::read : GgufFile::Load::map, opt.progress);
  }
  // Merged adapters make owned f32 copies of the tensors, where streaming reads by file offset.
  if (opt.lora_merge && !opt.lora.empty() && opt.experts.policy == ExpertPolicy::stream)
    fail(path, ": --lora-merge with --experts stream is not supported (adapters at run time are)");
  for (const std::string& spec : opt.lora) {
    // Adapters on experts ride on the experts' views (TensorView::expert_lora, handed out by
    // slice2d), the streamed ones too: the store copies the views and only moves their data.
    const std::string line = apply_lora_adapter(*m->file_, spec, opt.lora_merge).line();
    m->lora_summary_ += (m->lora_summary_.empty() ? "" : "; ") + line;
  }
  const GgufFile& f = *m->file_;
  m->hp_ = read_core_hparams(f);
  Hparams& hp = m->hp_;
  const Arch& arch = *hp.module;
  arch.read_hparams(f, hp);
  // A Hugging Face folder's Q/K keep the rotate-half layout (format/hf_folder.h).
  if (f.get_bool_or("sluice.rope_neox", false)) hp.rope_mode = RopeMode::neox;
  if (hp.moe.n_expert > 0) positive_key(f, hp.arch + ".expert_feed_forward_length", hp.n_ff_exp);
  m->tokenizer_ = std::make_unique<Tokenizer>(vocab_from_gguf(f));

  // A folder loads strictly: every tensor it holds must be one the model reads (a GGUF file
  // may carry more, as llama.cpp's do: rope_freqs, multi-token-prediction blocks).
  const bool strict = is_model_folder(path);
  if (strict) f.track_lookups();
  const TensorView* emb = f.find_tensor("token_embd.weight");
  if (!emb) fail(path, ": missing tensor 'token_embd.weight'");
  hp.n_vocab = emb->ne[1];
  if (hp.n_vocab != m->tokenizer_->n_vocab())
    fail(path, ": token_embd.weight has ", hp.n_vocab, " rows but the tokenizer has ", m->tokenizer_->n_vocab(),
         " tokens");
  m->tok_embd_ = bind_tensor(f, "token_embd.weight", {hp.n_embd, hp.n_vocab});
  m->output_norm_ = bind_tensor(f, "output_norm.weight", {hp.n_embd});
  m->output_ = bind_tensor(f, "output.weight", {hp.n_embd, hp.n_vocab}, /*required=*/false);
  if (!m->output_) m->output_ = m->tok_embd_;  // tied embeddings

  ExpertLayout expert_layout;
  expert_layout.bundled = gguf_has_bundled_experts(f);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    LayerWeights w;
    arch.bind_attention(f, hp, l, w);
    bind_norms_and_ffn(f, hp, l, w, expert_layout);
    m->layers_.push_back(w);
  }
  // Norms, biases and routers are read as float arrays by the ops: insist on F32.
  for (const auto& t : f.tensors())
    if ((t.n_dims == 1 || t.name.find("ffn_gate_inp") != std::string::npos) && t.type != DType::F32)
      fail(path, ": tensor '", t.name, "' has type ", dtype_name(t.type), "; norms, biases and routers must be f32");
  // Experts: the store chosen in `opt` (resident by default); dense weights stay in the mapping.
  if (opt.repack)
    m->repack_summary_ = interleave_rows16(*m->file_, expert_layout, opt.experts.policy == ExpertPolicy::resident,
                                           opt.repack_in_place, opt.repack_progress);
  m->experts_ = make_expert_store(f, std::move(expert_layout), opt.experts);
  if (strict)
    if (const auto unread = f.untracked_tensors(); !unread.empty())
      fail(path, ": tensor '", unread.front(), "' is not one ", hp.arch, " reads (", unread.size(), " such tensor",
           unread.size() == 1 ? "" : "s", "; the folder's config.json may not match its weights)");
  if (hp.moe.n_expert > 0 && opt.experts.prefetch && m->experts_->wants_prefetch())
    m->predictor_ = std::make_unique<RouterLookahead>(*m, opt.experts.prefetch_extra);
  return m;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& t : file_->tensors())  // an MLX affine tensor's scales and biases too
    n += t.nbytes + (dtype_is_affine(t.type) ? static_cast<size_t>(t.n_rows()) * 2 * t.affine.group_row_bytes : 0);
  return n;
}

MemoryLayout Model::memory_layout() const { return hp_.module->memory_layout(hp_); }

void Model::forward(Backend& be, Memory& mem, const Batch& b, float* logits, const TensorHook* hook) const {
  mem.check(b);
  for (int64_t t = 0; t < b.size(); ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= hp_.n_vocab)
      fail("token id ", b.tokens[t], " at batch index ", t, " is outside the vocabulary (", hp_.n_vocab, ")");
  if (static_cast<int64_t>(mem.layout().layers.size()) != hp_.n_layer)
    fail("forward: the memory has ", mem.layout().layers.size(), " layers, the model ", hp_.n_layer);
  if (!logits && b.n_outputs() > 0)
    fail("forward: ", b.n_outputs(), " tokens want logits but no logits buffer was given");
  mem.prepare(b);
  experts_->note_tokens(b.size());
  const std::vector<BatchRun> runs = batch_runs(b);
  hp_.module->forward(*this, be, mem, b, runs, logits, hook);
  mem.commit(b);
}

void Model::embed(Backend& be, const int32_t* tokens, int64_t n_tok, float* x, const TensorHook* hook) const {
  be.get_rows(*tok_embd_, tokens, n_tok, x);
  report_to(hook, be, "inp_embd", -1, x, n_tok, hp_.n_embd);
}

void Model::output_head(Backend& be, const float* x, const Batch& b, float* logits, const TensorHook* hook) const {
  const int64_t E = hp_.n_embd, n_out = b.n_outputs();
  if (n_out == 0) return;
  // The flagged rows, gathered unless they are already one contiguous stretch (all tokens, or
  // the last one: every single-sequence caller).
  int64_t first = 0;
  while (!b.logits[first]) ++first;
  const bool contiguous = std::all_of(b.logits.begin() + first, b.logits.begin() + first + n_out,
                                      [](uint8_t f) { return f; });
  ActBuf<float> h = be.alloc<float>(n_out * E);
  if (contiguous) {
    be.rms_norm(x + first * E, static_cast<const float*>(output_norm_->data), h.data(), n_out, E, hp_.rms_eps);
  } else {
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < b.size(); ++t)
      if (b.logits[t]) rows.push_back(t);
    be.gather_rows(x, E, rows.data(), n_out, h.data());
    be.rms_norm(h.data(), static_cast<const float*>(output_norm_->data), h.data(), n_out, E, hp_.rms_eps);
  }
  report_to(hook, be, "result_norm", -1, h.data(), n_out, E);
  be.matmul(*output_, h.data(), logits, n_out);
  report_to(hook, be, "result_output", -1, logits, n_out, hp_.n_vocab);
}

void Model::attn_output_and_ffn(Backend& be, int64_t l, const float* attn, float* x, float* h, float* o, int64_t T,
                                const TensorHook* hook) const {
  const LayerWeights& w = layers_[l];
  const int il = static_cast<int>(l);
  const int64_t E = hp_.n_embd;
  auto report = [&](std::string_view name, const float* d) { report_to(hook, be, name, il, d, T, E); };
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
    report_to(hook, be, name, il, d, rows, cols);
  };
  if (!w.is_moe()) {
    ffn_swiglu(be, {*w.ffn_gate, *w.ffn_up, *w.ffn_down}, h, out, T, hp_.swiglu_limit(hp_.swiglu_limit_shexp, l));
    return;
  }
  const int64_t n_exp = hp_.moe.n_expert;
  ActBuf<float> router = be.alloc<float>(T * n_exp), probs = be.alloc<float>(T * n_exp);
  be.matmul(*w.ffn_gate_inp, h, router.data(), T);
  report("ffn_moe_logits", router.data(), T, n_exp);
  const float* bias = w.exp_probs_b ? static_cast<const float*>(w.exp_probs_b->data) : nullptr;
  MoeRouting r = moe_route(be, hp_.moe, router.data(), probs.data(), T, bias);
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
  moe_experts(be, *batch, il, r, h, out, T, E, hp_.swiglu_limit(hp_.swiglu_limit_exp, l));
  report("ffn_moe_out", out, T, E);
  if (w.ffn_gate_shexp) {
    // Shared experts: always on, weight 1, or sigmoid(gate·x) per token where gated.
    ActBuf<float> sh = be.alloc<float>(T * E);
    ffn_swiglu(be, {*w.ffn_gate_shexp, *w.ffn_up_shexp, *w.ffn_down_shexp}, h, sh.data(), T,
               hp_.swiglu_limit(hp_.swiglu_limit_shexp, l));
    report("ffn_shexp", sh.data(), T, E);
    if (w.ffn_gate_inp_shexp) {
      ActBuf<float> gate = be.alloc<float>(T);
      std::vector<int64_t> rows(T);
      std::iota(rows.begin(), rows.end(), 0);
      be.matmul(*w.ffn_gate_inp_shexp, h, gate.data(), T);
      be.sigmoid(gate.data(), gate.data(), T);
      report("shared_expert_gate_sigmoid", gate.data(), T, 1);
      be.add_rows_weighted(sh.data(), E, rows.data(), gate.data(), T, out);
    } else {
      be.add(out, sh.data(), out, T * E);
    }
  }
}

}  // namespace sluice
