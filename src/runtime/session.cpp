// runtime/session: batch evaluation over the KV cache.
#include "runtime/session.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

namespace {

MemoryOptions single_sequence(const KvCacheOptions& kv) {
  MemoryOptions o;
  o.kv = kv;
  return o;
}

}  // namespace

Session::Session(const Model& model, Backend& backend, const KvCacheOptions& kv_opt)
    : model_(model), backend_(backend), mem_(model.memory_layout(), single_sequence(kv_opt)), seq_(mem_.seq_new()) {}

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail("eval: no tokens");
  const int64_t n_vocab = model_.hparams().n_vocab, n_past = this->n_past();
  // Checked here too, before any batch runs: a prompt that cannot fit leaves the session as it was.
  if (n_past + n > n_ctx())
    fail("context full: positions ", n_past, "..", n_past + n - 1, " do not fit in a cache of ", n_ctx(),
         " (use --ctx)");
  logits_.resize((all_logits ? n : 1) * n_vocab);
  for (int64_t i = 0; i < n; i += kMaxBatch) {
    const int64_t m = std::min(kMaxBatch, n - i);
    const bool last_chunk = i + m == n;
    batch_.clear();
    for (int64_t t = 0; t < m; ++t)
      batch_.add(tokens[i + t], seq_, static_cast<int32_t>(n_past + i + t), all_logits || (last_chunk && t == m - 1));
    float* out = all_logits ? logits_.data() + i * n_vocab : last_chunk ? logits_.data() : nullptr;
    model_.forward(backend_, mem_, batch_, out, hook_ ? &hook_ : nullptr);
  }
  return logits_;
}

void Session::set_n_past(int64_t n) {
  if (n < 0 || n >= n_ctx()) fail("session: position ", n, " outside the context of ", n_ctx());
  mem_.seq_set_len(seq_, n);
}


}  // namespace sluice
