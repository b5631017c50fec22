// sluice/perplexity.h: perplexity of a text, and KL divergence of one configuration against a
// saved base run (`sluice perplexity`; llama-perplexity's method and file format).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

struct PerplexityConfig {
  int64_t n_ctx = 512;         // chunk length
  int64_t n_chunks = -1;       // chunks to score (-1: all that fit)
  KvOptions kv{};              // cache codecs
  std::string kld_base_out{};  // write the base log-probs here
  std::string kld_in{};        // compare against this base file (its tokens and n_ctx are used)
};

struct PerplexitySummary {
  int64_t n_ctx = 0, n_chunks = 0, count = 0;  // count: scored tokens
  double ppl = 0, ppl_err = 0;                 // exp(mean NLL) and its standard error
  bool has_kld = false;
  std::string kld_report;  // llama-perplexity's final KLD block, when has_kld
  size_t kv_bytes_per_token = 0;
  std::string type_k, type_v;                 // the codecs the cache really used
  bool rotated_k = false, rotated_v = false;  // stored Hadamard-rotated
};

// Scores `tokens` (ignored with kld_in) on the Engine's model and backend; progress lines
// ("[1]12.3456,[2]...") go to `progress` when not null. Throws Error (bad cache type, files).
PerplexitySummary perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityConfig& cfg,
                             std::FILE* progress);

}  // namespace sluice
