// api/perplexity: sluice/perplexity.h over runtime/perplexity.
#include "sluice/perplexity.h"

#include "api/engine_impl.h"
#include "kvcodec/kvcodec.h"
#include "runtime/perplexity.h"

namespace sluice {

PerplexitySummary perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityConfig& cfg,
                             std::FILE* progress) {
  Engine::Impl& e = EngineAccess::impl(engine);
  PerplexityOptions o;
  o.n_ctx = cfg.n_ctx;
  o.n_chunks = cfg.n_chunks;
  o.kv = kv_cache_options(cfg.kv, o.kv.n_ctx);  // n_ctx is the chunk length's (perplexity_run sets it)
  o.kld_base_out = cfg.kld_base_out;
  o.kld_in = cfg.kld_in;
  const PerplexityResult r = perplexity_run(*e.model, *e.backend, tokens, o, progress);
  PerplexitySummary s;
  s.n_ctx = r.n_ctx;
  s.n_chunks = r.n_chunks;
  s.count = r.count;
  s.ppl = r.ppl;
  s.ppl_err = r.ppl_err;
  s.has_kld = r.has_kld;
  if (r.has_kld) s.kld_report = format_kld_report(r.kld);
  s.kv_bytes_per_token = r.kv_bytes_per_token;
  s.type_k = std::string(kv_type_name(r.type_k));
  s.type_v = std::string(kv_type_name(r.type_v));
  s.rotated_k = r.rotated_k;
  s.rotated_v = r.rotated_v;
  return s;
}

}  // namespace sluice
