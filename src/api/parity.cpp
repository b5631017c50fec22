// api/parity: sluice/parity.h over runtime/parity.
#include "sluice/parity.h"

#include "api/engine_impl.h"
#include "backends/cpu/cpu_backend.h"
#include "runtime/parity.h"

namespace sluice {

ParitySummary parity(Engine& reference, const std::vector<int32_t>& tokens, const ParityConfig& cfg) {
  Engine::Impl& e = EngineAccess::impl(reference);
  auto bb = make_backend(cfg.backend_b, cfg.n_threads);
  KvCacheOptions kv;
  kv.n_ctx = static_cast<int64_t>(tokens.size()) + cfg.n_decode + 1;
  kv.type_k = kv.type_v = kv_cache_type(cfg.cache_type);
  const Backend* sides[2] = {e.backend.get(), bb.get()};
  for (int which = 0; which < 2; ++which)
    if (const char* q8 = cpu_backend_q8_level(*sides[which]))
      if (cfg.on_int8_backend) cfg.on_int8_backend(which, q8);
  const ParityReport rep = run_parity(*e.model, *e.backend, *e.model, *bb, tokens, cfg.n_decode, kv);
  ParitySummary s;
  for (const ParityEntry& x : rep.entries)
    s.rows.push_back(ParityRow{.name = x.name,
                               .layer = x.layer,
                               .n = x.n,
                               .nmse = x.nmse,
                               .max_abs = x.max_abs,
                               .tolerance = x.tolerance,
                               .ok = x.ok()});
  if (const ParityEntry* d = rep.first_divergence()) s.first_divergence = static_cast<int>(d - rep.entries.data());
  return s;
}

}  // namespace sluice
