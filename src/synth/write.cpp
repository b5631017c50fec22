// synth/write: synth_write — metadata (llama.cpp's keys with the value types its loader checks),
// the tokenizer copied (and padded) from another GGUF, and the streaming generate → quantize →
// write loop over the tensor plan.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "synth/plan.h"
#include "synth/rng.h"
#include "synth/synth.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// general.file_type: llama.cpp's llama_ftype of the mix (informational for loaders). The pure
// K types have no ftype of their own; q3_k is reported as MOSTLY_Q3_K_S (11), q4_k as MOSTLY_Q4_K_S
// (14), q6_k as Q6_K (18).
uint32_t ftype_of(const std::string& type) {
  if (type == "f32") return 0;
  if (type == "f16") return 1;
  if (type == "q4_0") return 2;
  if (type == "q8_0") return 7;
  if (type == "q2_k") return 10;
  if (type == "q3_k") return 11;
  if (type == "q4_k") return 14;
  if (type == "q4_k_m") return 15;
  if (type == "q6_k") return 18;
  if (type == "iq4_nl") return 25;
  if (type == "iq4_xs") return 30;
  fail("synth: unknown type '", type, "'");
}

// The KDA hybrids' keys (kimi-linear, bailingmoe3) in the order of llama.cpp's converters, as
// scripts/golden/make_kimi_linear.py and make_bailingmoe3.py write them: head_count_kv is a
// per-layer u32 array (0 KDA, 1 MLA); MLA in the absorbed form (one latent head of
// [kv_lora | rope] keys, kv_lora values). kimi-linear writes no rope.freq_base (its MLA has no
// RoPE) and no expert groups; bailingmoe3 adds the safe-gate keys, groups and the shared width.
void write_kda_hparams(GgufWriter& w, const SynthShape& s) {
  const std::string a = s.gguf_arch + ".";
  auto u32 = [&](const std::string& key, int64_t v) { w.set_u32(a + key, static_cast<uint32_t>(v)); };
  const bool ling = s.gguf_arch == "bailingmoe3";
  u32("vocab_size", s.n_vocab);
  u32("context_length", s.n_ctx_train);
  u32("embedding_length", s.n_embd);
  u32("block_count", s.n_layer);
  u32("feed_forward_length", s.n_ff);
  u32("attention.head_count", s.n_head);
  auto kv = std::make_shared<GgufArray>();
  kv->elem_type = GgufType::UINT32;
  for (int64_t l = 0; l < s.n_layer; ++l)
    kv->items.push_back(GgufValue{GgufType::UINT32, uint32_t{s.is_mla_layer(l) ? 1u : 0u}});
  w.set(a + "attention.head_count_kv", GgufValue{GgufType::ARRAY, std::move(kv)});
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  if (ling) w.set_f32(a + "rope.freq_base", s.rope_base);
  if (s.q_lora_rank > 0) u32("attention.q_lora_rank", s.q_lora_rank);
  u32("attention.kv_lora_rank", s.kv_lora_rank);
  u32("attention.key_length", s.kv_lora_rank + s.qk_rope);
  u32("attention.value_length", s.kv_lora_rank);
  u32("attention.key_length_mla", s.qk_nope + s.qk_rope);
  u32("attention.value_length_mla", s.v_head);
  u32("rope.dimension_count", s.qk_rope);
  u32("ssm.conv_kernel", s.ssm_conv_kernel);
  u32("kda.head_dim", s.kda_head_dim);
  if (ling) {
    w.set_bool(a + "kda.safe_gate", true);
    w.set_f32(a + "kda.gate_lower_bound", s.kda_gate_lower_bound);
  }
  u32("expert_count", s.n_expert);
  u32("expert_used_count", s.n_expert_used);
  if (ling) {
    u32("expert_group_count", s.n_group);
    u32("expert_group_used_count", s.n_group_used);
  }
  u32("expert_feed_forward_length", s.n_ff_exp);
  if (ling) u32("expert_shared_feed_forward_length", s.n_ff_shexp);
  u32("expert_shared_count", s.n_expert_shared);
  u32("leading_dense_block_count", s.n_layer_dense_lead);
  w.set_f32(a + "expert_weights_scale", s.expert_weights_scale);
  w.set_bool(a + "expert_weights_norm", s.expert_weights_norm);
  u32("expert_gating_func", s.gating_func);
}

