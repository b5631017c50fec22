// runtime/session: one conversation's state — the KV cache and position — over a loaded
// model and a backend. Evaluates batches of tokens and hands back logits.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"
#include "memory/kv_cache.h"

namespace sluice {

class Session {
 public:
  Session(const Model& model, Backend& backend, const KvCacheOptions& kv_opt);

  // Evaluates `tokens` at positions n_past()..; returns [n][n_vocab] logits for every token
  // if all_logits, else the last token's [n_vocab]. A prompt longer than kMaxBatch runs in
  // batches of kMaxBatch tokens (llama.cpp's n_ubatch), so activation memory stays bounded
  // for any prompt length; each token's result equals the one-batch result up to float
  // rounding (attention's split-KV choice depends on the batch shape).
  static constexpr int64_t kMaxBatch = 512;
  std::span<const float> eval(std::span<const int32_t> tokens, bool all_logits = false);
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return kv_.n_ctx(); }
  void reset() { n_past_ = 0; }
  // Continue at position n (0 <= n < n_ctx): positions < n must already hold K/V rows, e.g.
  // written through kv_cache_mut().store by a benchmark (bench/bench.h kv_fill_synthetic).
  void set_n_past(int64_t n);
  KvCache& kv_cache_mut() { return kv_; }
  void set_hook(TensorHook hook) { hook_ = std::move(hook); }
  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  const KvCache& kv_cache() const { return kv_; }

 private:
  const Model& model_;
  Backend& backend_;
  KvCache kv_;
  int64_t n_past_ = 0;
  TensorHook hook_;
  std::vector<float> logits_;
};

// Index of the largest logit, ties to the lowest id (llama.cpp's greedy rule).
int32_t argmax(std::span<const float> logits);

}  // namespace sluice
