// models/registry: the list of architecture modules (models/arch.h), one line per module.
#include <span>

#include "core/error.h"
#include "models/arch.h"

namespace sluice {

// Each module's entries, defined in its own file.
std::span<const Arch> llama_like_archs();   // models/llama_like.cpp
std::span<const Arch> deepseek2_archs();    // models/deepseek2.cpp
std::span<const Arch> qwen35_archs();       // models/qwen35.cpp
std::span<const Arch> kimi_linear_archs();  // models/kimi_linear.cpp
std::span<const Arch> bailingmoe3_archs();  // models/bailingmoe3.cpp

namespace {

const std::vector<const Arch*>& registry() {
  static const std::vector<const Arch*> all = [] {
    std::vector<const Arch*> v;
    for (auto module : {llama_like_archs, deepseek2_archs, qwen35_archs, kimi_linear_archs, bailingmoe3_archs})
      for (const Arch& a : module()) v.push_back(&a);
    return v;
  }();
  return all;
}

}  // namespace

const Arch& find_arch(const std::string& path, std::string_view name) {
  for (const Arch* a : registry())
    if (a->name == name) return *a;
  fail(path, ": architecture '", name, "' is not supported (supported: ", supported_archs(), ")");
}

std::string supported_archs() {
  std::string s;
  for (const Arch* a : registry()) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

const TensorView* bind_tensor(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> shape,
                              bool required) {
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

MemoryLayout attention_memory_layout(const Hparams& hp) {
  return MemoryLayout::all_attention(KvGeometry{hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v});
}

}  // namespace sluice