// Hyperparameters under {arch}.*: counts and lengths u32, eps / freq_base / weights_scale f32,
// expert_weights_norm bool — the exact types llama.cpp's llama_model_loader::get_key accepts.
void write_hparams(GgufWriter& w, const SynthShape& s) {
  if (s.kda()) return write_kda_hparams(w, s);
  const std::string a = s.gguf_arch + ".";
  auto u32 = [&](const std::string& key, int64_t v) { w.set_u32(a + key, static_cast<uint32_t>(v)); };
  const bool mla = s.gguf_arch == "deepseek2";
  const bool moe = s.n_expert > 0;
  u32("vocab_size", s.n_vocab);
  u32("context_length", s.n_ctx_train);
  u32("embedding_length", s.n_embd);
  u32("block_count", s.n_layer);
  // llama (Mixtral) and olmoe: feed_forward_length is the expert width; qwen3moe/deepseek2
  // keep the dense width here and the expert width in expert_feed_forward_length.
  const bool ff_is_expert = moe && (s.gguf_arch == "llama" || s.gguf_arch == "olmoe");
  u32("feed_forward_length", ff_is_expert ? s.n_ff_exp : s.n_ff);
  u32("attention.head_count", s.n_head);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + "rope.freq_base", s.rope_base);
  if (mla) {
    // The MLA cache holds one latent "head" per token (see models/mla.h, MlaHparams).
    u32("attention.head_count_kv", 1);
    u32("attention.key_length", s.kv_lora_rank + s.qk_rope);
    u32("attention.value_length", s.kv_lora_rank);
    u32("attention.key_length_mla", s.qk_nope + s.qk_rope);
    u32("attention.value_length_mla", s.v_head);
    // Written even when 0: llama.cpp reads q_lora_rank as required unless block_count is 26
    // or 27 (its "lite" test), and a 0 makes it create attn_q instead of attn_q_a/attn_q_b,
    // so a V2-Lite shape with --layers N still loads.
    u32("attention.q_lora_rank", s.q_lora_rank);
    u32("attention.kv_lora_rank", s.kv_lora_rank);
    u32("rope.dimension_count", s.qk_rope);
    u32("leading_dense_block_count", s.n_layer_dense_lead);
  } else {
    u32("attention.head_count_kv", s.n_head_kv);
    u32("attention.key_length", s.head_dim);
    u32("attention.value_length", s.head_dim);
    u32("rope.dimension_count", s.n_rot > 0 ? s.n_rot : s.head_dim);
  }
  // llama.cpp reads the sections with get_key_or_arr into int rope_sections[4]: an i32 array.
  if (!s.rope_sections.empty()) w.set_i32_array(a + "rope.dimension_sections", s.rope_sections);
  if (moe) {
    u32("expert_count", s.n_expert);
    u32("expert_used_count", s.n_expert_used);
  }
  if (s.gguf_arch == "qwen3moe" || s.hybrid()) u32("expert_feed_forward_length", s.n_ff_exp);
  if (s.hybrid()) {
    // The key order of llama.cpp's converter (and the goldens qwen35moe and qwen3next).
    u32("expert_shared_feed_forward_length", s.n_ff_shexp);
    u32("ssm.conv_kernel", s.ssm_conv_kernel);
    u32("ssm.state_size", s.ssm_d_state);
    u32("ssm.group_count", s.ssm_n_group);
    u32("ssm.time_step_rank", s.ssm_dt_rank);
    u32("ssm.inner_size", s.ssm_d_inner);
    u32("full_attention_interval", s.full_attention_interval);
  }
  if (mla) {
    u32("expert_shared_count", s.n_expert_shared);
    u32("expert_feed_forward_length", s.n_ff_exp);
    w.set_f32(a + "expert_weights_scale", s.expert_weights_scale);
    w.set_bool(a + "expert_weights_norm", s.expert_weights_norm);
    u32("expert_gating_func", s.gating_func);
    u32("expert_group_count", s.n_group);
    u32("expert_group_used_count", s.n_group_used);
  }
}

