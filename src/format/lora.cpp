// format/lora: see lora.h.
#include "format/lora.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
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

// A 2-D float adapter tensor as f32 [rows][cols].
std::vector<float> to_f32(const StTensor& t, const std::string& file) {
  if (t.shape.size() != 2)
    fail(file, ": tensor '", t.name, "' has ", t.shape.size(), " dimensions (LoRA factors are 2-D",
         t.shape.size() == 3 ? "; adapters on stacked experts are not supported" : "", ")");
  const auto dt = st_dtype_to_dtype(t.dtype);
  if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
    fail(file, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype), " (LoRA factors are F32, F16 or BF16)");
  const size_t n = static_cast<size_t>(t.shape[0] * t.shape[1]);
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

}  // namespace

std::string LoraSummary::line() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "lora: %lld tensor%s merged (rank %lld, scale %g)", static_cast<long long>(n_tensors),
                n_tensors == 1 ? "" : "s", static_cast<long long>(rank), static_cast<double>(scale));
  return buf;
}

LoraSummary apply_lora_adapter(GgufFile& f, const std::string& dir_s) {
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
  sum.scale = c["lora_parameters"]["scale"].get<float>();
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
  };
  std::vector<Merge> merges;
  for (const auto& [module, p] : pairs) {
    if (!p.a || !p.b)
      fail(st_path.string(), ": '", module, p.a ? ".lora_b" : ".lora_a", "' missing (its ", p.a ? "lora_a" : "lora_b",
           " is there)");
    if (module.find("embed_tokens") != std::string::npos)
      fail(st_path.string(), ": '", module, "': adapters on embeddings are not supported");
    const std::string gguf = hf_tensor_gguf_name(module + ".weight", st_path.string());
    const TensorView* w = gguf.empty() ? nullptr : f.find_tensor(gguf);
    if (!w) fail(st_path.string(), ": '", module, "' adapts ", gguf, ", which ", f.path(), " does not have");
    if (p.a->shape.size() != 2 || p.b->shape.size() != 2)
      fail(st_path.string(), ": '", module, "': LoRA factors are 2-D (adapters on stacked experts are not supported)");
    const int64_t in = p.a->shape[0], r = p.a->shape[1], out = p.b->shape[1];
    if (p.b->shape[0] != r)
      fail(st_path.string(), ": '", module, "': lora_a is [", in, ", ", r, "] but lora_b is [", p.b->shape[0], ", ",
           out, "] (the ranks differ)");
    if (w->n_dims != 2 || w->ne[0] != in || w->ne[1] != out)
      fail(st_path.string(), ": '", module, "': the factors make a [", out, ", ", in, "] update but ", gguf, " is [",
           w->ne[1], ", ", w->ne[0], "]");
    merges.push_back({gguf, w, p.a, p.b});
    sum.rank = std::max(sum.rank, r);
  }

  // W' = W + scale·(A·B)ᵀ, row o of W' (out rows of `in` elements): W[o] + scale·Σ_k B[k][o]·A[·][k].
  for (const Merge& m : merges) {
    const std::vector<float> a = to_f32(*m.a, st_path.string()), b = to_f32(*m.b, st_path.string());
    const int64_t in = m.base->ne[0], out = m.base->ne[1], r = m.a->shape[1];
    auto merged = std::make_shared<std::vector<float>>(static_cast<size_t>(in * out));
    std::vector<float> bo(static_cast<size_t>(r));
    for (int64_t o = 0; o < out; ++o) {
      float* row = merged->data() + o * in;
      dequantize_row(m.base->type, m.base->row(o), row, in);
      for (int64_t k = 0; k < r; ++k) bo[static_cast<size_t>(k)] = sum.scale * b[static_cast<size_t>(k * out + o)];
      for (int64_t i = 0; i < in; ++i) {
        const float* ai = a.data() + i * r;
        float d = 0;
        for (int64_t k = 0; k < r; ++k) d += ai[k] * bo[static_cast<size_t>(k)];
        row[i] += d;
      }
    }
    const void* data = merged->data();
    f.replace_tensor(m.gguf, DType::F32, data, merged->size() * sizeof(float), merged);
    ++sum.n_tensors;
  }
  return sum;
}

}  // namespace sluice
