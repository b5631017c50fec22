// api/options: the public option structs' checks and their conversion into internal options
// (sizes, KV cache codecs).
#include <cctype>
#include <exception>
#include <string>

#include "api/engine_impl.h"
#include "core/error.h"
#include "kvcodec/kvcodec.h"

namespace sluice {

size_t parse_byte_size(const std::string& what, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  const std::string units = "KMGT";
  double mul = 1;
  if (unit.size() == 1 && units.find(unit[0]) != std::string::npos)
    for (size_t i = 0; i <= units.find(unit[0]); ++i) mul *= 1024;
  else if (!unit.empty() && unit != "B")
    used = 0;
  if (used == 0 || !(v > 0) || v * mul > 1e18) fail(what, ": '", text, "' is not a size (e.g. 4G, 512M, 65536)");
  return static_cast<size_t>(v * mul);
}

std::string cache_type_names() { return std::string(kv_type_names()); }

DType kv_cache_type(const std::string& name) {
  auto t = kv_type_from_name(name);
  if (!t) fail("cache type '", name, "' is not supported (", kv_type_names(), ")");
  return *t;
}

void check_kv_options(const KvOptions& kv) {
  kv_cache_type(kv.type_k);
  kv_cache_type(kv.type_v);
}

KvCacheOptions kv_cache_options(const KvOptions& kv, int64_t n_ctx) {
  KvCacheOptions o;
  o.n_ctx = n_ctx;
  o.type_k = kv_cache_type(kv.type_k);
  o.type_v = kv_cache_type(kv.type_v);
  o.auto_asymmetric = kv.auto_asymmetric;
  if (!kv.rotation) o.rotation = KvCacheOptions::Rotation::off;
  if (!kv.k_mean) o.k_mean = KvCacheOptions::KMean::off;
  o.n_sink_k = kv.sinks_k;
  o.n_sink_v = kv.sinks_v;
  return o;
}

ModelInfo model_info_of(const Model& m) {
  const Hparams& hp = m.hparams();
  ModelInfo i;
  i.arch = hp.arch;
  i.n_vocab = hp.n_vocab;
  i.n_ctx_train = hp.n_ctx_train;
  i.n_embd = hp.n_embd;
  i.n_layer = hp.n_layer;
  i.n_head = hp.n_head;
  i.n_head_kv = hp.n_head_kv;
  i.head_dim_k = hp.head_dim_k;
  i.head_dim_v = hp.head_dim_v;
  i.n_ff = hp.n_ff.empty() ? 0 : hp.n_ff[0];
  i.n_rot = hp.n_rot;
  i.rms_eps = hp.rms_eps;
  i.rope_base = hp.rope_base;
  i.rope_neox = hp.rope_mode == RopeMode::neox;
  i.weight_bytes = m.weight_bytes();
  return i;
}

}  // namespace sluice
