// format/lora: see lora.h.
#include "format/lora.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "format/hf_folder.h"
#include "format/safetensors.h"
#include "quant/quant.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_config(const fs::path& p) {
  std::ifstream in(p);
  if (!in) fail(p.string(), ": cannot open (an MLX-LM adapter folder has adapter_config.json)");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(p.string(), ": not valid JSON: ", e.what());
  }
}

// A 2-D float adapter tensor as f32 [rows][cols] (3-D, experts' factors: [E][rows][cols]).
std::vector<float> to_f32(const StTensor& t, const std::string& file) {
  if (t.shape.size() != 2 && t.shape.size() != 3)
    fail(file, ": tensor '", t.name, "' has ", t.shape.size(), " dimensions (LoRA factors are 2-D, or 3-D on experts)");
  const auto dt = st_dtype_to_dtype(t.dtype);
  if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
    fail(file, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype), " (LoRA factors are F32, F16 or BF16)");
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (*dt == DType::F32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    out[i] = *dt == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  return out;
}

// W' = W + scale·B·A as owned f32 rows replacing `name` in f: A is [r][in] (row k = a_k), B
// [out][r]. Row o of W' is W[o] + Σ_k (scale·B[o][k])·A[k], the sum over k in order.
void merge_into(GgufFile& f, const TensorView& base, const std::vector<float>& a, const std::vector<float>& b,
                int64_t r, float scale) {
  const int64_t in = base.ne[0], out = base.ne[1];
  auto merged = std::make_shared<std::vector<float>>(static_cast<size_t>(in * out));
  std::vector<float> bo(static_cast<size_t>(r));
  for (int64_t o = 0; o < out; ++o) {
    float* row = merged->data() + o * in;
    dequantize_row(base.type, base.row(o), row, in);
    for (int64_t k = 0; k < r; ++k) bo[static_cast<size_t>(k)] = scale * b[static_cast<size_t>(o * r + k)];
    for (int64_t i = 0; i < in; ++i) {
      float d = 0;
      for (int64_t k = 0; k < r; ++k) d += a[static_cast<size_t>(k * in + i)] * bo[static_cast<size_t>(k)];
      row[i] += d;
    }
  }
  const void* data = merged->data();
  f.replace_tensor(base.name, DType::F32, data, merged->size() * sizeof(float), merged);
}

// The update scale·B·A of base (A [r][in], B [out][r]): merged into its weights, or attached to
// it for Backend::matmul to add at run time (the base bytes untouched). expert >= 0: base is
// stacked experts and the update is that expert's (never merged: refused before).
void apply_update(GgufFile& f, const TensorView& base, std::vector<float> a, std::vector<float> b, int64_t r,
                  float scale, bool merge, int64_t expert = -1) {
  if (merge) return merge_into(f, base, a, b, r, scale);
  auto factors = std::make_shared<std::pair<std::vector<float>, std::vector<float>>>(std::move(a), std::move(b));
  LoraTerm t;
  t.scale = scale;
  for (auto [view, data, in, out] :
       {std::tuple{&t.a, &factors->first, base.ne[0], r}, std::tuple{&t.b, &factors->second, r, base.ne[1]}}) {
    view->name = base.name + (view == &t.a ? ".lora_a" : ".lora_b");
    view->type = DType::F32;
    view->n_dims = 2;
    view->ne[0] = in;
    view->ne[1] = out;
    view->data = data->data();
    view->nbytes = data->size() * sizeof(float);
  }
  if (expert >= 0)
    f.add_expert_lora(base.name, expert, t, factors);
  else
    f.add_lora(base.name, t, factors);
}

// [rows][cols] -> [cols][rows].
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[static_cast<size_t>(j * rows + i)] = x[static_cast<size_t>(i * cols + j)];
  return t;
}