GgufValue zero_like(GgufType t) {
  switch (t) {
    case GgufType::FLOAT32: return GgufValue{t, 0.0f};
    case GgufType::INT32: return GgufValue{t, int32_t{0}};
    case GgufType::UINT32: return GgufValue{t, uint32_t{0}};
    case GgufType::FLOAT64: return GgufValue{t, 0.0};
    default: fail("synth: cannot pad a tokenizer array of ", gguf_type_name(t));
  }
}

// Copies every tokenizer.* key of `src` in file order. With n_vocab > the tokenizer's size the
// per-token arrays are padded: tokens "<unused_ID>" (made unique if the vocabulary already has
// that text), scores 0, token_type UNUSED (5), so llama.cpp and Sluice never produce or render
// them and token_embd/output keep the real model's shape.
void copy_tokenizer(GgufWriter& w, const GgufFile& src, int64_t n_vocab) {
  const std::vector<std::string> tokens = src.get_string_array("tokenizer.ggml.tokens");
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  std::unordered_set<std::string> texts(tokens.begin(), tokens.end());
  std::vector<std::string> pad;
  for (int64_t id = n_tok; id < n_vocab; ++id) {
    std::string t = "<unused_" + std::to_string(id) + ">";
    while (texts.count(t)) t += "_";
    texts.insert(t);
    pad.push_back(std::move(t));
  }
  auto padded = [&](const GgufValue& v, auto make_item) {
    const auto& arr = std::get<std::shared_ptr<GgufArray>>(v.v);
    auto out = std::make_shared<GgufArray>(*arr);
    if (static_cast<int64_t>(out->items.size()) != n_tok)
      fail(src.path(), ": tokenizer array has ", out->items.size(), " entries for ", n_tok, " tokens");
    for (size_t i = 0; i < pad.size(); ++i) out->items.push_back(make_item(out->elem_type, i));
    return GgufValue{GgufType::ARRAY, std::move(out)};
  };
  bool has_types = false;
  for (const auto& [key, v] : src.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    if (pad.empty() || v.type != GgufType::ARRAY) {
      w.set(key, v);
    } else if (key == "tokenizer.ggml.tokens") {
      w.set(key, padded(v, [&](GgufType, size_t i) { return GgufValue{GgufType::STRING, pad[i]}; }));
    } else if (key == "tokenizer.ggml.scores") {
      w.set(key, padded(v, [](GgufType t, size_t) { return zero_like(t); }));
    } else if (key == "tokenizer.ggml.token_type") {
      has_types = true;
      w.set(key, padded(v, [](GgufType t, size_t) {
              if (t != GgufType::INT32) fail("synth: tokenizer.ggml.token_type is not an i32 array");
              return GgufValue{t, int32_t{5}};  // LLAMA_TOKEN_TYPE_UNUSED
            }));
    } else {
      w.set(key, v);
    }
  }
  if (!pad.empty() && !has_types) {
    // Without token_type every token would read as NORMAL; the padding must say UNUSED.
    std::vector<int32_t> types(static_cast<size_t>(n_tok), 1);
    types.resize(static_cast<size_t>(n_vocab), 5);
    w.set_i32_array("tokenizer.ggml.token_type", types);
  }
}

// Rows per chunk: about 4M elements, so progress moves every fraction of a second even at
// K-quant speed, and a chunk still splits into many rows per thread.
int64_t rows_per_chunk(int64_t ne0) { return std::max<int64_t>(1, (int64_t{4} << 20) / ne0); }

// --fast: a pool of kPoolRows encoded rows per row class (plain rows, and the routing-locality
// context rows when the tensor has them), and every other row assembled block by block from
// the pool block of the same column position (so column scaling is kept) and the same row
// class, picked by a hash of (tensor, row, block). Deterministic, and independent of threads.
constexpr int64_t kPoolRows = 64;

