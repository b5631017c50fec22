// runtime/kv_cache: allocation and size checks of the per-layer K/V buffers.
#include "runtime/kv_cache.h"

#include "core/error.h"

namespace sluice {

KvCache::KvCache(int64_t n_layer, int64_t k_width, int64_t v_width, const KvCacheOptions& opt)
    : n_ctx_(opt.n_ctx), type_k_(opt.type_k), type_v_(opt.type_v) {
  if (opt.n_ctx <= 0) fail("kv cache: context size must be positive, got ", opt.n_ctx);
  for (auto [t, w] : {std::pair{type_k_, k_width}, std::pair{type_v_, v_width}})
    if (w % dtype_traits(t).block_size != 0)
      fail("kv cache: type ", dtype_name(t), " needs a row width that is a multiple of ", dtype_traits(t).block_size,
           ", got ", w);
  k_row_bytes_ = dtype_row_bytes(type_k_, k_width);
  v_row_bytes_ = dtype_row_bytes(type_v_, v_width);
  k_.resize(n_layer);
  v_.resize(n_layer);
  for (int64_t l = 0; l < n_layer; ++l) {
    k_[l].assign(k_row_bytes_ * n_ctx_, 0);
    v_[l].assign(v_row_bytes_ * n_ctx_, 0);
  }
}

size_t KvCache::bytes() const { return (k_row_bytes_ + v_row_bytes_) * n_ctx_ * k_.size(); }

}  // namespace sluice