// A llama.cpp LoRA GGUF (convert_lora_to_gguf.py): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and per adapted tensor NAME the pair NAME.lora_a (ggml [in, r]: r rows of
// `in`) and NAME.lora_b ([r, out]: out rows of r); llama.cpp adds scale·B·(A·x) with scale =
// user_scale·alpha/r (user_scale when alpha is 0).
LoraSummary apply_gguf_adapter(GgufFile& f, const std::string& path, float user_scale, bool merge) {
  const GgufFile ad(path);
  const std::string type = ad.get_string_or("general.type", "");
  if (type != "adapter")
    fail(path, ": general.type is '", type, "', not 'adapter' (a LoRA GGUF from llama.cpp's convert_lora_to_gguf.py)");
  if (const std::string t = ad.get_string_or("adapter.type", ""); t != "lora")
    fail(path, ": adapter.type is '", t, "' (only 'lora' adapters are supported)");
  const std::string arch = ad.get_string_or("general.architecture", ""),
                    base_arch = f.get_string_or("general.architecture", "");
  if (arch != base_arch)
    fail(path, ": an adapter for architecture '", arch, "', but ", f.path(), " is '", base_arch, "'");
  const float alpha = ad.get_f32_or("adapter.lora.alpha", 0.0f);
  if (!std::isfinite(alpha) || !std::isfinite(user_scale))
    fail(path, ": adapter.lora.alpha or the scale is not finite");
  struct Pair {
    const TensorView *a = nullptr, *b = nullptr;
  };
  std::map<std::string, Pair> pairs;
  for (const TensorView& t : ad.tensors()) {
    const bool is_a = t.name.ends_with(".lora_a"), is_b = t.name.ends_with(".lora_b");
    if (!is_a && !is_b) fail(path, ": tensor '", t.name, "' is not a LoRA factor (.lora_a / .lora_b)");
    Pair& p = pairs[t.name.substr(0, t.name.size() - 7)];
    (is_a ? p.a : p.b) = &t;
  }
  if (pairs.empty()) fail(path, ": no LoRA factors");
  LoraSummary sum;
  sum.scale = user_scale;
  sum.merged = merge;
  struct Merge {
    const TensorView *base, *a, *b;
  };
  std::vector<Merge> merges;
  for (const auto& [name, p] : pairs) {
    if (!p.a || !p.b)
      fail(path, ": '", name, p.a ? ".lora_b" : ".lora_a", "' missing (its ", p.a ? "lora_a" : "lora_b", " is there)");
    if (name == "token_embd.weight") fail(path, ": '", name, "': adapters on the embeddings are not supported");
    const TensorView* w = f.find_tensor(name);
    if (!w) fail(path, ": '", name, "' adapts a tensor ", f.path(), " does not have");
    // Stacked experts (llama.cpp's build_lora_mm_id): lora_a [in, r, E] and lora_b [r, out, E],
    // expert e's factors slice e of each.
    const bool experts = w->n_dims == 3 && name.ends_with("_exps.weight");
    const int dims = experts ? 3 : 2;
    if (p.a->n_dims != dims || p.b->n_dims != dims || (w->n_dims != 2 && !experts))
      fail(path, ": '", name, "': LoRA factors must be 2-D on a matrix, 3-D on stacked experts (factors ", p.a->n_dims,
           "-D and ", p.b->n_dims, "-D, tensor ", w->n_dims, "-D)");
    if (experts && (p.a->ne[2] != w->ne[2] || p.b->ne[2] != w->ne[2]))
      fail(path, ": '", name, "': factors for ", p.a->ne[2], " / ", p.b->ne[2], " experts, the tensor has ", w->ne[2]);
    if (experts && merge)
      fail(path, ": '", name, "': --lora-merge on experts is not supported (run-time adapters are)");
    const int64_t in = p.a->ne[0], r = p.a->ne[1], out = p.b->ne[1];
    if (p.b->ne[0] != r)
      fail(path, ": '", name, "': lora_a is [", in, ", ", r, "] but lora_b is [", p.b->ne[0], ", ", out,
           "] (the ranks differ)");
    if (w->ne[0] != in || w->ne[1] != out)
      fail(path, ": '", name, "': the factors make a [", in, ", ", out, "] update but the tensor is [", w->ne[0], ", ",
           w->ne[1], "]");
    if (!quant_supported(p.a->type) || !quant_supported(p.b->type))
      fail(path, ": '", name, "': factor type ", dtype_name(p.a->type), "/", dtype_name(p.b->type),
           " is not supported");
    merges.push_back({w, p.a, p.b});
    sum.rank = std::max(sum.rank, r);
  }
  // Rows [first, first + n) of t as f32.
  auto rows_f32 = [](const TensorView& t, int64_t first, int64_t n) {
    std::vector<float> x(static_cast<size_t>(t.ne[0] * n));
    for (int64_t i = 0; i < n; ++i) dequantize_row(t.type, t.row(first + i), x.data() + i * t.ne[0], t.ne[0]);
    return x;
  };
  for (const Merge& m : merges) {
    const int64_t r = m.a->ne[1], out = m.b->ne[1];
    const float scale = alpha != 0.0f ? user_scale * alpha / static_cast<float>(r) : user_scale;
    if (m.base->n_dims == 3) {
      for (int64_t e = 0; e < m.base->ne[2]; ++e)
        apply_update(f, *m.base, rows_f32(*m.a, e * r, r), rows_f32(*m.b, e * out, out), r, scale, false, e);
    } else {
      apply_update(f, *m.base, rows_f32(*m.a, 0, r), rows_f32(*m.b, 0, out), r, scale, merge);
    }
    ++sum.n_tensors;
  }
  if (alpha != 0.0f) sum.scale = user_scale * alpha / static_cast<float>(sum.rank);
  return sum;
}

}  // namespace