// True when rows of `t` come in two classes (routing locality scales rows >= ctx_begin of
// each ne1 slab).
bool has_ctx_rows(const synth_plan::TensorPlan& t) {
  const int64_t ne1 = t.ne.size() > 1 ? t.ne[1] : 1;
  return t.init.ctx_begin >= 0 && t.init.ctx_begin < ne1;
}

bool use_block_pool(const synth_plan::TensorPlan& t, bool fast) {
  const int64_t ne1 = t.ne.size() > 1 ? t.ne[1] : 1;
  // The context-row class is read off rows [ctx_begin, ctx_begin + kPoolRows) and the plain
  // class off rows [0, kPoolRows), so both ranges must fit in one slab.
  const bool classes_fit = !has_ctx_rows(t) || (t.init.ctx_begin >= kPoolRows && ne1 - t.init.ctx_begin >= kPoolRows);
  return fast && dtype_traits(t.type).block_size > 1 && t.init.zero_rows_from < 0 && classes_fit &&
         t.n_rows() >= 8 * kPoolRows;
}

struct BlockPool {
  std::vector<uint8_t> rows[2];  // [class][kPoolRows][row_bytes]
};

BlockPool make_block_pool(const synth_plan::TensorPlan& t, uint64_t key, size_t row_bytes, float* row) {
  BlockPool p;
  for (int c = 0; c < (has_ctx_rows(t) ? 2 : 1); ++c) {
    const int64_t r0 = c == 0 ? 0 : t.init.ctx_begin;
    p.rows[c].resize(row_bytes * kPoolRows);
    synth_plan::fill_rows(t, key, r0, r0 + kPoolRows, row, p.rows[c].data(), row_bytes);
  }
  return p;
}

void pool_rows(const synth_plan::TensorPlan& t, const BlockPool& p, uint64_t key, int64_t r0, int64_t r1, uint8_t* dst,
               size_t row_bytes) {
  const auto& tr = dtype_traits(t.type);
  const int64_t nb = t.ne[0] / tr.block_size, ne1 = t.ne.size() > 1 ? t.ne[1] : 1;
  for (int64_t r = r0; r < r1; ++r) {
    const int c = has_ctx_rows(t) && (r % ne1) >= t.init.ctx_begin ? 1 : 0;
    uint8_t* out = dst + static_cast<size_t>(r - r0) * row_bytes;
    // The pool rows themselves are written where they belong.
    const int64_t p_row = r - (c == 0 ? 0 : t.init.ctx_begin);
    if (p_row >= 0 && p_row < kPoolRows) {
      std::memcpy(out, p.rows[c].data() + static_cast<size_t>(p_row) * row_bytes, row_bytes);
      continue;
    }
    for (int64_t j = 0; j < nb; ++j) {
      const uint64_t h = synth_plan::mix64(key ^ synth_plan::mix64(static_cast<uint64_t>(r * nb + j)));
      const size_t src_row = static_cast<size_t>(h % kPoolRows);
      std::memcpy(out + j * tr.block_bytes, p.rows[c].data() + src_row * row_bytes + j * tr.block_bytes,
                  tr.block_bytes);
    }
  }
}

}  // namespace

