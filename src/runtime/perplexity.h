// runtime/perplexity: perplexity and KL-divergence of a model configuration over a token
// stream, with llama.cpp's llama-perplexity method and its base-logits file format, so any two
// configurations (KV codecs, weight types, backends) can be compared — with each other, or with
// a llama-perplexity run.
//
// Method (tools/perplexity/perplexity.cpp): the tokens are cut into chunks of n_ctx; each chunk
// is evaluated from an empty cache as one batch, its first token replaced by BOS when the
// vocabulary adds BOS; the tokens of the second half are scored: logits at position j
// (n_ctx/2 <= j < n_ctx-1) against token j+1. PPL = exp(mean NLL), ± ppl·sqrt(var(NLL)/(n-1)).
//
// Base-logits file ("--kld-base" writes, "--kld" reads), as llama-perplexity --kl-divergence-base:
//   char[8] "_logits_"; int32 n_ctx; int32 n_vocab; int32 n_chunk; int32 tokens[n_chunk·n_ctx];
//   then per chunk, per scored position (n_ctx-1-n_ctx/2 of them), nv = 2·((n_vocab+1)/2)+4
//   uint16: the first four hold two floats (scale, min_log_prob), then n_vocab uint16 values
//   q with log p = scale·q + min_log_prob (the range is clamped to 16 nats below the max).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace sluice {

struct PerplexityOptions {
  int64_t n_ctx = 512;       // chunk length
  int64_t n_chunks = -1;     // chunks to score (-1: all that fit)
  KvCacheOptions kv;         // cache codecs (n_ctx is set from the chunk length)
  std::string kld_base_out;  // write the base log-probs here
  std::string kld_in;        // compare against this base file (its tokens and n_ctx are used)
};

// Running sums as llama-perplexity keeps them.
struct KldStats {
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  int64_t n_same_top = 0, count = 0;
  std::vector<float> kld_values, p_diff_values;  // per scored token
};

struct PerplexityResult {
  int64_t n_ctx = 0, n_chunks = 0, count = 0;  // count: scored tokens
  double ppl = 0, ppl_err = 0;                 // exp(mean NLL) and its standard error
  std::vector<double> chunk_ppl;               // running PPL after each chunk
  bool has_kld = false;
  KldStats kld;
  size_t kv_bytes_per_token = 0;
  DType type_k = DType::F16, type_v = DType::F16;  // the codecs the cache really used
  bool rotated_k = false, rotated_v = false;       // stored Hadamard-rotated (memory/kv_cache.h)
};

// Runs the method above. tokens: the tokenized text (ignored when opt.kld_in is set). Progress
// lines ("[1]12.3456,[2]...") go to `progress` when it is not null.
PerplexityResult perplexity_run(const Model& model, Backend& be, const std::vector<int32_t>& tokens,
                                const PerplexityOptions& opt, std::FILE* progress);

// llama-perplexity's final KLD block ("====== Perplexity statistics ======" ... "Same top p").
std::string format_kld_report(const KldStats& k);

}  // namespace sluice
