// runtime/session: batch evaluation over the KV cache.
#include "runtime/session.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

Session::Session(const Model& model, Backend& backend, const KvCacheOptions& kv_opt)
    : model_(model),
      backend_(backend),
      kv_(KvGeometry{model.hparams().n_layer, model.hparams().n_head, model.hparams().n_head_kv,
                     model.hparams().head_dim_k, model.hparams().head_dim_v},
          kv_opt) {}

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail("eval: no tokens");
  const int64_t n_vocab = model_.hparams().n_vocab;
  // Checked here too, before any batch runs: a prompt that cannot fit leaves the session as it was.
  if (n_past_ + n > kv_.n_ctx())
    fail("context full: positions ", n_past_, "..", n_past_ + n - 1, " do not fit in a cache of ", kv_.n_ctx(), " (use --ctx)");
  logits_.resize((all_logits ? n : 1) * n_vocab);
  for (int64_t i = 0; i < n; i += kMaxBatch) {
    const int64_t m = std::min(kMaxBatch, n - i);
    float* out = all_logits ? logits_.data() + i * n_vocab : i + m == n ? logits_.data() : nullptr;
    model_.forward(backend_, kv_, tokens.data() + i, m, n_past_, all_logits, out, hook_ ? &hook_ : nullptr);
    n_past_ += m;
  }
  return logits_;
}

void Session::set_n_past(int64_t n) {
  if (n < 0 || n >= kv_.n_ctx()) fail("session: position ", n, " outside the context of ", kv_.n_ctx());
  n_past_ = n;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace sluice
