// runtime/kv_cache: per-layer K and V storage, one row per position, in a chosen dtype
// (F16 by default, as llama.cpp; F32 for exactness checks). Codecs come with a later issue.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace sluice {

struct KvCacheOptions {
  int64_t n_ctx = 2048;   // positions the cache holds
  DType type_k = DType::F16;
  DType type_v = DType::F16;
};

class KvCache {
 public:
  // k_width / v_width: elements per position per layer (n_head_kv * head_dim).
  KvCache(int64_t n_layer, int64_t k_width, int64_t v_width, const KvCacheOptions& opt);

  int64_t n_ctx() const { return n_ctx_; }
  DType type_k() const { return type_k_; }
  DType type_v() const { return type_v_; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  uint8_t* k_row(int64_t layer, int64_t pos) { return k_[layer].data() + pos * k_row_bytes_; }
  uint8_t* v_row(int64_t layer, int64_t pos) { return v_[layer].data() + pos * v_row_bytes_; }
  const uint8_t* k_data(int64_t layer) const { return k_[layer].data(); }
  const uint8_t* v_data(int64_t layer) const { return v_[layer].data(); }
  size_t bytes() const;

 private:
  int64_t n_ctx_;
  DType type_k_, type_v_;
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<std::vector<uint8_t>> k_, v_;
};

}  // namespace sluice