std::string LoraSummary::line() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "lora: %lld tensor%s %s (rank %lld, scale %g)", static_cast<long long>(n_tensors),
                n_tensors == 1 ? "" : "s", merged ? "merged" : "adapted at run time", static_cast<long long>(rank),
                static_cast<double>(scale));
  return buf;
}

namespace {

LoraSummary apply_mlx_adapter(GgufFile& f, const std::string& dir_s, float user_scale, bool merge) {
  const fs::path dir(dir_s), cfg_path = dir / "adapter_config.json", st_path = dir / "adapters.safetensors";
  const json c = read_config(cfg_path);
  if (!c.is_object()) fail(cfg_path.string(), ": not a JSON object");
  const std::string type = c.contains("fine_tune_type") && c["fine_tune_type"].is_string()
                               ? c["fine_tune_type"].get<std::string>()
                               : "lora";
  if (type != "lora")
    fail(cfg_path.string(), ": fine_tune_type '", type, "' is not supported (LoRA adapters only; fuse ", type,
         " with mlx_lm.fuse first)");
  if (!c.contains("lora_parameters") || !c["lora_parameters"].is_object() || !c["lora_parameters"].contains("scale") ||
      !c["lora_parameters"]["scale"].is_number())
    fail(cfg_path.string(), ": lora_parameters.scale missing or not a number");
  LoraSummary sum;
  sum.merged = merge;
  sum.scale = c["lora_parameters"]["scale"].get<float>() * user_scale;
  if (!std::isfinite(sum.scale)) fail(cfg_path.string(), ": lora_parameters.scale is not finite");

  // Every factor by module, checked whole before anything is merged.
  auto st = std::make_shared<SafetensorsFile>(st_path.string());
  struct Pair {
    const StTensor *a = nullptr, *b = nullptr;
  };
  std::map<std::string, Pair> pairs;
  for (const StTensor& t : st->tensors()) {
    const auto dot = t.name.rfind('.');
    const std::string leaf = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
    if (leaf != "lora_a" && leaf != "lora_b")
      fail(st_path.string(), ": tensor '", t.name, "' is not a LoRA factor (.lora_a / .lora_b",
           leaf == "m" ? "; DoRA magnitudes are not supported" : "", ")");
    Pair& p = pairs[t.name.substr(0, dot)];
    (leaf == "lora_a" ? p.a : p.b) = &t;
  }
  if (pairs.empty()) fail(st_path.string(), ": no LoRA factors");
  struct Merge {
    std::string gguf;
    const TensorView* base;
    const StTensor *a, *b;
    const TensorView* gate = nullptr;  // Qwen3-Next's in_proj_qkvz: base is attn_qkv, this attn_gate
  };
  std::vector<Merge> merges;
  for (const auto& [module, p] : pairs) {
    if (!p.a || !p.b)
      fail(st_path.string(), ": '", module, p.a ? ".lora_b" : ".lora_a", "' missing (its ", p.a ? "lora_a" : "lora_b",
           " is there)");
    if (module.find("embed_tokens") != std::string::npos)
      fail(st_path.string(), ": '", module, "': adapters on embeddings are not supported");
    const std::string gguf = hf_tensor_gguf_name(module + ".weight", st_path.string(), f);
    const TensorView* w = gguf.empty() ? nullptr : f.find_tensor(gguf);
    // Qwen3-Next's in_proj_qkvz is split at load into attn_qkv and attn_gate: so is B.
    const bool qkvz = !w && gguf.ends_with("attn_qkvz.weight");
    const TensorView* gate = nullptr;
    if (qkvz) {
      const std::string blk = gguf.substr(0, gguf.size() - std::string("attn_qkvz.weight").size());
      w = f.find_tensor(blk + "attn_qkv.weight");
      gate = f.find_tensor(blk + "attn_gate.weight");
      if (!w || !gate) w = nullptr;
    }
    if (!w) fail(st_path.string(), ": '", module, "' adapts ", gguf, ", which ", f.path(), " does not have");
    if (w->n_dims == 3 && gguf.ends_with("_exps.weight")) {
      // mlx-lm's LoRASwitchLinear: lora_a [E, r, in] and lora_b [E, out, r], expert by expert.
      const auto& sa = p.a->shape;
      const auto& sb = p.b->shape;
      if (sa.size() != 3 || sb.size() != 3 || sa[0] != w->ne[2] || sb[0] != w->ne[2] || sa[2] != w->ne[0] ||
          sb[1] != w->ne[1] || sa[1] != sb[2])
        fail(st_path.string(), ": '", module, "': expert factors ", json(sa).dump(), " and ", json(sb).dump(),
             " do not fit ", gguf, " [", w->ne[2], " experts, ", w->ne[1], " out, ", w->ne[0], " in] (want [E, r, in]",
             " and [E, out, r])");
      if (merge)
        fail(st_path.string(), ": '", module, "': --lora-merge on experts is not supported (run-time adapters are)");
      merges.push_back({gguf, w, p.a, p.b});
      sum.rank = std::max(sum.rank, sa[1]);
      continue;
    }
    if (p.a->shape.size() != 2 || p.b->shape.size() != 2)
      fail(st_path.string(), ": '", module, "': LoRA factors of ", gguf, " are 2-D (", p.a->shape.size(), "-D given)");
    const int64_t in = p.a->shape[0], r = p.a->shape[1], out = p.b->shape[1];
    if (p.b->shape[0] != r)
      fail(st_path.string(), ": '", module, "': lora_a is [", in, ", ", r, "] but lora_b is [", p.b->shape[0], ", ",
           out, "] (the ranks differ)");
    const int64_t rows = w->ne[1] + (gate ? gate->ne[1] : 0);
    if (w->n_dims != 2 || w->ne[0] != in || rows != out || (gate && gate->ne[0] != in))
      fail(st_path.string(), ": '", module, "': the factors make a [", out, ", ", in, "] update but ", gguf, " is [",
           rows, ", ", w->ne[0], "]");
    merges.push_back({gguf, w, p.a, p.b, gate});
    sum.rank = std::max(sum.rank, r);
  }

  // MLX's x·A·B: the factors as apply_update's A [r][in] and B [out][r].
  for (const Merge& m : merges) {
    if (m.base->n_dims == 3) {  // experts: A[e] is already [r][in] and B[e] [out][r]
      const int64_t n_exp = m.base->ne[2], in = m.base->ne[0], out = m.base->ne[1], r = m.a->shape[1];
      const std::vector<float> a = to_f32(*m.a, st_path.string()), b = to_f32(*m.b, st_path.string());
      for (int64_t e = 0; e < n_exp; ++e)
        apply_update(f, *m.base, std::vector<float>(a.begin() + e * r * in, a.begin() + (e + 1) * r * in),
                     std::vector<float>(b.begin() + e * out * r, b.begin() + (e + 1) * out * r), r, sum.scale, false,
                     e);
      ++sum.n_tensors;
      continue;
    }
    const int64_t in = m.base->ne[0], r = m.a->shape[1], out = m.b->shape[1];
    std::vector<float> a = transposed(to_f32(*m.a, st_path.string()), in, r),
                       b = transposed(to_f32(*m.b, st_path.string()), r, out);
    if (!m.gate) {
      apply_update(f, *m.base, std::move(a), std::move(b), r, sum.scale, merge);
      ++sum.n_tensors;
      continue;
    }
    // B's rows in the split's order (hf_folder.h), then cut after attn_qkv's rows.
    const std::string a_ = f.get_string("general.architecture") + ".";
    const int64_t hk = f.get_u32(a_ + "ssm.group_count"), hv = f.get_u32(a_ + "ssm.time_step_rank"),
                  dk = f.get_u32(a_ + "ssm.state_size"), dv = f.get_u32(a_ + "ssm.inner_size") / hv;
    if (hk <= 0 || hv <= 0 || hv % hk != 0 || dk <= 0 || dv <= 0)
      fail(f.path(), ": the DeltaNet shape (ssm.group_count ", hk, ", time_step_rank ", hv, ") cannot split ", m.gguf);
    const std::vector<int64_t> order = qkvz_split_rows(hk, hv, dk, dv);
    if (static_cast<int64_t>(order.size()) != out)
      fail(st_path.string(), ": ", m.gguf, ": lora_b has ", out, " rows, the split ", order.size());
    std::vector<float> b_qkv, b_gate;
    for (size_t i = 0; i < order.size(); ++i) {
      auto& dst = static_cast<int64_t>(i) < m.base->ne[1] ? b_qkv : b_gate;
      dst.insert(dst.end(), b.begin() + order[i] * r, b.begin() + (order[i] + 1) * r);
    }
    apply_update(f, *m.base, a, std::move(b_qkv), r, sum.scale, merge);
    apply_update(f, *m.gate, std::move(a), std::move(b_gate), r, sum.scale, merge);
    sum.n_tensors += 2;
  }
  return sum;
}

}  // namespace

LoraSummary apply_lora_adapter(GgufFile& f, const std::string& spec, bool merge) {
  std::string path = spec;
  float scale = 1.0f;
  std::error_code ec;
  if (!fs::exists(spec, ec)) {
    // PATH:SCALE
    const size_t colon = spec.rfind(':');
    char* end = nullptr;
    const std::string tail = colon == std::string::npos ? "" : spec.substr(colon + 1);
    const float v = tail.empty() ? 0.0f : std::strtof(tail.c_str(), &end);
    if (tail.empty() || *end != '\0' || !std::isfinite(v))
      fail("--lora ", spec, ": no such file or folder (an adapter is PATH or PATH:SCALE)");
    path = spec.substr(0, colon);
    scale = v;
    if (!fs::exists(path, ec)) fail("--lora ", spec, ": no such file or folder '", path, "'");
  }
  return fs::is_directory(path, ec) ? apply_mlx_adapter(f, path, scale, merge)
                                    : apply_gguf_adapter(f, path, scale, merge);
}

}  // namespace sluice
