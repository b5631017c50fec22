// api/engine_impl: what an Engine holds, shared by the files of the public API (src/api) and
// the server's public entry (src/server/serve_api.cpp, through EngineAccess); and the
// conversions of the public option structs into the internal ones.
#pragma once
#include <chrono>
#include <memory>

#include "backends/backend.h"
#include "memory/expert_store.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "sluice/sluice.h"

namespace sluice {

struct Engine::Impl {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  KvOptions kv;                      // the codecs of every context made over this engine
  int64_t n_ctx_option = 0;          // EngineOptions::n_ctx
  std::unique_ptr<Session> session;  // the sequence generate() and eval() run on (made on first use)
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<ModelDrafter> drafter;
  ExpertStats expert_mark;  // mark_expert_stats()
  std::chrono::steady_clock::time_point expert_mark_time;

  int64_t default_n_ctx() const;
  Session& sess();  // the session, made with default_n_ctx() when there is none yet
};

// The Engine's insides for the layers above the public API (src/server).
struct EngineAccess {
  static Engine::Impl& impl(Engine& e) { return *e.impl_; }
  static const Engine::Impl& impl(const Engine& e) { return *e.impl_; }
};

// A KV cache type name -> its DType; throws Error naming the supported types.
DType kv_cache_type(const std::string& name);
// KvOptions -> KvCacheOptions of n_ctx positions; throws Error naming an unknown type (K first).
KvCacheOptions kv_cache_options(const KvOptions& kv, int64_t n_ctx);
ModelInfo model_info_of(const Model& m);
// GenerateOptions -> GenerateParams (sampler, limits, stop strings); GenerationStats -> GenerateStats.
GenerateParams generate_params(const GenerateOptions& opt);
GenerateStats generate_stats(const GenerationStats& st);

}  // namespace sluice
