// runtime/session: one sequence over a loaded model and a backend — a Memory holding a single
// sequence, evaluated in batches of at most kMaxBatch tokens. Several sequences in one batch:
// use Memory and Model::forward directly (runtime/ has the multi-sequence loops).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "memory/batch.h"
#include "memory/memory.h"
#include "models/model.h"
#include "sampling/sampler.h"  // argmax

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
  int64_t n_past() const { return mem_.seq_len(seq_); }
  int64_t n_ctx() const { return mem_.n_ctx(); }
  void reset() { mem_.seq_rewind(seq_, 0); }
  // Drops positions >= n and returns the length reached: n itself for pure attention, the
  // latest checkpoint at or before n for a model with recurrent state (memory/memory.h); the
  // caller evaluates the tokens from there.
  int64_t rewind(int64_t n) { return mem_.seq_rewind(seq_, n); }
  // Snapshots the recurrent states at n_past() so a later rewind can land here (a no-op for
  // pure attention, where every position can be rewound to).
  void checkpoint() { mem_.seq_checkpoint(seq_); }
  // Continue at position n (0 <= n < n_ctx): positions < n must already hold K/V rows, e.g.
  // written through kv_cache_mut().store by a benchmark (bench/bench.h kv_fill_synthetic).
  void set_n_past(int64_t n);
  KvCache& kv_cache_mut() { return mem_.kv(seq_); }
  void set_hook(TensorHook hook) { hook_ = std::move(hook); }
  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  const KvCache& kv_cache() const { return mem_.kv(seq_); }
  Memory& memory() { return mem_; }
  int32_t seq() const { return seq_; }

 private:
  const Model& model_;
  Backend& backend_;
  Memory mem_;
  int32_t seq_ = 0;
  TensorHook hook_;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace sluice