SynthResult synth_write(const SynthOptions& opt, const std::string& path) {
  const auto t0 = Clock::now();
  if (opt.tokenizer.empty()) fail("synth: no tokenizer file given (--tokenizer FILE)");
  if (!std::filesystem::exists(opt.tokenizer))
    fail("synth: tokenizer file '", opt.tokenizer,
         "' not found (--tokenizer FILE: any GGUF with tokenizer.ggml.* keys)");
  std::error_code ec;
  if (std::filesystem::equivalent(opt.tokenizer, path, ec))
    fail("synth: the output '", path, "' is the tokenizer file; writing would destroy it");
  const GgufFile tok(opt.tokenizer);
  const int64_t tok_vocab = static_cast<int64_t>(tok.get_string_array("tokenizer.ggml.tokens").size());
  const auto& types = synth_type_names();
  if (std::find(types.begin(), types.end(), opt.type) == types.end()) {
    std::string known;
    for (const auto& t : types) known += (known.empty() ? "" : ", ") + t;
    fail("synth: unknown type '", opt.type, "' (known: ", known, ")");
  }

  SynthResult res;
  res.shape = synth_resolve_shape(opt, tok_vocab);
  const SynthShape& s = res.shape;
  const std::vector<synth_plan::TensorPlan> plan = synth_plan::plan_tensors(s, opt.type, opt.routing_locality,
                                                                            tok_vocab);

  GgufWriter w;
  w.set_string("general.architecture", s.gguf_arch);
  w.set_string("general.name", "synth-" + s.arch + "-" + s.preset);
  w.set_string("general.description",
               str_cat("random-weight model written by sluice synth: arch ", s.arch, ", preset ", s.preset, ", type ",
                       opt.type, opt.fast ? " (--fast: pooled blocks)" : "", ", seed ", opt.seed, ", routing locality ",
                       opt.routing_locality, "; tokenizer from ",
                       std::filesystem::path(opt.tokenizer).filename().string()));
  w.set_u32("general.file_type", ftype_of(opt.type));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  w.set_alignment(32);
  write_hparams(w, s);
  copy_tokenizer(w, tok, s.n_vocab);

  uint64_t total = 0;
  for (const auto& t : plan) {
    w.add_tensor_info(t.name, t.type, t.ne);
    const size_t nbytes = dtype_row_bytes(t.type, t.ne[0]) * static_cast<size_t>(t.n_rows());
    total += nbytes;
    res.n_params += t.ne[0] * t.n_rows();
    ++res.type_counts[std::string(dtype_name(t.type))];
  }
  res.n_tensors = static_cast<int>(plan.size());
  res.data_bytes = total;

  ThreadPool pool(opt.threads);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  std::vector<uint8_t> buf;  // one tensor's encoded bytes (GgufWriter takes a tensor at a time)
  uint64_t done = 0;
  auto report = [&](int i, const std::string& name, bool finished) {
    if (!opt.progress) return;
    SynthProgress p;
    p.tensor = i + 1;
    p.n_tensors = res.n_tensors;
    p.name = name;
    p.bytes_done = done;
    p.bytes_total = total;
    p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    p.done = finished;
    opt.progress(p);
  };

  w.begin(path);
  for (size_t i = 0; i < plan.size(); ++i) {
    const synth_plan::TensorPlan& t = plan[i];
    const int64_t ne0 = t.ne[0], n_rows = t.n_rows();
    const size_t row_bytes = dtype_row_bytes(t.type, ne0);
    buf.resize(row_bytes * static_cast<size_t>(n_rows));
    const uint64_t key = synth_plan::tensor_key(opt.seed, t.name);
    const int64_t chunk = rows_per_chunk(ne0);
    const bool pooled = use_block_pool(t, opt.fast);
    BlockPool bp;
    if (pooled) {
      scratch[0].resize(static_cast<size_t>(ne0));
      bp = make_block_pool(t, key, row_bytes, scratch[0].data());
    }
    for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
      const int64_t c1 = std::min(n_rows, c0 + chunk);
      pool.parallel_for(c1 - c0, [&](int64_t b, int64_t e, int th) {
        uint8_t* dst = buf.data() + static_cast<size_t>(c0 + b) * row_bytes;
        if (pooled) return pool_rows(t, bp, key, c0 + b, c0 + e, dst, row_bytes);
        auto& row = scratch[static_cast<size_t>(th)];
        row.resize(static_cast<size_t>(ne0));
        synth_plan::fill_rows(t, key, c0 + b, c0 + e, row.data(), dst, row_bytes);
      });
      done += static_cast<uint64_t>(c1 - c0) * row_bytes;
      report(static_cast<int>(i), t.name, false);
    }
    w.write_tensor_data(t.name, buf.data(), buf.size());
  }
  w.finish();
  res.file_bytes = std::filesystem::file_size(path);
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report(res.n_tensors - 1, plan.back().name, true);
  return res;
}

}  // namespace sluice
