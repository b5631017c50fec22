// runtime/session: batch evaluation over the KV cache.
#include "runtime/session.h"

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
  logits_.resize((all_logits ? n : 1) * n_vocab);
  model_.forward(backend_, kv_, tokens.data(), n, n_past_, all_logits, logits_.data(), hook_ ? &hook_ : nullptr);
  n_past_ += n;
  return logits_;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace sluice
